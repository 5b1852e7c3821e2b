"""The shape of the hyperparameter proposals, refitted to a chain's own tuning draws.

The mixed-model step proposes the hyperparameters ``h`` (log group sds, and the like) from
a multivariate t around a centre and by a random walk, both shaped by one covariance.
At the start that is the mode and inverse Hessian of the Laplace-approximated ``p(h | y)``
(:func:`pymc_sgs.mixed.laplace.hyper_mode`). A group sd that the data inform weakly has a
skewed marginal, though, with a long tail towards zero on the log scale: on mlmRev's
Contraception the Laplace sd of the urban-slope log sd is 0.37 against a posterior sd of
0.59, and the 1% quantile lies six Laplace sds below the mode. An independence proposal
that rarely reaches that tail leaves the chain slow to visit it (tail ESS 239 of 2000
draws there, against 611 with the refitted shape).

So during tuning the shape is refitted, as in adaptive Metropolis (Haario, Saksman and
Tamminen, 2001), to the mean and covariance of the chain's latest tuning draws, at
tuning draws ``FIRST_REFIT x 2^k`` from the second half of the draws so far (the first
half is burn-in). It is frozen when tuning ends, so the draws after it come from a fixed
Metropolis-Hastings kernel. Each chain refits its own, from its own draws.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["FIRST_REFIT", "HyperShape", "empirical_shape", "refit_due"]

#: the first tuning draw at which the shape is refitted; then at twice as many, and so on
FIRST_REFIT = 50


class HyperShape(NamedTuple):
    """Centre of the independence proposal and the Cholesky factor of the covariance."""

    centre: np.ndarray
    chol: np.ndarray


def refit_due(n_draws: int) -> bool:
    """Whether the shape is refitted after ``n_draws`` tuning draws (50, 100, 200, ...)."""
    if n_draws < FIRST_REFIT or n_draws % FIRST_REFIT:
        return False
    k = n_draws // FIRST_REFIT
    return k & (k - 1) == 0


def empirical_shape(draws) -> HyperShape | None:
    """Mean and covariance factor of the second half of ``draws`` (``(n, K)``).

    None when the draws do not determine a positive-definite covariance (a chain that has
    not moved in some direction): the caller keeps the shape it has.
    """
    h = np.asarray(draws, dtype=float)
    h = h[h.shape[0] // 2 :]
    n, K = h.shape
    if n <= K + 1:
        return None
    cov = np.atleast_2d(np.cov(h, rowvar=False))
    if not np.all(np.diag(cov) > 0):
        return None
    # a small ridge keeps two directions that moved together from a singular factor
    cov = cov + 1e-8 * float(np.trace(cov)) / K * np.eye(K)
    try:
        chol = np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        return None
    if not np.all(np.isfinite(chol)) or np.any(np.diag(chol) <= 0):
        return None
    return HyperShape(h.mean(axis=0), chol)
