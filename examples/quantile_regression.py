"""Bayesian quantile regression on heteroscedastic data: SplitGibbs vs NUTS.

Data (simulated, seed fixed): ``x ~ Uniform(0, 4)`` and
``y = 1 + 0.8 x + (0.3 + 0.4 x) eps`` with ``eps ~ N(0, 1)``, so the spread of ``y`` grows with
``x`` and the conditional quantiles fan out: the true ``q``-quantile line is
``1 + 0.8 x + (0.3 + 0.4 x) Phi^{-1}(q)``. For each ``q`` in {0.1, 0.5, 0.9} the model is

    y_i ~ AsymmetricLaplace(mu = a + s * x_i, b, q),   a, s ~ N(0, 10),

the working likelihood of Bayesian quantile regression (Yu & Moyeed 2001), whose check-loss
potential has a kink at every observation: NUTS sees a discontinuous gradient, while
SplitGibbs draws each split variable exactly from its two-piece truncated-Gaussian
conditional (:mod:`pymc_sgs.nonsmooth`). The rate ``b`` is fixed at the maximum likelihood
value of the asymmetric Laplace scale around statsmodels' ``QuantReg`` fit,
``b = sqrt(q (1 - q)) / mean(check loss)``.

The script prints, per quantile, the ArviZ summaries of SplitGibbs (``rho="auto"``) and NUTS,
the PSIS-corrected summary of SplitGibbs, statsmodels' ``QuantReg`` estimate and the largest
difference of the posterior means in NUTS posterior sds.

Figures (in ``--outdir``):

* ``quantile_regression_fit.png``        the data, the true quantile lines and the posterior
  mean lines of SplitGibbs and NUTS;
* ``quantile_regression_posterior.png``  posterior densities of ``a`` and ``s`` per quantile,
  SplitGibbs over NUTS.

Run::

    python examples/quantile_regression.py            # 4 chains x 4000 draws (NUTS: x 1000)
    python examples/quantile_regression.py --quick    # short chains (smoke test)
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
import statsmodels.api as sm  # noqa: E402
from scipy.stats import norm  # noqa: E402

import pymc_sgs  # noqa: E402

warnings.filterwarnings("ignore", message=".*BLAS.*")  # PyTensor without a BLAS link

DEFAULT_OUTDIR = Path(__file__).resolve().parent / "figures"
QUANTILES = (0.1, 0.5, 0.9)
VAR_NAMES = ["a", "s"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="short chains (smoke test)")
    p.add_argument("--outdir", type=Path, default=DEFAULT_OUTDIR, help="where to write the figures")
    p.add_argument("--n", type=int, default=300, help="number of observations")
    p.add_argument("--chains", type=int, default=None)
    p.add_argument("--cores", type=int, default=None, help="passed to pm.sample")
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args(argv)


def simulate(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 4.0, size=n)
    y = 1.0 + 0.8 * x + (0.3 + 0.4 * x) * rng.normal(size=n)
    return x, y


def true_line(q):
    """Intercept and slope of the true q-quantile line."""
    zq = norm.ppf(q)
    return 1.0 + 0.3 * zq, 0.8 + 0.4 * zq


def check_loss(u, q):
    return u * (q - (u < 0))


def pilot_rate(x, y, q):
    """statsmodels QuantReg fit and the ML rate b of PyMC's AsymmetricLaplace around it."""
    fit = sm.QuantReg(y, sm.add_constant(x)).fit(q=q)
    scale = np.mean(check_loss(y - fit.predict(sm.add_constant(x)), q))
    return fit.params, np.sqrt(q * (1 - q)) / scale


def build_model(x, y, q, b):
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 10.0)
        s = pm.Normal("s", 0.0, 10.0)
        pm.AsymmetricLaplace("y", mu=a + s * x, b=b, q=q, observed=y)
    return model


def main(argv=None):
    args = parse_args(argv)
    args.outdir.mkdir(parents=True, exist_ok=True)
    if args.quick:
        chains, tune, draws, nuts_tune, nuts_draws = 2, 500, 1000, 300, 300
    else:
        chains, tune, draws, nuts_tune, nuts_draws = 4, 1000, 4000, 1000, 1000
    chains = args.chains or chains
    x, y = simulate(args.n)
    print(f"simulated heteroscedastic data: n = {args.n}, sd of y | x from 0.3 to 1.9")
    common = dict(chains=chains, cores=args.cores, random_seed=args.seed, progressbar=False)

    results = {}
    for q in QUANTILES:
        params, b = pilot_rate(x, y, q)
        model = build_model(x, y, q, b)
        print(
            f"\n################ q = {q}: b = {b:.3f}; true line (a, s) = "
            f"{np.round(true_line(q), 3)}; statsmodels QuantReg {np.round(params, 3)}"
        )
        with model:
            step = pymc_sgs.SplitGibbs()
            print(step)
            t0 = time.perf_counter()
            idata_sgs = pm.sample(step=step, tune=tune, draws=draws, **common)
            t_sgs = time.perf_counter() - t0
            t0 = time.perf_counter()
            idata_nuts = pm.sample(tune=nuts_tune, draws=nuts_draws, **common)
            t_nuts = time.perf_counter() - t0
        print("=== SplitGibbs ===")
        print(az.summary(idata_sgs, var_names=VAR_NAMES, round_to=4).to_string())
        print("=== NUTS ===")
        print(az.summary(idata_nuts, var_names=VAR_NAMES, round_to=4).to_string())
        corrected = pymc_sgs.psis_summary(idata_sgs, var_names=VAR_NAMES)
        print("=== SplitGibbs, PSIS bias-corrected ===")
        print(corrected.round(4).to_string())
        sn = az.summary(idata_nuts, var_names=VAR_NAMES, kind="stats")
        dev = np.abs(corrected["mean"].to_numpy() - sn["mean"].to_numpy()) / sn["sd"].to_numpy()
        print(
            f"rho per chain {idata_sgs.sample_stats['rho'].values[:, -1].round(4)}; k-hat "
            f"{corrected.attrs['khat']:.2f}; wall time SplitGibbs {t_sgs:.1f} s, NUTS "
            f"{t_nuts:.1f} s; max |mean_SGS - mean_NUTS| / sd_NUTS = {dev.max():.3f} "
            "(includes Monte Carlo error)"
        )
        results[q] = (idata_sgs, idata_nuts)

    # ---------------------------------------------------------------- figures
    grid = np.linspace(0.0, 4.0, 100)
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.scatter(x, y, s=8, color="grey", alpha=0.5, label="data")
    for k, q in enumerate(QUANTILES):
        a0, s0 = true_line(q)
        ax.plot(
            grid, a0 + s0 * grid, ":", color="k", lw=1, label="true quantile" if k == 0 else None
        )
        for idata, name, ls, color in [
            (results[q][0], "SplitGibbs", "-", "C0"),
            (results[q][1], "NUTS", "--", "C1"),
        ]:
            post = az.extract(idata, var_names=VAR_NAMES)
            line = post["a"].values.mean() + post["s"].values.mean() * grid
            ax.plot(grid, line, ls, color=color, label=name if k == 0 else None)
        ax.annotate(f"q = {q}", (4.02, a0 + 4 * s0), fontsize=8, va="center")
    ax.set(xlabel="x", ylabel="y", title="Quantile regression: posterior mean lines")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.outdir / "quantile_regression_fit.png", dpi=100)
    plt.close(fig)

    fig, axes = plt.subplots(2, len(QUANTILES), figsize=(11, 5.5))
    for k, q in enumerate(QUANTILES):
        for r, name in enumerate(VAR_NAMES):
            ax = axes[r, k]
            for idata, label, color in [
                (results[q][0], "SplitGibbs", "C0"),
                (results[q][1], "NUTS", "C1"),
            ]:
                v = idata.posterior[name].values.ravel()
                ax.hist(v, bins=50, density=True, histtype="step", color=color, label=label)
            ax.axvline(true_line(q)[r], color="k", ls=":", lw=1)
            ax.set_title(f"{name}, q = {q}", fontsize=9)
    axes[0, 0].legend(fontsize=8)
    fig.suptitle("Posterior of intercept a and slope s per quantile (dotted: truth)")
    fig.tight_layout()
    fig.savefig(args.outdir / "quantile_regression_posterior.png", dpi=100)
    plt.close(fig)
    print(f"\nfigures written to {args.outdir}")


if __name__ == "__main__":
    main()
