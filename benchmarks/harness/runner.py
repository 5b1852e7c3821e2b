"""One sampler on one case, in a fresh worker process, with its costs.

:func:`run_job` starts the worker (``spawn``, or ``forkserver`` with the libraries preloaded
for quick runs), kills its process group after a timeout and returns
:func:`run_sampler`'s result: the draws ``beta`` (chain, draw, d), ``wall`` (the whole call,
setup included: model compilation, graph detection, Laplace approximation, nutpie's numba
compilation, process start-up), ``sampling_time`` (tuning + draws only, i.e. wall without
setup), ``cpu`` (this process and its joined children, all threads) and the peak PSS of the
worker's process group (:class:`MemoryMonitor`).

Samplers: ``SGS``, ``NUTS``, ``nutpie``, ``nutpie-lr``, ``Laplace-MH`` (through ``pm.sample``)
and ``PG``, ``Laplace-PSIS`` (:mod:`harness.baselines`).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
import traceback
import warnings
import zlib

import numpy as np

from .cases import build_model, make_data

NUTS_VARIANTS = ("NUTS", "nutpie", "nutpie-lr")
#: exact samplers that are not NUTS (their runs may join the pooled reference)
EXACT_BASELINES = ("Laplace-MH", "PG")
SAMPLERS = (
    "SGS",
    "SGS-rho0",
    "SGS-tuned",
    "NUTS",
    "nutpie",
    "nutpie-lr",
    "Laplace-MH",
    "Laplace-PSIS",
    "PG",
)


def seed_for(base: int, case: str, sampler: str) -> int:
    return int((base * 1_000_003 + zlib.crc32(f"{case}/{sampler}".encode())) % 2**31)


# --------------------------------------------------------------------- memory monitor


def _tree_pss_kb(pgid: int) -> int:
    """Sum of PSS (kB) over the processes of process group ``pgid``."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            if int(stat[stat.rindex(")") + 2 :].split()[2]) != pgid:
                continue
            with open(f"/proc/{entry}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
                        break
        except (OSError, ValueError, IndexError):
            continue
    return total


class MemoryMonitor(threading.Thread):
    """Samples the process group's total PSS every ``interval`` seconds; keeps the peak."""

    def __init__(self, interval=0.2):
        super().__init__(daemon=True)
        self.interval = interval
        self.pgid = os.getpgrp()
        self.baseline = _tree_pss_kb(self.pgid)
        self.peak = self.baseline
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            self.peak = max(self.peak, _tree_pss_kb(self.pgid))
            self._halt.wait(self.interval)

    def stop(self):
        self._halt.set()
        self.join()
        self.peak = max(self.peak, _tree_pss_kb(self.pgid))


def cpu_seconds() -> float:
    """CPU time of this process (all threads) and of its joined children."""
    import resource

    t = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        ru = resource.getrusage(who)
        t += ru.ru_utime + ru.ru_stime
    return t


# ---------------------------------------------------------------------------- worker


def pm_sample(model, sampler, kw):
    """``pm.sample`` of ``model`` with ``sampler`` (a name of :data:`SAMPLERS` that runs through
    PyMC) and the keyword arguments ``kw``; shared by the benchmark scripts."""
    import pymc as pm

    import pymc_sgs

    from .laplace_mh import LaplaceMH

    with model:
        if sampler == "SGS":
            return pm.sample(step=pymc_sgs.SplitGibbs(), **kw)
        if sampler == "SGS-rho0":
            return pm.sample(step=pymc_sgs.SplitGibbs(rho=0), **kw)
        if sampler == "SGS-tuned":
            return pm.sample(step=pymc_sgs.SplitGibbs(rho="tuned"), **kw)
        if sampler == "Laplace-MH":
            return pm.sample(step=LaplaceMH(), **kw)
        if sampler == "NUTS":
            return pm.sample(**kw)
        if sampler == "nutpie":
            return pm.sample(nuts_sampler="nutpie", **kw)
        if sampler == "nutpie-lr":
            return pm.sample(
                nuts_sampler="nutpie",
                nuts_sampler_kwargs={"low_rank_modified_mass_matrix": True},
                **kw,
            )
    raise ValueError(sampler)


def run_sampler(job: dict) -> dict:
    """Run one sampler on one case; returns the draws (chain, draw, d) and costs."""
    import logging

    warnings.filterwarnings("ignore")
    logging.getLogger("pymc").setLevel(logging.ERROR)
    import arviz as az
    import pymc  # noqa: F401  (imports are not setup)

    import pymc_sgs  # noqa: F401

    az.Numba.disable_numba()  # arviz 0.23.4's numba ess/mcse path breaks on numpy 2.4
    from .baselines import run_laplace_psis, run_pg

    name, sampler = job["case"], job["sampler"]
    X, y, prior_sd = make_data(name, job["data_seed"])
    chains, tune, draws, seed = job["chains"], job["tune"], job["draws"], job["seed"]
    res = {
        "case": name,
        "sampler": sampler,
        "seed": seed,
        "chains": chains,
        "tune": tune,
        "draws": draws,
    }
    mon = MemoryMonitor()
    mon.start()
    cpu0 = cpu_seconds()
    t0 = time.perf_counter()
    if sampler == "PG":
        res["beta"], res["sampling_time"] = run_pg(X, y, prior_sd, chains, tune, draws, seed)
        wall = time.perf_counter() - t0
    elif sampler == "Laplace-PSIS":
        # as many independent draws as the MCMC samplers keep; no tuning
        out = run_laplace_psis(build_model(name, X, y, prior_sd), chains * draws, seed)
        wall = time.perf_counter() - t0
        res.update(out)
    else:
        model = build_model(name, X, y, prior_sd)
        # mp_ctx="fork": what pm.sample uses by default in a plain Linux script. Inside this
        # spawn-ed worker PyMC would default to "spawn", and then wrap nutpie's sampling in
        # threadpool_limits(blas_cores=cores), which makes OpenBLAS run 2 threads inside each of
        # nutpie's 2 chain threads: ~10x slower on 2 cores (measured, ill-conditioned d=50)
        kw = dict(
            draws=draws,
            tune=tune,
            chains=chains,
            cores=chains,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
            mp_ctx="fork",
        )
        idata = pm_sample(model, sampler, kw)
        wall = time.perf_counter() - t0
        res["beta"] = np.asarray(idata.posterior["beta"].values, dtype=float)
        res["sampling_time"] = float(idata.posterior.attrs.get("sampling_time", np.nan))
        st = idata.sample_stats
        # the default rho="auto" skips the split where rho=0 applies (rho stat 0)
        split = sampler in ("SGS", "SGS-tuned") and bool(np.all(st["rho"].values[:, -1] > 0))
        if split:
            rho = st["rho"].values[:, -1]
            lw = st["log_weight"].values
            sdw = []
            for c in range(lw.shape[0]):
                w = np.exp(lw[c] - np.nanmax(lw[c]))
                sdw.append(float(np.nanstd(w / np.nanmean(w), ddof=1)))
            res.update(rho=rho.tolist(), sd_w=sdw, z_accept=float(np.nanmean(st["z_accept"])))
        elif sampler == "Laplace-MH":
            res.update(accept=float(st["accept"].mean()), mh_beta=st["beta"].values[:, -1].tolist())
        elif sampler in ("SGS", "SGS-rho0", "SGS-tuned"):
            res.update(
                accept=float(st["shift_accept"].mean()),
                mh_beta=st["shift_beta"].values[:, -1].tolist(),
            )
        else:
            res["n_steps"] = float(st["n_steps"].mean())
            res["divergences"] = int(st["diverging"].sum())
    mon.stop()
    res["wall"] = wall
    res["cpu"] = cpu_seconds() - cpu0
    res["mem_peak_mb"] = mon.peak / 1024
    res["mem_base_mb"] = mon.baseline / 1024
    return res


def _worker_main(job, queue):
    os.setpgrp()  # own process group: the memory monitor and the timeout kill use it
    try:
        queue.put(run_sampler(job))
    except Exception:  # noqa: BLE001
        queue.put({"case": job["case"], "sampler": job["sampler"], "error": traceback.format_exc()})


#: start method of the per-sampler worker processes (compare.py switches --quick to "forkserver")
WORKER_START = {"method": "spawn"}


def run_job(job: dict, timeout: float, worker=None, method: str | None = None) -> dict:
    """Run ``job`` in a fresh process; kill its process group after ``timeout`` s.

    ``worker(job, queue)`` runs in the child (default :func:`_worker_main`, the GLM
    samplers; :mod:`harness.mixed_cases` passes its own) and ``method`` overrides
    :data:`WORKER_START`.

    Full mode: ``spawn`` (a fresh interpreter per sampler). ``--quick``: ``forkserver``
    with pymc/pymc_sgs preloaded, i.e. still a fresh process per sampler, forked from a
    server that has only imported the libraries; it saves ~4 s of imports per run. Peak
    PSS then counts the preloaded library pages shared with the server at half weight.
    """
    ctx = mp.get_context(method or WORKER_START["method"])
    q = ctx.Queue()
    p = ctx.Process(target=worker or _worker_main, args=(job, q))
    t0 = time.perf_counter()
    p.start()
    res = None
    while res is None:
        try:
            res = q.get(timeout=1.0)
        except Exception:  # noqa: BLE001  (queue.Empty)
            if not p.is_alive():
                res = {
                    "case": job["case"],
                    "sampler": job["sampler"],
                    "error": f"worker died (exit code {p.exitcode})",
                }
            elif time.perf_counter() - t0 > timeout:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                res = {"case": job["case"], "sampler": job["sampler"], "timeout": timeout}
    p.join(10)
    res["elapsed"] = time.perf_counter() - t0
    return res
