"""Cost of a split Gibbs sweep on Dask vs the single-machine kernel.

Logistic regression with d coefficients (X_ij ~ N(0, 1/d), fixed data seed).
For each n it times, in wall-clock milliseconds per sweep (fastest of 5 blocks of
sweeps, after a warm-up that also compiles numba on the workers):

- ``single``: :class:`pymc_sgs.kernel.SplitGibbsKernel` in this process;
- ``dask, W workers``: :class:`pymc_sgs.backends.DaskBackend` on a
  ``LocalCluster(n_workers=W, processes=True, threads_per_worker=1)`` with one
  shard per worker (the data are given as a list of shards, scattered to the workers).

The per-sweep overhead is ``dask, 1 worker`` minus ``single`` (the same
arithmetic, plus the round trips); strong scaling is ``dask, 1 worker`` over
``dask, 2 workers``. A tiny problem (n = 1000) isolates the fixed latency.

With ``--end-to-end`` it times whole ``pm.sample`` calls instead (setup, tuning and draws,
one chain) on a logistic regression whose features are correlated (0.9), where SplitGibbs
needs its shift move: SplitGibbs in one process, SplitGibbs on a 2-worker LocalCluster with
and without the shift move, and PyMC's NUTS in one process, measured in the same run; the
table gives the minimum bulk and tail ESS over the coefficients (ArviZ), the wall time, ESS
per second and its ratio to NUTS's.

Usage::

    python benchmarks/distributed.py --quick      # n in {1e3, 2e4}, < 1 min
    python benchmarks/distributed.py              # n in {1e3, 1e5, 1e6}
    python benchmarks/distributed.py --n 1000 100000 --sweeps 200
    python benchmarks/distributed.py --end-to-end # n = 1e5, d = 10, ~6 min (NUTS ~4.5)
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import datetime  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

# this file's name shadows the `distributed` package: drop its folder from the path
_here = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
sys.path.insert(0, str(_here.parent))
sys.path.append(str(_here))  # appended: the harness package, after the dask `distributed`

from harness.cases import split_problem  # noqa: E402

from pymc_sgs.backends import DaskBackend  # noqa: E402
from pymc_sgs.kernel import SplitGibbsKernel  # noqa: E402

RHO, ALPHA = 0.3, -0.98


def make_problem(n: int, d: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) / np.sqrt(d)
    beta = rng.normal(size=d)
    y = rng.binomial(1, 1 / (1 + np.exp(-X @ beta))).astype(float)
    return split_problem(X, y, 5.0)


def time_sweeps(kernel, sweeps: int, blocks: int, seed: int = 1) -> float:
    """Fastest block's wall ms per sweep (``blocks`` blocks of ``sweeps // blocks`` sweeps).

    The minimum, not the mean: on a shared machine other jobs only ever add time.
    """
    rng = np.random.default_rng(seed)
    state = kernel.init(np.zeros(kernel.problem.d), rng)
    for _ in range(max(5, sweeps // 10)):  # warm-up (numba, caches)
        state, _ = kernel.sweep(state, rng)
    per_block = max(1, sweeps // blocks)
    out = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(per_block):
            state, _ = kernel.sweep(state, rng)
        out.append((time.perf_counter() - t0) / per_block * 1e3)
    return float(np.min(out))


def dask_kernel(client, problem, n_workers):
    # the data as a list of shards: scattered straight to the workers, one each
    term = problem.split_terms[0]
    cuts = np.array_split(np.arange(term.n), n_workers)
    backend = DaskBackend(
        client,
        X=[term.A[c[0] : c[-1] + 1] for c in cuts],
        y=[term.y[c[0] : c[-1] + 1] for c in cuts],
    )
    return backend.build_kernel(problem, RHO, ALPHA, True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="n in {1e3, 2e4}, few sweeps")
    ap.add_argument("--n", type=int, nargs="+", help="numbers of rows (default 1e3 1e5 1e6)")
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--sweeps", type=int, default=None, help="timed sweeps per configuration")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--output", default=None, help="markdown file (default: print only)")
    ap.add_argument(
        "--end-to-end",
        action="store_true",
        help="whole pm.sample calls (n = --n or 1e5), SplitGibbs on Dask vs NUTS",
    )
    ap.add_argument("--draws", type=int, default=500, help="--end-to-end: tune and draws each")
    args = ap.parse_args(argv)
    if args.end_to_end:
        text = end_to_end(args)
        print(text)
        if args.output:
            Path(args.output).write_text(text)
        return
    ns = args.n or ([1000, 20000] if args.quick else [1000, 100_000, 1_000_000])
    from distributed import Client, LocalCluster

    load_before = os.getloadavg()
    rows = []
    problems = {n: make_problem(n, args.d) for n in ns}
    single = {}
    for n, problem in problems.items():
        sweeps = args.sweeps or (40 if args.quick else max(20, min(400, 2e7 // n)))
        kernel = SplitGibbsKernel(problem, RHO, ALPHA, log_weights=True)
        single[n] = (time_sweeps(kernel, int(sweeps), 5), int(sweeps))
        print(f"n={n}: single {single[n][0]:.2f} ms/sweep", flush=True)
    dask_times = {}
    for w in args.workers:
        with (
            LocalCluster(
                n_workers=w, processes=True, threads_per_worker=1, dashboard_address=None
            ) as cluster,
            Client(cluster) as client,
        ):
            for n, problem in problems.items():
                kernel = dask_kernel(client, problem, w)
                dask_times[(n, w)] = time_sweeps(kernel, single[n][1], 5)
                print(f"n={n}: dask {w} worker(s) {dask_times[(n, w)]:.2f} ms/sweep", flush=True)
                del kernel
    load_after = os.getloadavg()
    for n in ns:
        row = {"n": n, "single": single[n][0], "sweeps": single[n][1]}
        for w in args.workers:
            row[f"dask{w}"] = dask_times[(n, w)]
        rows.append(row)
    text = report(rows, args, load_before, load_after)
    print(text)
    if args.output:
        Path(args.output).write_text(text)


def correlated_logistic(n: int, d: int, corr: float = 0.9, seed: int = 0):
    """``(X, y)``: features with pairwise correlation ``corr``, unit-scale linear predictor."""
    rng = np.random.default_rng(seed)
    X = (
        np.sqrt(corr) * rng.normal(size=(n, 1)) + np.sqrt(1.0 - corr) * rng.normal(size=(n, d))
    ) / np.sqrt(d)
    y = rng.binomial(1, 1 / (1 + np.exp(-X @ rng.normal(size=d)))).astype(float)
    return X, y


def _sample_once(model, draws, seed, step=None):
    """``(min bulk ESS, min tail ESS, wall s, sample stats)`` of one chain of ``pm.sample``."""
    import warnings

    import arviz as az
    import pymc as pm

    t0 = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(
            draws=draws,
            tune=draws,
            chains=1,
            cores=1,
            random_seed=seed,
            step=step() if step is not None else None,
            progressbar=False,
            compute_convergence_checks=False,
        )
    wall = time.perf_counter() - t0
    bulk = float(az.ess(idata.posterior, method="bulk")["b"].min())
    tail = float(az.ess(idata.posterior, method="tail")["b"].min())
    return bulk, tail, wall, idata.sample_stats


def end_to_end(args) -> str:
    """ESS per second of whole ``pm.sample`` calls: SplitGibbs on Dask against NUTS."""
    import logging

    import pymc as pm
    import pytensor

    import pymc_sgs

    logging.getLogger("pymc").setLevel(logging.ERROR)
    from distributed import Client, LocalCluster

    n = (args.n or [100_000])[0]
    X, y = correlated_logistic(n, args.d)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=args.d)
        pm.Bernoulli("y", logit_p=pm.math.dot(X, b), observed=y)
    load_before = os.getloadavg()
    runs = {}
    runs["NUTS, 1 process"] = _sample_once(model, args.draws, 1)
    runs["SplitGibbs, 1 process"] = _sample_once(
        model, args.draws, 1, lambda: pymc_sgs.SplitGibbs(model=model)
    )
    with (
        LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        for shift in (True, False):
            label = f"SplitGibbs, Dask 2 workers, shift={shift}"
            runs[label] = _sample_once(
                model,
                args.draws,
                1,
                lambda: pymc_sgs.SplitGibbs(
                    model=model, shift=shift, backend=pymc_sgs.DaskBackend(client, n_shards=2)
                ),
            )
    load_after = os.getloadavg()
    nuts_rate = runs["NUTS, 1 process"][0] / runs["NUTS, 1 process"][2]
    blas = pytensor.config.blas__ldflags
    lines = [
        "# Distributed split Gibbs: end to end on Dask vs NUTS",
        "",
        f"Generated {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC by "
        f"`python benchmarks/distributed.py {' '.join(sys.argv[1:])}`.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores; load average (1, 5, 15 min) "
        f"{tuple(round(x, 2) for x in load_before)} before and "
        f"{tuple(round(x, 2) for x in load_after)} after. Logistic regression, n = {n:,}, "
        f"d = {args.d}, features correlated 0.9, prior N(0, 5^2). One chain of {args.draws} "
        f"tuning + {args.draws} draws each, seed 1; wall time of the whole `pm.sample` call. "
        f"NUTS: PyMC's, PyTensor blas__ldflags={blas!r}"
        f"{' (not linked to a BLAS)' if not blas else ''}. SplitGibbs: defaults (rho='auto'). "
        "Dask: LocalCluster, processes, 1 thread per worker, the model's data cut into 2 "
        "shards; the client (theta-step, shift proposal) runs in this process.",
        "",
        "| sampler | min bulk ESS | min tail ESS | wall s | bulk ESS/s | ÷ NUTS | shift accept "
        "| rho |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, (bulk, tail, wall, stats) in runs.items():
        acc = rho = "–"
        if "shift_accept" in stats:
            a = stats["shift_accept"].values
            acc = f"{np.nanmean(a):.2f}" if np.isfinite(a).any() else "off"
            rho = f"{float(stats['rho'].values[0, -1]):.3g}"
        lines.append(
            f"| {label} | {bulk:.0f} | {tail:.0f} | {wall:.1f} | {bulk / wall:.1f} | "
            f"{bulk / wall / nuts_rate:.2f} | {acc} | {rho} |"
        )
    lines += [
        "",
        "On 2 cores the Dask rows share the machine with their own client, so they show the "
        "price of the round trips (one per sweep and one per shift move), not a speed-up; on a "
        "cluster the shards' passes run on other machines.",
        "",
    ]
    return "\n".join(lines)


def report(rows, args, load_before, load_after) -> str:
    ws = args.workers
    head = ["n", "single (ms)"] + [f"dask {w}w (ms)" for w in ws]
    head += ["overhead 1w - single (ms)"] if 1 in ws else []
    head += ["speed-up 1w -> 2w"] if {1, 2} <= set(ws) else []
    lines = [
        "# Distributed split Gibbs: per-sweep cost on Dask vs the single-machine kernel",
        "",
        f"Generated {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC by "
        f"`python benchmarks/distributed.py {' '.join(sys.argv[1:])}`.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores shared with other jobs; load "
        f"average (1, 5, 15 min) {tuple(round(x, 2) for x in load_before)} before and "
        f"{tuple(round(x, 2) for x in load_after)} after the run. Python "
        f"{platform.python_version()}. Logistic regression, d = {args.d}, rho = {RHO}, "
        f"alpha = {ALPHA}, importance weights on (the default sweep). Wall-clock milliseconds "
        "per sweep, fastest of 5 blocks (other jobs on the machine only add time). Dask: LocalCluster, processes, 1 thread per worker, "
        "one shard per worker; the client (theta-step) runs in this process.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in rows:
        cells = [f"{r['n']:,}", f"{r['single']:.2f}"] + [f"{r[f'dask{w}']:.2f}" for w in ws]
        if 1 in ws:
            cells.append(f"{r['dask1'] - r['single']:+.2f}")
        if {1, 2} <= set(ws):
            cells.append(f"{r['dask1'] / r['dask2']:.2f}x")
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Columns: `overhead` = (Dask, 1 worker) - single, the price of one round trip per "
        f"sweep (theta out, a {args.d}-vector and two scalars back per shard) and of Dask's "
        "actor-call machinery, for the same arithmetic; `speed-up` = (Dask, 1 worker) / "
        "(Dask, 2 workers), the strong scaling. Two workers can only be faster when two "
        "cores are free for them; compare the load average above with the core count.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
