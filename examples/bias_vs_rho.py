"""The rho trade-off of SplitGibbs: bias, its PSIS correction and mixing, against rho.

SplitGibbs samples ``pi_rho``, the posterior with every likelihood term smoothed by a
``N(0, rho^2)`` kernel on the linear predictor. Small ``rho``: little bias, slower mixing.
Large ``rho``: fast mixing, visible bias, which the importance weights ``pi / pi_rho``
(``pymc_sgs.psis_summary``) can remove only while their Pareto k-hat stays small.

This script samples one logistic regression (simulated, n = 1000, 5 slopes + intercept)
with ``SplitGibbs(rho=r)`` for a grid of fixed ``r``, once with ``rho="tuned"`` (the certified split), and with NUTS
as the reference posterior, and reports for every ``r``

* bias (uncorrected)   max over coefficients of |mean_SGS - mean_NUTS| / sd_NUTS;
* bias (PSIS)          the same with the PSIS-corrected means of ``psis_summary``;
* IAT                  integrated autocorrelation time, draws / min ArviZ bulk ESS;
* k-hat, weight ESS    Pareto k-hat and Kish ESS (fraction) of the importance weights.

The bias estimates contain Monte Carlo error; the error bars are sqrt(MCSE_SGS^2 +
MCSE_NUTS^2) / sd_NUTS at the maximising coefficient, and the dotted line is the median of
that noise level over the grid (a bias below it cannot be resolved by these chains).

Figure (in ``--outdir``): ``bias_vs_rho.png``.

Run::

    python examples/bias_vs_rho.py            # 8 values of rho, 4 chains x >= 5000 draws each
    python examples/bias_vs_rho.py --quick    # 3 values of rho, short chains (smoke test)
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import arviz as az  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pymc as pm  # noqa: E402

import pymc_sgs  # noqa: E402

warnings.filterwarnings("ignore", message=".*BLAS.*")  # PyTensor without a BLAS link

DEFAULT_OUTDIR = Path(__file__).resolve().parent / "figures"
VAR_NAMES = ["intercept", "beta"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="3 values of rho, short chains")
    p.add_argument("--outdir", type=Path, default=DEFAULT_OUTDIR, help="where to write the figure")
    p.add_argument("--rho", type=float, nargs="+", default=None, help="grid of fixed rho values")
    p.add_argument("--n", type=int, default=1000, help="number of observations")
    p.add_argument("--chains", type=int, default=None)
    p.add_argument("--cores", type=int, default=None, help="passed to pm.sample")
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args(argv)


def make_model(n: int, seed: int):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 5))
    beta_true = np.array([1.0, -0.5, 0.25, 0.0, 0.8])
    y = rng.binomial(1, 1.0 / (1.0 + np.exp(-(-0.3 + X @ beta_true))))
    with pm.Model() as model:
        intercept = pm.Normal("intercept", 0.0, 5.0)
        beta = pm.Normal("beta", 0.0, 2.5, shape=5)
        pm.Bernoulli("y", logit_p=intercept + pm.math.dot(X, beta), observed=y)
    return model


def flat(summary_like: pd.DataFrame, col: str) -> np.ndarray:
    return summary_like[col].to_numpy(dtype=float)


def measure(idata, ref) -> dict:
    """Bias (uncorrected and PSIS-corrected), its MC error, IAT, k-hat of one SplitGibbs run."""
    s = az.summary(idata, var_names=VAR_NAMES, kind="all")
    ps = pymc_sgs.psis_summary(idata, var_names=VAR_NAMES, warn=False)
    # rows of az.summary and psis_summary are in the same (variable, index) order
    err_rho = np.abs(flat(ps, "mean_rho") - ref["mean"]) / ref["sd"]
    err_psis = np.abs(flat(ps, "mean") - ref["mean"]) / ref["sd"]
    noise = np.sqrt(flat(s, "mcse_mean") ** 2 + ref["mcse"] ** 2) / ref["sd"]
    n_draws = idata.posterior.sizes["chain"] * idata.posterior.sizes["draw"]
    j, k = int(np.argmax(err_rho)), int(np.argmax(err_psis))
    # MC error of the PSIS mean: inflate by the weights' ESS loss
    noise_psis = noise[k] / np.sqrt(max(ps.attrs["weight_ess"], 1e-3))
    return {
        "rho": float(np.mean(idata.sample_stats["rho"].values)),
        "bias": err_rho[j],
        "bias_mcerr": noise[j],
        "bias_psis": err_psis[k],
        "bias_psis_mcerr": noise_psis,
        "iat": n_draws / float(np.min(flat(s, "ess_bulk"))),
        "khat": ps.attrs["khat"],
        "weight_ess": ps.attrs["weight_ess"],
        "noise": float(np.median(noise)),
    }


def main(argv=None):
    args = parse_args(argv)
    args.outdir.mkdir(parents=True, exist_ok=True)
    if args.quick:
        grid = [0.1, 0.3, 1.0]
        chains, tune, draws, ref_draws = 2, 300, 1000, 1000
    else:
        grid = [0.03, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0]
        chains, tune, draws, ref_draws = 4, 1000, 5000, 5000
    grid = sorted(args.rho or grid)
    chains = args.chains or chains
    model = make_model(args.n, args.seed)
    common = dict(
        chains=chains, cores=args.cores, progressbar=False, compute_convergence_checks=False
    )

    t_start = time.perf_counter()
    with model:
        ref_idata = pm.sample(tune=1000, draws=ref_draws, random_seed=args.seed, **common)
    rs = az.summary(ref_idata, var_names=VAR_NAMES)
    ref = {"mean": flat(rs, "mean"), "sd": flat(rs, "sd"), "mcse": flat(rs, "mcse_mean")}
    print("NUTS reference posterior:")
    print(rs.to_string())

    rows = []
    for i, rho in enumerate(grid + ["tuned"]):
        # the IAT grows like 1/rho: lengthen the chains below rho = 0.1 to keep the Monte
        # Carlo error of the bias estimate comparable across the grid
        n_draws = draws if rho == "tuned" else int(draws * max(1.0, 0.1 / rho))
        with model:
            step = pymc_sgs.SplitGibbs(rho=rho)
            idata = pm.sample(
                step=step, tune=tune, draws=n_draws, random_seed=args.seed + 1 + i, **common
            )
        row = measure(idata, ref)
        row["setting"] = f"rho={rho}" if rho != "tuned" else "rho='tuned'"
        rows.append(row)
        print(
            f"{row['setting']:>12}: rho {row['rho']:.3f}  bias {row['bias']:.3f} "
            f"(PSIS {row['bias_psis']:.3f})  IAT {row['iat']:.1f}  k-hat {row['khat']:.2f}",
            flush=True,
        )
        if rho == "tuned":
            auto_idata = idata

    table = pd.DataFrame(rows).set_index("setting")
    pd.set_option("display.width", 140)
    print("\nbias in NUTS posterior sds (max over the 6 coefficients) and its Monte Carlo error")
    print(table.round(3).to_string())
    print("\nArviZ summary of the rho='tuned' run:")
    print(az.summary(auto_idata, var_names=VAR_NAMES).to_string())
    print(f"\ntotal time {time.perf_counter() - t_start:.0f} s")

    # ---------------------------------------------------------------- figure
    fixed = table.iloc[:-1]
    auto = table.iloc[-1]
    rho = fixed["rho"].to_numpy()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))

    ax = axes[0]
    ax.errorbar(
        rho,
        fixed["bias"],
        yerr=fixed["bias_mcerr"],
        marker="o",
        capsize=3,
        label="uncorrected (draws of $\\pi_\\rho$)",
    )
    ok = fixed["khat"].to_numpy() <= 0.7
    ax.errorbar(
        rho[ok],
        fixed["bias_psis"][ok],
        yerr=fixed["bias_psis_mcerr"][ok],
        marker="s",
        capsize=3,
        label="PSIS-corrected (k-hat $\\leq$ 0.7)",
    )
    if (~ok).any():
        ax.plot(
            rho[~ok],
            fixed["bias_psis"][~ok],
            "x",
            color="C1",
            ms=9,
            label="PSIS-corrected, k-hat > 0.7 (unreliable)",
        )
    # rho^2 guide through the largest-rho uncorrected point
    guide = fixed["bias"].iloc[-1] * (rho / rho[-1]) ** 2
    ax.plot(rho, guide, ":", color="grey", label="$\\propto \\rho^2$")
    ax.axhline(fixed["noise"].median(), color="k", ls="--", lw=0.8, label="Monte Carlo noise level")
    ax.axvline(auto["rho"], color="C2", lw=1, label=f"rho='tuned' chose {auto['rho']:.3f}")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="rho",
        ylabel="max |mean - mean_NUTS| / sd_NUTS",
        title="bias of the posterior means",
    )
    ax.legend(fontsize=8)

    ax = axes[1]
    ax.plot(rho, fixed["iat"], "o-", label="fixed rho")
    ax.plot([auto["rho"]], [auto["iat"]], "*", ms=14, color="C2", label="rho='tuned'")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="rho",
        ylabel="draws per effective draw",
        title="IAT (draws / min bulk ESS)",
    )
    ax.legend(fontsize=8)

    ax = axes[2]
    ax.plot(rho, fixed["khat"], "o-", label="Pareto k-hat")
    ax.plot(rho, fixed["weight_ess"], "s-", label="weight ESS (fraction of draws)")
    ax.axhline(0.7, color="C3", ls="--", lw=0.8, label="k-hat = 0.7")
    ax.axhline(0.5, color="C1", ls=":", lw=0.8, label="k-hat = 0.5")
    ax.set(xscale="log", xlabel="rho", title="importance weights $\\pi / \\pi_\\rho$")
    ax.legend(fontsize=8)

    fig.suptitle(
        f"SplitGibbs on a logistic regression (n={args.n}, d=6): the rho trade-off "
        f"({chains} chains x {draws} draws per rho, x 0.1/rho below rho = 0.1)"
    )
    fig.tight_layout()
    fig.savefig(args.outdir / "bias_vs_rho.png", dpi=100)
    plt.close(fig)
    print(f"figure written to {args.outdir / 'bias_vs_rho.png'}")


if __name__ == "__main__":
    main()
