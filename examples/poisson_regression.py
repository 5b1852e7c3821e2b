"""Poisson regression with an exposure offset on real count data: SplitGibbs vs NUTS.

Data: statsmodels' ``cancer`` data set (``statsmodels.datasets.cancer``, shipped with the
package): the number of breast cancer cases and the population of 301 counties. The counts
are modelled as

    cases_i ~ Poisson(population_i * exp(a + b1 * u_i + b2 * u_i^2)),

with ``log(population_i)`` as the offset and ``u_i`` the standardised log population, so
``a`` is the log incidence rate of a county of typical size and ``b1``, ``b2`` say whether the
rate changes with the size of the county (urban vs rural). Priors: ``a ~ N(log 0.003, 2)``
(i.e. a rate near 3 per 1000, weakly), ``b ~ N(0, 1)``.

The posterior is sampled with ``pymc_sgs.SplitGibbs()`` (defaults) and with NUTS; the script
prints both ArviZ summaries, the PSIS-corrected summary of SplitGibbs and the maximum
likelihood fit of statsmodels' GLM for comparison.

Figures (in ``--outdir``):

* ``poisson_posterior.png``  marginal posterior densities, SplitGibbs over NUTS;
* ``poisson_fit.png``        observed incidence per 1000 against population, with the
  posterior mean rate curve and its 94% band under both samplers.

Run::

    python examples/poisson_regression.py            # 4 chains x 4000 draws (NUTS: x 1000)
    python examples/poisson_regression.py --quick    # short chains (smoke test)
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

import pymc_sgs  # noqa: E402

warnings.filterwarnings("ignore", message=".*BLAS.*")  # PyTensor without a BLAS link
# NUTS's first warm-up steps can overflow exp(eta) on these large counts (harmless: rejected)
warnings.filterwarnings("ignore", message=".*encountered in dot", category=RuntimeWarning)

DEFAULT_OUTDIR = Path(__file__).resolve().parent / "figures"
VAR_NAMES = ["a", "b"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="short chains (smoke test)")
    p.add_argument("--outdir", type=Path, default=DEFAULT_OUTDIR, help="where to write the figures")
    p.add_argument("--chains", type=int, default=None)
    p.add_argument("--cores", type=int, default=None, help="passed to pm.sample")
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args(argv)


def load_data():
    df = sm.datasets.cancer.load_pandas().data
    cases = df["cancer"].to_numpy().astype(np.int64)
    pop = df["population"].to_numpy(dtype=float)
    logpop = np.log(pop)
    u = (logpop - logpop.mean()) / logpop.std()
    U = np.column_stack([u, u**2])
    return cases, pop, U


def build_model(cases, pop, U):
    with pm.Model(coords={"term": ["log_pop", "log_pop_sq"]}) as model:
        a = pm.Normal("a", np.log(0.003), 2.0)
        b = pm.Normal("b", 0.0, 1.0, dims="term")
        offset = np.log(pop)
        pm.Poisson("cases", mu=pm.math.exp(offset + a + pm.math.dot(U, b)), observed=cases)
    return model


def weight_sd_per_chain(idata):
    """sd of w / mean(w) within each chain: no expectation is off by more than this many sds."""
    lw = idata.sample_stats["log_weight"].values
    w = np.exp(lw - lw.max(axis=1, keepdims=True))
    return (w / w.mean(axis=1, keepdims=True)).std(axis=1)


def rate_band(idata, u_grid):
    """Posterior mean and 94% interval of the rate per 1000 on a grid of standardised log pop."""
    post = az.extract(idata, var_names=VAR_NAMES)
    a = post["a"].values
    b = post["b"].values  # (2, samples)
    eta = a[None, :] + np.outer(u_grid, b[0]) + np.outer(u_grid**2, b[1])
    rate = 1000 * np.exp(eta)
    return rate.mean(axis=1), np.quantile(rate, 0.03, axis=1), np.quantile(rate, 0.97, axis=1)


def main(argv=None):
    args = parse_args(argv)
    args.outdir.mkdir(parents=True, exist_ok=True)
    if args.quick:
        chains, tune, draws, nuts_tune, nuts_draws = 2, 500, 1000, 300, 300
    else:
        chains, tune, draws, nuts_tune, nuts_draws = 4, 1000, 4000, 1000, 1000
    chains = args.chains or chains

    cases, pop, U = load_data()
    print(
        f"statsmodels 'cancer' data: {len(cases)} counties, {cases.sum()} cases, "
        f"population {pop.min():.0f} to {pop.max():.0f}, "
        f"crude rate {1000 * cases.sum() / pop.sum():.2f} per 1000"
    )
    mle = sm.GLM(cases, sm.add_constant(U), family=sm.families.Poisson(), offset=np.log(pop)).fit()
    print(
        "statsmodels GLM maximum likelihood (a, b1, b2):",
        np.round(mle.params, 3),
        "se",
        np.round(mle.bse, 3),
    )

    model = build_model(cases, pop, U)
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

    print("\n=== SplitGibbs: ArviZ summary ===")
    print(az.summary(idata_sgs, var_names=VAR_NAMES, round_to=4).to_string())
    print("\n=== NUTS: ArviZ summary ===")
    print(az.summary(idata_nuts, var_names=VAR_NAMES, round_to=4).to_string())
    stats = idata_sgs.sample_stats
    print(
        f"\nSplitGibbs: rho per chain {stats['rho'].values[:, 0].round(4)}, "
        f"pm.sample wall time {t_sgs:.1f} s (NUTS {t_nuts:.1f} s)"
    )
    corrected = pymc_sgs.psis_summary(idata_sgs, var_names=VAR_NAMES)
    print("\n=== SplitGibbs: PSIS bias-corrected summary ===")
    print(corrected.round(4).to_string())
    print(
        f"Pareto k-hat {corrected.attrs['khat']:.2f}, weight ESS {corrected.attrs['weight_ess']:.2f}"
    )
    print(
        "bias certificate per chain, sd of the normalised weights pi/pi_rho (target <= 0.1):",
        np.round(weight_sd_per_chain(idata_sgs), 3),
    )
    sn = az.summary(idata_nuts, var_names=VAR_NAMES, kind="stats")
    dev = np.abs(corrected["mean_rho"].to_numpy() - sn["mean"].to_numpy()) / sn["sd"].to_numpy()
    print(f"max |mean_SGS - mean_NUTS| / sd_NUTS: {dev.max():.3f} (includes Monte Carlo error)")

    # ---------------------------------------------------------------- figures
    axes = az.plot_density(
        [idata_sgs, idata_nuts],
        data_labels=["SplitGibbs", "NUTS"],
        var_names=VAR_NAMES,
        shade=0.1,
        hdi_prob=0.99,
        figsize=(11, 3.6),
    )
    fig = np.ravel(axes)[0].figure
    fig.suptitle("Poisson regression (statsmodels cancer data): posterior, SplitGibbs vs NUTS")
    fig.tight_layout()
    fig.savefig(args.outdir / "poisson_posterior.png", dpi=100)
    plt.close(fig)

    logpop = np.log(pop)
    grid = np.linspace(logpop.min(), logpop.max(), 200)
    u_grid = (grid - logpop.mean()) / logpop.std()
    fig, ax = plt.subplots(figsize=(8, 4.8))
    ax.scatter(pop, 1000 * cases / pop, s=12, color="grey", alpha=0.6, label="county (observed)")
    for idata, name, color, ls in [
        (idata_sgs, "SplitGibbs", "C0", "-"),
        (idata_nuts, "NUTS", "C1", "--"),
    ]:
        mean, lo, hi = rate_band(idata, u_grid)
        ax.plot(np.exp(grid), mean, ls, color=color, label=f"{name}: posterior mean rate")
        ax.fill_between(np.exp(grid), lo, hi, color=color, alpha=0.2, label=f"{name}: 94% interval")
    ax.set(
        xscale="log",
        xlabel="county population",
        ylabel="breast cancer cases per 1000",
        title="Incidence against county size",
        ylim=(0, np.quantile(1000 * cases / pop, 0.99) * 1.1),
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.outdir / "poisson_fit.png", dpi=100)
    plt.close(fig)
    print(f"\nfigures written to {args.outdir}")


if __name__ == "__main__":
    main()
