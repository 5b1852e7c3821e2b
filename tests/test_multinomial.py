"""Potentials of dimension d_i = K - 1 > 1: multinomial logistic regression (pymc_sgs.multinomial).

Exact answers: the 2-D conditional of one z_i normalised on a grid, and the theta-marginal of
the split model for one covariate and K = 3 classes, computed on a grid with a product
Gauss–Hermite rule for every row's Gaussian convolution.
"""

from __future__ import annotations

import arviz as az
import numpy as np
import pytest
import scipy.sparse
from scipy import stats

from pymc_sgs.multinomial import (
    CategoricalSplitKernel,
    MultinomialLogitKernel,
    _paper_gamma_rows,
    batch_sample_strongly_log_concave,
    max_weight_classes,
    smoothed_log_likelihood_rows,
    softmax_potential,
)
from pymc_sgs.shards import _paper_gamma


def test_softmax_potential_gradient_matches_finite_differences():
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(5, 3))
    y = np.array([0, 1, 2, 3, 1])
    U, G = softmax_potential(Z, y)
    eps = 1e-6
    for j in range(3):
        dZ = np.zeros_like(Z)
        dZ[:, j] = eps
        fd = (softmax_potential(Z + dZ, y)[0] - softmax_potential(Z - dZ, y)[0]) / (2 * eps)
        np.testing.assert_allclose(G[:, j], fd, atol=1e-6)


def _grid_pvalue(x, logp_fn, centre, half=5.0, n=301):
    ax = [np.linspace(c - half, c + half, n) for c in centre]
    G1, G2 = np.meshgrid(*ax, indexing="ij")
    pts = np.stack([G1.ravel(), G2.ravel()], 1)
    lp = logp_fn(pts)
    p = np.exp(lp - lp.max())
    p /= p.sum()
    e1 = np.quantile(x[:, 0], [0.2, 0.4, 0.6, 0.8])
    e2 = np.quantile(x[:, 1], [0.2, 0.4, 0.6, 0.8])

    def cells(v):
        return np.searchsorted(e1, v[:, 0]) * 5 + np.searchsorted(e2, v[:, 1])

    expected = np.bincount(cells(pts), weights=p, minlength=25) * len(x)
    observed = np.bincount(cells(x), minlength=25)
    return stats.chi2(24).sf(np.sum((observed - expected) ** 2 / expected))


def test_batch_rejection_sampler_matches_2d_conditional_by_integration():
    rho = 1.0
    y = np.array([2, 0])
    centre = np.array([[0.5, -0.3], [1.0, 1.0]])
    n_draws = 4000
    rng = np.random.default_rng(1)
    # every row of the batch is an independent draw: repeat the two rows n_draws times
    Y = np.tile(y, n_draws)
    C = np.tile(centre, (n_draws, 1))

    def f(Z, idx):
        return softmax_potential(Z, Y[idx])[0] + 0.5 * np.sum((Z - C[idx]) ** 2, 1) / rho**2

    def g(Z, idx):
        return softmax_potential(Z, Y[idx])[1] + (Z - C[idx]) / rho**2

    draws, props = batch_sample_strongly_log_concave(f, g, 1 / rho**2, 1 / rho**2 + 0.5, C, rng)
    assert 1.0 <= props.mean() < (1 + 0.5 * rho**2) ** 1.0 + 0.05  # Lemma 31 bound, d = 2
    for r in range(2):
        x = draws[r::2]

        def logp(pts, r=r, rr=rho):
            yy = np.full(len(pts), y[r])
            return -(
                softmax_potential(pts, yy)[0] + 0.5 * np.sum((pts - centre[r]) ** 2, 1) / rr**2
            )

        assert _grid_pvalue(x, logp, centre[r]) > 1e-3
        # negative control: the conditional with a 25% larger rho
        assert _grid_pvalue(x, lambda pts: logp(pts, rr=1.25 * rho), centre[r]) < 1e-3


def _grid_targets(x, y, rho, prior_sd, h=0.1, half=6.5, n_nodes=12):
    ax = np.arange(-half, half + h / 2, h)
    B1, B2 = np.meshgrid(ax, ax, indexing="ij")
    pts = np.stack([B1.ravel(), B2.ravel()], 1)  # B = (b_1, b_2), eta_i = x_i * B
    t, w = np.polynomial.hermite_e.hermegauss(n_nodes)
    w = w / w.sum()
    T1, T2 = np.meshgrid(t, t, indexing="ij")
    nodes = rho * np.stack([T1.ravel(), T2.ravel()], 1)
    W = np.outer(w, w).ravel()
    log_prior = -0.5 * np.sum(pts**2, 1) / prior_sd**2
    log_pi, log_rho = log_prior.copy(), log_prior.copy()
    for xi, yi in zip(x, y):
        eta = xi * pts
        yy = np.full(len(pts), yi)
        log_pi -= softmax_potential(eta, yy)[0]
        Zn = (eta[:, None, :] + nodes[None]).reshape(-1, 2)
        Un = softmax_potential(Zn, np.full(len(Zn), yi))[0].reshape(len(pts), -1)
        log_rho += np.log(np.exp(-Un) @ W)
    out = {}
    for name, lp in (("pi", log_pi), ("pi_rho", log_rho)):
        p = np.exp(lp - lp.max())
        p /= p.sum()
        m = p @ pts
        out[name] = (m, np.sqrt(p @ pts**2 - m**2))
    return out


@pytest.mark.slow
def test_multinomial_kernel_matches_its_split_model():
    rng = np.random.default_rng(2)
    n, rho, prior_sd = 20, 2.0, 1.5
    x = rng.normal(size=n)
    logits = np.stack([np.zeros(n), 1.0 * x, -1.0 * x], 1)
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = np.array([rng.choice(3, p=pi) for pi in p])
    targets = _grid_targets(x, y, rho, prior_sd)
    k = MultinomialLogitKernel(x[:, None], y, 3, rho, prior_sd)
    B = np.zeros((1, 2))
    out, props = [], []
    for _ in range(6000):
        B, z, pr = k.sweep(B, rng)
        out.append(B.ravel())
        props.append(pr)
    draws = np.array(out)[200:]
    assert 1.0 <= np.mean(props) < 1 + 0.5 * rho**2  # Lemma 31: (M / m)^(d/2) with d = 2

    def agrees(target):
        mean, sd = target
        se_m = np.array([float(az.mcse(draws[None, :, j])) for j in range(2)])
        se_s = np.array([float(az.mcse(draws[None, :, j], method="sd")) for j in range(2)])
        return bool(
            np.all(np.abs(draws.mean(0) - mean) < 4 * se_m + 0.01)
            and np.all(np.abs(draws.std(0) - sd) < 4 * se_s + 0.01)
        )

    assert agrees(targets["pi_rho"]), (draws.mean(0), draws.std(0), targets)
    assert not agrees(targets["pi"])  # negative control: the unsmoothed posterior


def test_multinomial_kernel_argument_errors():
    X = np.ones((3, 1))
    with pytest.raises(ValueError, match="n_classes"):
        MultinomialLogitKernel(X, np.zeros(3), 1, 0.5)
    with pytest.raises(ValueError, match="integers in 0..2"):
        MultinomialLogitKernel(X, np.array([0, 1, 3]), 3, 0.5)
    with pytest.raises(ValueError, match="rho must be positive"):
        MultinomialLogitKernel(X, np.zeros(3), 3, -1.0)


# ------------------------------------------------------------------ CategoricalSplitKernel
def test_vectorised_gamma_matches_the_scalar_one():
    g2 = np.array([0.0, 1e-8, 0.3, 2.0, 50.0])
    for k, m in ((1, 4.0), (3, 0.5)):
        np.testing.assert_allclose(_paper_gamma_rows(g2, k, m), [_paper_gamma(v, k, m) for v in g2])


def _one_covariate_kernel(x, y, rho, prior_sd, alpha):
    """CategoricalSplitKernel of eta_i = x_i * (0, b_1, b_2): A_i = I_2 * x_i."""
    n = len(x)
    A = scipy.sparse.kron(scipy.sparse.csr_matrix(x[:, None]), np.eye(2)).tocsr()
    assert A.shape == (2 * n, 2)
    return CategoricalSplitKernel(
        A, 0.0, y, 3, np.zeros(2), np.eye(2) / prior_sd**2, rho, alpha=alpha
    )


def test_over_relaxed_z_move_keeps_the_2d_conditional():
    # rows of a batch are independent: start every copy at an exact draw, move it three
    # times, and the copies must still follow z | theta (grid-normalised, as above)
    rho, n_draws = 1.0, 4000
    y = np.tile(np.array([2, 0]), n_draws)
    x = np.tile(np.array([1.0, -2.0]), n_draws)
    k = _one_covariate_kernel(x, y, rho, 1.0, alpha=-0.9)
    theta = np.array([0.5, -0.3])
    rng = np.random.default_rng(3)
    z = k.init(theta, rng)
    accs = []
    for _ in range(3):
        z, acc = k.move_z(theta, z, rng)
        accs.append(acc)
    assert np.mean(accs) > 0.8
    centre = k.centres(theta)[:2]
    for r in range(2):

        def logp(pts, r=r, rr=rho):
            yy = np.full(len(pts), y[r])
            return -(
                softmax_potential(pts, yy)[0] + 0.5 * np.sum((pts - centre[r]) ** 2, 1) / rr**2
            )

        assert _grid_pvalue(z[r::2], logp, centre[r]) > 1e-3
        assert _grid_pvalue(z[r::2], lambda pts: logp(pts, rr=1.25 * rho), centre[r]) < 1e-3


@pytest.mark.parametrize("K", [3, 5])
def test_smoothed_likelihood_matches_monte_carlo(K):
    rng = np.random.default_rng(K)
    n, rho, draws = 4, 0.6, 400_000
    centre = rng.normal(size=(n, K - 1))
    y = np.arange(n) % K
    quad = smoothed_log_likelihood_rows(centre, y, rho)
    for i in range(n):
        Z = centre[i] + rho * rng.standard_normal((draws, K - 1))
        vals = np.exp(-softmax_potential(Z, np.full(draws, y[i]))[0])
        se = vals.std() / np.sqrt(draws) / vals.mean()
        assert abs(quad[i] - np.log(vals.mean())) < 4 * se + 1e-4, (i, quad[i], np.log(vals.mean()))
        # negative control: the integral at another rho is off by many standard errors
        other = smoothed_log_likelihood_rows(centre[i : i + 1], y[i : i + 1], 1.5 * rho)[0]
        assert abs(other - np.log(vals.mean())) > 4 * se + 1e-4


def test_weights_need_few_enough_classes():
    assert max_weight_classes() == 7
    n, K = 3, 9
    A = scipy.sparse.csr_matrix(np.ones((n * (K - 1), 1)))
    k = CategoricalSplitKernel(A, 0.0, np.zeros(n, int), K, np.zeros(1), np.eye(1), 0.5)
    with pytest.raises(ValueError, match="at most 7 classes"):
        k.log_weight(np.zeros(1))


def test_categorical_kernel_argument_errors():
    A = np.ones((4, 1))
    with pytest.raises(ValueError, match="A must have n"):
        CategoricalSplitKernel(A, 0.0, np.zeros(3, int), 3, np.zeros(1), np.eye(1), 0.5)
    with pytest.raises(ValueError, match="integers in 0..2"):
        CategoricalSplitKernel(A, 0.0, np.array([0, 3]), 3, np.zeros(1), np.eye(1), 0.5)
    with pytest.raises(ValueError, match="singular"):
        CategoricalSplitKernel(
            np.zeros((4, 1)), 0.0, np.zeros(2, int), 3, np.zeros(1), np.zeros((1, 1)), 0.5
        )


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.0, -0.9])
def test_categorical_kernel_matches_its_split_model(alpha):
    rng = np.random.default_rng(2)
    n, rho, prior_sd = 20, 2.0, 1.5
    x = rng.normal(size=n)
    logits = np.stack([np.zeros(n), 1.0 * x, -1.0 * x], 1)
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = np.array([rng.choice(3, p=pi) for pi in p])
    targets = _grid_targets(x, y, rho, prior_sd)
    k = _one_covariate_kernel(x, y, rho, prior_sd, alpha)
    theta = np.zeros(2)
    z = k.init(theta, rng)
    out = []
    for _ in range(6000):
        theta, z, _ = k.sweep(theta, z, rng)
        out.append(theta)
    draws = np.array(out)[200:]

    def agrees(target):
        mean, sd = target
        se_m = np.array([float(az.mcse(draws[None, :, j])) for j in range(2)])
        se_s = np.array([float(az.mcse(draws[None, :, j], method="sd")) for j in range(2)])
        return bool(
            np.all(np.abs(draws.mean(0) - mean) < 4 * se_m + 0.01)
            and np.all(np.abs(draws.std(0) - sd) < 4 * se_s + 0.01)
        )

    assert agrees(targets["pi_rho"]), (draws.mean(0), draws.std(0), targets)
    assert not agrees(targets["pi"])  # negative control: the unsmoothed posterior
