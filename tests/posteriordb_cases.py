"""PyMC translations of a few posteriordb GLM posteriors, with their references.

The fixtures live in ``tests/data/posteriordb/<case>/`` (``data.json``,
``reference.json`` and ``model.stan``, see the README there).  Each model is a
literal translation of the Stan program: same likelihood, same priors (an
unbounded parameter without a prior is ``pm.Flat``, a ``real<lower=0>`` one
is ``pm.HalfFlat``, a normal/Cauchy prior on it is the half version).
Regressions are written as ``eta = X @ beta`` with one vector RV ``beta``,
except kilpisjarvi, which keeps Stan's two scalars ``alpha`` and ``beta``.
"""

import json
from pathlib import Path

import numpy as np
import pymc as pm

DATA_DIR = Path(__file__).parent / "data" / "posteriordb"

CASES = (
    "dogs-dogs",
    "nes1992-nes",
    "kidiq-kidscore_interaction",
    "kilpisjarvi_mod-kilpisjarvi",
    "sblrc-blr",
)


def _check_case(case):
    if case not in CASES:
        raise ValueError(f"unknown posteriordb case {case!r}; expected one of {CASES}")


def load_data(case):
    """Load the Stan data of a case.

    Parameters
    ----------
    case : str
        Posterior name, one of :data:`CASES`.

    Returns
    -------
    dict
        The parsed ``data.json``.
    """
    _check_case(case)
    with open(DATA_DIR / case / "data.json") as f:
        return json.load(f)


def load_reference(case):
    """Load the reference posterior summary of a case.

    Parameters
    ----------
    case : str
        Posterior name, one of :data:`CASES`.

    Returns
    -------
    dict of str to tuple of (float, float)
        Stan parameter name (e.g. ``"beta[1]"``, ``"sigma"``) to its
        reference posterior (mean, sd) over 10000 Stan draws.
    """
    _check_case(case)
    with open(DATA_DIR / case / "reference.json") as f:
        params = json.load(f)["parameters"]
    return {name: (float(s["mean"]), float(s["sd"])) for name, s in params.items()}


def _dogs_design(y):
    """Design matrix of the dogs model, from the (n_dogs, n_trials) 0/1 array y.

    As in the Stan program, for trial t of a dog ``n_avoid`` counts its earlier
    trials with y == 0 and ``n_shock`` those with y == 1 (both 0 at t = 1).
    Rows are ordered dog-major, like ``y.ravel()``.
    """
    n_shock = np.cumsum(y, axis=1) - y
    n_avoid = np.arange(y.shape[1])[None, :] - n_shock
    return np.column_stack([np.ones(y.size), n_avoid.ravel(), n_shock.ravel()]).astype(float)


def _vector_mapping(d, sigma):
    mapping = {f"beta[{i + 1}]": ("beta", i) for i in range(d)}
    if sigma:
        mapping["sigma"] = ("sigma", None)
    return mapping


def build_model(case):
    """Build the PyMC model equivalent to the case's Stan program.

    Parameters
    ----------
    case : str
        Posterior name, one of :data:`CASES`.

    Returns
    -------
    model : pymc.Model
        The model; the observed variable is named ``"y"``.
    mapping : dict of str to tuple of (str, int or None)
        Stan parameter name to (PyMC variable name, index into it or ``None``
        for a scalar), e.g. ``{"beta[1]": ("beta", 0), "sigma": ("sigma", None)}``.
    """
    data = load_data(case)

    if case == "dogs-dogs":
        y = np.asarray(data["y"], dtype=int)
        assert y.shape == (data["n_dogs"], data["n_trials"])
        X = _dogs_design(y)
        with pm.Model() as model:
            beta = pm.Normal("beta", 0.0, 100.0, shape=3)
            pm.Bernoulli("y", logit_p=X @ beta, observed=y.ravel())
        return model, _vector_mapping(3, sigma=False)

    if case == "nes1992-nes":
        age = np.asarray(data["age_discrete"])
        cols = [
            np.ones(data["N"]),
            data["real_ideo"],
            data["race_adj"],
            age == 2,
            age == 3,
            age == 4,
            data["educ1"],
            data["gender"],
            data["income"],
        ]
        X = np.column_stack(cols).astype(float)
        y = np.asarray(data["partyid7"], dtype=float)
        with pm.Model() as model:
            beta = pm.Flat("beta", shape=X.shape[1])
            sigma = pm.HalfFlat("sigma")
            pm.Normal("y", mu=X @ beta, sigma=sigma, observed=y)
        return model, _vector_mapping(X.shape[1], sigma=True)

    if case == "kidiq-kidscore_interaction":
        mom_hs = np.asarray(data["mom_hs"], dtype=float)
        mom_iq = np.asarray(data["mom_iq"], dtype=float)
        X = np.column_stack([np.ones(data["N"]), mom_hs, mom_iq, mom_hs * mom_iq])
        y = np.asarray(data["kid_score"], dtype=float)
        with pm.Model() as model:
            beta = pm.Flat("beta", shape=X.shape[1])
            sigma = pm.HalfCauchy("sigma", beta=2.5)
            pm.Normal("y", mu=X @ beta, sigma=sigma, observed=y)
        return model, _vector_mapping(X.shape[1], sigma=True)

    if case == "kilpisjarvi_mod-kilpisjarvi":
        x = np.asarray(data["x"], dtype=float)
        y = np.asarray(data["y"], dtype=float)
        with pm.Model() as model:
            alpha = pm.Normal("alpha", data["pmualpha"], data["psalpha"])
            beta = pm.Normal("beta", data["pmubeta"], data["psbeta"])
            sigma = pm.HalfFlat("sigma")
            pm.Normal("y", mu=alpha + beta * x, sigma=sigma, observed=y)
        mapping = {
            "alpha": ("alpha", None),
            "beta": ("beta", None),
            "sigma": ("sigma", None),
        }
        return model, mapping

    if case == "sblrc-blr":
        X = np.asarray(data["X"], dtype=float)
        y = np.asarray(data["y"], dtype=float)
        assert X.shape == (data["N"], data["D"])
        with pm.Model() as model:
            beta = pm.Normal("beta", 0.0, 10.0, shape=X.shape[1])
            sigma = pm.HalfNormal("sigma", 10.0)
            pm.Normal("y", mu=X @ beta, sigma=sigma, observed=y)
        return model, _vector_mapping(X.shape[1], sigma=True)

    _check_case(case)
    raise AssertionError(f"no model for {case!r}")  # pragma: no cover
