"""The exact baselines of ``benchmarks/compare.py`` (``benchmarks/harness``) are correct.

On a two-coefficient logistic regression whose posterior is known by quadrature (a 2-d grid):

* ``LaplaceMH`` through ``pm.sample`` matches the posterior means and sds within 4 Monte
  Carlo errors (MCSE from ArviZ);
* the negative control, the same sampler with the proposal's density left out of the
  acceptance ratio (``ratio="no_reference"``, a wrong sampler that targets about
  posterior x proposal), fails the same check;
* Laplace + PSIS's weighted means match too, with k-hat < 0.7;
* the generic (finite-difference Newton) Laplace approximation agrees with the analytic one
  that goes through the package's GLM detection.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

# appended, not prepended: benchmarks/ holds distributed.py, which must not shadow the dask
# package (see test_sbc.py)
sys.path.append(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
)

from harness.baselines import run_laplace_psis  # noqa: E402
from harness.cases import glm_model  # noqa: E402
from harness.laplace_mh import LaplaceApprox, LaplaceMH, flat_dlogp, flat_logp  # noqa: E402

PRIOR_SD = 2.0


@pytest.fixture(scope="module")
def case():
    """(X, y, quadrature mean, quadrature sd) of a small logistic regression (n = 60)."""
    rng = np.random.default_rng(7)
    n = 60
    X = np.column_stack([np.ones(n), rng.standard_normal(n)])
    y = (rng.random(n) < 1 / (1 + np.exp(-(X @ np.array([-0.5, 1.0]))))).astype(float)
    g = np.linspace(-4.0, 4.0, 801)
    B0, B1 = np.meshgrid(g, g, indexing="ij")
    eta = B0[..., None] * X[:, 0] + B1[..., None] * X[:, 1]
    lp = np.sum(y * eta - np.logaddexp(0.0, eta), axis=-1) - 0.5 * (B0**2 + B1**2) / PRIOR_SD**2
    w = np.exp(lp - lp.max())
    w /= w.sum()
    m = np.array([np.sum(w * B0), np.sum(w * B1)])
    sd = np.sqrt([np.sum(w * (B0 - m[0]) ** 2), np.sum(w * (B1 - m[1]) ** 2)])
    assert np.all(sd < 0.5)  # the grid covers the posterior
    return X, y, m, sd


def _sample(X, y, ratio, seed):
    import arviz as az
    import pymc as pm

    model = glm_model(X, y, PRIOR_SD)
    with model:
        idata = pm.sample(
            draws=2000,
            tune=300,
            chains=2,
            cores=1,
            random_seed=seed,
            step=LaplaceMH(ratio=ratio),
            progressbar=False,
            compute_convergence_checks=False,
        )
    b = idata.posterior["beta"].values
    ds = az.convert_to_dataset({"beta": b})
    mcse_mean = az.mcse(ds, method="mean")["beta"].values
    mcse_sd = az.mcse(ds, method="sd")["beta"].values
    return b.mean(axis=(0, 1)), b.std(axis=(0, 1)), mcse_mean, mcse_sd, idata


def _within(est, ref, mcse, k=4.0):
    return bool(np.all(np.abs(est - ref) <= k * mcse))


def test_laplace_mh_matches_quadrature(case):
    X, y, m, sd = case
    mean, s, mcse_m, mcse_s, idata = _sample(X, y, "exact", seed=11)
    assert _within(mean, m, mcse_m), (mean, m, mcse_m)
    assert _within(s, sd, mcse_s), (s, sd, mcse_s)
    acc = float(idata.sample_stats["accept"].mean())
    assert 0.5 < acc < 1.0
    assert set(idata.sample_stats["beta"].values.ravel()) <= {0.0, -0.3}


def test_laplace_mh_wrong_ratio_is_detected(case):
    """Negative control: without the proposal's density the sds shrink (about 1/sqrt 2)."""
    X, y, m, sd = case
    mean, s, mcse_m, mcse_s, _ = _sample(X, y, "no_reference", seed=11)
    assert not (_within(mean, m, mcse_m) and _within(s, sd, mcse_s))
    assert np.all(s < 0.85 * sd)


def test_laplace_psis_matches_quadrature(case):
    X, y, m, sd = case
    out = run_laplace_psis(glm_model(X, y, PRIOR_SD), 4000, seed=3)
    w = np.exp(out["log_w"])
    theta = out["beta"][0]
    mean = w @ theta
    mcse = np.sqrt(w @ (theta - mean) ** 2) / np.sqrt(out["ess_is"])
    assert out["khat"] < 0.7  # PSIS's reliability threshold (n = 60: a skewed posterior)
    assert out["ess_is"] > 2000
    assert _within(mean, m, mcse), (mean, m, mcse)


def test_generic_laplace_agrees_with_analytic(case):
    X, y, _, _ = case
    model = glm_model(X, y, PRIOR_SD)
    vars = model.value_vars
    logp, q0, shared = flat_logp(model, vars)
    analytic = LaplaceApprox.from_split_problem(model, vars, q0)
    generic = LaplaceApprox.from_gradient(logp, flat_dlogp(model, vars, shared), q0)
    # both Newtons stop at a squared decrement ~1e-8 to 1e-10: |mode error| ~ 1e-5 sd
    np.testing.assert_allclose(generic.mode, analytic.mode, atol=1e-4)
    np.testing.assert_allclose(generic.chol, analytic.chol, rtol=1e-4)
    # the mean correction moves the centre by a fraction of an sd, towards the quadrature mean
    assert np.all(
        np.abs(analytic.offset)
        < 0.3 * np.sqrt(np.diag(np.linalg.inv(analytic.chol @ analytic.chol.T)))
    )
