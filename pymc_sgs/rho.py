"""Automatic choice of rho during tuning, from the bias certificate of the importance weights.

With normalised weights ``w~ = w / E_{pi_rho} w`` (``w = pi / pi_rho``), for any
function ``f`` (Cauchy–Schwarz)::

    |E_pi f - E_{pi_rho} f| = |Cov_{pi_rho}(w~, f)| <= sd(w~) * sd_{pi_rho}(f).

So ``sd(w~) <= bias_tol`` certifies that no posterior expectation is off by
more than ``bias_tol`` posterior standard deviations. Under a log-normal model
of the weights, ``Var(w~) = exp(Var(log w)) - 1``, and ``Var(log w)`` scales
like ``rho^4`` for smooth potentials (the bias of ``pi_rho`` is ``O(rho^2)``).
:class:`RhoTuner` estimates ``Var(log w)`` over windows of tuning draws and
rescales rho towards the largest value meeting the target.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["RhoTuner", "validate_bias_tol"]


def validate_bias_tol(bias_tol) -> float:
    """``bias_tol`` must be a number in (0, 1)."""
    try:
        b = float(bias_tol)
    except (TypeError, ValueError):
        raise ValueError(f"bias_tol must be a number in (0, 1); received {bias_tol!r}.") from None
    if isinstance(bias_tol, bool) or not (0.0 < b < 1.0):
        raise ValueError(f"bias_tol must be a number in (0, 1); received {bias_tol!r}.")
    return b


@dataclass
class RhoTuner:
    """Windowed adaptation of a scalar rho towards ``sd(w~) = bias_tol``.

    Parameters
    ----------
    rho : float
        Starting value.
    bias_tol : float
        Target bound on the bias of any posterior expectation, in posterior sd.
    window : int
        Tuning draws in the first adaptation windows; windows double after
        every two adaptations (up to ``max_window``) so that the later, finer
        adjustments rest on more draws. The first ``burn`` fraction of each
        window is discarded (the chain is still moving to the new ``pi_rho``).
    max_factor : float
        Largest change of rho per window.
    safety : float
        Factor (< 1) applied to rho when tuning ends, for the estimation error
        of the last window.
    """

    rho: float
    bias_tol: float = 0.1
    window: int = 25
    max_window: int = 200
    burn: float = 0.2
    max_factor: float = 2.0
    safety: float = 0.9
    n_windows: int = 0
    _buffer: list = field(default_factory=list)

    @property
    def current_window(self) -> int:
        """Length of the current adaptation window."""
        return min(self.window * 2 ** (self.n_windows // 2), self.max_window)

    @property
    def target_log_var(self) -> float:
        """``Var(log w)`` at which ``sd(w~) = bias_tol`` under the log-normal model."""
        return float(np.log1p(self.bias_tol**2))

    def update(self, log_weight: float) -> float | None:
        """Record one tuning draw's log weight; return a new rho at the end of a window."""
        if not np.isfinite(log_weight):
            return None
        self._buffer.append(float(log_weight))
        size = self.current_window
        if len(self._buffer) < size:
            return None
        lw = np.asarray(self._buffer[int(self.burn * size) :])
        self._buffer.clear()
        var = max(float(np.var(lw, ddof=1)), 1e-12)
        factor = (self.target_log_var / var) ** 0.25
        if self.n_windows >= 4:
            factor = np.sqrt(factor)  # damp once near the target: the estimate is noisy
        factor = float(np.clip(factor, 1.0 / self.max_factor, self.max_factor))
        self.n_windows += 1
        self.rho *= factor
        return self.rho

    def finish(self) -> float:
        """Final rho when tuning stops."""
        self._buffer.clear()
        self.rho *= self.safety
        return self.rho
