"""Deterministic set-up of the mixed-model sampler: hyperparameter mode, start and rho.

* :func:`coef_mode`: Newton's method for the coefficients at fixed hyperparameters ``h``
  (penalised iteratively reweighted least squares, as in lme4's PIRLS), using the same
  structured factorization as the sampler.
* :func:`hyper_mode`: the mode of the hyperparameters' marginal posterior, exact for a
  linear mixed model and the Laplace approximation of the coefficients otherwise (the
  INLA/glmer approximation of ``p(h | y)``), with the inverse Hessian there. It gives
  the chains their start and the random-walk proposal its initial shape.

No random numbers are drawn here.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.optimize

from .prior import PriorPrecision

__all__ = ["MixedMode", "coef_mode", "hyper_mode", "likelihood_constant", "log_marginal"]


class MixedMode(NamedTuple):
    h: np.ndarray  # mode of the hyperparameters' (approximate) marginal posterior
    h_cov: np.ndarray  # inverse Hessian of -log p(h | y) there
    coef: np.ndarray  # conditional mode of the coefficients at h (deviations from the prior mean)
    row_weights: np.ndarray | None  # likelihood curvature of each row at that mode (GLMMs)


def likelihood_constant(family, y, trials=None) -> float:
    """``log p(y | eta) + U(eta)`` summed over the rows: the part of the log-likelihood the
    potential leaves out. It depends on the family's nuisance parameters only (NegativeBinomial
    ``alpha``, Gamma ``shape``), so it counts where they are sampled."""
    z = np.zeros(np.shape(y))
    with np.errstate(over="ignore", invalid="ignore"):
        v = float(np.sum(family.log_likelihood(z, y, trials) + family.potential(z, y, trials)))
    return v if np.isfinite(v) else -np.inf


def coef_mode(kernel, lam, c0=None, *, family=None, tol=1e-9, max_iter=100):
    """Conditional mode of the coefficient deviations of a GLMM at prior precision ``lam``
    (a :class:`~pymc_sgs.mixed.prior.PriorPrecision`).

    ``family`` is the likelihood at the hyperparameters (default the problem's). Returns
    ``(c, objective, factor of the Hessian, row curvatures)``.
    """
    p = kernel.problem
    fam = p.family if family is None else family
    if not isinstance(lam, PriorPrecision):
        lam = PriorPrecision(np.asarray(lam, dtype=float))
    A = kernel.A
    c = np.zeros(kernel.dim) if c0 is None else np.array(c0, dtype=float)

    def objective(c):
        eta = A @ c + kernel.offset
        u = float(np.sum(fam.potential(eta, p.y, p.trials)))
        return u + 0.5 * lam.quad(c), eta

    obj, eta = objective(c)
    for _ in range(max_iter):
        w = np.maximum(fam.hess(eta, p.y, p.trials), 0.0)
        grad = kernel.AT @ fam.grad(eta, p.y, p.trials) + lam.matvec(c)
        factor = kernel.precision.reweighted(w).factor(lam, 1.0)
        step = factor.solve(grad)
        dec = float(grad @ step)
        t = 1.0
        while True:
            c_new = c - t * step
            obj_new, eta_new = objective(c_new)
            if np.isfinite(obj_new) and obj_new <= obj - 1e-4 * t * dec:
                break
            t *= 0.5
            if t < 1e-10:
                c_new, obj_new, eta_new = c, obj, eta
                break
        c, obj, eta = c_new, obj_new, eta_new
        if dec < tol * (1.0 + abs(obj)) or t < 1e-10:
            break
    w = np.maximum(fam.hess(eta, p.y, p.trials), 0.0)
    factor = kernel.precision.reweighted(w).factor(lam, 1.0)
    return c, obj, factor, w


def _log_post_laplace(kernel, h, cache):
    prior = kernel.prior_at(h)
    if prior is None:
        return -np.inf
    log_prior, _, _, lam = prior
    p = kernel.problem
    family = p.family_at(h)
    if family is None:
        return -np.inf
    const = 0.0 if p.family_params is None else likelihood_constant(family, p.y, p.trials)
    try:
        c, obj, factor, _ = coef_mode(kernel, lam, cache.get("c"), family=family)
    except np.linalg.LinAlgError:
        return -np.inf
    cache["c"] = c
    return float(log_prior - obj + const + lam.half_logdet() - 0.5 * factor.logdet)


def log_marginal(kernel, h, cache=None) -> float:
    """``log p(h) + log p(y | h)``: exact for a linear mixed model, Laplace for a GLMM."""
    if not kernel.split:
        return kernel.evaluate(h, kernel.data_part(None)).log_post
    return _log_post_laplace(kernel, h, {} if cache is None else cache)


def hyper_mode(kernel, h0) -> MixedMode:
    """Mode and inverse Hessian of :func:`log_marginal` over the unconstrained ``h``."""
    K = kernel.problem.hyper_size
    cache = {}

    def neg(h):
        v = log_marginal(kernel, h, cache)
        return -v if np.isfinite(v) else 1e300

    h0 = np.asarray(h0, dtype=float)
    if K:
        # a GLMM's objective carries the noise of its inner Newton solve (~1e-8 at the
        # solve's tolerance), which forward differences (step ~1.5e-8) turn into gradient
        # errors of order one: BFGS stopped early (sleepstudy as a t model: after 2
        # iterations, 5 log units short of the mode) or wandered (grouseticks: 434
        # evaluations, 201 with central differences). A linear mixed model's is exact.
        jac = "3-point" if kernel.split else None
        res = scipy.optimize.minimize(neg, h0, method="BFGS", jac=jac, options={"gtol": 1e-6})
        h = res.x
        if not np.isfinite(res.fun) or res.fun >= 1e300:
            res = scipy.optimize.minimize(neg, h0, method="Nelder-Mead")
            h = res.x
        # central second differences (step ~1e-3 of a unit on the log scale)
        eps = 1e-3
        f0 = neg(h)
        H = np.empty((K, K))
        for i in range(K):
            for j in range(i, K):
                ei, ej = np.eye(K)[i] * eps, np.eye(K)[j] * eps
                if i == j:
                    H[i, i] = (neg(h + ei) - 2 * f0 + neg(h - ei)) / eps**2
                else:
                    H[i, j] = H[j, i] = (
                        neg(h + ei + ej) - neg(h + ei - ej) - neg(h - ei + ej) + neg(h - ei - ej)
                    ) / (4 * eps**2)
        try:
            evals, evecs = np.linalg.eigh(H)
            # flat or ill-determined directions get unit variance on the log scale
            evals = np.where(evals > 1e-6, evals, 1.0)
            h_cov = (evecs / evals) @ evecs.T
        except np.linalg.LinAlgError:
            h_cov = np.eye(K)
    else:
        h, h_cov = h0, np.zeros((0, 0))
    if kernel.split:
        lam = kernel.prior_at(h)[3]
        c, _, _, w = coef_mode(kernel, lam, cache.get("c"), family=kernel.problem.family_at(h))
    else:
        ev = kernel.evaluate(h, kernel.data_part(None))
        c, w = ev.mean, None
    return MixedMode(h, h_cov, c, w)
