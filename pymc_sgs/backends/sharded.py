"""The split Gibbs kernel over row shards: theta on the caller, z with the data.

:class:`ShardedKernel` has the interface of
:class:`~pymc_sgs.kernel.SplitGibbsKernel` (``init``, ``sweep``,
``exact_step``, ``log_weight``, ``set_rho``, ``set_prior_precision``,
``set_sigmas``), so :class:`~pymc_sgs.step.SplitGibbs` drives either one. The
theta-step (a d x d Cholesky solve) runs here; every z-update is sent to the
shards, which return ``A_s^T ((z_s - o_s) / rho^2)`` and a few scalars. The
states it returns hold ``theta``, ``atz`` and ``log_weight``; their ``z`` and
``z_mode`` are a :class:`ShardedZ` handle to the state kept by the shards.

Randomness: the theta-step, the z-first coin of exact mode and its MH test
use the step's Generator; each shard has its own Generator, seeded at the
chain's start from numbers drawn from the step's Generator. The same seed
therefore gives the same draws whatever carries the shards (in-process or
Dask workers), for the same number of shards.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np

from ..conditionals import GaussianThetaConditional
from ..kernel import SGSInfo, SGSState, exact_proposal, mh_accept, validate_alpha
from ..shift import ShiftMove, mean_offset_from_rhs
from ..start import kernel_neg_log_posterior
from ..weights import N_NODES

__all__ = ["ShardedKernel", "ShardedZ", "ShardLostError", "ReducedThetaConditional",
           "ShardedShiftMove"]


class ShardLostError(RuntimeError):
    """A shard's z-state is gone (its worker died); the chain cannot continue correctly."""


class ShardedZ(NamedTuple):
    """Handle to the z-block kept by the shards (stands for ``z`` and ``z_mode``)."""

    kernel_id: int
    generation: int


class ReducedThetaConditional(GaussianThetaConditional):
    """``theta | z`` when the split rows live elsewhere: only ``A^T A`` is held here.

    The data part of the precision is ``A^T A / rho^2`` (scalar rho), reduced
    from the shards once; the data part of the linear term arrives with every
    sweep from the shards.
    """

    def __init__(self, prior_precision, prior_mean, split_gram, rho, gaussian_terms=()):
        self._reduced_gram = np.asarray(split_gram, dtype=float)
        d = self._reduced_gram.shape[0]
        super().__init__(prior_precision, prior_mean, np.zeros((0, d)), np.zeros(0), rho,
                         gaussian_terms)

    def _set_split_precision(self, rho) -> None:
        rho = np.asarray(rho, dtype=float)
        if rho.ndim != 0:
            raise ValueError(
                f"rho must be a scalar with a sharded back end; received an array of shape "
                f"{rho.shape}."
            )
        self.rho = rho
        # kept as for a scalar rho in one process: the shift move's centre and its update of
        # A^T z read A^T A (residual_projection, split_rhs_change)
        self._scalar_rho = float(rho)
        self._split_gram = self._reduced_gram
        self._split_precision = self._reduced_gram / float(rho) ** 2

    def split_rhs(self, z):  # noqa: D102 - the rows are on the shards
        raise RuntimeError("the split rows are held by the shards; use their split_rhs sums")


class ShardedKernel:
    """:class:`~pymc_sgs.kernel.SplitGibbsKernel` with the z-block on row shards.

    Parameters
    ----------
    problem : SplitProblem
        The full problem as detected from the model (prior, Gaussian terms,
        coefficient layout); its split rows are not used here.
    transport : object
        Runs a method on every shard: ``transport.call(name, args_per_shard)``
        returns the results in shard order; ``transport.summaries()`` gives
        every shard's ``(n_rows, A^T A)``.
    rho : float
        Scalar coupling.
    alpha, log_weights
        As for :class:`~pymc_sgs.kernel.SplitGibbsKernel`.
    """

    _ids = itertools.count()
    #: the theta-step factorises a d x d precision (what the Laplace start needs)
    theta_solver = "cholesky"

    def __init__(self, problem, transport, rho, alpha: float = 0.0, log_weights: bool = False,
                 n_nodes: int = N_NODES):
        self.problem = problem
        self.transport = transport
        self.alpha = validate_alpha(alpha)
        self.log_weights = bool(log_weights)
        self.n_nodes = int(n_nodes)
        summaries = transport.summaries()
        self.n_shards = len(summaries)
        self.shard_rows = [int(n) for n, _ in summaries]
        self.n = sum(self.shard_rows)
        gram = np.sum([g for _, g in summaries], axis=0)
        self.rho = _scalar_rho(rho)
        self.theta_conditional = ReducedThetaConditional(
            problem.prior_precision, problem.prior_mean, gram, self.rho,
            [(t.A, t.offset, t.y) for t in problem.gaussian_terms],
        )
        fixed = [t.sigma for t in problem.gaussian_terms]
        if problem.gaussian_terms and all(s is not None for s in fixed):
            self.theta_conditional.set_sigmas(fixed)
        self._id = next(self._ids)
        self._generation = 0
        self._handle = None
        # calls whose results are not needed, sent with the next call (one round trip)
        self._deferred = []

    @property
    def families(self):
        """The split terms' families (fixed: a sharded kernel has no nuisance families)."""
        return [t.family for t in self.problem.split_terms]

    def neg_log_posterior(self):
        """``f(theta) -> (value, gradient, Hessian)`` of the negative log posterior.

        The prior and the Gaussian terms here; each shard adds its split rows
        (:meth:`ShardWorker.laplace_terms`), summed in shard order.
        """
        local = kernel_neg_log_posterior(self, include_split=False)

        def f(theta, need_derivatives=True):
            val, grad, hess = local(theta, need_derivatives)
            for v, g, h in self._broadcast("laplace_terms", theta, need_derivatives):
                val += v
                if need_derivatives:
                    grad, hess = grad + g, hess + h
            return float(val), grad, hess

        return f

    def log_weight_var_parts(self, mode, chol, rho):
        """``(g, W)`` of :func:`pymc_sgs.rho.laplace_log_weight_var`, summed over the shards."""
        parts = self._broadcast("log_weight_var_parts", mode, chol, float(rho))
        return np.sum([p[0] for p in parts], axis=0), np.sum([p[1] for p in parts], axis=0)

    def design_scale(self) -> np.ndarray:
        """``sum_i a_ij^2`` per coefficient (the diagonal of the reduced ``A^T A``)."""
        return np.diagonal(self.theta_conditional._reduced_gram).copy()

    # ------------------------------------------------------------ parameters
    def set_rho(self, rho) -> None:
        """New coupling: refactor here; the shards pick it up with the next call."""
        self.rho = _scalar_rho(rho)
        self.theta_conditional.set_rho(self.rho)

    def set_prior_precision(self, prior_precision) -> None:
        """Current prior precision of theta (the theta-step runs here, no communication)."""
        self.theta_conditional.set_prior_precision(prior_precision)

    def set_sigmas(self, sigmas) -> None:
        """Current scales of the Gaussian terms (kept here, not sharded)."""
        self.theta_conditional.set_sigmas(sigmas)

    # ----------------------------------------------------------------- state
    def _new_handle(self) -> ShardedZ:
        self._generation += 1
        self._handle = ShardedZ(self._id, self._generation)
        return self._handle

    def _check_handle(self, state: SGSState) -> None:
        if state.z != self._handle:
            raise RuntimeError(
                "this state's z-block is not the one the shards hold (a state from another "
                "chain or an older step); start the chain again with init()."
            )

    def _rho(self) -> float:
        return float(self.rho)

    def init(self, theta, rng: np.random.Generator | None = None) -> SGSState:
        """Start a chain: seed every shard from ``rng`` and draw its z from ``z | theta``."""
        if rng is None:
            raise ValueError("a sharded kernel needs the chain's Generator to seed its shards.")
        theta = np.asarray(theta, dtype=float).copy()
        entropy = rng.integers(0, 2**63, size=4)
        seeds = np.random.SeedSequence(entropy).spawn(self.n_shards)
        parts = self._call("start", [(s, theta, self._rho()) for s in seeds])
        handle = self._new_handle()
        return SGSState(theta=theta, z=handle, z_mode=handle, atz=np.sum(parts, axis=0))

    def _call(self, name, args_per_shard):
        if not self._deferred:
            return self.transport.call(name, args_per_shard)
        # the deferred calls ride along: every shard runs them, then this one
        deferred, self._deferred = self._deferred, []
        return self.transport.call(
            "batch", [(deferred + [(name, args)],) for args in args_per_shard]
        )

    def _broadcast(self, name, *args):
        return self._call(name, [args] * self.n_shards)

    def _defer(self, name, *args):
        """Queue ``name(*args)`` on every shard, to run before the next call's method.

        For calls whose results the client does not need (committing an accepted shift
        move): they cost no round trip of their own.
        """
        self._deferred.append((name, args))

    def _atz(self, state):
        if state.atz is not None:
            return state.atz
        return np.sum(self._broadcast("split_rhs", self._rho()), axis=0)

    def log_weight(self, theta, keep_modes: bool = False) -> float:
        """``log pi(theta) - log pi_rho(theta)`` up to a constant, summed over shards."""
        theta = np.asarray(theta, dtype=float)
        return float(np.sum(self._broadcast("log_weight", theta, self._rho(), keep_modes)))

    def _z_update(self, theta, checkpoint=False):
        """z-block update at theta: ``(atz, proposals_per_draw, accept_prob)``."""
        if self.alpha == 0.0:
            parts = self._broadcast("sample_z", theta, self._rho(), checkpoint)
            atz = np.sum([p[0] for p in parts], axis=0)
            return atz, sum(p[1] for p in parts) / self.n, 1.0
        parts = self._broadcast("z_pass", theta, self._rho(), False, checkpoint)
        atz = np.sum([p[0] for p in parts], axis=0)
        return atz, 0.0, sum(p[1] for p in parts) / self.n

    # ---------------------------------------------------------------- moves
    def sweep(self, state: SGSState, rng: np.random.Generator, weights: bool | None = None):
        """One Gibbs sweep, in the same order as :meth:`SplitGibbsKernel.sweep`."""
        self._check_handle(state)
        log_weights = self.log_weights if weights is None else bool(weights)
        cond = self.theta_conditional
        if self.alpha == 0.0:
            atz, props, _ = self._z_update(state.theta)
            info = SGSInfo(z_proposals=props, z_accept=1.0)
            theta = cond.sample_from_rhs(atz, rng)
            log_w = float("nan")
            if log_weights:
                log_w = self.log_weight(theta, keep_modes=True)
                info = info._replace(log_weight=log_w)
            handle = self._new_handle()
            return SGSState(theta=theta, z=handle, z_mode=handle, log_weight=log_w, atz=atz), info
        theta = cond.sample_from_rhs(self._atz(state), rng, theta=state.theta, alpha=self.alpha)
        parts = self._broadcast("z_pass", theta, self._rho(), log_weights)
        atz = np.sum([p[0] for p in parts], axis=0)
        acc = sum(p[1] for p in parts) / self.n
        log_w = float(sum(p[2] for p in parts)) if log_weights else float("nan")
        info = SGSInfo(z_proposals=0.0, z_accept=acc, log_weight=log_w)
        handle = self._new_handle()
        return SGSState(theta=theta, z=handle, z_mode=handle, log_weight=log_w, atz=atz), info

    def exact_step(self, state: SGSState, rng: np.random.Generator, n_sweeps: int = 1):
        """MH step targeting pi, as :meth:`SplitGibbsKernel.exact_step`.

        The shards save their z before the proposal and go back to it when the
        proposal is rejected.
        """
        self._check_handle(state)
        log_w0 = state.log_weight
        if not np.isfinite(log_w0):
            log_w0 = self.log_weight(state.theta)
        theta, atz, props, accs = exact_proposal(
            state.theta, self._atz(state),
            lambda theta, k: self._z_update(theta, checkpoint=k == 0),
            self.theta_conditional.sample_from_rhs, self.alpha, rng, n_sweeps,
        )
        log_w1 = self.log_weight(theta, keep_modes=True)
        accept_prob, accepted = mh_accept(log_w0, log_w1, rng)
        info = SGSInfo(z_proposals=props, z_accept=accs, exact_accept=accept_prob,
                       log_weight=log_w1 if accepted else log_w0)
        if accepted:
            handle = self._new_handle()
            return SGSState(theta=theta, z=handle, z_mode=handle, log_weight=log_w1, atz=atz), info
        self._broadcast("restore")
        return state._replace(log_weight=log_w0), info


def _scalar_rho(rho) -> np.ndarray:
    arr = np.asarray(rho, dtype=float)
    if arr.ndim != 0:
        raise ValueError(
            "rho must be a scalar or 'auto' with a sharded back end (the rows live on the "
            f"shards); received an array of shape {arr.shape}."
        )
    if not np.isfinite(arr) or arr <= 0:
        raise ValueError(f"rho must be positive and finite; received {float(arr)!r}.")
    return arr


class ShardedShiftMove(ShiftMove):
    """:class:`~pymc_sgs.shift.ShiftMove` whose passes over the rows run on the shards.

    The proposal, its reference Gaussian and the MH test run here with the step's
    Generator, exactly as in one process; a proposed ``delta`` is broadcast, every shard
    returns its part of ``sum_i [U_i(z_i + a_i^T delta) - U_i(z_i)]`` and keeps the moved
    z until the decision, and an accepted move is committed on every shard. The constants
    (mean curvature, first-order mean) are sums over the shards, computed once.
    """

    def _setup(self):
        if self._mean_curvature is None:
            parts = self.kernel._broadcast("shift_setup", np.asarray(self.mean, dtype=float),
                                           self.chol)
            self._mean_curvature = sum(p[0] for p in parts) / max(sum(p[1] for p in parts), 1)
            self._offset_rhs = np.sum([p[2] for p in parts], axis=0)

    def mean_curvature(self) -> float:
        self._setup()
        return self._mean_curvature

    def _compute_mean_offset(self) -> np.ndarray:
        self._setup()
        return mean_offset_from_rhs(self._offset_rhs, self.chol)

    def _split_change(self, z, delta):
        return float(np.sum(self.kernel._broadcast("shift_propose", delta))), None, None

    def _accepted(self, state, prop, delta, z_prop, a_delta):
        # z stays consistent for whatever the shards do next: the commit runs first
        self.kernel._defer("shift_commit")
        atz = None  # unknown (rho changed): the next sweep asks the shards again
        if state.atz is not None:
            atz = state.atz + self.kernel.theta_conditional.split_rhs_change(delta, None)
        handle = self.kernel._new_handle()
        return state._replace(theta=prop, z=handle, z_mode=handle, log_weight=float("nan"),
                              atz=atz)
