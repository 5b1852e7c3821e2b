"""SplitGibbs against PyMC NUTS, nutpie (diagonal and low-rank mass matrix) and exact baselines.

Every sampler runs on the same data, with the same number of chains, tuning
iterations and draws, each in a fresh ``spawn``-ed worker process (so peak
memory is per sampler), cores = chains:

* ``SGS``          ``pm.sample(step=pymc_sgs.SplitGibbs())``: the default rho="auto", which on
                   these GLMs is rho=0 (no split) since issue 23's change of default;
* ``SGS-rho0``     ``pm.sample(step=pymc_sgs.SplitGibbs(rho=0))``: no split, the shift move on
                   the posterior itself (exact);
* ``SGS-tuned``    ``pm.sample(step=pymc_sgs.SplitGibbs(rho="tuned"))``: the split model with
                   rho certified for bias_tol=0.1 (the default before that change);
* ``NUTS``         ``pm.sample()`` (PyMC's NUTS on the PyTensor C backend; the header
                   records whether PyTensor is linked to a BLAS);
* ``nutpie``       ``pm.sample(nuts_sampler="nutpie")`` (numba backend, diagonal mass matrix);
* ``nutpie-lr``    the same with ``nuts_sampler_kwargs={"low_rank_modified_mass_matrix": True}``;
* ``Laplace-MH``   ``pm.sample(step=LaplaceMH())``: independence / over-relaxed pCN MH on the
                   exact posterior with the shift move's mean-corrected Laplace proposal
                   (``harness/laplace_mh.py``);
* ``Laplace-PSIS`` chains x draws independent draws from the same Laplace approximation,
                   Pareto-smoothed importance weights (``harness/baselines.py``);
* ``PG``           Polya-Gamma Gibbs (logistic cases only, ``harness/baselines.py``).

Columns: min bulk and tail ESS over the coefficients (ArviZ), wall time of the whole call
(setup/compilation + tuning + draws) and its setup part, ESS/s with and without setup, its
ratio to the best NUTS variant's, max_j |mean_j - ref_j| / sd_j against a reference posterior
(the pool of the healthy exact MCMC runs; posteriordb's reference for dogs), peak memory of the
worker's process tree, and SplitGibbs's tuned rho. The harness (cases, runner, metrics,
report, baselines) lives in ``benchmarks/harness/``.

Usage::

    python benchmarks/compare.py --quick          # CI smoke run (< 3 min), no results file
    python benchmarks/compare.py                  # full run, writes benchmarks/results/compare.md + .png
    python benchmarks/compare.py --cases logit-1e4-10 dogs --samplers SGS nutpie
    python benchmarks/compare.py --list-cases
"""

from __future__ import annotations

from _script_env import ROOT  # first: one thread per process, set before numpy loads

# isort: split
import argparse
import datetime
import multiprocessing as mp
import os
import platform
import sys
import time
import warnings
from pathlib import Path

from harness.cases import CASES, FULL_CASES, QUICK_CASES, case_label, is_logistic
from harness.metrics import (
    dedicated_reference,
    metrics,
    pooled_reference,
    posteriordb_reference,
    quick_summary,
)
from harness.report import COLUMNS_DOC, env_info, plot, table_rows, targets
from harness.runner import SAMPLERS, WORKER_START, run_job, seed_for

RESULTS = Path(__file__).resolve().parent / "results" / "compare.md"
PLOT = Path(__file__).resolve().parent / "results" / "compare_ess_per_s.png"

# ------------------------------------------------------------------------------ main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"CI smoke run (< 3 min): cases {QUICK_CASES}, 2 chains x 200 draws "
        "(200 tune); does not write the results files unless --output is given",
    )
    p.add_argument(
        "--cases",
        nargs="+",
        default=None,
        choices=list(CASES),
        metavar="CASE",
        help=f"cases to run, in this order (default: full {FULL_CASES}; quick "
        f"{QUICK_CASES}); see --list-cases",
    )
    p.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=SAMPLERS)
    p.add_argument("--list-cases", action="store_true", help="print the cases and exit")
    p.add_argument(
        "--run-skipped",
        action="store_true",
        help="also run cases marked as skipped (logit-1e6-100)",
    )
    p.add_argument(
        "--no-cap",
        action="store_true",
        help="run capped cases (logit-1e6-10) with --tune/--draws too",
    )
    p.add_argument("--chains", type=int, default=2, help="chains (= cores) for every sampler")
    p.add_argument("--tune", type=int, default=1000)
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument(
        "--ref-draws",
        type=int,
        default=0,
        help="> 0: reference = a dedicated nutpie run (nutpie-lr on ill-conditioned "
        "cases) with --ref-chains chains of this many draws; 0 (default): the pool "
        "of the healthy exact-sampler runs of the case (leave-one-out)",
    )
    p.add_argument("--ref-chains", type=int, default=4)
    p.add_argument("--ref-tune", type=int, default=1000)
    p.add_argument(
        "--min-ref-ess",
        type=float,
        default=None,
        help="an exact run joins the pooled reference if its min bulk ESS >= this "
        "(default 400; quick 150) ...",
    )
    p.add_argument(
        "--max-ref-rhat",
        type=float,
        default=None,
        help="... and max R-hat <= this (default 1.01; quick 1.05)",
    )
    p.add_argument("--seed", type=int, default=2024, help="base seed of every run")
    p.add_argument("--data-seed", type=int, default=20220101)
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds after which a sampler's worker is killed (reported as timeout)",
    )
    p.add_argument(
        "--budget-min",
        type=float,
        default=None,
        help="drop (and report) the remaining cases once the elapsed time plus the "
        "case's estimated cost exceeds this many minutes (default: 60 in full "
        "mode, none with --quick or --cases)",
    )
    p.add_argument(
        "--output",
        type=Path,
        default=None,
        help=f"markdown results (default {RESULTS.relative_to(ROOT)} in full mode)",
    )
    p.add_argument(
        "--plot",
        type=Path,
        default=None,
        help=f"ESS/s plot (default <output stem>_ess_per_s.png next to --output, i.e. "
        f"{PLOT.relative_to(ROOT)} for the default output)",
    )
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
        # next to --output, named after it (compare.md -> compare_ess_per_s.png)
        args.plot = args.output.with_name(f"{args.output.stem}_ess_per_s.png")
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
            print(
                f"{c:18s} {case_label(c)}  (est. {CASES[c].get('est_min', '?')} min)"
                + (f"  [{'; '.join(extra)}]" if extra else "")
            )
        return None
    import arviz as az

    az.Numba.disable_numba()  # arviz 0.23.4's numba ess/mcse path breaks on numpy 2.4
    warnings.filterwarnings("ignore", message=".*BLAS.*")

    if args.quick:
        WORKER_START["method"] = "forkserver"
        mp.set_forkserver_preload(["numpy", "scipy.linalg", "pymc", "pymc_sgs", "harness.runner"])
    t_start = time.perf_counter()
    load_start = os.getloadavg()
    command = "python benchmarks/compare.py " + " ".join(argv if argv is not None else sys.argv[1:])
    versions, backend = env_info()
    case_results, ref_desc, seeds = [], {}, []

    def report(final: bool) -> str:
        total = time.perf_counter() - t_start
        ref_kind = (
            f"a dedicated run per case ({args.ref_chains} chains x {args.ref_draws} draws)"
            if args.ref_draws > 0
            else f"the pool of the case's exact-sampler runs that pass max R-hat <= {args.max_ref_rhat:g} and "
            f"min bulk ESS >= {args.min_ref_ess:g} (each exact sampler is compared with "
            "the pool of the *other* ones; the line below is the full pool, used for SGS)"
        )
        head = [
            "# SplitGibbs vs NUTS, nutpie and the exact baselines (Laplace-MH, Laplace-PSIS, Polya-Gamma Gibbs)",
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
            f"at end {'/'.join(f'{v:.2f}' for v in os.getloadavg())} "
            + (
                "(above nproc: other jobs shared the cores, so wall times and ESS/s are "
                "pessimistic; compare the CPU s column)"
                if max(*load_start, *os.getloadavg()) > (os.cpu_count() or 1)
                else "(at most nproc: the samplers had the cores to themselves)"
            ),
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
        head += [
            "",
            COLUMNS_DOC,
            "",
            "## Seeds",
            "",
            f"data seed {args.data_seed}; base seed {args.seed}; per run `random_seed` "
            "(PG: root of the per-chain SeedSequence; Laplace-PSIS: seed of its Generator):",
            "",
            ", ".join(f"{c}/{s}: {v}" for c, s, v in seeds),
        ]
        return "\n".join(head) + "\n"

    for name in args.cases:
        elapsed_min = (time.perf_counter() - t_start) / 60
        print(f"=== {name}: {case_label(name)} (t = {elapsed_min:.1f} min)", flush=True)
        if CASES[name].get("skip") and not args.run_skipped:
            case_results.append({"case": name, "skip": CASES[name]["skip"]})
            continue
        est = CASES[name].get("est_min", 0)
        if args.budget_min and elapsed_min + est > args.budget_min:
            case_results.append(
                {
                    "case": name,
                    "skip": (
                        f"dropped: time budget ({elapsed_min:.0f} min elapsed + ~{est} min estimated for "
                        f"this case > {args.budget_min:g} min); run it with --cases {name}"
                    ),
                }
            )
            continue
        tune, draws = args.tune, args.draws
        if CASES[name].get("cap") and not args.quick and not args.no_cap:
            tune, draws = CASES[name]["cap"]
        ref_fixed = None
        if CASES[name]["kind"] == "dogs":
            ref_fixed = posteriordb_reference()
        elif args.ref_draws > 0:
            ref_sampler = "nutpie-lr" if CASES[name]["kind"] == "illcond" else "nutpie"
            rjob = dict(
                case=name,
                sampler=ref_sampler,
                data_seed=args.data_seed,
                chains=args.ref_chains,
                tune=args.ref_tune,
                draws=args.ref_draws,
                seed=seed_for(args.seed + 1, name, "reference"),
            )
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
                cr["runs"].append(
                    {"case": name, "sampler": s, "skipped": CASES[name]["skip_samplers"][s]}
                )
                continue
            job = dict(
                case=name,
                sampler=s,
                data_seed=args.data_seed,
                chains=args.chains,
                tune=tune,
                draws=draws,
                seed=seed_for(args.seed, name, s),
            )
            seeds.append((name, s, job["seed"]))
            r = run_job(job, args.timeout)
            if "beta" in r:
                ess, rhat = quick_summary(r)
                # exact MCMC samplers only (SGS samples pi_rho; PSIS has no R-hat)
                r["healthy"] = (
                    s not in ("SGS", "SGS-tuned", "Laplace-PSIS")
                    and rhat <= args.max_ref_rhat
                    and ess >= args.min_ref_ess
                )
                print(
                    f"  {s:12s} wall {r['wall']:7.1f} s  cpu {r['cpu']:7.1f} s  min ESS "
                    f"{ess:7.0f}  R-hat {rhat:.3f}" + (f"  rho {r['rho']}" if "rho" in r else ""),
                    flush=True,
                )
            else:
                print(f"  {s:12s} FAILED: {r.get('error', r)}", flush=True)
            cr["runs"].append(r)
        full_pool = pooled_reference(cr["runs"], exclude=None)
        ref_desc[name] = (
            ref_fixed[3]
            if ref_fixed is not None
            else full_pool[3]
            if full_pool is not None
            else "none (no exact sampler run passed the checks): bias not measured"
        )
        for r in cr["runs"]:
            if "beta" in r:
                ref = (
                    ref_fixed
                    if ref_fixed is not None
                    else pooled_reference(cr["runs"], r["sampler"])
                )
                r["m"] = metrics(r, ref)
                print(
                    f"  {r['sampler']:12s} ESS/s {r['m']['ess_per_s']:8.2f} (excl. setup "
                    f"{r['m']['ess_per_s_run']:8.2f})  bias "
                    f"{r['m']['bias']:.3f} ± {r['m']['bias_se']:.3f}",
                    flush=True,
                )
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
