"""Nearly Gaussian rows (pymc_sgs.series): derivatives, closed-form weights, exact z-moves."""

import numpy as np
import pytest
from scipy.special import logsumexp

from pymc_sgs.conditionals import overrelaxed_z_move
from pymc_sgs.families import FAMILIES, NegativeBinomialLog
from pymc_sgs.fused import family_code, fused_z_pass, row_parameter
from pymc_sgs.series import SERIES_GAUSSIAN, series_log_weight, series_rows
from pymc_sgs.weights import gauss_hermite_nodes, log_weight_rows, smoothed_log_likelihood

FAMILY_CASES = ["bernoulli", "binomial", "poisson", "negativebinomial"]


def _family(name):
    return NegativeBinomialLog(alpha=2.0) if name == "negativebinomial" else FAMILIES[name]


def _rows(name, n, rng, rho_range=(0.005, 0.6)):
    """Random rows: centres, couplings and data spread wide around the fitted values."""
    c = rng.normal(0, 3, n)
    rho = np.exp(rng.uniform(np.log(rho_range[0]), np.log(rho_range[1]), n))
    trials = None
    if name == "bernoulli":
        y = (rng.random(n) < 0.5).astype(float)
    elif name == "binomial":
        trials = rng.integers(1, 60, n).astype(float)
        y = rng.binomial(trials.astype(int), 0.5).astype(float)
    else:
        c = rng.normal(1, 2, n)
        y = rng.poisson(np.exp(c + rng.normal(0, 0.3, n))).astype(float)
    return y, trials, c, rho


@pytest.mark.parametrize("name", FAMILY_CASES + ["normal"])
def test_taylor_derivatives_are_derivatives(name):
    fam = _family(name)
    z = np.array([-4.0, -2.3, -0.2, 0.4, 3.1, 6.0])
    y = np.full(6, 1.0 if name == "bernoulli" else 3.0)
    t = np.full(6, 7.0) if name in ("binomial", "normal") else None
    d = np.array(fam.taylor_derivatives(z, y, t))
    np.testing.assert_allclose(d[0], fam.grad(z, y, t), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(d[1], fam.hess(z, y, t), rtol=1e-13, atol=1e-15)
    h = 1e-5
    fd = (
        np.array(fam.taylor_derivatives(z + h, y, t))
        - np.array(fam.taylor_derivatives(z - h, y, t))
    ) / (2 * h)
    np.testing.assert_allclose(fd[:-1], d[1:], rtol=1e-6, atol=1e-8)
    # the bounds hold on an interval around each point
    lo, hi = z - 0.5, z + 0.5
    m3, m4 = fam.higher_bound(lo, hi, y, t)
    grid = np.linspace(lo, hi, 201)
    dg = np.array([fam.taylor_derivatives(g, y, t) for g in grid])
    assert np.all(np.abs(dg[:, 2]).max(axis=0) <= m3 * (1 + 1e-12) + 1e-15)
    assert np.all(np.abs(dg[:, 3]).max(axis=0) <= m4 * (1 + 1e-12) + 1e-15)


@pytest.mark.parametrize("name", FAMILY_CASES)
def test_series_weight_matches_quadrature_where_used(name):
    # 2e4 random rows with rho from 0.005 to 0.6: where kappa <= SERIES_GAUSSIAN the closed
    # form agrees with a 40-node Gauss-Hermite rule to 3e-9 (the accuracy of the 4-node rule
    # it replaces); just above the threshold a form without the variance term would not
    rng = np.random.default_rng(1)
    fam = _family(name)
    y, t, c, rho = _rows(name, 20000, rng)
    near = series_rows(fam, y, t, c, rho)
    tier = near.mask
    assert 0.2 < tier.mean() < 0.95  # both kinds of rows are present
    got, _ = log_weight_rows(fam, y, t, c, rho)
    ref = fam.log_likelihood(c, y, t) - smoothed_log_likelihood(fam, y, t, c, rho, None, 40)[0]
    assert np.max(np.abs(got - ref)[tier]) < 3e-9
    assert np.max(np.abs(got - ref)[~tier]) < 5e-8  # the quadrature rows, unchanged
    # negative control: dropping Var(R) / 2 (an s^6 term) is visibly wrong on the same rows
    d = tuple(v[tier] for v in near.derivatives)
    h, u3 = d[1], d[2]
    s2 = 1.0 / (h + 1.0 / rho[tier] ** 2)
    crude = series_log_weight(d, rho[tier]) + 0.5 * 15 * (u3 / 6) ** 2 * s2**3
    assert np.max(np.abs(crude - ref[tier])) > 1.5e-8


def _independent_log_ratio(fam, y, t, c, rho, z, prop, m, s):
    """log [pi(prop) N(z; m, s^2)] - log [pi(z) N(prop; m, s^2)], pi the exact z | theta."""

    def log_pi(v):
        return fam.log_likelihood(v, y, t) - 0.5 * ((v - c) / rho) ** 2

    def log_q(v):
        return -0.5 * ((v - m) / s) ** 2

    return log_pi(prop) + log_q(z) - log_pi(z) - log_q(prop)


class _ReplayGenerator:
    """Hands out given normals and uniforms (the z-move draws ``eps`` then ``u``)."""

    def __init__(self, eps, u):
        self.eps, self.u = eps, u

    def standard_normal(self, n):
        return self.eps[:n]

    def random(self, n):
        return self.u[:n]


def _uniforms_near_one(n, rng):
    # half the rows with u within 1e-7..1e-2 of 1, where the decision turns on the remainder
    # (|log ratio| is 1e-6..1e-3 here): a plain uniform would accept nearly every row
    u = rng.random(n)
    near = rng.random(n) < 0.5
    u[near] = 1.0 - 10.0 ** rng.uniform(-7, -2, near.sum())
    return u


@pytest.mark.parametrize("name", FAMILY_CASES)
def test_series_z_move_is_the_exact_mh_move(name):
    # the move of nearly Gaussian rows makes the MH decision of the exact conditional: the same
    # random numbers, decided from first principles (log-likelihoods, no remainder formula)
    rng = np.random.default_rng(2)
    fam = _family(name)
    n = 40000
    y, t, c, rho = _rows(name, n, rng, rho_range=(0.02, 0.3))
    z = c + rho * rng.standard_normal(n)
    alpha = -0.9
    eps, u = rng.standard_normal(n), _uniforms_near_one(n, rng)
    mv = overrelaxed_z_move(fam, y, t, c, rho, z, alpha, _ReplayGenerator(eps, u))
    near = series_rows(fam, y, t, c, rho)
    tier = near.mask
    assert tier.mean() > 0.2
    m, s = near.mean, near.scale
    prop = m + alpha * (z - m) + np.sqrt(1 - alpha**2) * s * eps
    log_ratio = _independent_log_ratio(fam, y, t, c, rho, z, prop, m, s)
    accept = u < np.exp(np.minimum(log_ratio, 0.0))
    # rows whose u is within rounding of the acceptance probability may go either way
    clear = np.abs(u - np.exp(np.minimum(log_ratio, 0.0))) > 1e-9
    check = tier & clear
    np.testing.assert_array_equal(mv.z[check], np.where(accept, prop, z)[check])
    np.testing.assert_allclose(mv.mode[tier], m[tier])
    # not vacuous: many proposals were rejected; a move without the MH correction (accept all)
    # would differ on exactly those rows
    rejected = check & ~accept
    assert rejected.sum() >= 50
    assert np.all(mv.z[rejected] != prop[rejected])


@pytest.mark.parametrize("name", FAMILY_CASES)
def test_compiled_series_rows_reproduce_numpy(name):
    # the compiled pass (with its likelihood-free acceptance shortcut) makes the same moves and
    # the same weights as the numpy reference on rows in both tiers
    rng = np.random.default_rng(3)
    fam = _family(name)
    n, d = 30000, 3
    y, t, _, _ = _rows(name, n, rng)
    A = rng.normal(size=(n, d)) / np.sqrt(d)
    theta = rng.normal(size=d)
    off = (1.0 if name != "bernoulli" and name != "binomial" else 0.0) + 0.5 * rng.normal(size=n)
    c = A @ theta + off
    rho = np.exp(rng.uniform(np.log(0.01), np.log(0.5), n))
    z = c + rho * rng.standard_normal(n)
    tier = series_rows(fam, y, t, c, rho).mask
    assert 0.2 < tier.mean() < 0.98
    alpha = -0.95
    eps, u = rng.standard_normal(n), _uniforms_near_one(n, rng)
    ref = overrelaxed_z_move(fam, y, t, c, rho, z, alpha, _ReplayGenerator(eps, u), z)
    lw_ref = float(np.sum(log_weight_rows(fam, y, t, c, rho, ref.mode)[0]))
    nodes, lwx = gauss_hermite_nodes(16)
    n8, l8 = gauss_hermite_nodes(8)
    n4, l4 = gauss_hermite_nodes(4)
    z_out, mode_out = np.empty(n), np.empty(n)
    from pymc_sgs.weights import NEAR_GAUSSIAN, VERY_NEAR_GAUSSIAN

    atz, acc, lw = fused_z_pass(
        A,
        off,
        y,
        row_parameter(fam, t, n),
        rho,
        family_code(fam),
        theta,
        z,
        z.copy(),
        alpha,
        eps,
        u,
        nodes,
        lwx,
        True,
        z_out,
        mode_out,
        n8,
        l8,
        NEAR_GAUSSIAN,
        n4,
        l4,
        VERY_NEAR_GAUSSIAN,
        SERIES_GAUSSIAN,
    )
    np.testing.assert_allclose(z_out, ref.z, rtol=0, atol=1e-9)
    np.testing.assert_allclose(mode_out[tier], ref.mode[tier], rtol=0, atol=1e-12)
    np.testing.assert_allclose(lw, lw_ref, rtol=1e-9)
    np.testing.assert_allclose(acc / n, ref.accept_prob, atol=1e-12)
    np.testing.assert_allclose(atz, A.T @ ((z_out - off) / rho**2), rtol=1e-9)


def test_series_quadrature_reference_is_independent():
    # the 40-node reference of the tests above is itself right: against a direct logsumexp
    # over a fine grid for a few rows
    fam = FAMILIES["bernoulli"]
    y, c, rho = np.array([1.0, 0.0]), np.array([0.3, -1.2]), np.array([0.05, 0.1])
    ref = smoothed_log_likelihood(fam, y, None, c, rho, None, 40)[0]
    grid = np.linspace(-8, 8, 400001)
    for i in range(2):
        zg = c[i] + rho[i] * grid
        logf = fam.log_likelihood(zg, y[i]) - 0.5 * grid**2 - 0.5 * np.log(2 * np.pi)
        direct = logsumexp(logf) + np.log(grid[1] - grid[0])
        assert abs(direct - ref[i]) < 1e-10
