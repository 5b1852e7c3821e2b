"""Laplace start of a chain and the pilot value of rho (pymc_sgs.start, pymc_sgs.rho.pilot_rho)."""

import warnings

import numpy as np
import pymc as pm
import pytest

import pymc_sgs
from pymc_sgs.centering import map_estimate
from pymc_sgs.families import FAMILIES
from pymc_sgs.kernel import SplitGibbsKernel
from pymc_sgs.problem import ParamSlice, SplitProblem, SplitTerm
from pymc_sgs.rho import laplace_log_weight_var, pilot_rho
from pymc_sgs.start import laplace_start


def _problem(family="bernoulli", n=200, d=2, seed=0, prior_sd=3.0, X=None, y=None):
    rng = np.random.default_rng(seed)
    if X is None:
        X = rng.normal(size=(n, d))
        eta = X @ rng.normal(size=d) * 0.7
        y = (
            (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(float)
            if family == "bernoulli"
            else rng.poisson(np.exp(eta)).astype(float)
        )
    n, d = X.shape
    P = np.eye(d) / prior_sd**2 if prior_sd else np.zeros((d, d))
    return SplitProblem(
        params=(ParamSlice("b", (d,), 0, d),),
        prior_mean=np.zeros(d),
        prior_precision=P,
        split_terms=(SplitTerm("y", FAMILIES[family], X, np.zeros(n), y),),
    )


def _hessian(problem, theta):
    t = problem.split_terms[0]
    eta = t.A @ theta
    return problem.prior_precision + (t.A.T * t.family.hess(eta, t.y, t.trials)) @ t.A


@pytest.mark.parametrize("family", ["bernoulli", "poisson"])
def test_laplace_start_finds_the_map(family):
    prob = _problem(family)
    kernel = SplitGibbsKernel(prob, rho=0.2)
    start = laplace_start(kernel, np.full(2, 3.0), np.random.default_rng(0))
    assert start.theta is not None, start.reason
    np.testing.assert_allclose(start.mode, map_estimate(prob), atol=1e-7)
    L = start.chol
    np.testing.assert_allclose(L @ L.T, _hessian(prob, start.mode), rtol=1e-8)


def test_laplace_start_draws_from_the_laplace_approximation():
    prob = _problem()
    kernel = SplitGibbsKernel(prob, rho=0.2)
    rng = np.random.default_rng(1)
    draws = np.array([laplace_start(kernel, np.zeros(2), rng).theta for _ in range(2000)])
    mode = map_estimate(prob)
    cov = np.linalg.inv(_hessian(prob, mode))
    sd = np.sqrt(np.diag(cov))
    # means: exact N(mode, cov) draws are independent, so MCSE = sd / sqrt(N)
    z_mean = (draws.mean(0) - mode) / (sd / np.sqrt(len(draws)))
    assert np.all(np.abs(z_mean) < 4), z_mean
    # variances: sd of a sample variance of N normals is var * sqrt(2 / (N - 1))
    var = draws.var(0, ddof=1)
    z_var = (var - sd**2) / (sd**2 * np.sqrt(2 / (len(draws) - 1)))
    assert np.all(np.abs(z_var) < 4), z_var
    # negative control: the same check against a 1.5x wider approximation fails
    z_wrong = (var - 1.5 * sd**2) / (1.5 * sd**2 * np.sqrt(2 / (len(draws) - 1)))
    assert np.any(np.abs(z_wrong) > 4), z_wrong


def test_laplace_start_falls_back_when_it_does_not_apply():
    # separable data and a flat prior: there is no mode
    X = np.array([[-2.0], [-1.0], [1.0], [2.0]])
    y = np.array([0.0, 0.0, 1.0, 1.0])
    prob = _problem(X=X, y=y, prior_sd=None)
    start = laplace_start(SplitGibbsKernel(prob, rho=0.2), np.zeros(1), np.random.default_rng(0))
    assert start.theta is None and start.reason
    # a matrix-free theta-step has no d x d Hessian to factor
    cg = SplitGibbsKernel(_problem(), rho=0.2, theta_solver="cg")
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    start = laplace_start(cg, np.zeros(2), rng)
    assert start.theta is None and "cg" in start.reason
    assert rng.bit_generator.state == state  # no random numbers used


def test_laplace_log_weight_variance_matches_monte_carlo():
    """The second-order closed form against 1000 Laplace draws of the exact log weights."""
    from pymc_sgs.weights import log_weight_rows

    prob = _problem("poisson", n=2000, d=3, seed=4)
    kernel = SplitGibbsKernel(prob, rho=0.5)
    rng = np.random.default_rng(5)
    start = laplace_start(kernel, np.zeros(3), rng)
    t = prob.split_terms[0]
    thetas = start.mode + np.linalg.solve(start.chol.T, rng.normal(size=(3, 1000))).T
    for rho in (0.05, 0.1):
        lw = [
            np.sum(log_weight_rows(t.family, t.y, t.trials, t.A @ x, np.full(t.n, rho))[0])
            for x in thetas
        ]
        mc = np.var(lw, ddof=1)
        pred = laplace_log_weight_var(kernel, start.mode, start.chol, rho)
        # relative sd of a sample variance of 1000 near-normal draws: sqrt(2 / 999) = 0.045
        assert abs(pred / mc - 1) < 4 * 0.045 + 0.05, (rho, pred, mc)
        # negative control: the prediction at twice this rho is far off (Var ~ rho^4)
        wrong = laplace_log_weight_var(kernel, start.mode, start.chol, 2 * rho)
        assert abs(wrong / mc - 1) > 4 * 0.045 + 0.05, (rho, wrong, mc)


def test_pilot_rho_meets_the_certificate_on_the_chain():
    """The pilot rho, computed from the Laplace approximation only, certifies the chain's weights."""
    import arviz as az

    prob = _problem("poisson", n=2000, d=3, seed=4)
    kernel = SplitGibbsKernel(prob, rho=0.5, alpha=-0.9, log_weights=True)
    rng = np.random.default_rng(5)
    start = laplace_start(kernel, np.zeros(3), rng)
    tol = 0.1
    rho = pilot_rho(kernel, start.mode, start.chol, tol)
    target_sd = np.sqrt(np.log1p(tol**2))
    pred = laplace_log_weight_var(kernel, start.mode, start.chol, rho)
    assert abs(np.sqrt(pred) / target_sd - 1) < 0.03  # the root search converged
    kernel.set_rho(rho)
    state = kernel.init(start.theta, rng)
    lw = []
    for i in range(3000):
        state, info = kernel.sweep(state, rng)
        if i >= 200:
            lw.append(info.log_weight)
    lw = np.asarray(lw)
    ess = float(az.ess(lw[None, :]))
    # the sample sd of ess roughly independent normals has relative sd 1 / sqrt(2 ess);
    # 0.1 more for the second-order expansion and the Laplace approximation of pi_rho
    rel = 1 / np.sqrt(2 * ess)
    sd = lw.std(ddof=1)
    assert abs(sd / target_sd - 1) < 4 * rel + 0.1, (rho, sd, target_sd, ess)
    # negative control: a pilot aimed at a 2x looser tolerance fails the same check
    loose = pilot_rho(kernel, start.mode, start.chol, 2 * tol)
    assert loose > 1.3 * rho


def _poisson_model(n=5000, seed=0):
    rng = np.random.default_rng(seed)
    d = 5
    X = np.column_stack([np.ones(n), rng.standard_normal((n, d - 1)) / 2])
    beta = 0.5 * rng.standard_normal(d)
    beta[0] = 0.5
    y = rng.poisson(np.exp(X @ beta))
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=d)
        pm.Poisson("y", mu=pm.math.exp(X @ b), observed=y)
    return model


def _tuning_run(init, seed=1):
    with _poisson_model(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pm.sample(
            draws=50,
            tune=400,
            chains=1,
            cores=1,
            random_seed=seed,
            step=pymc_sgs.SplitGibbs(init=init),
            progressbar=False,
            compute_convergence_checks=False,
            discard_tuned_samples=False,
        )


def test_laplace_start_keeps_rho_auto_from_collapsing():
    """Regression: started at PyMC's initial point, rho='auto' read the drift towards the
    posterior as bias and shrank rho far below the certified value (Poisson n=1e5: 0.0024
    with sd(log w) 0.01 against a target of 0.1). rho='auto' now comes from the Laplace
    approximation, whatever the chain's start: the same rho with init='point' as with the
    Laplace start, and the certificate holds on the kept draws."""
    good = _tuning_run("laplace")
    bad = _tuning_run("point")
    rho_good = float(good.sample_stats["rho"].values[0, 0])
    rho_bad = float(bad.sample_stats["rho"].values[0, 0])
    # the first tuning draw of the Laplace start is already inside the posterior
    first = good.warmup_posterior["b"].values[0, 0]
    kept = good.posterior["b"].values[0]
    assert np.all(np.abs(first - kept.mean(0)) < 5 * kept.std(0) + 0.02), (first, kept.mean(0))
    assert rho_good == rho_bad, (rho_good, rho_bad)
    for run in (good, bad):
        lw = run.sample_stats["log_weight"].values[0]
        lw = lw[np.isfinite(lw)]
        assert np.sqrt(np.expm1(np.var(lw, ddof=1))) < 0.15, np.std(lw)


def test_init_is_checked_at_construction():
    with _poisson_model(n=50):
        with pytest.raises(ValueError, match="init must be 'laplace' or 'point'; received 'map'"):
            pymc_sgs.SplitGibbs(init="map")
