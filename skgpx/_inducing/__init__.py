"""Inducing-point maths shared by the families: training rows and their chunking, initial
inducing inputs, Titsias' collapsed bound, closed-form cross-covariance blocks."""
