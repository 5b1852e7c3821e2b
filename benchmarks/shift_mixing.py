"""Mixing of the over-relaxed SGS kernel with and without the shift move (pymc_sgs.shift).

Same problem as ``benchmarks/mixing.py`` (logistic regression, n = 10^4, d = 10, prior
N(0, 5^2)), with the package's pure kernel. For each coupling rho, one chain (alpha = -0.99)
started at a draw from the Laplace approximation, with and without a shift move before every
sweep (``shift_moves="auto"``: one to three moves per sweep, set during burn-in from the
acceptance, as ``SplitGibbs`` does; independent proposals, ``shift_relaxation=0``). Both leave
the same split model invariant, so only the mixing differs:

* IAT (bulk) = kept sweeps / min over coefficients of ArviZ bulk ESS;
* ms / sweep = CPU time per sweep (the shift move included);
* ESS / CPU s = min bulk ESS per CPU second;
* shift acc. = mean acceptance probability of the shift move; moves = shift moves per sweep.

A second table compares independent shift proposals with over-relaxed ones
(``shift_relaxation`` 0.3, the default, and 0.5; used when the proposal is accepted at least 90%
of the time) on the two n = 10^5 cases of ``benchmarks/compare.py`` where that happens
(``logit-1e5-10``, rho = 0.06, and ``poisson-1e5``, rho = 0.018: the rho that ``rho="auto"``
picks there), with that script's data: bulk and tail ESS (min over coefficients) per CPU
second. Tail ESS is the check that over-relaxation, which makes successive draws
anti-correlated, does not buy the bulk ESS of posterior means at the expense of the quantiles.

Usage::

    python benchmarks/shift_mixing.py            # writes benchmarks/results/shift_mixing.md
    python benchmarks/shift_mixing.py --quick    # smoke run, no results file
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import datetime  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.append(str(Path(__file__).resolve().parent))

from harness.cases import logistic_data as make_data  # noqa: E402
from harness.cases import make_data as compare_data  # noqa: E402
from harness.cases import split_problem as make_problem  # noqa: E402

from pymc_sgs.kernel import SplitGibbsKernel  # noqa: E402
from pymc_sgs.shift import ShiftMove  # noqa: E402
from pymc_sgs.start import laplace_start  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "shift_mixing.md"


def run(problem, rho, shift, n_burn, n_keep, seed, relaxation=0.0):
    import arviz as az

    kernel = SplitGibbsKernel(problem, rho, alpha=-0.99)
    rng = np.random.default_rng(seed)
    start = laplace_start(kernel, np.zeros(problem.d), rng)
    move = ShiftMove(kernel, start.mode, start.chol, relaxation=relaxation) if shift else None
    state = kernel.init(start.theta, rng)
    draws, accs = [], []
    t0 = None
    for i in range(n_burn + n_keep):
        if i == n_burn:
            t0 = time.process_time()
        if move is not None:
            state, acc = move.run(state, rng)
            if i < n_burn:
                move.tune()
            else:
                accs.append(acc)
        state, _ = kernel.sweep(state, rng)
        if i >= n_burn:
            draws.append(state.theta)
    cpu = time.process_time() - t0
    draws = np.array(draws)
    ess = min(float(az.ess(draws[None, :, j])) for j in range(problem.d))
    tail = min(float(az.ess(draws[None, :, j], method="tail")) for j in range(problem.d))
    return dict(
        iat=n_keep / ess,
        ms=1e3 * cpu / n_keep,
        ess_per_s=ess / cpu,
        tail_iat=n_keep / tail,
        tail_per_s=tail / cpu,
        acc=float(np.mean(accs)) if accs else float("nan"),
        moves=move.moves if move is not None else 0,
        beta=move.beta if move is not None else float("nan"),
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    n, d = (2000, 5) if args.quick else (10_000, 10)
    rhos = (0.3, 0.1) if args.quick else (0.3, 0.1, 0.03)
    n_burn, n_keep = (100, 500) if args.quick else (300, 4000)
    X, y, _ = make_data(n, d, seed=20220101)
    problem = make_problem(X, y, 5.0)
    rows = []
    for rho in rhos:
        for shift in (False, True):
            r = run(problem, rho, shift, n_burn, n_keep, seed=1)
            rows.append((rho, shift, r))
            print(
                f"rho={rho:<5} shift={shift!s:<5} IAT {r['iat']:8.2f}  ms/sweep {r['ms']:6.2f}  "
                f"ESS/CPU s {r['ess_per_s']:8.1f}  shift acc. {r['acc']:.3f}  moves {r['moves']}",
                flush=True,
            )
    lines = [
        "# Over-relaxed SGS with and without the shift move",
        "",
        f"- command: `python benchmarks/shift_mixing.py{' --quick' if args.quick else ''}`",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}, "
        f"git {subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True, cwd=ROOT).stdout.strip()}",
        f"- problem: logistic regression n={n}, d={d} (benchmarks/mixing.py data), alpha=-0.99, "
        f"one chain per row, {n_burn} burn-in + {n_keep} kept sweeps, start at a Laplace draw; "
        f"load average {os.getloadavg()}",
        "",
        "| rho | shift | IAT (bulk) | ms / sweep (CPU) | ESS / CPU s | shift acc. | moves |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for rho, shift, r in rows:
        acc = "" if np.isnan(r["acc"]) else f"{r['acc']:.3f}"
        lines.append(
            f"| {rho} | {'yes' if shift else 'no'} | {r['iat']:.2f} | {r['ms']:.2f} | "
            f"{r['ess_per_s']:.1f} | {acc} | {r['moves'] or ''} |"
        )
    n_burn2, n_keep2 = (200, 500) if args.quick else (300, 3000)
    relax_cases = []
    for label, case, family, rho in (
        ("logistic", "logit-1e5-10", "bernoulli", 0.06),
        ("Poisson", "poisson-1e5", "poisson", 0.018),
    ):
        Xc, yc, prior_sd = compare_data(case, 20220101)
        relax_cases.append((label, make_problem(Xc, yc, prior_sd, family), rho))
    lines += [
        "",
        "## Over-relaxed shift proposal (`shift_relaxation`)",
        "",
        "n=100000, d=10 (`benchmarks/compare.py` data, data seed 20220101), alpha=-0.99, "
        f"one chain per row, {n_burn2} burn-in sweeps (which tune "
        f"the moves and the regime, as during `pm.sample`'s tuning) + {n_keep2} kept sweeps.",
        "",
        "| problem | rho | shift_relaxation | beta after tuning | moves | shift acc. | "
        "bulk ESS / CPU s | tail ESS / CPU s | IAT bulk / tail | ms / sweep |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for label, prob, rho in relax_cases:
        for relaxation in (0.0, 0.3, 0.5):
            r = run(prob, rho, True, n_burn2, n_keep2, seed=1, relaxation=relaxation)
            print(
                f"{label} rho={rho} relaxation={relaxation}: bulk ESS/s {r['ess_per_s']:.1f} "
                f"tail ESS/s {r['tail_per_s']:.1f} beta {r['beta']} moves {r['moves']} "
                f"acc {r['acc']:.3f}",
                flush=True,
            )
            lines.append(
                f"| {label} | {rho} | {relaxation} | {r['beta']:.2f} | {r['moves']} | "
                f"{r['acc']:.3f} | {r['ess_per_s']:.1f} | {r['tail_per_s']:.1f} | "
                f"{r['iat']:.2f} / {r['tail_iat']:.2f} | {r['ms']:.2f} |"
            )
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.quick:
        RESULTS.write_text(text)


if __name__ == "__main__":
    main()
