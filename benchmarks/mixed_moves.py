"""Which hyperparameter moves a linear mixed model's chain should make after tuning.

The collapsed sampler of a linear mixed model (``pymc_sgs.mixed.kernel.MixedKernel``)
moves the hyperparameters ``h`` by Metropolis-Hastings on ``p(h | y)``, every move costing
one factorization of the coefficients' precision. This script tunes a chain with the step
itself (``pm.sample`` with ``SplitGibbs()``: the proposals' shape refitted to the tuning
draws, the walk's scale tuned), then runs the kernel at that frozen shape with each move
pattern for the same number of iterations, from the same state and seed:

* ``indep+walk``: an independence move, then a random-walk move (the default in tuning);
* ``indep``: one independence move;
* ``indep x2``: two independence moves.

It reports the minimum bulk and tail ESS over the coordinates of ``h`` (the group sds and
the noise sd on the log scale: the slowest parameters of these chains), per iteration
and per factorization, and the kernel's time per iteration (the step's per-draw overhead
in ``pm.sample`` comes on top). Used to choose ``pymc_sgs.mixed.step.INDEP_ONLY_ACCEPT``
and ``EXPENSIVE_FACTOR``.

Usage::

    python benchmarks/mixed_moves.py --cases sleepstudy insteval-lmm --iters 2000 \\
        --output benchmarks/results/mixed_moves.md
"""

from __future__ import annotations

from _script_env import ROOT  # first: one thread per process, set before numpy loads

# isort: split
import argparse
import datetime
import time
from pathlib import Path

import numpy as np
from harness.mixed_cases import build_bambi, case_info, load_data
from harness.report import env_info, git_commit

RESULTS = ROOT / "benchmarks" / "results" / "mixed_moves.md"
PATTERNS = {"indep+walk": (2, True), "indep": (1, False), "indep x2": (2, False)}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", nargs="+", default=["sleepstudy", "insteval-lmm"])
    p.add_argument("--tune", type=int, default=1000)
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--output", type=Path, default=RESULTS)
    return p.parse_args(argv)


def run_case(name, tune, iters, seed):
    import arviz as az
    import pymc as pm

    import pymc_sgs
    from pymc_sgs.mixed.kernel import MixedKernel

    if case_info(name).get("glmm", True):
        raise SystemExit(f"{name}: not a linear mixed model")
    bm = build_bambi(name, load_data(name), centred=False)
    bm.build()
    with bm.backend.model:
        step = pymc_sgs.SplitGibbs()
        t0 = time.perf_counter()
        pm.sample(
            step=step,
            tune=tune,
            draws=1,
            chains=1,
            cores=1,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )
        tune_s = time.perf_counter() - t0
    kernel = step.kernel
    assert type(kernel) is MixedKernel and not kernel.split
    K = step.problem.hyper_size
    tuned = step._proposal()  # the chain's frozen shape and walk scale
    rows = []
    for label, (moves, walk_on) in PATTERNS.items():
        prop = tuned._replace(moves=moves, walk=walk_on)
        rng = np.random.default_rng(seed)
        state = step.state
        kernel._factored = None
        hs = np.empty((iters, K))
        indep = []
        t0 = time.perf_counter()
        for i in range(iters):
            state, info = kernel.step(state, rng, prop)
            hs[i] = state.h
            indep.append(info.indep_accept)
        secs = time.perf_counter() - t0
        bulk = min(float(az.ess(hs[None, :, j])) for j in range(K))
        tail = min(float(az.ess(hs[None, :, j], method="tail")) for j in range(K))
        rows.append(
            dict(
                pattern=label,
                indep_accept=float(np.nanmean(indep)),
                bulk=bulk,
                tail=tail,
                per_iter=bulk / iters,
                per_fact=bulk / (iters * moves),
                ms=1e3 * secs / iters,
                bulk_s=bulk / secs,
                tail_s=tail / secs,
            )
        )
    cost = kernel.precision.factor_cost()
    return dict(
        name=name,
        K=K,
        cost=cost,
        tune_s=tune_s,
        chosen=step.hyper_moves,
        rows=rows,
    )


def main(argv=None):
    args = parse_args(argv)
    started = time.time()
    out = [run_case(c, args.tune, args.iters, args.seed) for c in args.cases]
    lines = [
        "# Hyperparameter moves of a linear mixed model after tuning",
        "",
        f"- command: `python benchmarks/mixed_moves.py --cases {' '.join(args.cases)} "
        f"--tune {args.tune} --iters {args.iters} --seed {args.seed}`",
        f"- code: {git_commit()}",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}",
        *(f"- {line}" for line in env_info()),
        f"- runtime: {time.time() - started:.0f} s",
        "- one chain tuned by `pm.sample` (SplitGibbs, Bambi's default model), then "
        f"{args.iters} kernel iterations per pattern at the frozen shape, same start and "
        "seed; ESS over the coordinates of h (log sds); time = the kernel alone",
        "",
    ]
    for case in out:
        lines += [
            f"## {case['name']}: K = {case['K']} hyperparameters, factorization ~"
            f"{case['cost']:.3g} multiply-adds; the step chose {case['chosen']} "
            "(moves, walk)",
            "",
            "| pattern | indep. accept | min bulk ESS | min tail ESS | bulk ESS / iter | "
            "bulk ESS / factorization | kernel ms / iter | bulk ESS/s | tail ESS/s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in case["rows"]:
            lines.append(
                f"| {r['pattern']} | {r['indep_accept']:.3f} | {r['bulk']:.0f} | "
                f"{r['tail']:.0f} | {r['per_iter']:.3f} | {r['per_fact']:.3f} | "
                f"{r['ms']:.2f} | {r['bulk_s']:.1f} | {r['tail_s']:.1f} |"
            )
        lines.append("")
    text = "\n".join(lines)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
