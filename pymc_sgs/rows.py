"""The split rows of a problem, and the protocol the kernel drives them through.

Every pass over the data in the split Gibbs sampler touches the rows of the split
likelihood terms one at a time: given ``theta``, the rows' auxiliary variables ``z_i`` are
independent, and the theta-step needs only the d-vector ``A^T ((z - o) / rho^2)``. So the
kernel (:class:`pymc_sgs.kernel.SplitGibbsKernel`), the shift move
(:class:`pymc_sgs.shift.ShiftMove`), the Laplace start (:mod:`pymc_sgs.start`) and the pilot
rho (:mod:`pymc_sgs.rho`) are written once, against :class:`RowBlock`, whatever holds the
rows:

- :class:`LocalRows`: the rows in this process (numpy or the compiled pass of
  :mod:`pymc_sgs.fused`); ``z`` and its modes are arrays in the chain's
  :class:`~pymc_sgs.kernel.SGSState`.
- :class:`pymc_sgs.backends.sharded.ShardedRows`: the rows cut into shards that keep their
  ``z`` where their data are (in-process or Dask workers), reached through a transport;
  the state holds a handle to the shards' ``z``. Each shard runs a :class:`LocalRows`.

The protocol passes the state's ``z`` and ``z_mode`` explicitly ("tokens": arrays here, a
handle for remote rows), returns d-vectors and scalars, and consumes the chain's Generator
in the same order for any implementation, so one kernel drives both.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import NamedTuple, Protocol

import numpy as np
import scipy.linalg
import scipy.sparse

from .conditionals import mh_z_move, overrelaxed_z_move, sample_z_exact
from .fused import family_code, fused_z_pass, row_parameter, shifted_potential_change
from .nonsmooth import log_weight_rows_piecewise, move_z_piecewise, sample_z_piecewise
from .problem import SplitProblem
from .series import SERIES_GAUSSIAN
from .start import ROW_BLOCK, add_split_terms, weighted_gram
from .weights import N_NODES, gauss_hermite_nodes, log_weight_rows, node_tiers

__all__ = ["RowBlock", "LocalRows", "MoveDropped", "validate_rho", "RHO_RANGE", "Z_BLOCK"]


class MoveDropped(Exception):
    """Rows were lost inside a move that cannot finish (see :meth:`RowBlock.dropping_moves`).

    The kernel then keeps the chain at its state, with the lost rows' ``z`` drawn again
    there (:meth:`pymc_sgs.kernel.SplitGibbsKernel.dropped`); rows in one process never
    raise it.
    """


class ShiftProposal(NamedTuple):
    """A shift move's proposal as the rows computed it."""

    #: ``sum_i [U_i(z_i + a_i^T delta) - U_i(z_i)]``
    change: float
    #: ``z + A delta`` (None: kept by the rows that hold z)
    z: np.ndarray | None
    #: ``A delta`` (None: kept by the rows that hold z)
    a_delta: np.ndarray | None


class RowBlock(Protocol):
    """What the kernel needs of the split rows, wherever they are held.

    ``z`` and ``z_mode`` below are the tokens of the chain's state (see the module
    docstring). ``at`` (where present) is the coefficient vector at which rows that were
    lost and rebuilt draw their ``z`` again; None means the theta of the chain's state.
    Methods that draw random numbers take the chain's Generator and consume it in the same
    order for every implementation.
    """

    #: number of split rows
    n: int
    #: the split terms' current families
    families: list
    #: current coupling (scalar, or one per row where supported)
    rho: np.ndarray
    #: times lost rows had their z drawn again (a state's ``atz`` from before is stale)
    regenerations: int
    #: how the rows are passed over (for messages and tests)
    engine: str

    # ---- the sweep
    def set_rho(self, rho) -> None:
        """New coupling (validated here)."""

    def start(self, theta, rng) -> tuple:
        """A chain's start at ``theta``: ``(z, z_mode, atz)`` with z drawn exactly from
        ``z | theta`` (``rng`` None: ``z = A theta + o`` and ``atz`` None, where allowed)."""

    def split_rhs(self, z) -> np.ndarray:
        """``A^T ((z - o) / rho^2)`` of ``z``."""

    def sample_z(self, theta, z, z_mode, rng, checkpoint=False) -> tuple:
        """Exact draw of the z-block given ``theta`` (alpha = 0):
        ``(z, z_mode, proposals per exact draw, acceptance, atz)``. ``checkpoint`` saves the
        z from before, for :meth:`restore`."""

    def z_pass(self, theta, z, z_mode, rng, weights, checkpoint=False, at=None) -> tuple:
        """Over-relaxed z-move at ``theta`` with, in the same pass, the log weight at
        ``theta`` when ``weights``: ``(z, z_mode, acceptance, log_weight or nan, atz)``."""

    def log_weight(self, theta, z_mode=None, keep_modes=False, at=None) -> tuple:
        """``(log pi(theta) - log pi_rho(theta) + const, z_mode)``; the modes of
        ``z | theta`` found on the way become the returned token when ``keep_modes``."""

    def restore(self) -> None:
        """Go back to the z saved by the last ``checkpoint=True`` call (a rejected exact-mode
        proposal; rows whose z lives in the state need nothing)."""

    def hold(self, theta, z, z_mode) -> tuple:
        """The tokens of the new state at ``theta`` whose z-block the rows now hold."""

    # ---- the Laplace approximation, the pilot rho and the shift move
    def add_laplace_terms(self, theta, val, grad, hess, need_derivatives=True) -> tuple:
        """``(val, grad, hess)`` plus ``sum_i U_i(a_i^T theta + o_i)`` and its derivatives."""

    def design_scale(self) -> np.ndarray:
        """``sum_i a_ij^2`` per coefficient."""

    def log_weight_var_parts(self, mode, chol, rho) -> tuple:
        """``(g, W)`` of :func:`pymc_sgs.rho.laplace_log_weight_var`, summed over the rows."""

    def shift_constants(self, mean, chol, offset=True) -> tuple:
        """``(sum_i U_i''(a_i^T mean + o_i), n, sum_i U_i^(3) a_i |L^-1 a_i|^2 or None)``."""

    def shift_propose(self, z, delta) -> ShiftProposal:
        """The potential change of the joint shift ``z -> z + A delta``."""

    def shift_commit(self, theta, z_mode, z_prop, a_delta) -> tuple:
        """Accept the last proposal (``z_prop``, ``a_delta``: the proposal's, or None where the
        rows kept them): the tokens of the state moved to ``theta``."""

    # ---- the chain's life (rows that can be lost count draws and redraw where needed)
    def begin_chain(self) -> None:
        """A new chain starts (before its Laplace start or its first state)."""

    def begin_draw(self, kind: str) -> None:
        """A draw starts: ``"sweep"`` or ``"move"`` (a run of shift moves)."""

    def track(self, state) -> None:
        """The chain's current state, at whose theta lost rows are redrawn."""

    def dropping_moves(self):
        """Context in which a loss raises :class:`MoveDropped` instead of repeating a call."""


#: admissible rho: 1 / rho^2 and rho^2 times a squared linear predictor stay far inside the
#: float64 range, and no linear predictor is meaningful on scales beyond these
RHO_RANGE = (1e-10, 1e10)


def validate_rho(rho, n: int) -> np.ndarray:
    """Check the coupling parameter and return it as a float array.

    Raises ``ValueError`` naming ``rho`` unless it is a positive finite scalar
    or an array of ``n`` positive finite values (one per split row).
    """
    if isinstance(rho, str) or isinstance(rho, bool) or rho is None:
        raise ValueError(f"rho must be a positive number; received {rho!r}.")
    try:
        arr = np.asarray(rho, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"rho must be a positive number; received {rho!r}.") from None
    if arr.ndim == 1 and arr.shape[0] != n:
        raise ValueError(
            f"rho given per observation must have one value per split row ({n}); "
            f"received an array of length {arr.shape[0]}."
        )
    if arr.ndim > 1:
        raise ValueError(f"rho must be a scalar or a 1-D array; received shape {arr.shape}.")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        bad = arr if arr.ndim == 0 else arr[~(np.isfinite(arr) & (arr > 0))][0]
        raise ValueError(f"rho must be positive and finite; received {float(bad)!r}.")
    lo, hi = RHO_RANGE
    if np.any(arr < lo) or np.any(arr > hi):
        bad = arr if arr.ndim == 0 else arr[(arr < lo) | (arr > hi)][0]
        raise ValueError(
            f"rho must be between {lo:g} and {hi:g} (in units of the linear predictor: the "
            f"kernel works with 1 / rho^2); received {float(bad)!r}."
        )
    return arr


#: rows per call of the exact z-sampler (bounds its temporaries; smaller terms are one block),
#: and per block of random numbers of the over-relaxed z-move: the compiled pass draws its
#: normals and uniforms block by block (1 MB that stays in cache instead of two n-vectors),
#: and the numpy path moves z in the same blocks, so both use the same random numbers
Z_BLOCK = 65536


def _blocks(m: int):
    """Consecutive row slices of at most :data:`Z_BLOCK` rows covering ``range(m)``."""
    return [slice(lo, min(lo + Z_BLOCK, m)) for lo in range(0, m, Z_BLOCK)]


def _rows_of(values, rows):
    """``values[rows]`` for a per-row array; None and scalars pass through."""
    if values is None or np.ndim(values) == 0:
        return values
    return np.asarray(values)[rows]


class LocalRows:
    """The split rows of a problem, in this process: a :class:`RowBlock`.

    Parameters
    ----------
    problem : SplitProblem
    rho : float or ndarray
        Coupling, scalar or one per split row.
    alpha : float
        Over-relaxation of the z-move (validated by the kernel).
    n_nodes : int
        Quadrature nodes of the log weights.
    engine : {"auto", "numba", "numpy"}
        As for :class:`~pymc_sgs.kernel.SplitGibbsKernel`.
    dtype : {"float64", "float32"}
        Storage of the design for the compiled pass.
    """

    regenerations = 0

    def __init__(
        self,
        problem: SplitProblem,
        rho,
        alpha: float = 0.0,
        n_nodes: int = N_NODES,
        engine: str = "auto",
        dtype: str = "float64",
    ):
        self.problem = problem
        self.alpha = float(alpha)
        self.n_nodes = int(n_nodes)
        # ``design`` is the stacked design as detected (the theta-step's, and A^T z's);
        # ``A`` the copy the compiled pass reads, contiguous float64 (the same object when
        # the design already is)
        self.design, self.offset = problem.stacked_split()
        self.A = self.design
        self.n, self.d = self.design.shape
        # the terms as sampled; a kinked term's rate may be replaced (set_term_rate)
        self.split_terms = list(problem.split_terms)
        self._slices = problem.term_slices()
        # current families: nuisance parameters (e.g. NegativeBinomial alpha) change them
        self.families = [t.family for t in problem.split_terms]
        self.sparse = scipy.sparse.issparse(self.design)
        self.set_rho(rho)
        codes = [family_code(f) for f in self.families]
        # kinked terms have closed forms (pymc_sgs.nonsmooth), called per term in either engine
        self._piecewise = [f.piecewise_linear for f in self.families]
        uncompiled = any(c is None and not pw for c, pw in zip(codes, self._piecewise))
        if engine == "numba" and uncompiled:
            raise ValueError("engine='numba' has no compiled form for some of the families.")
        if engine == "numba" and self.sparse:
            raise ValueError("engine='numba' needs a dense design; received a scipy.sparse one.")
        self.engine = "numpy" if engine == "numpy" or self.sparse or uncompiled else "numba"
        if dtype == "float32" and self.engine != "numba":
            raise ValueError(
                "dtype='float32' applies to the compiled pass, which is not available here "
                f"(engine={self.engine!r}); use dtype='float64'."
            )
        self._codes = codes
        self._rng_buffers = {}
        if self.engine == "numba":
            self.A = np.ascontiguousarray(self.A, dtype=np.float64)
            self._term_data = [
                (
                    np.ascontiguousarray(
                        self.A[sl], dtype=np.float32 if dtype == "float32" else np.float64
                    ),
                    np.ascontiguousarray(t.offset, dtype=float),
                    np.ascontiguousarray(t.y, dtype=float),
                    row_parameter(f, t.trials, t.n),
                )
                for f, t, sl in zip(self.families, problem.split_terms, self._slices)
            ]

    # ------------------------------------------------------------ parameters
    def set_rho(self, rho) -> None:
        """New coupling: scalar or one per row."""
        self.rho = validate_rho(rho, self.n)
        self._rho_rows = np.broadcast_to(self.rho, (self.n,))
        # the weights of A^T z, as the theta-step's conditionals form them (a stride-0 view
        # for a scalar rho), so that A^T z here is theirs bit for bit
        self._w = (
            np.broadcast_to(1.0 / self.rho**2, (self.n,))
            if self.rho.ndim == 0
            else 1.0 / self._rho_rows**2
        )

    def set_family(self, index: int, family) -> None:
        """Replace the family of split term ``index`` (new nuisance parameter values).

        Cached modes stay valid warm starts; log weights computed before the
        change are stale and must be recomputed by the caller.
        """
        if type(family) is not type(self.families[index]):
            raise ValueError(
                f"split term {index} is {self.families[index]!r}; received a {type(family).__name__}."
            )
        self.families[index] = family
        if self.engine == "numba":
            A, off, y, _ = self._term_data[index]
            term = self.problem.split_terms[index]
            self._term_data[index] = (A, off, y, row_parameter(family, term.trials, term.n))

    def term_nuisance_log_likelihood(self, index: int, z):
        """``f(family) -> sum_i log p(y_i | z_i)`` over split term ``index`` at fixed ``z``
        (:meth:`pymc_sgs.families.Family.nuisance_log_likelihood`)."""
        term, sl = self.split_terms[index], self._slices[index]
        return self.families[index].nuisance_log_likelihood(z[sl], term.y, term.trials)

    def set_term_rate(self, index: int, rate) -> None:
        """Replace the per-row rate (``trials``) of the kinked split term ``index``.

        For an asymmetric Laplace likelihood whose rate ``b`` another update
        (:mod:`pymc_sgs.free_rate`) changes between sweeps.
        """
        term = self.split_terms[index]
        if not term.family.piecewise_linear:
            raise ValueError(f"split term {term.name!r} has no rate to set.")
        rate = np.broadcast_to(np.asarray(rate, dtype=float), (term.n,))
        self.split_terms[index] = dataclasses.replace(term, trials=rate)

    # ----------------------------------------------------------------- sweep
    def _centre(self, theta):
        return self.A @ theta + self.offset

    def start(self, theta, rng=None):
        """``(z, z_mode, atz)`` at ``theta``: z drawn from ``z | theta`` (``rng`` None:
        ``A theta + o``, no ``atz``)."""
        centre = self._centre(theta)
        if rng is None:
            return centre.copy(), centre.copy(), None
        z, mode, _, _ = self.draw_z(theta, centre, rng)
        return z, mode, self.split_rhs(z)

    def split_rhs(self, z) -> np.ndarray:
        """``A^T ((z - o) / rho^2)``, the data part of the linear term of ``theta | z``."""
        if self.n == 0:
            return np.zeros(self.d)
        out = self.design.T @ (self._w * (z - self.offset))
        return np.asarray(out, dtype=float).ravel() if self.sparse else out

    def sample_z(self, theta, z, z_mode, rng, checkpoint=False):
        """:meth:`draw_z` and the ``A^T z`` of the new z (the protocol's exact z-draw)."""
        z, mode, n_prop, acc = self.draw_z(theta, z_mode, rng, z)
        return z, mode, n_prop, acc, self.split_rhs(z)

    def draw_z(self, theta, z_mode, rng, z=None):
        """Draw of the whole z-block given ``theta``.

        Exact (rejection) for log-concave families; for the others an MH move
        with an independence proposal from the Laplace approximation
        (:func:`~pymc_sgs.conditionals.mh_z_move`, ``alpha = 0``) from the
        current ``z`` (from ``A theta + o`` when ``z`` is None).

        Returns ``(z, mode, proposals_per_exact_draw, accept_prob)``: the mean
        number of Gaussian proposals per exactly drawn row (0.0 if none) and the
        mean MH acceptance probability over all rows (1 for exact rows).
        """
        n = self.n
        if n == 0:
            return np.zeros(0), np.zeros(0), 0.0, 1.0
        centre = self._centre(theta)
        z_new = np.empty(n)
        mode = np.empty(n)
        n_prop = n_exact = 0
        acc = 0.0
        for fam, term, sl in zip(self.families, self.split_terms, self._slices):
            m = sl.stop - sl.start
            if fam.piecewise_linear:
                # kinked potentials: exact inversion of the two-piece CDF (pymc_sgs.nonsmooth)
                draw = sample_z_piecewise(
                    fam, term.y, term.trials, centre[sl], self._rho_rows[sl], rng
                )
                z_new[sl] = draw.z
                mode[sl] = draw.mode
                n_prop += draw.n_proposals
                n_exact += m
                acc += m
            elif fam.log_concave:
                # in row blocks: the vectorised rejection sampler keeps about a dozen temporaries
                # of its input's length (benchmarks/sweep_cost.py measures the peak memory)
                for local in _blocks(m):
                    rows = slice(sl.start + local.start, sl.start + local.stop)
                    draw = sample_z_exact(
                        fam,
                        term.y[local],
                        _rows_of(term.trials, local),
                        centre[rows],
                        self._rho_rows[rows],
                        rng,
                        z_mode[rows],
                    )
                    z_new[rows] = draw.z
                    mode[rows] = draw.mode
                    n_prop += draw.n_proposals
                n_exact += m
                acc += m
            else:
                current = centre[sl] if z is None else z[sl]
                mv = mh_z_move(
                    fam, term.y, term.trials, centre[sl], self._rho_rows[sl], current, 0.0, rng
                )
                z_new[sl] = mv.z
                mode[sl] = mv.mode
                acc += mv.accept_prob * m
        return z_new, mode, (n_prop / n_exact if n_exact else 0.0), acc / n

    def move_z(self, theta, z, z_mode, rng):
        """Over-relaxed MH move of the whole z-block; returns ``(z, mode, accept_prob)``."""
        n = self.n
        if n == 0:
            return z, z_mode, 1.0
        centre = self._centre(theta)
        z_new = np.empty(n)
        mode = np.empty(n)
        acc = 0.0
        for fam, term, sl in zip(self.families, self.split_terms, self._slices):
            if fam.piecewise_linear:
                # no Laplace approximation at a kink: over-relax in the exact CDF's copula
                mv = move_z_piecewise(
                    fam,
                    term.y,
                    term.trials,
                    centre[sl],
                    self._rho_rows[sl],
                    z[sl],
                    self.alpha,
                    rng,
                )
                z_new[sl] = mv.z
                mode[sl] = mv.mode
                acc += mv.accept_prob * (sl.stop - sl.start)
                continue
            # in the compiled pass's blocks (Z_BLOCK), so that both draw the same numbers
            for local in _blocks(sl.stop - sl.start):
                rows = slice(sl.start + local.start, sl.start + local.stop)
                args = (
                    fam,
                    _rows_of(term.y, local),
                    _rows_of(term.trials, local),
                    centre[rows],
                    self._rho_rows[rows],
                    z[rows],
                    self.alpha,
                    rng,
                )
                if fam.log_concave:
                    mv = overrelaxed_z_move(*args, z_mode[rows])
                else:
                    # no warm start: the proposal must not depend on the chain's history
                    mv = mh_z_move(*args)
                z_new[rows] = mv.z
                mode[rows] = mv.mode
                acc += mv.accept_prob * (local.stop - local.start)
        return z_new, mode, acc / n

    def log_weight(self, theta, z_mode=None, keep_modes=False, at=None):
        """``log pi(theta) - log pi_rho(theta)`` up to a constant; also the z-modes at theta.

        The modes are those of ``z | theta`` (the quadrature is centred there),
        so they warm-start the next sweep's z-step exactly (whatever ``keep_modes``: the
        caller keeps them or not).
        """
        n = self.n
        if n == 0:
            return 0.0, np.zeros(0)
        centre = self._centre(theta)
        total = 0.0
        mode = np.empty(n)
        for fam, term, sl in zip(self.families, self.split_terms, self._slices):
            if fam.piecewise_linear:
                # closed form (normal CDFs), exact where quadrature would not be
                rows, mode[sl] = log_weight_rows_piecewise(
                    fam, term.y, term.trials, centre[sl], self._rho_rows[sl]
                )
                total += float(np.sum(rows))
                continue
            rows, mode[sl] = log_weight_rows(
                fam,
                term.y,
                term.trials,
                centre[sl],
                self._rho_rows[sl],
                None if z_mode is None else z_mode[sl],
                self.n_nodes,
            )
            total += float(np.sum(rows))
        return total, mode

    def z_pass(self, theta, z, z_mode, rng, weights: bool, checkpoint=False, at=None):
        """Over-relaxed z-move at ``theta`` with, in the same pass, the weight at ``theta``.

        Returns ``(z, mode, accept_prob, log_weight, atz)`` where ``atz`` is
        ``A^T ((z - o) / rho^2)`` for the new z and ``log_weight`` is nan when
        ``weights`` is False.
        """
        n = self.n
        if self.engine == "numpy":
            z, mode, acc = self.move_z(theta, z, z_mode, rng)
            log_w = self.log_weight(theta, mode)[0] if weights else float("nan")
            return z, mode, acc, log_w, self.split_rhs(z)
        nodes, log_wx = gauss_hermite_nodes(self.n_nodes)
        # the same node tiers as the numpy path (log_weight_rows); the compiled pass takes
        # three, so a missing small tier is padded with a threshold no row meets
        tiers = node_tiers(self.n_nodes)
        tiers = [(self.n_nodes, -1.0)] * (3 - len(tiers)) + tiers
        (k_q, very_near_gaussian), (k_lo, near_gaussian), _ = tiers
        nodes_lo, log_wx_lo = gauss_hermite_nodes(k_lo)
        nodes_q, log_wx_q = gauss_hermite_nodes(k_q)
        z_new = np.empty(n)
        mode = np.empty(n)
        atz = np.zeros(self.d)
        acc = 0.0
        log_w = 0.0
        theta = np.ascontiguousarray(theta, dtype=float)
        for (A, off, y, trials), code, sl, term, pw in zip(
            self._term_data, self._codes, self._slices, self.split_terms, self._piecewise
        ):
            m = sl.stop - sl.start
            if pw:
                # same calls, same random numbers as the numpy path
                rho = self._rho_rows[sl]
                centre = A @ theta + off
                mv = move_z_piecewise(
                    term.family, y, term.trials, centre, rho, z[sl], self.alpha, rng
                )
                z_new[sl], mode[sl] = mv.z, mv.mode
                atz += A.T @ ((mv.z - off) / rho**2)
                acc += m
                if weights:
                    log_w += float(
                        np.sum(
                            log_weight_rows_piecewise(term.family, y, term.trials, centre, rho)[0]
                        )
                    )
                continue
            rho, z_t, mode_t = (
                self._rho_rows[sl],
                np.ascontiguousarray(z[sl]),
                np.ascontiguousarray(z_mode[sl]),
            )
            z_out, mode_out = z_new[sl], mode[sl]
            for b in _blocks(m):
                # the numpy path's rng.standard_normal(k), rng.random(k) per block, written into
                # buffers kept here (fresh arrays cost page faults every sweep)
                eps, u = self._random_buffers(b.stop - b.start)
                rng.standard_normal(out=eps)
                rng.random(out=u)
                a, acc_t, lw_t = fused_z_pass(
                    A[b],
                    off[b],
                    y[b],
                    trials[b],
                    rho[b],
                    code,
                    theta,
                    z_t[b],
                    mode_t[b],
                    self.alpha,
                    eps,
                    u,
                    nodes,
                    log_wx,
                    weights,
                    z_out[b],
                    mode_out[b],
                    nodes_lo,
                    log_wx_lo,
                    near_gaussian,
                    nodes_q,
                    log_wx_q,
                    very_near_gaussian,
                    SERIES_GAUSSIAN,
                )
                atz += a
                acc += acc_t
                log_w += lw_t
        return z_new, mode, acc / max(n, 1), (log_w if weights else float("nan")), atz

    def _random_buffers(self, k: int):
        if k not in self._rng_buffers:
            self._rng_buffers[k] = (np.empty(k), np.empty(k))
        return self._rng_buffers[k]

    def restore(self) -> None:
        """Nothing to do: a rejected proposal's state still holds its own z."""

    def hold(self, theta, z, z_mode):
        """The state's own arrays."""
        return z, z_mode

    # ---------------------------------------- Laplace, pilot rho and shift move
    def add_laplace_terms(self, theta, val, grad, hess, need_derivatives=True):
        """``(val, grad, hess)`` plus the split terms' potentials (and derivatives) at ``theta``."""
        split = [
            (fam, t.A, t.offset, t.y, t.trials) for fam, t in zip(self.families, self.split_terms)
        ]
        return add_split_terms(split, theta, val, grad, hess, need_derivatives)

    def design_scale(self) -> np.ndarray:
        """``sum_i a_ij^2`` per coefficient (dense: the Laplace start needs the Cholesky
        theta-step, which refuses sparse designs)."""
        scale = np.zeros(self.d)
        for term in self.split_terms:
            scale += np.einsum("ij,ij->j", term.A, term.A)
        return scale

    def log_weight_var_parts(self, mode, chol, rho) -> tuple:
        """``(g, W)`` of :func:`pymc_sgs.rho.laplace_log_weight_var` over these rows."""
        rho_rows = np.broadcast_to(np.asarray(rho, dtype=float), (self.n,))
        d = mode.shape[0]
        g = np.zeros(d)
        W = np.zeros((d, d))
        for fam, term, sl in zip(self.families, self.split_terms, self._slices):
            y = np.broadcast_to(np.asarray(term.y, dtype=float), (term.n,))
            trials = None if term.trials is None else np.broadcast_to(term.trials, (term.n,))
            rho_t = rho_rows[sl]
            # row blocks bound the n x nodes quadrature temporaries
            for b in range(0, term.n, ROW_BLOCK):
                rows = slice(b, b + ROW_BLOCK)
                A = np.asarray(term.A[rows], dtype=float)
                eta = A @ mode + term.offset[rows]
                # posterior sd of each row's linear predictor under the Laplace approximation
                s = np.sqrt(
                    np.sum(scipy.linalg.solve_triangular(chol, A.T, lower=True) ** 2, axis=0)
                )
                s = np.maximum(s, 1e-8)
                tr = None if trials is None else trials[rows]
                psi = [
                    log_weight_rows(fam, y[rows], tr, eta + k * s, rho_t[rows], None, self.n_nodes)[
                        0
                    ]
                    for k in (-1.0, 0.0, 1.0)
                ]
                d1 = (psi[2] - psi[0]) / (2.0 * s)
                d2 = (psi[2] - 2.0 * psi[1] + psi[0]) / s**2
                g += A.T @ d1
                W += weighted_gram(A, d2)
        return g, W

    def shift_constants(self, mean, chol, offset=True):
        """``(sum_i U_i''(a_i^T mean + o_i), n, sum_i U_i^(3)(eta_i) a_i |L^-1 a_i|^2)``.

        The first two give the shift move's mean curvature, the last (None unless
        ``offset``) its first-order mean offset (:func:`pymc_sgs.shift.laplace_mean_offset`).
        """
        total, count = 0.0, 0
        for fam, term in zip(self.families, self.split_terms):
            eta = term.A @ mean + term.offset
            total += float(np.sum(fam.hess(eta, term.y, term.trials)))
            count += eta.shape[0]
        return total, count, (self.mean_offset_rhs(mean, chol) if offset else None)

    def mean_offset_rhs(self, mode, chol) -> np.ndarray:
        """``sum_i U_i^(3)(eta_i) a_i |L^-1 a_i|^2`` over these rows (see
        :func:`pymc_sgs.shift.laplace_mean_offset`)."""
        d = mode.shape[0]
        v = np.zeros(d)
        # rows per block: the solve's block x d temporaries stay below ~32 MB for any d
        block = max(1, min(ROW_BLOCK, (1 << 22) // max(d, 1)))
        for fam, term in zip(self.families, self.split_terms):
            n = term.A.shape[0]
            for start in range(0, n, block):
                rows = slice(start, min(start + block, n))
                # dense: the shift move needs the Cholesky theta-step, which refuses sparse designs
                a = np.asarray(term.A[rows], dtype=float)
                eta = a @ mode + term.offset[rows]
                trials = None if term.trials is None else np.broadcast_to(term.trials, (n,))[rows]
                u3 = third_derivative(fam, eta, term.y[rows], trials)
                w = scipy.linalg.solve_triangular(chol, a.T, lower=True, check_finite=False)
                v += a.T @ (u3 * np.einsum("ji,ji->i", w, w))
        return v

    def shift_propose(self, z, delta) -> ShiftProposal:
        """``sum_i [U_i(z_i + a_i^T delta) - U_i(z_i)]``, ``z + A delta`` and ``A delta``.

        One compiled pass per split term where there is one; the numpy potentials
        otherwise.
        """
        n = z.shape[0]
        z_prop = np.empty(n)
        a_delta = np.empty(n)
        change = 0.0
        with np.errstate(over="ignore", invalid="ignore"):
            for index, (fam, term, sl) in enumerate(
                zip(self.families, self.split_terms, self._slices)
            ):
                compiled = self.engine == "numba" and not self._piecewise[index]
                code = self._codes[index] if compiled else None
                if code is not None:
                    A, _, y, t = self._term_data[index]
                    change += shifted_potential_change(
                        code, A, delta, np.ascontiguousarray(z[sl]), y, t, z_prop[sl], a_delta[sl]
                    )
                else:
                    a_delta[sl] = self.A[sl] @ delta
                    z_prop[sl] = z[sl] + a_delta[sl]
                    change += float(
                        np.sum(fam.potential(z_prop[sl], term.y, term.trials))
                        - np.sum(fam.potential(z[sl], term.y, term.trials))
                    )
        return ShiftProposal(change, z_prop, a_delta)

    def shift_commit(self, theta, z_mode, z_prop, a_delta):
        """``z + A delta``, and the modes shifted with it (into ``A delta``'s buffer: no
        further n-vector at the peak)."""
        return z_prop, np.add(z_mode, a_delta, out=a_delta)

    # ------------------------------------------------------- the chain's life
    def begin_chain(self) -> None:
        """Nothing to count: rows in this process are not lost."""

    def begin_draw(self, kind: str) -> None:
        """Nothing to count."""

    def track(self, state) -> None:
        """Nothing to track."""

    def dropping_moves(self):
        """Rows in this process are never lost: a plain context."""
        return contextlib.nullcontext()


def third_derivative(fam, eta, y, trials) -> np.ndarray:
    """``U^(3)`` at ``eta``: the family's own, else a central difference of its exact ``U''``.

    The difference (step ``h = 1e-4 (1 + |eta|)``, truncation error of order ``h^2``) serves
    families without closed-form higher derivatives (probit, Gamma, exponential); the value
    only places the shift proposal's centre, and any fixed centre keeps the move exact.
    """
    derivs = fam.taylor_derivatives(eta, y, trials)
    if derivs is not None:
        return np.broadcast_to(np.asarray(derivs[2], dtype=float), eta.shape)
    h = 1e-4 * (1.0 + np.abs(eta))
    with np.errstate(over="ignore", invalid="ignore"):
        return (fam.hess(eta + h, y, trials) - fam.hess(eta - h, y, trials)) / (2.0 * h)
