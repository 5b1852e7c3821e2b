"""Importance weights pi / pi_rho and the PSIS bias correction."""

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest
from scipy.integrate import quad
from scipy.stats import norm

import pymc_sgs
from pymc_sgs.families import FAMILIES
from pymc_sgs.weights import smoothed_log_likelihood

from .posteriordb_cases import build_model, load_reference


@pytest.mark.parametrize(
    "family, y, trials, eta, rho",
    [
        ("bernoulli", 1.0, None, 0.3, 0.5),
        ("bernoulli", 0.0, None, 8.0, 3.0),
        ("binomial", 3.0, 10.0, -1.0, 0.7),
        ("poisson", 200.0, None, 4.0, 1.0),
        ("poisson", 2.0, None, 0.1, 0.3),
    ],
)
def test_smoothed_likelihood_matches_numerical_integral(family, y, trials, eta, rho):
    fam = FAMILIES[family]
    t = None if trials is None else np.array([trials])
    got, _ = smoothed_log_likelihood(fam, np.array([y]), t, np.array([eta]), rho)

    def integrand(z):
        return np.exp(fam.log_likelihood(z, y, trials)) * norm.pdf(z, eta, rho)

    exact = np.log(quad(integrand, eta - 12 * rho, eta + 12 * rho, points=[eta], limit=400)[0])
    assert abs(got[0] - exact) < 1e-4


def test_smoothed_likelihood_gaussian_closed_form():
    # Normal potential: the convolution is N(y; eta, sigma^2 + rho^2) exactly
    fam = FAMILIES["normal"]
    y, sigma, eta, rho = np.array([1.0, -2.0]), np.array([0.5, 2.0]), np.array([0.2, 0.0]), 0.8
    got, _ = smoothed_log_likelihood(fam, y, sigma, eta, rho)
    np.testing.assert_allclose(got, norm.logpdf(y, eta, np.sqrt(sigma**2 + rho**2)), atol=1e-10)


def _dogs_run(rho, seed=3, draws=4000):
    model, _ = build_model("dogs-dogs")
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pm.sample(
            draws=draws,
            tune=500,
            step=pymc_sgs.SplitGibbs(rho=rho),
            chains=2,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )


def test_psis_removes_large_rho_bias_on_dogs():
    idata = _dogs_run(rho=0.5, draws=6000)
    assert "log_weight" in idata.sample_stats
    ref = load_reference("dogs-dogs")
    with warnings.catch_warnings():
        warnings.simplefilter("error", pymc_sgs.RhoBiasWarning)  # k-hat must certify it
        df = pymc_sgs.psis_summary(idata, var_names=["beta"])
    assert df.attrs["khat"] < 0.5
    corrected, uncorrected = [], []
    for j in range(3):
        mu, sd = ref[f"beta[{j + 1}]"]
        x = idata.posterior["beta"].values[..., j]
        # Monte Carlo error of the weighted mean: the chain's, inflated by the weights' ESS
        mcse = float(np.ravel(az.mcse(x, method="mean"))[0]) / sd / np.sqrt(df.attrs["weight_ess"])
        assert mcse < 0.05, mcse
        corrected.append((df["mean"].iloc[j] - mu) / sd)
        uncorrected.append((df["mean_rho"].iloc[j] - mu) / sd)
    assert np.max(np.abs(corrected)) < 0.15, corrected
    # negative control: without the weights the same draws miss the reference
    assert np.max(np.abs(uncorrected)) > 0.15, uncorrected


def test_psis_summary_warns_when_rho_too_large():
    idata = _dogs_run(rho=4.0, seed=5, draws=600)
    with pytest.warns(pymc_sgs.RhoBiasWarning, match="k-hat"):
        df = pymc_sgs.psis_summary(idata)
    assert df.attrs["khat"] > 0.5


def test_psis_summary_needs_weights():
    model, _ = build_model("dogs-dogs")
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(
            draws=20,
            tune=5,
            chains=1,
            step=pymc_sgs.SplitGibbs(rho=0.3, log_weights=False),
            progressbar=False,
            compute_convergence_checks=False,
            random_seed=1,
        )
    with pytest.raises(ValueError, match="log_weight"):
        pymc_sgs.psis_summary(idata)


def test_psis_summary_refuses_exact_mode_draws():
    model, _ = build_model("dogs-dogs")
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(
            draws=20,
            tune=20,
            chains=1,
            step=pymc_sgs.SplitGibbs(rho=0.3, exact=True),
            progressbar=False,
            compute_convergence_checks=False,
            random_seed=1,
        )
    with pytest.raises(ValueError, match="exact"):
        pymc_sgs.psis_summary(idata)


def test_half_quadrature_rule_is_used_only_where_it_is_accurate():
    # rows with |U'''(m)| s^3 + |U''''(m)| s^4 <= NEAR_GAUSSIAN get n_nodes // 2 nodes, and <=
    # VERY_NEAR_GAUSSIAN n_nodes // 4: there the error against a 40-node reference stays below
    # 1e-8; on the other rows the smaller rules would be worse
    from pymc_sgs.conditionals import find_z_mode
    from pymc_sgs.weights import NEAR_GAUSSIAN, VERY_NEAR_GAUSSIAN, smoothed_log_likelihood

    rng = np.random.default_rng(0)
    n = 4000
    cases = [
        ("bernoulli", (rng.random(n) < 0.5).astype(float), None, rng.normal(0, 3, n)),
        ("binomial", rng.integers(0, 8, n).astype(float), np.full(n, 8.0), rng.normal(0, 2, n)),
        ("poisson", rng.poisson(5, n).astype(float), None, rng.normal(1.5, 1, n)),
        ("poisson", rng.poisson(200, n).astype(float), None, rng.normal(5.3, 0.5, n)),
    ]
    worse_elsewhere = quarter_worse_elsewhere = False
    n_quarter = 0
    for name, y, trials, eta in cases:
        fam = FAMILIES[name]
        for rho in (0.05, 0.2, 0.5, 1.0, 2.0):
            ref, _ = smoothed_log_likelihood(fam, y, trials, eta, rho, n_nodes=40)
            adaptive, _ = smoothed_log_likelihood(fam, y, trials, eta, rho, n_nodes=16)
            half, _ = smoothed_log_likelihood(
                fam, y, trials, eta, rho, n_nodes=7
            )  # < 8: fixed rule
            m = find_z_mode(fam, y, trials, eta, np.full(n, rho))
            s = 1 / np.sqrt(fam.hess(m, y, trials) + 1 / rho**2)
            u3, u4 = fam.third_fourth(m, y, trials)
            near = np.abs(u3) * s**3 + np.abs(u4) * s**4 <= NEAR_GAUSSIAN
            full16, _ = smoothed_log_likelihood(fam, y, trials, eta, rho, n_nodes=17)
            assert np.max(np.abs(adaptive - ref)[near], initial=0) < 1e-8, (name, rho)
            # rows not near-Gaussian keep the full rule: as accurate as a fixed 16+ node rule
            assert (
                np.max(np.abs(adaptive - ref)[~near], initial=0)
                <= 10 * np.max(np.abs(full16 - ref)[~near], initial=0) + 1e-12
            ), (name, rho)
            if np.any(~near) and np.max(np.abs(half - ref)[~near]) > 1e-8:
                worse_elsewhere = True
            # the quarter rule (4 nodes) on rows with kappa <= VERY_NEAR_GAUSSIAN
            kappa = np.abs(u3) * s**3 + np.abs(u4) * s**4
            very = kappa <= VERY_NEAR_GAUSSIAN
            n_quarter += int(np.sum(very))
            quarter, _ = smoothed_log_likelihood(fam, y, trials, eta, rho, n_nodes=4)
            assert np.max(np.abs(quarter - ref)[very], initial=0) < 1e-8, (name, rho)
            between = near & ~very
            if np.any(between) and np.max(np.abs(quarter - ref)[between]) > 1e-8:
                quarter_worse_elsewhere = True
    assert worse_elsewhere  # the criterion does separate rows where fewer nodes would be wrong
    assert n_quarter > 0 and quarter_worse_elsewhere  # and so does the quarter-rule threshold


def test_thinned_weights_same_draws_and_same_correction():
    # log_weights=3: the weights do not consume random numbers, so the draws are those of
    # log_weights=True; the weights are recorded at every 3rd draw after tuning, and
    # psis_summary of the thinned run equals that of the full run restricted to those draws
    rng = np.random.default_rng(1)
    X = rng.normal(size=(150, 2))
    y = rng.binomial(1, 1 / (1 + np.exp(-X @ np.array([1.0, -1.0]))))
    runs = {}
    for lw in (True, 3):
        with pm.Model():
            b = pm.Normal("b", 0.0, 2.0, shape=2)
            pm.Bernoulli("y", logit_p=X @ b, observed=y)
            # every draw swept, so that the thinning is log_weights' alone
            runs[lw] = pm.sample(
                step=pymc_sgs.SplitGibbs(rho="tuned", log_weights=lw, sweep_every=1),
                draws=300,
                tune=300,
                chains=2,
                cores=1,
                random_seed=5,
                progressbar=False,
                compute_convergence_checks=False,
            )
    full, thin = runs[True], runs[3]
    np.testing.assert_array_equal(full.posterior["b"].values, thin.posterior["b"].values)
    lw_full = full.sample_stats["log_weight"].values
    lw_thin = thin.sample_stats["log_weight"].values
    kept = np.arange(300) % 3 == 0
    assert np.all(np.isfinite(lw_thin[:, kept])) and np.all(np.isnan(lw_thin[:, ~kept]))
    np.testing.assert_array_equal(lw_thin[:, kept], lw_full[:, kept])
    s_thin = pymc_sgs.psis_summary(thin, warn=False)
    s_sub = pymc_sgs.psis_summary(full.isel(draw=np.flatnonzero(kept)), warn=False)
    np.testing.assert_allclose(
        s_thin[["mean", "sd"]].values, s_sub[["mean", "sd"]].values, rtol=1e-12
    )
    assert s_thin.attrs["khat"] == s_sub.attrs["khat"]
