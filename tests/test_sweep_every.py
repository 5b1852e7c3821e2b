"""sweep_every: draws made by the shift move alone between sweeps (pymc_sgs.step)."""

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

import pymc_sgs
from pymc_sgs.rho import RhoTuner
from pymc_sgs.step import AUTO_SWEEP_EVERY

from .test_sampler import _gaussian_glm
from .test_sampler import _gaussian_posterior as _posterior
from .test_shift import _logistic_model

Z_MAX = 4.5


def _sample(model, draws=500, tune=500, chains=2, seed=1, **kw):
    # the sweeps are the split model's: rho="tuned" unless a test fixes rho (the default
    # rho="auto" makes no sweeps on these logistic regressions)
    kw.setdefault("rho", "tuned")
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pm.sample(
            draws=draws,
            tune=tune,
            chains=chains,
            cores=1,
            random_seed=seed,
            step=pymc_sgs.SplitGibbs(**kw),
            progressbar=False,
            compute_convergence_checks=False,
        )


def _z_scores(idata, mean, sd):
    x = idata.posterior["beta"].values
    ess = az.ess(idata, var_names=["beta"])["beta"].values
    z_mean = (x.mean((0, 1)) - mean) / (sd / np.sqrt(ess))
    z_sd = (x.std((0, 1)) - sd) / (sd / np.sqrt(2 * ess))
    return np.concatenate([z_mean, z_sd])


def test_draws_between_sweeps_keep_the_split_model():
    # Normal likelihood forced to be split: pi_rho is y_i ~ N(x_i beta, sigma^2 + rho^2),
    # sampled with one sweep every 4 draws (the shift move alone in between)
    model, X, y, sigma, prior_sd = _gaussian_glm(n=60)
    rho = 0.8
    idata = _sample(model, draws=3000, tune=300, rho=rho, split_gaussian=True, sweep_every=4)
    swept = idata.sample_stats["swept"].values
    # the sweep schedule counts tuning draws too: 300 = 4 * 75, so draws 0, 4, 8, ...
    np.testing.assert_array_equal(swept, np.tile(np.arange(3000) % 4 == 0, (2, 1)))
    # weights and z-move stats on the swept draws only
    lw = idata.sample_stats["log_weight"].values
    assert np.all(np.isfinite(lw[swept == 1])) and np.all(np.isnan(lw[swept == 0]))
    assert np.all(np.isnan(idata.sample_stats["z_accept"].values[swept == 0]))
    z = _z_scores(idata, *_posterior(X, y, sigma**2 + rho**2, prior_sd))
    assert np.all(np.abs(z) < Z_MAX), z
    # negative control: the same draws are not the unsplit posterior
    z0 = _z_scores(idata, *_posterior(X, y, sigma**2, prior_sd))
    assert np.max(np.abs(z0)) > Z_MAX, z0


def test_auto_thins_the_sweeps_once_the_shift_move_is_accepted():
    model = _logistic_model(n=3000, d=5)
    idata = _sample(model, draws=400, tune=400, rho="tuned")
    swept = idata.sample_stats["swept"].values
    # after tuning the schedule is fixed: every AUTO_SWEEP_EVERY-th draw
    assert AUTO_SWEEP_EVERY > 1
    assert np.all(swept.sum(axis=1) == 400 // AUTO_SWEEP_EVERY), swept.sum(axis=1)
    assert np.nanmean(idata.sample_stats["shift_accept"].values) > 0.5
    # the draws between sweeps are as good as swept ones: ESS per draw above 1 (the
    # over-relaxed shift move), and the same means as without thinning within MC error
    every = _sample(model, draws=400, tune=400, rho="tuned", sweep_every=1)
    assert np.all(every.sample_stats["swept"].values == 1)
    assert az.ess(idata).b.values.min() > 800
    a, b = idata.posterior.b.values, every.posterior.b.values
    for j in range(a.shape[-1]):
        mcse = np.hypot(float(az.mcse(a[..., j])), float(az.mcse(b[..., j])))
        assert abs(a[..., j].mean() - b[..., j].mean()) < 4 * mcse, j
    # rho='auto' still certified: the tuner's windows span draws, not weights
    rho = idata.sample_stats["rho"].values[:, -1]
    rho_every = every.sample_stats["rho"].values[:, -1]
    assert np.all(np.abs(np.log(rho / rho_every.mean())) < 0.3), (rho, rho_every)
    # without the shift move every draw is a sweep
    plain = _sample(model, draws=50, tune=50, rho=0.3, shift=False)
    assert np.all(plain.sample_stats["swept"].values == 1)


def test_rho_tuner_windows_count_draws_without_a_sweep():
    # the same weights, every 4th draw swept: windows end after the same number of draws,
    # and with every draw swept the tuner is unchanged
    rng = np.random.default_rng(0)
    weights = rng.normal(0.0, 0.3, size=2000)
    full, thinned, ends_full, ends_thin = RhoTuner(1.0), RhoTuner(1.0), [], []
    for i, w in enumerate(weights):
        if full.update(w) is not None:
            ends_full.append(i)
        if thinned.update(w, swept=i % 4 == 0) is not None:
            ends_thin.append(i)
    assert ends_thin == ends_full and len(ends_full) >= 8
    # the thinned windows estimate the same variance from a quarter of the weights
    assert abs(np.log(thinned.rho / full.rho)) < 0.1, (thinned.rho, full.rho)
    # a draw whose sweep gave no weight (nan) does not count
    t = RhoTuner(1.0)
    assert all(t.update(float("nan")) is None for _ in range(100)) and t.n_windows == 0


def test_sweep_every_is_checked():
    model = _logistic_model(n=50)
    with model:
        for bad in (0, -2, 2.5, "often", True, None):
            with pytest.raises(ValueError, match="sweep_every must be 'auto' or a positive"):
                pymc_sgs.SplitGibbs(sweep_every=bad)
        with pytest.raises(ValueError, match="sweep_every=3 needs the shift move.*shift=False"):
            pymc_sgs.SplitGibbs(sweep_every=3, shift=False)
        with pytest.raises(ValueError, match="sweep_every=2 needs the shift move.*exact=True"):
            pymc_sgs.SplitGibbs(sweep_every=2, exact=True)
        # 1 is always allowed
        pymc_sgs.SplitGibbs(sweep_every=1, shift=False)
    # a pm.Categorical likelihood has its own step, without the shift move
    rng = np.random.default_rng(0)
    with pm.Model():
        B = pm.Normal("B", 0, 1, shape=(2, 2))
        eta = pm.math.dot(rng.normal(size=(20, 2)), pt.concatenate([pt.zeros((2, 1)), B], axis=1))
        pm.Categorical("y", logit_p=eta, observed=rng.integers(0, 3, 20))
        pymc_sgs.SplitGibbs(sweep_every=1)
        with pytest.raises(ValueError, match="sweep_every=3 needs the shift move.*Categorical"):
            pymc_sgs.SplitGibbs(sweep_every=3)


@pytest.mark.parametrize("strides", [(1, 1), (4, 4), (1, 4)])
def test_psis_with_weights_on_different_draws_per_chain(strides):
    # draws of N(0, 1) with log weights x: the tilted target is N(1, 1). Chains whose
    # weights sit on different schedules (sweep_every="auto" may settle on different strides
    # per chain) are each normalised to count equally
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 4000))
    lw = x.copy()
    for c, k in enumerate(strides):
        lw[c, np.arange(4000) % k != 0] = np.nan
    idata = az.from_dict(posterior={"m": x}, sample_stats={"log_weight": lw})
    w, khat = pymc_sgs.psis_weights(idata)
    w = w.reshape(2, 4000)
    assert np.all(w[np.isnan(lw)] == 0) and w.sum() == pytest.approx(1.0)
    df = pymc_sgs.psis_summary(idata, warn=False)
    n_weighted = np.isfinite(lw).sum()
    # MC error of a self-normalised estimate with weight ESS n_weighted * weight_ess
    err = 1.0 / np.sqrt(n_weighted * df.attrs["weight_ess"])
    assert abs(df.loc["m", "mean"] - 1.0) < 4 * err, (df.loc["m", "mean"], err)
    assert abs(df.loc["m", "sd"] - 1.0) < 4 * err
    # the uncorrected mean is that of N(0, 1): the check can fail
    assert abs(df.loc["m", "mean_rho"] - 1.0) > 10 * err
    # a chain with no weight at all is an error
    lw[1] = np.nan
    with pytest.raises(ValueError, match="a chain has no importance weight"):
        pymc_sgs.psis_weights(az.from_dict(posterior={"m": x}, sample_stats={"log_weight": lw}))
