"""Draw the figures of the docs from the committed benchmark results.

Reads the results table of ``benchmarks/results/mixing.md`` (written by
``benchmarks/mixing.py``) and writes ``docs/_static/mixing.png``: integrated
autocorrelation time (IAT) against rho for plain and over-relaxed SGS, and
the rho-bias of the posterior mean against rho. No sampling happens here.

Run after re-running the benchmark, and commit the PNG::

    python docs/make_figures.py
    python docs/make_figures.py --table benchmarks/results/mixing.md --output docs/_static/mixing.png
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "benchmarks" / "results" / "mixing.md"
OUTPUT = Path(__file__).resolve().parent / "_static" / "mixing.png"


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
            ax_iat.plot(rho[lower], iat[lower], linestyle="none", marker="^", markersize=10,
                        markerfacecolor="white", color=st["color"])
    # guide lines through the measurements at the largest rho: plain SGS ~ 1/rho^2, over-relaxed ~ 1/rho
    rho_max = max(r["rho"] for r in rows)
    grid = np.geomspace(min(r["rho"] for r in rows), rho_max, 50)
    for a, power, text in ((0.0, 2, "1/rho^2"), (min(alphas), 1, "1/rho")):
        top = [r for r in rows if r["alpha"] == a and r["rho"] == rho_max]
        if top and a in styles:
            ax_iat.plot(grid, top[0]["iat"] * (rho_max / grid) ** power, color=styles[a]["color"],
                        linestyle="--", linewidth=1, alpha=0.7, label=f"slope {text}")
    ax_iat.set_xscale("log")
    ax_iat.set_yscale("log")
    ax_iat.set_xlabel("rho")
    ax_iat.set_ylabel("IAT (draws per effective draw, bulk)")
    ax_iat.set_title("Mixing: IAT against rho")
    ax_iat.grid(True, which="both", alpha=0.3)
    ax_iat.plot([], [], linestyle="none", marker="^", markerfacecolor="white", color="tab:gray",
                label="lower bound (chain too short)")
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
        ax_bias.errorbar(rho[ok], bias[ok], yerr=err[ok], color=st["color"], marker=st["marker"],
                         linestyle="none", capsize=3, alpha=0.8, label=label)
    ref = max(rows, key=lambda r: r["rho"])
    grid = np.geomspace(min(r["rho"] for r in rows), ref["rho"], 50)
    ax_bias.plot(grid, ref["bias"] * (grid / ref["rho"]) ** 2, color="black", linestyle="--",
                 linewidth=1, label="slope rho^2 (through the largest rho)")
    ax_bias.axhline(0.1, color="tab:red", linestyle=":", linewidth=1,
                    label="bias_tol = 0.1 (default of rho='auto')")
    ax_bias.set_xscale("log")
    ax_bias.set_yscale("log")
    ax_bias.set_xlabel("rho")
    ax_bias.set_ylabel("max_j |mean_SGS - mean_NUTS| / sd_NUTS")
    ax_bias.set_title("Bias of the posterior mean against rho")
    ax_bias.grid(True, which="both", alpha=0.3)
    ax_bias.legend(fontsize=8)
    fig.suptitle("Logistic regression, n = 10^4, d = 10 (benchmarks/results/mixing.md)", fontsize=10)

    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    # no software/date metadata, so that an unchanged table gives an unchanged file
    fig.savefig(output, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return output


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", type=Path, default=TABLE, help="mixing results (markdown)")
    p.add_argument("--output", type=Path, default=OUTPUT, help="PNG to write")
    args = p.parse_args(argv)
    out = draw(parse_mixing_table(args.table), args.output)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
