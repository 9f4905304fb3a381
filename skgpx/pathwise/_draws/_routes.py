"""The four routes of ``PathwiseGPSampler.sample_y``: which one draws at given rows, and
drawing by it.

* ``"pathwise"``: a random-feature prior draw updated by Matheron's rule
  (:func:`~skgpx.pathwise._draws._posterior.draw_functions`), linear in the query rows;
* ``"weight_space"``: Bayesian linear regression on the random features (the baseline);
* ``"exact_joint"``: the exact joint prior over the training (or inducing) and query rows,
  updated by Matheron's rule (:func:`~skgpx.pathwise._draws._posterior.draw_exact`);
* ``"exact_at_queries"``: for kernels without a random-feature map, the posterior mean plus
  the Cholesky factor of the posterior covariance at the query rows times standard normals
  (:func:`~skgpx.pathwise._draws._posterior.draw_at_queries`), as scikit-learn draws.
"""

from ...kernels import ObjectRows
from ._posterior import draw_at_queries, draw_exact, draw_functions
from ._spectra import has_random_features


def choose_route(mode, post, Xq, *, prior, method, likelihood, exact_prior_max):
    """The route at the validated query rows ``Xq`` of a fit (``mode``, its posterior
    ``post``) with the estimator's ``prior``, ``method``, ``likelihood`` and
    ``exact_prior_max``; refuses the options that cannot draw at all."""
    if not mode.exact_draws and prior == "exact":
        raise ValueError(f"prior='exact' draws the exact Gaussian posterior; the fit of "
                         f"likelihood={likelihood!r} draws by prior='rff'.")
    structured = isinstance(Xq, ObjectRows)
    features = not structured and has_random_features(post.signal_kernel)
    if method == "weight_space":
        if not features:  # the baseline is defined by its features: no exact stand-in
            raise NotImplementedError(
                f"method='weight_space' draws from random features, which the kernel "
                f"{post.signal_kernel} has no expansion into; use method='pathwise', "
                "whose sample_y draws exactly at the query rows for such kernels.")
        return "weight_space"
    n_train = post.centers.shape[0] if post.fitted else 0
    if mode.exact_draws and (
            prior == "exact" or (prior == "auto" and n_train + Xq.shape[0] <= exact_prior_max)):
        return "exact_joint"
    return "pathwise" if features else "exact_at_queries"


def draw_by_route(route, mode, post, Xq, n_samples, generator, *, jitter, batch_size,
                  draw_options):
    """Latent draws (n*, S, T) at ``Xq`` by ``route``, from the CPU ``generator``."""
    if route == "exact_joint":
        return draw_exact(post, Xq, n_samples, generator, jitter)
    if route == "exact_at_queries":
        mean, _, cov = mode.predict(Xq, noise=0.0, batch_size=batch_size, want_cov=True,
                                    observed=False)
        prior_variance = mode.prior_variance(Xq, noise=0.0)
        return draw_at_queries(post, mean, cov, prior_variance, n_samples, generator, jitter)
    return draw_functions(post, n_samples, generator, **draw_options).values(Xq)


__all__ = ["choose_route", "draw_by_route"]
