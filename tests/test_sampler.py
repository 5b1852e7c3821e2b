"""Whole-chain tests of SplitGibbs inside ``pm.sample`` against exact answers.

Tolerances are in Monte Carlo standard errors (ArviZ ``mcse``) computed from
the same run; seeds are fixed and were not searched. A z-score threshold of
4.5 per coordinate gives a false-failure rate below ~1e-4 per test under a
correct sampler. Each closed-form check has a negative control: the same
draws compared with a wrong target must fail the same check.
"""

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest

import pymc_sgs

from .posteriordb_cases import build_model, load_reference

Z_MAX = 4.5


def _sample(model, step_kwargs, **kwargs):
    kwargs.setdefault("progressbar", False)
    kwargs.setdefault("compute_convergence_checks", False)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = pymc_sgs.SplitGibbs(**step_kwargs)
        return pm.sample(step=step, **kwargs)


def _flat_draws(idata, name):
    v = idata.posterior[name].values
    return v.reshape(v.shape[0], v.shape[1], -1)


def _mcse(x, method):
    return float(np.ravel(az.mcse(np.asarray(x), method=method))[0])


def _zscores(idata, name, mean, sd):
    """z-scores of posterior mean and sd against exact values, per coordinate."""
    draws = _flat_draws(idata, name)
    z_mean, z_sd = [], []
    for j in range(draws.shape[-1]):
        x = draws[..., j]
        m_se = _mcse(x, "mean")
        s_se = _mcse(x, "sd")
        z_mean.append((x.mean() - mean[j]) / m_se)
        z_sd.append((x.std(ddof=1) - sd[j]) / s_se)
    return np.array(z_mean), np.array(z_sd)


# ---------------------------------------------------------------- closed form
def _gaussian_glm(seed=3, n=40, d=3, sigma=1.0, prior_sd=2.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ np.array([1.0, -0.5, 0.3]) + sigma * rng.normal(size=n)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, prior_sd, shape=d)
        pm.Normal("y", mu=X @ beta, sigma=sigma, observed=y)
    return model, X, y, sigma, prior_sd


def _gaussian_posterior(X, y, noise_var, prior_sd):
    Q = np.eye(X.shape[1]) / prior_sd**2 + X.T @ X / noise_var
    cov = np.linalg.inv(Q)
    return cov @ (X.T @ y / noise_var), np.sqrt(np.diag(cov))


@pytest.mark.parametrize("alpha", [0.0, -0.9])
def test_split_gaussian_matches_closed_form_pi_rho(alpha):
    # Normal likelihood forced to be split: pi_rho is y_i ~ N(x_i beta, sigma^2 + rho^2)
    model, X, y, sigma, prior_sd = _gaussian_glm()
    rho = 0.8
    idata = _sample(
        model,
        dict(rho=rho, alpha=alpha, split_gaussian=True),
        draws=3000,
        tune=300,
        chains=2,
        random_seed=11,
    )
    mean, sd = _gaussian_posterior(X, y, sigma**2 + rho**2, prior_sd)
    z_mean, z_sd = _zscores(idata, "beta", mean, sd)
    assert np.all(np.abs(z_mean) < Z_MAX), z_mean
    assert np.all(np.abs(z_sd) < Z_MAX), z_sd
    # Gaussian potentials: the over-relaxed z-move is exact, never rejected
    # (on the draws that made a sweep: sweep_every="auto" leaves the others to the shift move)
    swept = idata.sample_stats["swept"].values == 1
    np.testing.assert_allclose(idata.sample_stats["z_accept"].values[swept], 1.0)

    # negative control: the same draws are not the unsplit posterior (rho = 0)
    mean0, sd0 = _gaussian_posterior(X, y, sigma**2, prior_sd)
    z_mean0, z_sd0 = _zscores(idata, "beta", mean0, sd0)
    assert np.max(np.abs(np.concatenate([z_mean0, z_sd0]))) > Z_MAX


def test_unsplit_normal_likelihood_is_exact():
    # Normal-identity terms go into the theta-step: the chain targets pi itself
    model, X, y, sigma, prior_sd = _gaussian_glm(seed=5)
    idata = _sample(model, dict(rho=5.0), draws=2000, tune=100, chains=2, random_seed=2)
    mean, sd = _gaussian_posterior(X, y, sigma**2, prior_sd)
    z_mean, z_sd = _zscores(idata, "beta", mean, sd)
    assert np.all(np.abs(z_mean) < Z_MAX), z_mean
    assert np.all(np.abs(z_sd) < Z_MAX), z_sd


# ---------------------------------------------------------------- posteriordb
def _compare_to_reference(idata, case, mean_tol, sd_tol):
    """Mismatches of posterior means (in reference sd) and sds against posteriordb.

    Asserts first that the run's Monte Carlo error is well below ``mean_tol``,
    so that a pass or a fail says something about the target, not the noise.
    """
    _, mapping = build_model(case)
    ref = load_reference(case)
    failures = []
    for stan_name, (var, idx) in mapping.items():
        x = idata.posterior[var].values
        x = x[..., idx] if idx is not None else x
        mu, sd = ref[stan_name]
        assert _mcse(x, "mean") / sd < mean_tol / 3, (stan_name, _mcse(x, "mean") / sd)
        dmean, sdr = (x.mean() - mu) / sd, x.std() / sd
        if abs(dmean) >= mean_tol or (sd_tol is not None and abs(sdr - 1) >= sd_tol):
            failures.append((stan_name, round(dmean, 3), round(sdr, 3)))
    return failures


def test_dogs_logistic_matches_posteriordb():
    model, _ = build_model("dogs-dogs")
    idata = _sample(
        model,
        dict(rho=0.1, alpha=-0.99, log_weights=False),
        draws=10000,
        tune=500,
        chains=4,
        cores=1,
        random_seed=20,
    )
    assert _compare_to_reference(idata, "dogs-dogs", mean_tol=0.2, sd_tol=0.15) == []


@pytest.mark.parametrize("case", ["nes1992-nes", "kidiq-kidscore_interaction"])
def test_normal_glm_with_nuts_sigma_matches_posteriordb(case):
    model, _ = build_model(case)
    idata = _sample(model, dict(rho=0.1), draws=1500, tune=500, chains=2, random_seed=4)
    assert "sigma" in idata.posterior
    assert _compare_to_reference(idata, case, mean_tol=0.1, sd_tol=0.1) == []


def test_reference_check_detects_wrong_posterior():
    # negative control for the posteriordb comparison: a run at large rho (pi_rho far
    # from pi) is precise enough for the check, and the check rejects it
    model, _ = build_model("dogs-dogs")
    idata = _sample(model, dict(rho=1.5), draws=3000, tune=300, chains=2, random_seed=20)
    assert _compare_to_reference(idata, "dogs-dogs", mean_tol=0.2, sd_tol=0.15) != []


# ------------------------------------------------------------ reproducibility
def _logistic_model(seed=0, n=200, d=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = rng.binomial(1, 1 / (1 + np.exp(-(0.2 + X @ np.array([1.0, -1.0, 0.5])))))
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 2.5, shape=d)
        alpha = pm.Normal("alpha", 0, 5)
        pm.Bernoulli("y", logit_p=alpha + X @ beta, observed=y)
    return model


@pytest.mark.parametrize(
    "mp_ctx, step_kwargs",
    [
        ("fork", dict(rho=0.3)),
        ("spawn", dict(rho=0.3)),
        ("fork", dict()),
        ("fork", dict(rho="tuned")),
        ("fork", dict(rho="tuned", exact=True)),
    ],
    # the default rho="auto" skips the split on this model; "tuned" sets the split's rho
    ids=["fork", "spawn", "fork-auto-rho", "fork-tuned-rho", "fork-exact"],
)
def test_same_seed_same_draws_for_any_cores(mp_ctx, step_kwargs):
    model = _logistic_model()
    kw = dict(draws=50, tune=60, chains=2, random_seed=123)
    a = _sample(model, step_kwargs, cores=1, **kw)
    b = _sample(model, step_kwargs, cores=2, mp_ctx=mp_ctx, **kw)
    c = _sample(model, step_kwargs, cores=1, **kw)
    for name in ("beta", "alpha"):
        np.testing.assert_array_equal(a.posterior[name].values, b.posterior[name].values)
        np.testing.assert_array_equal(a.posterior[name].values, c.posterior[name].values)
    # chains differ (each has its own Generator), and stats are recorded
    assert not np.array_equal(a.posterior["alpha"].values[0], a.posterior["alpha"].values[1])
    for stat in ("rho", "z_proposals", "z_accept"):
        assert stat in a.sample_stats


def test_different_seed_different_draws():
    model = _logistic_model()
    kw = dict(draws=20, tune=5, chains=1, cores=1)
    a = _sample(model, dict(rho=0.3), random_seed=1, **kw)
    b = _sample(model, dict(rho=0.3), random_seed=2, **kw)
    assert not np.array_equal(a.posterior["beta"].values, b.posterior["beta"].values)


def test_plain_sgs_reports_rejection_proposals():
    model = _logistic_model()
    idata = _sample(model, dict(rho=1.0, alpha=0.0), draws=30, tune=5, chains=1, random_seed=1)
    props = idata.sample_stats["z_proposals"].values
    # logistic: U'' <= 1/4, so proposals per draw lie in [1, sqrt(1 + rho^2 / 4)] on average
    assert np.all(props >= 1.0) and np.all(props < 1.3)
