"""Benchmarks of PyMC models built by a script (``dispersion.py``, ``categorical.py``).

:func:`sample_in_worker` is the body of such a script's worker: it builds the case's model,
samples it with the job's sampler (:func:`harness.runner.pm_sample`, 2 chains on 2 cores) and
measures wall time, CPU time and peak memory; the script computes its metrics from the draws.
:func:`run_all` runs every (case, sampler) job in a fresh process and :func:`header` writes
the report's preamble.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from .report import env_info
from .runner import NUTS_VARIANTS, MemoryMonitor, cpu_seconds, pm_sample, run_job, seed_for


def sample_in_worker(job: dict, build_model):
    """``(idata, costs)`` of ``job``'s sampler on ``build_model(job["case"])``.

    ``costs``: ``wall`` (model building and sampling), ``cpu``, ``sampling_time`` (PyMC's),
    ``mem_peak_mb`` and ``mem_base_mb``. Runs in the worker process (its own process group).
    """
    import logging

    os.setpgrp()
    warnings.filterwarnings("ignore")
    logging.getLogger("pymc").setLevel(logging.ERROR)
    import arviz as az
    import pymc  # noqa: F401  (imports are not setup)

    import pymc_sgs  # noqa: F401

    az.Numba.disable_numba()  # arviz 0.23.4's numba ess path breaks on numpy 2.4
    mon = MemoryMonitor()
    mon.start()
    cpu0 = cpu_seconds()
    t0 = time.perf_counter()
    model = build_model(job["case"])
    kw = dict(
        draws=job["draws"],
        tune=job["tune"],
        chains=2,
        cores=2,
        random_seed=job["seed"],
        progressbar=False,
        compute_convergence_checks=False,
        mp_ctx="fork",
    )
    idata = pm_sample(model, job["sampler"], kw)
    wall = time.perf_counter() - t0
    mon.stop()
    return idata, dict(
        wall=wall,
        cpu=cpu_seconds() - cpu0,
        sampling_time=float(idata.posterior.attrs.get("sampling_time", np.nan)),
        mem_peak_mb=mon.peak / 1024,
        mem_base_mb=mon.baseline / 1024,
    )


def run_all(args, worker, shown=("case", "sampler", "wall", "min_ess")) -> list[dict]:
    """Every job of ``args.cases`` x ``args.samplers`` in a fresh process, in that order."""
    results = []
    for case in args.cases:
        for s in args.samplers:
            job = dict(
                case=case,
                sampler=s,
                draws=args.draws,
                tune=args.tune,
                seed=seed_for(args.seed, case, s),
            )
            r = run_job(job, args.timeout, worker=worker)
            results.append(r)
            print(r if "error" in r else {k: r[k] for k in shown}, flush=True)
    return results


def header(title: str, script: str, args, started: float) -> list[str]:
    """The report's title and run description (command, date, machine, versions)."""
    versions, backend = env_info()
    return [
        f"# {title}",
        "",
        f"- command: `python benchmarks/{script} {' '.join(sys.argv[1:])}`",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}",
        f"- machine: {platform.machine()} {platform.system()}, nproc = {os.cpu_count()}; every "
        f"sampler: 2 chains on 2 cores, {args.tune} tuning + {args.draws} kept draws per chain, "
        "1 BLAS/OMP thread per process, each sampler in a fresh spawned process",
        f"- versions: {versions}",
        f"- backend: {backend}",
        f"- runtime: {time.time() - started:.0f} s",
        "",
    ]


def parse_args(doc: str, cases, samplers, argv=None):
    """The scripts' command line: cases, samplers, draws, tune, seed, timeout, output."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", default=list(cases), choices=list(cases))
    p.add_argument("--samplers", nargs="+", default=list(samplers), choices=list(samplers))
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--tune", type=int, default=1000)
    p.add_argument("--seed", type=int, default=2024)
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--output", type=Path, default=None)
    return p.parse_args(argv)


def split_runs(results, case):
    """``(runs, ok)``: the case's results, and those that finished."""
    runs = [r for r in results if r["case"] == case]
    return runs, [r for r in runs if "error" not in r and "timeout" not in r]


def best_nuts(ok, key: str) -> tuple[float, float]:
    """The best NUTS variant's ``r[key]`` per second, with setup and without."""
    nuts = [r for r in ok if r["sampler"] in NUTS_VARIANTS]
    return (
        max((r[key] / r["wall"] for r in nuts), default=np.nan),
        max((r[key] / r["sampling_time"] for r in nuts), default=np.nan),
    )


def failure(r) -> str:
    """Why a job has no result, in a table cell."""
    return "timeout" if "timeout" in r else r["error"].strip().splitlines()[-1][:120]


def write_report(lines: list[str], args) -> None:
    """Print the report and write it to ``args.output`` when given."""
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output:
        args.output.write_text(text)
