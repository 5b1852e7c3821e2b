"""Potentials of dimension d_i > 1: multinomial logistic regression (kernel level).

For ``y_i in {0, ..., K-1}`` with class 0 as reference, coefficients ``B`` (p x (K-1)) and
``eta_i = B^T x_i in R^{K-1}``, the potential of observation i is

    U_i(z) = -z_{y_i} [y_i > 0] + log(1 + sum_k exp(z_k)),     z in R^{K-1},

with ``A_i = I_{K-1} ⊗ x_i^T`` acting on ``vec(B)``. Its Hessian ``diag(p) - p p^T`` (softmax
probabilities p of classes 1..K-1) lies between 0 and ``I / 2``, so ``z_i | B`` is
``1/rho^2``-strongly convex and ``(1/2 + 1/rho^2)``-smooth, and is drawn exactly by the
rejection sampler of Proposition 3, vectorised over the rows
(:func:`batch_sample_strongly_log_concave`). ``B | z`` factorises over the K-1 classes with
the common precision ``X^T X / rho^2 + I / s^2`` (factored once).

This module works on arrays (no PyMC model detection): ``pm.Categorical`` with a softmax of
``X @ B`` is not recognised by :func:`pymc_sgs.detect_split_problem`.

References
----------
.. [1] M. Vono, D. Paulin, A. Doucet (2022). Efficient MCMC sampling with dimension-free
   convergence rate using ADMM-type splitting. JMLR 23, Section 2 (potentials of dimension
   d_i), Proposition 3 and Lemma 31.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import scipy.linalg
from scipy.special import logsumexp

from .shards import _paper_gamma

__all__ = ["softmax_potential", "batch_sample_strongly_log_concave", "MultinomialLogitKernel"]


def softmax_potential(Z, y):
    """``(U, grad U)`` of the multinomial-logit potentials at rows ``Z`` (n x (K-1))."""
    Z = np.atleast_2d(Z)
    full = np.concatenate([np.zeros((Z.shape[0], 1)), Z], axis=1)
    lse = logsumexp(full, axis=1)
    picked = np.where(y > 0, np.take_along_axis(full, y[:, None].astype(int), 1)[:, 0], 0.0)
    p = np.exp(full[:, 1:] - lse[:, None])
    grad = p.copy()
    rows = np.flatnonzero(y > 0)
    grad[rows, y[rows].astype(int) - 1] -= 1.0
    return lse - picked, grad


def batch_sample_strongly_log_concave(
    f: Callable, grad: Callable, m: float, M: float, x0, rng: np.random.Generator, *,
    n_grad_steps: int = 100, grad_tol: float | None = None, max_rounds: int = 10_000,
):
    """Proposition 3 (the Lemma 31 envelope) for n independent rows at once.

    ``f(X, idx)`` and ``grad(X, idx)`` evaluate the potentials of rows ``idx`` at the points
    ``X`` (len(idx) x k); every row's potential is ``m``-strongly convex and ``M``-smooth.
    Each row gets its own approximate minimiser (gradient descent with step ``1/M`` from its
    row of ``x0``, Remark 4) and its own gamma. Returns ``(draws, n_proposals)``.
    """
    x = np.array(x0, dtype=float)
    n, k = x.shape
    idx_all = np.arange(n)
    if grad_tol is None:
        grad_tol = 0.01 * np.sqrt(m / k)
    g = grad(x, idx_all)
    for _ in range(n_grad_steps):
        todo = np.linalg.norm(g, axis=1) > grad_tol
        if not todo.any():
            break
        x[todo] -= g[todo] / M
        g[todo] = grad(x[todo], idx_all[todo])
    f_t = f(x, idx_all)
    g2 = np.sum(g * g, axis=1)
    gamma = np.array([_paper_gamma(float(v), k, m) for v in g2])
    prec = m - gamma
    shift = f_t - np.where(gamma > 0, g2 / (2 * np.where(gamma > 0, gamma, 1.0)), 0.0)
    out = np.empty_like(x)
    props = np.zeros(n, dtype=int)
    todo = idx_all
    for _ in range(max_rounds):
        if todo.size == 0:
            return out, props
        props[todo] += 1
        prop = x[todo] + rng.standard_normal((todo.size, k)) / np.sqrt(prec[todo])[:, None]
        r2 = np.sum((prop - x[todo]) ** 2, axis=1)
        log_acc = np.minimum(0.0, shift[todo] + 0.5 * prec[todo] * r2 - f(prop, todo))
        acc = -rng.standard_exponential(todo.size) <= log_acc
        out[todo[acc]] = prop[acc]
        todo = todo[~acc]
    raise RuntimeError(f"batch rejection sampler: {todo.size} row(s) not accepted.")


class MultinomialLogitKernel:
    """Split Gibbs sampler for multinomial logistic regression, one ``z_i in R^{K-1}`` per row.

    Parameters
    ----------
    X : ndarray (n, p)
    y : ndarray (n,) of integers in ``0..K-1`` (class 0 is the reference)
    n_classes : int
    rho : float
    prior_sd : float
        iid ``N(0, prior_sd^2)`` prior on every coefficient.
    """

    def __init__(self, X, y, n_classes: int, rho: float, prior_sd: float = 2.5):
        self.X = np.asarray(X, float)
        self.y = np.asarray(y)
        K = int(n_classes)
        if K < 2:
            raise ValueError(f"n_classes must be at least 2; received {n_classes!r}.")
        if np.any((self.y < 0) | (self.y >= K) | (self.y != np.round(self.y))):
            raise ValueError(f"y must hold integers in 0..{K - 1}.")
        if not (np.isfinite(rho) and rho > 0):
            raise ValueError(f"rho must be positive and finite; received {rho!r}.")
        if not (np.isfinite(prior_sd) and prior_sd > 0):
            raise ValueError(f"prior_sd must be positive and finite; received {prior_sd!r}.")
        self.k = K - 1
        self.rho = float(rho)
        p = self.X.shape[1]
        Q = self.X.T @ self.X / self.rho**2 + np.eye(p) / prior_sd**2
        self._chol = scipy.linalg.cholesky(Q, lower=True)

    def _f(self, Z, idx):
        return softmax_potential(Z, self.y[idx])[0] + 0.5 * np.sum(
            (Z - self._centre[idx]) ** 2, axis=1) / self.rho**2

    def _grad(self, Z, idx):
        return softmax_potential(Z, self.y[idx])[1] + (Z - self._centre[idx]) / self.rho**2

    def sample_z(self, B, rng):
        """Exact draw of every ``z_i | B``; returns ``(z (n, K-1), proposals per row)``."""
        self._centre = self.X @ B
        m = 1.0 / self.rho**2
        return batch_sample_strongly_log_concave(self._f, self._grad, m, m + 0.5, self._centre, rng)

    def sample_B(self, z, rng):
        """Exact draw of ``B | z`` (p x (K-1)): one Gaussian per class, shared precision."""
        rhs = self.X.T @ z / self.rho**2
        L = self._chol
        mean = scipy.linalg.cho_solve((L, True), rhs)
        noise = scipy.linalg.solve_triangular(L, rng.standard_normal(rhs.shape), lower=True,
                                              trans="T")
        return mean + noise

    def sweep(self, B, rng):
        """One Gibbs sweep; returns ``(B, z, mean proposals per z_i draw)``."""
        z, props = self.sample_z(B, rng)
        return self.sample_B(z, rng), z, float(props.mean())
