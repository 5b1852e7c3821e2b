"""The seed-to-seed spread of SplitGibbs on the mixed-model cases, and the local-move ablation.

``benchmarks/mixed.py`` runs each sampler once (one seed per job): a single run's minimum
tail ESS over a few hundred parameters is a noisy number. This script repeats the SGS job
of ``mixed.py`` (same data, model, worker and metrics: ``harness/mixed_cases.py``) over
several seeds and reports each run and the mean and minimum over the seeds. With
``--local-accept`` it also runs the ablation of the GLMM kernel's autoregressive (pCN) moves:
each value replaces ``pymc_sgs.mixed.step.LOCAL_ACCEPT`` in the worker (0 never makes them,
1.01 always does; the default 0.5 makes them where the independence moves are accepted
less than half the time during the probe).

Usage::

    python benchmarks/mixed_seeds.py --cases cbpp contraception --seeds 1 2 3 4 5 6 7 8 \\
        --local-accept 0.5 1.01 --output benchmarks/results/mixed_seeds.md
"""

from __future__ import annotations

from _script_env import ROOT  # first: one thread per process, set before numpy loads

# isort: split
import argparse
import datetime
import sys
import time
from pathlib import Path

import numpy as np
from harness.mixed_cases import REAL_CASES, _mixed_worker_main
from harness.report import env_info, git_commit
from harness.runner import run_job

RESULTS = ROOT / "benchmarks" / "results" / "mixed_seeds.md"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", nargs="+", default=["cbpp", "contraception"], choices=REAL_CASES)
    p.add_argument("--sampler", default="SGS", choices=["SGS", "SGS-centred"])
    p.add_argument("--seeds", nargs="+", type=int, default=list(range(1, 9)))
    p.add_argument(
        "--local-accept",
        nargs="+",
        type=float,
        default=[None],
        help="values of pymc_sgs.mixed.step.LOCAL_ACCEPT to run (default: the package's)",
    )
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--tune", type=int, default=1000)
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--output", type=Path, default=RESULTS)
    return p.parse_args(argv)


def _worker(job, queue):
    """``mixed_cases``'s worker, with ``LOCAL_ACCEPT`` set first when the job names one."""
    if job.get("local_accept") is not None:
        import pymc_sgs.mixed.step as mixed_step

        mixed_step.LOCAL_ACCEPT = float(job["local_accept"])
    _mixed_worker_main(job, queue)


def _row(r) -> dict:
    c = r["metrics"]["common"]
    return dict(
        seed=r["seed"],
        bulk=c["min_bulk"],
        bulk_at=c["min_bulk_at"],
        tail=c["min_tail"],
        tail_at=c["min_tail_at"],
        rhat=c["max_rhat"],
        wall=r["wall"],
        setup=r["wall"] - r["sampling_time"],
        accept=r.get("hyper_accept", np.nan),
    )


def report(args, command, results, t_total) -> str:
    lines = [
        "# SplitGibbs: seed-to-seed spread on the mixed-model cases (Bambi)",
        "",
        f"- command: `{command}`",
        f"- code: git {git_commit()}",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}",
        f"- settings: {args.sampler}, {args.chains} chains x {args.draws} draws after "
        f"{args.tune} tuning, chains sequential, 1 BLAS/OMP thread, each run in a fresh "
        "spawned process; the minima are over the common set (benchmarks/mixed.py)",
        f"- versions: {env_info()[0]}",
        f"- runtime: {t_total:.0f} s",
        "",
        "Bulk and tail ESS/s include the setup (Bambi's model build, the step's "
        "construction). `LOCAL_ACCEPT` default: the package's value.",
        "",
    ]
    for case, by_la in results.items():
        lines += [f"## {case}: {REAL_CASES[case]['label']}", ""]
        lines += [
            "| LOCAL_ACCEPT | seed | min bulk ESS (at) | min tail ESS (at) | max R-hat | wall s "
            "(setup) | bulk ESS/s | tail ESS/s | hyper_accept |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        summary = []
        for la, rows in by_la.items():
            name = "default" if la is None else f"{la:g}"
            ok = [r for r in rows if "bulk" in r]
            for r in rows:
                if "bulk" not in r:
                    lines.append(f"| {name} | {r['seed']} | {r['error']} | | | | | | |")
                    continue
                lines.append(
                    f"| {name} | {r['seed']} | {r['bulk']:.0f} ({r['bulk_at']}) | "
                    f"{r['tail']:.0f} ({r['tail_at']}) | {r['rhat']:.3f} | {r['wall']:.1f} "
                    f"({r['setup']:.1f}) | {r['bulk'] / r['wall']:.1f} | "
                    f"{r['tail'] / r['wall']:.1f} | {r['accept']:.2f} |"
                )
            if ok:
                b = np.array([r["bulk"] for r in ok])
                t = np.array([r["tail"] for r in ok])
                w = np.array([r["wall"] for r in ok])
                rh = np.array([r["rhat"] for r in ok])
                summary.append(
                    f"| {name} | {len(ok)} | {b.mean():.0f} / {b.min():.0f} | "
                    f"{t.mean():.0f} / {t.min():.0f} | {np.mean(b / w):.1f} | "
                    f"{np.mean(t / w):.1f} | {w.mean():.1f} | {rh.max():.3f} "
                    f"({int(np.sum(rh > 1.01))}) |"
                )
        lines += [
            "",
            "| LOCAL_ACCEPT | runs | min bulk ESS: mean / min | min tail ESS: mean / min | "
            "bulk ESS/s (mean) | tail ESS/s (mean) | wall s (mean) | max R-hat (runs > 1.01) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
            *summary,
            "",
        ]
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    command = "python benchmarks/mixed_seeds.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    t0 = time.perf_counter()
    results = {}
    for case in args.cases:
        results[case] = {}
        for la in args.local_accept:
            rows = results[case][la] = []
            for seed in args.seeds:
                job = dict(
                    case=case,
                    sampler=args.sampler,
                    seed=seed,
                    chains=args.chains,
                    tune=args.tune,
                    draws=args.draws,
                    data_seed=20240601,
                    local_accept=la,
                )
                r = run_job(job, args.timeout, worker=_worker, method="spawn")
                if "metrics" in r:
                    rows.append(_row(r))
                    x = rows[-1]
                    print(
                        f"{case} LOCAL_ACCEPT={la} seed {seed}: bulk {x['bulk']:.0f} tail "
                        f"{x['tail']:.0f} R-hat {x['rhat']:.3f} wall {x['wall']:.1f} s",
                        flush=True,
                    )
                else:
                    why = "timeout" if "timeout" in r else "error"
                    rows.append(dict(seed=seed, error=why))
                    print(f"{case} LOCAL_ACCEPT={la} seed {seed}: {why}", flush=True)
                args.output.parent.mkdir(parents=True, exist_ok=True)
                args.output.write_text(report(args, command, results, time.perf_counter() - t0))
    print(f"wrote {args.output}")
    return results


if __name__ == "__main__":
    main()
