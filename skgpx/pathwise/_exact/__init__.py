"""The exact GP: its algebra, the choice between Cholesky and CG and what each costs, and
its hyperparameter fit."""
