"""Exact updates of the nuisance parameters of split likelihoods, given ``z``.

NegativeBinomial ``alpha``, Gamma ``shape`` and StudentT ``nu`` and ``sigma``
enter the split model only through the potentials ``U_i(z_i; phi)``::

    Pi_rho(theta, z, phi) ∝ p(phi) exp(-V(theta)) prod_i p(y_i | z_i, phi) N(z_i; a_i^T theta + o_i, rho^2),

so the conditional of ``phi`` given everything else is ``p(phi) prod_i p(y_i | z_i, phi)``
(it depends on ``z``, not on ``theta``). A step method that updated ``phi``
from the *original* likelihood (e.g. NUTS on ``p(phi) prod_i p(y_i | eta_i, phi)``)
would target the wrong joint; SplitGibbs owns these parameters and updates
each one by univariate slice sampling of this conditional, which leaves it
invariant exactly. Pure numpy; the caller supplies the log density.

:func:`slice_sample` is the package's one slice sampler: the free rate of an asymmetric
Laplace likelihood (:mod:`pymc_sgs.free_rate`) is updated with it too.

References
----------
.. [1] R. M. Neal (2003). Slice sampling. Annals of Statistics 31(3), 705–767
   (stepping-out and shrinkage procedures, Figures 3 and 5).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

__all__ = ["SliceDraw", "slice_sample"]


class SliceDraw(NamedTuple):
    """One slice-sampling update (unpacks as ``x, log_density, n_evaluations``)."""

    #: the new value
    x: float
    #: ``log_density(x)``
    log_density: float
    #: evaluations of the log density the update made
    n_evaluations: int


def slice_sample(
    log_density: Callable[[float], float],
    x0: float,
    rng: np.random.Generator,
    width: float = 1.0,
    max_steps: int = 50,
    log_density_x0: float | None = None,
) -> SliceDraw:
    """One univariate slice-sampling update (stepping out, then shrinkage).

    Leaves the density ``exp(log_density)`` invariant (Neal 2003, section 4).

    Parameters
    ----------
    log_density : callable
        Log density up to a constant; may return ``-inf`` outside the support.
    x0 : float
        Current value (``log_density(x0)`` must be finite).
    rng : numpy.random.Generator
    width : float
        Initial interval width; stepping out corrects a width that is too
        small (at linear cost), shrinkage one that is too large (at
        logarithmic cost).
    max_steps : int
        Cap on stepping-out steps on both sides together.
    log_density_x0 : float, optional
        ``log_density(x0)`` if already known.

    Returns
    -------
    SliceDraw
        ``(x, log_density(x), n_evaluations)``.

    Random numbers, in this order: one standard exponential (the slice level), one uniform
    (the interval's position), one uniform (the split of the stepping-out budget), then one
    uniform per shrinkage proposal.
    """
    if not (np.isfinite(width) and width > 0):
        raise ValueError(f"width must be positive and finite; received {width!r}.")
    f0 = log_density(x0) if log_density_x0 is None else log_density_x0
    n_eval = 1 if log_density_x0 is None else 0
    if not np.isfinite(f0):
        raise ValueError(
            f"slice sampling needs a finite log density at the current value {x0!r}; got {f0!r}."
        )
    level = f0 - rng.standard_exponential()
    left = x0 - width * rng.random()
    right = left + width
    # stepping out, with the step budget split at random between the two sides
    j = int(np.floor(max_steps * rng.random()))
    k = max_steps - 1 - j
    while j > 0:
        n_eval += 1
        if not log_density(left) > level:
            break
        left -= width
        j -= 1
    while k > 0:
        n_eval += 1
        if not log_density(right) > level:
            break
        right += width
        k -= 1
    while True:
        x1 = left + (right - left) * rng.random()
        f1 = log_density(x1)
        n_eval += 1
        if f1 > level:
            return SliceDraw(x1, f1, n_eval)
        if x1 < x0:
            left = x1
        else:
            right = x1
        if right - left < 1e-12 * (1.0 + abs(x0)):
            return SliceDraw(
                x0, f0, n_eval
            )  # interval collapsed onto x0 (only with a discontinuous density)
