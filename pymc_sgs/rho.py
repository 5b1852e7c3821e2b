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

Its windows see the chain move between the split models of successive rho: that drift inflates
the variance of the log weights, and a chain started far from the posterior reads its own
burn-in as bias and shrinks rho until it barely moves, and each chain ends at its own rho.
:func:`pilot_rho` therefore sets rho="auto" from the Laplace approximation of the posterior
(no chain involved): the variance of ``log w_rho(theta)`` under ``theta ~ N(theta*, H^-1)``
has a second-order closed form (:func:`laplace_log_weight_var`), a deterministic function of
rho, so a few secant steps in ``log rho`` find the rho at which the certificate is met, the
same for every chain; the tuning draws only check it (``SplitGibbs.stop_tuning``). The
windowed tuner remains for models without that approximation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.linalg

from .validate import check_real

__all__ = ["RhoTuner", "validate_bias_tol", "pilot_rho", "laplace_log_weight_var"]


def validate_bias_tol(bias_tol) -> float:
    """``bias_tol`` must be a number in (0, 1)."""
    b = check_real("bias_tol", bias_tol, expected="a number in (0, 1)")
    if not (0.0 < b < 1.0):
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
    damp_after : int
        Windows after which each adjustment is halved on the log scale.
    max_rho : float
        Largest rho the tuner moves to: a nearly flat likelihood meets the
        certificate at any rho and would otherwise grow it without bound.
    """

    rho: float
    bias_tol: float = 0.1
    window: int = 25
    max_window: int = 200
    burn: float = 0.2
    max_factor: float = 2.0
    safety: float = 0.9
    damp_after: int = 4
    max_rho: float = np.inf
    n_windows: int = 0
    _buffer: list = field(default_factory=list)
    _unweighted: int = 0

    @property
    def current_window(self) -> int:
        """Length of the current adaptation window."""
        return min(self.window * 2 ** (self.n_windows // 2), self.max_window)

    @property
    def target_log_var(self) -> float:
        """``Var(log w)`` at which ``sd(w~) = bias_tol`` under the log-normal model."""
        return float(np.log1p(self.bias_tol**2))

    def update(self, log_weight: float, swept: bool = True) -> float | None:
        """Record one tuning draw's log weight; return a new rho at the end of a window.

        A draw made without a sweep (``swept=False``, ``SplitGibbs(sweep_every=k)``) has no
        weight but counts towards the window's length, so windows span the same number of
        draws whatever ``k`` is (a draw whose sweep gave no weight, e.g. just after rho
        changed, does not count).
        """
        if not swept:
            self._unweighted += 1
        elif not np.isfinite(log_weight):
            return None
        else:
            self._buffer.append(float(log_weight))
        size = self.current_window
        if len(self._buffer) + self._unweighted < size:
            return None
        lw = np.asarray(self._buffer[int(self.burn * len(self._buffer)) :])
        self._buffer.clear()
        self._unweighted = 0
        if lw.size < 2:
            return None
        var = max(float(np.var(lw, ddof=1)), 1e-12)
        factor = (self.target_log_var / var) ** 0.25
        if self.n_windows >= self.damp_after:
            factor = np.sqrt(factor)  # damp once near the target: the estimate is noisy
        factor = float(np.clip(factor, 1.0 / self.max_factor, self.max_factor))
        self.n_windows += 1
        self.rho = min(self.rho * factor, self.max_rho)
        return self.rho

    def finish(self) -> float:
        """Final rho when tuning stops."""
        self._buffer.clear()
        self._unweighted = 0
        self.rho *= self.safety
        return self.rho


def laplace_log_weight_var(kernel, mode, chol, rho) -> float:
    """``Var(log w_rho(theta))`` for ``theta ~ N(theta*, H^-1)``, to second order.

    ``log w_rho(theta) = sum_i psi_i(a_i^T theta + o_i)`` (per-row log weights of
    :func:`pymc_sgs.weights.log_weight_rows`). With ``psi_i`` expanded to second order around
    ``eta_i* = a_i^T theta* + o_i``, ``g = sum_i psi_i' a_i`` and ``W = sum_i psi_i'' a_i a_i^T``,

        Var = g^T H^-1 g + tr((W H^-1)^2) / 2.

    The derivatives are central differences over one posterior sd of ``eta_i``
    (``s_i = |L^-1 a_i|``), i.e. over the range the posterior explores, so the expansion
    is exact for quadratic ``psi_i`` and deterministic (no Monte Carlo error). Costs three
    quadrature passes over the rows and one ``n d^2`` product. ``g`` and ``W`` are sums over
    rows, computed where the rows are (:meth:`pymc_sgs.rows.LocalRows.log_weight_var_parts`).
    """
    g, W = kernel.rows.log_weight_var_parts(mode, chol, rho)
    # whiten by L: H^-1 = L^-T L^-1
    gw = scipy.linalg.solve_triangular(chol, g, lower=True)
    Ww = scipy.linalg.solve_triangular(chol, W, lower=True)
    Ww = scipy.linalg.solve_triangular(chol, Ww.T, lower=True)
    return float(gw @ gw + 0.5 * np.sum(Ww * Ww))


def pilot_rho(
    kernel,
    mode,
    chol,
    bias_tol: float,
    *,
    rho0: float = 0.5,
    max_steps: int = 12,
    rho_max: float = np.inf,
) -> float:
    """Rho at which the Laplace-approximated ``Var(log w_rho)`` meets the certificate.

    Secant steps on ``log`` :func:`laplace_log_weight_var` against ``log rho``, starting
    from the ``rho^4`` law of smooth potentials, until that variance is within 5% of
    ``log(1 + bias_tol^2)`` (the target of :class:`RhoTuner`). No random numbers.

    Parameters
    ----------
    kernel : SplitGibbsKernel
    mode, chol : ndarray
        Posterior mode and lower Cholesky factor of the Hessian there
        (:func:`pymc_sgs.start.laplace_start`).
    rho_max : float
        Upper bound of the result: a nearly flat likelihood meets the certificate at any rho.
    """
    target = np.log(np.log1p(bias_tol**2))
    log_rho, slope = np.log(min(rho0, rho_max)), 4.0
    log_max = np.log(rho_max)
    prev = None
    for _ in range(max_steps):
        var = laplace_log_weight_var(kernel, mode, chol, np.exp(log_rho))
        if not np.isfinite(var) or var <= 0.0:
            break
        log_var = np.log(var)
        if abs(log_var - target) < np.log(1.05):
            break
        if prev is not None and log_rho != prev[0]:
            # the measured exponent of Var(log w) in rho, kept near the smooth-potential 4
            slope = float(np.clip((log_var - prev[1]) / (log_rho - prev[0]), 2.0, 8.0))
        prev = (log_rho, log_var)
        if log_var < target and log_rho >= log_max:
            break  # the certificate holds at the bound
        # at most a factor 30 per step: far from the root the power law is only a guide
        log_rho += float(np.clip((target - log_var) / slope, -np.log(30.0), np.log(30.0)))
        log_rho = min(log_rho, log_max)
    return float(np.exp(log_rho))
