"""The split Gibbs kernel: pure functions of arrays, no PyMC inside.

In the style of BlackJAX, a kernel has an ``init`` that builds a
:class:`SGSState` from a coefficient vector and a ``sweep`` that maps a state
and a :class:`numpy.random.Generator` to a new state and an :class:`SGSInfo`.
One sweep is one pass of Algorithm 1 of Vono, Paulin & Doucet (2022): every
``z_i | theta`` (exact, independent across rows), then ``theta | z``.

The PyMC step (:mod:`pymc_sgs.step`) is a thin adapter around this code, so a
back end that runs the kernel per data shard can reuse it unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
import scipy.sparse

from .conditionals import GaussianThetaConditional, mh_z_move, overrelaxed_z_move, sample_z_exact
from .fused import family_code, fused_z_pass, row_parameter
from .nonsmooth import (
    log_weight_rows_piecewise,
    move_z_piecewise,
    sample_z_piecewise,
)
from .problem import SplitProblem
from .series import SERIES_GAUSSIAN
from .theta_cg import CGThetaConditional
from .validate import check_real
from .weights import N_NODES, gauss_hermite_nodes, log_weight_rows, node_tiers

__all__ = [
    "SGSState",
    "SGSInfo",
    "SplitGibbsKernel",
    "validate_rho",
    "validate_alpha",
    "validate_theta_solver",
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
    value changes.
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
        self.problem = problem
        self.alpha = validate_alpha(alpha)
        self.log_weights = bool(log_weights)
        self.n_nodes = int(n_nodes)
        self.A, self.offset = problem.stacked_split()
        # the terms as sampled; a kinked term's rate may be replaced (set_term_rate)
        self.split_terms = list(problem.split_terms)
        self.rho = validate_rho(rho, self.A.shape[0])
        self._slices = problem.term_slices()
        # current families: nuisance parameters (e.g. NegativeBinomial alpha) change them
        self.families = [t.family for t in problem.split_terms]
        self._rho_rows = np.broadcast_to(self.rho, (self.A.shape[0],))
        sparse = scipy.sparse.issparse(self.A)
        self.theta_solver = validate_theta_solver(theta_solver)
        if self.theta_solver == "auto":
            self.theta_solver = "cg" if sparse or problem.d > CG_MIN_D else "cholesky"
        if sparse and self.theta_solver == "cholesky":
            raise ValueError(
                "theta_solver='cholesky' needs a dense design; received a scipy.sparse design. "
                "Use theta_solver='cg' (or 'auto')."
            )
        conditional = CGThetaConditional if self.theta_solver == "cg" else GaussianThetaConditional
        self.theta_conditional = conditional(
            problem.prior_precision,
            problem.prior_mean,
            self.A,
            self.offset,
            self.rho,
            [(t.A, t.offset, t.y) for t in problem.gaussian_terms],
        )
        if dtype not in ("float64", "float32"):
            raise ValueError(f"dtype must be 'float64' or 'float32'; received {dtype!r}.")
        self.dtype = dtype
        fixed = [t.sigma for t in problem.gaussian_terms]
        self._sigmas_fixed = all(s is not None for s in fixed)
        if problem.gaussian_terms and self._sigmas_fixed:
            self.theta_conditional.set_sigmas(fixed)
        if engine not in ("auto", "numba", "numpy"):
            raise ValueError(f"engine must be 'auto', 'numba' or 'numpy'; received {engine!r}.")
        codes = [family_code(f) for f in self.families]
        # kinked terms have closed forms (pymc_sgs.nonsmooth), called per term in either engine
        self._piecewise = [f.piecewise_linear for f in self.families]
        uncompiled = any(c is None and not pw for c, pw in zip(codes, self._piecewise))
        if engine == "numba" and uncompiled:
            raise ValueError("engine='numba' has no compiled form for some of the families.")
        if engine == "numba" and sparse:
            raise ValueError("engine='numba' needs a dense design; received a scipy.sparse one.")
        self.engine = "numpy" if engine == "numpy" or sparse or uncompiled else "numba"
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

    def term_log_likelihood(self, index: int, z, family=None) -> float:
        """``sum_i log p(y_i | z_i)`` over the rows of split term ``index`` (all constants included)."""
        fam = self.families[index] if family is None else family
        term = self.split_terms[index]
        sl = self._slices[index]
        with np.errstate(over="ignore", invalid="ignore"):
            out = float(np.sum(fam.log_likelihood(z[sl], term.y, term.trials)))
        return out if not np.isnan(out) else -np.inf

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

    def set_rho(self, rho) -> None:
        """Change the coupling (e.g. while tuning it); refactors ``theta | z``."""
        self.rho = validate_rho(rho, self.A.shape[0])
        self._rho_rows = np.broadcast_to(self.rho, (self.A.shape[0],))
        self.theta_conditional.set_rho(self.rho)

    def init(self, theta, rng: np.random.Generator | None = None) -> SGSState:
        """State at coefficients ``theta``; with ``rng``, z is an exact draw of ``z | theta``."""
        theta = np.asarray(theta, dtype=float).copy()
        centre = self.A @ theta + self.offset
        if rng is None:
            return SGSState(theta=theta, z=centre.copy(), z_mode=centre.copy())
        z, mode, _, _ = self.sample_z(theta, centre, rng)
        return SGSState(theta=theta, z=z, z_mode=mode, atz=self.theta_conditional.split_rhs(z))

    def set_prior_precision(self, prior_precision) -> None:
        """Current prior precision of theta (hierarchical scales updated elsewhere)."""
        self.theta_conditional.set_prior_precision(prior_precision)

    def set_sigmas(self, sigmas) -> None:
        """Current scales of the Gaussian terms whose sigma is not fixed."""
        self.theta_conditional.set_sigmas(sigmas)

    def sample_z(self, theta, z_mode, rng, z=None):
        """Draw of the whole z-block given ``theta``.

        Exact (rejection) for log-concave families; for the others an MH move
        with an independence proposal from the Laplace approximation
        (:func:`~pymc_sgs.conditionals.mh_z_move`, ``alpha = 0``) from the
        current ``z`` (from ``A theta + o`` when ``z`` is None).

        Returns ``(z, mode, proposals_per_exact_draw, accept_prob)``: the mean
        number of Gaussian proposals per exactly drawn row (0.0 if none) and the
        mean MH acceptance probability over all rows (1 for exact rows).
        """
        n = self.A.shape[0]
        if n == 0:
            return np.zeros(0), np.zeros(0), 0.0, 1.0
        centre = self.A @ theta + self.offset
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
        n = self.A.shape[0]
        if n == 0:
            return z, z_mode, 1.0
        centre = self.A @ theta + self.offset
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

    def log_weight(self, theta, z_mode=None):
        """``log pi(theta) - log pi_rho(theta)`` up to a constant; also the z-modes at theta.

        The modes are those of ``z | theta`` (the quadrature is centred there),
        so they warm-start the next sweep's z-step exactly.
        """
        n = self.A.shape[0]
        if n == 0:
            return 0.0, np.zeros(0)
        centre = self.A @ theta + self.offset
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

    def z_pass(self, theta, z, z_mode, rng, weights: bool):
        """Over-relaxed z-move at ``theta`` with, in the same pass, the weight at ``theta``.

        Returns ``(z, mode, accept_prob, log_weight, atz)`` where ``atz`` is
        ``A^T ((z - o) / rho^2)`` for the new z and ``log_weight`` is nan when
        ``weights`` is False.
        """
        n = self.A.shape[0]
        if self.engine == "numpy":
            z, mode, acc = self.move_z(theta, z, z_mode, rng)
            log_w = self.log_weight(theta, mode)[0] if weights else float("nan")
            return z, mode, acc, log_w, self.theta_conditional.split_rhs(z)
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
        atz = np.zeros(self.A.shape[1])
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
                # buffers the kernel keeps (fresh arrays cost page faults every sweep)
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
        if self.A.shape[0] == 0:
            # no split terms: theta | sigma is the exact posterior, drawn independently
            theta = self.theta_conditional.sample_from_rhs(np.zeros(self.A.shape[1]), rng)
            log_w = 0.0 if weights else float("nan")
            info = SGSInfo(z_proposals=0.0, z_accept=1.0, log_weight=log_w)
            return state._replace(theta=theta, log_weight=log_w), info
        if self.alpha == 0.0:
            z, mode, n_prop, acc = self.sample_z(state.theta, state.z_mode, rng, state.z)
            info = SGSInfo(z_proposals=n_prop, z_accept=acc)
            # A^T z of the new z stays valid after theta | z: kept for the shift move's centre
            atz = self.theta_conditional.split_rhs(z)
            theta = self.theta_conditional.sample_from_rhs(atz, rng)
            if weights:
                log_w, mode = self.log_weight(theta, mode)
                info = info._replace(log_weight=log_w)
                return SGSState(theta=theta, z=z, z_mode=mode, log_weight=log_w, atz=atz), info
            return SGSState(theta=theta, z=z, z_mode=mode, atz=atz), info
        atz = state.atz if state.atz is not None else self.theta_conditional.split_rhs(state.z)
        theta = self.theta_conditional.sample_from_rhs(
            atz, rng, theta=state.theta, alpha=self.alpha
        )
        z, mode, acc, log_w, atz = self.z_pass(theta, state.z, state.z_mode, rng, weights)
        info = SGSInfo(z_proposals=0.0, z_accept=acc, log_weight=log_w)
        return SGSState(theta=theta, z=z, z_mode=mode, log_weight=log_w, atz=atz), info

    def _z_update(self, theta, z, z_mode, rng):
        """z-block update at theta: ``(z, mode, proposals_per_draw, accept_prob, atz)``."""
        if self.alpha == 0.0:
            z, mode, n_prop, acc = self.sample_z(theta, z_mode, rng, z)
            atz = self.theta_conditional.split_rhs(z)
            return z, mode, n_prop, acc, atz
        z, mode, acc, _, atz = self.z_pass(theta, z, z_mode, rng, weights=False)
        return z, mode, 0.0, acc, atz

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
        """
        if self.A.shape[0] == 0:
            return self.sweep(state, rng)
        log_w0 = state.log_weight
        if not np.isfinite(log_w0):
            log_w0, _ = self.log_weight(state.theta, state.z_mode)
        zs = {"z": state.z, "mode": state.z_mode}
        atz = state.atz if state.atz is not None else self.theta_conditional.split_rhs(state.z)

        def z_update(theta, k):
            zs["z"], zs["mode"], p, a, new_atz = self._z_update(theta, zs["z"], zs["mode"], rng)
            return new_atz, p, a

        theta, atz, props, accs = exact_proposal(
            state.theta,
            atz,
            z_update,
            self.theta_conditional.sample_from_rhs,
            self.alpha,
            rng,
            n_sweeps,
        )
        log_w1, mode1 = self.log_weight(theta, zs["mode"])
        accept_prob, accepted = mh_accept(log_w0, log_w1, rng)
        info = SGSInfo(
            z_proposals=props,
            z_accept=accs,
            exact_accept=accept_prob,
            log_weight=log_w1 if accepted else log_w0,
        )
        if accepted:
            return SGSState(theta=theta, z=zs["z"], z_mode=mode1, log_weight=log_w1, atz=atz), info
        return state._replace(log_weight=log_w0), info


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
