"""Multinomial logistic regression without a split: independence Metropolis-Hastings.

The posterior of a multinomial logit with Gaussian (or flat) priors is smooth and
log-concave, and with many observations per coefficient close to its Laplace approximation
``N(theta*, H^-1)``. As ``rho=0`` does for the GLMs (:mod:`pymc_sgs.shift`), the chain then
proposes from that approximation, independently of where it is, and accepts with the exact
Metropolis-Hastings ratio: no auxiliary variables, no rho-bias. The proposal is the
defensive mixture of :mod:`pymc_sgs.defensive` (with probability ``tail_weight`` a
multivariate t of the same centre and scale), which bounds the ratio of posterior to
proposal in a skewed posterior's heavier tail.

The split model (``rho="tuned"`` or a fixed rho) mixes through z-sweeps, the slow case of
data augmentation: on lme4's sleepstudy with a three-class response (180 rows, 4
coefficients) it reached min ESS 204 of 2000 draws in 7.0 s against PyMC NUTS's 1580 in
4.0 s.

References
----------
L. Tierney (1994). Markov chains for exploring posterior distributions. Annals of
Statistics 22(4), 1701-1728 (independence chains).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import scipy.linalg

from .defensive import heavy_scale, log_mixture_density

__all__ = ["IndependenceMove", "IndependenceInfo"]


class IndependenceInfo(NamedTuple):
    """What one move did."""

    #: the Metropolis-Hastings acceptance probability
    accept_prob: float
    #: whether the proposal came from the heavy-tailed component
    heavy: bool


class IndependenceMove:
    """Independence Metropolis-Hastings moves with a Laplace-centred defensive mixture.

    Parameters
    ----------
    neg_log_posterior : callable
        ``theta -> -log pi(theta)`` up to a constant.
    mode : ndarray (d,)
        Centre of the proposal (the posterior mode).
    chol : ndarray (d, d)
        Lower Cholesky factor of the Hessian of ``-log pi`` at ``mode``.
    tail_weight, tail_df : float
        Weight and degrees of freedom of the multivariate-t component.
    """

    def __init__(
        self,
        neg_log_posterior: Callable,
        mode: np.ndarray,
        chol: np.ndarray,
        tail_weight: float = 0.3,
        tail_df: float = 5.0,
    ):
        self.neg_log_posterior = neg_log_posterior
        self.mode = np.asarray(mode, dtype=float)
        self.chol = np.asarray(chol, dtype=float)
        self.tail_weight, self.tail_df = float(tail_weight), float(tail_df)

    def log_target(self, theta) -> float:
        """``log pi(theta)`` up to a constant (``-inf`` where it is not finite)."""
        value = -float(self.neg_log_posterior(theta))
        return value if np.isfinite(value) else -np.inf

    def log_proposal(self, theta) -> float:
        """Log density of the mixture at ``theta`` up to ``log |L|``, which the components
        share."""
        u = self.chol.T @ (np.asarray(theta, dtype=float) - self.mode)
        return log_mixture_density(-0.5 * float(u @ u), u.shape[0], self.tail_weight, self.tail_df)

    def step(self, theta, log_target: float, rng: np.random.Generator):
        """One move from ``theta`` (whose ``log pi`` is ``log_target``).

        Returns ``(theta, log_target, IndependenceInfo)``. Uses ``d`` standard normals, one
        uniform for the component, a chi-square for a t draw and one uniform to accept.
        """
        d = self.mode.shape[0]
        eps = rng.standard_normal(d)
        heavy = rng.random() < self.tail_weight
        if heavy:
            eps = eps * heavy_scale(rng, self.tail_df)
        prop = self.mode + scipy.linalg.solve_triangular(self.chol, eps, lower=True, trans="T")
        lp = self.log_target(prop)
        log_ratio = lp - log_target - (self.log_proposal(prop) - self.log_proposal(theta))
        accept_prob = 0.0 if np.isnan(log_ratio) else float(np.exp(min(0.0, log_ratio)))
        if rng.random() < accept_prob:
            theta, log_target = prop, lp
        return theta, log_target, IndependenceInfo(accept_prob, bool(heavy))
