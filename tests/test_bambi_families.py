"""Bambi models with a categorical predictor and a group-specific intercept, one per family,
sampled with ``pm.sample(step=SplitGibbs())`` on ``model.backend.model``.

By default the two families with nuisance parameters (negativebinomial: alpha; t: nu and
sigma) are built and sampled briefly; the slow tests compare all six families against NUTS.
"""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pandas as pd
import pymc as pm
import pytest

import pymc_sgs

bmb = pytest.importorskip("bambi")

FAMILIES = {
    "bernoulli": "yb",
    "binomial": "p(k, n)",
    "poisson": "count",
    "negativebinomial": "nb",
    "gaussian": "yg",
    "t": "yt",
}
#: value variables SplitGibbs owns besides the coefficients
NUISANCE = {"negativebinomial": {"alpha_log__"}, "t": {"nu_log__", "sigma_log__"}}
COMMON = ["Intercept", "x", "cat"]


@pytest.fixture(scope="module")
def df():
    rng = np.random.default_rng(17)
    n, G = 150, 5
    d = pd.DataFrame(
        {
            "x": rng.normal(size=n),
            "cat": rng.choice(["a", "b", "c"], n),
            "g": rng.choice([f"g{i}" for i in range(G)], n),
        }
    )
    u = rng.normal(0.0, 0.5, G)
    eta = (
        0.3
        + 0.5 * d["x"]
        + d["cat"].map({"a": 0.0, "b": 0.4, "c": -0.3})
        + u[d["g"].str[1:].astype(int)]
    ).to_numpy()
    p = 1.0 / (1.0 + np.exp(-eta))
    d["yb"] = (rng.random(n) < p).astype(int)
    d["n"] = 5
    d["k"] = rng.binomial(5, p)
    d["count"] = rng.poisson(np.exp(eta))
    d["nb"] = rng.negative_binomial(3.0, 3.0 / (3.0 + np.exp(eta)))
    d["yg"] = eta + rng.normal(0.0, 1.0, n)
    d["yt"] = eta + 0.5 * rng.standard_t(4.0, n)
    return d


def bambi_model(family, df):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = bmb.Model(
            f"{FAMILIES[family]} ~ x + cat + (1|g)", df, family=family, noncentered=False
        )
        model.build()
    return model.backend.model


@pytest.mark.parametrize("family", ["negativebinomial", "t"])
def test_bambi_family_builds_and_samples(family, df):
    pm_model = bambi_model(family, df)
    with pm_model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = pymc_sgs.SplitGibbs(rho=0.1)
        owned = {v.name for v in step.vars}
        assert {"Intercept", "x", "cat", "1|g"} | NUISANCE[family] == owned
        (term,) = step.detected.problem.split_terms
        assert term.family.name == {"t": "studentt"}.get(family, family)
        idata = pm.sample(
            step=step,
            draws=30,
            tune=20,
            chains=1,
            cores=1,
            random_seed=5,
            progressbar=False,
            compute_convergence_checks=False,
        )
    for v in COMMON + ["1|g"]:
        assert np.all(np.isfinite(idata.posterior[v].values))
    # the nuisance parameters move (they are updated by SplitGibbs)
    nuis = "alpha" if family == "negativebinomial" else "nu"
    assert np.unique(idata.posterior[nuis].values).size > 20


@pytest.mark.slow
@pytest.mark.parametrize("family", list(FAMILIES))
def test_bambi_family_matches_nuts(family, df):
    pm_model = bambi_model(family, df)
    common = dict(chains=2, cores=1, progressbar=False, compute_convergence_checks=False)
    with pm_model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sgs = pm.sample(
            step=pymc_sgs.SplitGibbs(rho=0.05), draws=4000, tune=500, random_seed=1, **common
        )
        ref = pm.sample(draws=1500, tune=1000, random_seed=2, **common)
    for v in COMMON:
        s, r = sgs.posterior[v], ref.posterior[v]
        diff = np.abs(s.mean(("chain", "draw")) - r.mean(("chain", "draw"))).values.ravel()
        mcse = np.hypot(
            az.mcse(sgs, var_names=[v])[v].values, az.mcse(ref, var_names=[v])[v].values
        ).ravel()
        sd = r.std(("chain", "draw")).values.ravel()
        assert np.all(diff < 4 * mcse + 0.1 * sd), (v, diff, mcse, sd)
