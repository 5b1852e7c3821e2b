"""Splitting strategy 2 (data shards) and the d-dimensional rejection sampler (Proposition 3).

Exact answers used:
- a correlated 3-D Gaussian (the squared Mahalanobis distance of exact draws is chi^2_3);
- a 2-D logistic conditional ``z | theta``, normalised by numerical integration on a grid;
- the theta-marginal of the strategy-2 split model for a 2-D logistic regression, computed on a
  grid as ``exp(-V) * prod_s (exp(-U_s) convolved with N(0, rho^2 I))`` (the convolution by
  ``scipy.ndimage.gaussian_filter``), and of the strategy-1 split model (per-row Gauss–Hermite);
- the closed form of the strategy-2 split model when the shard potentials are Gaussian.
Every check has a negative control: the same check against a wrong target must fail.
"""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest
from scipy import stats
from scipy.ndimage import gaussian_filter
from scipy.special import expit

import pymc_sgs
from pymc_sgs.families import FAMILIES, BernoulliProbit, BinomialProbit
from pymc_sgs.problem import ParamSlice, SplitProblem, SplitTerm
from pymc_sgs.shards import (
    ShardKernel,
    mh_log_concave_step,
    sample_strongly_log_concave,
    shard_smoothness,
)

BERN = FAMILIES["bernoulli"]


# ---------------------------------------------------------------- rejection sampler
def _gaussian_target(seed=0):
    rng = np.random.default_rng(seed)
    B = rng.normal(size=(3, 3))
    P = B @ B.T + 2.0 * np.eye(3)
    mu = np.array([1.0, -2.0, 0.5])
    return P, mu


def _mahalanobis_pvalue(x, mu, P):
    r = x - mu
    q = np.einsum("ij,jk,ik->i", r, P, r)
    return stats.kstest(q, stats.chi2(df=3).cdf).pvalue


@pytest.mark.parametrize("envelope, n_grad_steps", [("paper", 200), ("tangent", 200), ("paper", 1)])
def test_rejection_sampler_matches_gaussian(envelope, n_grad_steps):
    # n_grad_steps=1: a poor minimiser; the draws must still be exact (only slower)
    P, mu = _gaussian_target()
    ev = np.linalg.eigvalsh(P)
    rng = np.random.default_rng(1)
    f = lambda x: 0.5 * (x - mu) @ P @ (x - mu)  # noqa: E731
    g = lambda x: P @ (x - mu)  # noqa: E731
    draws = [
        sample_strongly_log_concave(
            f, g, ev[0], ev[-1], np.zeros(3), rng, envelope=envelope, n_grad_steps=n_grad_steps
        )
        for _ in range(3000)
    ]
    x = np.array([d.x for d in draws])
    # mean within 4 Monte Carlo standard errors (independent draws)
    mcse = np.sqrt(np.diag(np.linalg.inv(P)) / len(x))
    assert np.all(np.abs(x.mean(0) - mu) < 4 * mcse)
    assert _mahalanobis_pvalue(x, mu, P) > 1e-3
    # negative control: the same draws against a 15% wider Gaussian fail
    assert _mahalanobis_pvalue(x, mu, P / 1.15) < 1e-3
    # the expected number of proposals is bounded by (M / m)^(d/2) at a good minimiser
    if n_grad_steps > 1:
        assert np.mean([d.n_proposals for d in draws]) < (ev[-1] / ev[0]) ** 1.5


def _logistic_conditional(rho=0.8, seed=2):
    rng = np.random.default_rng(seed)
    X = rng.choice([-1.0, 1.0], size=(6, 2)) / np.sqrt(2)
    X[:, 1] *= 2.0
    y = (rng.random(6) < 0.5).astype(float)
    theta = np.array([0.7, -0.4])
    w = 1.0 / rho**2

    def f(z):
        return float(np.sum(BERN.potential(X @ z, y))) + 0.5 * w * float((z - theta) @ (z - theta))

    def g(z):
        return X.T @ BERN.grad(X @ z, y) + w * (z - theta)

    def h(z):
        return (X.T * BERN.hess(X @ z, y)) @ X + w * np.eye(2)

    L = np.linalg.norm(X, 2) ** 2 / 4
    return f, g, h, w, L + w, theta, rho


def _grid_density(f, centre, half_width, n=401):
    ax = [np.linspace(c - half_width, c + half_width, n) for c in centre]
    Z1, Z2 = np.meshgrid(*ax, indexing="ij")
    pts = np.stack([Z1.ravel(), Z2.ravel()], 1)
    logp = -np.array([f(p) for p in pts])
    p = np.exp(logp - logp.max())
    return pts, p / p.sum()


def _moments_z(pts, p):
    m = p @ pts
    return m, p @ (pts**2) - m**2


def _binned_pvalue(x, pts, p, edges1, edges2):
    # chi-square of the draws' 2-D histogram against the grid probabilities of the same cells
    def cells(v):
        i = np.clip(np.searchsorted(edges1, v[:, 0]), 0, len(edges1))
        j = np.clip(np.searchsorted(edges2, v[:, 1]), 0, len(edges2))
        return i * (len(edges2) + 1) + j

    k = (len(edges1) + 1) * (len(edges2) + 1)
    expected = np.bincount(cells(pts), weights=p, minlength=k) * len(x)
    observed = np.bincount(cells(x), minlength=k)
    keep = expected > 5
    chi2 = np.sum((observed[keep] - expected[keep]) ** 2 / expected[keep])
    return stats.chi2(df=keep.sum() - 1).sf(chi2)


@pytest.mark.parametrize("envelope", ["paper", "tangent"])
def test_rejection_sampler_matches_2d_logistic_by_integration(envelope):
    f, g, h, m, M, theta, rho = _logistic_conditional()
    rng = np.random.default_rng(3)
    x = np.array(
        [
            sample_strongly_log_concave(f, g, m, M, theta, rng, envelope=envelope).x
            for _ in range(4000)
        ]
    )
    pts, p = _grid_density(f, theta, 6 * rho)
    mean, var = _moments_z(pts, p)
    assert np.all(np.abs(x.mean(0) - mean) < 4 * np.sqrt(var / len(x)))
    e1 = np.quantile(x[:, 0], [0.2, 0.4, 0.6, 0.8])
    e2 = np.quantile(x[:, 1], [0.2, 0.4, 0.6, 0.8])
    assert _binned_pvalue(x, pts, p, e1, e2) > 1e-3
    # negative control: the conditional at a 20% larger rho (a wrong target)
    f_wrong = _logistic_conditional(rho=1.2 * rho)[0]
    pts_w, p_w = _grid_density(f_wrong, theta, 6 * rho)
    assert _binned_pvalue(x, pts_w, p_w, e1, e2) < 1e-3


def test_mh_fallback_leaves_2d_logistic_invariant():
    f, g, h, m, M, theta, rho = _logistic_conditional()
    rng = np.random.default_rng(4)
    x = theta.copy()
    chain, accs = [], []
    for _ in range(4000):
        x, acc, _ = mh_log_concave_step(f, g, h, x, rng, n_steps=1)
        chain.append(x)
        accs.append(acc)
    chain = np.array(chain)
    pts, p = _grid_density(f, theta, 6 * rho)
    mean, _ = _moments_z(pts, p)
    mcse = np.array([float(az.mcse(chain[None, :, j])) for j in range(2)])
    assert np.all(np.abs(chain.mean(0) - mean) < 4 * mcse + 1e-3)
    assert 0.5 < np.mean(accs) < 1.0
    wrong_mean = _moments_z(*_grid_density(_logistic_conditional(rho=2 * rho)[0], theta, 12 * rho))[
        0
    ]
    assert np.any(np.abs(chain.mean(0) - wrong_mean) > 4 * mcse + 1e-3)


# ------------------------------------------------------------- strategy 2: exact targets
def _logistic_data(n=24, seed=5):
    rng = np.random.default_rng(seed)
    X = rng.choice([-1.0, 1.0], size=(n, 2))
    X[:, 1] = 0.8 * X[:, 0] + 0.6 * X[:, 1]  # correlated columns
    y = (rng.random(n) < expit(X @ np.array([0.8, -0.5]))).astype(float)
    return X, y


PRIOR_SD = 2.0


def _grid_targets(X, y, rho, n_shards, h=0.02, half=4.0):
    """theta-marginals of pi, the strategy-1 and the strategy-2 split models, on one grid."""
    ax = np.arange(-half, half + h / 2, h)
    T1, T2 = np.meshgrid(ax, ax, indexing="ij")
    pts = np.stack([T1.ravel(), T2.ravel()], 1)
    log_prior = -0.5 * np.sum(pts**2, 1) / PRIOR_SD**2
    log_pi = log_prior.copy()
    log_s2 = log_prior.copy()
    for rows in np.array_split(np.arange(len(y)), n_shards):
        U = np.sum(BERN.potential(pts @ X[rows].T, y[rows]), 1)
        log_pi -= U
        e = np.exp(-(U - U.min())).reshape(T1.shape)
        # exp(-U_s) convolved with N(0, rho^2 I): the strategy-2 smoothing of one shard
        log_s2 += (
            np.log(
                np.maximum(gaussian_filter(e, rho / h, mode="constant", truncate=6.0), 1e-300)
            ).ravel()
            - U.min()
        )
    t, wts = np.polynomial.hermite_e.hermegauss(40)
    wts = wts / wts.sum()
    eta = pts @ X.T
    lik = np.exp(-BERN.potential(eta[..., None] + rho * t, y[:, None]))
    log_s1 = log_prior + np.sum(np.log(lik @ wts), 1)
    out = {}
    for name, lp in (("pi", log_pi), ("s1", log_s1), ("s2", log_s2)):
        p = np.exp(lp - lp.max())
        p /= p.sum()
        m = p @ pts
        out[name] = (m, np.sqrt(p @ pts**2 - m**2))
    return out


def _logistic_model(X, y):
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, PRIOR_SD, shape=2)
        pm.Bernoulli("y", logit_p=pm.math.dot(X, beta), observed=y)
    return model


def _run(model, seed, draws=2000, **kw):
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pm.sample(
            draws=draws,
            tune=300,
            chains=2,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
            step=pymc_sgs.SplitGibbs(**kw),
        )


def test_strategy2_posterior_matches_its_split_model_and_strategy1_its_own():
    X, y = _logistic_data()
    rho, b = 1.0, 3
    targets = _grid_targets(X, y, rho, b)
    model = _logistic_model(X, y)
    runs = {
        "s2": _run(model, 11, rho=rho, alpha=0.0, split="shards", n_shards=b),
        "s1": _run(model, 12, rho=rho, alpha=0.0),
    }
    assert np.all(runs["s2"].sample_stats["z_proposals"].values >= 1.0)

    def agrees(x, target):
        mean, sd = target
        mcse_m = np.array([float(az.mcse(x[..., j])) for j in range(2)])
        mcse_s = np.array([float(az.mcse(x[..., j], method="sd")) for j in range(2)])
        ok_m = np.abs(x.mean((0, 1)) - mean) < 4 * mcse_m + 0.01
        ok_s = np.abs(x.std((0, 1)) - sd) < 4 * mcse_s + 0.01
        return bool(np.all(ok_m) and np.all(ok_s))

    for name, idata in runs.items():
        x = idata.posterior["beta"].values
        assert agrees(x, targets[name]), (name, x.mean((0, 1)), x.std((0, 1)), targets[name])
        # negative control: the other strategy's split model (a different target) is rejected
        assert not agrees(x, targets["s1" if name == "s2" else "s2"])
    # and strategy 2's chain is not pi itself (its rho-bias is visible at rho = 1)
    assert not agrees(runs["s2"].posterior["beta"].values, targets["pi"])


def test_strategy2_gaussian_shards_closed_form():
    # Normal shard potentials: pi_rho is Gaussian with precision P0 + sum_s H_s (I + rho^2 H_s)^-1
    rng = np.random.default_rng(6)
    n, d, b, rho, sigma = 40, 3, 4, 0.5, 1.5
    X = rng.normal(size=(n, d))
    y = X @ np.array([1.0, -1.0, 0.5]) + sigma * rng.normal(size=n)
    P0 = np.eye(d) / 4.0
    term = SplitTerm("y", FAMILIES["normal"], X, np.zeros(n), y, np.full(n, sigma))
    prob = SplitProblem((ParamSlice("beta", (d,), 0, d),), np.zeros(d), P0, (term,))
    Q, lin = P0.copy(), np.zeros(d)
    for rows in np.array_split(np.arange(n), b):
        H = X[rows].T @ X[rows] / sigma**2
        S = np.linalg.inv(np.eye(d) + rho**2 * H)
        Q += H @ S
        lin += S @ (X[rows].T @ y[rows] / sigma**2)
    mean, cov = np.linalg.solve(Q, lin), np.linalg.inv(Q)
    k = ShardKernel(prob, rho, b)
    state = k.init(np.zeros(d), np.random.default_rng(7))
    rng = np.random.default_rng(8)
    draws = []
    for _ in range(4000):
        state, info = k.sweep(state, rng)
        draws.append(state.theta)
    x = np.array(draws)[200:]
    mcse = np.array([float(az.mcse(x[None, :, j])) for j in range(d)])
    assert np.all(np.abs(x.mean(0) - mean) < 4 * mcse + 1e-3)
    sd_ratio = x.std(0) / np.sqrt(np.diag(cov))
    assert np.all(np.abs(sd_ratio - 1) < 0.1)
    # negative control: the strategy-1 split model (precision P0 + X^T X / (sigma^2 + rho^2))
    Q1 = P0 + X.T @ X / (sigma**2 + rho**2)
    mean1 = np.linalg.solve(Q1, X.T @ y / (sigma**2 + rho**2))
    sd1 = np.sqrt(np.diag(np.linalg.inv(Q1)))
    assert np.any(np.abs(x.mean(0) - mean1) > 4 * mcse + 1e-3) or np.any(
        np.abs(x.std(0) / sd1 - 1) > 0.1
    )


@pytest.mark.slow
def test_shard_kernel_mh_fallback_targets_the_same_split_model():
    X, y = _logistic_data()
    rho, b = 0.6, 3
    n = len(y)
    term = SplitTerm("y", BERN, X, np.zeros(n), y)
    prob = SplitProblem(
        (ParamSlice("beta", (2,), 0, 2),), np.zeros(2), np.eye(2) / PRIOR_SD**2, (term,)
    )
    target = _grid_targets(X, y, rho, b)["s2"][0]
    k = ShardKernel(prob, rho, b, z_sampler="mh", mh_steps=2)
    rng = np.random.default_rng(9)
    state = k.init(np.zeros(2), rng)
    out = []
    for _ in range(3000):
        state, info = k.sweep(state, rng)
        out.append(state.theta)
    x = np.array(out)[200:]
    assert info.z_proposals == 0.0 and 0.3 < info.z_accept <= 1.0
    mcse = np.array([float(az.mcse(x[None, :, j])) for j in range(2)])
    assert np.all(np.abs(x.mean(0) - target) < 4 * mcse + 0.01)


def test_shard_kernel_same_seed_same_draws():
    X, y = _logistic_data()
    term = SplitTerm("y", BERN, X, np.zeros(len(y)), y)
    prob = SplitProblem((ParamSlice("beta", (2,), 0, 2),), np.zeros(2), np.eye(2), (term,))
    runs = []
    for _ in range(2):
        k = ShardKernel(prob, 0.5, 4)
        rng = np.random.default_rng(1)
        s = k.init(np.zeros(2), rng)
        for _ in range(20):
            s, _ = k.sweep(s, rng)
        runs.append(s.theta)
    np.testing.assert_array_equal(runs[0], runs[1])


# ------------------------------------------------------ smoothness bounds of the families
@pytest.mark.parametrize(
    "family, trials",
    [
        (FAMILIES["bernoulli"], None),
        (FAMILIES["binomial"], np.array([1.0, 3.0, 7.0])),
        (BernoulliProbit(), None),
        (BinomialProbit(), np.array([1.0, 3.0, 7.0])),
        (FAMILIES["normal"], np.array([0.5, 1.0, 2.0])),
    ],
    ids=["bernoulli-logit", "binomial-logit", "bernoulli-probit", "binomial-probit", "normal"],
)
def test_shard_smoothness_bounds_the_curvature_everywhere(family, trials):
    # L_s >= sup_z of the largest eigenvalue of X^T diag(U''(X z)) X; for one-column designs
    # of ones that is ||X||^2 max_i sup_z U''_i: the largest U'' on a wide grid must not
    # exceed the bound (probit: U'' -> trials in the growing tail, not the logistic trials / 4)
    X = np.ones((3, 1))
    y = np.array([0.0, 1.0, 1.0]) if trials is None else np.array([0.0, 1.0, 3.0])
    L = shard_smoothness(family, X, trials, y)
    zs = np.linspace(-40.0, 40.0, 8001)
    sup = max(
        float(np.max(family.hess(zs, y[i], None if trials is None else trials[i])))
        for i in range(3)
    )
    assert L >= 3.0 * sup * (1 - 1e-9)


@pytest.mark.parametrize("family, trials", [(BernoulliProbit(), None), (BinomialProbit(), 3.0)])
def test_probit_shard_draws_match_the_conditional_by_integration(family, trials):
    # with the logistic bound (1/4 of probit's) the gradient steps of the minimiser search
    # diverged and the rejection sampler gave up ("no proposal accepted"); with the probit
    # bound the draws of z_s | theta match the density integrated on a grid
    rng = np.random.default_rng(21)
    n, d, rho = 40, 2, 1.0
    X = np.column_stack([np.ones(n), rng.normal(size=n)])
    y = (np.arange(n) % 2).astype(float) * (1.0 if trials is None else 2.0)
    tr = None if trials is None else np.full(n, trials)
    prob = SplitProblem(
        (ParamSlice("beta", (d,), 0, d),),
        np.zeros(d),
        np.eye(d),
        (SplitTerm("y", family, X, np.zeros(n), y, tr),),
    )
    k = ShardKernel(prob, rho, 1)
    theta = np.array([0.3, -0.2])
    draws = [k.sample_z(theta, None, rng) for _ in range(3000)]
    x = np.array([z for z, _, _ in draws])
    assert np.all(np.array([info.shard_grad_steps[0] for _, _, info in draws]) < 200)
    centre, half = np.median(x, 0), 8.0 * float(np.max(x.std(0)))
    pts, p = _grid_density(k.conditional(0, theta)[0], centre, half)
    mean, var = _moments_z(pts, p)
    assert np.all(np.abs(x.mean(0) - mean) < 4 * np.sqrt(var / len(x)))
    e1 = np.quantile(x[:, 0], [0.2, 0.4, 0.6, 0.8])
    e2 = np.quantile(x[:, 1], [0.2, 0.4, 0.6, 0.8])
    assert _binned_pvalue(x, pts, p, e1, e2) > 1e-3
    # negative control: the same draws against the logit family's conditional
    logit = FAMILIES["bernoulli"] if trials is None else FAMILIES["binomial"]
    wrong = SplitProblem(
        prob.params,
        prob.prior_mean,
        prob.prior_precision,
        (SplitTerm("y", logit, X, np.zeros(n), y, tr),),
    )
    pts_w, p_w = _grid_density(ShardKernel(wrong, rho, 1).conditional(0, theta)[0], centre, half)
    assert _binned_pvalue(x, pts_w, p_w, e1, e2) < 1e-3


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(split="blocks"), "split must be 'observations' or 'shards'"),
        (dict(split="shards", n_shards=0, rho=0.5, alpha=0), "n_shards must be a positive integer"),
        (
            dict(split="shards", n_shards=2.5, rho=0.5, alpha=0),
            "n_shards must be a positive integer",
        ),
        (dict(split="shards", n_shards=2, alpha=0), "fixed scalar rho"),
        (dict(split="shards", n_shards=2, rho=[0.5, 0.5], alpha=0), "fixed scalar rho"),
        (dict(split="shards", n_shards=2, rho=0.5), "pass alpha=0"),
        (dict(split="shards", n_shards=2, rho=0.5, alpha=0, exact=True), "exact=True"),
        (dict(n_shards=3), "n_shards applies only to split='shards'"),
        (
            dict(split="shards", n_shards=1000, rho=0.5, alpha=0),
            "at most the number of observations",
        ),
    ],
)
def test_split_argument_errors(kwargs, match):
    X, y = _logistic_data()
    with _logistic_model(X, y), pytest.raises(ValueError, match=match):
        pymc_sgs.SplitGibbs(**kwargs)


def test_shards_need_a_single_split_term():
    X, y = _logistic_data()
    with pm.Model():
        beta = pm.Normal("beta", 0.0, 1.0, shape=2)
        pm.Bernoulli("y1", logit_p=pm.math.dot(X, beta), observed=y)
        pm.Poisson("y2", mu=pm.math.exp(pm.math.dot(X, beta)), observed=np.ones(len(y)))
        with pytest.raises(ValueError, match="exactly one split likelihood term"):
            pymc_sgs.SplitGibbs(split="shards", n_shards=2, rho=0.5, alpha=0)


def test_rejection_sampler_argument_errors():
    f = lambda x: 0.5 * x @ x  # noqa: E731
    g = lambda x: x  # noqa: E731
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="envelope must be one of"):
        sample_strongly_log_concave(f, g, 1.0, 1.0, np.zeros(2), rng, envelope="box")
    with pytest.raises(ValueError, match="m \\(strong convexity\\) must be positive"):
        sample_strongly_log_concave(f, g, 0.0, 1.0, np.zeros(2), rng)
