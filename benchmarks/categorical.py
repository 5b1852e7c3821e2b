"""Multinomial logistic regression (``pm.Categorical``): SplitGibbs against PyMC NUTS and nutpie.

Every sampler runs on the same model, each in a fresh ``spawn``-ed worker process (peak
memory per sampler), 2 chains on 2 cores, the same tuning iterations and draws:

* ``SGS``        ``pm.sample(step=pymc_sgs.SplitGibbs())``: the default, no split where the
                 Laplace approximation exists (independence Metropolis-Hastings from it,
                 :mod:`pymc_sgs.categorical_direct`);
* ``SGS-tuned``  ``pm.sample(step=pymc_sgs.SplitGibbs(rho="tuned"))``: the split model, the
                 default before;
* ``NUTS``, ``nutpie``, ``nutpie-lr`` (``low_rank_modified_mass_matrix=True``).

Cases (class 0 the reference, Normal(0, 2.5) priors on the other classes' coefficients):

* ``three-class``: n = 1,000 rows, 3 predictors and an intercept, K = 3 (8 coefficients);
* ``five-class``: n = 5,000 rows, 5 predictors and an intercept, K = 5 (24 coefficients).

Columns: min bulk and tail ESS over every coefficient, wall time and its setup part (wall
minus PyMC's ``sampling_time``), min ESS/s with and without setup and its ratio to the best
NUTS variant's, max R-hat, peak memory.

Usage::

    python benchmarks/categorical.py --output benchmarks/results/categorical.md
"""

from __future__ import annotations

import _script_env  # noqa: F401  (first: one thread per process, set before numpy loads)

# isort: split
import time
import traceback

import numpy as np
from harness.pm_models import (
    best_nuts,
    failure,
    header,
    parse_args,
    run_all,
    sample_in_worker,
    split_runs,
    write_report,
)
from harness.report import fmt_sig

SAMPLERS = ("SGS", "SGS-tuned", "NUTS", "nutpie", "nutpie-lr")
CASES = {"three-class": (1000, 3, 3), "five-class": (5000, 5, 5)}


def build_model(case: str):
    import pymc as pm
    import pytensor.tensor as pt

    n, p, K = CASES[case]
    rng = np.random.default_rng(11)
    X = rng.normal(size=(n, p))
    B_true = rng.normal(0.0, 0.7, size=(p, K - 1))
    b_true = rng.normal(0.0, 0.5, size=K - 1)
    logits = np.column_stack([np.zeros(n), X @ B_true + b_true])
    prob = np.exp(logits - logits.max(axis=1, keepdims=True))
    prob /= prob.sum(axis=1, keepdims=True)
    y = np.array([rng.choice(K, p=row) for row in prob])
    with pm.Model() as model:
        B = pm.Normal("B", 0.0, 2.5, shape=(p, K - 1))
        b = pm.Normal("b", 0.0, 2.5, shape=K - 1)
        eta = pt.concatenate([pt.zeros((n, 1)), pt.dot(X, B) + b], axis=1)
        pm.Categorical("y", p=pm.math.softmax(eta, axis=-1), observed=y)
    return model


def _worker(job, queue):
    try:
        import arviz as az

        idata, costs = sample_in_worker(job, build_model)
        post = idata.posterior[["B", "b"]]
        ess = az.ess(post)
        tail = az.ess(post, method="tail")
        rhat = az.rhat(post)
        queue.put(
            dict(
                job,
                **costs,
                min_ess=float(min(ess[v].min() for v in ess.data_vars)),
                min_tail=float(min(tail[v].min() for v in tail.data_vars)),
                max_rhat=float(max(rhat[v].max() for v in rhat.data_vars)),
            )
        )
    except Exception:  # noqa: BLE001
        queue.put(dict(job, error=traceback.format_exc()))


def table(results) -> list[str]:
    lines = [
        "| case | sampler | min ESS bulk (tail) | wall s (setup) | CPU s | min ESS/s (excl. "
        "setup) | tail ESS/s (excl. setup) | ÷ best NUTS (excl. setup) | max R-hat | peak MB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case in dict.fromkeys(r["case"] for r in results):
        runs, ok = split_runs(results, case)
        best, best_run = best_nuts(ok, "min_ess")
        for r in runs:
            if r not in ok:
                lines.append(f"| {case} | {r['sampler']} | {failure(r)} |" + " |" * 7)
                continue
            run_s = r["sampling_time"]
            e, e_run = r["min_ess"] / r["wall"], r["min_ess"] / run_s
            lines.append(
                f"| {case} | {r['sampler']} | {r['min_ess']:.0f} ({r['min_tail']:.0f}) "
                f"| {r['wall']:.1f} ({r['wall'] - run_s:.1f}) | {r['cpu']:.0f} "
                f"| {fmt_sig(e)} ({fmt_sig(e_run)}) "
                f"| {fmt_sig(r['min_tail'] / r['wall'])} ({fmt_sig(r['min_tail'] / run_s)}) "
                f"| {fmt_sig(e / best)} ({fmt_sig(e_run / best_run)}) "
                f"| {r['max_rhat']:.3f} | {r['mem_peak_mb']:.0f} |"
            )
    return lines


def main(argv=None):
    args = parse_args(__doc__, CASES, SAMPLERS, argv)
    started = time.time()
    results = run_all(args, _worker, shown=("case", "sampler", "wall", "min_ess"))
    out = [
        *header(
            "Multinomial logistic regression: SplitGibbs, PyMC NUTS and nutpie",
            "categorical.py",
            args,
            started,
        ),
        *table(results),
        "",
        "Setup = wall time minus PyMC's `sampling_time`. ESS: ArviZ, over both chains, min over "
        "every coefficient.",
    ]
    write_report(out, args)


if __name__ == "__main__":
    main()
