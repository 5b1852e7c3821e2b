"""The split Gibbs kernel: pure functions of arrays, no PyMC inside.

In the style of BlackJAX, a kernel has an ``init`` that builds a
:class:`SGSState` from a coefficient vector and a ``sweep`` that maps a state
and a :class:`numpy.random.Generator` to a new state and an :class:`SGSInfo`.
One sweep is one pass of Algorithm 1 of Vono, Paulin & Doucet (2022): every
``z_i | theta`` (exact, independent across rows), then ``theta | z``.

The kernel holds the theta-step; the split rows are a :class:`~pymc_sgs.rows.RowBlock`
(in this process, :class:`~pymc_sgs.rows.LocalRows`; on row shards,
:class:`~pymc_sgs.backends.sharded.ShardedRows`), so the sweep, the exact-mode step, the
Laplace start and the shift move are written once for both. The PyMC step
(:mod:`pymc_sgs.step`) is a thin adapter around this code.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .conditionals import GaussianThetaConditional
from .problem import SplitProblem
from .rows import RHO_RANGE, Z_BLOCK, LocalRows, MoveDropped, validate_rho
from .start import add_gaussian_terms, prior_terms
from .theta_cg import CGThetaConditional
from .validate import check_real
from .weights import N_NODES

__all__ = [
    "SGSState",
    "SGSInfo",
    "SplitGibbsKernel",
    "validate_rho",
    "validate_alpha",
    "validate_theta_solver",
    "RHO_RANGE",
    "Z_BLOCK",
]


class SGSState(NamedTuple):
    """State of one chain."""

    #: coefficients (d,)
    theta: np.ndarray
    #: split auxiliary variables, one per split row (n,)
    z: np.ndarray
    #: modes of z_i | theta from the last sweep, to warm-start Newton (n,)
    z_mode: np.ndarray
    #: log importance weight at theta, when known
    log_weight: float = float("nan")
    #: A^T ((z - o) / rho^2), the data part of theta | z (None: recompute from z)
    atz: np.ndarray | None = None


class SGSInfo(NamedTuple):
    """What one sweep reports (becomes PyMC sampler stats)."""

    #: mean number of Gaussian proposals per exact z_i draw (1.0 = no rejection;
    #: 0.0 when z was moved by over-relaxed MH instead)
    z_proposals: float
    #: mean MH acceptance probability of the over-relaxed z-moves (1.0 for exact draws)
    z_accept: float
    #: log pi(theta) - log pi_rho(theta) + const at the new theta (nan if not computed)
    log_weight: float = float("nan")
    #: exact mode: MH acceptance probability of the pi-correction (nan otherwise)
    exact_accept: float = float("nan")


#: above this many coefficients, theta_solver="auto" avoids forming the d x d precision
CG_MIN_D = 2000


def validate_theta_solver(theta_solver) -> str:
    """Check ``theta_solver`` is one of ``"auto"``, ``"cholesky"``, ``"cg"``."""
    if not isinstance(theta_solver, str) or theta_solver not in ("auto", "cholesky", "cg"):
        raise ValueError(
            f"theta_solver must be 'auto', 'cholesky' or 'cg'; received {theta_solver!r}."
        )
    return theta_solver


def validate_alpha(alpha) -> float:
    """Check the over-relaxation parameter: a number in (-1, 1)."""
    a = check_real("alpha", alpha, expected="a number in (-1, 1)")
    if not (-1.0 < a < 1.0):
        raise ValueError(f"alpha must be a number in (-1, 1); received {alpha!r}.")
    return a


class SplitGibbsKernel:
    """Exact split Gibbs sampler (Algorithm 1) for a :class:`SplitProblem`.

    Parameters
    ----------
    problem : SplitProblem
    rho : float or ndarray
        Coupling between ``z`` and ``A theta``: scalar or one value per split
        row. Smaller rho means less bias and slower mixing.
    alpha : float
        Over-relaxation of both blocks, in ``(-1, 1)``. ``0`` is plain SGS
        (exact z draws by rejection, exact theta draws); a negative value
        over-relaxes theta (Adler) and moves z by over-relaxed MH around the
        Laplace approximation of ``z | theta``. Every update is reversible for
        its own conditional, so ``Pi_rho`` stays invariant for any alpha.
    log_weights : bool
        Compute the importance weight ``log pi(theta) - log pi_rho(theta)`` of
        every new theta (adaptive Gauss–Hermite, :mod:`pymc_sgs.weights`);
        costs about ``n_nodes`` evaluations of the likelihood per sweep.
    n_nodes : int
        Quadrature nodes for the weights.
    engine : {"auto", "numba", "numpy"}
        How the over-relaxed z-block is computed: ``"numba"`` fuses the
        predictor, the z-move, the weights and ``A^T z`` into one compiled pass
        over the rows (:mod:`pymc_sgs.fused`); ``"numpy"`` is the vectorised
        reference path. ``"auto"`` picks numba when every split family has a
        compiled form (the kinked terms of :mod:`pymc_sgs.nonsmooth` are
        numpy closed forms in either engine). Both consume the same random
        numbers in the same order.
    theta_solver : {"auto", "cholesky", "cg"}
        How ``theta | z`` is drawn: ``"cholesky"`` factors the d x d precision
        once (:class:`~pymc_sgs.conditionals.GaussianThetaConditional`);
        ``"cg"`` solves one perturbed system per sweep by conjugate gradients
        without forming it (:class:`~pymc_sgs.theta_cg.CGThetaConditional`),
        for large d or a :mod:`scipy.sparse` design. ``"auto"`` picks ``"cg"``
        when the design is sparse or ``d > 2000``.
    dtype : {"float64", "float32"}
        Storage of the design for the compiled pass. ``"float32"`` halves the
        bytes read per sweep (the arithmetic and the accumulation of
        ``A^T z`` stay in float64); the theta-step keeps the float64 design.

    Notes
    -----
    The precision of ``theta | z`` is factored here, once. Gaussian terms whose
    ``sigma`` is supplied per sweep trigger a refactorisation only when the
    value changes. The split rows are :attr:`rows` (a :class:`~pymc_sgs.rows.RowBlock`);
    :class:`~pymc_sgs.backends.sharded.ShardedKernel` is this kernel over row shards.
    """

    def __init__(
        self,
        problem: SplitProblem,
        rho,
        alpha: float = 0.0,
        log_weights: bool = False,
        n_nodes: int = N_NODES,
        engine: str = "auto",
        theta_solver: str = "auto",
        dtype: str = "float64",
    ):
        alpha = validate_alpha(alpha)
        n = problem.n_split
        validate_rho(rho, n)
        self.theta_solver = validate_theta_solver(theta_solver)
        if dtype not in ("float64", "float32"):
            raise ValueError(f"dtype must be 'float64' or 'float32'; received {dtype!r}.")
        if engine not in ("auto", "numba", "numpy"):
            raise ValueError(f"engine must be 'auto', 'numba' or 'numpy'; received {engine!r}.")
        rows = LocalRows(problem, rho, alpha, n_nodes=n_nodes, engine=engine, dtype=dtype)
        if self.theta_solver == "auto":
            self.theta_solver = "cg" if rows.sparse or problem.d > CG_MIN_D else "cholesky"
        if rows.sparse and self.theta_solver == "cholesky":
            raise ValueError(
                "theta_solver='cholesky' needs a dense design; received a scipy.sparse design. "
                "Use theta_solver='cg' (or 'auto')."
            )
        conditional = CGThetaConditional if self.theta_solver == "cg" else GaussianThetaConditional
        theta_conditional = conditional(
            problem.prior_precision,
            problem.prior_mean,
            rows.design,
            rows.offset,
            rows.rho,
            [(t.A, t.offset, t.y) for t in problem.gaussian_terms],
        )
        self.dtype = dtype
        self._build(problem, rows, theta_conditional, alpha, log_weights, n_nodes)

    def _build(self, problem, rows, theta_conditional, alpha, log_weights, n_nodes) -> None:
        """Attributes shared with the subclasses, which hold their rows elsewhere."""
        self.problem = problem
        self.rows = rows
        self.theta_conditional = theta_conditional
        self.alpha = alpha
        self.log_weights = bool(log_weights)
        self.n_nodes = int(n_nodes)
        fixed = [t.sigma for t in problem.gaussian_terms]
        if problem.gaussian_terms and all(s is not None for s in fixed):
            self.theta_conditional.set_sigmas(fixed)

    # ------------------------------------------------------------ parameters
    @property
    def n(self) -> int:
        """Number of split rows."""
        return self.rows.n

    @property
    def rho(self) -> np.ndarray:
        """Current coupling."""
        return self.rows.rho

    @property
    def families(self) -> list:
        """The split terms' current families."""
        return self.rows.families

    @property
    def engine(self) -> str:
        """How the rows are passed over: ``"numba"``, ``"numpy"`` or ``"shards"``."""
        return self.rows.engine

    def set_rho(self, rho) -> None:
        """Change the coupling (e.g. while tuning it); refactors ``theta | z``."""
        self.rows.set_rho(rho)
        self.theta_conditional.set_rho(self.rows.rho)

    def set_prior_precision(self, prior_precision) -> None:
        """Current prior precision of theta (hierarchical scales updated elsewhere)."""
        self.theta_conditional.set_prior_precision(prior_precision)

    def set_sigmas(self, sigmas) -> None:
        """Current scales of the Gaussian terms whose sigma is not fixed."""
        self.theta_conditional.set_sigmas(sigmas)

    # ---------------------------------------------------------------- target
    def neg_log_posterior(self, include_split: bool = True):
        """``f(theta, need_derivatives=True) -> (value, gradient, Hessian)`` of the negative
        log posterior at the current families, prior and Normal scales.

        Summed in the order prior, split rows, Normal terms (see
        :func:`pymc_sgs.start.neg_log_posterior`). ``include_split=False`` leaves out the
        split likelihood terms (the shift move evaluates them at z, not at ``A theta + o``).
        """
        cond = self.theta_conditional
        P = np.asarray(cond._prior_precision, dtype=float)
        m = np.asarray(cond._prior_mean, dtype=float)
        gaussian = [(A, resid, s) for (A, resid, *_), s in zip(cond._gaussian, cond._sigmas or ())]
        rows = self.rows

        def f(theta, need_derivatives=True):
            parts = prior_terms(P, m, theta, need_derivatives)
            if include_split:
                parts = rows.add_laplace_terms(theta, *parts, need_derivatives)
            val, grad, hess = add_gaussian_terms(gaussian, theta, *parts, need_derivatives)
            return float(val), grad, hess

        return f

    def log_weight(self, theta, z_mode=None):
        """``(log pi(theta) - log pi_rho(theta) + const, modes of z | theta)``."""
        return self.rows.log_weight(np.asarray(theta, dtype=float), z_mode)

    # ----------------------------------------------------------------- moves
    def init(self, theta, rng: np.random.Generator | None = None) -> SGSState:
        """State at coefficients ``theta``; with ``rng``, z is an exact draw of ``z | theta``."""
        theta = np.asarray(theta, dtype=float).copy()
        self.rows.begin_chain()
        z, z_mode, atz = self.rows.start(theta, rng)
        return SGSState(theta=theta, z=z, z_mode=z_mode, atz=atz)

    def _atz(self, state) -> np.ndarray:
        """The state's ``A^T ((z - o) / rho^2)``, from the rows when not kept."""
        return state.atz if state.atz is not None else self.rows.split_rhs(state.z)

    def sweep(self, state: SGSState, rng: np.random.Generator, weights: bool | None = None):
        """One Gibbs sweep of the split model.

        ``weights`` overrides ``log_weights`` for this sweep (the step skips
        them on thinned draws); it does not change the random numbers used.

        ``alpha = 0`` (plain SGS): exact ``z | theta`` by rejection, then
        ``theta | z``. Otherwise: over-relaxed ``theta | z``, then the
        over-relaxed z-move at the new theta in one pass over the data that
        also yields the new theta's importance weight and ``A^T z`` for the
        next sweep (the same Gibbs scan, started at the other block).
        """
        weights = self.log_weights if weights is None else bool(weights)
        rows, cond = self.rows, self.theta_conditional
        if rows.n == 0:
            # no split terms: theta | sigma is the exact posterior, drawn independently
            theta = cond.sample_from_rhs(np.zeros(self.problem.d), rng)
            log_w = 0.0 if weights else float("nan")
            info = SGSInfo(z_proposals=0.0, z_accept=1.0, log_weight=log_w)
            return state._replace(theta=theta, log_weight=log_w), info
        rows.track(state)
        rows.begin_draw("sweep")
        log_w = float("nan")
        if self.alpha == 0.0:
            z, mode, n_prop, acc, atz = rows.sample_z(state.theta, state.z, state.z_mode, rng)
            info = SGSInfo(z_proposals=n_prop, z_accept=acc)
            # A^T z of the new z stays valid after theta | z: kept for the shift move's centre
            theta = cond.sample_from_rhs(atz, rng)
            if weights:
                redrawn = rows.regenerations
                # z was drawn given state.theta and theta given z: rows lost here have their
                # z drawn at the new theta, which makes their part of atz stale
                log_w, mode = rows.log_weight(theta, mode, keep_modes=True, at=theta)
                if rows.regenerations != redrawn:
                    atz = None
                info = info._replace(log_weight=log_w)
        else:
            theta = cond.sample_from_rhs(self._atz(state), rng, theta=state.theta, alpha=self.alpha)
            # theta was drawn given the z from before any loss; the z-update is at the new
            # theta, so lost rows have their z drawn there and their pass repeated
            z, mode, acc, log_w, atz = rows.z_pass(
                theta, state.z, state.z_mode, rng, weights, at=theta
            )
            info = SGSInfo(z_proposals=0.0, z_accept=acc, log_weight=log_w)
        z, mode = rows.hold(theta, z, mode)
        return SGSState(theta=theta, z=z, z_mode=mode, log_weight=log_w, atz=atz), info

    def exact_step(self, state: SGSState, rng: np.random.Generator, n_sweeps: int = 1):
        """One Metropolis-Hastings step that targets pi itself (not pi_rho).

        The proposal runs ``n_sweeps`` sweeps of the split model, either all in
        the order (z, theta) or all in the order (theta, z), each with
        probability 1/2. With Z and T the two updates (each reversible for
        ``Pi_rho``), the adjoint of ``(Z T)^K`` is ``(T Z)^K``, so the 50/50
        mixture is ``Pi_rho``-reversible on ``(theta, z)``; accepting with
        probability ``min(1, w(theta') / w(theta))`` therefore makes the chain
        target ``Pi_rho(theta, z) w(theta)``, whose theta-marginal is exactly
        ``pi``. Within the K sweeps the updates alternate as in the plain
        over-relaxed sampler, which keeps its fast, persistent moves (a
        palindromic ``Z T Z`` proposal would apply two over-relaxed z-moves in
        a row, which nearly cancel).

        Rows that hold their z elsewhere save it before the proposal and go back to it
        when the proposal is rejected; a loss of rows during the step drops the step
        (:meth:`dropped`).
        """
        rows = self.rows
        if rows.n == 0:
            return self.sweep(state, rng)
        rows.track(state)
        rows.begin_draw("sweep")
        log_w0 = state.log_weight
        zs = {"z": state.z, "mode": state.z_mode}
        checkpointed = False

        def z_update(theta, k):
            nonlocal checkpointed
            checkpointed = checkpointed or k == 0
            if self.alpha == 0.0:
                zs["z"], zs["mode"], p, a, atz = rows.sample_z(
                    theta, zs["z"], zs["mode"], rng, checkpoint=k == 0
                )
                return atz, p, a
            zs["z"], zs["mode"], a, _, atz = rows.z_pass(
                theta, zs["z"], zs["mode"], rng, False, checkpoint=k == 0
            )
            return atz, 0.0, a

        try:
            with rows.dropping_moves():
                if not np.isfinite(log_w0):
                    log_w0, _ = rows.log_weight(state.theta, state.z_mode)
                theta, atz, props, accs = exact_proposal(
                    state.theta,
                    self._atz(state),
                    z_update,
                    self.theta_conditional.sample_from_rhs,
                    self.alpha,
                    rng,
                    n_sweeps,
                )
                log_w1, mode1 = rows.log_weight(theta, zs["mode"], keep_modes=True)
                accept_prob, accepted = mh_accept(log_w0, log_w1, rng)
                info = SGSInfo(
                    z_proposals=props,
                    z_accept=accs,
                    exact_accept=accept_prob,
                    log_weight=log_w1 if accepted else log_w0,
                )
                if accepted:
                    z, mode = rows.hold(theta, zs["z"], mode1)
                    return SGSState(theta=theta, z=z, z_mode=mode, log_weight=log_w1, atz=atz), info
                rows.restore()
                return state._replace(log_weight=log_w0), info
        except MoveDropped:
            pass
        if checkpointed:
            # a loss in this call is handled by redrawing at state.theta: restore() right
            # after a (re)start keeps that draw
            rows.restore()
        nan = float("nan")
        return self.dropped(state, log_w0), SGSInfo(
            z_proposals=nan, z_accept=nan, log_weight=log_w0
        )

    def dropped(self, state, log_weight):
        """The state after a move dropped for lost rows: same theta, the lost rows' z drawn
        there, ``A^T z`` unknown (the next sweep asks the rows)."""
        z, mode = self.rows.hold(state.theta, state.z, state.z_mode)
        return state._replace(z=z, z_mode=mode, atz=None, log_weight=log_weight)


def exact_proposal(theta, atz, z_update, draw_theta, alpha, rng, n_sweeps):
    """The proposal of the exact mode: ``n_sweeps`` sweeps, all (z, theta) or all (theta, z).

    The order is drawn first (probability 1/2 each), which makes the proposal
    ``Pi_rho``-reversible (see :meth:`SplitGibbsKernel.exact_step`).
    ``z_update(theta, k)`` moves the z-block at ``theta`` in sweep ``k`` and
    returns ``(A^T (z - o) / rho^2, proposals per draw, acceptance)``;
    ``draw_theta(atz, rng, theta=, alpha=)`` is the over-relaxed theta-step.
    Shared by the in-process kernel and the sharded back ends.

    Returns ``(theta, atz, mean proposals per z-draw, mean z acceptance)``.
    """
    props, accs = [], []
    z_first = rng.random() < 0.5
    for k in range(int(n_sweeps)):
        if not z_first:
            theta = draw_theta(atz, rng, theta=theta, alpha=alpha)
        atz, p, a = z_update(theta, k)
        if z_first:
            theta = draw_theta(atz, rng, theta=theta, alpha=alpha)
        props.append(p)
        accs.append(a)
    return theta, atz, float(np.mean(props)), float(np.mean(accs))


def mh_accept(log_w0: float, log_w1: float, rng: np.random.Generator):
    """Accept ``w1 / w0`` (log scale) by Metropolis–Hastings: ``(probability, accepted)``."""
    accept_prob = float(np.exp(min(0.0, log_w1 - log_w0)))
    return accept_prob, bool(rng.random() < accept_prob)
