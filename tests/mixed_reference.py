"""Long-run nutpie posterior references for Bambi mixed models.

The JSON files ``tests/data/mixed_ref_<name>.json`` are produced by
``tests/data/make_mixed_references.py`` (names: ``cbpp``, ``sleepstudy``,
``contraception``).  Labels follow ``az.summary``: common coefficients
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
NAMES = ("cbpp", "sleepstudy", "contraception")


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
