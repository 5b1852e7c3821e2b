"""Splitting strategy 2 (data shards) and its d-dimensional exact z-sampler.

Strategy 2 of Vono, Paulin & Doucet (2022, Section 5.3.1) splits the
likelihood into ``b`` data shards instead of one potential per observation:
``A_s = I_d`` and ``U_s(z) = sum_{j in shard s} U(x_j^T z + o_j; y_j)``, so
every auxiliary variable ``z_s`` lives in ``R^d``. The split model is::

    Pi_rho(theta, z_1..z_b) ∝ exp(-V(theta) - sum_s U_s(z_s) - sum_s ||z_s - theta||^2 / (2 rho^2))

* ``theta | z`` is Gaussian with precision ``P_V + (b / rho^2) I`` (plus the
  unsplit Gaussian terms) and linear term ``P_V m_V + sum_s z_s / rho^2``.
* ``z_s | theta`` ∝ ``exp(-f_s(z))`` with ``f_s(z) = U_s(z) + ||z - theta||^2 / (2 rho^2)``,
  which is ``m``-strongly convex with ``m >= 1/rho^2`` and ``M``-smooth with
  ``M <= L_s + 1/rho^2`` (``L_s = sup U'' ||X_s||_2^2``, from the family's
  :meth:`~pymc_sgs.families.Family.curvature_bound`: ``max_trials / 4`` for the
  logit link, ``max_trials`` for the probit link). :func:`sample_strongly_log_concave` draws it exactly with the
  rejection sampler of the paper's Proposition 3 (proof: Lemma 31), around an
  approximate minimiser found by gradient descent (Remark 4).

When no strong-convexity constant is available (a potential that is not
convex), :func:`mh_log_concave_step` moves ``z_s`` by independence
Metropolis–Hastings from the Laplace approximation instead, which keeps
``Pi_rho`` invariant but is not an exact draw.

References
----------
.. [1] M. Vono, D. Paulin, A. Doucet (2022). Efficient MCMC sampling with
   dimension-free convergence rate using ADMM-type splitting. JMLR 23,
   Proposition 3, Remark 4, Lemma 31 and Section 5.3.
.. [2] G. O. Roberts, J. S. Rosenthal (2004). General state space Markov
   chains and MCMC algorithms. Probability Surveys 1 (independence sampler).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from .conditionals import GaussianThetaConditional
from .kernel import SGSState
from .problem import SplitProblem

__all__ = [
    "RejectionDraw",
    "approximate_minimiser",
    "sample_strongly_log_concave",
    "mh_log_concave_step",
    "ShardInfo",
    "ShardKernel",
    "shard_smoothness",
    "validate_n_shards",
]

#: envelope choices of :func:`sample_strongly_log_concave`
ENVELOPES = ("paper", "tangent")


class RejectionDraw(NamedTuple):
    """One exact draw of a strongly log-concave density by rejection."""

    #: the accepted sample (d,)
    x: np.ndarray
    #: number of Gaussian proposals until acceptance (>= 1)
    n_proposals: int
    #: the approximate minimiser the envelope is built around (d,)
    x_tilde: np.ndarray
    #: gradient (or Newton) steps spent finding it
    n_grad_steps: int


def approximate_minimiser(
    grad_f: Callable,
    x0,
    m: float,
    M: float | None,
    *,
    grad_tol: float,
    max_steps: int = 200,
    hess_f: Callable | None = None,
):
    """Approximate minimiser of an ``m``-strongly convex, ``M``-smooth ``f`` (Remark 4).

    Gradient descent ``x_{k+1} = x_k - grad f(x_k) / M`` from ``x0``, stopped
    once ``||grad f(x_k)|| <= grad_tol``. The gradient norm shrinks at least by
    the factor ``1 - m / M`` per step, so at most
    ``log(||grad f(x0)|| / grad_tol) / log(1 / (1 - m/M))`` steps are needed.
    When ``M`` is unknown (``None`` or infinite, e.g. a Poisson potential),
    damped Newton steps with ``hess_f`` are used instead.

    Returns ``(x, grad, n_steps)``.
    """
    x = np.array(x0, dtype=float)
    g = grad_f(x)
    newton = M is None or not np.isfinite(M)
    if newton and hess_f is None:
        raise ValueError(
            "approximate_minimiser: without a smoothness constant M, hess_f is needed."
        )
    for k in range(max_steps):
        if np.linalg.norm(g) <= grad_tol:
            return x, g, k
        if newton:
            step = np.linalg.solve(hess_f(x), g)
            # ||grad|| must not grow: halve the step until it does not (convex f)
            norm0 = np.linalg.norm(g)
            for _ in range(30):
                x_new = x - step
                g_new = grad_f(x_new)
                if np.all(np.isfinite(g_new)) and np.linalg.norm(g_new) < norm0:
                    break
                step = step / 2
            x, g = x_new, g_new
        else:
            x = x - g / M
            g = grad_f(x)
    return x, g, max_steps


def _paper_gamma(g2: float, d: int, m: float) -> float:
    """The gamma of Lemma 31 (eq. 58): positive root of ``d gamma^2 + |g|^2 gamma - |g|^2 m``."""
    if g2 == 0.0:
        return 0.0
    return (-g2 + np.sqrt(g2 * g2 + 4.0 * d * m * g2)) / (2.0 * d)


def sample_strongly_log_concave(
    f: Callable,
    grad_f: Callable,
    m: float,
    M: float | None,
    x0,
    rng: np.random.Generator,
    *,
    n_grad_steps: int = 200,
    grad_tol: float | None = None,
    envelope: str = "paper",
    hess_f: Callable | None = None,
    max_proposals: int = 100_000,
) -> RejectionDraw:
    """Exact draw of ``p(x) ∝ exp(-f(x))``, ``f`` ``m``-strongly convex, by rejection.

    Proposition 3 / Lemma 31 of the paper: with ``x~`` an approximate
    minimiser (:func:`approximate_minimiser`, from ``x0``), ``g = grad f(x~)``
    and ``r = x - x~``, strong convexity and Cauchy–Schwarz give, for any
    ``gamma`` in ``[0, m)``::

        f(x) >= f(x~) + g^T r + m |r|^2 / 2 >= f(x~) - |g|^2 / (2 gamma) + (m - gamma) |r|^2 / 2,

    so ``exp(-f)`` lies below a Gaussian envelope ``N(x~, I / (m - gamma))``.
    A proposal is accepted with probability
    ``exp(-f(x) + f(x~) - |g|^2 / (2 gamma) + (m - gamma) |r|^2 / 2)``.
    ``gamma`` is the minimiser of the bound ``(M / (m - gamma))^(d/2) exp(|g|^2 / (2 gamma))``
    on the expected number of proposals (eq. 58); at the exact minimiser
    ``gamma = 0`` and the bound is ``(M / m)^(d/2)``.

    ``envelope="tangent"`` keeps the linear term instead of bounding it
    (proposal ``N(x~ - g / m, I / m)``, acceptance
    ``exp(-(f(x) - f(x~) - g^T r - m |r|^2 / 2))``): a pointwise tighter
    envelope, hence never more proposals on average.

    Parameters
    ----------
    f, grad_f : callable
        Potential and its gradient, on arrays of shape ``(d,)``.
    m : float
        Strong-convexity constant (``> 0``); the envelope is valid for any
        ``m`` at most the true one, which is all exactness needs.
    M : float or None
        Smoothness constant (gradient step ``1 / M``); ``None`` switches the
        minimiser search to damped Newton with ``hess_f``.
    x0 : ndarray
        Start of the minimiser search (the paper uses ``A_i theta``).
    rng : numpy.random.Generator
    n_grad_steps : int
        Cap on the minimiser search.
    grad_tol : float, optional
        Stop the search once ``||grad f|| <= grad_tol``. Default
        ``0.01 sqrt(m / d)``, which keeps the factor ``exp(|g|^2 / (2 gamma))``
        of the bound below ``exp(0.01)``.
    envelope : {"paper", "tangent"}
    hess_f : callable, optional
    max_proposals : int
        Guard against non-finite input: ``RuntimeError`` after this many.

    Returns
    -------
    RejectionDraw
    """
    if envelope not in ENVELOPES:
        raise ValueError(f"envelope must be one of {ENVELOPES}; received {envelope!r}.")
    if not (np.isfinite(m) and m > 0):
        raise ValueError(f"m (strong convexity) must be positive and finite; received {m!r}.")
    x0 = np.asarray(x0, dtype=float)
    d = x0.shape[0]
    if grad_tol is None:
        grad_tol = 0.01 * np.sqrt(m / d)
    xt, g, steps = approximate_minimiser(
        grad_f, x0, m, M, grad_tol=grad_tol, max_steps=n_grad_steps, hess_f=hess_f
    )
    f_t = float(f(xt))
    g2 = float(g @ g)
    if envelope == "paper":
        gamma = _paper_gamma(g2, d, m)
        prec = m - gamma
        mean = xt
        shift = f_t - (g2 / (2.0 * gamma) if gamma > 0 else 0.0)
    else:
        prec = m
        mean = xt - g / m
    sd = 1.0 / np.sqrt(prec)
    for k in range(1, max_proposals + 1):
        x = mean + sd * rng.standard_normal(d)
        r = x - xt
        if envelope == "paper":
            lower = shift + 0.5 * prec * float(r @ r)
        else:
            lower = f_t + float(g @ r) + 0.5 * m * float(r @ r)
        log_acc = min(0.0, lower - float(f(x)))  # <= 0 up to round-off
        if -rng.standard_exponential() <= log_acc:
            return RejectionDraw(x=x, n_proposals=k, x_tilde=xt, n_grad_steps=steps)
    raise RuntimeError(
        f"sample_strongly_log_concave: no proposal accepted in {max_proposals} tries "
        f"(|grad f(x~)| = {np.sqrt(g2):.3g}, m = {m:.3g}, M = {M!r}); the potential is probably "
        "not finite near its minimiser, or m overstates its strong convexity."
    )


def mh_log_concave_step(
    f: Callable,
    grad_f: Callable,
    hess_f: Callable,
    x,
    rng: np.random.Generator,
    *,
    n_steps: int = 5,
    x_start=None,
    max_newton: int = 50,
):
    """Independence Metropolis–Hastings from the Laplace approximation of ``exp(-f)``.

    The fallback of the z-step when no strong-convexity constant is known: the
    proposal is ``N(x*, H^{-1})`` with ``x*`` the (damped Newton) minimiser of
    ``f`` and ``H`` its Hessian there; each of ``n_steps`` proposals is
    accepted with probability ``min(1, p(x') q(x) / (p(x) q(x')))``. This
    leaves ``p`` invariant (so ``Pi_rho`` in the Gibbs sweep) but is not an
    independent draw.

    Returns ``(x, accept_rate, mode)``.
    """
    x = np.asarray(x, dtype=float).copy()
    start = x if x_start is None else np.asarray(x_start, dtype=float)
    mode, _, _ = approximate_minimiser(
        grad_f, start, 0.0, None, grad_tol=1e-10, max_steps=max_newton, hess_f=hess_f
    )
    H = hess_f(mode)
    C = np.linalg.cholesky(H)  # H = C C^T; proposal mode + C^{-T} eps

    def log_q(v):
        u = C.T @ (v - mode)
        return -0.5 * float(u @ u)

    d = x.shape[0]
    log_p_x = -float(f(x))
    log_q_x = log_q(x)
    acc = 0
    for _ in range(int(n_steps)):
        prop = mode + np.linalg.solve(C.T, rng.standard_normal(d))
        log_p_p = -float(f(prop))
        log_q_p = log_q(prop)
        log_r = (log_p_p - log_q_p) - (log_p_x - log_q_x)
        if np.log(rng.random()) < min(0.0, log_r):
            x, log_p_x, log_q_x = prop, log_p_p, log_q_p
            acc += 1
    return x, acc / max(int(n_steps), 1), mode


def validate_n_shards(n_shards, n: int | None = None) -> int:
    """Check ``n_shards``: a positive integer, at most the number of observations."""
    if isinstance(n_shards, bool) or not isinstance(n_shards, (int, np.integer)) or n_shards < 1:
        raise ValueError(
            f"n_shards must be a positive integer (the number of data shards b); "
            f"received {n_shards!r}."
        )
    if n is not None and n_shards > n:
        raise ValueError(
            f"n_shards must be at most the number of observations ({n}); received {n_shards}."
        )
    return int(n_shards)


def shard_smoothness(family, X_s, trials_s, y_s=None) -> float | None:
    """Upper bound ``L_s`` on the Hessian of the shard potential (None when unbounded).

    ``L_s = sup U'' ||X_s||_2^2`` with the family's
    :meth:`~pymc_sgs.families.Family.curvature_bound`: ``max(trials) / 4`` for the logit
    link, ``max(trials)`` for the probit link, ``1 / min sigma^2`` for the Normal family
    (split on purpose, ``trials`` carries sigma). None where ``U''`` is unbounded (Poisson:
    ``U'' = e^z``) or the family declares no bound; the minimiser search then takes Newton
    steps. The gradient steps ``1 / (L_s + 1 / rho^2)`` diverge when ``L_s`` understates the
    curvature, so the bound must hold for every ``z``.
    """
    if X_s.shape[0] == 0:
        return 0.0
    spec2 = float(np.linalg.norm(X_s, 2)) ** 2
    return family.curvature_bound(y_s, trials_s, spec2)


class ShardInfo(NamedTuple):
    """What one shard sweep reports (the fields step.py reads match :class:`SGSInfo`)."""

    #: mean number of Gaussian proposals per exact z_s draw (0.0 under the MH fallback)
    z_proposals: float
    #: mean acceptance rate of the MH fallback (1.0 for exact draws)
    z_accept: float
    #: importance weights are not available for shards (always nan)
    log_weight: float = float("nan")
    #: exact mode does not exist for shards (always nan)
    exact_accept: float = float("nan")
    #: proposals of every shard's draw in this sweep (b,)
    shard_proposals: np.ndarray | None = None
    #: minimiser-search steps of every shard in this sweep (b,)
    shard_grad_steps: np.ndarray | None = None


class ShardKernel:
    """Split Gibbs sampler with splitting strategy 2: one ``z_s in R^d`` per data shard.

    Same interface as :class:`pymc_sgs.SplitGibbsKernel` (``init``,
    ``sweep``, ``set_rho``, ``set_prior_precision``, ``set_sigmas``), for a
    :class:`SplitProblem` with exactly one split term. The rows are cut into
    ``n_shards`` contiguous shards of (near) equal size.

    Parameters
    ----------
    problem : SplitProblem
    rho : float
        Coupling, a positive scalar (same units as theta, since ``A_s = I``).
    n_shards : int
        Number of shards ``b``, between 1 and the number of observations.
    z_sampler : {"rejection", "mh"}
        ``"rejection"``: exact draws by :func:`sample_strongly_log_concave`
        (needs a convex potential). ``"mh"``: :func:`mh_log_concave_step`.
    envelope : {"paper", "tangent"}
        Envelope of the rejection sampler.
    n_grad_steps : int
        Cap on the gradient steps of the minimiser search (Remark 4).
    mh_steps : int
        Proposals per z_s update under ``z_sampler="mh"``.

    Notes
    -----
    The importance weight ``pi / pi_rho`` would need a d-dimensional Gaussian
    convolution of every shard potential, so it is not computed (``log_weight``
    is nan); ``rho="auto"`` and exact mode are therefore unavailable here.
    """

    def __init__(
        self,
        problem: SplitProblem,
        rho,
        n_shards: int,
        *,
        z_sampler: str = "rejection",
        envelope: str = "paper",
        n_grad_steps: int = 200,
        mh_steps: int = 5,
    ):
        if len(problem.split_terms) != 1:
            raise ValueError(
                "split='shards' needs exactly one split likelihood term (one family); the model "
                f"has {len(problem.split_terms)} ("
                + ", ".join(t.name for t in problem.split_terms)
                + "). Use split='observations' for this model."
            )
        if z_sampler not in ("rejection", "mh"):
            raise ValueError(f"z_sampler must be 'rejection' or 'mh'; received {z_sampler!r}.")
        if envelope not in ENVELOPES:
            raise ValueError(f"envelope must be one of {ENVELOPES}; received {envelope!r}.")
        self.problem = problem
        self.term = term = problem.split_terms[0]
        self.family = term.family
        if z_sampler == "rejection" and not self.family.log_concave:
            raise ValueError(
                f"z_sampler='rejection' needs a log-concave likelihood; {self.family!r} is not. "
                "Use z_sampler='mh'."
            )
        self.z_sampler = z_sampler
        self.envelope = envelope
        self.n_grad_steps = int(n_grad_steps)
        self.mh_steps = int(mh_steps)
        n, d = term.A.shape
        self.d = d
        #: number of data rows
        self.n = n
        self.b = validate_n_shards(n_shards, n)
        self.rho = self._validate_rho(rho)
        rows = np.array_split(np.arange(n), self.b)
        trials = None if term.trials is None else np.broadcast_to(term.trials, (n,))
        self.shards = [
            (
                np.ascontiguousarray(term.A[r], dtype=float),
                np.asarray(term.offset, float)[r],
                np.asarray(term.y, float)[r],
                None if trials is None else np.asarray(trials, float)[r],
            )
            for r in rows
        ]
        self.smoothness = np.array(
            [
                np.nan if (L := shard_smoothness(self.family, X, t, y)) is None else L
                for X, _, y, t in self.shards
            ]
        )
        stacked = np.tile(np.eye(d), (self.b, 1))
        self.theta_conditional = GaussianThetaConditional(
            problem.prior_precision,
            problem.prior_mean,
            stacked,
            np.zeros(self.b * d),
            self.rho,
            [(t.A, t.offset, t.y) for t in problem.gaussian_terms],
        )
        fixed = [t.sigma for t in problem.gaussian_terms]
        if problem.gaussian_terms and all(s is not None for s in fixed):
            self.theta_conditional.set_sigmas(fixed)

    @staticmethod
    def _validate_rho(rho) -> np.ndarray:
        if isinstance(rho, (str, bool)) or rho is None or np.ndim(rho) != 0:
            raise ValueError(
                f"rho must be a positive scalar with split='shards'; received {rho!r}."
            )
        r = float(rho)
        if not (np.isfinite(r) and r > 0):
            raise ValueError(f"rho must be positive and finite; received {rho!r}.")
        return np.asarray(r)

    # ------------------------------------------------------------ potentials
    def shard_potential(self, s: int):
        """``(U_s, grad U_s, hess U_s)`` of shard ``s`` as functions of ``z in R^d``."""
        X, off, y, tr = self.shards[s]
        fam = self.family

        def U(z):
            return float(np.sum(fam.potential(X @ z + off, y, tr)))

        def grad(z):
            return X.T @ fam.grad(X @ z + off, y, tr)

        def hess(z):
            return (X.T * fam.hess(X @ z + off, y, tr)) @ X

        return U, grad, hess

    def conditional(self, s: int, theta):
        """``(f, grad f, hess f)`` of ``z_s | theta``: ``U_s(z) + ||z - theta||^2 / (2 rho^2)``."""
        U, gU, hU = self.shard_potential(s)
        w = 1.0 / float(self.rho) ** 2
        eye = np.eye(self.d)

        def f(z):
            r = z - theta
            return U(z) + 0.5 * w * float(r @ r)

        return f, (lambda z: gU(z) + w * (z - theta)), (lambda z: hU(z) + w * eye)

    # --------------------------------------------------------------- kernel
    def set_rho(self, rho) -> None:
        """Change the coupling; refactors ``theta | z``."""
        self.rho = self._validate_rho(rho)
        self.theta_conditional.set_rho(self.rho)

    def set_prior_precision(self, prior_precision) -> None:
        """Current prior precision of theta (hierarchical scales updated elsewhere)."""
        self.theta_conditional.set_prior_precision(prior_precision)

    def set_sigmas(self, sigmas) -> None:
        """Current scales of the Gaussian terms whose sigma is not fixed."""
        self.theta_conditional.set_sigmas(sigmas)

    def sample_z(self, theta, z, rng: np.random.Generator):
        """Update every ``z_s`` given ``theta``; returns ``(z (b*d,), modes, ShardInfo)``."""
        theta = np.asarray(theta, dtype=float)
        d, w = self.d, 1.0 / float(self.rho) ** 2
        z_new = np.empty((self.b, d))
        modes = np.empty((self.b, d))
        props = np.zeros(self.b, dtype=int)
        steps = np.zeros(self.b, dtype=int)
        acc = np.ones(self.b)
        z_old = None if z is None else np.asarray(z, float).reshape(self.b, d)
        for s in range(self.b):
            f, gf, hf = self.conditional(s, theta)
            if self.z_sampler == "rejection":
                L = self.smoothness[s]
                draw = sample_strongly_log_concave(
                    f,
                    gf,
                    w,
                    None if np.isnan(L) else L + w,
                    theta,
                    rng,
                    n_grad_steps=self.n_grad_steps,
                    envelope=self.envelope,
                    hess_f=hf,
                )
                z_new[s], modes[s], props[s], steps[s] = (
                    draw.x,
                    draw.x_tilde,
                    draw.n_proposals,
                    draw.n_grad_steps,
                )
            else:
                start = theta if z_old is None else z_old[s]
                z_new[s], acc[s], modes[s] = mh_log_concave_step(
                    f, gf, hf, start, rng, n_steps=self.mh_steps, x_start=theta
                )
        exact = self.z_sampler == "rejection"
        info = ShardInfo(
            z_proposals=float(props.mean()) if exact else 0.0,
            z_accept=1.0 if exact else float(acc.mean()),
            shard_proposals=props,
            shard_grad_steps=steps,
        )
        return z_new.ravel(), modes.ravel(), info

    def init(self, theta, rng: np.random.Generator | None = None) -> SGSState:
        """State at ``theta``; with ``rng``, z is drawn from ``z | theta``."""
        theta = np.asarray(theta, dtype=float).copy()
        z0 = np.tile(theta, self.b)
        if rng is None:
            return SGSState(theta=theta, z=z0, z_mode=z0.copy())
        z, modes, _ = self.sample_z(theta, z0, rng)
        return SGSState(theta=theta, z=z, z_mode=modes)

    def sweep(self, state: SGSState, rng: np.random.Generator, weights=None):
        """One Gibbs sweep: every ``z_s | theta``, then ``theta | z``.

        ``weights`` is accepted for the kernel interface and ignored: shards have
        no importance weights (``log_weight`` is nan).
        """
        z, modes, info = self.sample_z(state.theta, state.z, rng)
        theta = self.theta_conditional.sample(z, rng)
        return SGSState(theta=theta, z=z, z_mode=modes), info
