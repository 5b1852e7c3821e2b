"""The split Gibbs kernel over row shards: theta on the caller, z with the data.

:class:`ShardedRows` is the :class:`~pymc_sgs.rows.RowBlock` of rows cut into shards that
keep their ``z`` where their data are, reached through a transport (in-process or Dask
workers, :mod:`pymc_sgs.backends`); :class:`ShardedKernel` is
:class:`~pymc_sgs.kernel.SplitGibbsKernel` over those rows. The theta-step (a d x d Cholesky
solve) runs here; every z-update is sent to the shards, which return
``A_s^T ((z_s - o_s) / rho^2)`` and a few scalars. The states the kernel returns hold
``theta``, ``atz`` and ``log_weight``; their ``z`` and ``z_mode`` are a :class:`ShardedZ`
handle to the state kept by the shards.

Randomness: the theta-step, the z-first coin of exact mode and its MH test
use the step's Generator; each shard has its own Generator, seeded at the
chain's start from numbers drawn from the step's Generator. The same seed
therefore gives the same draws whatever carries the shards (in-process or
Dask workers), for the same number of shards.

Lost shards: a transport that can lose a shard (a Dask worker dies) reports it
with :class:`ShardsUnreachable` and can rebuild it elsewhere from its data
(``transport.replace(k)``). The kernel then draws the rebuilt shard's z afresh
from ``z_shard | theta`` at the chain's current theta. The rows of z are
conditionally independent given theta under the split model ``Pi_rho``, so
replacing one block by an exact draw from its full conditional is a Gibbs update
of that block: ``Pi_rho`` (and, in exact mode, ``pi(theta) Pi_rho(z | theta)``)
stays invariant and the chain goes on with the same target. Where that is not
possible (no client, no worker, the rows cannot be sent again, or a family
whose z cannot be drawn exactly) the kernel stops the run with
:class:`SamplingStopped`, which ``pm.sample`` treats as an interrupt: it returns
the draws made so far.
"""

from __future__ import annotations

import contextlib
import itertools
import warnings
from typing import NamedTuple

import numpy as np

from ..conditionals import GaussianThetaConditional
from ..kernel import SGSState, SplitGibbsKernel, validate_alpha
from ..rows import MoveDropped, ShiftProposal
from ..weights import N_NODES

__all__ = [
    "ShardedKernel",
    "ShardedRows",
    "ShardedZ",
    "ShardLostError",
    "ShardLostWarning",
    "SamplingStopped",
    "ShardsUnreachable",
    "ReducedThetaConditional",
]


class ShardLostError(RuntimeError):
    """Shards cannot be reached or rebuilt before anything was sampled (nothing to keep)."""


class ShardLostWarning(UserWarning):
    """A shard was lost: it was rebuilt and sampling goes on, or sampling stops here."""


class SamplingStopped(KeyboardInterrupt):
    """Stops ``pm.sample`` after a shard was lost for good, keeping the draws made so far.

    PyMC's sequential sampler ends a chain on a ``KeyboardInterrupt``, closes its
    trace and returns what was recorded (the chains that maximise chains x shortest
    length, tuning draws dropped as usual); the following chains stop at once.
    A :class:`ShardLostWarning` before it says what was lost and how many draws were kept.
    """


class ShardsUnreachable(ShardLostError):
    """What a transport raises when shards do not answer (the kernel handles it).

    Parameters
    ----------
    message : str
        What happened.
    results : list, optional
        The call's results in the order of the shards called, None where lost.
    lost : dict, optional
        ``{shard index: what happened to it}``.
    fatal : str, optional
        Why nothing can be rebuilt (e.g. the client was closed); None when the lost
        shards may be rebuilt with ``transport.replace``.
    """

    def __init__(self, message, results=None, lost=None, fatal=None):
        super().__init__(message)
        self.results = list(results or [])
        self.lost = dict(lost or {})
        self.fatal = fatal


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
        super().__init__(
            prior_precision, prior_mean, np.zeros((0, d)), np.zeros(0), rho, gaussian_terms
        )

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


class ShardedRows:
    """The split rows on shards: the :class:`~pymc_sgs.rows.RowBlock` of a sharded kernel.

    Parameters
    ----------
    problem : SplitProblem
        The full problem as detected from the model; its split terms' families are read
        here, their rows are the shards'.
    transport : object
        Runs a method on every shard: ``transport.call(name, args_per_shard)``
        returns the results in shard order; ``transport.summaries()`` gives
        every shard's ``(n_rows, A^T A)``. A transport that can lose shards
        raises :class:`ShardsUnreachable` from ``call`` and offers
        ``call(name, args, shards=[k, ...])`` (some shards only) and
        ``replace(k)`` (rebuild shard ``k`` from its data, returning where; raises
        :class:`ShardsUnreachable` with ``fatal`` set when it cannot).
    rho : float
        Scalar coupling.

    Notes
    -----
    A lost shard is rebuilt and its z drawn from ``z_shard | theta`` at the chain's
    current theta (see the module docstring for why the target is kept). What
    "current" means depends on where the loss is seen:

    - a sweep: the theta the z-block is being updated at (the theta just drawn,
      given the z from before the loss), after which the interrupted call is
      repeated on the rebuilt shard (the kernel passes it as ``at``);
    - an exact-mode step or a shift move (:meth:`dropping_moves`): the move is dropped
      and the chain stays at its theta (the other shards go back to their checkpoint in
      exact mode); the lost shard's z is drawn there;
    - a commit of an accepted shift move waiting for the next call
      (:meth:`_defer`): the surviving shards have run it with that call, the
      rebuilt shard's z is drawn at the accepted theta, so the commit is neither
      applied twice nor half-applied.

    The ``A^T z`` of a state is recomputed where it depended on the lost z (or set
    to None, which makes the next sweep ask the shards).
    """

    _ids = itertools.count()
    #: each shard picks its own compiled or numpy pass (ShardWorker)
    engine = "shards"
    #: rebuild rounds for the shards lost in one call (a rebuilt shard can be lost again)
    MAX_REBUILDS = 3

    def __init__(self, problem, transport, rho):
        self.problem = problem
        self.transport = transport
        summaries = transport.summaries()
        self.n_shards = len(summaries)
        self.shard_rows = [int(n) for n, _ in summaries]
        self.n = sum(self.shard_rows)
        #: ``A^T A`` reduced from the shards (the theta-step's data precision times rho^2)
        self.gram = np.sum([g for _, g in summaries], axis=0)
        self.rho = _scalar_rho(rho)
        self._id = next(self._ids)
        self._generation = 0
        self._handle = None
        # calls whose results are not needed, sent with the next call (one round trip)
        self._deferred = []
        # --- for rebuilding lost shards
        # theta of the chain's current state (None: no chain yet, nothing to redraw)
        self._theta = None
        # the chain's seed sequence: rebuilt shards get Generators spawned from it
        self._seeds = None
        # inside an exact step or a shift move a loss drops the move (MoveDropped)
        self._abort_on_loss = False
        # times a lost shard's z was redrawn (a state's A^T z from before is stale)
        self.regenerations = 0
        # rows whose z | theta has no exact sampler (non-log-concave: moved by MH) cannot
        # be redrawn exactly, so losing them ends the run instead
        self._redrawable = all(
            t.family.piecewise_linear or t.family.log_concave for t in problem.split_terms
        )
        # draws started (this chain, since construction) and which calls count them
        self._chain_draws = self._total_draws = 0
        self._draw_kind = None
        self._in_draw = False

    @property
    def families(self):
        """The split terms' families (fixed: a sharded kernel has no nuisance families)."""
        return [t.family for t in self.problem.split_terms]

    def set_rho(self, rho) -> None:
        """New coupling: the shards pick it up with the next call."""
        self.rho = _scalar_rho(rho)

    def _rho(self) -> float:
        return float(self.rho)

    # ----------------------------------------------------------------- state
    def _new_handle(self, theta) -> ShardedZ:
        self._generation += 1
        self._handle = ShardedZ(self._id, self._generation)
        self._theta = theta
        return self._handle

    def hold(self, theta, z, z_mode):
        """A new handle: the shards' z is now that of the state at ``theta``."""
        handle = self._new_handle(theta)
        return handle, handle

    def track(self, state: SGSState) -> None:
        """Check the state's handle is the shards' current one; lost shards are redrawn at its
        theta."""
        if state.z != self._handle:
            raise RuntimeError(
                "this state's z-block is not the one the shards hold (a state from another "
                "chain or an older step); start the chain again with init()."
            )
        self._theta = state.theta

    def begin_chain(self) -> None:
        """A new chain: its draws are counted from zero (for the message of a stopped run)."""
        self._chain_draws = 0
        self._draw_kind = None
        self._in_draw = False

    def begin_draw(self, kind: str) -> None:
        """Count draws for the message of a stopped run: one per shift-move run, or per
        sweep when the chain makes no shift move (the first kind seen in the chain)."""
        if self._draw_kind is None:
            self._draw_kind = kind
        if kind == self._draw_kind:
            self._chain_draws += 1
            self._total_draws += 1
            self._in_draw = True

    def start(self, theta, rng: np.random.Generator | None = None):
        """Start a chain: seed every shard from ``rng`` and draw its z from ``z | theta``."""
        if rng is None:
            raise ValueError("a sharded kernel needs the chain's Generator to seed its shards.")
        entropy = rng.integers(0, 2**63, size=4)
        self._seeds = np.random.SeedSequence(entropy)
        seeds = self._seeds.spawn(self.n_shards)
        # a shard lost here is started again with its own seed: the same draws as without
        # the loss
        self._theta = None
        parts = self._call("start", [(s, theta, self._rho()) for s in seeds])
        handle = self._new_handle(theta)
        return handle, handle, np.sum(parts, axis=0)

    # --------------------------------------------------------------- z-block
    def split_rhs(self, z) -> np.ndarray:
        """``A^T ((z - o) / rho^2)`` of the shards' z, summed."""
        return np.sum(self._broadcast("split_rhs", self._rho()), axis=0)

    def sample_z(self, theta, z, z_mode, rng, checkpoint=False):
        """Exact draw of every shard's z given ``theta`` (each with its own Generator)."""
        parts = self._broadcast("sample_z", theta, self._rho(), checkpoint)
        atz = np.sum([p[0] for p in parts], axis=0)
        return self._handle, self._handle, sum(p[1] for p in parts) / self.n, 1.0, atz

    def z_pass(self, theta, z, z_mode, rng, weights, checkpoint=False, at=None):
        """Over-relaxed z-move on every shard (and the log weight at ``theta``)."""
        parts = self._broadcast("z_pass", theta, self._rho(), weights, checkpoint, at=at)
        atz = np.sum([p[0] for p in parts], axis=0)
        acc = sum(p[1] for p in parts) / self.n
        log_w = float(sum(p[2] for p in parts)) if weights else float("nan")
        return self._handle, self._handle, acc, log_w, atz

    def log_weight(self, theta, z_mode=None, keep_modes=False, at=None):
        """``log pi(theta) - log pi_rho(theta)`` up to a constant, summed over shards."""
        theta = np.asarray(theta, dtype=float)
        parts = self._broadcast("log_weight", theta, self._rho(), keep_modes, at=at)
        return float(np.sum(parts)), self._handle

    def restore(self) -> None:
        """Every shard back to the z of its last checkpoint."""
        self._broadcast("restore")

    # ---------------------------------------- Laplace, pilot rho and shift move
    def add_laplace_terms(self, theta, val, grad, hess, need_derivatives=True):
        """Add every shard's ``sum_i U_i(a_i^T theta + o_i)`` (and derivatives), in shard order."""
        for v, g, h in self._broadcast("laplace_terms", theta, need_derivatives):
            val += v
            if need_derivatives:
                grad, hess = grad + g, hess + h
        return val, grad, hess

    def design_scale(self) -> np.ndarray:
        """``sum_i a_ij^2`` per coefficient (the diagonal of the reduced ``A^T A``)."""
        return np.diagonal(self.gram).copy()

    def log_weight_var_parts(self, mode, chol, rho):
        """``(g, W)`` of :func:`pymc_sgs.rho.laplace_log_weight_var`, summed over the shards."""
        parts = self._broadcast("log_weight_var_parts", mode, chol, float(rho))
        return np.sum([p[0] for p in parts], axis=0), np.sum([p[1] for p in parts], axis=0)

    def shift_constants(self, mean, chol, offset=True):
        """The shift move's constants summed over the shards, in one round trip."""
        parts = self._broadcast("shift_setup", mean, chol, offset)
        rhs = np.sum([p[2] for p in parts], axis=0) if offset else None
        return sum(p[0] for p in parts), sum(p[1] for p in parts), rhs

    def mean_offset_rhs(self, mode, chol) -> np.ndarray:
        """``sum_i U_i^(3)(eta_i) a_i |L^-1 a_i|^2`` summed over the shards."""
        return self.shift_constants(mode, chol)[2]

    def shift_propose(self, z, delta) -> ShiftProposal:
        """Every shard's part of the potential change; each keeps its moved z until the
        decision."""
        return ShiftProposal(float(np.sum(self._broadcast("shift_propose", delta))), None, None)

    def shift_commit(self, theta, z_mode, z_prop, a_delta):
        """The commit rides on the next call (:meth:`_defer`): no round trip of its own."""
        self._defer("shift_commit")
        return self.hold(theta, None, None)

    # ------------------------------------------------------------- transport
    def _call(self, name, args_per_shard, at=None):
        """``name`` on every shard; lost shards are rebuilt (their z redrawn at ``at``, by
        default the current state's theta) and the call repeated on them."""
        args_per_shard = list(args_per_shard)
        if not self._deferred:
            wire = (name, args_per_shard)
        else:
            # the deferred calls ride along: every shard runs them, then this one
            deferred, self._deferred = self._deferred, []
            wire = ("batch", [(deferred + [(name, args)],) for args in args_per_shard])
        try:
            return self.transport.call(*wire)
        except ShardsUnreachable as err:
            return self._rebuild(err, name, args_per_shard, at)

    def _broadcast(self, name, *args, at=None):
        return self._call(name, [args] * self.n_shards, at=at)

    def _defer(self, name, *args):
        """Queue ``name(*args)`` on every shard, to run before the next call's method.

        For calls whose results the client does not need (committing an accepted shift
        move): they cost no round trip of their own. Should the next call lose a shard,
        the survivors have run the queued calls and the rebuilt shard's z is drawn at
        the state they lead to, so nothing is run twice.
        """
        self._deferred.append((name, args))

    # ----------------------------------------------------------- lost shards
    def _rebuild(self, err, name, args_per_shard, at):
        """Rebuild the shards lost in a call to ``name``; the call's results with theirs."""
        results = list(err.results)
        todo = sorted(err.lost)
        lost = dict(err.lost)
        to_replace = list(todo)
        for _ in range(self.MAX_REBUILDS):
            if err.fatal is not None:
                self._stop(err.fatal, lost, rebuildable=False)
            # before a chain has started there is no z to redraw; a call to start is itself
            # the (re)start of the shard
            redraw = self._theta is not None and name != "start"
            if redraw and not self._redrawable:
                self._stop(
                    "its z cannot be redrawn exactly (a likelihood that is not log-concave, "
                    "whose z moves by Metropolis-Hastings), and a z that is not a draw from "
                    "z | theta would bias the chain",
                    lost,
                )
            places = {}
            for k in to_replace:
                try:
                    places[k] = self.transport.replace(k)
                except ShardsUnreachable as why:
                    self._stop(why.fatal or str(why), {j: lost[j] for j in todo})
            try:
                if redraw:
                    theta = self._theta if at is None else at
                    seeds = self._seeds.spawn(len(todo))
                    self.transport.call(
                        "start", [(s, theta, self._rho()) for s in seeds], shards=todo
                    )
                    self.regenerations += 1
                self._warn_rebuilt({k: lost[k] for k in to_replace}, places, redraw)
                if self._abort_on_loss:
                    raise MoveDropped
                redo = self.transport.call(name, [args_per_shard[k] for k in todo], shards=todo)
            except ShardsUnreachable as again:
                err = again
                lost.update(again.lost)
                to_replace = sorted(again.lost)
                continue
            for k, r in zip(todo, redo):
                results[k] = r
            return results
        self._stop(
            f"the rebuilt shards were lost again {self.MAX_REBUILDS} times", lost, rebuildable=False
        )

    def _warn_rebuilt(self, lost, places, redrawn) -> None:
        what = (
            "and its z redrawn from z | theta at the chain's current theta (an exact Gibbs "
            "update of that block, so the chain keeps its target)"
            if redrawn
            else "before its chain had started (nothing else changes)"
        )
        for k in sorted(lost):
            warnings.warn(
                f"SplitGibbs: shard {k} ({lost[k]}) was lost; it was rebuilt on {places[k]} from "
                f"its rows, {what}. Sampling continues.",
                ShardLostWarning,
                stacklevel=4,
            )

    def _stop(self, reason, lost, rebuildable=True):
        """End the run: ShardLostError before any draw, else warn and stop ``pm.sample``."""
        if rebuildable:
            where = ", ".join(f"shard {k} ({lost[k]})" for k in sorted(lost))
            what = (
                f"SplitGibbs lost {where}; {'it' if len(lost) == 1 else 'they'} cannot be "
                f"rebuilt: {reason}."
            )
        else:
            what = f"SplitGibbs cannot reach its shards: {reason}."
        fix = (
            "To go on, construct a new SplitGibbs with a new DaskBackend on a working "
            "client and cluster, and sample again."
        )
        chain = self._chain_draws - self._in_draw
        if self._total_draws - self._in_draw <= 0:
            raise ShardLostError(f"{what} Nothing had been sampled yet. {fix}")
        # PyMC then keeps what a keyboard interrupt keeps; with nothing but tuning draws (and
        # discard_tuned_samples=True) it has nothing to return and says so
        if chain > 0:
            kept = (
                f"pm.sample returns the {chain} draws of this chain made so far and the "
                "chains before it, as after an interrupt (tuning draws are counted here and "
                "dropped by pm.sample as usual; if there are only tuning draws, PyMC "
                "reports 'Not enough samples to build a trace')"
            )
        else:
            kept = (
                "this chain has no draws; pm.sample returns the chains sampled before it "
                "(if none, PyMC reports 'Not enough samples to build a trace')"
            )
        warnings.warn(
            f"{what} Sampling stops here, keeping what was sampled: {kept}. {fix}",
            ShardLostWarning,
            stacklevel=4,
        )
        raise SamplingStopped(what)

    @contextlib.contextmanager
    def dropping_moves(self):
        """Inside: a lost shard raises :class:`~pymc_sgs.rows.MoveDropped` (after it was
        rebuilt and its z drawn at the current theta) instead of repeating the call."""
        previous, self._abort_on_loss = self._abort_on_loss, True
        try:
            yield
        finally:
            self._abort_on_loss = previous


class ShardedKernel(SplitGibbsKernel):
    """:class:`~pymc_sgs.kernel.SplitGibbsKernel` with the z-block on row shards.

    The same sweep, exact-mode step, Laplace start and shift move as in one process,
    driven through :class:`ShardedRows`.

    Parameters
    ----------
    problem : SplitProblem
        The full problem as detected from the model (prior, Gaussian terms,
        coefficient layout); its split rows are not used here.
    transport : object
        Reaches the shards (see :class:`ShardedRows`).
    rho : float
        Scalar coupling.
    alpha, log_weights, n_nodes
        As for :class:`~pymc_sgs.kernel.SplitGibbsKernel`.
    """

    #: the theta-step factorises a d x d precision (what the Laplace start needs)
    theta_solver = "cholesky"
    dtype = "float64"

    def __init__(
        self,
        problem,
        transport,
        rho,
        alpha: float = 0.0,
        log_weights: bool = False,
        n_nodes: int = N_NODES,
    ):
        alpha = validate_alpha(alpha)
        rows = ShardedRows(problem, transport, rho)
        theta_conditional = ReducedThetaConditional(
            problem.prior_precision,
            problem.prior_mean,
            rows.gram,
            rows.rho,
            [(t.A, t.offset, t.y) for t in problem.gaussian_terms],
        )
        self._build(problem, rows, theta_conditional, alpha, log_weights, n_nodes)

    @property
    def transport(self):
        """What reaches the shards."""
        return self.rows.transport

    @property
    def regenerations(self) -> int:
        """Times a lost shard's z was drawn again."""
        return self.rows.regenerations

    @property
    def n_shards(self) -> int:
        """Number of shards."""
        return self.rows.n_shards


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
