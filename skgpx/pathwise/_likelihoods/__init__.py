"""Likelihoods of the variational engine: quadrature, the classification likelihoods
(links, Bernoulli, softmax) and the regression ones (Student-t, heteroscedastic)."""
