"""Mixing and bias of split Gibbs (plain and over-relaxed) on logistic regression.

Reproduces the prototype table of ``/work/shared/design/ALGORITHM.md`` section 3
(logistic regression, n = 10^4, d = 10) with the package's pure kernel
(:class:`pymc_sgs.kernel.SplitGibbsKernel`), against a long PyMC NUTS run of the
same model as the reference posterior.

For every coupling ``rho`` and over-relaxation ``alpha`` it reports

* IAT (bulk)  = draws / min over coefficients of ArviZ bulk ESS (``az.ess``);
  ``>`` marks a lower bound (min bulk ESS below ``--min-ess``, the chains were
  too short to measure it, usually plain SGS at small rho);
* IAT (sd)    = the same with ``az.ess(method="sd")``;
* bias        = max over coefficients of |mean_SGS - mean_NUTS| / sd_NUTS, with
  its Monte Carlo error (MCSEs of both means, at the maximising coefficient);
* ms / sweep  = wall time of one sweep of one chain (one process, one thread);
* ESS/s       = min bulk ESS / (sampling seconds summed over chains), i.e. per
  core-second.

Usage::

    python benchmarks/mixing.py            # full (~12 min on 2 idle cores; 21 min measured on a shared machine)
    python benchmarks/mixing.py --quick    # CI smoke run (< 60 s), no results file

Chains run in parallel worker processes (``--jobs``, default ``nproc``), each
single-threaded (OMP/OPENBLAS/MKL threads set to 1 unless already set).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import datetime  # noqa: E402
import multiprocessing as mp  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

sys.path.append(str(Path(__file__).resolve().parent))

from harness.cases import logistic_data as make_data  # noqa: E402
from harness.cases import split_problem as make_problem  # noqa: E402
from harness.report import versions  # noqa: E402

from pymc_sgs.kernel import SplitGibbsKernel  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "mixing.md"

#: prototype numbers of ALGORITHM.md section 3 (bias, IAT plain, IAT over-relaxed)
PROTOTYPE = {
    1.0: ("7.4", "34", "4"),
    0.5: ("1.9", "94", "8"),
    0.3: ("0.65", "247", "13 (alpha=-0.98)"),
    0.2: ("-", "513", "-"),
    0.15: ("0.10", "-", "27"),
    0.1: ("-", "~1000", "-"),
}

TARGET_RHO = 0.3
TARGET_IAT = 20.0


# ------------------------------------------------------------------ NUTS reference


def nuts_reference(X, y, prior_sd, draws, tune, chains, cores, seed):
    import pymc as pm
    import pytensor

    with pm.Model():
        beta = pm.Normal("beta", 0.0, prior_sd, shape=X.shape[1])
        pm.Bernoulli("y", logit_p=pm.math.dot(X, beta), observed=y)
        t0 = time.perf_counter()
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu0 = time.process_time()
        idata = pm.sample(
            draws=draws,
            tune=tune,
            chains=chains,
            cores=cores,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )
        wall = time.perf_counter() - t0
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        # CPU of the sampler processes (joined children) plus this process (compilation)
        cpu = ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime + time.process_time() - cpu0
    post = idata.posterior["beta"].values  # (chain, draw, d)
    stats = idata.sample_stats
    return {
        "draws": post,
        "sampling_time": float(idata.posterior.attrs.get("sampling_time", np.nan)),
        "wall": wall,
        "cpu": cpu,
        "cores": cores,
        "divergences": int(stats["diverging"].sum()),
        "mean_steps": float(stats["n_steps"].mean()),
        "blas": pytensor.config.blas__ldflags,
    }


# ------------------------------------------------------------------- SGS workers

_WORKER: dict = {}


def _init_worker(X, y, prior_sd):
    _WORKER["problem"] = make_problem(X, y, prior_sd)
    _WORKER["kernels"] = {}


def run_chain(job):
    """One chain: ``n_burn`` sweeps discarded, then ``n_sweeps`` kept and timed."""
    rho, alpha, seed_seq, theta0, n_burn, n_sweeps = job
    key = (rho, alpha)
    if key not in _WORKER["kernels"]:
        _WORKER["kernels"][key] = SplitGibbsKernel(_WORKER["problem"], rho, alpha)
    k = _WORKER["kernels"][key]
    rng = np.random.default_rng(seed_seq)
    state = k.init(theta0, rng)
    for _ in range(n_burn):
        state, _info = k.sweep(state, rng)
    draws = np.empty((n_sweeps, theta0.shape[0]))
    acc = prop = 0.0
    t0 = time.perf_counter()
    c0 = time.process_time()
    for i in range(n_sweeps):
        state, info = k.sweep(state, rng)
        draws[i] = state.theta
        acc += info.z_accept
        prop += info.z_proposals
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - c0
    return {
        "rho": rho,
        "alpha": alpha,
        "draws": draws,
        "time": elapsed,
        "cpu": cpu,
        "z_accept": acc / n_sweeps,
        "z_proposals": prop / n_sweeps,
    }


# ---------------------------------------------------------------------- metrics


def summarise(draws, ref_mean, ref_sd, ref_mcse, min_ess):
    import arviz as az

    ds = az.convert_to_dataset({"beta": draws})
    n_total = draws.shape[0] * draws.shape[1]
    ess_bulk = az.ess(ds, method="bulk")["beta"].values
    ess_sd = az.ess(ds, method="sd")["beta"].values
    mcse = az.mcse(ds, method="mean")["beta"].values
    mean = draws.mean(axis=(0, 1))
    z = np.abs(mean - ref_mean) / ref_sd
    j = int(np.argmax(z))
    bias_se = float(np.sqrt(mcse[j] ** 2 + ref_mcse[j] ** 2) / ref_sd[j])
    rhat = float(np.max(az.rhat(ds)["beta"].values))
    return {
        "n_total": n_total,
        "ess_bulk": float(ess_bulk.min()),
        "ess_sd": float(ess_sd.min()),
        "iat_bulk": n_total / float(ess_bulk.min()),
        "iat_sd": n_total / float(ess_sd.min()),
        "lower_bound": float(ess_bulk.min()) < min_ess,
        "lower_bound_sd": float(ess_sd.min()) < min_ess,
        "bias": float(z[j]),
        "bias_se": bias_se,
        "rhat": rhat,
    }


def fmt_iat(v, lb):
    return (">" if lb else "") + (f"{v:.1f}" if v < 100 else f"{v:.0f}")


def fmt_alpha(a):
    return "0 (plain)" if a == 0 else f"{a:g}"


# ------------------------------------------------------------------------- main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help="CI smoke run (< 60 s): rho {1, 0.3}, alpha {0, -0.98}, short chains; "
        "does not write the results file unless --output is given",
    )
    p.add_argument("--n", type=int, default=10_000, help="observations")
    p.add_argument("--d", type=int, default=10, help="coefficients")
    p.add_argument("--prior-sd", type=float, default=5.0)
    p.add_argument("--data-seed", type=int, default=20220101)
    p.add_argument("--seed", type=int, default=12345, help="root of the SeedSequence of all chains")
    p.add_argument("--rhos", type=float, nargs="+", default=[1.0, 0.5, 0.3, 0.2, 0.15, 0.1])
    p.add_argument("--alphas", type=float, nargs="+", default=[0.0, -0.9, -0.98, -0.99])
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--sweeps-plain", type=int, default=8000, help="kept sweeps per chain, alpha=0")
    p.add_argument(
        "--sweeps-or", type=int, default=2500, help="kept sweeps per chain, alpha<0 (over-relaxed)"
    )
    p.add_argument("--burn", type=int, default=500, help="discarded sweeps per chain")
    p.add_argument("--nuts-draws", type=int, default=2000)
    p.add_argument("--nuts-tune", type=int, default=1000)
    p.add_argument(
        "--min-ess",
        type=float,
        default=100.0,
        help="below this min bulk ESS the IAT is reported as a lower bound '>'",
    )
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    p.add_argument(
        "--output",
        type=Path,
        default=None,
        help=f"markdown results file (default: {RESULTS.relative_to(ROOT)} in full mode)",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.rhos = [1.0, 0.3]
        args.alphas = [0.0, -0.98]
        args.sweeps_plain = 500
        args.sweeps_or = 300
        args.burn = 50
        args.nuts_draws = 250
        args.nuts_tune = 250
    elif args.output is None:
        args.output = RESULTS
    return args


def main(argv=None):
    args = parse_args(argv)
    t_start = time.perf_counter()
    load_start = os.getloadavg()
    import arviz as az

    az.Numba.disable_numba()  # arviz 0.23.4's numba ess/mcse path breaks on numpy 2.4

    command = "python benchmarks/mixing.py " + " ".join(argv if argv is not None else sys.argv[1:])
    X, y, beta_true = make_data(args.n, args.d, args.data_seed)

    # reference posterior
    ncores = min(args.jobs, args.chains)
    ref = nuts_reference(
        X, y, args.prior_sd, args.nuts_draws, args.nuts_tune, args.chains, ncores, args.seed
    )
    t_nuts = time.perf_counter() - t_start
    rd = ref["draws"]
    ref_ds = az.convert_to_dataset({"beta": rd})
    ref_mean = rd.mean(axis=(0, 1))
    ref_sd = rd.std(axis=(0, 1), ddof=1)
    ref_mcse = az.mcse(ref_ds, method="mean")["beta"].values
    ref_ess = float(az.ess(ref_ds, method="bulk")["beta"].values.min())
    ref_ess_sd = float(az.ess(ref_ds, method="sd")["beta"].values.min())
    ref_rhat = float(np.max(az.rhat(ref_ds)["beta"].values))
    ref_n = rd.shape[0] * rd.shape[1]

    # SGS chains: one SeedSequence, one child per (rho, alpha), one grandchild per chain
    root = np.random.SeedSequence(args.seed)
    configs = [(r, a) for r in args.rhos for a in args.alphas]
    cfg_seeds = root.spawn(len(configs))
    init_rng = np.random.default_rng(root.spawn(1)[0])
    flat_ref = rd.reshape(-1, args.d)
    jobs = []
    for (rho, alpha), ss in zip(configs, cfg_seeds):
        n_sweeps = args.sweeps_plain if alpha == 0 else args.sweeps_or
        for c, css in enumerate(ss.spawn(args.chains)):
            theta0 = flat_ref[init_rng.integers(flat_ref.shape[0])]  # a NUTS draw
            jobs.append((rho, alpha, css, theta0, args.burn, n_sweeps))
    # longest first (plain chains at small rho are the bottleneck)
    order = sorted(range(len(jobs)), key=lambda i: -(jobs[i][4] + jobs[i][5]))
    t_sgs0 = time.perf_counter()
    with ProcessPoolExecutor(
        max_workers=args.jobs,
        mp_context=mp.get_context("spawn"),
        initializer=_init_worker,
        initargs=(X, y, args.prior_sd),
    ) as ex:
        results = dict(zip(order, ex.map(run_chain, [jobs[i] for i in order])))
    t_sgs = time.perf_counter() - t_sgs0

    rows = []
    for rho, alpha in configs:
        chains = [results[i] for i in range(len(jobs)) if (jobs[i][0], jobs[i][1]) == (rho, alpha)]
        draws = np.stack([c["draws"] for c in chains])
        s = summarise(draws, ref_mean, ref_sd, ref_mcse, args.min_ess)
        tot_time = sum(c["cpu"] for c in chains)
        tot_wall = sum(c["time"] for c in chains)
        s.update(
            rho=rho,
            alpha=alpha,
            ms_sweep=1e3 * tot_time / s["n_total"],
            ms_sweep_wall=1e3 * tot_wall / s["n_total"],
            ess_per_s=s["ess_bulk"] / tot_time,
            z_accept=float(np.mean([c["z_accept"] for c in chains])),
            z_proposals=float(np.mean([c["z_proposals"] for c in chains])),
        )
        rows.append(s)

    # ------------------------------------------------------------------ report
    lines = []
    lines.append(
        "| rho | alpha | draws | IAT (bulk) | IAT (sd) | bias of mean (sd units) | "
        "max R-hat | CPU ms / sweep | ESS / CPU-s | z-step |"
    )
    lines.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for s in rows:
        zstep = (
            f"{s['z_proposals']:.3f} prop/draw"
            if s["alpha"] == 0
            else f"accept {s['z_accept']:.3f}"
        )
        lines.append(
            f"| {s['rho']:g} | {fmt_alpha(s['alpha'])} | {args.chains}x{s['n_total'] // args.chains} "
            f"| {fmt_iat(s['iat_bulk'], s['lower_bound'])} "
            f"| {fmt_iat(s['iat_sd'], s['lower_bound_sd'])} "
            f"| {s['bias']:.3f} ± {s['bias_se']:.3f} | {s['rhat']:.3f} "
            f"| {s['ms_sweep']:.2f} | {s['ess_per_s']:.1f} | {zstep} |"
        )
    # CPU seconds of the kept draws: total NUTS CPU scaled by the share of kept iterations
    nuts_core_s = ref["cpu"] * args.nuts_draws / (args.nuts_draws + args.nuts_tune)
    lines.append(
        f"| NUTS | (reference) | {args.chains}x{args.nuts_draws} | {ref_n / ref_ess:.2f} "
        f"| {ref_n / ref_ess_sd:.2f} | 0 (by definition) | {ref_rhat:.3f} "
        f"| {1e3 * nuts_core_s / ref_n:.2f} / draw | {ref_ess / nuts_core_s:.1f} "
        f"| {ref['mean_steps']:.1f} leapfrog/draw |"
    )
    table = "\n".join(lines)

    # target of the issue: over-relaxed IAT at rho = 0.3 <= 20 (plain ~250)
    at = [s for s in rows if np.isclose(s["rho"], TARGET_RHO)]
    orl = [s for s in at if s["alpha"] != 0]
    plain = [s for s in at if s["alpha"] == 0]
    if orl:
        best = min(orl, key=lambda s: s["iat_bulk"])
        ok = best["iat_bulk"] <= TARGET_IAT and not best["lower_bound"]
        plain_txt = (
            f"plain measured {fmt_iat(plain[0]['iat_bulk'], plain[0]['lower_bound'])}"
            if plain
            else "plain not run"
        )
        target = (
            f"over-relaxed IAT at rho=0.3 <= 20 (plain ~250): {'PASS' if ok else 'FAIL'} "
            f"(best alpha={best['alpha']:g}: IAT {fmt_iat(best['iat_bulk'], best['lower_bound'])}; "
            + ", ".join(
                f"alpha={s['alpha']:g}: {fmt_iat(s['iat_bulk'], s['lower_bound'])}" for s in orl
            )
            + f"; {plain_txt})"
        )
    else:
        target = (
            "over-relaxed IAT at rho=0.3 <= 20 (plain ~250): NOT RUN (rho=0.3 or alpha<0 missing)"
        )

    best_lines = []
    for rho in args.rhos:
        rr = [s for s in rows if s["rho"] == rho]
        b = min(rr, key=lambda s: s["iat_bulk"])
        best_lines.append(
            f"rho={rho:g}: alpha={b['alpha']:g} (IAT {fmt_iat(b['iat_bulk'], b['lower_bound'])}, "
            f"{b['ess_per_s']:.1f} ESS/CPU-s)"
        )

    blas = ref["blas"]
    total = time.perf_counter() - t_start
    header = [
        "# Mixing of split Gibbs on logistic regression (plain vs over-relaxed)",
        "",
        f"- command: `{command.strip()}`",
        f"- date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- machine: {platform.machine()} {platform.system()}, nproc = {os.cpu_count()}, "
        f"{args.jobs} worker processes, 1 thread each (OMP/OPENBLAS/MKL_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS')}/{os.environ.get('OPENBLAS_NUM_THREADS')}/"
        f"{os.environ.get('MKL_NUM_THREADS')})",
        f"- versions: {versions()}",
        f"- PyTensor BLAS: blas__ldflags = {blas!r}"
        + (
            " (empty: PyTensor is NOT linked to a BLAS; its dot products use a slow fallback, "
            "which slows NUTS)"
            if not blas
            else ""
        ),
        f"- load average (1/5/15 min) at start {'/'.join(f'{v:.2f}' for v in load_start)}, "
        f"at end {'/'.join(f'{v:.2f}' for v in os.getloadavg())} (above nproc = other jobs "
        "shared the cores: timings and ESS/s are then pessimistic)",
        f"- runtime: {total:.0f} s total (NUTS reference {t_nuts:.0f} s incl. compilation, "
        f"SGS chains {t_sgs:.0f} s wall)",
        "",
        "## Setup",
        "",
        f"- Logistic regression, n = {args.n}, d = {args.d}; X_ij ~ N(0, 1/d), beta_true ~ N(0, I), "
        f"y_i ~ Bernoulli(expit(x_i^T beta_true)), data seed {args.data_seed}; "
        f"mean(y) = {y.mean():.3f}. Prior beta ~ N(0, {args.prior_sd:g}^2 I), no intercept.",
        f"- Reference: PyMC NUTS (pm.sample), {args.chains} chains x {args.nuts_draws} draws "
        f"({args.nuts_tune} tuning), {ref['cores']} cores, {ref['divergences']} divergences, "
        f"min bulk ESS {ref_ess:.0f}, max R-hat {ref_rhat:.3f}, mean leapfrog steps/draw "
        f"{ref['mean_steps']:.1f}, sampling time {ref['sampling_time']:.1f} s wall, "
        f"pm.sample CPU {ref['cpu']:.1f} s.",
        f"- SGS: `SplitGibbsKernel(problem, rho, alpha)`, one split potential per observation; "
        f"{args.chains} chains per (rho, alpha), seeds spawned from "
        f"`np.random.SeedSequence({args.seed})`, each started at a random NUTS draw, "
        f"{args.burn} burn-in sweeps discarded, then {args.sweeps_plain} (alpha = 0) / "
        f"{args.sweeps_or} (alpha < 0) kept sweeps per chain.",
        "- IAT = draws / min over coefficients of ArviZ ESS (bulk; 'sd' for the second column); "
        f"'>' = lower bound, the min ESS is below {args.min_ess:g} (chains too short to measure it).",
        "- bias = max_j |mean_SGS_j - mean_NUTS_j| / sd_NUTS_j ± its Monte Carlo error "
        "(sqrt(MCSE_SGS^2 + MCSE_NUTS^2) / sd_NUTS at the maximising j). Its MC error is "
        "unreliable where the IAT is a lower bound.",
        "- CPU ms / sweep: CPU time (time.process_time) per sweep of one chain in one "
        "single-threaded process, burn-in excluded; ESS / CPU-s = min bulk ESS / CPU seconds "
        "summed over chains. CPU time rather than wall time because the machine is shared "
        "(see load average). NUTS row: CPU time of pm.sample (sampler processes + parent, "
        "compilation included) times draws / (draws + tune), per kept draw and per min bulk ESS.",
        f"- mean wall ms / sweep over all SGS configurations: "
        f"{np.mean([s['ms_sweep_wall'] for s in rows]):.2f} (CPU: "
        f"{np.mean([s['ms_sweep'] for s in rows]):.2f}).",
        "- z-step: mean Gaussian proposals per exact z_i draw (plain) or mean MH acceptance "
        "probability of the over-relaxed z-moves.",
        "",
        "## Results",
        "",
        table,
        "",
        f"**Target:** {target}",
        "",
        "Best alpha per rho (smallest bulk IAT): " + "; ".join(best_lines) + ".",
        "",
        "## Prototype (ALGORITHM.md section 3, for comparison; different data draw)",
        "",
        "| rho | bias (sd units) | IAT plain | IAT over-relaxed |",
        "|---:|---:|---:|---:|",
    ]
    header += [f"| {r:g} | {b} | {p} | {o} |" for r, (b, p, o) in PROTOTYPE.items()]
    report = "\n".join(header) + "\n"

    print(report)
    print(target)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(report)
        print(f"wrote {args.output}")
    print(f"total runtime {total:.1f} s")
    return rows


if __name__ == "__main__":
    main()
