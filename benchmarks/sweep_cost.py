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
from harness.cases import split_problem
from harness.report import git_commit as _git_commit

RESULTS = Path(__file__).parent / "results"


def _status_mb(field):
    """``VmRSS`` / ``VmHWM`` (peak) of this process in MB, from /proc (Linux)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise OSError(field)


def _reset_peak():
    """Reset this process's peak RSS (``VmHWM``) to its current RSS (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


class _PeakSince:
    """Peak RSS growth (MB) over the current RSS, from construction to ``.mb()``.

    Uses ``/proc/self/clear_refs`` to restart the peak, so each phase of one process is
    measured on its own; without /proc (not Linux) it falls back to ``ru_maxrss``, which
    cannot be reset, and the phases' peaks are then cumulative.
    """

    def __init__(self):
        try:
            _reset_peak()
            self.base = _status_mb("VmRSS")
            self.proc = True
        except OSError:
            self.base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
            self.proc = False

    def mb(self):
        peak = (
            _status_mb("VmHWM")
            if self.proc
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        )
        return peak - self.base


def _logistic_problem(n, d, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) / np.sqrt(d)
    y = (rng.random(n) < 1 / (1 + np.exp(-(X @ rng.standard_normal(d))))).astype(float)
    return X, y, split_problem(X, y, 5.0, name="b")


def _default_path(prob, d, sweeps, dtype="float64", shift=True):
    """What SplitGibbs's defaults do with the data: Laplace start, rho, kernel, sweeps + moves.

    Returns the Laplace start and the rho it gave.
    """
    from pymc_sgs.kernel import SplitGibbsKernel
    from pymc_sgs.rho import pilot_rho
    from pymc_sgs.shift import ShiftMove
    from pymc_sgs.start import laplace_start

    probe = SplitGibbsKernel(prob, rho=0.2, alpha=-0.99, engine="numba")
    start = laplace_start(probe, np.zeros(d), np.random.default_rng(2))
    rho = pilot_rho(probe, start.mode, start.chol, 0.1)
    del probe
    k = SplitGibbsKernel(prob, rho=rho, alpha=-0.99, log_weights=True, engine="numba", dtype=dtype)
    r = np.random.default_rng(1)
    state = k.init(start.mode, r)
    move = ShiftMove(k, start.mode, start.chol) if shift else None
    for _ in range(sweeps):
        if move is not None:
            state, _ = move.step(state, r)
        state, _ = k.sweep(state, r)
    return start, rho


def _measure(n, d, repeats, queue):
    """Run in a fresh process so that peak RSS belongs to this case only."""
    from pymc_sgs.kernel import SplitGibbsKernel
    from pymc_sgs.shift import ShiftMove

    # compiled code first, on a small problem: numba's JIT (or loading its cache) takes a fixed
    # amount of memory, whatever n is, reported on its own
    jit = _PeakSince()
    _, _, small = _logistic_problem(2000, d)
    _default_path(small, d, 2)
    _default_path(small, d, 2, dtype="float32", shift=False)
    del small
    jit_mb = jit.mb()
    X, y, prob = _logistic_problem(n, d)
    data_mb = X.nbytes / 2**20
    # peak memory of the default path over the data: the Laplace start, the kernel, sweeps and
    # shift moves, float64; then the opt-in float32 kernel (which holds a float32 copy of X)
    mem = _PeakSince()
    # the chain below starts at this Laplace start's mode, at the coupling rho="auto" starts
    # from for a 0.1-sd bias (pymc_sgs.rho.pilot_rho)
    start, rho = _default_path(prob, d, 3)
    peak_default = mem.mb()
    mem = _PeakSince()
    _default_path(prob, d, 3, dtype="float32", shift=False)
    peak_f32 = mem.mb()
    v = np.ones(d)
    X.T @ (X @ v)
    # CPU time of this process: the machine may be shared, and wall time would charge us
    # for other jobs (one BLAS thread, so CPU time = compute time)
    t = time.process_time()
    for _ in range(repeats):
        X.T @ (X @ v)
    t_blas = (time.process_time() - t) / repeats
    # a floor no exact z-move goes below: one normal and one uniform per row from the numpy
    # Generator (SplitGibbs's only source of randomness), into kept buffers
    gen, eps, u = np.random.default_rng(3), np.empty(n), np.empty(n)
    t = time.process_time()
    for _ in range(repeats):
        gen.standard_normal(out=eps)
        gen.random(out=u)
    t_rng = (time.process_time() - t) / repeats
    del eps, u

    row = {
        "n": n,
        "d": d,
        "blas_ms": 1e3 * t_blas,
        "rng_ms": 1e3 * t_rng,
        "data_mb": data_mb,
        "rho": rho,
    }
    for weights, dtype in ((False, "float64"), (True, "float64"), (False, "float32")):
        k = SplitGibbsKernel(
            prob, rho=rho, alpha=-0.99, log_weights=weights, engine="numba", dtype=dtype
        )
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
    row.update(
        peak_default_mb=peak_default,
        peak_f32_mb=peak_f32,
        jit_mb=jit_mb,
        data_y_mb=(X.nbytes + y.nbytes) / 2**20,
        peak_reset=mem.proc,
    )
    queue.put(row)


def _targets(rows):
    """The issue's targets for a sweep and for memory, as lines under the table."""
    out = []
    sweep = [(r, r["sweep_ms_w1"] / r["blas_ms"]) for r in rows if r["n"] >= 100_000]
    for d in sorted({r["d"] for r, _ in sweep}):
        got = [(r, x) for r, x in sweep if r["d"] == d]
        ok = all(x <= 1.5 for _, x in got)
        floor = ", ".join(f"{r['rng_ms'] / r['blas_ms']:.1f}" for r, _ in got)
        out.append(
            f"- a sweep (with weights) <= 1.5 x X.T@(X@v), n >= 1e5, d = {d}: "
            + ", ".join(f"n={r['n']:.0e} {x:.1f}x" for r, x in got)
            + (" -> **PASS**" if ok else f" -> **FAIL** (the random numbers alone: {floor}x)")
        )
    for r in rows:
        if r["n"] != 1_000_000:
            continue
        extra = r["peak_default_mb"] / r["data_mb"]
        total = (r["data_y_mb"] + r["peak_default_mb"]) / r["data_y_mb"]
        out.append(
            f"- peak memory <= 1.5 x the data at n = 1e6, d = {r['d']}: the default path adds "
            f"{extra:.2f} x X ({'**PASS**' if extra <= 1.5 else '**FAIL**'}); data (X, y) and "
            f"that peak together: {total:.2f} x the data; compiled code {r['jit_mb']:.0f} MB "
            "(fixed) on top"
        )
    return out


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true")
    p.add_argument(
        "--output",
        default=None,
        help="markdown file (default: results/sweep_cost.md, not in --quick)",
    )
    args = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    cases = (
        [(10_000, 10), (100_000, 10)]
        if args.quick
        else [
            (10_000, 10),
            (100_000, 10),
            (1_000_000, 10),
            (10_000, 100),
            (100_000, 100),
            (1_000_000, 100),
        ]
    )
    ctx = mp.get_context("spawn")
    rows = []
    for n, d in cases:
        q = ctx.Queue()
        proc = ctx.Process(target=_measure, args=(n, d, 5 if n >= 1_000_000 else 20, q))
        proc.start()
        rows.append(q.get())
        proc.join()
    lines = [
        "| n | d | rho | X (MB) | X.T@(X@v) ms | normals + uniforms alone: ms | ratio | sweep ms (no weights) | ratio | sweep ms (with weights) | ratio | + shift move: ms | ratio | float32, no weights: ms | ratio | extra peak RSS, default path (MB) | ÷ X size | float32 path (MB) | compiled code, fixed (MB) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        b = r["blas_ms"]
        lines.append(
            f"| {r['n']:.0e} | {r['d']} | {r['rho']:.3f} | {r['data_mb']:.0f} | {b:.2f} | "
            f"{r['rng_ms']:.2f} | {r['rng_ms'] / b:.1f} | {r['sweep_ms_w0']:.2f} | "
            f"{r['sweep_ms_w0'] / b:.1f} | {r['sweep_ms_w1']:.2f} | {r['sweep_ms_w1'] / b:.1f} | "
            f"{r['iter_ms']:.2f} | {r['iter_ms'] / b:.1f} | "
            f"{r['sweep_ms_w0_f32']:.2f} | {r['sweep_ms_w0_f32'] / b:.1f} | "
            f"{r['peak_default_mb']:.0f} | {r['peak_default_mb'] / r['data_mb']:.2f} | "
            f"{r['peak_f32_mb']:.0f} | {r['jit_mb']:.0f} |"
        )
    reset = all(r["peak_reset"] for r in rows)
    header = [
        "# Sweep cost vs one X.T @ (X @ v)",
        "",
        f"- command: `python benchmarks/sweep_cost.py{' --quick' if args.quick else ''}`",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}, "
        f"git {_git_commit()}",
        f"- machine: {platform.machine()}, nproc = {os.cpu_count()}, 1 BLAS thread; load average {os.getloadavg()}",
        '- kernel: bernoulli-logit, alpha = -0.99, numba engine, at the rho that rho="auto" starts from',
        "  for a 0.1-sd bias (pymc_sgs.rho.pilot_rho from the Laplace approximation), chain started at the",
        "  posterior mode; '+ shift move' is a whole default iteration (one shift move, then the sweep",
        "  with weights); times are CPU time of the process (the machine may be shared).",
        "- 'normals + uniforms alone': drawing one standard normal and one uniform per row from a numpy",
        "  Generator into kept buffers, the random numbers every sweep's z-move needs: a floor for the",
        "  sweep's ratio to X.T@(X@v) at small d.",
        "- memory, in MB of resident set (RSS), after X and y were built: 'extra peak RSS, default path'",
        "  is the peak growth while the default sampler's path runs on the data (Laplace start, pilot",
        "  rho, float64 kernel, 3 x (shift move + sweep with weights)); 'float32 path' the same for the",
        "  opt-in float32 kernel, which holds a float32 copy of X; 'compiled code, fixed' the growth",
        "  from running both paths on a 2000-row problem first (numba's compiled code and its cache: the",
        "  same for any n, not counted in the other two). "
        + (
            "Each peak is measured on its own (/proc/self/clear_refs)."
            if reset
            else "No /proc here: peaks are cumulative (ru_maxrss)."
        ),
        "",
    ]
    text = "\n".join(header + lines + [""] + _targets(rows)) + "\n"
    print(text)
    out = args.output or (None if args.quick else RESULTS / "sweep_cost.md")
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text)


if __name__ == "__main__":
    main()
