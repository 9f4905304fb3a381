"""Collapsed sparse GP regression (SGPR, Titsias 2009): the mode, the bound's gradient, the
optimal q(u) and the fit."""
