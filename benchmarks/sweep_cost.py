"""Cost of one SplitGibbs sweep relative to one ``X.T @ (X @ v)`` on the same data.

A sweep of the over-relaxed sampler makes one fused pass over the rows
(predictor, z-move, importance weight, ``A^T z``: :mod:`pymc_sgs.fused`) plus a
d x d triangular solve. ``X.T @ (X @ v)`` (two BLAS passes) is the floor any
sampler that touches every observation per iteration pays. Also reports the
peak resident memory of building the kernel and sweeping, relative to the
design matrix's own size.

Run::

    python benchmarks/sweep_cost.py            # n in {1e4, 1e5, 1e6}, d in {10, 100}
    python benchmarks/sweep_cost.py --quick    # n in {1e4, 1e5}, d = 10
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing as mp
import os
import platform
import resource
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"


def _git_commit():
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=Path(__file__).parent, check=True).stdout.strip()
    except Exception:  # not a git checkout
        return "unknown"


def _peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _measure(n, d, repeats, queue):
    """Run in a fresh process so that peak RSS belongs to this case only."""
    from pymc_sgs.families import FAMILIES
    from pymc_sgs.kernel import SplitGibbsKernel
    from pymc_sgs.problem import ParamSlice, SplitProblem, SplitTerm
    from pymc_sgs.rho import pilot_rho
    from pymc_sgs.shift import ShiftMove
    from pymc_sgs.start import laplace_start

    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, d)) / np.sqrt(d)
    y = (rng.random(n) < 1 / (1 + np.exp(-(X @ rng.standard_normal(d))))).astype(float)
    base = _peak_mb()
    data_mb = X.nbytes / 2**20
    v = np.ones(d)
    X.T @ (X @ v)
    # CPU time of this process: the machine may be shared, and wall time would charge us
    # for other jobs (one BLAS thread, so CPU time = compute time)
    t = time.process_time()
    for _ in range(repeats):
        X.T @ (X @ v)
    t_blas = (time.process_time() - t) / repeats

    prob = SplitProblem(
        params=(ParamSlice("b", (d,), 0, d),),
        prior_mean=np.zeros(d),
        prior_precision=np.eye(d) / 25.0,
        split_terms=(SplitTerm("y", FAMILIES["bernoulli"], X, np.zeros(n), y),),
    )
    # the coupling rho="auto" starts from for a 0.1-sd bias (pymc_sgs.rho.pilot_rho), from the
    # Laplace approximation; the chain starts at the posterior mode
    probe = SplitGibbsKernel(prob, rho=0.2, alpha=-0.99, engine="numba")
    start = laplace_start(probe, np.zeros(d), np.random.default_rng(2))
    rho = pilot_rho(probe, start.mode, start.chol, 0.1)
    del probe
    row = {"n": n, "d": d, "blas_ms": 1e3 * t_blas, "data_mb": data_mb, "rho": rho}
    for weights, dtype in ((False, "float64"), (True, "float64"), (False, "float32")):
        k = SplitGibbsKernel(prob, rho=rho, alpha=-0.99, log_weights=weights, engine="numba",
                             dtype=dtype)
        r = np.random.default_rng(1)
        state = k.init(start.mode, r)
        for _ in range(3):  # compile, warm the modes
            state, _ = k.sweep(state, r)
        t = time.process_time()
        for _ in range(repeats):
            state, _ = k.sweep(state, r)
        key = f"sweep_ms_w{int(weights)}" + ("_f32" if dtype == "float32" else "")
        row[key] = 1e3 * (time.process_time() - t) / repeats
        if weights:
            # a whole iteration of the default sampler: one shift move (pymc_sgs.shift), then
            # the sweep
            move = ShiftMove(k, start.mode, start.chol)
            for _ in range(2):  # compile
                state, _ = move.step(state, r)
            t = time.process_time()
            for _ in range(repeats):
                state, _ = move.step(state, r)
                state, _ = k.sweep(state, r)
            row["iter_ms"] = 1e3 * (time.process_time() - t) / repeats
            del move
        del k
    row["peak_extra_mb"] = _peak_mb() - base
    queue.put(row)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--output", default=None, help="markdown file (default: results/sweep_cost.md, not in --quick)")
    args = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    cases = [(10_000, 10), (100_000, 10)] if args.quick else [
        (10_000, 10), (100_000, 10), (1_000_000, 10), (10_000, 100), (100_000, 100), (1_000_000, 100)
    ]
    ctx = mp.get_context("spawn")
    rows = []
    for n, d in cases:
        q = ctx.Queue()
        proc = ctx.Process(target=_measure, args=(n, d, 5 if n >= 1_000_000 else 20, q))
        proc.start()
        rows.append(q.get())
        proc.join()
    lines = [
        "| n | d | rho | X (MB) | X.T@(X@v) ms | sweep ms (no weights) | ratio | sweep ms (with weights) | ratio | + shift move: ms | ratio | float32, no weights: ms | ratio | extra peak RSS (MB) | ÷ X size |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']:.0e} | {r['d']} | {r['rho']:.3f} | {r['data_mb']:.0f} | {r['blas_ms']:.2f} | {r['sweep_ms_w0']:.2f} | "
            f"{r['sweep_ms_w0'] / r['blas_ms']:.1f} | {r['sweep_ms_w1']:.2f} | {r['sweep_ms_w1'] / r['blas_ms']:.1f} | "
            f"{r['iter_ms']:.2f} | {r['iter_ms'] / r['blas_ms']:.1f} | "
            f"{r['sweep_ms_w0_f32']:.2f} | {r['sweep_ms_w0_f32'] / r['blas_ms']:.1f} | "
            f"{r['peak_extra_mb']:.0f} | {r['peak_extra_mb'] / r['data_mb']:.2f} |"
        )
    header = [
        "# Sweep cost vs one X.T @ (X @ v)",
        "",
        f"- command: `python benchmarks/sweep_cost.py{' --quick' if args.quick else ''}`",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}, "
        f"git {_git_commit()}",
        f"- machine: {platform.machine()}, nproc = {os.cpu_count()}, 1 BLAS thread; load average {os.getloadavg()}",
        "- kernel: bernoulli-logit, alpha = -0.99, numba engine, at the rho that rho=\"auto\" starts from",
        "  for a 0.1-sd bias (pymc_sgs.rho.pilot_rho from the Laplace approximation), chain started at the",
        "  posterior mode; '+ shift move' is a whole default iteration (one shift move, then the sweep",
        "  with weights); times are CPU time of the process (the machine may be shared); 'extra peak RSS'",
        "  is the resident-memory growth after X was built (Laplace start, kernel construction and",
        "  sweeps, float32 copy included), in MB.",
        "",
    ]
    text = "\n".join(header + lines) + "\n"
    print(text)
    out = args.output or (None if args.quick else RESULTS / "sweep_cost.md")
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text)


if __name__ == "__main__":
    main()
