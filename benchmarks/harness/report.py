"""Report of ``compare.py``: versions and git commit, the markdown table, the targets, the plot."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import numpy as np

from . import ROOT
from .cases import CASES, case_label
from .runner import NUTS_VARIANTS, SAMPLERS


def git_commit() -> str:
    """Short hash of the checkout's HEAD ("unknown" outside git)."""
    try:
        return subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except Exception:  # noqa: BLE001
        return "unknown"


def versions(extra: str = "") -> str:
    """Python, numpy, scipy, pymc, pytensor, arviz[, extra] and pymc_sgs (git commit)."""
    import arviz
    import pymc
    import pytensor
    import scipy

    import pymc_sgs

    return (
        f"python {platform.python_version()}, numpy {np.__version__}, scipy {scipy.__version__}, "
        f"pymc {pymc.__version__}, pytensor {pytensor.__version__}, arviz {arviz.__version__}, "
        + (f"{extra}, " if extra else "")
        + f"pymc_sgs {pymc_sgs.__version__} (git {git_commit()})"
    )


def env_info():
    """(versions line, PyTensor backend line) of the results header."""
    import pytensor

    try:
        import nutpie

        nutpie_v = nutpie.__version__
    except Exception:  # noqa: BLE001
        nutpie_v = "not installed"
    try:
        import polyagamma

        pg_v = polyagamma.__version__
    except Exception:  # noqa: BLE001
        pg_v = "not installed"
    blas = pytensor.config.blas__ldflags
    backend = (
        f"PyTensor mode={pytensor.config.mode}, linker={pytensor.config.linker}, "
        f"cxx={pytensor.config.cxx or '(none)'}, blas__ldflags={blas!r}"
        + (
            " -> NOT linked to a BLAS: PyTensor's dot products opt out of C code and fall back "
            "to NumPy-based implementations (NumPy's bundled BLAS, with Python-level call "
            "overhead and extra copies), which slows PyMC NUTS"
            if not blas
            else " -> linked to a BLAS"
        )
        + "; nutpie compiles the model with its numba backend (independent of blas__ldflags)"
    )
    return versions(f"nutpie {nutpie_v}, polyagamma {pg_v}"), backend


def fmt(v, nd=0):
    if v is None or not np.isfinite(v):
        return "-"
    if abs(v) >= 100 or nd == 0:
        return f"{v:.0f}"
    return f"{v:.{nd}f}"


def fmt_sig(v):
    if v is None or not np.isfinite(v):
        return "-"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


COLUMNS_DOC = """## Columns

- min ESS: minimum over the coefficients of ArviZ bulk ESS of the kept draws (max R-hat shown
  when > 1.01); in parentheses the minimum tail ESS (of the 5% and 95% quantiles), which
  anti-correlated draws (NUTS, SplitGibbs's over-relaxed shift move) do not inflate.
- wall s (setup): wall time of the whole `pm.sample` call (PG: of its pool of chain processes;
  Laplace-MH: its step's construction included), including model compilation/setup and
  tuning; in parentheses the part outside PyMC's `sampling_time` (PyTensor compilation,
  SplitGibbs's graph detection and Cholesky factorisation, the Laplace approximation,
  nutpie's numba compilation, process start-up; PG: outside its slowest chain's loop;
  Laplace-PSIS: everything but drawing and weighting).
- CPU s: CPU time of the sampler's process and its joined children (all threads), same span.
- ESS/s (tail) = min bulk ESS (min tail ESS) / wall s, setup included; ESS/s excl. setup: the
  same over wall s minus setup (PyMC's `sampling_time`: tuning + draws).
- Laplace-PSIS: `chains x draws` independent draws from the Laplace approximation, weighted
  by exact posterior / proposal and Pareto-smoothed (`az.psislw`); its bulk and tail ESS are
  both the Kish ESS of the smoothed weights, its bias uses weighted means; k-hat in the last
  column (> 0.7: unreliable). Laplace-MH: acceptance rate and the tuned pCN persistence beta.
- ÷ best NUTS = that over the best ESS/s of NUTS, nutpie and
  nutpie-lr on the same case; tail ÷ best NUTS = the same ratio for the tail ESS.
- max |mean − ref|/sd: max over coefficients of |posterior mean − reference mean| / reference
  sd; in parentheses its Monte Carlo error sqrt(MCSE^2 + MCSE_ref^2)/sd at that coefficient.
  For SplitGibbs it is the rho-bias (it samples pi_rho, not pi) plus MC noise; the max over d
  coefficients of pure noise is about 2-3 MC errors.
- peak MB (+Δ): peak total PSS (proportional set size, so pages shared after fork count once)
  of the worker's process group, i.e. the sampler's process plus its chain processes/threads,
  sampled every 0.2 s; Δ = above the worker's PSS just before the call (after imports and data
  generation).
- ms/iter: PyMC's `sampling_time` (tuning + draws, chains in parallel) per iteration: the
  cost of one SGS sweep / one NUTS trajectory of one chain.
- SGS rho [sd(w̃)]: tuned rho per chain (rho="auto" tunes each chain separately) and, in
  brackets, the sd of the normalised importance weights pi/pi_rho over the kept draws, per
  chain: the bias certificate (no posterior expectation is off by more than about sd(w̃)
  posterior sds; target bias_tol = 0.1); z-acc = mean acceptance of the over-relaxed z-moves.
  NUTS variants: mean leapfrog steps per draw (= gradient evaluations), divergences."""


def table_rows(case_results: list[dict]) -> list[str]:
    lines = [
        "| case | sampler | min ESS (tail) | wall s (setup) | CPU s | ESS/s (tail) "
        "| ESS/s excl. setup (tail) | ÷ best NUTS | tail ÷ best NUTS "
        "| max \\|mean − ref\\|/sd (MC err) | peak MB (+Δ) | ms/iter "
        "| SGS rho [sd(w̃)] / NUTS steps / MH acc. / PSIS k-hat |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    blank = " | | | | | | | | | |"
    for cr in case_results:
        label = case_label(cr["case"])
        if cr.get("skip"):
            lines.append(f"| {label} | all | {cr['skip']} |" + blank)
            continue
        if CASES[cr["case"]].get("cap") and (cr["tune"], cr["draws"]) == CASES[cr["case"]]["cap"]:
            label += f" (capped: {cr['tune']}+{cr['draws']} iter.)"
        best = max(
            (r["m"]["ess_per_s"] for r in cr["runs"] if r["sampler"] in NUTS_VARIANTS and "m" in r),
            default=np.nan,
        )
        best_tail = max(
            (
                r["m"]["tail_per_s"]
                for r in cr["runs"]
                if r["sampler"] in NUTS_VARIANTS and "m" in r
            ),
            default=np.nan,
        )
        for r in cr["runs"]:
            s = r["sampler"]
            if "skipped" in r:
                lines.append(f"| {label} | {s} | skipped: {r['skipped']} |" + blank)
                continue
            if "timeout" in r:
                lines.append(
                    f"| {label} | {s} | timeout: killed after {r['timeout']:.0f} s |" + blank
                )
                continue
            if "error" in r:
                last = r["error"].strip().splitlines()[-1][:150].replace("|", "/")
                lines.append(f"| {label} | {s} | error: {last} |" + blank)
                continue
            m = r["m"]
            setup = r["wall"] - r["sampling_time"]
            ratio = m["ess_per_s"] / best if np.isfinite(best) else np.nan
            tail_ratio = m["tail_per_s"] / best_tail if np.isfinite(best_tail) else np.nan
            if "sd_w" in r:
                extra = (
                    "rho "
                    + "/".join(f"{v:.3g}" for v in r["rho"])
                    + " ["
                    + "/".join(f"{v:.2f}" for v in r["sd_w"])
                    + "]"
                    + f", z-acc {r['z_accept']:.2f}"
                )
            elif s in NUTS_VARIANTS:
                extra = f"{r['n_steps']:.1f} steps" + (
                    f", {r['divergences']} div." if r["divergences"] else ""
                )
            elif "accept" in r:
                extra = f"acc. {r['accept']:.2f}, beta " + "/".join(f"{v:g}" for v in r["mh_beta"])
            elif s == "Laplace-PSIS":
                extra = f"k-hat {r['khat']:.2f}"
            else:
                extra = ""
            rhat = (
                f" (R-hat {m['rhat']:.2f})" if np.isfinite(m["rhat"]) and m["rhat"] > 1.01 else ""
            )
            bias = "-" if not np.isfinite(m["bias"]) else f"{m['bias']:.3f} ({m['bias_se']:.3f})"
            lines.append(
                f"| {label} | {s} | {fmt(m['min_ess'])} ({fmt(m['min_tail_ess'])}){rhat} "
                f"| {r['wall']:.1f} ({setup:.1f}) "
                f"| {r['cpu']:.0f} | {fmt_sig(m['ess_per_s'])} ({fmt_sig(m['tail_per_s'])}) "
                f"| {fmt_sig(m['ess_per_s_run'])} ({fmt_sig(m['tail_per_s_run'])}) "
                f"| {fmt_sig(ratio)} "
                f"| {fmt_sig(tail_ratio)} | {bias} "
                f"| {r['mem_peak_mb']:.0f} (+{r['mem_peak_mb'] - r['mem_base_mb']:.0f}) "
                f"| {m['ms_iter']:.2f} | {extra} |"
            )
    return lines


def targets(case_results: list[dict]) -> list[str]:
    def ratios(kind_pred, key="ess_per_s"):
        out = []
        for cr in case_results:
            if cr.get("skip") or not kind_pred(cr["case"]):
                continue
            runs = {r["sampler"]: r for r in cr["runs"] if "m" in r}
            best = max((runs[s]["m"][key] for s in NUTS_VARIANTS if s in runs), default=np.nan)
            if "SGS" in runs and np.isfinite(best):
                out.append((cr["case"], runs["SGS"]["m"][key] / best))
            elif any(r["sampler"] == "SGS" for r in cr["runs"]):
                out.append((cr["case"], np.nan))
        return out

    lines = []
    ill = ratios(lambda c: CASES[c]["kind"] == "illcond")
    well = ratios(lambda c: CASES[c]["kind"] in ("logistic", "poisson"))
    for title, rs, thr in (
        ("ill-conditioned logistic: SplitGibbs ESS/s >= 5x best NUTS", ill, 5.0),
        ("well-conditioned: >= 1x", well, 1.0),
    ):
        if not rs:
            lines.append(f"- {title}: not measured (no such case run)")
            continue
        vals = ", ".join(f"{c} {v:.2f}x" for c, v in rs)
        ok = all(np.isfinite(v) and v >= thr for _, v in rs)
        lines.append(f"- {title}: measured {vals} -> **{'PASS' if ok else 'FAIL'}**")
    for sgs, what in (("SGS", "SplitGibbs"), ("SGS-rho0", "SplitGibbs(rho=0)")):
        for key, how in (("ess_per_s", "setup included"), ("ess_per_s_run", "without setup")):
            vs = []
            for cr in case_results:
                runs = {r["sampler"]: r for r in cr.get("runs", []) if "m" in r}
                if sgs in runs and "Laplace-MH" in runs:
                    vs.append(
                        f"{cr['case']} {runs[sgs]['m'][key] / runs['Laplace-MH']['m'][key]:.2f}x"
                    )
            if vs:
                lines.append(
                    f"- issue 23 target 1: {what} min bulk ESS/s >= the exact Laplace-MH "
                    f"baseline's ({how}): " + ", ".join(vs)
                )
    for key, how in (("ess_per_s", "setup included"), ("ess_per_s_run", "without setup")):
        vs = []
        for cr in case_results:
            runs = {r["sampler"]: r for r in cr.get("runs", []) if "m" in r}
            best = max((runs[s]["m"][key] for s in NUTS_VARIANTS if s in runs), default=np.nan)
            if "SGS-rho0" in runs and np.isfinite(best):
                vs.append(f"{cr['case']} {runs['SGS-rho0']['m'][key] / best:.2f}x")
        if vs:
            lines.append(
                f"- issue 23 target 1: SplitGibbs(rho=0) min bulk ESS/s >= 5x the best NUTS "
                f"variant's ({how}): " + ", ".join(vs)
            )
    tail = ratios(lambda c: True, key="tail_per_s")
    if tail:
        lines.append(
            "- (not a target; for reading the bulk ratios) tail ESS/s, SplitGibbs / best "
            "NUTS: " + ", ".join(f"{c} {v:.2f}x" for c, v in tail)
        )
    sgs = [
        (cr["case"], r)
        for cr in case_results
        if not cr.get("skip")
        for r in cr["runs"]
        if r["sampler"] == "SGS" and "m" in r and np.isfinite(r["m"]["bias"])
    ]
    if sgs:
        worst_c, worst = max(sgs, key=lambda t: t[1]["m"]["bias"])
        n_sig = sum(r["m"]["n_sig"] for _, r in sgs)
        if worst["m"]["bias"] <= 0.1:
            verdict = "PASS"
        elif n_sig == 0:
            verdict = (
                "FAIL on the point estimate, but not significant: no coefficient exceeds "
                "0.1 sd by more than 3 MC errors"
            )
        else:
            verdict = "FAIL"
        vals = ", ".join(f"{c} {r['m']['bias']:.3f} ± {r['m']['bias_se']:.3f}" for c, r in sgs)
        # the default makes no split where rho=0 applies: no weights, no certificate
        certs = [max(r["sd_w"]) for _, r in sgs if "sd_w" in r]
        cert = f"{max(certs):.2f}" if certs else "0 (no split)"
        lines.append(
            f"- at bias <= 0.1 posterior sd: SplitGibbs max_j |mean_j - ref_j|/sd_j per case: "
            f"{vals}; max {worst['m']['bias']:.3f} ({worst_c}); coefficients exceeding 0.1 sd by "
            f"> 3 MC errors: {n_sig}; largest certificate sd(w̃) {cert} -> **{verdict}**"
        )
    return lines


def plot(case_results: list[dict], path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if any(CASES[cr["case"]]["kind"] != "logistic" for cr in case_results):
        return _bar_plot(case_results, path, plt)
    ds = sorted(
        {CASES[cr["case"]]["d"] for cr in case_results if CASES[cr["case"]]["kind"] == "logistic"}
    )
    if not ds:
        return False
    fig, axes = plt.subplots(1, len(ds), figsize=(5.5 * len(ds), 4.2), squeeze=False)
    markers = dict(zip(SAMPLERS, "os^vDPXh*"))
    for ax, d in zip(axes[0], ds):
        crs = sorted(
            (
                cr
                for cr in case_results
                if CASES[cr["case"]]["kind"] == "logistic"
                and CASES[cr["case"]]["d"] == d
                and not cr.get("skip")
            ),
            key=lambda cr: CASES[cr["case"]]["n"],
        )
        for s in SAMPLERS:
            pts = [
                (CASES[cr["case"]]["n"], r["m"]["ess_per_s"])
                for cr in crs
                for r in cr["runs"]
                if r["sampler"] == s and "m" in r
            ]
            if pts:
                ax.plot(*zip(*pts), marker=markers[s], label=s)
        skipped = [
            CASES[cr["case"]]["n"]
            for cr in case_results
            if CASES[cr["case"]]["kind"] == "logistic"
            and CASES[cr["case"]]["d"] == d
            and cr.get("skip")
        ]
        for n in skipped:
            ax.axvline(n, color="grey", ls=":", lw=1)
            ax.text(
                n,
                0.95,
                " skipped",
                transform=ax.get_xaxis_transform(),
                fontsize=8,
                color="grey",
                va="top",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("n (observations)")
        ax.set_ylabel("min bulk ESS / wall s (incl. setup + tuning)")
        ax.set_title(f"well-conditioned logistic regression, d = {d}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def _bar_plot(case_results: list[dict], path: Path, plt) -> bool:
    """Min bulk ESS/s (setup included; tail ESS/s hatched beside it) of every sampler, grouped
    by case: for runs whose cases are not one scaling series."""
    cases = [cr for cr in case_results if not cr.get("skip")]
    samplers = [s for s in SAMPLERS if any(r["sampler"] == s for cr in cases for r in cr["runs"])]
    if not cases or not samplers:
        return False
    fig, ax = plt.subplots(figsize=(max(6.0, 2.2 * len(cases)), 4.4))
    width = 0.8 / len(samplers)
    for k, s in enumerate(samplers):
        bulk, tail = [], []
        for cr in cases:
            r = next((r for r in cr["runs"] if r["sampler"] == s and "m" in r), None)
            bulk.append(r["m"]["ess_per_s"] if r else np.nan)
            tail.append(r["m"]["tail_per_s"] if r else np.nan)
        x = np.arange(len(cases)) + (k - (len(samplers) - 1) / 2) * width
        ax.bar(x, bulk, width * 0.95, label=s)
        ax.scatter(x, tail, marker="_", s=150, color="black", zorder=3)
    ax.set_xticks(np.arange(len(cases)))
    ax.set_xticklabels([cr["case"] for cr in cases])
    ax.set_yscale("log")
    ax.set_ylabel("min ESS / wall s (incl. setup + tuning)\nbars: bulk, dashes: tail")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
