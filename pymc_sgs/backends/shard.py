"""One data shard of a split problem and the z-block state that lives with it.

The z-block of the split model is independent across rows and the theta-step
only needs ``sum_i a_i (z_i - o_i) / rho^2`` (a d-vector), so a shard of rows
can keep its ``z`` where its data are and report d-vectors and scalars
(Vono, Paulin & Doucet 2022, Section 2; the same structure as global-consensus
Monte Carlo, Rendell et al. 2021). :class:`ShardWorker` runs the single-machine
rows, :class:`~pymc_sgs.rows.LocalRows`, on its rows, unchanged; it is used
in-process by :class:`~pymc_sgs.backends.LocalBackend` and as a Dask actor by
:class:`~pymc_sgs.backends.DaskBackend`, and answers the calls of
:class:`~pymc_sgs.backends.sharded.ShardedRows`.
"""

from __future__ import annotations

import numpy as np

from ..kernel import validate_alpha
from ..problem import ParamSlice, SplitProblem, SplitTerm
from ..rows import LocalRows
from ..weights import N_NODES

__all__ = ["ShardWorker", "split_rows", "row_shard", "shard_problem_from_arrays"]


def split_rows(problem: SplitProblem, n_shards: int) -> list:
    """Cut every split term of ``problem`` into ``n_shards`` row blocks.

    Shard ``k`` holds block ``k`` of every term (as contiguous as
    :func:`numpy.array_split` makes them), so the layout depends only on the
    row counts and ``n_shards``. Gaussian terms and the prior stay with the
    caller: they enter the theta-step, which is not distributed.
    """
    return [row_shard(problem, n_shards, k) for k in range(n_shards)]


def row_shard(problem: SplitProblem, n_shards: int, k: int) -> SplitProblem:
    """Shard ``k`` of :func:`split_rows` alone (to send a lost shard's rows again)."""
    terms = []
    for term in problem.split_terms:
        bounds = np.linspace(0, term.n, n_shards + 1).round().astype(int)
        sl = slice(bounds[k], bounds[k + 1])
        trials = None if term.trials is None else np.broadcast_to(term.trials, (term.n,))[sl]
        terms.append(
            SplitTerm(
                name=term.name,
                family=term.family,
                A=np.ascontiguousarray(term.A[sl]),
                offset=np.ascontiguousarray(np.broadcast_to(term.offset, (term.n,))[sl]),
                y=np.ascontiguousarray(term.y[sl]),
                trials=None if trials is None else np.ascontiguousarray(trials),
            )
        )
    return _rows_only_problem(terms, problem.d)


def shard_problem_from_arrays(name, family, d, X, y, offset=None, trials=None) -> SplitProblem:
    """A shard built from raw arrays (one chunk of user-supplied data), with checks.

    Raises ``ValueError`` when the chunk has the wrong number of columns,
    non-finite values, or responses outside the family's support.
    """
    X = np.asarray(X, dtype=float)
    y = np.asarray(y, dtype=float).ravel()
    if X.ndim != 2 or X.shape[1] != d:
        raise ValueError(
            f"X must have d={d} columns (the coefficients of the split term, in the order "
            f"of the step's detected.problem.params); received a chunk of shape {X.shape}."
        )
    if y.shape[0] != X.shape[0]:
        raise ValueError(
            f"y must have one value per row of X; received a chunk with {y.shape[0]} values "
            f"for {X.shape[0]} rows."
        )
    if not np.all(np.isfinite(X)):
        raise ValueError("X must be finite; a chunk contains NaN/inf values.")
    n = X.shape[0]
    off = (
        np.zeros(n) if offset is None else np.broadcast_to(np.asarray(offset, float).ravel(), (n,))
    )
    if not np.all(np.isfinite(off)):
        raise ValueError("offset must be finite; a chunk contains NaN/inf values.")
    tr = None if trials is None else np.broadcast_to(np.asarray(trials, float).ravel(), (n,))
    family.validate(y, tr, "y")
    term = SplitTerm(
        name=name,
        family=family,
        A=np.ascontiguousarray(X),
        offset=np.ascontiguousarray(off),
        y=np.ascontiguousarray(y),
        trials=None if tr is None else np.ascontiguousarray(tr),
    )
    return _rows_only_problem([term], d)


def _rows_only_problem(terms, d) -> SplitProblem:
    # a shard holds split rows only; the prior (the caller's) is a placeholder
    return SplitProblem(
        params=(ParamSlice("theta", (d,), 0, d),),
        prior_mean=np.zeros(d),
        prior_precision=np.eye(d),
        split_terms=tuple(terms),
    )


def _with_own_arrays(problem: SplitProblem) -> SplitProblem:
    """The problem with freshly allocated copies of its row data.

    Buffers received from another process can sit at any offset, and the
    rounding of BLAS products can depend on the alignment; fresh NumPy
    allocations make a shard compute bit for bit what it computes in-process.
    """
    terms = tuple(
        SplitTerm(
            name=t.name,
            family=t.family,
            A=np.array(t.A, dtype=float, order="C"),
            offset=np.array(t.offset, dtype=float),
            y=np.array(t.y, dtype=float),
            trials=None if t.trials is None else np.array(t.trials, dtype=float),
        )
        for t in problem.split_terms
    )
    return SplitProblem(
        params=problem.params,
        prior_mean=problem.prior_mean,
        prior_precision=problem.prior_precision,
        split_terms=terms,
    )


class ShardWorker:
    """The z-block of one shard: its rows, its ``z``, its Generator.

    Every method takes the current ``theta`` (and ``rho``) and returns only
    d-vectors and scalars; ``z`` and the warm-start modes stay here between
    calls. The arithmetic is that of :class:`~pymc_sgs.rows.LocalRows` on the
    shard's rows.

    Parameters
    ----------
    problem : SplitProblem
        The shard's split terms (see :func:`split_rows`).
    alpha, n_nodes, engine
        As for :class:`~pymc_sgs.kernel.SplitGibbsKernel`.
    """

    def __init__(
        self, problem: SplitProblem, alpha: float, n_nodes: int = N_NODES, engine: str = "auto"
    ):
        problem = _with_own_arrays(problem)
        if engine not in ("auto", "numba", "numpy"):
            raise ValueError(f"engine must be 'auto', 'numba' or 'numpy'; received {engine!r}.")
        self.rows = LocalRows(problem, 1.0, validate_alpha(alpha), n_nodes=n_nodes, engine=engine)
        self.n = problem.n_split
        self.rng = None
        self.z = self.z_mode = None
        self._saved = None
        self._shift_pending = None

    def batch(self, calls):
        """Run ``[(method name, args), ...]`` in order (one round trip); the last result."""
        out = None
        for name, args in calls:
            out = getattr(self, name)(*args)
        return out

    def summary(self):
        """``(n_rows, A^T A)``: the shard's share of the theta-step precision."""
        A = self.rows.A
        return self.n, A.T @ A

    def _set_rho(self, rho):
        if float(self.rows.rho) != rho:
            self.rows.set_rho(rho)

    def start(self, seed_seq, theta, rho):
        """New chain: own Generator from ``seed_seq``, z drawn exactly from ``z | theta``.

        Also how a lost shard is rebuilt in a running chain (see
        :class:`~pymc_sgs.backends.sharded.ShardedRows`). Returns the shard's
        ``A^T ((z - o) / rho^2)``.
        """
        self.rng = np.random.default_rng(seed_seq)
        self._set_rho(rho)
        self.z, self.z_mode, atz = self.rows.start(np.asarray(theta, dtype=float).copy(), self.rng)
        # restore() right after a start keeps the drawn z: a rebuilt shard has no older z to
        # go back to, and its fresh draw given theta is what a rejected proposal returns to
        self._saved = (self.z, self.z_mode)
        self._shift_pending = None
        return atz

    def split_rhs(self, rho):
        """``A^T ((z - o) / rho^2)`` of the current z (after rho changed)."""
        self._set_rho(rho)
        return self.rows.split_rhs(self.z)

    def sample_z(self, theta, rho, checkpoint=False):
        """Exact draw of the shard's z given ``theta``: ``(A^T z / rho^2, proposals)``."""
        self._set_rho(rho)
        self._checkpoint(checkpoint)
        # proposals per exactly drawn row (rows of a non-log-concave family move by MH; their
        # acceptance is not reported through the shards)
        self.z, self.z_mode, per_row, _, atz = self.rows.sample_z(
            theta, self.z, self.z_mode, self.rng
        )
        return atz, float(per_row * self.n)

    def z_pass(self, theta, rho, weights, checkpoint=False):
        """Over-relaxed z-move at ``theta`` (and its weight): ``(atz, accept_sum, log_w)``.

        ``accept_sum`` is the shard's mean acceptance times its row count, so
        the sums over shards divided by ``n`` give the kernel's mean.
        """
        self._set_rho(rho)
        self._checkpoint(checkpoint)
        self.z, self.z_mode, acc, log_w, atz = self.rows.z_pass(
            theta, self.z, self.z_mode, self.rng, weights
        )
        return atz, acc * self.n, log_w

    def log_weight(self, theta, rho, keep_modes):
        """The shard's part of ``log pi(theta) - log pi_rho(theta)``.

        With ``keep_modes`` the modes of ``z | theta`` found on the way become
        the warm start of the next z-update (as in the single-machine sweep).
        """
        self._set_rho(rho)
        log_w, mode = self.rows.log_weight(theta, self.z_mode)
        if keep_modes:
            self.z_mode = mode
        return log_w

    # ------------------------------------------------ Laplace start and shift move
    def laplace_terms(self, theta, need_derivatives=True):
        """``(value, gradient, Hessian)`` of the shard's ``sum_i U_i(a_i^T theta + o_i)``."""
        d = self.rows.d
        zero = (0.0, np.zeros(d), np.zeros((d, d))) if need_derivatives else (0.0, None, None)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            val, grad, hess = self.rows.add_laplace_terms(theta, *zero, need_derivatives)
        return float(val), grad, hess

    def shift_setup(self, mean, chol, offset=True):
        """The shard's shares of the shift move's constants at the Laplace mode ``mean``:
        ``(sum_i U_i'', row count, sum_i U_i^(3) a_i |L^-1 a_i|^2 or None)``."""
        return self.rows.shift_constants(mean, chol, offset)

    def log_weight_var_parts(self, mode, chol, rho):
        """The shard's ``(g, W)`` of :func:`pymc_sgs.rho.laplace_log_weight_var` (pilot rho)."""
        return self.rows.log_weight_var_parts(mode, chol, rho)

    def shift_propose(self, delta):
        """``sum_i [U_i(z_i + a_i^T delta) - U_i(z_i)]`` over the shard; the moved z is kept
        until :meth:`shift_commit` (or replaced by the next proposal)."""
        change, z_prop, a_delta = self.rows.shift_propose(self.z, delta)
        self._shift_pending = (z_prop, a_delta)
        return change

    def shift_commit(self):
        """Accept the pending shift: ``z + A delta``, and the modes shifted with it."""
        z_prop, a_delta = self._shift_pending
        self.z, self.z_mode = self.rows.shift_commit(None, self.z_mode, z_prop, a_delta)
        self._shift_pending = None
        return True

    def _checkpoint(self, checkpoint):
        if checkpoint:
            self._saved = (self.z, self.z_mode)

    def restore(self):
        """Back to the z saved by the last ``checkpoint=True`` call (rejected MH proposal)."""
        self.z, self.z_mode = self._saved
        return True
