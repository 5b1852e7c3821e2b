"""Exact mode (MH correction to pi) and automatic rho."""

import warnings

import numpy as np
import pymc as pm
import pytest

import pymc_sgs
from pymc_sgs.rho import RhoTuner

from .posteriordb_cases import build_model, load_reference


def _dogs(step_kwargs, draws=2000, tune=1000, seed=3, chains=2):
    model, _ = build_model("dogs-dogs")
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pm.sample(
            draws=draws,
            tune=tune,
            step=pymc_sgs.SplitGibbs(**step_kwargs),
            chains=chains,
            cores=1,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )


def _mean_errors(idata, case="dogs-dogs"):
    """Posterior-mean errors in reference sd, and their Monte Carlo errors (same units)."""
    import arviz as az

    ref = load_reference(case)
    errs, mcses = [], []
    for j in range(idata.posterior["beta"].shape[-1]):
        mu, sd = ref[f"beta[{j + 1}]"]
        x = idata.posterior["beta"].values[..., j]
        errs.append((x.mean() - mu) / sd)
        mcses.append(float(np.ravel(az.mcse(x, method="mean"))[0]) / sd)
    return np.array(errs), np.array(mcses)


def test_exact_mode_removes_bias_at_large_rho():
    rho = 0.5
    exact = _dogs(dict(rho=rho, exact=True, exact_sweeps=5), draws=4000)
    err, mcse = _mean_errors(exact)
    assert np.all(mcse < 0.05), mcse  # precise enough for a 0.15 sd check
    assert np.max(np.abs(err)) < 0.15, err
    acc = exact.sample_stats["exact_accept"].values
    assert 0.2 < acc.mean() <= 1.0
    # negative control: the same rho without the correction is visibly biased
    plain = _dogs(dict(rho=rho, log_weights=False), draws=8000)
    err_plain, mcse_plain = _mean_errors(plain)
    assert np.all(mcse_plain < 0.05), mcse_plain
    assert np.max(np.abs(err_plain)) > 0.15, err_plain


def test_auto_rho_dogs_within_tenth_of_sd():
    idata = _dogs(dict(), draws=8000, seed=7, chains=4)
    rho = idata.sample_stats["rho"].values
    # rho is fixed after tuning, per chain, and was moved from its starting value
    assert np.all(rho == rho[:, :1])
    assert np.all(rho[:, 0] != 0.5)
    err, mcse = _mean_errors(idata)
    assert np.all(mcse < 0.1 / 3), mcse
    assert np.max(np.abs(err)) < 0.1, err


def test_rho_tuner_reaches_the_certified_rho():
    # synthetic weights with Var(log w) = c rho^4, the small-rho law; the fixed point is
    # rho* = (log(1 + tol^2) / c)^(1/4)
    rng = np.random.default_rng(0)
    c, tol = 50.0, 0.1
    tuner = RhoTuner(rho=1.0, bias_tol=tol)
    for _ in range(1000):
        tuner.update(rng.normal(0.0, np.sqrt(c) * tuner.rho**2))
    rho_star = (np.log1p(tol**2) / c) ** 0.25
    assert abs(tuner.rho / rho_star - 1) < 0.15, (tuner.rho, rho_star)
    # negative control: a tuner aiming at a 4x looser tolerance lands elsewhere
    loose = RhoTuner(rho=1.0, bias_tol=0.4)
    for _ in range(1000):
        loose.update(rng.normal(0.0, np.sqrt(c) * loose.rho**2))
    assert abs(loose.rho / rho_star - 1) > 0.5


def test_gaussian_only_model_needs_no_rho():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 2))
    y = X @ np.array([1.0, 2.0]) + rng.normal(size=30)
    with pm.Model():
        b = pm.Normal("b", 0, 10, shape=2)
        pm.Normal("y", mu=X @ b, sigma=1.0, observed=y)
        step = pymc_sgs.SplitGibbs()
        assert step.rho_tuner is None


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(bias_tol=0.0), "bias_tol"),
        (dict(bias_tol=1.5), "bias_tol"),
        (dict(exact_sweeps=0), "exact_sweeps"),
        (dict(exact=True, log_weights=False), "log_weights"),
        (dict(rho="tuned", log_weights=False), "log_weights"),
        (dict(rho="big"), "rho"),
        (dict(alpha=-1.0), "alpha"),
        (dict(alpha=1.2), "alpha"),
    ],
)
def test_bad_tuning_parameters(kwargs, match):
    model, _ = build_model("dogs-dogs")
    with model, pytest.raises(ValueError, match=match):
        pymc_sgs.SplitGibbs(**kwargs)


@pytest.mark.slow
def test_auto_rho_large_logistic_matches_nuts():
    """rho="auto" with no user tuning, n = 10^4 rows, d = 10: means within 0.1 sd of NUTS."""
    import arviz as az

    rng = np.random.default_rng(20220101)
    n, d = 10_000, 10
    X = rng.normal(size=(n, d)) / np.sqrt(d)
    y = rng.binomial(1, 1 / (1 + np.exp(-(X @ rng.normal(size=d)))))
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 5, shape=d)
        pm.Bernoulli("y", logit_p=X @ beta, observed=y)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = pm.sample(
            draws=2000,
            tune=1000,
            chains=2,
            cores=1,
            random_seed=1,
            progressbar=False,
            compute_convergence_checks=False,
        )
        idata = pm.sample(
            draws=10000,
            tune=1000,
            chains=2,
            cores=1,
            random_seed=2,
            step=pymc_sgs.SplitGibbs(),
            progressbar=False,
            compute_convergence_checks=False,
        )
    a, b = idata.posterior["beta"].values, ref.posterior["beta"].values
    for j in range(d):
        sd = b[..., j].std()
        mcse = np.hypot(
            float(np.ravel(az.mcse(a[..., j]))[0]), float(np.ravel(az.mcse(b[..., j]))[0])
        )
        assert mcse < 0.05 * sd, (j, mcse / sd)
        assert abs(a[..., j].mean() - b[..., j].mean()) < 0.1 * sd + 3 * mcse, j


def _tiny_logistic():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(100, 2))
    y = rng.binomial(1, 1 / (1 + np.exp(-X @ np.array([1.0, -1.0]))))
    with pm.Model() as model:
        b = pm.Normal("b", 0, 3, shape=2)
        pm.Bernoulli("y", logit_p=X @ b, observed=y)
    return model


def _run_tiny(step_kwargs, tune, draws):
    with _tiny_logistic():
        return pm.sample(
            draws=draws,
            tune=tune,
            chains=1,
            cores=1,
            random_seed=1,
            step=pymc_sgs.SplitGibbs(**step_kwargs),
            progressbar=False,
            compute_convergence_checks=False,
        )


def test_feedback_warns_on_short_auto_rho_tuning():
    with pytest.warns(pymc_sgs.SamplerFeedbackWarning, match="tune"):
        _run_tiny(dict(rho="tuned"), tune=30, draws=10)


def test_feedback_warns_on_hopeless_exact_mode():
    # rho far too large: the pi-correction almost never accepts
    with pytest.warns(pymc_sgs.SamplerFeedbackWarning, match="exact"):
        _run_tiny(dict(rho=20.0, exact=True, exact_sweeps=2), tune=20, draws=210)


def test_no_feedback_warning_when_healthy():
    # negative control for the two tests above
    with warnings.catch_warnings():
        warnings.simplefilter("error", pymc_sgs.SamplerFeedbackWarning)
        _run_tiny(dict(rho="tuned"), tune=600, draws=210)
