"""The sparse variational engine (SVGP, Hensman et al. 2013, 2015): the bound, q and its
natural step, the K_zz pullback, the inner loop, the L-BFGS-B route, and the two modes
that stand on it (classification, non-Gaussian regression)."""
