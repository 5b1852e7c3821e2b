"""Centering the split potentials at the MAP (the paper's assumption on the potentials).

Vono, Paulin & Doucet (2022, Section 3.1 and Section 5.3.1) assume every potential is
*centred*: ``grad U_i(A_i theta*) = 0`` at the global minimiser ``theta*`` of the potential of
``pi``. When it is not, they shift it linearly:

    U~_i(z) = U_i(z) - g_i^T z,    g_i = grad U_i(A_i theta* + o_i),

and add ``sum_i g_i^T A_i theta`` to the Gaussian potential V, which leaves ``pi`` unchanged
but changes ``pi_rho``: its smoothing then acts on potentials whose minima all sit at the MAP.

For the GLM families this is a change of the observed data: for a canonical link
``U(z; y) = -y z + psi(z)``, so ``U(z; y) - U'(eta*; y) z = U(z; psi'(eta*))``, i.e. ``y`` is
replaced by its fitted mean at the MAP (Bernoulli: ``expit(eta*)``, Binomial:
``trials * expit(eta*)``, Poisson: ``exp(eta*)``). The linear term goes into the prior mean:
``m' = m - P^{-1} A^T g``. The centred problem is an ordinary :class:`SplitProblem`, so both
splitting strategies (and the importance weights, which then measure ``pi / pi_rho`` of the
centred split model) work on it unchanged; for shards the per-observation shift also centres
every shard potential, since ``grad U_s(theta*) = sum_j x_j U'(eta*_j)``.

References
----------
.. [1] M. Vono, D. Paulin, A. Doucet (2022). Efficient MCMC sampling with dimension-free
   convergence rate using ADMM-type splitting. JMLR 23, Assumption on centred potentials
   (Section 3.1) and Section 5.3.1.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.optimize

from .problem import SplitProblem
from .start import neg_log_posterior

__all__ = ["map_estimate", "center_problem"]


def _check_centrable(problem: SplitProblem) -> None:
    for t in problem.split_terms:
        # a potential -y z + psi(z) (canonical link, Family.canonical_link): centring only moves y
        if not t.family.canonical_link:
            raise ValueError(
                "centering supports the canonical-link families (Bernoulli and Binomial with "
                f"logit link, Poisson with log link, Normal); the split term {t.name!r} has "
                f"{t.family!r}."
            )
    for g in problem.gaussian_terms:
        if g.sigma is None:
            raise ValueError(
                f"centering needs the sigma of every Normal likelihood fixed; {g.name!r} has a "
                "free sigma. Use center=False for this model."
            )
    P = np.asarray(problem.prior_precision, float)
    if problem.d and np.linalg.eigvalsh(P).min() <= 0:
        raise ValueError(
            "centering moves a linear term into the Gaussian prior and needs a proper prior "
            "(positive definite precision) on every coefficient; this model has a flat or "
            "improper prior on some coefficient. Use center=False, or give it a Normal prior."
        )


def _objective(problem: SplitProblem):
    """Negative log posterior of theta, its gradient and Hessian."""
    return neg_log_posterior(
        problem.prior_precision,
        problem.prior_mean,
        [(t.family, t.A, t.offset, t.y, t.trials) for t in problem.split_terms],
        [(g.A, np.asarray(g.y, float) - g.offset, g.sigma) for g in problem.gaussian_terms],
    )


def map_estimate(problem: SplitProblem, theta0=None, *, tol: float = 1e-10) -> np.ndarray:
    """Maximum a posteriori ``theta*`` of ``pi`` (trust-region Newton, ``scipy.optimize``).

    The negative log posterior is convex for the log-concave families, so the
    minimiser is global. Raises ``RuntimeError`` if the optimiser does not converge.
    """
    f = _objective(problem)
    x0 = np.zeros(problem.d) if theta0 is None else np.asarray(theta0, float)
    res = scipy.optimize.minimize(
        lambda x: f(x)[0],
        x0,
        jac=lambda x: f(x)[1],
        hess=lambda x: f(x)[2],
        method="trust-exact",
        options={"gtol": tol, "maxiter": 500},
    )
    grad_norm = float(np.linalg.norm(f(res.x)[1]))
    if not np.isfinite(grad_norm) or grad_norm > 1e-6 * max(1.0, np.sqrt(problem.d)):
        raise RuntimeError(
            f"map_estimate: the optimiser stopped at |grad| = {grad_norm:.3g} ({res.message})."
        )
    return res.x


def center_problem(problem: SplitProblem, theta_star=None):
    """The centred split problem (same ``pi``, centred potentials) and the MAP it used.

    Returns ``(centred_problem, theta_star)``. Every split row's observation is
    replaced by its fitted mean at ``theta_star`` (see the module docstring), and
    the prior mean becomes ``m - P^{-1} sum_i a_i g_i``.
    """
    _check_centrable(problem)
    if theta_star is None:
        theta_star = map_estimate(problem)
    theta_star = np.asarray(theta_star, float)
    P = np.asarray(problem.prior_precision, float)
    shift = np.zeros(problem.d)
    terms = []
    for t in problem.split_terms:
        eta = t.A @ theta_star + t.offset
        g = t.family.grad(eta, t.y, t.trials)
        shift += t.A.T @ g
        # U(z; y) - g z = U(z; y') + const with y' the fitted mean: y + g = psi'(eta*) for
        # -y z + psi(z); for the Normal potential (z - y)^2 / (2 sigma^2), y' = eta*
        y_new = t.family.centred_y(eta, t.y, t.trials)
        terms.append(dataclasses.replace(t, y=y_new))
    mean = np.asarray(problem.prior_mean, float) - np.linalg.solve(P, shift)
    notes = dict(problem.notes)
    notes["centered_at"] = theta_star
    centred = dataclasses.replace(problem, prior_mean=mean, split_terms=tuple(terms), notes=notes)
    return centred, theta_star
