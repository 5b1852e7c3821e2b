"""Benchmark data sets and their models.

``CASES`` (used by ``compare.py``) -- kind: ``"logistic"`` (X_ij ~ N(0, 1/d), beta_true ~
N(0, I)), ``"illcond"`` (equicorrelated N(0, 1) features with correlation ``corr``, beta_true ~
N(0, I/d)), ``"poisson"`` (intercept column + N(0, 1/d) features, beta_true ~ N(0, 0.5^2)),
``"dogs"`` (posteriordb's dogs, read from ``tests/data/posteriordb/dogs-dogs``). ``skip``: why
the case is not run in full mode (reported in the table); ``skip_samplers``: the same per
sampler; ``cap``: (tune, draws) used instead of the command line's; ``est_min``: estimated
minutes, for the time budget.

Also the plain logistic data of ``mixing.py`` / ``shift_mixing.py`` (:func:`logistic_data`)
and the package-level :class:`~pymc_sgs.problem.SplitProblem` of a GLM
(:func:`split_problem`), used by the kernel-level benchmarks.
"""

from __future__ import annotations

import json
import zlib

import numpy as np

from . import ROOT

DOGS_DIR = ROOT / "tests" / "data" / "posteriordb" / "dogs-dogs"

_DIAG_50 = (
    "exceeds ~10 min at 1000+1000: a 200+200 probe (same data, 2 chains) took {} s wall "
    "at {} leapfrog steps/draw (diagonal mass matrix vs. correlation 0.99); run with "
    "--run-skipped"
)
_DIAG_200 = (
    "exceeds ~10 min at 1000+1000: a 200+200 probe (same data, 2 chains) was still "
    "running when killed after 240 s; run with --run-skipped"
)

CASES = {
    "logit-1e4-10": dict(kind="logistic", n=10_000, d=10, est_min=3),
    "logit-1e4-100": dict(kind="logistic", n=10_000, d=100, est_min=4),
    "logit-1e5-10": dict(kind="logistic", n=100_000, d=10, est_min=12),
    "logit-1e5-100": dict(kind="logistic", n=100_000, d=100, cap=(500, 500), est_min=15),
    "logit-1e6-10": dict(kind="logistic", n=1_000_000, d=10, cap=(300, 300), est_min=36),
    "logit-1e6-100": dict(
        kind="logistic",
        n=1_000_000,
        d=100,
        skip="skipped: X alone is 800 MB and one gradient reads it twice; at n=1e5, d=100 "
        "PyMC NUTS already needs ~0.4 s per iteration, so every NUTS variant (and SGS, "
        "~1 s/sweep) would far exceed 10 min",
    ),
    "illcond-50": dict(
        kind="illcond",
        n=10_000,
        d=50,
        corr=0.99,
        est_min=3,
        skip_samplers={"NUTS": _DIAG_50.format(146, 255), "nutpie": _DIAG_50.format(205, 252)},
    ),
    "illcond-200": dict(
        kind="illcond",
        n=10_000,
        d=200,
        corr=0.99,
        est_min=4,
        skip_samplers={"NUTS": _DIAG_200, "nutpie": _DIAG_200},
    ),
    "poisson-1e5": dict(kind="poisson", n=100_000, d=10, est_min=8),
    "dogs": dict(kind="dogs", d=3, est_min=2),
    # Laplace-hard (issue 23 target 2): posteriors far from their Laplace approximation
    "rare-120": dict(kind="rare", n=120, d=5, est_min=2),
    "collinear-569": dict(kind="collinear", n=569, d=31, est_min=2),
    "sparse-4000": dict(kind="sparse", n=4_000, d=40, est_min=2),
    # quick mode only
    "illcond-50-n2000": dict(kind="illcond", n=2_000, d=50, corr=0.99, est_min=2),
}
# full mode, in this order (the time budget drops cases from the end)
FULL_CASES = [
    "logit-1e4-10",
    "dogs",
    "illcond-50",
    "illcond-200",
    "poisson-1e5",
    "logit-1e4-100",
    "logit-1e5-10",
    "logit-1e5-100",
    "logit-1e6-10",
    "logit-1e6-100",
]
QUICK_CASES = ["logit-1e4-10", "illcond-50-n2000", "dogs"]
PRIOR_SD = 5.0
DOGS_PRIOR_SD = 100.0


def case_label(name: str) -> str:
    c = CASES[name]
    if c["kind"] == "logistic":
        return f"logistic n={c['n']:.0e} d={c['d']}".replace("e+0", "e")
    if c["kind"] == "illcond":
        return f"ill-cond. logistic (corr {c['corr']}) n={c['n']} d={c['d']}"
    if c["kind"] == "poisson":
        return f"Poisson-log n={c['n']:.0e} d={c['d']}".replace("e+0", "e")
    if c["kind"] == "rare":
        return f"rare-event logistic n={c['n']} d={c['d']}"
    if c["kind"] == "collinear":
        return f"collinear logistic n={c['n']} d={c['d']}"
    if c["kind"] == "sparse":
        return f"sparse binary design n={c['n']} d={c['d']}"
    return "posteriordb dogs (n=750, d=3)"


def is_logistic(name: str) -> bool:
    return CASES[name]["kind"] in ("logistic", "illcond", "dogs", "rare", "collinear", "sparse")


def family_of(name: str) -> str:
    return "poisson" if CASES[name]["kind"] == "poisson" else "bernoulli"


# ------------------------------------------------------------------------ posteriordb dogs


def dogs_design(y: np.ndarray) -> np.ndarray:
    """Design matrix of the dogs model, from the (n_dogs, n_trials) 0/1 array ``y``.

    As in the Stan program, for trial t of a dog ``n_avoid`` counts its earlier trials with
    y == 0 and ``n_shock`` those with y == 1 (both 0 at t = 1). Rows are dog-major
    (``y.ravel()``).
    """
    n_shock = np.cumsum(y, axis=1) - y
    n_avoid = np.arange(y.shape[1])[None, :] - n_shock
    return np.column_stack([np.ones(y.size), n_avoid.ravel(), n_shock.ravel()]).astype(float)


def dogs_data():
    """``(X, y, prior_sd)`` of posteriordb's dogs (prior N(0, 100^2) on the 3 coefficients)."""
    with open(DOGS_DIR / "data.json") as f:
        data = json.load(f)
    y = np.asarray(data["y"], dtype=int)
    assert y.shape == (data["n_dogs"], data["n_trials"])
    return dogs_design(y), y.ravel().astype(float), DOGS_PRIOR_SD


def dogs_reference():
    """posteriordb's reference for dogs: (mean, sd) of beta[1..3] over 10000 Stan draws."""
    with open(DOGS_DIR / "reference.json") as f:
        params = json.load(f)["parameters"]
    mean = np.array([params[f"beta[{i + 1}]"]["mean"] for i in range(3)], dtype=float)
    sd = np.array([params[f"beta[{i + 1}]"]["sd"] for i in range(3)], dtype=float)
    return mean, sd


# ------------------------------------------------------------------------------- data


def make_data(name: str, data_seed: int):
    """(X, y, prior_sd) of a case; deterministic in (name, data_seed)."""
    c = CASES[name]
    if c["kind"] == "dogs":
        return dogs_data()
    n, d = c["n"], c["d"]
    rng = np.random.default_rng([data_seed, zlib.crc32(name.encode())])
    if c["kind"] == "logistic":
        X = rng.standard_normal((n, d)) / np.sqrt(d)
        beta = rng.standard_normal(d)
    elif c["kind"] == "rare":
        # about 5% events: a handful of 1s, a skewed posterior of the intercept
        X = np.column_stack([np.ones(n), rng.standard_normal((n, d - 1))])
        beta = np.r_[-3.2, 0.8, -0.5, 0.3, np.zeros(d - 4)]
    elif c["kind"] == "collinear":
        # three groups of ten predictors with correlation 0.95 within a group, and an
        # intercept (the shape of the Wisconsin breast-cancer design)
        k = (d - 1) // 3
        F = rng.standard_normal((n, 3))
        noise = rng.standard_normal((n, d - 1))
        X = np.column_stack(
            [np.ones(n), np.sqrt(0.95) * np.repeat(F, k, axis=1) + np.sqrt(0.05) * noise]
        )
        beta = np.r_[0.3, 0.6 * rng.standard_normal(d - 1)]
    elif c["kind"] == "sparse":
        # binary predictors with 3% ones, and an intercept
        X = np.column_stack([np.ones(n), (rng.random((n, d - 1)) < 0.03).astype(float)])
        beta = np.r_[-1.0, rng.standard_normal(d - 1)]
    elif c["kind"] == "illcond":
        r = c["corr"]
        X = np.sqrt(r) * rng.standard_normal((n, 1)) + np.sqrt(1 - r) * rng.standard_normal((n, d))
        beta = rng.standard_normal(d) / np.sqrt(d)
    else:  # poisson
        X = np.column_stack([np.ones(n), rng.standard_normal((n, d - 1)) / np.sqrt(d - 1)])
        beta = 0.5 * rng.standard_normal(d)
        beta[0] = 0.5
        return X, rng.poisson(np.exp(X @ beta)).astype(float), PRIOR_SD
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(X @ beta)))).astype(float)
    return X, y, PRIOR_SD


def logistic_data(n: int, d: int, seed: int):
    """Logistic regression data of ``mixing.py``: X_ij ~ N(0, 1/d), beta_true ~ N(0, 1).

    Returns ``(X, y, beta_true)``.
    """
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) / np.sqrt(d)
    beta_true = rng.standard_normal(d)
    eta = X @ beta_true
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(float)
    return X, y, beta_true


# ------------------------------------------------------------------------------ models


def glm_model(X, y, prior_sd, family: str = "bernoulli", name: str = "beta"):
    """PyMC GLM: ``name ~ N(0, prior_sd^2 I)``, y ~ Bernoulli(logit) or Poisson(log) of X beta."""
    import pymc as pm

    # X enters as a constant, not pm.Data: nutpie 0.16.8 was ~15x slower per gradient with
    # X as a shared pm.Data variable (n=2e4, d=100, measured); PyMC NUTS and SGS are unaffected
    with pm.Model() as model:
        beta = pm.Normal(name, 0.0, prior_sd, shape=X.shape[1])
        eta = pm.math.dot(X, beta)
        if family == "poisson":
            pm.Poisson("y", mu=pm.math.exp(eta), observed=np.asarray(y).astype(np.int64))
        else:
            pm.Bernoulli("y", logit_p=eta, observed=np.asarray(y).astype(np.int64))
    return model


def build_model(name: str, X, y, prior_sd):
    """The PyMC model of a case (dogs: the posteriordb translation, prior N(0, 100^2))."""
    return glm_model(X, y, prior_sd, family_of(name))


def split_problem(X, y, prior_sd: float, family: str = "bernoulli", name: str = "beta"):
    """:class:`pymc_sgs.problem.SplitProblem` of the GLM (prior N(0, prior_sd^2 I)), for the
    package's kernel used without PyMC."""
    from pymc_sgs.families import FAMILIES
    from pymc_sgs.problem import ParamSlice, SplitProblem, SplitTerm

    n, d = X.shape
    return SplitProblem(
        params=(ParamSlice(name, (d,), 0, d),),
        prior_mean=np.zeros(d),
        prior_precision=np.eye(d) / prior_sd**2,
        split_terms=(SplitTerm("y", FAMILIES[family], X, np.zeros(n), y),),
    )
