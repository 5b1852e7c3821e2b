"""Logistic regression on scikit-learn's breast cancer data: SplitGibbs against NUTS.

The Wisconsin diagnostic breast cancer data (569 tumours, 30 features computed from
cell-nucleus images) ships with scikit-learn. We model the probability that a tumour is
malignant with a Bernoulli-logit likelihood on the first ``--n-features`` standardised
features (default 10: the "mean ..." features, several of which are strongly correlated,
e.g. mean radius, perimeter and area) and Normal priors, then sample the posterior

* with ``pymc_sgs.SplitGibbs()`` (default ``rho="auto"``, which here makes no split: the
  shift move samples the posterior itself, exactly), and
* with PyMC's NUTS, as a reference.

Figures (in ``--outdir``):

* ``breast_cancer_trace.png``   ArviZ trace plot of the SplitGibbs draws;
* ``breast_cancer_rank.png``    ArviZ rank plot of the SplitGibbs draws (uniform bars = good mixing);
* ``breast_cancer_forest.png``  94% HDIs of SplitGibbs and NUTS side by side.

It also prints both ArviZ summaries and ``pymc_sgs.psis_summary`` (without a split its
corrected columns are the plain ones and its Pareto k-hat is -inf; with ``rho="tuned"`` they
are the bias-corrected means and the k-hat of the importance weights pi / pi_rho).

Run::

    python examples/breast_cancer_logistic.py            # 4 chains x 4000 draws (NUTS: x 1000)
    python examples/breast_cancer_logistic.py --quick    # short chains (smoke test)
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
import pymc as pm  # noqa: E402
from sklearn.datasets import load_breast_cancer  # noqa: E402

import pymc_sgs  # noqa: E402

warnings.filterwarnings("ignore", message=".*BLAS.*")  # PyTensor without a BLAS link

DEFAULT_OUTDIR = Path(__file__).resolve().parent / "figures"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="short chains (smoke test)")
    p.add_argument("--outdir", type=Path, default=DEFAULT_OUTDIR, help="where to write the figures")
    p.add_argument("--n-features", type=int, default=10, help="use the first k of the 30 features")
    p.add_argument(
        "--prior-sd", type=float, default=2.5, help="sd of the Normal prior of the slopes"
    )
    p.add_argument("--chains", type=int, default=None)
    p.add_argument("--cores", type=int, default=None, help="passed to pm.sample")
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args(argv)


def load_data(n_features: int):
    data = load_breast_cancer()
    X = data.data[:, :n_features]
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    y = 1 - data.target  # sklearn codes benign as 1; model P(malignant)
    names = [str(f).replace(" ", "_") for f in data.feature_names[:n_features]]
    return X, y.astype(np.int64), names


def build_model(X, y, names, prior_sd):
    with pm.Model(coords={"feature": names}) as model:
        intercept = pm.Normal("intercept", 0.0, 5.0)
        beta = pm.Normal("beta", 0.0, prior_sd, dims="feature")
        pm.Bernoulli("malignant", logit_p=intercept + pm.math.dot(X, beta), observed=y)
    return model


def main(argv=None):
    args = parse_args(argv)
    args.outdir.mkdir(parents=True, exist_ok=True)
    if args.quick:
        # SplitGibbs sweeps are cheap but more autocorrelated than NUTS draws: run more of them
        chains, tune, draws, nuts_tune, nuts_draws = 2, 500, 1000, 300, 300
    else:
        chains, tune, draws, nuts_tune, nuts_draws = 4, 1000, 4000, 1000, 1000
    chains = args.chains or chains

    X, y, names = load_data(args.n_features)
    print(
        f"breast cancer data: n={X.shape[0]} tumours ({y.sum()} malignant), "
        f"{X.shape[1]} standardised features: {', '.join(names)}"
    )
    cond = np.linalg.cond(np.column_stack([np.ones(len(y)), X]))
    print(f"condition number of the design [1, X]: {cond:.0f}")
    model = build_model(X, y, names, args.prior_sd)
    common = dict(chains=chains, cores=args.cores, random_seed=args.seed, progressbar=False)

    with model:
        step = pymc_sgs.SplitGibbs()
        print(step)
        t0 = time.perf_counter()
        idata_sgs = pm.sample(step=step, tune=tune, draws=draws, **common)
        t_sgs = time.perf_counter() - t0
        t0 = time.perf_counter()
        idata_nuts = pm.sample(tune=nuts_tune, draws=nuts_draws, **common)
        t_nuts = time.perf_counter() - t0

    var_names = ["intercept", "beta"]
    print("\n=== SplitGibbs: ArviZ summary (draws target pi_rho) ===")
    print(az.summary(idata_sgs, var_names=var_names, round_to=3).to_string())
    print("\n=== NUTS: ArviZ summary ===")
    print(az.summary(idata_nuts, var_names=var_names, round_to=3).to_string())

    stats = idata_sgs.sample_stats
    print(
        f"\nSplitGibbs: rho per chain {stats['rho'].values[:, 0].round(4)}, "
        f"mean z-move acceptance {float(stats['z_accept'].mean()):.3f}, "
        f"pm.sample wall time {t_sgs:.1f} s (NUTS: {t_nuts:.1f} s, "
        f"mean {float(idata_nuts.sample_stats['n_steps'].mean()):.0f} leapfrog steps/draw)"
    )

    corrected = pymc_sgs.psis_summary(idata_sgs, var_names=var_names)
    print("\n=== SplitGibbs: PSIS bias-corrected summary ===")
    print(corrected.round(3).to_string())
    print(
        f"Pareto k-hat {corrected.attrs['khat']:.2f} (< 0.5: the correction is reliable), "
        f"weight ESS {corrected.attrs['weight_ess']:.2f} of the draws"
    )
    lw = stats["log_weight"].values
    w = np.exp(lw - lw.max(axis=1, keepdims=True))
    print(
        "bias certificate per chain, sd of the normalised weights pi/pi_rho (target <= 0.1):",
        np.round((w / w.mean(axis=1, keepdims=True)).std(axis=1), 3),
    )

    # agreement with NUTS, in NUTS posterior sds (includes Monte Carlo error of both runs)
    # (psis_summary labels vector entries by position, az.summary by coordinate: align by row)
    m_nuts = az.summary(idata_nuts, var_names=var_names, kind="stats")
    mean_n, sd_n = m_nuts["mean"].to_numpy(), m_nuts["sd"].to_numpy()
    diff_rho = np.abs(corrected["mean_rho"].to_numpy() - mean_n) / sd_n
    diff_psis = np.abs(corrected["mean"].to_numpy() - mean_n) / sd_n
    print(
        f"max |mean_SGS - mean_NUTS| / sd_NUTS: {diff_rho.max():.3f} uncorrected, "
        f"{diff_psis.max():.3f} PSIS-corrected (includes Monte Carlo error of both runs)"
    )

    # ---------------------------------------------------------------- figures
    axes = az.plot_trace(idata_sgs, var_names=var_names, compact=True, figsize=(11, 6))
    fig = axes.ravel()[0].figure
    fig.suptitle("SplitGibbs trace (breast cancer logistic regression)")
    fig.tight_layout()
    fig.savefig(args.outdir / "breast_cancer_trace.png", dpi=100)
    plt.close(fig)

    axes = az.plot_rank(
        idata_sgs,
        var_names=["intercept", "beta"],
        coords={"feature": names[: min(5, len(names))]},
        kind="bars",
    )
    fig = np.ravel(axes)[0].figure
    fig.suptitle("SplitGibbs rank plot (intercept and first slopes)")
    fig.tight_layout()
    fig.savefig(args.outdir / "breast_cancer_rank.png", dpi=100)
    plt.close(fig)

    axes = az.plot_forest(
        [idata_sgs, idata_nuts],
        model_names=["SplitGibbs", "NUTS"],
        var_names=var_names,
        combined=True,
        figsize=(7, 1.0 + 0.55 * (len(names) + 1)),
    )
    fig = np.ravel(axes)[0].figure
    fig.suptitle("Posterior 94% HDIs: SplitGibbs vs NUTS")
    fig.tight_layout()
    fig.savefig(args.outdir / "breast_cancer_forest.png", dpi=100)
    plt.close(fig)
    print(f"\nfigures written to {args.outdir}")


if __name__ == "__main__":
    main()
