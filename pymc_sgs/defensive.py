"""Defensive Gaussian/Student-t mixtures for independence proposals.

An independence Metropolis-Hastings proposal fitted at a mode (a Laplace Gaussian) has
lighter tails than a skewed posterior; a chain that reaches the posterior's tail then
rejects nearly everything until a rare proposal lands there again. Mixing in a
multivariate t with the same centre and scale (Hesterberg, 1995) bounds the ratio
posterior / proposal in the tails at a small cost in the bulk. Used by the shift move
without a split (:class:`pymc_sgs.shift.ShiftMove`) and by the coefficient moves of the
GLMM kernel (:class:`pymc_sgs.mixed.joint.LaplaceJointKernel`).

Both functions work in standardised coordinates ``eps = L^T (x - centre)``; the
``log |L|`` the two components share is the caller's.

References
----------
Hesterberg, T. (1995). Weighted average importance sampling and defensive mixture
distributions. Technometrics 37(2), 185-194.
"""

from __future__ import annotations

import functools

import numpy as np
import scipy.special

__all__ = ["log_mixture_density", "heavy_scale"]


def log_mixture_density(log_ref: float, d: int, weight: float, df: float) -> float:
    """Log density of ``(1 - weight) N(0, I_d) + weight t_df(0, I_d)`` at ``eps``.

    ``log_ref = -eps^T eps / 2`` (what the callers have at hand).
    """
    q = -2.0 * log_ref
    nu = df
    log_n = -0.5 * d * np.log(2 * np.pi) + log_ref
    log_t = _t_constant(d, nu) - 0.5 * (nu + d) * np.log1p(q / nu)
    w = weight
    return float(np.logaddexp(np.log1p(-w) + log_n, np.log(w) + log_t))


@functools.lru_cache(maxsize=64)
def _t_constant(d: int, nu: float) -> float:
    # the same left-to-right sum the density had inline, so its value is unchanged
    return (
        scipy.special.gammaln(0.5 * (nu + d))
        - scipy.special.gammaln(0.5 * nu)
        - 0.5 * d * np.log(nu * np.pi)
    )


def heavy_scale(rng: np.random.Generator, df: float) -> float:
    """The factor that turns a standard normal vector into a ``t_df`` one.

    A multivariate t is a Gaussian whose precision is scaled by ``chi2_df / df``.
    """
    return float(np.sqrt(df / rng.chisquare(df)))
