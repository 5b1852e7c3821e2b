"""How large the maximum R-hat over many parameters is for an *exact*, well-mixing sampler.

The R-hat target of issue 19 (<= 1.01 over every parameter) is judged on one run of 2 chains
x 1000 draws. R-hat is itself a Monte Carlo estimate: its maximum over K parameters grows with
K and shrinks with each parameter's ESS. This script draws K independent stationary AR(1)
chains (exact N(0, 1) margins; the autocorrelation ``phi`` sets the ESS), computes ArviZ's
rank-normalised split R-hat and bulk ESS of each parameter, and reports over ``--reps``
replications the median ESS, the median of the maximum R-hat and how often that maximum
exceeds 1.01. Nothing here is SplitGibbs: it is the noise floor of the check.

Usage::

    python benchmarks/rhat_noise.py                      # K = 35, 369, 10004 (cbpp, grouseticks,
                                                         # the n = 1e6 case); writes results/
    python benchmarks/rhat_noise.py --params 369 --phi 0.5 --reps 5 --output -
"""

from __future__ import annotations

import _script_env  # noqa: F401  (first: one thread per process, set before numpy loads)

# isort: split
import argparse
import datetime
import sys
from pathlib import Path

import numpy as np
from harness.report import env_info, git_commit

RESULTS = Path(__file__).resolve().parent / "results" / "rhat_noise.md"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--params", type=int, nargs="+", default=[35, 369, 10004])
    p.add_argument("--phi", type=float, nargs="+", default=[0.0, 0.35, 0.5, 0.7])
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--output", default=str(RESULTS), help="markdown file, or - for stdout only")
    return p.parse_args(argv)


def ar1_chains(rng, phi, chains, draws, k):
    """``(chains, draws, k)`` stationary AR(1) draws with N(0, 1) margins."""
    x = np.empty((chains, draws, k))
    x[:, 0] = rng.standard_normal((chains, k))
    noise = rng.standard_normal((chains, draws, k)) * np.sqrt(1.0 - phi * phi)
    for t in range(1, draws):
        x[:, t] = phi * x[:, t - 1] + noise[:, t]
    return x


def main(argv=None):
    import arviz as az

    args = parse_args(argv)
    az.Numba.disable_numba()  # arviz 0.23.4's numba ess path breaks on numpy 2.4
    rng = np.random.default_rng(args.seed)
    rows = []
    for k in args.params:
        for phi in args.phi:
            # fewer replications for very many parameters: each has k chains already
            reps = args.reps if k <= 1000 else max(3, args.reps // 5)
            maxes, ess = [], []
            for _ in range(reps):
                ds = az.convert_to_dataset({"x": ar1_chains(rng, phi, args.chains, args.draws, k)})
                maxes.append(float(az.rhat(ds)["x"].values.max()))
                ess.append(float(np.median(az.ess(ds, method="bulk")["x"].values)))
            maxes = np.array(maxes)
            row = (
                f"| {k} | {phi:.2f} | {np.median(ess):.0f} | {np.median(maxes):.4f} "
                f"| {maxes.max():.4f} | {np.mean(maxes > 1.01):.2f} | {reps} |"
            )
            print(row, flush=True)
            rows.append(row)
    vers, _ = env_info()
    text = "\n".join(
        [
            "# Maximum R-hat over K parameters of exact AR(1) chains (the noise floor of the "
            "R-hat <= 1.01 check)",
            "",
            "- command: `" + " ".join(["python benchmarks/rhat_noise.py", *sys.argv[1:]]) + "`",
            f"- code: git {git_commit()}; date "
            f"{datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
            f"- settings: {args.chains} chains x {args.draws} draws per replication, K "
            "independent parameters with N(0, 1) margins, lag-1 autocorrelation phi; ArviZ "
            "rank-normalised split R-hat and bulk ESS; seed " + str(args.seed),
            f"- versions: {vers}",
            "",
            "| K parameters | phi | median bulk ESS per parameter | median of max R-hat "
            "| largest max R-hat | P(max R-hat > 1.01) | replications |",
            "|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
        ]
    )
    if args.output != "-":
        Path(args.output).write_text(text)
        print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
