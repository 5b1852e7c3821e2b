"""Metrics of a run: min bulk and tail ESS over every coefficient, R-hat, ESS per second with
and without setup, bias against a reference posterior.

Importance-sampling runs (``Laplace-PSIS``: a ``log_w`` entry) use weighted means and sds, the
Kish ESS of the Pareto-smoothed weights as both bulk and tail ESS, MCSE = sd / sqrt(ESS), and
have no R-hat.
"""

from __future__ import annotations

import numpy as np


def summary(b: np.ndarray):
    """(mean, sd, mcse, min bulk ESS, max R-hat) of draws (chain, draw, d)."""
    import arviz as az

    ds = az.convert_to_dataset({"beta": b})
    return (
        b.mean(axis=(0, 1)),
        b.std(axis=(0, 1), ddof=1),
        az.mcse(ds, method="mean")["beta"].values,
        float(az.ess(ds, method="bulk")["beta"].values.min()),
        float(np.max(az.rhat(ds)["beta"].values)),
    )


def min_tail_ess(b: np.ndarray) -> float:
    """Minimum over coefficients of ArviZ tail ESS (5% and 95% quantiles) of draws (chain, draw, d)."""
    import arviz as az

    return float(az.ess(az.convert_to_dataset({"beta": b}), method="tail")["beta"].values.min())


def weighted_summary(b: np.ndarray, log_w: np.ndarray, ess: float):
    """(mean, sd, mcse) of weighted draws (1, N, d) with normalised log weights (N,)."""
    x = b.reshape(-1, b.shape[-1])
    w = np.exp(log_w - np.max(log_w))
    w /= w.sum()
    mean = w @ x
    sd = np.sqrt(w @ (x - mean) ** 2)
    return mean, sd, sd / np.sqrt(ess)


def posteriordb_reference():
    """(mean, sd, mcse, description) of posteriordb's dogs reference (10000 Stan draws)."""
    from .cases import dogs_reference

    mean, sd = dogs_reference()
    return mean, sd, sd / np.sqrt(10_000), "posteriordb reference (10000 Stan draws)"


def dedicated_reference(run: dict):
    mean, sd, mcse, ess, rhat = summary(run["beta"])
    b = run["beta"]
    return (
        mean,
        sd,
        mcse,
        (
            f"dedicated {run['sampler']} run, {b.shape[0]} chains x {b.shape[1]} draws "
            f"({run['tune']} tune), seed {run['seed']}, min bulk ESS {ess:.0f}, max R-hat "
            f"{rhat:.3f}, {run['wall']:.0f} s"
        ),
    )


def pooled_reference(runs: list[dict], exclude: str | None):
    """Pool of the healthy exact-sampler runs of the case (all chains), without ``exclude``."""
    pool = [r for r in runs if r.get("healthy") and r["sampler"] != exclude]
    if not pool:
        return None
    b = np.concatenate([r["beta"] for r in pool], axis=0)
    mean, sd, mcse, ess, rhat = summary(b)
    names = "+".join(r["sampler"] for r in pool)
    return (
        mean,
        sd,
        mcse,
        (
            f"pool of {names}: {b.shape[0]} chains x {b.shape[1]} draws, min bulk ESS {ess:.0f}, "
            f"max R-hat across the pooled chains {rhat:.3f}"
        ),
    )


def quick_summary(run: dict):
    """(min bulk ESS, max R-hat) for the progress line (R-hat nan for importance sampling)."""
    if "log_w" in run:
        return run["ess_is"], np.nan
    _m, _s, _e, ess, rhat = summary(run["beta"])
    return ess, rhat


def metrics(run: dict, ref) -> dict:
    """ESS (bulk, tail), ESS/s on the wall time with setup (``*_per_s``) and without it
    (``*_per_s_run``, on ``sampling_time``), R-hat, ms per iteration and the bias."""
    if "log_w" in run:
        mean, _sd, mcse = weighted_summary(run["beta"], run["log_w"], run["ess_is"])
        min_ess = tail = run["ess_is"]
        rhat = np.nan
        iters = run["beta"].shape[1]
    else:
        mean, _sd, mcse, min_ess, rhat = summary(run["beta"])
        tail = min_tail_ess(run["beta"])
        iters = run["tune"] + run["draws"]
    run_s = run["sampling_time"]
    out = {
        "min_ess": min_ess,
        "ess_per_s": min_ess / run["wall"],
        "ess_per_s_run": min_ess / run_s if run_s > 0 else np.nan,
        "min_tail_ess": tail,
        "tail_per_s": tail / run["wall"],
        "tail_per_s_run": tail / run_s if run_s > 0 else np.nan,
        "rhat": rhat,
        "ms_iter": 1e3 * run_s / iters,
        "bias": np.nan,
        "bias_se": np.nan,
        "n_sig": 0,
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
