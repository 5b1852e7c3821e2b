"""Multinomial logistic regression (pm.Categorical with a softmax) on the iris data: SplitGibbs vs NUTS.

Data: scikit-learn's bundled iris data set (150 flowers of 3 species). The species is modelled
from the standardised sepal length and width (the petal measurements separate the species
perfectly, which leaves the coefficients to the prior)::

    species_i ~ Categorical(softmax(b + x_i^T B_full)),   B_full = [0 | B],  b_full = [0 | b],

with setosa (class 0) the reference class: its column of coefficients is fixed at zero, so
``B`` (2 x 2) and ``b`` (2) are the log odds of versicolor and virginica against setosa.
Priors: ``B ~ N(0, 2.5)``, ``b ~ N(0, 5)``.

``pymc_sgs.SplitGibbs()`` recognises the softmax of an affine predictor. Its default makes no
split here: independence Metropolis-Hastings from the Laplace approximation of the posterior
(:mod:`pymc_sgs.categorical_direct`), exact. ``SplitGibbs(rho="tuned")`` is the split model,
one ``z_i`` in R^2 per observation (the logits of classes 1 and 2 relative to class 0), which
on these data mixes slowly per draw (bulk ESS of about 1 per 50-100 draws: sepal length
almost separates setosa, so few rows carry curvature and the theta-step, tied to every z_i,
moves little). The script prints both ArviZ summaries, the acceptance of the moves, the
largest difference of posterior means in NUTS posterior sds and ESS per second.

Figure (in ``--outdir``): ``multinomial_logit_forest.png``, posterior means and 94% intervals
under both samplers.

Run::

    python examples/multinomial_logit.py            # 2 chains x 4000 draws (under a minute)
    python examples/multinomial_logit.py --quick    # short chains (smoke test)
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
import pytensor.tensor as pt  # noqa: E402
from sklearn.datasets import load_iris  # noqa: E402

import pymc_sgs  # noqa: E402

warnings.filterwarnings("ignore", message=".*BLAS.*")  # PyTensor without a BLAS link

DEFAULT_OUTDIR = Path(__file__).resolve().parent / "figures"
VAR_NAMES = ["B", "b"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="short chains (smoke test)")
    p.add_argument("--outdir", type=Path, default=DEFAULT_OUTDIR, help="where to write the figure")
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--cores", type=int, default=1, help="passed to pm.sample")
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args(argv)


def load_data():
    iris = load_iris()
    X = iris.data[:, :2]  # sepal length and width
    X = (X - X.mean(0)) / X.std(0)
    return X, iris.target.astype(np.int64), list(iris.target_names)


def build_model(X, y, names):
    coords = {"feature": ["sepal_length", "sepal_width"], "class": names[1:]}
    with pm.Model(coords=coords) as model:
        B = pm.Normal("B", 0.0, 2.5, dims=("feature", "class"))
        b = pm.Normal("b", 0.0, 5.0, dims="class")
        B_full = pt.concatenate([pt.zeros((X.shape[1], 1)), B], axis=1)
        b_full = pt.concatenate([pt.zeros(1), b])
        pm.Categorical("species", p=pm.math.softmax(X @ B_full + b_full, axis=-1), observed=y)
    return model


def main(argv=None):
    args = parse_args(argv)
    args.outdir.mkdir(parents=True, exist_ok=True)
    draws, tune = (300, 300) if args.quick else (4000, 1000)
    X, y, names = load_data()
    model = build_model(X, y, names)
    kw = dict(chains=args.chains, cores=args.cores, random_seed=args.seed, progressbar=False)
    with model:
        step = pymc_sgs.SplitGibbs()
        print(step)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pymc_sgs.SamplerFeedbackWarning)
            sgs = pm.sample(step=step, draws=draws, tune=tune, **kw)
        t_sgs = time.perf_counter() - t0
        t0 = time.perf_counter()
        nuts = pm.sample(draws=max(draws // 4, 300), tune=tune, **kw)
        t_nuts = time.perf_counter() - t0
    print(
        f"\nSplitGibbs ({t_sgs:.1f} s), mean acceptance of the moves: "
        f"{float(np.mean(sgs.sample_stats['shift_accept'].values)):.2f}, moves per draw: "
        f"{np.unique(sgs.sample_stats['shift_moves'].values)}"
    )
    summ = az.summary(sgs, var_names=VAR_NAMES)
    print(summ.to_string())
    print(f"\nNUTS ({t_nuts:.1f} s)")
    ref = az.summary(nuts, var_names=VAR_NAMES)
    print(ref.to_string())
    diff = (summ["mean"] - ref["mean"]).abs() / ref["sd"]
    print(f"\nlargest |mean(SplitGibbs) - mean(NUTS)| / sd(NUTS): {diff.max():.3f}")
    print(
        f"min bulk ESS per second: SplitGibbs {summ['ess_bulk'].min() / t_sgs:.1f}, "
        f"NUTS {ref['ess_bulk'].min() / t_nuts:.1f} (times include compilation)"
    )

    ax = az.plot_forest(
        [sgs, nuts],
        model_names=["SplitGibbs", "NUTS"],
        var_names=VAR_NAMES,
        combined=True,
        figsize=(6, 4),
    )
    ax[0].set_title("iris species ~ sepal length + width (reference: setosa)")
    out = args.outdir / "multinomial_logit_forest.png"
    plt.savefig(out, dpi=110, bbox_inches="tight")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
