"""The KEP-SVGP attention layer: KL, KSVD, posterior moments, shapes and
degenerate limits, at the layer level."""

import numpy as np
import pytest
import torch
from torch.distributions import MultivariateNormal, kl_divergence

from skgpx.linalg import positive_tril_raw
from skgpx.kepsvgp._attention import (
    KEPAttention, cosine_features, ksvd_objective, posterior_moments, svgp_kl,
)

DT = torch.float64


def _random_posterior(h, s, seed, diagonal=False):
    g = torch.Generator().manual_seed(seed)
    lam = 0.3 + 2.0 * torch.rand(h, s, generator=g, dtype=DT)
    mean = torch.randn(h, s, s, generator=g, dtype=DT)
    raw = torch.randn(h, s, s, s, generator=g, dtype=DT)
    tril = raw.tril(-1) + torch.diag_embed(0.2 + raw.diagonal(dim1=-2, dim2=-1).abs())
    if diagonal:
        tril = torch.diag_embed(tril.diagonal(dim1=-2, dim2=-1))
    return lam, mean, tril


@pytest.mark.parametrize("diagonal", [False, True])
def test_kl_matches_torch_distributions(diagonal):
    h, s = 3, 4
    lam, mean, tril = _random_posterior(h, s, seed=1, diagonal=diagonal)
    expected = sum(
        kl_divergence(MultivariateNormal(mean[i, d], scale_tril=tril[i, d]),
                      MultivariateNormal(torch.zeros(s, dtype=DT),
                                         covariance_matrix=torch.diag(lam[i] ** 2)))
        for i in range(h) for d in range(s)
    )
    assert float(svgp_kl(mean, tril, lam)) == pytest.approx(float(expected), rel=1e-10)
    # whitened: m~ = Lambda^-1 m, L~ = Lambda^-1 L against N(0, I) gives the same KL
    whitened = svgp_kl(mean / lam.unsqueeze(-2), tril / lam[:, None, :, None])
    assert float(whitened) == pytest.approx(float(expected), rel=1e-10)
    # zero at m = 0, S = Lambda^2
    zero = svgp_kl(torch.zeros_like(mean), torch.diag_embed(lam).unsqueeze(1).expand_as(tril), lam)
    assert abs(float(zero)) < 1e-12


def _exact_svd_setting(s, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(12, 5, generator=g, dtype=DT)
    phi_q = cosine_features(X @ torch.randn(5, 5, generator=g, dtype=DT))
    phi_k = cosine_features(X @ torch.randn(5, 5, generator=g, dtype=DT))
    U, sv, Vh = torch.linalg.svd(phi_q @ phi_k.T)
    H_e, H_r, lam = U[:, :s], Vh.T[:, :s], sv[:s]
    W_e, W_r = phi_k.T @ H_r, phi_q.T @ H_e
    return phi_q, phi_k, H_e, H_r, lam, W_e, W_r


@pytest.mark.parametrize("s", [2, 3, 5])
def test_ksvd_objective_vanishes_at_an_exact_svd(s):
    phi_q, phi_k, H_e, H_r, lam, W_e, W_r = _exact_svd_setting(s)
    E, R = phi_q @ W_e, phi_k @ W_r
    assert torch.allclose(E, H_e * lam, atol=1e-10) and torch.allclose(R, H_r * lam, atol=1e-10)
    assert abs(float(ksvd_objective(E, R, W_e, W_r, lam))) < 1e-10
    W_bad = W_e + 0.1 * torch.randn(W_e.shape, generator=torch.Generator().manual_seed(1),
                                    dtype=DT)
    assert float(ksvd_objective(phi_q @ W_bad, R, W_bad, W_r, lam)) ** 2 > 1e-5


def test_posterior_moments_and_sampler():
    s = 3
    phi_q, _, H_e, _, lam, W_e, _ = _exact_svd_setting(s)
    E = phi_q @ W_e
    _, mean, tril = _random_posterior(1, s, seed=2)
    mean, tril, lam1 = mean[0], tril[0], lam.unsqueeze(0)[0]
    column_mean, cov = posterior_moments(E, lam1, mean, tril)
    S = tril @ tril.transpose(-1, -2)
    for d in range(s):
        assert torch.allclose(column_mean[d], E @ (mean[d] / lam1), atol=1e-12)
        assert torch.allclose(cov[d], H_e @ S[d] @ H_e.T, atol=1e-12)
        assert int(torch.linalg.matrix_rank(cov[d])) == s
    # reparameterised draws u = m + L eps reproduce the moments of E Lambda^-1 u
    n = 200_000
    eps = torch.randn(n, s, s, generator=torch.Generator().manual_seed(3), dtype=DT)
    u = mean + (tril @ eps.unsqueeze(-1)).squeeze(-1)  # (n, s_d, s)
    draws = (u / lam1) @ E.T  # (n, s_d, N)
    sd = cov.diagonal(dim1=-2, dim2=-1).sqrt()
    assert float(((draws.mean(0) - column_mean).abs() / sd).max()) < 5 / np.sqrt(n)
    centred = draws - draws.mean(0)
    empirical = torch.einsum("nda,ndb->dab", centred, centred) / (n - 1)
    assert float((empirical - cov).norm() / cov.norm()) < 1e-2


def _layer(merge, projection, whiten, concat_rank=None, seed=0, rank_multiplier=1):
    torch.manual_seed(0)  # nn.Linear initialisation (test-only)
    layer = KEPAttention(12, 3, 4, 7, projection=projection, merge=merge, whiten=whiten,
                         concat_rank=concat_rank, rank_multiplier=rank_multiplier,
                         generator=torch.Generator().manual_seed(seed))
    return layer.double()


def _reference_forward(layer, Z, eps):
    """The layer written per head, as the paper's equations read: cosine features,
    ``E = phi_q W_e``, ``R = phi_k W_r``, ``u = m + L eps``, the merge, ``W_out``, the token
    mixing of the concatenation, ``J`` of Eq. 11 and the KL of Eq. 21."""
    B, N, C = Z.shape
    h, s = layer.n_heads, layer.rank
    qk = layer.query_key(Z).view(B, N, 2, h, C // h).permute(2, 0, 3, 1, 4)
    phi_q, phi_k = cosine_features(qk[0]), cosine_features(qk[1])  # (B, h, N, d_h)
    if layer.projection == "data":
        index = torch.arange(N) if layer.token_index is None else layer.token_index
        Z_sub = Z[:, index].view(B, -1, h, C // h).transpose(1, 2)  # (B, h, N', d_h)
        W_e, W_r = Z_sub.transpose(-1, -2) @ layer.theta_e, Z_sub.transpose(-1, -2) @ layer.theta_r
    else:
        W_e, W_r = layer.weight_e, layer.weight_r
    E, R = phi_q @ W_e, phi_k @ W_r  # (B, h, N, s)
    lam = layer.log_singular_values.exp()
    tril = layer.variational_tril()
    U = layer.variational_mean + (tril @ eps.unsqueeze(-1)).squeeze(-1)  # (B, h, s_d, s)
    if not layer.whiten:
        U = U / lam.unsqueeze(-2)
    if layer.merge == "add":
        out = ((E + R) @ U.transpose(-1, -2)) @ layer.output.weight.T + layer.output.bias
    else:
        out = (torch.cat([E, R], dim=-2) @ U.transpose(-1, -2)) @ layer.output.weight.T
        out = out + layer.output.bias  # (B, h, 2N, d_h)
        if layer.concat_rank is None:
            mix, mix_bias = layer.token_mix.weight, layer.token_mix.bias
        else:
            mix, mix_bias = layer.token_mix_a @ layer.token_mix_b.T, layer.token_mix_bias
        out = mix @ out + mix_bias[:, None]  # (B, h, N, d_h)
    out = out.transpose(1, 2).reshape(B, N, C)
    J = (0.5 * (E.pow(2) / lam.unsqueeze(-2)).sum((-2, -1))
         + 0.5 * (R.pow(2) / lam.unsqueeze(-2)).sum((-2, -1))
         - torch.einsum("...ds,...ds->...", W_e, W_r))  # (B, h)
    kl = 0.0
    for head in range(h):
        prior = MultivariateNormal(torch.zeros(s, dtype=DT), torch.diag(lam[head] ** 2))
        for d in range(s):
            mean_d, scale = layer.variational_mean[head, d], tril[head, d]
            if layer.whiten:  # u = Lambda u~: N(Lambda m~, Lambda S~ Lambda) against N(0, Lambda^2)
                mean_d, scale = lam[head] * mean_d, lam[head, :, None] * scale
            kl = kl + kl_divergence(MultivariateNormal(mean_d, scale_tril=scale), prior)
    return out, kl, (J / N).pow(2).mean()


@pytest.mark.parametrize("merge,concat_rank", [("add", None), ("concat", None), ("concat", 2)])
@pytest.mark.parametrize("projection,whiten,rank_multiplier",
                         [("data", True, 1), ("data", False, 10), ("static", True, 1)])
def test_layer_matches_the_equations_and_autograd(merge, concat_rank, projection, whiten,
                                                  rank_multiplier):
    """Output, KL and KSVD against the per-head reference; gradients against central
    differences (data projections with sub-sampled and with all tokens)."""
    layer = _layer(merge, projection, whiten, concat_rank, rank_multiplier=rank_multiplier)
    if projection == "data":
        assert (layer.token_index is None) == (rank_multiplier == 10)
    Z = torch.randn(3, 7, 12, generator=torch.Generator().manual_seed(5), dtype=DT)
    eps = torch.randn(3, 3, 4, 4, generator=torch.Generator().manual_seed(6), dtype=DT)
    out, kl, ksvd = layer(Z, eps)
    assert out.shape == (3, 7, 12) and kl.shape == () and ksvd.shape == ()
    assert torch.isfinite(kl) and torch.isfinite(ksvd) and float(kl.detach()) >= 0
    reference = _reference_forward(layer, Z, eps)
    for ours, expected in zip((out, kl, ksvd), reference):
        torch.testing.assert_close(ours, expected, rtol=1e-12, atol=1e-13)

    out, kl, ksvd = layer(Z, eps)
    total = out.pow(2).sum() + kl + ksvd
    grads = torch.autograd.grad(total, list(layer.parameters()))
    # finite differences on a few coordinates of every parameter (autograd vs central diffs)
    for (name, p), g in zip(layer.named_parameters(), grads):
        flat = p.data.view(-1)
        for index in range(0, flat.numel(), max(1, flat.numel() // 3)):
            old = float(flat[index])
            flat[index] = old + 1e-6
            plus = layer(Z, eps)
            flat[index] = old - 1e-6
            minus = layer(Z, eps)
            flat[index] = old
            f_plus = plus[0].pow(2).sum() + plus[1] + plus[2]
            f_minus = minus[0].pow(2).sum() + minus[1] + minus[2]
            numeric = float((f_plus - f_minus).detach()) / 2e-6
            assert numeric == pytest.approx(float(g.reshape(-1)[index]), rel=1e-5, abs=1e-7), name


@pytest.mark.parametrize("merge", ["add", "concat"])
def test_whitened_and_unwhitened_layers_agree(merge):
    whitened = _layer(merge, "data", True)
    plain = _layer(merge, "data", False)
    # map the whitened posterior exactly (in float64): m = Lambda m~, L = Lambda L~
    state = dict(whitened.state_dict())
    lam = whitened.singular_values.detach()
    tril = lam[:, None, :, None] * whitened.variational_tril().detach()
    state["variational_mean"] = whitened.variational_mean.detach() * lam.unsqueeze(-2)
    state["raw_variational_tril"] = positive_tril_raw(tril)
    plain.load_state_dict(state)
    # and the initialisation already maps them, up to float32 rounding
    torch.testing.assert_close(_layer(merge, "data", False).variational_tril(),
                               plain.variational_tril(), rtol=1e-6, atol=1e-8)
    Z = torch.randn(2, 7, 12, generator=torch.Generator().manual_seed(7), dtype=DT)
    eps = torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(8), dtype=DT)
    with torch.no_grad():
        out_w, kl_w, ksvd_w = whitened(Z, eps)
        out_p, kl_p, ksvd_p = plain(Z, eps)
    torch.testing.assert_close(out_w, out_p, rtol=1e-10, atol=1e-12)
    assert float(kl_w) == pytest.approx(float(kl_p), rel=1e-10)
    assert float(ksvd_w) == pytest.approx(float(ksvd_p), rel=1e-12)


def test_vanishing_posterior_spread_makes_draws_equal_the_mean():
    layer = _layer("add", "data", True)
    with torch.no_grad():
        raw = layer.raw_variational_tril
        raw.copy_(torch.diag_embed(torch.full(raw.shape[:-1], -60.0, dtype=DT)))
    Z = torch.randn(2, 7, 12, generator=torch.Generator().manual_seed(9), dtype=DT)
    outputs = [layer(Z, torch.randn(3, 4, 4, generator=torch.Generator().manual_seed(t),
                                    dtype=DT))[0] for t in range(4)]
    for other in outputs[1:]:
        torch.testing.assert_close(other, outputs[0], rtol=0, atol=1e-7)


# --------------------------------------------------------- reference parameterisation
def test_reference_parameterisation_defect_and_our_full_rank_factors():
    """Documents where the reference code's S_uu factor and KL log-det depart from the paper,
    in plain numpy (doc/design_notes.rst, "KEP-SVGP attention").

    The reference stores one (s, s, s) array per head, makes it lower triangular on its last two
    axes (positive diagonal from ``exp(log_ssqrt)``), but samples output ``d`` with the slice
    on the *last* axis, ``F_d[a, b] = T[a, b, d]``. Entries with ``b < d`` are never filled, so
    ``rank(F_d) = s - d``, while its KL log-determinant, ``sum(log_ssqrt)``, is the log-diagonal
    sum of the *first*-axis slices ``T[a]``, whose determinants the sampler never uses.
    """
    s = 5
    rng = np.random.default_rng(0)
    strict = np.tril(rng.standard_normal((s, s, s)), k=-1)
    log_ssqrt = rng.standard_normal((s, s))
    T = strict + np.einsum("ab,bc->abc", np.exp(log_ssqrt), np.eye(s))
    sampled = [T[:, :, d] for d in range(s)]
    assert [np.linalg.matrix_rank(F) for F in sampled] == [5, 4, 3, 2, 1]
    first_axis_log_diag = sum(np.log(np.diag(T[a])).sum() for a in range(s))
    assert log_ssqrt.sum() == pytest.approx(first_axis_log_diag, rel=1e-12)
    # the covariances the reference samples from are singular for d >= 1, so no finite
    # log-determinant could match them
    assert all(np.linalg.det(F @ F.T) == pytest.approx(0.0, abs=1e-10) for F in sampled[1:])
    # ours: one proper lower-triangular factor per (head, d), full rank s for every d
    tril = _layer("add", "data", True).variational_tril().detach().numpy()
    assert tril.shape == (3, 4, 4, 4)
    assert all(np.linalg.matrix_rank(F) == 4 for F in tril.reshape(-1, 4, 4))
    np.testing.assert_array_equal(np.triu(tril, k=1), 0.0)
