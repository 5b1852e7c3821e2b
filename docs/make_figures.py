"""Draw the figures of the docs into ``docs/_static/`` (PNG, 100-110 dpi).

Four figures; ``--only`` picks some of them:

``mixing``  (no sampling, < 5 s)
    Reads the results table of ``benchmarks/results/mixing.md`` (written by
    ``benchmarks/mixing.py``) and writes ``mixing.png``: integrated autocorrelation time
    (IAT) against rho for plain and over-relaxed SGS, and the rho-bias of the posterior
    mean against rho (docs/how_it_works.rst, docs/performance.rst).
``compare``  (no sampling, instant)
    Copies ``benchmarks/results/compare_ess_per_s.png`` (drawn by ``benchmarks/compare.py``
    with ``benchmarks/results/compare.md``) to ``compare_ess_per_s.png``. After a new
    ``compare.py`` run, update the sentence of ``docs/performance.rst`` that names the run.
``quickstart``  (samples; 15-40 s)
    The logistic regression of ``examples/quickstart.py`` (n = 2000, d = 5 + intercept,
    4 chains x (1000 tuning + 1000 draws), ``random_seed=1``) sampled with
    ``SplitGibbs()`` and with PyMC's NUTS; writes ``quickstart_trace.png``
    (``az.plot_trace``) and ``quickstart_rank.png`` (``az.plot_rank``), SplitGibbs left,
    NUTS right (docs/quickstart.rst).
``rho``  (samples; 35-60 s, plus the NUTS run of ``quickstart`` if drawn alone)
    The same model with ``SplitGibbs`` at fixed ``rho=r`` for r in {0.05, 0.1, 0.2, 0.4,
    0.7, 1.0}, a sweep (and so a weight) on every draw, 2 chains x (1000 + 1000) each,
    against the NUTS run above as reference; writes ``rho_weights.png``: the normalised importance weights
    pi/pi_rho, their sd and the Pareto k-hat of ``pymc_sgs.psis_summary``, and the bias of
    the raw and of the PSIS-corrected posterior means, all against rho
    (docs/rho_and_bias.rst).

Times are wall times on a shared 2-core machine with ``OMP_NUM_THREADS=1``: all four took
65-80 s (80 s at a load average of 5). The sampling is seeded, chains run one after the
other, and the PNGs carry no date, so a re-run with the same versions writes the same files
byte for byte. Run after re-running a benchmark or changing the sampler, look at the PNGs, and
commit them::

    OMP_NUM_THREADS=1 python docs/make_figures.py                 # all four
    python docs/make_figures.py --only mixing compare             # no sampling
    python docs/make_figures.py --only mixing --table benchmarks/results/mixing.md --output docs/_static/mixing.png
"""

from __future__ import annotations

import argparse
import re
import shutil
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "benchmarks" / "results" / "mixing.md"
STATIC = Path(__file__).resolve().parent / "_static"
OUTPUT = STATIC / "mixing.png"
COMPARE_PNG = ROOT / "benchmarks" / "results" / "compare_ess_per_s.png"
FIGURES = ("mixing", "compare", "quickstart", "rho")
#: the fixed rho values of the rho figure
RHOS = (0.05, 0.1, 0.2, 0.4, 0.7, 1.0)
DPI = 100


def _number(cell: str):
    """``'>364'`` -> (364.0, True); ``'14.4'`` -> (14.4, False); anything else -> (None, False)."""
    cell = cell.strip()
    lower_bound = cell.startswith(">")
    m = re.fullmatch(r">?\s*([0-9.]+)", cell)
    return (float(m.group(1)), lower_bound) if m else (None, False)


def parse_mixing_table(path: Path = TABLE) -> list[dict]:
    """Rows of the ``## Results`` table of mixing.md (SGS rows only, NUTS row dropped).

    Each row: ``rho``, ``alpha`` (0.0 for plain), ``iat`` and ``iat_lower_bound``
    (the table's ``>`` marks), ``bias`` and ``bias_err`` (max_j |mean_SGS - mean_NUTS|
    / sd_NUTS and its Monte Carlo error).
    """
    text = Path(path).read_text()
    try:
        section = text.split("## Results", 1)[1]
    except IndexError:
        raise ValueError(f"{path}: no '## Results' section") from None
    lines = []
    for ln in section.strip().splitlines():  # the first contiguous block of table lines
        if ln.startswith("|"):
            lines.append(ln)
        elif lines:
            break
    if len(lines) < 3:
        raise ValueError(f"{path}: no table under '## Results'")
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    col = {name: i for i, name in enumerate(header)}
    for needed in ("rho", "alpha", "IAT (bulk)", "bias of mean (sd units)"):
        if needed not in col:
            raise ValueError(f"{path}: results table has no column {needed!r} (header: {header})")
    rows = []
    for line in lines[2:]:  # skip header and the |---| line
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rho, _ = _number(cells[col["rho"]])
        if rho is None:  # the NUTS reference row
            continue
        alpha_cell = cells[col["alpha"]]
        alpha = 0.0 if alpha_cell.startswith("0") else float(alpha_cell)
        iat, lower = _number(cells[col["IAT (bulk)"]])
        bias_cell = cells[col["bias of mean (sd units)"]]
        bias, _, err = bias_cell.partition("±")
        rows.append(
            dict(
                rho=rho,
                alpha=alpha,
                iat=iat,
                iat_lower_bound=lower,
                bias=float(bias),
                bias_err=float(err) if err.strip() else float("nan"),
            )
        )
    if not rows:
        raise ValueError(f"{path}: the results table has no SGS rows")
    return rows


def draw(rows: list[dict], output: Path = OUTPUT) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    alphas = sorted({r["alpha"] for r in rows}, reverse=True)  # 0 (plain) first
    styles = {0.0: dict(color="tab:gray", marker="s")}
    palette = iter(["tab:orange", "tab:green", "tab:blue", "tab:red", "tab:purple"])
    for a in alphas:
        styles.setdefault(a, dict(color=next(palette), marker="o"))

    fig, (ax_iat, ax_bias) = plt.subplots(1, 2, figsize=(10, 4.2), constrained_layout=True)
    for a in alphas:
        sel = sorted((r for r in rows if r["alpha"] == a), key=lambda r: r["rho"])
        rho = np.array([r["rho"] for r in sel])
        iat = np.array([r["iat"] for r in sel])
        lower = np.array([r["iat_lower_bound"] for r in sel])
        label = "plain SGS (alpha = 0)" if a == 0.0 else f"over-relaxed, alpha = {a:g}"
        st = styles[a]
        ax_iat.plot(rho, iat, color=st["color"], marker=st["marker"], label=label)
        if lower.any():  # measured values are lower bounds: open markers with an arrow up
            ax_iat.plot(
                rho[lower],
                iat[lower],
                linestyle="none",
                marker="^",
                markersize=10,
                markerfacecolor="white",
                color=st["color"],
            )
    # guide lines through the measurements at the largest rho: plain SGS ~ 1/rho^2, over-relaxed ~ 1/rho
    rho_max = max(r["rho"] for r in rows)
    grid = np.geomspace(min(r["rho"] for r in rows), rho_max, 50)
    for a, power, text in ((0.0, 2, "1/rho^2"), (min(alphas), 1, "1/rho")):
        top = [r for r in rows if r["alpha"] == a and r["rho"] == rho_max]
        if top and a in styles:
            ax_iat.plot(
                grid,
                top[0]["iat"] * (rho_max / grid) ** power,
                color=styles[a]["color"],
                linestyle="--",
                linewidth=1,
                alpha=0.7,
                label=f"slope {text}",
            )
    ax_iat.set_xscale("log")
    ax_iat.set_yscale("log")
    ax_iat.set_xlabel("rho")
    ax_iat.set_ylabel("IAT (draws per effective draw, bulk)")
    ax_iat.set_title("Mixing: IAT against rho")
    ax_iat.grid(True, which="both", alpha=0.3)
    ax_iat.plot(
        [],
        [],
        linestyle="none",
        marker="^",
        markerfacecolor="white",
        color="tab:gray",
        label="lower bound (chain too short)",
    )
    ax_iat.legend(fontsize=8)

    # the bias is a property of pi_rho, not of alpha: every alpha estimates the same number
    for k, a in enumerate(alphas):
        sel = sorted((r for r in rows if r["alpha"] == a), key=lambda r: r["rho"])
        # small horizontal offsets keep the error bars of the alphas apart
        rho = np.array([r["rho"] for r in sel]) * 1.03 ** (k - (len(alphas) - 1) / 2)
        bias = np.array([r["bias"] for r in sel])
        err = np.array([r["bias_err"] for r in sel])
        ok = ~np.array([r["iat_lower_bound"] for r in sel])  # MC error unreliable otherwise
        label = "plain SGS" if a == 0.0 else f"alpha = {a:g}"
        st = styles[a]
        ax_bias.errorbar(
            rho[ok],
            bias[ok],
            yerr=err[ok],
            color=st["color"],
            marker=st["marker"],
            linestyle="none",
            capsize=3,
            alpha=0.8,
            label=label,
        )
    ref = max(rows, key=lambda r: r["rho"])
    grid = np.geomspace(min(r["rho"] for r in rows), ref["rho"], 50)
    ax_bias.plot(
        grid,
        ref["bias"] * (grid / ref["rho"]) ** 2,
        color="black",
        linestyle="--",
        linewidth=1,
        label="slope rho^2 (through the largest rho)",
    )
    ax_bias.axhline(
        0.1,
        color="tab:red",
        linestyle=":",
        linewidth=1,
        label="bias_tol = 0.1 (default of rho='auto')",
    )
    ax_bias.set_xscale("log")
    ax_bias.set_yscale("log")
    ax_bias.set_xlabel("rho")
    ax_bias.set_ylabel("max_j |mean_SGS - mean_NUTS| / sd_NUTS")
    ax_bias.set_title("Bias of the posterior mean against rho")
    ax_bias.grid(True, which="both", alpha=0.3)
    ax_bias.legend(fontsize=8)
    fig.suptitle(
        "Logistic regression, n = 10^4, d = 10 (benchmarks/results/mixing.md)", fontsize=10
    )

    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    # no software/date metadata, so that an unchanged table gives an unchanged file
    fig.savefig(output, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return output


def copy_compare_figure(
    source: Path = COMPARE_PNG, output: Path = STATIC / "compare_ess_per_s.png"
) -> Path:
    """Copy the ESS/s plot of ``benchmarks/compare.py`` into the docs' static files."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, output)
    return output


# -- sampled figures ---------------------------------------------------------------------------


def _quickstart_data():
    """The data of ``examples/quickstart.py`` (same generator, same seed)."""
    import numpy as np

    rng = np.random.default_rng(42)
    n, d = 2000, 5
    X = rng.normal(size=(n, d))
    true_beta = np.array([1.0, -0.5, 0.25, 0.0, 0.8])
    y = rng.binomial(1, 1.0 / (1.0 + np.exp(-(0.3 + X @ true_beta))))
    return X, y


def _quickstart_model():
    """The logistic regression of ``examples/quickstart.py``."""
    import pymc as pm

    X, y = _quickstart_data()
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 2.5, shape=X.shape[1])
        alpha = pm.Normal("alpha", 0.0, 5.0)
        pm.Bernoulli("y", logit_p=alpha + X @ beta, observed=y)
    return model


def _sample(step_factory=None, *, chains=4, seed=1):
    """``pm.sample`` on a fresh quickstart model, quietly, one chain after the other."""
    import pymc as pm

    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore"
        )  # PyTensor's BLAS warning, SamplerFeedbackWarning at large rho
        with _quickstart_model():
            step = step_factory() if step_factory is not None else None
            return pm.sample(
                step=step,
                chains=chains,
                cores=1,
                random_seed=seed,
                progressbar=False,
                compute_convergence_checks=False,
            )


def sample_quickstart():
    """SplitGibbs (defaults) and PyMC NUTS on the quickstart model: ``(sgs, nuts)`` InferenceData."""
    import pymc_sgs

    return _sample(pymc_sgs.SplitGibbs), _sample()


def _savefig(fig, output: Path) -> Path:
    import io

    import matplotlib.pyplot as plt
    from PIL import Image

    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    plt.close(fig)
    # a 256-colour palette keeps the files small (the traces are noise, which compresses
    # badly in RGBA); no software/date metadata, so that the same draws give the same file
    buf.seek(0)
    Image.open(buf).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(
        output, format="PNG", optimize=True
    )
    return output


def _title(name: str, idata) -> str:
    import arviz as az

    ess = az.ess(idata, method="bulk")
    min_ess = min(float(ess[v].min()) for v in ess.data_vars)
    n = idata.posterior.sizes["chain"] * idata.posterior.sizes["draw"]
    return f"{name}: min bulk ESS {min_ess:.0f} of {n} draws"


def draw_quickstart(
    sgs,
    nuts,
    trace_output: Path = STATIC / "quickstart_trace.png",
    rank_output: Path = STATIC / "quickstart_rank.png",
) -> tuple[Path, Path]:
    """Trace plots (``az.plot_trace``) and rank plots (``az.plot_rank``), SplitGibbs | NUTS."""
    import matplotlib

    matplotlib.use("Agg")
    import arviz as az
    import matplotlib.pyplot as plt

    rho = float(sgs.sample_stats["rho"].values[0, -1])
    names = (f"SplitGibbs (rho = {rho:.2f}, 'auto')", "PyMC NUTS")
    var_names = ["alpha", "beta"]

    fig = plt.figure(figsize=(12, 5), constrained_layout=True)
    for sub, name, idata in zip(fig.subfigures(1, 2, wspace=0.03), names, (sgs, nuts)):
        axes = sub.subplots(2, 2)
        az.plot_trace(idata, var_names=var_names, axes=axes, compact=True)
        axes[0, 0].set_title("alpha: density per chain", fontsize=9)
        axes[0, 1].set_title("alpha: draws of the 4 chains", fontsize=9)
        axes[1, 0].set_title("beta: 5 coefficients, one colour each", fontsize=9)
        axes[1, 1].set_title("beta: draws", fontsize=9)
        for ax in axes.flat:
            ax.tick_params(labelsize=8)
        sub.suptitle(_title(name, idata), fontsize=10)
    fig.suptitle(
        "Logistic regression of examples/quickstart.py (n = 2000, d = 5 + intercept), "
        "4 chains x 1000 draws",
        fontsize=11,
        fontweight="bold",
    )
    trace = _savefig(fig, trace_output)

    fig = plt.figure(figsize=(10, 5.2), constrained_layout=True)
    coords = {"beta_dim_0": [0]}
    for sub, name, idata in zip(fig.subfigures(1, 2, wspace=0.03), names, (sgs, nuts)):
        axes = sub.subplots(2, 1)
        az.plot_rank(idata, var_names=["alpha", "beta"], coords=coords, ax=axes)
        axes[0].set_title("alpha", fontsize=9)
        axes[1].set_title("beta[0]", fontsize=9)
        for ax in axes.flat:
            ax.tick_params(labelsize=8)
            ax.xaxis.label.set_size(9)
            ax.yaxis.label.set_size(9)
        sub.suptitle(name, fontsize=10)
    fig.suptitle(
        "Rank plots: histogram of each chain's ranks among all 4000 draws "
        "(flat bars = the chains agree)",
        fontsize=11,
        fontweight="bold",
    )
    rank = _savefig(fig, rank_output)
    return trace, rank


def _every_draw_weighted(rho):
    """``SplitGibbs`` at a fixed ``rho`` that sweeps, and so weighs, every draw."""
    import pymc_sgs

    if hasattr(pymc_sgs, "ShiftOptions"):  # the options objects of the newer API
        return pymc_sgs.SplitGibbs(rho=rho, shift=pymc_sgs.ShiftOptions(sweep_every=1))
    return pymc_sgs.SplitGibbs(rho=rho, sweep_every=1)


def sample_rho_grid(reference, rhos=RHOS, *, chains=2, seed=2) -> list[dict]:
    """SplitGibbs at fixed ``rho`` values, compared with the posterior means of ``reference``.

    Per rho: the normalised importance weights ``w`` (pi/pi_rho over their mean, all weighted
    draws), their sd, the Pareto k-hat of :func:`pymc_sgs.psis_summary`, and the largest
    error over the coefficients of the raw mean (``mean_rho``) and of the PSIS-corrected
    mean (``mean``) against ``reference``, in reference posterior sds, with the Monte Carlo
    error of the raw one.
    """
    import arviz as az
    import numpy as np

    import pymc_sgs

    ref = az.summary(reference, kind="all")
    rows = []
    for rho in rhos:
        idata = _sample(lambda: _every_draw_weighted(rho), chains=chains, seed=seed)
        psis = pymc_sgs.psis_summary(idata, warn=False)
        raw = az.summary(idata, kind="all").loc[psis.index]
        r = ref.loc[psis.index]
        lw = idata.sample_stats["log_weight"].values.ravel()
        lw = lw[np.isfinite(lw)]
        w = np.exp(lw - lw.max())
        w /= w.mean()
        rows.append(
            dict(
                rho=rho,
                weights=w,
                sd_w=float(w.std()),
                khat=float(psis.attrs["khat"]),
                bias_raw=float(np.max(np.abs(psis["mean_rho"] - r["mean"]) / r["sd"])),
                bias_corrected=float(np.max(np.abs(psis["mean"] - r["mean"]) / r["sd"])),
                mc_error=float(np.max(np.hypot(raw["mcse_mean"], r["mcse_mean"]) / r["sd"])),
            )
        )
    return rows


def draw_rho_weights(
    rows: list[dict], rho_auto: float | None = None, output: Path = STATIC / "rho_weights.png"
) -> Path:
    """Weights, their sd and k-hat, and the bias of raw and corrected means, against rho."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = sorted(rows, key=lambda r: r["rho"])
    rho = np.array([r["rho"] for r in rows])
    fig, ((ax_w, ax_s), (ax_k, ax_b)) = plt.subplots(2, 2, figsize=(11, 8), constrained_layout=True)

    # (a) the normalised weights at three rho values
    picks = [r for r in rows if r["rho"] in (0.1, 0.4, 1.0)] or rows[::2]
    colors = ["tab:green", "tab:orange", "tab:red"]
    lo, hi = 1e-4, 1e3
    bins = np.geomspace(lo, hi, 57)
    for r, c in zip(picks, colors):
        ax_w.hist(
            np.clip(r["weights"], lo, hi),
            bins=bins,
            histtype="step",
            linewidth=1.5,
            color=c,
            label=f"rho = {r['rho']:g}: largest weight {r['weights'].max():.3g}",
        )
    ax_w.axvline(1.0, color="black", linewidth=0.8, linestyle=":")
    ax_w.set_xscale("log")
    ax_w.set_yscale("log")
    ax_w.set_xlabel("normalised weight pi/pi_rho of a draw (1 = counts once; edges: clipped)")
    ax_w.set_ylabel(f"number of draws (of {picks[0]['weights'].size})")
    ax_w.set_title("(a) The importance weights spread out as rho grows", fontsize=10)
    ax_w.legend(fontsize=8, loc="upper left")

    # (b) sd of the weights: the bias certificate
    ax_s.plot(
        rho,
        [r["sd_w"] for r in rows],
        marker="o",
        color="tab:blue",
        label="sd of the normalised weights",
    )
    ax_s.axhline(
        0.1,
        color="tab:red",
        linestyle=":",
        linewidth=1,
        label="bias_tol = 0.1 (what rho='auto' aims at)",
    )
    ax_s.set_yscale("log")
    ax_s.set_ylabel("sd of the normalised weights")
    ax_s.set_title(
        "(b) Bias certificate: no expectation is off by more than\nabout sd(w) posterior sds",
        fontsize=10,
    )

    # (c) the Pareto k-hat of psis_summary
    ax_k.plot(
        rho,
        [r["khat"] for r in rows],
        marker="s",
        color="tab:purple",
        label="Pareto k-hat (psis_summary(idata).attrs['khat'])",
    )
    ax_k.axhspan(0.5, 0.7, color="tab:orange", alpha=0.15, label="0.5-0.7: slow (RhoBiasWarning)")
    ax_k.axhspan(
        0.7,
        max(1.0, max(r["khat"] for r in rows) + 0.1),
        color="tab:red",
        alpha=0.12,
        label="> 0.7: correction unreliable",
    )
    ax_k.set_ylabel("Pareto k-hat")
    ax_k.set_title("(c) Can the importance-sampling correction be trusted?", fontsize=10)

    # (d) the bias of the raw and of the corrected posterior means
    ax_b.plot(
        rho,
        [r["bias_raw"] for r in rows],
        marker="o",
        color="tab:gray",
        label="raw mean of the draws (targets pi_rho)",
    )
    ax_b.plot(
        rho,
        [r["bias_corrected"] for r in rows],
        marker="s",
        color="tab:green",
        label="PSIS-corrected mean (psis_summary 'mean')",
    )
    ax_b.fill_between(
        rho,
        1e-3,
        [2 * r["mc_error"] for r in rows],
        color="tab:gray",
        alpha=0.2,
        label="below 2 Monte Carlo errors (noise)",
    )
    ax_b.axhline(0.1, color="tab:red", linestyle=":", linewidth=1, label="0.1 posterior sd")
    ax_b.set_yscale("log")
    ax_b.set_ylim(bottom=0.01)
    ax_b.set_ylabel("max over coefficients of\n|mean - NUTS mean| / NUTS sd")
    ax_b.set_title("(d) Error of the posterior means", fontsize=10)

    for ax in (ax_s, ax_k, ax_b):
        ax.set_xscale("log")
        ax.set_xlabel("rho (fixed)")
        ax.grid(True, which="both", alpha=0.3)
        if rho_auto is not None:
            ax.axvline(
                rho_auto,
                color="black",
                linewidth=0.8,
                linestyle="-.",
                label=f"rho='auto' picks {rho_auto:.2f} here",
            )
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(
        "Logistic regression of examples/quickstart.py, SplitGibbs at fixed rho: 2 chains x "
        "1000 draws each; reference PyMC NUTS, 4 x 1000 draws",
        fontsize=11,
    )
    return _savefig(fig, output)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--only",
        nargs="+",
        choices=FIGURES,
        default=list(FIGURES),
        help="figures to draw (default: all)",
    )
    p.add_argument("--table", type=Path, default=TABLE, help="mixing results (markdown)")
    p.add_argument("--output", type=Path, default=OUTPUT, help="PNG of the mixing figure")
    args = p.parse_args(argv)
    if "mixing" in args.only:
        print(f"wrote {draw(parse_mixing_table(args.table), args.output)}")
    if "compare" in args.only:
        print(f"wrote {copy_compare_figure()}")
    if "quickstart" in args.only or "rho" in args.only:
        sgs, nuts = sample_quickstart()
        if "quickstart" in args.only:
            for out in draw_quickstart(sgs, nuts):
                print(f"wrote {out}")
        if "rho" in args.only:
            rho_auto = float(sgs.sample_stats["rho"].values[0, -1])
            print(f"wrote {draw_rho_weights(sample_rho_grid(nuts), rho_auto)}")


if __name__ == "__main__":
    main()
