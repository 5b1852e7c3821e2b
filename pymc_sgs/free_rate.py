"""A free rate ``b`` of an asymmetric Laplace likelihood, updated given the split variables.

In the split model the likelihood of row ``i`` is evaluated at ``z_i``, not at the linear
predictor, so the conditional of ``b`` is::

    Pi_rho(b | z) ∝ p(b) prod_i b_i / (kappa + 1/kappa) exp(-b_i r_i(z_i)),
    r_i(z) = kappa (y_i - z)_+ + (z - y_i)_+ / kappa,

with ``b_i = b(phi)`` a function of one free scalar variable ``phi`` (``b = phi``,
``b = 1 / sigma``, ...). PyMC's own step methods would update ``phi`` given the linear
predictor instead, which is the conditional of another joint, so ``SplitGibbs`` owns ``phi``
and updates it by slice sampling (stepping out and shrinkage, Neal 2003;
:func:`pymc_sgs.nuisance.slice_sample`) of the conditional above in ``phi``'s unconstrained
value space, the prior log density (with the Jacobian of the transform) compiled by PyMC. This is an exact Gibbs update of ``Pi_rho``; together with
the z- and theta-updates the chain targets ``Pi_rho(theta, z, phi)``, and the importance
weights ``pi / pi_rho`` at the current ``b`` correct its theta- and phi-marginals as before.

References
----------
.. [1] R. M. Neal (2003). Slice sampling. Annals of Statistics 31(3), 705–767.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .nuisance import slice_sample

__all__ = ["FreeRate", "slice_sample"]


@dataclass
class FreeRate:
    """The free rate of one asymmetric Laplace term and its update.

    Attributes
    ----------
    term_index : int
        Index of the term among the problem's split terms.
    value_name : str
        Name of the value variable of ``phi`` (what ``SplitGibbs`` owns).
    rate_fn : callable
        ``phi``'s value -> the rate ``b_i`` of every row (array).
    prior_logp : callable
        Point (dict of value variables) -> ``log p(phi)`` including the Jacobian of its
        transform (other variables in the point are fixed: ``phi``'s hyperparameters).
    kappa : float
    y : ndarray
        Observations of the term.
    width : float
        Initial slice width in the value space.
    """

    term_index: int
    value_name: str
    rate_fn: object
    prior_logp: object
    kappa: float
    y: np.ndarray
    value_shape: tuple = ()
    value_dtype: str = "float64"
    width: float = 1.0

    def rates(self, value) -> np.ndarray:
        """Per-row rates at ``phi``'s value."""
        return np.broadcast_to(np.asarray(self.rate_fn(value), dtype=float), self.y.shape)

    def log_conditional(self, value, point, resid_sum_weights) -> float:
        """``log Pi_rho(phi | z)`` up to a constant, at ``phi``'s value."""
        r = resid_sum_weights
        with np.errstate(all="ignore"):
            b = self.rates(value)
            if not np.all(np.isfinite(b)) or np.any(b <= 0):
                return -np.inf
            lp = float(self.prior_logp({**point, self.value_name: self._as_value(value)}))
            out = lp + float(np.sum(np.log(b))) - float(np.sum(b * r))
        return out if np.isfinite(out) else -np.inf

    def _as_value(self, x):
        return np.asarray(x, dtype=self.value_dtype).reshape(self.value_shape)

    def check_losses(self, z) -> np.ndarray:
        """``r_i(z_i)`` of every row (the potential divided by its rate)."""
        d = np.asarray(z, dtype=float) - self.y
        return np.where(d < 0, -self.kappa * d, d / self.kappa)

    def update(self, point, z, rng: np.random.Generator):
        """Slice-sample ``phi`` given the term's split variables ``z``: ``(value, rates)``."""
        r = self.check_losses(z)
        x0 = float(np.asarray(point[self.value_name], dtype=float).ravel()[0])
        x1 = slice_sample(lambda x: self.log_conditional(x, point, r), x0, rng, self.width).x
        value = self._as_value(x1)
        return value, self.rates(value)
