"""``theta | z`` for many coefficients or a sparse design: a conjugate-gradient sampler.

The dense path (:class:`pymc_sgs.conditionals.GaussianThetaConditional`) forms
and factors the d x d precision ``Q``. When d is large, or the design is a
:mod:`scipy.sparse` matrix whose Gram matrix would be dense, this module draws
from the same Gaussian without forming ``Q``, by *perturbation-optimisation*:
with ``xi ~ N(0, Q)`` built from the factors of ``Q``,

    Q = P_0 + A^T W A + sum_g A_g^T S_g A_g,
    xi = P_0^{1/2} e_0 + A^T W^{1/2} e_1 + sum_g A_g^T S_g^{1/2} e_g,

the solution ``theta`` of ``Q theta = b + xi`` is an exact draw of
``N(Q^{-1} b, Q^{-1})``. Adler's over-relaxed update
``mu + alpha (theta - mu) + sqrt(1 - alpha^2) Q^{-1/2} eps`` is likewise one
solve: ``Q theta' = alpha Q theta + (1 - alpha) b + sqrt(1 - alpha^2) xi``.
The system is solved by conjugate gradients (:func:`scipy.sparse.linalg.cg`),
warm-started at the current ``theta``, to a relative residual of ``rtol``;
each iteration costs one ``A^T (W (A v))``, so nothing d x d is formed
(except ``P_0``, which is applied as given: pass a diagonal one for large d).

The draw is exact up to the solver's tolerance; the default ``1e-10`` makes
that error far below Monte Carlo error.

References
----------
.. [1] G. Papandreou, A. L. Yuille (2010). Gaussian sampling by local
   perturbations. NeurIPS 23.
.. [2] C. Gilavert, S. Moussaoui, J. Idier (2015). Efficient Gaussian sampling
   for solving large-scale inverse problems using MCMC. IEEE Trans. Signal
   Process. 63(1), 70-80.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.sparse
import scipy.sparse.linalg

from .conditionals import SingularPrecisionError

__all__ = ["CGThetaConditional", "ConvergenceError"]


class ConvergenceError(RuntimeError):
    """Conjugate gradients did not reach the requested tolerance."""


def _root_of_psd(P):
    """``R`` with ``R^T R = P`` for a symmetric PSD ``P`` (diagonal fast path; rank-deficient allowed)."""
    if scipy.sparse.issparse(P):
        P = P.toarray()
    P = np.asarray(P, dtype=float)
    off = P - np.diag(np.diag(P))
    if not np.any(off):
        return ("diag", np.sqrt(np.maximum(np.diag(P), 0.0)))
    vals, vecs = scipy.linalg.eigh(P)
    return ("dense", (vecs * np.sqrt(np.maximum(vals, 0.0))).T)


class CGThetaConditional:
    """``theta | z`` by perturbation-optimisation with conjugate gradients.

    Same interface as :class:`pymc_sgs.conditionals.GaussianThetaConditional`
    (``set_rho``, ``set_prior_precision``, ``set_sigmas``, ``split_rhs``,
    ``sample``, ``sample_from_rhs``, ``mean``), so the kernel can use either.

    Parameters
    ----------
    prior_precision, prior_mean : ndarray
        ``P_0`` (d x d, positive definite; diagonal is cheapest) and ``m_0``.
    split_A : ndarray or scipy.sparse matrix
        Stacked design rows of the split terms.
    split_offset, rho : ndarray
    gaussian_terms : sequence of (A, offset, y)
    rtol : float
        Relative residual at which conjugate gradients stop.
    max_iter : int, optional
        Iteration cap (default ``10 d``); reaching it raises
        :class:`ConvergenceError` rather than returning an inexact draw.
    """

    def __init__(
        self,
        prior_precision,
        prior_mean,
        split_A,
        split_offset,
        rho,
        gaussian_terms=(),
        rtol: float = 1e-10,
        max_iter: int | None = None,
    ):
        self.d = prior_mean.shape[0]
        self.split_A = split_A
        self.split_offset = np.asarray(split_offset, dtype=float)
        self.rtol = float(rtol)
        self.max_iter = int(max_iter) if max_iter is not None else 10 * self.d + 100
        self._prior_mean = np.asarray(prior_mean, dtype=float)
        self._gaussian = [
            (A, np.asarray(y, float) - np.asarray(o, float)) for A, o, y in gaussian_terms
        ]
        self._sigma_w = [None] * len(self._gaussian)
        self._gaussian_linear = np.zeros(self.d)
        self.iterations = 0  # CG iterations of the last solve (a cost diagnostic)
        self._prior_precision = None
        self.set_prior_precision(prior_precision)
        self.set_rho(rho)

    # ---------------------------------------------------------------- settings
    def set_prior_precision(self, prior_precision) -> None:
        """Change ``P_0`` (hierarchical scales); it must be positive definite."""
        P = prior_precision
        if self._prior_precision is not None and np.array_equal(P, self._prior_precision):
            return  # called every sweep by the step; the root only changes with P
        root = _root_of_psd(P)
        smallest = (
            np.min(root[1])
            if root[0] == "diag"
            else np.min(np.linalg.svd(root[1], compute_uv=False))
        )
        if not smallest > 0.0:
            # CG would converge on a singular system and return a draw with an arbitrary
            # null-space component: refuse rather than sample an improper posterior wrongly
            raise SingularPrecisionError(
                "theta_solver='cg' needs a proper Gaussian prior (positive definite precision) "
                "on every coefficient; some coefficients have a flat or improper prior. Give "
                "them a proper prior (e.g. pm.Normal), or use theta_solver='cholesky', which "
                "checks the data identify them."
            )
        self._prior_precision = P
        self._prior_root = root
        self._prior_linear = np.asarray(P @ self._prior_mean, dtype=float).ravel()

    def set_rho(self, rho) -> None:
        """Change the coupling."""
        n = self.split_A.shape[0]
        self.rho = np.broadcast_to(np.asarray(rho, dtype=float), (n,))
        self._w = 1.0 / self.rho**2

    def set_sigmas(self, sigmas) -> None:
        """Scales of the Gaussian terms (one array or scalar per term)."""
        lin = np.zeros(self.d)
        for k, ((A, resid), s) in enumerate(zip(self._gaussian, sigmas)):
            w = np.broadcast_to(1.0 / np.asarray(s, dtype=float) ** 2, (A.shape[0],))
            self._sigma_w[k] = w
            lin += A.T @ (w * resid)
        self._gaussian_linear = lin

    # ------------------------------------------------------------------ pieces
    def _apply_Q(self, v):
        out = np.asarray(self._prior_precision @ v, dtype=float).ravel()
        if self.split_A.shape[0]:
            out += self.split_A.T @ (self._w * (self.split_A @ v))
        for (A, _), w in zip(self._gaussian, self._sigma_w):
            out += A.T @ (w * (A @ v))
        return out

    def _perturbation(self, rng):
        """``xi ~ N(0, Q)`` from independent normals, in a fixed order."""
        kind, R = self._prior_root
        e0 = rng.standard_normal(self.d)
        xi = R * e0 if kind == "diag" else R.T @ e0
        n = self.split_A.shape[0]
        if n:
            xi = xi + self.split_A.T @ (np.sqrt(self._w) * rng.standard_normal(n))
        for (A, _), w in zip(self._gaussian, self._sigma_w):
            xi = xi + A.T @ (np.sqrt(w) * rng.standard_normal(A.shape[0]))
        return xi

    def _solve(self, rhs, x0):
        op = scipy.sparse.linalg.LinearOperator((self.d, self.d), matvec=self._apply_Q, dtype=float)
        count = [0]

        def callback(_):
            count[0] += 1

        x, info = scipy.sparse.linalg.cg(
            op, rhs, x0=x0, rtol=self.rtol, atol=0.0, maxiter=self.max_iter, callback=callback
        )
        self.iterations = count[0]
        if info != 0:
            resid = np.linalg.norm(self._apply_Q(x) - rhs) / max(np.linalg.norm(rhs), 1e-300)
            if not np.isfinite(resid) or resid > 1e3 * self.rtol:
                raise (
                    SingularPrecisionError(
                        "conjugate gradients for theta | z did not converge in "
                        f"{self.max_iter} iterations (relative residual {resid:.1e}): the precision is "
                        "(nearly) singular. Give the coefficients a proper prior, remove redundant "
                        "columns, or use theta_solver='cholesky'."
                    )
                    if info > 0
                    else ConvergenceError(f"conjugate gradients failed (info={info}).")
                )
        return x

    @property
    def cholesky(self):
        """Not formed by this solver (None)."""
        return None

    # ------------------------------------------------------------------ public
    def split_rhs(self, z) -> np.ndarray:
        """``A^T ((z - o) / rho^2)``, the data part of the linear term."""
        if self.split_A.shape[0] == 0:
            return np.zeros(self.d)
        return np.asarray(self.split_A.T @ (self._w * (z - self.split_offset)), dtype=float).ravel()

    def mean(self, split_rhs) -> np.ndarray:
        """Conditional mean given ``A^T ((z - o) / rho^2)`` (a CG solve)."""
        b = self._prior_linear + self._gaussian_linear + split_rhs
        return self._solve(b, None)

    def sample(self, z, rng: np.random.Generator, theta=None, alpha: float = 0.0) -> np.ndarray:
        """Draw ``theta | z`` (over-relaxed around ``theta`` when ``alpha != 0``)."""
        return self.sample_from_rhs(self.split_rhs(z), rng, theta, alpha)

    def sample_from_rhs(self, split_rhs, rng, theta=None, alpha: float = 0.0) -> np.ndarray:
        """:meth:`sample` given ``A^T ((z - o) / rho^2)``; one CG solve."""
        b = self._prior_linear + self._gaussian_linear + split_rhs
        xi = self._perturbation(rng)
        if alpha == 0.0 or theta is None:
            return self._solve(b + xi, theta)
        theta = np.asarray(theta, dtype=float)
        rhs = alpha * self._apply_Q(theta) + (1.0 - alpha) * b + np.sqrt(1.0 - alpha**2) * xi
        return self._solve(rhs, theta)
