"""The non-PyMC samplers of ``compare.py``: Polya-Gamma Gibbs and Laplace + PSIS.

* :func:`pg_chain` / :func:`run_pg`: exact Polya-Gamma Gibbs for logistic regression with prior
  N(0, prior_sd^2 I): omega_i ~ PG(1, x_i^T beta), beta ~ N(V X^T kappa, V),
  V = (X^T Omega X + P0)^-1, kappa = y - 1/2 (``polyagamma.random_polyagamma``); one spawned
  process per chain, like ``pm.sample``'s.
* :func:`run_laplace_psis`: N independent draws from the Laplace approximation of
  :mod:`harness.laplace_mh` (the same proposal as ``LaplaceMH``), weighted by exact posterior /
  proposal and Pareto-smoothed (``az.psislw``); its ESS is the Kish effective sample size of
  the smoothed weights, its reliability the Pareto k-hat.
"""

from __future__ import annotations

import multiprocessing as mp
import time

import numpy as np


def pg_chain(X, y, prior_sd, tune, draws, seed):
    """Exact PG Gibbs for logistic regression with prior N(0, prior_sd^2 I), one chain."""
    from polyagamma import random_polyagamma
    from scipy.linalg import cho_solve, cholesky, solve_triangular

    rng = np.random.default_rng(seed)
    n, d = X.shape
    P0 = np.eye(d) / prior_sd**2
    b = X.T @ (y - 0.5)  # X^T kappa + P0 m0 (m0 = 0)
    beta = rng.uniform(-0.1, 0.1, d)
    out = np.empty((draws, d))
    for it in range(tune + draws):
        omega = random_polyagamma(1.0, X @ beta, random_state=rng)
        Xw = X * np.sqrt(omega)[:, None]
        L = cholesky(Xw.T @ Xw + P0, lower=True)
        beta = cho_solve((L, True), b) + solve_triangular(
            L, rng.standard_normal(d), lower=True, trans="T"
        )
        if it >= tune:
            out[it - tune] = beta
    return out


_PG_DATA: dict = {}


def _pg_init(X, y, prior_sd):
    _PG_DATA.update(X=X, y=y, prior_sd=prior_sd)


def _pg_worker(args):
    tune, draws, seed = args
    t0 = time.perf_counter()
    out = pg_chain(_PG_DATA["X"], _PG_DATA["y"], _PG_DATA["prior_sd"], tune, draws, seed)
    return out, time.perf_counter() - t0


def run_pg(X, y, prior_sd, chains, tune, draws, seed):
    """``(draws (chain, draw, d), sampling time)``: chains in parallel processes, each with a
    copy of (X, y); the sampling time is the slowest chain's."""
    from concurrent.futures import ProcessPoolExecutor

    seeds = np.random.SeedSequence(seed).spawn(chains)
    with ProcessPoolExecutor(
        chains, mp_context=mp.get_context("spawn"), initializer=_pg_init, initargs=(X, y, prior_sd)
    ) as ex:
        out = list(ex.map(_pg_worker, [(tune, draws, s) for s in seeds]))
    return np.stack([o[0] for o in out]), max(o[1] for o in out)


def psis_ess(log_w) -> tuple:
    """``(normalised smoothed log weights, Kish ESS of the smoothed weights, k-hat)``."""
    import arviz as az

    lw, khat = az.psislw(np.asarray(log_w, dtype=float))
    w = np.exp(lw - np.max(lw))
    w /= w.sum()
    return np.log(w), float(1.0 / np.sum(w**2)), float(khat)


def run_laplace_psis(model, n_draws, seed):
    """Laplace + PSIS on ``model`` (one free vector variable); returns a dict with the draws
    ``beta`` (1, N, d), the smoothed normalised ``log_w``, ``khat``, ``ess_is`` and the time of
    the draws and weights (``sampling_time``; the Laplace approximation and the compilation of
    the log density are setup)."""
    from .laplace_mh import laplace_approximation

    lap, logp, _ = laplace_approximation(model)
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    theta = lap.draw(rng, n_draws)
    log_w = np.array([logp(t) for t in theta]) - lap.log_density(theta)
    lw, ess, khat = psis_ess(log_w)
    return {
        "beta": theta[None],
        "log_w": lw,
        "ess_is": ess,
        "khat": khat,
        "sampling_time": time.perf_counter() - t0,
    }
