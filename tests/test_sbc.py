"""Simulation-based calibration (Talts et al. 2018) of SplitGibbs through ``pm.sample``.

Slow (excluded by default; ``pytest -m slow tests/test_sbc.py``): 200 simulated data sets per
case, about 8 minutes on 2 idle cores. The machinery (simulation, sampling, ESS thinning,
ranks, chi-square test) lives in ``benchmarks/sbc.py``, whose module docstring describes the
cases; ``python benchmarks/sbc.py`` runs the same thing and writes the rank histograms.

Threshold fixed in advance: a case is calibrated when the chi-square uniformity p-value of the
ranks of *each* of its d = 2 coefficients exceeds ``P_MIN = 1e-3`` (20 fixed bins of 5 ranks).
Under a correct sampler each calibrated-case test fails with probability <= 2e-3. The seeds
(``SEED``) were fixed before the first run and not searched.

Negative control: the same SBC of the Poisson model with a deliberately wrong sampler
(``SplitGibbs(rho=1.0)`` without exact correction: pi_rho at rho = 1 shifts the intercept by
about -rho^2 / 2) must be rejected (some p < P_MIN).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

# appended, not prepended: benchmarks/ holds distributed.py, which must not shadow the dask
# package in processes spawned later in the same test run (they inherit sys.path)
sys.path.append(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
)

import sbc  # noqa: E402  (benchmarks/sbc.py)

N_SIMS = 200
SEED = 2018
WORKERS = max(1, min(2, os.cpu_count() or 1))

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def executor():
    with sbc.make_executor(WORKERS) as ex:
        yield ex


def _run(case, executor):
    res = sbc.run_sbc(case, N_SIMS, seed=SEED, workers=WORKERS, executor=executor)
    assert res["ranks"].shape == (N_SIMS, 2)
    assert np.all((res["ranks"] >= 0) & (res["ranks"] <= sbc.L))
    assert res["n_bins"] == 20
    return res


@pytest.mark.parametrize("case", ["logistic_exact", "logistic_default", "poisson_tuned"])
def test_sbc_ranks_are_uniform(case, executor):
    res = _run(case, executor)
    assert sbc.CASES[case]["negative"] is False
    assert np.all(res["pvalues"] > sbc.P_MIN), res["pvalues"]
    if case == "logistic_exact":
        # exact mode really ran: the pi-correction accepted some, not all, proposals
        acc = np.array([r["exact_accept"] for r in res["reps"]])
        assert np.all(np.isfinite(acc)) and 0.2 < acc.mean() < 1.0, acc.mean()


def test_sbc_rejects_uncorrected_large_rho(executor):
    res = _run("poisson_rho1_uncorrected", executor)
    assert sbc.CASES["poisson_rho1_uncorrected"]["negative"] is True
    assert np.min(res["pvalues"]) < sbc.P_MIN, res["pvalues"]
    ok, _ = sbc.verdict(res)
    assert ok


def test_uniformity_test_on_synthetic_ranks():
    # fast sanity of the chi-square helper itself (runs with -m slow, with the rest of the file)
    rng = np.random.default_rng(0)
    uniform = rng.integers(0, sbc.L + 1, size=(N_SIMS, 2))
    assert np.all(sbc.uniformity_pvalues(uniform, 20) > sbc.P_MIN)
    peaked = np.clip(np.round(rng.normal(sbc.L / 2, 15, size=(N_SIMS, 2))), 0, sbc.L)
    assert np.all(sbc.uniformity_pvalues(peaked, 20) < sbc.P_MIN)
