"""Cost per call of the mixed-model precision's factorization and coefficient draw.

The GLMM kernel factors the coefficients' precision ``Q(h)`` twice per iteration (the
hyperparameter moves) and draws from ``N(0, Q^-1)`` about seven times (the proposals of the
coefficients), so these two calls set most of an iteration's cost outside the likelihood.
This script times them on a benchmark case's own precision (read from Bambi's default model
with :func:`pymc_sgs.mixed.read.read_mixed_model`), with a fixed random prior precision, and
reports the best of ``--repeats`` timings of ``--calls`` calls each (the best, because the
machine's background noise only adds time). Run it in two checkouts to compare code changes.

Usage::

    python benchmarks/factor_cost.py                       # Contraception, Schur factorization
    python benchmarks/factor_cost.py --case grouseticks --method sparse
"""

from __future__ import annotations

import _script_env  # noqa: F401  (first: one thread per process, set before numpy loads)

# isort: split
import argparse
import time
import warnings

import numpy as np
from harness.mixed_cases import REAL_CASES, build_model, load_data
from harness.report import git_commit


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--case", default="contraception", choices=REAL_CASES)
    p.add_argument("--method", default="schur", choices=["dense", "schur", "sparse"])
    p.add_argument("--calls", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--draws-per-factor", type=int, default=7)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    warnings.filterwarnings("ignore")
    from pymc_sgs.mixed.precision import MixedPrecision
    from pymc_sgs.mixed.read import read_mixed_model

    bm = build_model(args.case, load_data(args.case), centred=False)
    bm.build()
    problem = read_mixed_model(bm.backend.model).problem
    prec = MixedPrecision(problem, method=args.method)
    rng = np.random.default_rng(0)
    lam = np.abs(rng.normal(size=prec.dim)) + 0.5
    eps = rng.normal(size=(args.draws_per_factor, prec.dim))
    best_f = best_s = np.inf
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        for _ in range(args.calls):
            f = prec.factor(lam, 1.0)
        t1 = time.perf_counter()
        for _ in range(args.calls):
            for e in eps:
                f.sample(e)
        t2 = time.perf_counter()
        best_f = min(best_f, (t1 - t0) / args.calls)
        best_s = min(best_s, (t2 - t1) / (args.calls * len(eps)))
    print(
        f"| {git_commit()} | {args.case} | {args.method} | {prec.dim} | {best_f * 1e6:.1f} "
        f"| {best_s * 1e6:.1f} |"
    )


if __name__ == "__main__":
    main()
