"""The two conditionals of the split model: ``z | theta`` and ``theta | z``.

Split model (Vono, Paulin & Doucet 2022, section 1), for rows ``i`` of the split terms::

    Pi_rho(theta, z) ∝ exp(-V(theta) - sum_i U_i(z_i)
                           - sum_i (z_i - a_i^T theta - o_i)^2 / (2 rho_i^2))

* ``z_i | theta`` has density ∝ exp(-g_i(z)) with
  ``g_i(z) = U_i(z) + (z - c_i)^2 / (2 rho_i^2)``, ``c_i = a_i^T theta + o_i``.
  :func:`sample_z_exact` draws it exactly by rejection from a Gaussian envelope.
* ``theta | z`` is Gaussian; :class:`GaussianThetaConditional` factors its
  precision once and solves against it each sweep.

References
----------
.. [1] M. Vono, D. Paulin, A. Doucet (2022). Efficient MCMC sampling with
   dimension-free convergence rate using ADMM-type splitting. JMLR 23,
   Algorithm 1, Proposition 3 and Remark 4.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.linalg
from scipy.linalg.blas import dtrsv

from .families import Family
from .series import series_remainder, series_rows

__all__ = [
    "ZDraw",
    "ZMove",
    "overrelaxed_z_move",
    "mh_z_move",
    "find_z_mode",
    "sample_z_exact",
    "GaussianThetaConditional",
    "SingularPrecisionError",
    "triangular_solve",
]

#: default cap on rejection rounds before the z-sampler gives up with an error
MAX_REJECTION_ROUNDS = 10_000


class ZDraw(NamedTuple):
    """Result of one exact z-block draw."""

    z: np.ndarray
    #: approximate minimiser of g (kept to warm-start the next Newton solve)
    mode: np.ndarray
    #: total number of Gaussian proposals used for the whole block
    n_proposals: int


def find_z_mode(family: Family, y, trials, centre, rho, z_init=None, *, tol=1e-6, max_iter=200):
    """Minimise ``g(z) = U(z) + (z - centre)^2 / (2 rho^2)`` elementwise.

    Safeguarded Newton (in the manner of Numerical Recipes' ``rtsafe``): since
    ``U`` is convex, the minimiser lies between ``centre`` and
    ``centre - rho^2 U'(centre)``, or, when ``U'`` is bounded (logit links,
    :meth:`Family.grad_range`), in ``centre - rho^2 [sup U', inf U']``; a Newton step is taken only when it stays
    inside the shrinking bracket and at most halves the previous step,
    otherwise the bracket is bisected. This stops both the 2-cycles Newton
    can fall into on logistic potentials and its one-unit-per-step crawl down
    an exponential (Poisson far above the mode). The first step is only
    required to stay inside the bracket. Convergence is declared when
    ``|g'(z)| * rho < tol``; the exact sampler does not need more (its
    envelope is valid at any point, see :func:`sample_z_exact`).

    For a non-convex ``U`` with a bounded gradient (Student-t), the bracket is
    ``centre -/+ rho^2 sup|U'|`` instead, and the result is a local minimum of ``g``.

    Parameters
    ----------
    family : Family
    y, trials, centre, rho : ndarray
        Arrays broadcastable to a common 1-D shape.
    z_init : ndarray, optional
        Warm start (e.g. the previous sweep's mode).
    """
    inv_r2 = 1.0 / rho**2
    g_range = family.grad_range(y, trials) if family.log_concave else None
    if g_range is not None:
        # a bounded U' brackets the root with no likelihood evaluation (the compiled pass
        # uses the same bracket, so both paths take the same Newton steps)
        lo = centre - rho**2 * g_range[1]
        hi = centre - rho**2 * g_range[0]
    elif family.log_concave:
        with np.errstate(over="ignore"):
            g0 = family.grad(centre, y, trials)
        # the far end of the bracket can overflow (Poisson far above its mode): keep it finite
        other = np.clip(centre - rho**2 * g0, -1e300, 1e300)
        lo = np.minimum(centre, other)
        hi = np.maximum(centre, other)
    else:
        # |U'| <= B puts every root of g' in centre -/+ rho^2 B, with g' <= 0 at the lower end
        # and >= 0 at the upper one; bisection keeps that sign change, so it converges to a
        # local minimum of g even when g is not convex
        half = rho**2 * family.grad_bound(y, trials) * (1.0 + 1e-9) + 1e-300
        lo = centre - half
        hi = centre + half
    z = np.clip(centre if z_init is None else z_init, lo, hi).astype(float, copy=True)
    args = (family, y, trials, centre, rho, inv_r2, tol)
    # the first Newton step only has to stay inside the bracket: from a warm start it
    # usually lands within tolerance (at small rho the problem is nearly quadratic)
    first_step = np.full(z.shape, np.inf)
    z, lo, hi, prev, done = _safeguarded_newton(*args, z, lo, hi, first_step, max_iter)
    if not np.all(done):
        # rows with an astronomically wide bracket (e.g. Poisson far above its mode) need
        # many bisections: continue on those rows only
        bad = np.flatnonzero(~done)
        sub = lambda a: a if np.ndim(a) == 0 else np.broadcast_to(a, z.shape)[bad]  # noqa: E731
        sub_args = (
            family,
            sub(y),
            None if trials is None else sub(trials),
            sub(centre),
            sub(rho),
            sub(inv_r2),
            tol,
        )
        z[bad] = _safeguarded_newton(*sub_args, z[bad], lo[bad], hi[bad], prev[bad], 20 * max_iter)[
            0
        ]
    return z


def _safeguarded_newton(
    family, y, trials, centre, rho, inv_r2, tol, z, lo, hi, prev_step, max_iter
):
    done = np.zeros(z.shape, dtype=bool)
    for _ in range(max_iter):
        with np.errstate(over="ignore", invalid="ignore"):
            gp = family.grad(z, y, trials) + (z - centre) * inv_r2
        with np.errstate(over="ignore"):
            done = np.abs(gp) * rho < tol
        if np.all(done):
            break
        pos = gp > 0
        hi = np.where(pos, z, hi)
        lo = np.where(pos, lo, z)
        with np.errstate(over="ignore", invalid="ignore"):
            newton = z - gp / (family.hess(z, y, trials) + inv_r2)
        ok = (newton > lo) & (newton < hi) & (np.abs(newton - z) <= 0.5 * prev_step)
        new = np.where(done, z, np.where(ok, newton, 0.5 * (lo + hi)))
        prev_step = np.where(done, prev_step, np.abs(new - z))
        z = new
    return z, lo, hi, prev_step, done


def sample_z_exact(
    family: Family,
    y,
    trials,
    centre,
    rho,
    rng: np.random.Generator,
    z_init=None,
    *,
    max_rounds: int = MAX_REJECTION_ROUNDS,
) -> ZDraw:
    """Exact draw of every ``z_i | theta`` for a convex potential.

    With ``z*`` any point and ``D_U`` the Bregman divergence of ``U``,
    ``g(z) >= g(z*) + g'(z*)(z - z*) + (z - z*)^2 / (2 rho^2)``, a Gaussian
    envelope with mean ``z* - rho^2 g'(z*)`` and variance ``rho^2``. A proposal
    from it is accepted with probability ``exp(-D_U(z, z*))``. This is the
    paper's sampler (Proposition 3) with the tangent term of Remark 4, so it is
    exact whether or not ``z*`` is the exact minimiser; at the minimiser the
    expected number of proposals is about ``sqrt(1 + rho^2 U''(z*))``.

    Parameters
    ----------
    family : Family
        Must have a convex potential.
    y, trials, centre, rho : ndarray
        Observed data, trials (or ``None``), ``a_i^T theta + o_i`` and the
        coupling, broadcastable to ``centre.shape`` (1-D).
    rng : numpy.random.Generator
    z_init : ndarray, optional
        Warm start for the Newton solve of the mode.
    max_rounds : int
        Rejection rounds after which a ``RuntimeError`` is raised (a guard
        against non-finite input, never reached in normal use).

    Returns
    -------
    ZDraw
    """
    if not family.log_concave:
        raise ValueError(f"{family!r} is not log-concave; the exact z-sampler does not apply.")
    centre = np.asarray(centre, dtype=float)
    n = centre.shape[0]
    y = np.broadcast_to(y, (n,))
    trials = None if trials is None else np.broadcast_to(trials, (n,))
    rho = np.broadcast_to(np.asarray(rho, dtype=float), (n,))
    mode = find_z_mode(family, y, trials, centre, rho, z_init)
    grad_at_mode = family.grad(mode, y, trials) + (mode - centre) / rho**2
    mean = mode - rho**2 * grad_at_mode

    z = np.empty(n)
    todo = np.arange(n)
    n_proposals = 0
    for _ in range(max_rounds):
        m = todo.size
        if m == 0:
            break
        n_proposals += m
        prop = mean[todo] + rho[todo] * rng.standard_normal(m)
        t_trials = None if trials is None else trials[todo]
        log_accept = -family.bregman(prop, mode[todo], y[todo], t_trials)
        accept = -rng.standard_exponential(m) <= log_accept
        z[todo[accept]] = prop[accept]
        todo = todo[~accept]
    else:
        if todo.size:
            raise RuntimeError(
                f"exact z-sampler: {todo.size} draw(s) not accepted after {max_rounds} rounds "
                f"(first at row {todo[0]}, centre {centre[todo[0]]!r}); the linear predictor "
                "is probably not finite."
            )
    return ZDraw(z=z, mode=mode, n_proposals=n_proposals)


class ZMove(NamedTuple):
    """Result of one over-relaxed Metropolis-Hastings move of the z-block."""

    z: np.ndarray
    mode: np.ndarray
    #: fraction of the block's proposals accepted
    accept_prob: float


def overrelaxed_z_move(
    family: Family, y, trials, centre, rho, z, alpha: float, rng: np.random.Generator, z_init=None
) -> ZMove:
    """Over-relaxed MH update of every ``z_i``, leaving ``z_i | theta`` invariant.

    With ``(m, s^2)`` the Laplace approximation of ``z_i | theta`` (mode and
    inverse curvature ``1 / (U''(m) + 1/rho^2)``), propose Adler's move
    ``z' = m + alpha (z - m) + sqrt(1 - alpha^2) s eps``, which is reversible
    for ``N(m, s^2)``, and accept with probability
    ``min(1, p(z') N(z; m, s^2) / (p(z) N(z'; m, s^2)))``. The log ratio is
    ``r(z) - r(z')`` with ``r(z) = D_U(z, m) + g'(m)(z - m) - U''(m)(z - m)^2 / 2``,
    the non-Gaussian remainder of ``g`` around ``m`` (zero for Gaussian
    potentials, so those moves are always accepted). Nearly Gaussian rows
    (:mod:`pymc_sgs.series`) take ``m`` and ``s`` from one Newton step at the
    centre instead of the mode search; the ratio is then ``R(z - c) - R(z' - c)``
    with ``R`` the third-order Taylor remainder of ``U`` at the centre. Either way
    the move is exact; the returned ``accept_prob`` is the fraction of rows
    whose proposal was accepted.

    Parameters
    ----------
    alpha : float
        Over-relaxation in ``(-1, 1)``; negative values push ``z`` to the other
        side of the mode, which is what speeds up mixing.

    References
    ----------
    .. [1] S. L. Adler (1981). Over-relaxation method for the Monte Carlo
       evaluation of the partition function for multiquadratic actions.
       Physical Review D 23, 2901.
    """
    centre = np.asarray(centre, dtype=float)
    n = centre.shape[0]
    y = np.broadcast_to(y, (n,))
    trials = None if trials is None else np.broadcast_to(trials, (n,))
    rho = np.broadcast_to(np.asarray(rho, dtype=float), (n,))
    inv_r2 = 1.0 / rho**2
    # nearly Gaussian rows: one Newton step from the centre (pymc_sgs.series); the others:
    # the Laplace approximation at the mode
    near = series_rows(family, y, trials, centre, rho)
    tier = np.zeros(n, dtype=bool) if near is None else near.mask
    rest = ~tier
    m = np.empty(n)
    s = np.empty(n)
    z = np.asarray(z, dtype=float)
    if np.any(tier):
        m[tier] = near.mean[tier]
        s[tier] = near.scale[tier]
    if np.any(rest):
        y_r, t_r = y[rest], None if trials is None else trials[rest]
        c_r, rho_r = centre[rest], rho[rest]
        m_r = find_z_mode(
            family, y_r, t_r, c_r, rho_r, None if z_init is None else np.asarray(z_init)[rest]
        )
        curv = family.hess(m_r, y_r, t_r)
        gm = family.grad(m_r, y_r, t_r) + (m_r - c_r) * inv_r2[rest]
        m[rest] = m_r
        s[rest] = 1.0 / np.sqrt(curv + inv_r2[rest])
    prop = m + alpha * (z - m) + np.sqrt(1.0 - alpha**2) * s * rng.standard_normal(n)
    log_ratio = np.empty(n)
    if np.any(tier):
        h = near.derivatives[1][tier]
        y_t, t_t, c_t = y[tier], None if trials is None else trials[tier], centre[tier]
        log_ratio[tier] = series_remainder(family, z[tier], c_t, y_t, t_t, h) - series_remainder(
            family, prop[tier], c_t, y_t, t_t, h
        )
    if np.any(rest):

        def remainder(v):
            dv = v - m_r
            return family.bregman(v, m_r, y_r, t_r) + gm * dv - 0.5 * curv * dv**2

        log_ratio[rest] = remainder(z[rest]) - remainder(prop[rest])
    accept = rng.random(n) < np.exp(np.minimum(log_ratio, 0.0))
    return ZMove(
        z=np.where(accept, prop, z), mode=m, accept_prob=float(np.mean(accept)) if n else 1.0
    )


def mh_z_move(
    family: Family, y, trials, centre, rho, z, alpha: float, rng: np.random.Generator
) -> ZMove:
    """Metropolis–Hastings update of every ``z_i`` for any potential (convex or not).

    The proposal is Adler's over-relaxed move around a Gaussian ``N(m, s^2)``,
    ``z' = m + alpha (z - m) + sqrt(1 - alpha^2) s eps`` (``alpha = 0``: an
    independence proposal), reversible for ``N(m, s^2)``; it is accepted with
    probability ``min(1, exp(g(z) - g(z') - q(z) + q(z')))``, where
    ``g(z) = U(z) + (z - c)^2 / (2 rho^2)`` and ``q(z) = (z - m)^2 / (2 s^2)``.
    ``m`` is the result of the safeguarded Newton search of :func:`find_z_mode`
    started at ``c`` (for a non-convex ``U`` it may be a local mode or a point
    of its bracket) and ``s^2 = 1 / (max(U''(m), 0) + 1 / rho^2)``. Both are
    functions of ``c`` alone, never of the current ``z`` or of earlier sweeps,
    so the move is reversible for ``z_i | theta`` whatever their quality; the
    quality only sets the acceptance rate, which is returned.

    Parameters
    ----------
    family : Family
    y, trials, centre, rho : ndarray
        As for :func:`sample_z_exact`.
    z : ndarray
        Current values.
    alpha : float
        In ``(-1, 1)``.
    rng : numpy.random.Generator

    References
    ----------
    .. [1] L. Tierney (1994). Markov chains for exploring posterior distributions.
       Annals of Statistics 22(4), 1701–1728 (independence and general MH kernels).
    """
    centre = np.asarray(centre, dtype=float)
    n = centre.shape[0]
    y = np.broadcast_to(y, (n,))
    trials = None if trials is None else np.broadcast_to(trials, (n,))
    rho = np.broadcast_to(np.asarray(rho, dtype=float), (n,))
    inv_r2 = 1.0 / rho**2
    m = find_z_mode(family, y, trials, centre, rho, None)
    with np.errstate(over="ignore", invalid="ignore"):
        curv = np.nan_to_num(np.maximum(family.hess(m, y, trials), 0.0), posinf=1e300)
    prec = curv + inv_r2
    s = 1.0 / np.sqrt(prec)
    z = np.asarray(z, dtype=float)
    prop = m + alpha * (z - m) + np.sqrt(1.0 - alpha**2) * s * rng.standard_normal(n)

    def log_ratio_part(v):
        # g(v) - q(v)
        with np.errstate(over="ignore", invalid="ignore"):
            return (
                family.potential(v, y, trials)
                + 0.5 * (v - centre) ** 2 * inv_r2
                - 0.5 * (v - m) ** 2 * prec
            )

    log_ratio = log_ratio_part(z) - log_ratio_part(prop)
    log_ratio = np.where(np.isnan(log_ratio), -np.inf, log_ratio)
    accept = rng.random(n) < np.exp(np.minimum(log_ratio, 0.0))
    return ZMove(
        z=np.where(accept, prop, z), mode=m, accept_prob=float(np.mean(accept)) if n else 1.0
    )


def triangular_solve(lower_f, b, trans: bool = False) -> np.ndarray:
    """``L^-1 b`` (or ``L^-T b``) for a lower-triangular ``L`` stored in Fortran order.

    BLAS ``dtrsv`` directly: the same result as :func:`scipy.linalg.solve_triangular`
    without its argument checks, which were a measurable part of a sweep at small n (two
    solves per theta-step, one per shift move; ``benchmarks/sweep_cost.py`` times a sweep).
    """
    return dtrsv(
        lower_f, np.ascontiguousarray(b, dtype=np.float64), lower=1, trans=1 if trans else 0
    )


class SingularPrecisionError(ValueError):
    """The precision of ``theta | z`` is not positive definite."""


class GaussianThetaConditional:
    """``theta | z`` of the split model, a Gaussian with a fixed precision.

    Precision and linear term::

        Q = P_0 + sum_gaussian A_g^T diag(1/sigma_g^2) A_g + A^T diag(1/rho^2) A
        b = P_0 m_0 + sum_gaussian A_g^T ((y_g - o_g) / sigma_g^2) + A^T ((z - o) / rho^2)

    ``Q`` is factored once (Cholesky, :func:`scipy.linalg.cholesky`); it is
    refactored only when a Gaussian term's ``sigma`` changes (a scale that
    another step method updates).

    Parameters
    ----------
    prior_precision, prior_mean : ndarray
        ``P_0`` (d x d) and ``m_0`` (d,). ``P_0`` may be singular (flat priors)
        provided the data make ``Q`` positive definite.
    split_A, split_offset, rho : ndarray
        Stacked design rows of the split terms, their offsets, and the coupling
        (scalar or one per row).
    gaussian_terms : sequence of (A, offset, y)
        Gaussian likelihood terms kept unsplit; their sigmas are passed to
        :meth:`set_sigmas`.
    """

    def __init__(self, prior_precision, prior_mean, split_A, split_offset, rho, gaussian_terms=()):
        self.d = prior_precision.shape[0]
        self._prior_precision = np.asarray(prior_precision, dtype=float)
        self._prior_mean = np.asarray(prior_mean, dtype=float)
        self._prior_linear = self._prior_precision @ self._prior_mean
        self.split_A = split_A
        self.split_offset = split_offset
        self._split_gram = None  # A^T A, kept when rho is scalar so set_rho needs no data pass
        self._set_split_precision(rho)
        self._gaussian = []
        for A, o, y in gaussian_terms:
            A = np.asarray(A, float)
            resid = np.asarray(y, float) - np.asarray(o, float)
            # a common sigma (the usual case) rescales these; no pass over the data
            self._gaussian.append((A, resid, A.T @ A, A.T @ resid))
        self._sigmas = None
        self._chol = None
        self._gaussian_linear = np.zeros(self.d)
        if not self._gaussian:
            self.set_sigmas(())

    def _set_split_precision(self, rho) -> None:
        n = self.split_A.shape[0]
        rho = np.asarray(rho, dtype=float)
        self.rho = np.broadcast_to(rho, (n,))
        self._scalar_rho = float(rho) if rho.ndim == 0 else None
        # a stride-0 view for a scalar rho: no n-vector
        self._w = np.broadcast_to(1.0 / rho**2, (n,)) if rho.ndim == 0 else 1.0 / self.rho**2
        if n == 0:
            self._split_precision = np.zeros((self.d, self.d))
        elif rho.ndim == 0:
            if self._split_gram is None:
                self._split_gram = self.split_A.T @ self.split_A
            self._split_precision = self._split_gram / float(rho) ** 2
        else:
            self._split_precision = (self.split_A.T * self._w) @ self.split_A

    def set_prior_precision(self, prior_precision) -> None:
        """Change ``P_0`` (hierarchical priors whose scale another step updates); refactor if changed."""
        P = np.asarray(prior_precision, dtype=float)
        if np.array_equal(P, self._prior_precision):
            return
        self._prior_precision = P
        self._prior_linear = P @ self._prior_mean
        self._chol = None
        if self._gaussian and self._sigmas is None:
            return  # factored at the first set_sigmas
        self.set_sigmas(self._sigmas if self._sigmas is not None else ())

    def set_rho(self, rho) -> None:
        """Change the coupling and refactor the precision."""
        self._set_split_precision(rho)
        sigmas = self._sigmas if self._sigmas is not None else ()
        self._chol = None
        if self._gaussian and self._sigmas is None:
            return  # factored at the first set_sigmas
        self.set_sigmas(sigmas)

    def set_sigmas(self, sigmas) -> None:
        """Set the scales of the Gaussian terms; refactor only if they changed."""
        sigmas = tuple(np.asarray(s, dtype=float) for s in sigmas)
        if (
            self._chol is not None
            and len(sigmas) == len(self._sigmas or ())
            and all(np.array_equal(a, b) for a, b in zip(sigmas, self._sigmas))
        ):
            return
        Q = self._prior_precision + self._split_precision
        lin = np.zeros(self.d)
        for (A, resid, gram, a_resid), s in zip(self._gaussian, sigmas):
            if s.size and np.all(s == s.flat[0]):
                w = 1.0 / float(s.flat[0]) ** 2
                Q = Q + w * gram
                lin += w * a_resid
            else:
                w = np.broadcast_to(1.0 / s**2, (A.shape[0],))
                Q = Q + (A.T * w) @ A
                lin += A.T @ (w * resid)
        try:
            chol = scipy.linalg.cholesky(Q, lower=True)
            # round-off can leave a tiny positive pivot on a rank-deficient Q
            if np.min(np.diag(chol) ** 2 / np.diag(Q)) < 1e-10:
                raise np.linalg.LinAlgError("numerically singular")
            self._chol = chol
            self._chol_f = np.asfortranarray(chol)
        except np.linalg.LinAlgError as err:
            raise SingularPrecisionError(
                "the precision of theta | z is not positive definite: the coefficients are "
                "not identified by the data (e.g. constant or duplicated columns, or more "
                "coefficients than observations) and their prior is flat or improper. Give "
                "them a proper prior (e.g. pm.Normal) or remove the redundant columns."
            ) from err
        self._sigmas = sigmas
        self._gaussian_linear = lin

    @property
    def cholesky(self) -> np.ndarray:
        """Lower Cholesky factor ``L`` of the precision, ``Q = L L^T``."""
        return self._chol

    def mean(self, split_rhs) -> np.ndarray:
        """Conditional mean given ``A^T ((z - o) / rho^2)``."""
        b = self._prior_linear + self._gaussian_linear + split_rhs
        return triangular_solve(self._chol_f, triangular_solve(self._chol_f, b), trans=True)

    def noise(self, eps) -> np.ndarray:
        """``L^{-T} eps``: a draw from ``N(0, Q^{-1})`` when ``eps ~ N(0, I)``."""
        return triangular_solve(self._chol_f, eps, trans=True)

    def split_rhs(self, z) -> np.ndarray:
        """``A^T ((z - o) / rho^2)``, the data part of the linear term."""
        if self.split_A.shape[0] == 0:
            return np.zeros(self.d)
        return self.split_A.T @ (self._w * (z - self.split_offset))

    def residual_projection(self, theta, atz):
        """``A^T r`` for the residuals ``r = z - A theta - o``, from ``atz = A^T (z - o) / rho^2``.

        ``rho^2 atz - A^T A theta``: two d x d products, no pass over the data. ``None``
        unless rho is a scalar (then ``A^T A`` is kept).
        """
        if self._scalar_rho is None or self._split_gram is None:
            return None
        return self._scalar_rho**2 * atz - self._split_gram @ theta

    def split_rhs_change(self, delta, a_delta) -> np.ndarray:
        """Change of :meth:`split_rhs` when ``z`` moves by ``a_delta = A delta``.

        ``A^T A delta / rho^2``: a d x d product when ``rho`` is a scalar (``A^T A`` is kept).
        """
        if self._scalar_rho is not None and self._split_gram is not None:
            return self._split_gram @ delta / self._scalar_rho**2
        return self.split_A.T @ (self._w * a_delta)

    def sample(self, z, rng: np.random.Generator, theta=None, alpha: float = 0.0) -> np.ndarray:
        """Draw ``theta | z``, over-relaxed around the current ``theta`` when ``alpha != 0``.

        Adler's update ``mu + alpha (theta - mu) + sqrt(1 - alpha^2) Q^{-1/2} eps``
        is reversible for ``N(mu, Q^{-1})``; ``alpha = 0`` is the exact Gibbs draw.
        """
        return self.sample_from_rhs(self.split_rhs(z), rng, theta, alpha)

    def sample_from_rhs(self, split_rhs, rng, theta=None, alpha: float = 0.0) -> np.ndarray:
        """:meth:`sample` given ``A^T ((z - o) / rho^2)`` (from a fused pass over the data)."""
        mu = self.mean(split_rhs)
        noise = self.noise(rng.standard_normal(self.d))
        if alpha == 0.0 or theta is None:
            return mu + noise
        return mu + alpha * (np.asarray(theta, float) - mu) + np.sqrt(1.0 - alpha**2) * noise
