"""Where a chain starts: a draw from the Laplace approximation of the posterior.

An SGS chain mixes in about ``1 / (rho sqrt(U''))`` sweeps, so a chain started far from the
posterior (PyMC's initial point is the prior's centre) spends hundreds of sweeps drifting
towards it at the small rho that a certified bias needs. Worse, ``rho="auto"`` reads the
drift as a large variance of the log importance weights and shrinks rho further, which slows
the drift down (:mod:`pymc_sgs.rho`). For a GLM the mode of the posterior and its Hessian cost
a few passes over the data (Newton on a convex objective), so the first tuning step moves the
chain to a draw from ``N(theta*, H(theta*)^-1)``: inside the bulk of the posterior, and
dispersed across chains (each chain draws its own start from its own Generator), which keeps
R-hat meaningful.

Tuning draws are discarded, so this changes where burn-in starts, not what the chain targets.

References
----------
.. [1] L. Tierney, J. B. Kadane (1986). Accurate approximations for posterior moments and
   marginal densities. JASA 81, 82-86 (the Laplace approximation).
.. [2] A. Gelman et al. (2013). Bayesian Data Analysis, 3rd ed., Section 11.5 (starting
   points for iterative simulation).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.linalg

__all__ = ["LaplaceStart", "laplace_start", "validate_init"]

INITS = ("laplace", "point")


def validate_init(init) -> str:
    """``init`` must be ``"laplace"`` or ``"point"``."""
    if not isinstance(init, str) or init not in INITS:
        raise ValueError(f"init must be 'laplace' or 'point'; received {init!r}.")
    return init


class LaplaceStart(NamedTuple):
    """Result of :func:`laplace_start`."""

    #: the starting coefficients (a draw from the Laplace approximation), or None if unavailable
    theta: np.ndarray | None
    #: the posterior mode found (None if the search failed)
    mode: np.ndarray | None
    #: Newton iterations used
    iterations: int
    #: why there is no start (empty when there is one)
    reason: str = ""
    #: lower Cholesky factor of the Hessian at the mode (None if unavailable)
    chol: np.ndarray | None = None


#: rows per block in the d x d products below: bounds their temporaries to ~block * d floats
ROW_BLOCK = 32768


def weighted_gram(A, w) -> np.ndarray:
    """``A^T diag(w) A`` in blocks of rows (no n x d temporary)."""
    d = A.shape[1]
    out = np.zeros((d, d))
    for start in range(0, A.shape[0], ROW_BLOCK):
        Ab = A[start : start + ROW_BLOCK]
        out += (Ab.T * w[start : start + ROW_BLOCK]) @ Ab
    return out


def neg_log_posterior(prior_precision, prior_mean, split=(), gaussian=()):
    """``f(theta) -> (value, gradient, Hessian)`` of the negative log posterior of a GLM.

    Parameters
    ----------
    prior_precision, prior_mean : ndarray
        Gaussian prior ``V(theta) = (theta - m)^T P (theta - m) / 2``.
    split : sequence of ``(family, A, offset, y, trials)``
        Likelihood terms ``sum_i U(a_i^T theta + o_i)``.
    gaussian : sequence of ``(A, resid, sigma)``
        Normal terms ``sum_i (a_i^T theta - resid_i)^2 / (2 sigma_i^2)``.

    ``f(theta, need_derivatives=False)`` returns ``(value, None, None)``. Shared by the Laplace
    start (here) and the MAP of :mod:`pymc_sgs.centering`; the kernel composes the same parts
    with its rows (:meth:`pymc_sgs.kernel.SplitGibbsKernel.neg_log_posterior`).
    """
    P = np.asarray(prior_precision, dtype=float)
    m = np.asarray(prior_mean, dtype=float)

    def f(theta, need_derivatives=True):
        parts = prior_terms(P, m, theta, need_derivatives)
        parts = add_split_terms(split, theta, *parts, need_derivatives)
        val, grad, hess = add_gaussian_terms(gaussian, theta, *parts, need_derivatives)
        return float(val), grad, hess

    return f


def prior_terms(P, m, theta, need_derivatives=True):
    """``(value, gradient, Hessian)`` of ``(theta - m)^T P (theta - m) / 2`` (None, None
    without derivatives): where the sums of :func:`neg_log_posterior` start."""
    r = theta - m
    val = 0.5 * r @ P @ r
    grad = P @ r if need_derivatives else None
    hess = P.copy() if need_derivatives else None
    return val, grad, hess


def add_split_terms(split, theta, val, grad, hess, need_derivatives=True):
    """Add ``sum_i U(a_i^T theta + o_i)`` of every ``(family, A, offset, y, trials)`` in
    ``split`` (and its derivatives) to ``(val, grad, hess)``."""
    for fam, A, offset, y, trials in split:
        eta = A @ theta + offset
        val += float(np.sum(fam.potential(eta, y, trials)))
        if need_derivatives:
            grad = grad + A.T @ fam.grad(eta, y, trials)
            hess = hess + weighted_gram(A, fam.hess(eta, y, trials))
    return val, grad, hess


def add_gaussian_terms(gaussian, theta, val, grad, hess, need_derivatives=True):
    """Add the Normal terms ``(A, resid, sigma)`` of :func:`neg_log_posterior` to
    ``(val, grad, hess)``."""
    for A, resid, sigma in gaussian:
        w = 1.0 / np.broadcast_to(np.asarray(sigma, float), (A.shape[0],)) ** 2
        res = A @ theta - resid
        val += 0.5 * float(np.sum(w * res**2))
        if need_derivatives:
            grad = grad + A.T @ (w * res)
            hess = hess + weighted_gram(A, w)
    return val, grad, hess


def laplace_applies(family) -> bool:
    """Whether Newton's method and a Laplace approximation apply to a split term's family:
    smooth (not kinked) and log-concave."""
    return not family.piecewise_linear and family.log_concave


def laplace_start(
    kernel, theta0, rng: np.random.Generator, *, max_iter: int = 50, tol: float = 1e-8
) -> LaplaceStart:
    """Draw a starting point from the Laplace approximation of the posterior of ``kernel``.

    Damped Newton (backtracking on the objective) from ``theta0`` on the negative log
    posterior ``V(theta) + sum_i U_i(a_i theta + o_i)`` with every family and prior at its
    current value, then ``theta* + L^-T eps`` with ``H(theta*) = L L^T``, ``eps ~ N(0, I)``
    from ``rng`` (d draws).

    Returns ``LaplaceStart(theta=None, ...)`` with a reason, and consumes no random numbers,
    when the search does not apply or fails: kinked or non-log-concave likelihoods, a
    matrix-free theta-step (``theta_solver="cg"``: the Hessian is d x d), a non-positive-
    definite Hessian (e.g. separable data under a flat prior), or no convergence.
    """
    if kernel.theta_solver != "cholesky":
        return LaplaceStart(None, None, 0, "the theta-step is matrix-free (theta_solver='cg')")
    for fam in kernel.families:
        if not laplace_applies(fam):
            return LaplaceStart(None, None, 0, f"{fam!r} is kinked or not log-concave")
    # a new chain's first pass over the rows (a back end that can lose rows counts draws
    # per chain for its message)
    kernel.rows.begin_chain()
    f = kernel.neg_log_posterior()
    cond = kernel.theta_conditional
    theta = np.asarray(theta0, dtype=float).copy()
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        val, grad, hess = f(theta)
        if not np.isfinite(val):
            return LaplaceStart(None, None, 0, "the log posterior is not finite at the start")
        for it in range(1, max_iter + 1):
            try:
                chol = scipy.linalg.cho_factor(hess, lower=True)
            except np.linalg.LinAlgError:
                return LaplaceStart(None, None, it, "the Hessian is not positive definite")
            step = scipy.linalg.cho_solve(chol, grad)
            decrement = float(grad @ step)  # squared Newton decrement
            if not np.isfinite(decrement):
                return LaplaceStart(None, None, it, "the Newton step is not finite")
            if decrement < tol:
                break
            t = 1.0
            # Armijo backtracking keeps each step a descent step on the convex objective
            while t > 1e-10:
                new_val = f(theta - t * step, need_derivatives=False)[0]
                if np.isfinite(new_val) and new_val <= val - 0.25 * t * decrement:
                    break
                t *= 0.5
            else:
                return LaplaceStart(None, None, it, "the line search failed")
            theta = theta - t * step
            val, grad, hess = f(theta)
        else:
            return LaplaceStart(None, None, max_iter, "Newton did not converge")
        try:
            L = scipy.linalg.cholesky(hess, lower=True)
        except np.linalg.LinAlgError:
            return LaplaceStart(None, None, it, "the Hessian at the mode is not positive definite")
        # a nearly flat direction (separable data under a flat prior: the "mode" is wherever
        # Newton stopped) gives no usable approximation
        scale = np.asarray(cond._prior_precision).diagonal().copy()
        scale += kernel.rows.design_scale()
        if np.any(np.diag(L) ** 2 < 1e-6 * np.maximum(scale, 1e-300)):
            return LaplaceStart(None, None, it, "the posterior is nearly flat in some direction")
    draw = theta + scipy.linalg.solve_triangular(
        L, rng.standard_normal(theta.shape[0]), lower=True, trans="T"
    )
    return LaplaceStart(draw, theta, it, "", L)
