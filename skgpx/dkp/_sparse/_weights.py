"""Weight steps of the sparse Newton-like solver (``doc/design_notes.rst``,
"Inducing-point deep kernel process", what does not stay a CARE).

* The output weight ``w_out`` and the noise ``sigma^2`` enter the collapsed bound only
  through its row sums, and scale them exactly (``a_t = L_u^-1 k_t / sigma`` is
  proportional to ``sqrt(w_out) / sigma`` because ``delta`` is proportional to
  ``w_out``).  With the unscaled sums ``W^ = V diag(lam) V^T``, ``p = V^T w^``, ``yy^``,
  ``tr^`` the bound is a closed form in ``(w, s)``::

      F(w, s) = -PT/2 log 2pi - T/2 sum_i log(1 + w lam_i / s) - PT/2 log s - yy^/(2s)
                + 1/2 sum_i (w / s^2) |p_i|^2 / (1 + w lam_i / s) - T/2 (w/s)(tr^ - sum_i lam_i)

  and :func:`output_newton` maximises it by Newton steps in ``(log w, log s)`` without a
  pass over the rows.
* Hidden weights: a Fisher step in log weights (App. K's metric on the prior block) with
  the gradient of prior and data (the local App. K step is no longer a block maximiser
  once the weights reach the rows: the design note above, same bullet).
"""

import math

import torch

__all__ = ["bound_in_output_weights", "hidden_weight_step", "output_newton"]

_MAX_LOG_STEP = 2.0


def _unscaled(statistics, weight, noise):
    """``(lam, |p_i|^2 summed over targets, yy^, tr^)`` of the sums at ``(weight, noise)``."""
    scale = float(weight) / float(noise)
    gram = statistics.W * (1.0 / scale)
    gram = 0.5 * (gram + gram.mT)
    cross = statistics.w * (float(noise) / math.sqrt(float(weight)))
    eigenvalues, vectors = torch.linalg.eigh(gram)
    projected = vectors.mT @ cross
    return (eigenvalues, (projected * projected).sum(dim=1), statistics.yy * float(noise),
            statistics.trace / scale)


def bound_in_output_weights(parts, n_rows, n_targets, log_weight, log_noise):
    """The collapsed bound ``F(w, s)`` (module docstring) at ``(log w, log s)``; 0-d."""
    lam, power, yy, trace = parts
    w, s = torch.exp(log_weight), torch.exp(log_noise)
    ratio = 1.0 + w * lam / s
    return (-0.5 * n_rows * n_targets * math.log(2 * math.pi)
            - 0.5 * n_targets * torch.log(ratio).sum() - 0.5 * n_rows * n_targets * log_noise
            - 0.5 * yy / s + 0.5 * (w / s ** 2 * power / ratio).sum()
            - 0.5 * n_targets * (w / s) * (trace - lam.sum()))


def output_newton(statistics, weight, noise, n_targets, *, learn_weight, learn_noise,
                  noise_floor, max_iter=50):
    """Maximise the collapsed bound in ``(w_out, sigma^2)`` from the row sums.

    Newton steps in log space with the exact Hessian of the closed form (a gradient step
    where it is not negative definite), each halved until the bound does not decrease;
    ``sigma^2`` stays at or above ``noise_floor``.  Returns ``(w_out, sigma^2)`` as 0-d
    tensors (unchanged where not learned).
    """
    if not (learn_weight or learn_noise):
        return weight, noise
    parts = _unscaled(statistics, weight, noise)
    n_rows = statistics.n
    mask = torch.tensor([learn_weight, learn_noise], device=weight.device)
    floor = math.log(noise_floor)
    x = torch.stack([torch.log(weight), torch.log(noise)]).detach()

    def value(point):
        return bound_in_output_weights(parts, n_rows, n_targets, point[0], point[1])

    current = float(value(x))
    for _ in range(max_iter):
        grad = torch.autograd.functional.jacobian(value, x)[mask]
        hess = torch.autograd.functional.hessian(value, x)[mask][:, mask]
        factor, info = torch.linalg.cholesky_ex(-hess)
        if int(info) == 0:
            step = torch.cholesky_solve(grad[:, None], factor)[:, 0]
        else:  # not concave here: a gradient step of unit length in log space
            step = grad / grad.norm().clamp(min=1e-300)
        step = torch.clamp(step, -_MAX_LOG_STEP, _MAX_LOG_STEP)
        scale, moved = 1.0, False
        for _ in range(40):
            trial = x.clone()
            trial[mask] = trial[mask] + scale * step
            trial[1] = torch.clamp(trial[1], min=floor)
            trial_value = float(value(trial))
            if math.isfinite(trial_value) and trial_value >= current:
                moved = bool((trial - x).abs().max() > 0)
                x, gain, current = trial, trial_value - current, trial_value
                break
            scale *= 0.5
        else:
            break
        if not moved or gain <= 1e-15 * (1.0 + abs(current)):
            break
    return (torch.exp(x[0]) if learn_weight else weight,
            torch.exp(x[1]) if learn_noise else noise)


def hidden_weight_step(config, weights, gram, scale_matrix, gradient, nu_next, shrink):
    """A Fisher step in the log weights ``[w, v]`` of a hidden node.

    ``gradient`` is the total gradient (prior and data) in the weights; the metric is
    App. K's Fisher information of the prior block ``N(G_next | 0, S)`` in log weights,
    ``nu/2 w_a w_b Tr(S^-1 C_a S^-1 C_b)`` with ``C = [K(G), G]``.  The step is clipped to
    ``+-2`` per coordinate and multiplied by ``shrink`` (the caller's trust factor).
    """
    from .._grams import gram_kernel_derivatives
    directions = [gram_kernel_derivatives(config.kernel, gram, derivatives=False)]
    if config.skip:
        directions.append(gram)
    inverse = torch.cholesky_inverse(torch.linalg.cholesky(scale_matrix))
    products = [inverse @ c for c in directions]
    size = len(products)
    fisher = torch.empty((size, size), dtype=gram.dtype, device=gram.device)
    for a in range(size):
        for b in range(a, size):
            fisher[a, b] = fisher[b, a] = (products[a] * products[b].mT).sum()
    fisher = 0.5 * nu_next * weights[:, None] * fisher * weights[None, :]
    fisher = fisher + 1e-12 * fisher.diagonal().abs().max() * torch.eye(
        size, dtype=gram.dtype, device=gram.device)
    grad_log = weights * gradient
    step = torch.linalg.pinv(fisher, hermitian=True) @ grad_log
    step = torch.clamp(step, -_MAX_LOG_STEP, _MAX_LOG_STEP) * shrink
    return weights * torch.exp(step)


def transport(config, state, grams, weights, omega=None):
    """The hidden Grams carried to new hidden ``weights`` at fixed whitened coordinates.

    ``G_l = C_{l-1} L_l L_l^T C_{l-1}^T`` with ``C_{l-1} = chol(S_{l-1})`` (the L-BFGS
    parametrisation of :mod:`skgpx.dkp._sparse._lbfgs`): when the weights of ``S_{l-1}``
    change, ``G_l`` follows its scale instead of staying put, as the prior (strong for
    large ``nu``) asks.
    ``state`` supplies ``Z``, ``Omega``, the jitter and the weights ``grams`` were built
    with; ``omega`` (default: ``state.omega``) is the new input scale.  Differentiable in
    ``weights`` and ``omega``.
    """
    from ._model import hidden_node, input_gram
    old_lower = input_gram(state.inducing, state.omega)
    new_lower = old_lower if omega is None else input_gram(state.inducing, omega)
    out = []
    for gram, old, new in zip(grams, state.weights[:-1], weights):
        old_factor = torch.linalg.cholesky(hidden_node(config, old, old_lower, state.jitter))
        new_factor = torch.linalg.cholesky(hidden_node(config, new, new_lower, state.jitter))
        carry = torch.linalg.solve_triangular(old_factor, new_factor, upper=False,
                                              left=False)  # C_new C_old^-1
        moved = carry @ gram @ carry.mT
        old_lower, new_lower = gram, 0.5 * (moved + moved.mT)
        out.append(new_lower)
    return out


def transported_gradient(config, state, fit, volume):
    """Gradient of the objective in the hidden log weights along :func:`transport`, from
    the data gradients ``fit``, ``volume`` (order of ``state.tensors()``) and the prior."""
    from ._model import prior_terms
    n_hidden = len(state.hidden_grams)
    offset = 1 + n_hidden
    with torch.enable_grad():
        gram_leaves = [g.detach().clone().requires_grad_() for g in state.hidden_grams]
        weight_leaves = [w.detach().clone().requires_grad_() for w in state.weights[:-1]]
        prior = prior_terms(config, state.copy(hidden_grams=gram_leaves,
                                               weights=[*weight_leaves, state.weights[-1]]))
        pulled = torch.autograd.grad(prior, gram_leaves + weight_leaves, allow_unused=True)
        logs = [torch.log(w).detach().requires_grad_() for w in state.weights[:-1]]
        weights = [torch.exp(u) for u in logs]
        moved = transport(config, state, state.hidden_grams, weights)
        total = 0.0
        for k, gram in enumerate(moved):
            seed = fit[1 + k] + volume[1 + k]
            if pulled[k] is not None:
                seed = seed + pulled[k]
            total = total + (seed * gram).sum()
        for j, w in enumerate(weights):
            seed = fit[offset + j] + volume[offset + j]
            if pulled[n_hidden + j] is not None:
                seed = seed + pulled[n_hidden + j]
            total = total + (seed * w).sum()
        return [g.detach() for g in torch.autograd.grad(total, logs)]


def transported_omega_gradient(config, state, fit, volume):
    """Gradient in ``Omega`` along :func:`transport` (the hidden Grams carried), without
    ``Omega``'s own prior terms: the data gradient that the whitened step of ``Omega``
    sees (the hidden priors are invariant along the transport)."""
    from dataclasses import replace
    from ._model import prior_terms
    n_hidden = len(state.hidden_grams)
    with torch.enable_grad():
        gram_leaves = [g.detach().clone().requires_grad_() for g in state.hidden_grams]
        omega_leaf = state.omega.detach().clone().requires_grad_()
        coupling = prior_terms(replace(config, input_scale=False),
                               state.copy(hidden_grams=gram_leaves, omega=omega_leaf))
        pulled = torch.autograd.grad(coupling, gram_leaves + [omega_leaf], allow_unused=True)
        omega = state.omega.detach().clone().requires_grad_()
        moved = transport(config, state, state.hidden_grams, state.weights[:-1], omega=omega)
        seed = fit[0] + volume[0]
        if pulled[n_hidden] is not None:
            seed = seed + pulled[n_hidden]
        total = (seed * omega).sum()
        for k, gram in enumerate(moved):
            seed = fit[1 + k] + volume[1 + k]
            if pulled[k] is not None:
                seed = seed + pulled[k]
            total = total + (seed * gram).sum()
        gradient = torch.autograd.grad(total, omega)[0].detach()
    return 0.5 * (gradient + gradient.mT)
