"""SplitGibbs against PyMC NUTS, nutpie (diagonal and low-rank mass matrix) and Polya-Gamma Gibbs.

Every sampler runs on the same data, with the same number of chains, tuning
iterations and draws, each in a fresh ``spawn``-ed worker process (so peak
memory is per sampler), cores = chains:

* ``SGS``        ``pm.sample(step=pymc_sgs.SplitGibbs())`` (rho="auto", bias_tol=0.1);
* ``NUTS``       ``pm.sample()`` (PyMC's NUTS on the PyTensor C backend; the header
                 records whether PyTensor is linked to a BLAS);
* ``nutpie``     ``pm.sample(nuts_sampler="nutpie")`` (numba backend, diagonal mass matrix);
* ``nutpie-lr``  the same with ``nuts_sampler_kwargs={"low_rank_modified_mass_matrix": True}``;
* ``PG``         Polya-Gamma Gibbs (logistic cases only), written below:
                 omega_i ~ PG(1, x_i^T beta), beta ~ N(V (X^T kappa + P0 m0), V),
                 V = (X^T Omega X + P0)^-1, kappa = y - 1/2 (``polyagamma.random_polyagamma``).

Columns: min bulk ESS over the coefficients (ArviZ), wall time of the whole call
(setup/compilation + tuning + draws), ESS/s on that wall time, its ratio to the
best NUTS variant's, max_j |mean_j - ref_j| / sd_j against a reference posterior
(a long nutpie run in its own worker; posteriordb's reference for dogs), peak
memory of the worker's process tree, and SplitGibbs's tuned rho.

Usage::

    python benchmarks/compare.py --quick          # CI smoke run (< 3 min), no results file
    python benchmarks/compare.py                  # full run, writes benchmarks/results/compare.md + .png
    python benchmarks/compare.py --cases logit-1e4-10 dogs --samplers SGS nutpie
    python benchmarks/compare.py --list-cases
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import multiprocessing as mp  # noqa: E402
import platform  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402
import zlib  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "tests"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

RESULTS = Path(__file__).resolve().parent / "results" / "compare.md"
PLOT = Path(__file__).resolve().parent / "results" / "compare_ess_per_s.png"

NUTS_VARIANTS = ("NUTS", "nutpie", "nutpie-lr")
SAMPLERS = ("SGS", "NUTS", "nutpie", "nutpie-lr", "PG")

# --------------------------------------------------------------------------- cases
#
# kind: "logistic" (X_ij ~ N(0, 1/d), beta_true ~ N(0, I)), "illcond" (equicorrelated
# N(0, 1) features with correlation `corr`, beta_true ~ N(0, I/d)), "poisson"
# (intercept column + N(0, 1/d) features, beta_true ~ N(0, 0.5^2)), "dogs" (posteriordb).
# `skip`: reason the case is not run in full mode (reported in the table).
# `ref`: sampler of the reference run.

_DIAG_50 = ("exceeds ~10 min at 1000+1000: a 200+200 probe (same data, 2 chains) took {} s wall "
            "at {} leapfrog steps/draw (diagonal mass matrix vs. correlation 0.99); run with "
            "--run-skipped")
_DIAG_200 = ("exceeds ~10 min at 1000+1000: a 200+200 probe (same data, 2 chains) was still "
             "running when killed after 240 s; run with --run-skipped")

CASES = {
    "logit-1e4-10": dict(kind="logistic", n=10_000, d=10, est_min=3),
    "logit-1e4-100": dict(kind="logistic", n=10_000, d=100, est_min=4),
    "logit-1e5-10": dict(kind="logistic", n=100_000, d=10, est_min=12),
    "logit-1e5-100": dict(kind="logistic", n=100_000, d=100, cap=(500, 500), est_min=15),
    "logit-1e6-10": dict(kind="logistic", n=1_000_000, d=10, cap=(300, 300), est_min=36),
    "logit-1e6-100": dict(
        kind="logistic", n=1_000_000, d=100,
        skip="skipped: X alone is 800 MB and one gradient reads it twice; at n=1e5, d=100 "
             "PyMC NUTS already needs ~0.4 s per iteration, so every NUTS variant (and SGS, "
             "~1 s/sweep) would far exceed 10 min",
    ),
    "illcond-50": dict(kind="illcond", n=10_000, d=50, corr=0.99, est_min=3, skip_samplers={
        "NUTS": _DIAG_50.format(146, 255), "nutpie": _DIAG_50.format(205, 252)}),
    "illcond-200": dict(kind="illcond", n=10_000, d=200, corr=0.99, est_min=4, skip_samplers={
        "NUTS": _DIAG_200, "nutpie": _DIAG_200}),
    "poisson-1e5": dict(kind="poisson", n=100_000, d=10, est_min=8),
    "dogs": dict(kind="dogs", est_min=2),
    # quick mode only
    "illcond-50-n2000": dict(kind="illcond", n=2_000, d=50, corr=0.99, est_min=2),
}
# full mode, in this order (the time budget drops cases from the end)
FULL_CASES = ["logit-1e4-10", "dogs", "illcond-50", "illcond-200", "poisson-1e5", "logit-1e4-100",
              "logit-1e5-10", "logit-1e5-100", "logit-1e6-10", "logit-1e6-100"]
QUICK_CASES = ["logit-1e4-10", "illcond-50-n2000", "dogs"]
PRIOR_SD = 5.0


def case_label(name: str) -> str:
    c = CASES[name]
    if c["kind"] == "logistic":
        return f"logistic n={c['n']:.0e} d={c['d']}".replace("e+0", "e")
    if c["kind"] == "illcond":
        return f"ill-cond. logistic (corr {c['corr']}) n={c['n']} d={c['d']}"
    if c["kind"] == "poisson":
        return f"Poisson-log n={c['n']:.0e} d={c['d']}".replace("e+0", "e")
    return "posteriordb dogs (n=750, d=3)"


def is_logistic(name: str) -> bool:
    return CASES[name]["kind"] in ("logistic", "illcond", "dogs")


def make_data(name: str, data_seed: int):
    """(X, y, prior_sd) of a case; deterministic in (name, data_seed)."""
    c = CASES[name]
    if c["kind"] == "dogs":
        from posteriordb_cases import _dogs_design, load_data

        y = np.asarray(load_data("dogs-dogs")["y"], dtype=int)
        return _dogs_design(y), y.ravel().astype(float), 100.0
    n, d = c["n"], c["d"]
    rng = np.random.default_rng([data_seed, zlib.crc32(name.encode())])
    if c["kind"] == "logistic":
        X = rng.standard_normal((n, d)) / np.sqrt(d)
        beta = rng.standard_normal(d)
    elif c["kind"] == "illcond":
        r = c["corr"]
        X = np.sqrt(r) * rng.standard_normal((n, 1)) + np.sqrt(1 - r) * rng.standard_normal((n, d))
        beta = rng.standard_normal(d) / np.sqrt(d)
    else:  # poisson
        X = np.column_stack([np.ones(n), rng.standard_normal((n, d - 1)) / np.sqrt(d - 1)])
        beta = 0.5 * rng.standard_normal(d)
        beta[0] = 0.5
        return X, rng.poisson(np.exp(X @ beta)).astype(float), PRIOR_SD
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(X @ beta)))).astype(float)
    return X, y, PRIOR_SD


def build_model(name: str, X, y, prior_sd):
    import pymc as pm

    if CASES[name]["kind"] == "dogs":
        from posteriordb_cases import build_model as pdb_build

        return pdb_build("dogs-dogs")[0]
    # X enters as a constant, not pm.Data: nutpie 0.16.8 was ~15x slower per gradient with
    # X as a shared pm.Data variable (n=2e4, d=100, measured); PyMC NUTS and SGS are unaffected
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, prior_sd, shape=X.shape[1])
        eta = pm.math.dot(X, beta)
        if CASES[name]["kind"] == "poisson":
            pm.Poisson("y", mu=pm.math.exp(eta), observed=y.astype(np.int64))
        else:
            pm.Bernoulli("y", logit_p=eta, observed=y.astype(np.int64))
    return model


# ------------------------------------------------------------------ Polya-Gamma Gibbs


def pg_chain(X, y, prior_sd, tune, draws, seed):
    """Exact PG Gibbs for logistic regression with prior N(0, prior_sd^2 I), one chain."""
    from polyagamma import random_polyagamma
    from scipy.linalg import cho_solve, cholesky, solve_triangular

    rng = np.random.default_rng(seed)
    n, d = X.shape
    P0 = np.eye(d) / prior_sd**2
    b = X.T @ (y - 0.5)  # X^T kappa + P0 m0 (m0 = 0)
    beta = rng.uniform(-0.1, 0.1, d)
    out = np.empty((draws, d))
    for it in range(tune + draws):
        omega = random_polyagamma(1.0, X @ beta, random_state=rng)
        Xw = X * np.sqrt(omega)[:, None]
        L = cholesky(Xw.T @ Xw + P0, lower=True)
        beta = cho_solve((L, True), b) + solve_triangular(L, rng.standard_normal(d), lower=True,
                                                          trans="T")
        if it >= tune:
            out[it - tune] = beta
    return out


_PG_DATA: dict = {}


def _pg_init(X, y, prior_sd):
    _PG_DATA.update(X=X, y=y, prior_sd=prior_sd)


def _pg_worker(args):
    tune, draws, seed = args
    t0 = time.perf_counter()
    out = pg_chain(_PG_DATA["X"], _PG_DATA["y"], _PG_DATA["prior_sd"], tune, draws, seed)
    return out, time.perf_counter() - t0


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


# ---------------------------------------------------------------------------- worker


def _cpu_seconds() -> float:
    """CPU time of this process (all threads) and of its joined children."""
    import resource

    t = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        ru = resource.getrusage(who)
        t += ru.ru_utime + ru.ru_stime
    return t


def run_sampler(job: dict) -> dict:
    """Run one sampler on one case; returns the draws (chain, draw, d) and costs."""
    import logging

    warnings.filterwarnings("ignore")
    logging.getLogger("pymc").setLevel(logging.ERROR)
    import pymc as pm

    import pymc_sgs

    name, sampler = job["case"], job["sampler"]
    X, y, prior_sd = make_data(name, job["data_seed"])
    chains, tune, draws, seed = job["chains"], job["tune"], job["draws"], job["seed"]
    res = {"case": name, "sampler": sampler, "seed": seed, "chains": chains, "tune": tune,
           "draws": draws}
    mon = MemoryMonitor()
    mon.start()
    cpu0 = _cpu_seconds()
    t0 = time.perf_counter()
    if sampler == "PG":
        from concurrent.futures import ProcessPoolExecutor

        seeds = np.random.SeedSequence(seed).spawn(chains)
        # one process per chain, like pm.sample's; each receives a copy of (X, y)
        with ProcessPoolExecutor(chains, mp_context=mp.get_context("spawn"), initializer=_pg_init,
                                 initargs=(X, y, prior_sd)) as ex:
            out = list(ex.map(_pg_worker, [(tune, draws, s) for s in seeds]))
        wall = time.perf_counter() - t0
        res["beta"] = np.stack([o[0] for o in out])
        res["sampling_time"] = max(o[1] for o in out)
    else:
        model = build_model(name, X, y, prior_sd)
        # mp_ctx="fork": what pm.sample uses by default in a plain Linux script. Inside this
        # spawn-ed worker PyMC would default to "spawn", and then wrap nutpie's sampling in
        # threadpool_limits(blas_cores=cores), which makes OpenBLAS run 2 threads inside each of
        # nutpie's 2 chain threads: ~10x slower on 2 cores (measured, ill-conditioned d=50)
        kw = dict(draws=draws, tune=tune, chains=chains, cores=chains, random_seed=seed,
                  progressbar=False, compute_convergence_checks=False, mp_ctx="fork")
        with model:
            if sampler == "SGS":
                idata = pm.sample(step=pymc_sgs.SplitGibbs(), **kw)
            elif sampler == "NUTS":
                idata = pm.sample(**kw)
            elif sampler == "nutpie":
                idata = pm.sample(nuts_sampler="nutpie", **kw)
            elif sampler == "nutpie-lr":
                idata = pm.sample(nuts_sampler="nutpie",
                                  nuts_sampler_kwargs={"low_rank_modified_mass_matrix": True}, **kw)
            else:
                raise ValueError(sampler)
        wall = time.perf_counter() - t0
        res["beta"] = np.asarray(idata.posterior["beta"].values, dtype=float)
        res["sampling_time"] = float(idata.posterior.attrs.get("sampling_time", np.nan))
        st = idata.sample_stats
        if sampler == "SGS":
            rho = st["rho"].values[:, -1]
            lw = st["log_weight"].values
            sdw = []
            for c in range(lw.shape[0]):
                w = np.exp(lw[c] - np.nanmax(lw[c]))
                sdw.append(float(np.nanstd(w / np.nanmean(w), ddof=1)))
            res.update(rho=rho.tolist(), sd_w=sdw, z_accept=float(np.nanmean(st["z_accept"])))
        else:
            res["n_steps"] = float(st["n_steps"].mean())
            res["divergences"] = int(st["diverging"].sum())
    mon.stop()
    res["wall"] = wall
    res["cpu"] = _cpu_seconds() - cpu0
    res["mem_peak_mb"] = mon.peak / 1024
    res["mem_base_mb"] = mon.baseline / 1024
    return res


def _worker_main(job, queue):
    os.setpgrp()  # own process group: the memory monitor and the timeout kill use it
    try:
        queue.put(run_sampler(job))
    except Exception:  # noqa: BLE001
        queue.put({"case": job["case"], "sampler": job["sampler"], "error": traceback.format_exc()})


#: start method of the per-sampler worker processes (main() switches --quick to "forkserver")
WORKER_START = {"method": "spawn"}


def run_job(job: dict, timeout: float) -> dict:
    """Run ``job`` in a fresh process; kill its process group after ``timeout`` s.

    Full mode: ``spawn`` (a fresh interpreter per sampler). ``--quick``: ``forkserver``
    with pymc/pymc_sgs preloaded, i.e. still a fresh process per sampler, forked from a
    server that has only imported the libraries; it saves ~4 s of imports per run. Peak
    PSS then counts the preloaded library pages shared with the server at half weight.
    """
    ctx = mp.get_context(WORKER_START["method"])
    q = ctx.Queue()
    p = ctx.Process(target=_worker_main, args=(job, q))
    t0 = time.perf_counter()
    p.start()
    res = None
    while res is None:
        try:
            res = q.get(timeout=1.0)
        except Exception:  # noqa: BLE001  (queue.Empty)
            if not p.is_alive():
                res = {"case": job["case"], "sampler": job["sampler"],
                       "error": f"worker died (exit code {p.exitcode})"}
            elif time.perf_counter() - t0 > timeout:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                res = {"case": job["case"], "sampler": job["sampler"], "timeout": timeout}
    p.join(10)
    res["elapsed"] = time.perf_counter() - t0
    return res


# --------------------------------------------------------------------------- metrics


def seed_for(base: int, case: str, sampler: str) -> int:
    return int((base * 1_000_003 + zlib.crc32(f"{case}/{sampler}".encode())) % 2**31)


def _summary(b: np.ndarray):
    """(mean, sd, mcse, min bulk ESS, max R-hat) of draws (chain, draw, d)."""
    import arviz as az

    ds = az.convert_to_dataset({"beta": b})
    return (b.mean(axis=(0, 1)), b.std(axis=(0, 1), ddof=1),
            az.mcse(ds, method="mean")["beta"].values,
            float(az.ess(ds, method="bulk")["beta"].values.min()),
            float(np.max(az.rhat(ds)["beta"].values)))


def _min_tail_ess(b: np.ndarray) -> float:
    """Minimum over coefficients of ArviZ tail ESS (5% and 95% quantiles) of draws (chain, draw, d)."""
    import arviz as az

    return float(az.ess(az.convert_to_dataset({"beta": b}), method="tail")["beta"].values.min())


def posteriordb_reference():
    """(mean, sd, mcse, description) of posteriordb's dogs reference (10000 Stan draws)."""
    from posteriordb_cases import build_model as pdb_build
    from posteriordb_cases import load_reference

    ref = load_reference("dogs-dogs")
    mapping = pdb_build("dogs-dogs")[1]
    mean, sd = np.empty(len(mapping)), np.empty(len(mapping))
    for stan_name, (_v, i) in mapping.items():
        mean[i], sd[i] = ref[stan_name]
    return mean, sd, sd / np.sqrt(10_000), "posteriordb reference (10000 Stan draws)"


def dedicated_reference(run: dict):
    mean, sd, mcse, ess, rhat = _summary(run["beta"])
    b = run["beta"]
    return mean, sd, mcse, (
        f"dedicated {run['sampler']} run, {b.shape[0]} chains x {b.shape[1]} draws "
        f"({run['tune']} tune), seed {run['seed']}, min bulk ESS {ess:.0f}, max R-hat "
        f"{rhat:.3f}, {run['wall']:.0f} s")


def pooled_reference(runs: list[dict], exclude: str | None):
    """Pool of the healthy exact-sampler runs of the case (all chains), without ``exclude``."""
    pool = [r for r in runs if r.get("healthy") and r["sampler"] != exclude]
    if not pool:
        return None
    b = np.concatenate([r["beta"] for r in pool], axis=0)
    mean, sd, mcse, ess, rhat = _summary(b)
    names = "+".join(r["sampler"] for r in pool)
    return mean, sd, mcse, (
        f"pool of {names}: {b.shape[0]} chains x {b.shape[1]} draws, min bulk ESS {ess:.0f}, "
        f"max R-hat across the pooled chains {rhat:.3f}")


def metrics(run: dict, ref) -> dict:
    mean, _sd, mcse, min_ess, rhat = _summary(run["beta"])
    tail = _min_tail_ess(run["beta"])
    out = {
        "min_ess": min_ess,
        "ess_per_s": min_ess / run["wall"],
        "min_tail_ess": tail,
        "tail_per_s": tail / run["wall"],
        "rhat": rhat,
        "ms_iter": 1e3 * run["sampling_time"] / (run["tune"] + run["draws"]),
        "bias": np.nan, "bias_se": np.nan, "n_sig": 0,
    }
    if ref is None:
        return out
    ref_mean, ref_sd, ref_mcse, _ = ref
    z = np.abs(mean - ref_mean) / ref_sd
    noise = np.sqrt(mcse**2 + ref_mcse**2) / ref_sd  # MC error of each z_j
    j = int(np.argmax(z))
    # coefficients whose error exceeds 0.1 sd by more than 3 MC errors (3 sigma: robust to
    # testing d coefficients at once)
    out.update(bias=float(z[j]), bias_se=float(noise[j]), n_sig=int(np.sum(z - 0.1 > 3 * noise)))
    return out


# --------------------------------------------------------------------------- report


def env_info():
    import arviz
    import pymc
    import pytensor
    import scipy

    import pymc_sgs

    try:
        import nutpie

        nutpie_v = nutpie.__version__
    except Exception:  # noqa: BLE001
        nutpie_v = "not installed"
    try:
        import polyagamma

        pg_v = polyagamma.__version__
    except Exception:  # noqa: BLE001
        pg_v = "not installed"
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
    except Exception:  # noqa: BLE001
        commit = "unknown"
    versions = (
        f"python {platform.python_version()}, numpy {np.__version__}, scipy {scipy.__version__}, "
        f"pymc {pymc.__version__}, pytensor {pytensor.__version__}, arviz {arviz.__version__}, "
        f"nutpie {nutpie_v}, polyagamma {pg_v}, pymc_sgs {pymc_sgs.__version__} (git {commit})"
    )
    blas = pytensor.config.blas__ldflags
    backend = (
        f"PyTensor mode={pytensor.config.mode}, linker={pytensor.config.linker}, "
        f"cxx={pytensor.config.cxx or '(none)'}, blas__ldflags={blas!r}"
        + (" -> NOT linked to a BLAS: PyTensor's dot products opt out of C code and fall back "
           "to NumPy-based implementations (NumPy's bundled BLAS, with Python-level call "
           "overhead and extra copies), which slows PyMC NUTS" if not blas else " -> linked to a BLAS")
        + "; nutpie compiles the model with its numba backend (independent of blas__ldflags)"
    )
    return versions, backend


def fmt(v, nd=0):
    if v is None or not np.isfinite(v):
        return "-"
    if abs(v) >= 100 or nd == 0:
        return f"{v:.0f}"
    return f"{v:.{nd}f}"


def fmt_sig(v):
    if v is None or not np.isfinite(v):
        return "-"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


COLUMNS_DOC = """## Columns

- min ESS: minimum over the coefficients of ArviZ bulk ESS of the kept draws (max R-hat shown
  when > 1.01); in parentheses the minimum tail ESS (of the 5% and 95% quantiles), which
  anti-correlated draws (NUTS, SplitGibbs's over-relaxed shift move) do not inflate.
- wall s (setup): wall time of the whole `pm.sample` call (PG: of its pool of chain processes),
  including model compilation/setup and tuning; in parentheses the part outside PyMC's
  `sampling_time` (PyTensor compilation, SplitGibbs's graph detection and Cholesky
  factorisation, nutpie's numba compilation, process start-up).
- CPU s: CPU time of the sampler's process and its joined children (all threads), same span.
- ESS/s = min ESS / wall s; ÷ best NUTS = that over the best ESS/s of NUTS, nutpie and
  nutpie-lr on the same case; tail ÷ best NUTS = the same ratio for the tail ESS.
- max |mean − ref|/sd: max over coefficients of |posterior mean − reference mean| / reference
  sd; in parentheses its Monte Carlo error sqrt(MCSE^2 + MCSE_ref^2)/sd at that coefficient.
  For SplitGibbs it is the rho-bias (it samples pi_rho, not pi) plus MC noise; the max over d
  coefficients of pure noise is about 2-3 MC errors.
- peak MB (+Δ): peak total PSS (proportional set size, so pages shared after fork count once)
  of the worker's process group, i.e. the sampler's process plus its chain processes/threads,
  sampled every 0.2 s; Δ = above the worker's PSS just before the call (after imports and data
  generation).
- ms/iter: PyMC's `sampling_time` (tuning + draws, chains in parallel) per iteration: the
  cost of one SGS sweep / one NUTS trajectory of one chain.
- SGS rho [sd(w̃)]: tuned rho per chain (rho="auto" tunes each chain separately) and, in
  brackets, the sd of the normalised importance weights pi/pi_rho over the kept draws, per
  chain: the bias certificate (no posterior expectation is off by more than about sd(w̃)
  posterior sds; target bias_tol = 0.1); z-acc = mean acceptance of the over-relaxed z-moves.
  NUTS variants: mean leapfrog steps per draw (= gradient evaluations), divergences."""


def table_rows(case_results: list[dict]) -> list[str]:
    lines = [
        "| case | sampler | min ESS (tail) | wall s (setup) | CPU s | ESS/s | ÷ best NUTS "
        "| tail ÷ best NUTS | max \\|mean − ref\\|/sd (MC err) | peak MB (+Δ) | ms/iter "
        "| SGS rho [sd(w̃)] / NUTS steps |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    blank = " | | | | | | | | |"
    for cr in case_results:
        label = case_label(cr["case"])
        if cr.get("skip"):
            lines.append(f"| {label} | all | {cr['skip']} |" + blank)
            continue
        if CASES[cr["case"]].get("cap") and (cr["tune"], cr["draws"]) == CASES[cr["case"]]["cap"]:
            label += f" (capped: {cr['tune']}+{cr['draws']} iter.)"
        best = max((r["m"]["ess_per_s"] for r in cr["runs"]
                    if r["sampler"] in NUTS_VARIANTS and "m" in r), default=np.nan)
        best_tail = max((r["m"]["tail_per_s"] for r in cr["runs"]
                         if r["sampler"] in NUTS_VARIANTS and "m" in r), default=np.nan)
        for r in cr["runs"]:
            s = r["sampler"]
            if "skipped" in r:
                lines.append(f"| {label} | {s} | skipped: {r['skipped']} |" + blank)
                continue
            if "timeout" in r:
                lines.append(f"| {label} | {s} | timeout: killed after {r['timeout']:.0f} s |"
                             + blank)
                continue
            if "error" in r:
                last = r["error"].strip().splitlines()[-1][:150].replace("|", "/")
                lines.append(f"| {label} | {s} | error: {last} |" + blank)
                continue
            m = r["m"]
            setup = r["wall"] - r["sampling_time"]
            ratio = m["ess_per_s"] / best if np.isfinite(best) else np.nan
            tail_ratio = m["tail_per_s"] / best_tail if np.isfinite(best_tail) else np.nan
            if s == "SGS":
                extra = ("rho " + "/".join(f"{v:.3g}" for v in r["rho"]) + " ["
                         + "/".join(f"{v:.2f}" for v in r["sd_w"]) + "]"
                         + f", z-acc {r['z_accept']:.2f}")
            elif s in NUTS_VARIANTS:
                extra = f"{r['n_steps']:.1f} steps" + (
                    f", {r['divergences']} div." if r["divergences"] else "")
            else:
                extra = ""
            rhat = f" (R-hat {m['rhat']:.2f})" if m["rhat"] > 1.01 else ""
            bias = ("-" if not np.isfinite(m["bias"])
                    else f"{m['bias']:.3f} ({m['bias_se']:.3f})")
            lines.append(
                f"| {label} | {s} | {fmt(m['min_ess'])} ({fmt(m['min_tail_ess'])}){rhat} "
                f"| {r['wall']:.1f} ({setup:.1f}) "
                f"| {r['cpu']:.0f} | {fmt_sig(m['ess_per_s'])} | {fmt_sig(ratio)} "
                f"| {fmt_sig(tail_ratio)} | {bias} "
                f"| {r['mem_peak_mb']:.0f} (+{r['mem_peak_mb'] - r['mem_base_mb']:.0f}) "
                f"| {m['ms_iter']:.2f} | {extra} |"
            )
    return lines


def targets(case_results: list[dict]) -> list[str]:
    def ratios(kind_pred, key="ess_per_s"):
        out = []
        for cr in case_results:
            if cr.get("skip") or not kind_pred(cr["case"]):
                continue
            runs = {r["sampler"]: r for r in cr["runs"] if "m" in r}
            best = max((runs[s]["m"][key] for s in NUTS_VARIANTS if s in runs),
                       default=np.nan)
            if "SGS" in runs and np.isfinite(best):
                out.append((cr["case"], runs["SGS"]["m"][key] / best))
            elif any(r["sampler"] == "SGS" for r in cr["runs"]):
                out.append((cr["case"], np.nan))
        return out

    lines = []
    ill = ratios(lambda c: CASES[c]["kind"] == "illcond")
    well = ratios(lambda c: CASES[c]["kind"] in ("logistic", "poisson"))
    for title, rs, thr in (("ill-conditioned logistic: SplitGibbs ESS/s >= 5x best NUTS", ill, 5.0),
                           ("well-conditioned: >= 1x", well, 1.0)):
        if not rs:
            lines.append(f"- {title}: not measured (no such case run)")
            continue
        vals = ", ".join(f"{c} {v:.2f}x" for c, v in rs)
        ok = all(np.isfinite(v) and v >= thr for _, v in rs)
        lines.append(f"- {title}: measured {vals} -> **{'PASS' if ok else 'FAIL'}**")
    tail = ratios(lambda c: True, key="tail_per_s")
    if tail:
        lines.append("- (not a target; for reading the bulk ratios) tail ESS/s, SplitGibbs / best "
                     "NUTS: " + ", ".join(f"{c} {v:.2f}x" for c, v in tail))
    sgs = [(cr["case"], r) for cr in case_results if not cr.get("skip")
           for r in cr["runs"] if r["sampler"] == "SGS" and "m" in r and np.isfinite(r["m"]["bias"])]
    if sgs:
        worst_c, worst = max(sgs, key=lambda t: t[1]["m"]["bias"])
        n_sig = sum(r["m"]["n_sig"] for _, r in sgs)
        if worst["m"]["bias"] <= 0.1:
            verdict = "PASS"
        elif n_sig == 0:
            verdict = ("FAIL on the point estimate, but not significant: no coefficient exceeds "
                       "0.1 sd by more than 3 MC errors")
        else:
            verdict = "FAIL"
        vals = ", ".join(f"{c} {r['m']['bias']:.3f} ± {r['m']['bias_se']:.3f}" for c, r in sgs)
        cert = max(max(r["sd_w"]) for _, r in sgs)
        lines.append(
            f"- at bias <= 0.1 posterior sd: SplitGibbs max_j |mean_j - ref_j|/sd_j per case: "
            f"{vals}; max {worst['m']['bias']:.3f} ({worst_c}); coefficients exceeding 0.1 sd by "
            f"> 3 MC errors: {n_sig}; largest certificate sd(w̃) {cert:.2f} -> **{verdict}**"
        )
    return lines


def plot(case_results: list[dict], path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ds = sorted({CASES[cr["case"]]["d"] for cr in case_results
                 if CASES[cr["case"]]["kind"] == "logistic"})
    if not ds:
        return False
    fig, axes = plt.subplots(1, len(ds), figsize=(5.5 * len(ds), 4.2), squeeze=False)
    markers = dict(zip(SAMPLERS, "os^vD"))
    for ax, d in zip(axes[0], ds):
        crs = sorted((cr for cr in case_results if CASES[cr["case"]]["kind"] == "logistic"
                      and CASES[cr["case"]]["d"] == d and not cr.get("skip")),
                     key=lambda cr: CASES[cr["case"]]["n"])
        for s in SAMPLERS:
            pts = [(CASES[cr["case"]]["n"], r["m"]["ess_per_s"]) for cr in crs for r in cr["runs"]
                   if r["sampler"] == s and "m" in r]
            if pts:
                ax.plot(*zip(*pts), marker=markers[s], label=s)
        skipped = [CASES[cr["case"]]["n"] for cr in case_results
                   if CASES[cr["case"]]["kind"] == "logistic" and CASES[cr["case"]]["d"] == d
                   and cr.get("skip")]
        for n in skipped:
            ax.axvline(n, color="grey", ls=":", lw=1)
            ax.text(n, 0.95, " skipped", transform=ax.get_xaxis_transform(), fontsize=8,
                    color="grey", va="top")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("n (observations)")
        ax.set_ylabel("min bulk ESS / wall s (incl. setup + tuning)")
        ax.set_title(f"well-conditioned logistic regression, d = {d}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# ------------------------------------------------------------------------------ main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help=f"CI smoke run (< 3 min): cases {QUICK_CASES}, 2 chains x 200 draws "
                        "(200 tune); does not write the results files unless --output is given")
    p.add_argument("--cases", nargs="+", default=None, choices=list(CASES), metavar="CASE",
                   help=f"cases to run, in this order (default: full {FULL_CASES}; quick "
                        f"{QUICK_CASES}); see --list-cases")
    p.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=SAMPLERS)
    p.add_argument("--list-cases", action="store_true", help="print the cases and exit")
    p.add_argument("--run-skipped", action="store_true",
                   help="also run cases marked as skipped (logit-1e6-100)")
    p.add_argument("--no-cap", action="store_true",
                   help="run capped cases (logit-1e6-10) with --tune/--draws too")
    p.add_argument("--chains", type=int, default=2, help="chains (= cores) for every sampler")
    p.add_argument("--tune", type=int, default=1000)
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--ref-draws", type=int, default=0,
                   help="> 0: reference = a dedicated nutpie run (nutpie-lr on ill-conditioned "
                        "cases) with --ref-chains chains of this many draws; 0 (default): the pool "
                        "of the healthy exact-sampler runs of the case (leave-one-out)")
    p.add_argument("--ref-chains", type=int, default=4)
    p.add_argument("--ref-tune", type=int, default=1000)
    p.add_argument("--min-ref-ess", type=float, default=None,
                   help="an exact run joins the pooled reference if its min bulk ESS >= this "
                        "(default 400; quick 150) ...")
    p.add_argument("--max-ref-rhat", type=float, default=None,
                   help="... and max R-hat <= this (default 1.01; quick 1.05)")
    p.add_argument("--seed", type=int, default=2024, help="base seed of every run")
    p.add_argument("--data-seed", type=int, default=20220101)
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds after which a sampler's worker is killed (reported as timeout)")
    p.add_argument("--budget-min", type=float, default=None,
                   help="drop (and report) the remaining cases once the elapsed time plus the "
                        "case's estimated cost exceeds this many minutes (default: 60 in full "
                        "mode, none with --quick or --cases)")
    p.add_argument("--output", type=Path, default=None,
                   help=f"markdown results (default {RESULTS.relative_to(ROOT)} in full mode)")
    p.add_argument("--plot", type=Path, default=None,
                   help=f"ESS/s plot (default {PLOT.relative_to(ROOT)}, next to --output)")
    args = p.parse_args(argv)
    explicit_cases = args.cases is not None
    if args.quick:
        args.cases = args.cases or QUICK_CASES
        args.tune = args.draws = 200
        args.ref_chains, args.ref_draws, args.ref_tune = 2, min(args.ref_draws, 1000), 300
        args.timeout = min(args.timeout, 120.0)
        args.min_ref_ess = args.min_ref_ess or 150.0
        args.max_ref_rhat = args.max_ref_rhat or 1.05
    else:
        args.cases = args.cases or FULL_CASES
        if args.output is None:
            args.output = RESULTS
        if args.budget_min is None and not explicit_cases:
            args.budget_min = 60.0
    args.min_ref_ess = args.min_ref_ess or 400.0
    args.max_ref_rhat = args.max_ref_rhat or 1.01
    if args.output is not None and args.plot is None:
        args.plot = args.output.with_name(PLOT.name)
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.list_cases:
        for c in CASES:
            extra = []
            if CASES[c].get("skip"):
                extra.append(CASES[c]["skip"])
            for smp, why in CASES[c].get("skip_samplers", {}).items():
                extra.append(f"{smp} skipped ({why.split(':')[0]})")
            if CASES[c].get("cap"):
                extra.append(f"capped at {CASES[c]['cap'][0]}+{CASES[c]['cap'][1]} iterations")
            print(f"{c:18s} {case_label(c)}  (est. {CASES[c].get('est_min', '?')} min)"
                  + (f"  [{'; '.join(extra)}]" if extra else ""))
        return None
    import arviz as az

    az.Numba.disable_numba()  # arviz 0.23.4's numba ess/mcse path breaks on numpy 2.4
    warnings.filterwarnings("ignore", message=".*BLAS.*")

    if args.quick:
        WORKER_START["method"] = "forkserver"
        mp.set_forkserver_preload(["numpy", "scipy.linalg", "pymc", "pymc_sgs", "compare"])
    t_start = time.perf_counter()
    load_start = os.getloadavg()
    command = "python benchmarks/compare.py " + " ".join(argv if argv is not None else sys.argv[1:])
    versions, backend = env_info()
    case_results, ref_desc, seeds = [], {}, []

    def report(final: bool) -> str:
        total = time.perf_counter() - t_start
        ref_kind = (f"a dedicated run per case ({args.ref_chains} chains x {args.ref_draws} draws)"
                    if args.ref_draws > 0 else
                    f"the pool of the case's exact-sampler runs that pass max R-hat <= {args.max_ref_rhat:g} and "
                    f"min bulk ESS >= {args.min_ref_ess:g} (each exact sampler is compared with "
                    "the pool of the *other* ones; the line below is the full pool, used for SGS)")
        head = [
            "# SplitGibbs vs NUTS, nutpie and Polya-Gamma Gibbs",
            "",
            f"- command: `{command.strip()}`" + ("" if final else " (PARTIAL: run in progress)"),
            f"- date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
            f"- machine: {platform.machine()} {platform.system()}, nproc = {os.cpu_count()}; "
            f"every sampler: {args.chains} chains on {args.chains} cores, {args.tune} tuning + "
            f"{args.draws} kept draws per chain unless the case says otherwise, "
            "1 BLAS/OMP thread per process, each sampler in a fresh spawned process",
            f"- versions: {versions}",
            f"- backend: {backend}",
            f"- load average (1/5/15 min) at start {'/'.join(f'{v:.2f}' for v in load_start)}, "
            f"at end {'/'.join(f'{v:.2f}' for v in os.getloadavg())} (above nproc: other jobs "
            "shared the cores, so wall times and ESS/s are pessimistic; compare the CPU s column)",
            f"- runtime: {total:.0f} s; per-sampler timeout {args.timeout:.0f} s"
            + (f"; time budget {args.budget_min:g} min" if args.budget_min else ""),
            "",
            "## Results",
            "",
            "\n".join(table_rows(case_results)),
            "",
            "**Targets** (ratio = SplitGibbs ESS/s ÷ best NUTS variant's ESS/s, wall time incl. "
            "setup and tuning):",
            "",
            "\n".join(targets(case_results)),
            "",
            "## Reference posteriors",
            "",
            f"Reference: posteriordb's for dogs; otherwise {ref_kind}.",
            "",
        ]
        head += [f"- {case_label(c)}: {d}" for c, d in ref_desc.items()]
        head += ["", COLUMNS_DOC, "", "## Seeds", "",
                 f"data seed {args.data_seed}; base seed {args.seed}; per run `random_seed` "
                 "(PG: root of the per-chain SeedSequence):", "",
                 ", ".join(f"{c}/{s}: {v}" for c, s, v in seeds)]
        return "\n".join(head) + "\n"

    for name in args.cases:
        elapsed_min = (time.perf_counter() - t_start) / 60
        print(f"=== {name}: {case_label(name)} (t = {elapsed_min:.1f} min)", flush=True)
        if CASES[name].get("skip") and not args.run_skipped:
            case_results.append({"case": name, "skip": CASES[name]["skip"]})
            continue
        est = CASES[name].get("est_min", 0)
        if args.budget_min and elapsed_min + est > args.budget_min:
            case_results.append({"case": name, "skip": (
                f"dropped: time budget ({elapsed_min:.0f} min elapsed + ~{est} min estimated for "
                f"this case > {args.budget_min:g} min); run it with --cases {name}")})
            continue
        tune, draws = args.tune, args.draws
        if CASES[name].get("cap") and not args.quick and not args.no_cap:
            tune, draws = CASES[name]["cap"]
        ref_fixed = None
        if CASES[name]["kind"] == "dogs":
            ref_fixed = posteriordb_reference()
        elif args.ref_draws > 0:
            ref_sampler = "nutpie-lr" if CASES[name]["kind"] == "illcond" else "nutpie"
            rjob = dict(case=name, sampler=ref_sampler, data_seed=args.data_seed,
                        chains=args.ref_chains, tune=args.ref_tune, draws=args.ref_draws,
                        seed=seed_for(args.seed + 1, name, "reference"))
            seeds.append((name, "reference", rjob["seed"]))
            ref_run = run_job(rjob, 2 * args.timeout)
            if "beta" in ref_run:
                ref_fixed = dedicated_reference(ref_run)
                print(f"  reference: {ref_fixed[3]}", flush=True)
            else:
                print(f"  reference FAILED: {ref_run}", flush=True)
        cr = {"case": name, "runs": [], "tune": tune, "draws": draws}
        case_results.append(cr)
        for s in args.samplers:
            if s == "PG" and not is_logistic(name):
                continue
            if s in CASES[name].get("skip_samplers", {}) and not args.run_skipped:
                cr["runs"].append({"case": name, "sampler": s,
                                   "skipped": CASES[name]["skip_samplers"][s]})
                continue
            job = dict(case=name, sampler=s, data_seed=args.data_seed, chains=args.chains,
                       tune=tune, draws=draws, seed=seed_for(args.seed, name, s))
            seeds.append((name, s, job["seed"]))
            r = run_job(job, args.timeout)
            if "beta" in r:
                _m, _s, _e, ess, rhat = _summary(r["beta"])
                r["healthy"] = s != "SGS" and rhat <= args.max_ref_rhat and ess >= args.min_ref_ess
                print(f"  {s:9s} wall {r['wall']:7.1f} s  cpu {r['cpu']:7.1f} s  min ESS "
                      f"{ess:7.0f}  R-hat {rhat:.3f}" + (f"  rho {r['rho']}" if s == "SGS" else ""),
                      flush=True)
            else:
                print(f"  {s:9s} FAILED: {r.get('error', r)}", flush=True)
            cr["runs"].append(r)
        full_pool = pooled_reference(cr["runs"], exclude=None)
        ref_desc[name] = (ref_fixed[3] if ref_fixed is not None
                          else full_pool[3] if full_pool is not None
                          else "none (no exact sampler run passed the checks): bias not measured")
        for r in cr["runs"]:
            if "beta" in r:
                ref = ref_fixed if ref_fixed is not None else pooled_reference(cr["runs"], r["sampler"])
                r["m"] = metrics(r, ref)
                print(f"  {r['sampler']:9s} ESS/s {r['m']['ess_per_s']:8.2f}  bias "
                      f"{r['m']['bias']:.3f} ± {r['m']['bias_se']:.3f}", flush=True)
        if args.output is not None:  # partial results survive an interrupted run
            args.output.parent.mkdir(parents=True, exist_ok=True)
            args.output.write_text(report(final=False))

    text = report(final=True)
    print()
    print("\n".join(table_rows(case_results)))
    print()
    print("\n".join(targets(case_results)))
    if args.output is not None:
        args.output.write_text(text)
        print(f"wrote {args.output}")
        if args.plot is not None and plot(case_results, args.plot):
            print(f"wrote {args.plot}")
    print(f"total runtime {time.perf_counter() - t_start:.1f} s")
    return case_results


if __name__ == "__main__":
    main()
