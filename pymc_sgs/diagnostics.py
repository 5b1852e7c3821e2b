"""Measure and remove the rho-bias of a SplitGibbs run with Pareto-smoothed importance sampling.

SplitGibbs samples ``pi_rho``, the split model's theta-marginal. Every draw
carries ``log_weight = log pi(theta) - log pi_rho(theta)`` (+ const) in
``idata.sample_stats``. Self-normalised importance sampling with those
weights turns expectations under ``pi_rho`` into expectations under ``pi``;
ArviZ's PSIS stabilises the weights and its Pareto ``k-hat`` says whether the
correction can be trusted (``k-hat < 0.5``: reliable; ``> 0.7``: rho is too
large for the weights to fix).

References
----------
.. [1] A. Vehtari, D. Simpson, A. Gelman, Y. Yao, J. Gabry (2024). Pareto
   smoothed importance sampling. JMLR 25.
"""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pandas as pd
from scipy.special import logsumexp

__all__ = ["psis_weights", "psis_summary", "RhoBiasWarning"]

#: k-hat above which the corrected estimates are unreliable (Vehtari et al.)
KHAT_BAD = 0.7
#: k-hat above which PSIS converges slowly
KHAT_OK = 0.5


class RhoBiasWarning(UserWarning):
    """The importance weights say rho is too large."""


def _log_weights(idata) -> np.ndarray:
    stats = idata.sample_stats
    names = [v for v in stats.data_vars if v == "log_weight" or v.endswith("__log_weight")]
    if not names:
        raise ValueError(
            "idata.sample_stats has no 'log_weight': sample with "
            "pymc_sgs.SplitGibbs(log_weights=True) (the default) to measure the rho-bias."
        )
    lw = stats[names[0]].values
    exact = [v for v in stats.data_vars if v == "exact_accept" or v.endswith("__exact_accept")]
    if exact and np.any(np.isfinite(stats[exact[0]].values)):
        raise ValueError(
            "these draws come from SplitGibbs(exact=True) and already target the posterior "
            "exactly; reweighting them would apply the rho-correction twice. Use az.summary."
        )
    if np.all(np.isnan(lw)):
        raise ValueError("idata.sample_stats['log_weight'] is all NaN (log_weights=False?).")
    return lw


def _self_normalised_mcse(w, have, x, mean, sd):
    """MCSE of the self-normalised IS mean and sd, with the chains' autocorrelation.

    The estimates are ratios: to first order ``mean_hat - mean = sum_t W_t (x_t - mean) /
    sum_t W_t``, the average of ``g_t = W_t (x_t - mean)`` over the weighted draws with
    ``W`` scaled to average one, so the MCSE is ArviZ's MCSE of the mean of ``g`` (its ESS
    counts the autocorrelation); likewise ``W_t ((x_t - mean)^2 - sd^2)`` for the variance,
    and the delta method for the sd.
    """
    n_chains = have.shape[0]
    per_chain = [have[c].sum() for c in range(n_chains)]
    W = w.reshape(have.shape) / w.sum() * have.sum()
    x = x.reshape(have.shape)
    g1 = [W[c, have[c]] * (x[c, have[c]] - mean) for c in range(n_chains)]
    g2 = [W[c, have[c]] * ((x[c, have[c]] - mean) ** 2 - sd**2) for c in range(n_chains)]

    def mcse(g):
        if len(set(per_chain)) == 1 and per_chain[0] > 3:
            return _scalar(az.mcse(np.stack(g), method="mean"))
        # chains weighted on different schedules: combine the per-chain standard errors
        total = sum(per_chain)
        parts = [
            (n * _scalar(az.mcse(gc[None], method="mean"))) ** 2 if n > 3 else np.var(gc) * n
            for n, gc in zip(per_chain, g)
        ]
        return float(np.sqrt(sum(parts)) / total)

    mcse_sd = mcse(g2) / (2.0 * sd) if sd > 0 else float("nan")
    return mcse(g1), mcse_sd


def _scalar(value) -> float:
    """ArviZ returns a 1-element array for an ndarray input."""
    return float(np.ravel(value)[0])


def psis_weights(idata: az.InferenceData) -> tuple[np.ndarray, float]:
    """Normalised PSIS weights of all draws (chains stacked) and the Pareto k-hat.

    Returns
    -------
    weights : ndarray, shape (chains * draws,)
        Non-negative, summing to one, in ``(chain, draw)`` C order; zero for
        draws without a recorded weight (``SplitGibbs(log_weights=k)``).
    khat : float
    """
    w, khat, _, _ = _psis(idata)
    return w, khat


def _psis(idata):
    """:func:`psis_weights`, the number of weighted draws, and which draws (chain, draw) have one."""
    lw_all = _log_weights(idata)
    # SplitGibbs(log_weights=k) and SplitGibbs(sweep_every=k) record weights on a fixed
    # schedule of draws: use those draws (draws without a weight get weight 0)
    have = np.isfinite(lw_all)
    if not np.all(have.any(axis=-1)):
        raise ValueError(
            "a chain has no importance weight at any draw; psis_weights needs weights in "
            "every chain. Sample with log_weights=True, or log_weights=k with k well below "
            "the number of draws."
        )
    n_chains, n_total = lw_all.shape[0], int(have.sum())
    if np.all(lw_all[have] == lw_all[have][0]):
        # no split (SplitGibbs(rho=0), or rho="auto" where it skips the split): the draws
        # target the posterior itself, every weight is equal and there is no tail to fit
        out = np.where(have, 1.0 / n_total, 0.0)
        return out.reshape(-1), float("-inf"), n_total, have
    # each chain may have its own rho (rho="auto" tunes per chain), hence its own
    # normalising constant: normalise per chain, so that every chain counts equally (all
    # chains have the same number of draws)
    chains = [lw_all[c, have[c]] for c in range(n_chains)]
    chains = [x - (logsumexp(x) - np.log(n_total / n_chains)) for x in chains]
    flat = np.concatenate(chains)
    # relative efficiency of the weight draws (MCMC draws are autocorrelated)
    if np.array_equal(have, np.broadcast_to(have[0], have.shape)):
        w_raw = np.exp(np.stack(chains) - np.max(flat))
        ess = float(az.ess(w_raw)) if w_raw.shape[-1] > 3 else float(w_raw.size)
    else:
        # different schedules in different chains (sweep_every="auto" settled on different
        # strides): each chain's weighted draws stand for its own draws
        ess = sum(
            float(az.ess(np.exp(x - np.max(flat))[None])) if x.size > 3 else x.size for x in chains
        )
    reff = float(np.clip(ess / n_total, 0.05, 1.0))
    with np.errstate(over="ignore"):  # ArviZ's tail fit overflows harmlessly on flat weights
        smoothed, khat = az.psislw(flat, reff=reff)
    w = np.exp(smoothed - np.max(smoothed))
    out = np.zeros(lw_all.shape)
    out[have] = w / w.sum()  # C order: chain by chain, as flat
    return out.reshape(-1), float(khat), flat.size, have


def psis_summary(
    idata: az.InferenceData, var_names: list[str] | None = None, *, warn: bool = True
) -> pd.DataFrame:
    """Bias-corrected posterior means and sds of a SplitGibbs run.

    Parameters
    ----------
    idata : arviz.InferenceData
        Output of ``pm.sample(step=pymc_sgs.SplitGibbs(...))``.
    var_names : list of str, optional
        Posterior variables to summarise (default: all).
    warn : bool
        Emit a :class:`RhoBiasWarning` when k-hat is above 0.5.

    Returns
    -------
    pandas.DataFrame
        One row per scalar parameter, labelled as in ``az.summary`` (from the
        dims' coordinates): ``mean`` and ``sd`` (PSIS-corrected, targeting pi),
        their Monte Carlo standard errors ``mcse_mean`` and ``mcse_sd`` (self-
        normalised importance sampling, with the chains' autocorrelation),
        ``mean_rho`` and ``sd_rho`` (uncorrected, pi_rho), and ``shift``, the
        correction in units of the corrected sd. Only draws with a weight enter
        the corrected columns: with ``sweep_every > 1`` (the default after
        tuning) those are the swept draws, so compare ``mcse_mean`` with
        ``az.summary``'s ``mcse_mean`` before preferring the corrected mean. Attributes
        ``attrs["khat"]`` and ``attrs["weight_ess"]`` (Kish ESS of the weights
        as a fraction of the weighted draws). Draws of a run without a split
        (``rho=0``, or ``rho="auto"`` where it chose no split) have equal weights:
        the corrected columns equal the uncorrected ones, ``khat`` is ``-inf``.
    """
    w, khat, n_weighted, have = _psis(idata)
    post = idata.posterior
    names = list(post.data_vars) if var_names is None else list(var_names)
    rows, index = [], []
    for name in names:
        v = post[name].values
        flat = v.reshape(v.shape[0] * v.shape[1], -1)
        labels = _index_labels(post[name])
        for j in range(flat.shape[1]):
            x = flat[:, j]
            mean = float(np.sum(w * x))
            sd = float(np.sqrt(np.sum(w * (x - mean) ** 2)))
            mcse_mean, mcse_sd = _self_normalised_mcse(w, have, x, mean, sd)
            mean_rho, sd_rho = float(x.mean()), float(x.std(ddof=1))
            rows.append(
                (
                    mean,
                    sd,
                    mcse_mean,
                    mcse_sd,
                    mean_rho,
                    sd_rho,
                    (mean - mean_rho) / sd if sd > 0 else 0.0,
                )
            )
            index.append(name if flat.shape[1] == 1 else f"{name}[{labels[j]}]")
    df = pd.DataFrame(
        rows,
        index=index,
        columns=["mean", "sd", "mcse_mean", "mcse_sd", "mean_rho", "sd_rho", "shift"],
    )
    df.attrs["khat"] = khat
    df.attrs["weight_ess"] = float(1.0 / np.sum(w**2) / n_weighted)
    if warn and khat > KHAT_OK:
        level = "unreliable" if khat > KHAT_BAD else "slowly converging"
        warnings.warn(
            f"Pareto k-hat of the SplitGibbs importance weights is {khat:.2f} (> {KHAT_OK}): "
            f"the bias correction is {level}. Decrease rho (or use a smaller bias_tol with "
            "rho='auto') and sample again.",
            RhoBiasWarning,
            stacklevel=2,
        )
    return df


def _index_labels(var) -> list:
    """Row labels of a posterior variable's elements in C order, from its dims' coordinates.

    The same labels as ``az.summary`` (``beta[x1]``, ``u[a, 2]``), so the two tables line up.
    """
    dims = var.dims[2:]
    coords = [var.coords[d].values if d in var.coords else np.arange(var.sizes[d]) for d in dims]
    return [
        ", ".join(str(c[i]) for c, i in zip(coords, idx))
        for idx in np.ndindex(*[len(c) for c in coords])
    ]
