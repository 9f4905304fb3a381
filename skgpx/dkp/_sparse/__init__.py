"""The inducing-point mode of the deep kernel process: its model, the row pass, the
solvers (Riccati sweeps with Anderson acceleration, L-BFGS) and prediction."""
