"""Structured factorization of a mixed model's coefficient precision.

Given the split variables (or, for a linear mixed model, the data), the coefficients
``c = (beta, v_1, ..., v_T)`` of :class:`~pymc_sgs.mixed.problem.MixedProblem` are
Gaussian with precision

    Q(h) = A^T W A / s^2 + diag(lambda(h)),

``A = [X | Z_1 | ... | Z_T]`` (``Z_t`` one non-zero per row), ``W`` a diagonal row weight
(the identity except in Newton steps), ``s`` the split coupling (or the observation sd)
and ``lambda`` the prior precisions (``1 / sd_t^2`` for the levels of term ``t``). Only
``lambda`` and ``s`` change from one hyperparameter value to the next, so the Gram pieces
are computed once.

Three factorizations, all exact (a small model's ``Q`` is factored densely):

* :class:`SchurFactor`: the terms of the grouping factor with the most levels form a
  block-diagonal ``Q_BB`` (``k x k`` blocks for ``k`` terms on that factor); it is
  eliminated level by level and the Schur complement onto everything else (the common
  coefficients and the other factors) is factored densely. This is the one-factor
  elimination of lme4's penalised least squares, and it is the fast path whenever the
  rest is at most :data:`DENSE_MAX` coefficients.
* :class:`SparseFactor`: a sparse LDL^T (QDLDL with AMD ordering; Stellato et al.,
  2020) of all of ``Q``, for crossed factors with many levels on both sides.

All expose ``logdet``, ``solve``, ``sample`` (``N(0, Q^-1)`` from standard normals) and
``whiten`` (its inverse); :class:`MixedPrecision` picks one.

References
----------
Bates, D., Maechler, M., Bolker, B. and Walker, S. (2015). Fitting linear mixed-effects
models using lme4. Journal of Statistical Software 67(1), section 3.
Stellato, B., Banjac, G., Goulart, P., Bemporad, A. and Boyd, S. (2020). OSQP: an
operator splitting solver for quadratic programs. Math. Prog. Comp. 12, 637-672.
"""

from __future__ import annotations

import copy

import numpy as np
import scipy.sparse as sp
from numba import njit
from scipy.linalg.lapack import dpotrf as _potrf
from scipy.linalg.lapack import dpotrs as _potrs
from scipy.linalg.lapack import dtrtrs as _trtrs

from .prior import PriorPrecision

__all__ = [
    "DENSE_MAX",
    "DENSE_SMALL",
    "DenseFactor",
    "MixedPrecision",
    "SCHUR_ENGINES",
    "SchurFactor",
    "SparseFactor",
    "design_matrix",
]

#: models with at most this many coefficients factor Q densely
DENSE_SMALL = 64

#: ... and at most this many entries in a dense copy of the design
DENSE_ROWS = 2_000_000

#: largest Schur complement (common coefficients plus the levels of all but the largest
#: grouping factor) factored densely; beyond it the sparse LDL^T is used
DENSE_MAX = 2500

#: ``Q_BR`` (coefficients of the largest factor x the rest) is kept as a dense array when
#: the dense Schur update costs at most this many multiply-adds (``|B| |R|^2``): below it,
#: SciPy's per-call sparse bookkeeping costs more than the dense arithmetic (lme4's
#: grouseticks, 118 x 66: a factorization took 1.3 ms, most of it sparse matrix setup;
#: sampling time 9 s -> 6 s for 2 x 2000 iterations)
DENSE_BR = 4_000_000

#: how a sparse ``Q_BR`` and its Gram pieces are computed: ``"numba"`` accumulates
#: ``Q_RB Q_BB^-1 Q_BR`` level by level into the lower triangle of the dense complement
#: (:func:`_schur_downdate`) and the weighted Gram pieces row by row into a fixed pattern
#: (:func:`_weighted_gram`); ``"scipy"``, the reference, forms sparse products and
#: densifies them. On lme4's InstEval (2,972 x 1,152, 119,387 non-zeros) the downdate
#: takes 4.6 ms instead of 23
SCHUR_ENGINES = ("numba", "scipy")


@njit(cache=True)
def _schur_downdate(indptr, indices, data, inv, scale, S):  # pragma: no cover - compiled
    """``S -= scale * G^T blockdiag(inv) G`` on the lower triangle of ``S``.

    ``G`` is CSR with sorted column indices and ``L k`` rows, level-major (row ``l k + a`` is
    term ``a`` of level ``l``); ``inv`` is ``(L, k, k)``. Each level adds the outer products
    of its rows' non-zeros, so the work is the sum over levels of their squared non-zero
    counts, not a sparse product's symbolic pass and a dense copy.
    """
    L, k = inv.shape[0], inv.shape[1]
    for lev in range(L):
        for a in range(k):
            ra = lev * k + a
            for b in range(k):
                rb = lev * k + b
                w = scale * inv[lev, a, b]
                if w == 0.0:
                    continue
                qs, qe = indptr[rb], indptr[rb + 1]
                for p in range(indptr[ra], indptr[ra + 1]):
                    i = indices[p]
                    wv = w * data[p]
                    for q in range(qs, qe):
                        j = indices[q]
                        if j > i:
                            break  # sorted: the rest of the row is above the diagonal
                        S[i, j] -= wv * data[q]


def _factor_pairs(Q):
    """``(C, C^-T, Q^-1, log det Q)`` of the ``(L, 2, 2)`` blocks ``Q = C C^T`` in closed
    form: the blocks of a random intercept and slope, for which numpy's batched LAPACK calls
    cost more than the arithmetic. ``LinAlgError`` if a block is not positive definite."""
    a, b, c = Q[:, 0, 0], Q[:, 1, 0], Q[:, 1, 1]
    # checked before each square root (NaN fails the checks too)
    if not np.all(a > 0):
        raise np.linalg.LinAlgError("precision not positive definite")
    l11 = np.sqrt(a)
    l21 = b / l11
    d = c - l21 * l21
    if not np.all(d > 0):
        raise np.linalg.LinAlgError("precision not positive definite")
    l22 = np.sqrt(d)
    i11, i22 = 1.0 / l11, 1.0 / l22
    i21 = -l21 * i11 * i22
    chol = np.zeros_like(Q)
    chol[:, 0, 0], chol[:, 1, 0], chol[:, 1, 1] = l11, l21, l22
    inv_T = np.zeros_like(Q)  # C^-T, upper triangular
    inv_T[:, 0, 0], inv_T[:, 0, 1], inv_T[:, 1, 1] = i11, i21, i22
    inv = np.empty_like(Q)  # C^-T C^-1
    inv[:, 0, 0] = i11 * i11 + i21 * i21
    inv[:, 0, 1] = inv[:, 1, 0] = i21 * i22
    inv[:, 1, 1] = i22 * i22
    return chol, inv_T, inv, float(np.sum(np.log(a * d)))


def design_matrix(problem) -> sp.csr_matrix:
    """``A = [X | Z_1 | ... | Z_T]`` as a CSR matrix: O(n x (p + T)) memory."""
    n = problem.n
    blocks = [sp.csr_matrix(problem.X)] if problem.p else []
    rows = np.arange(n)
    for t in problem.terms:
        blocks.append(sp.csr_matrix((t.values, (rows, t.index)), shape=(n, t.n_levels)))
    if not blocks:
        return sp.csr_matrix((n, 0))
    return sp.hstack(blocks, format="csr")


@njit(cache=True)
def _weighted_gram(
    indptr, indices, data, where, at, w, n_common, br_indptr, br_indices, br_data, GRR
):  # pragma: no cover - compiled
    """``A_B^T W A_R`` into ``br_data`` (a fixed CSR pattern) and ``A_R^T W A_R`` into
    ``GRR``, row by row of ``A`` (CSR, sorted columns).

    ``where[c]`` is 1 when column ``c`` of ``A`` is in the block-diagonal part and ``at[c]``
    its row of ``Q_BR`` there, else its position in ``R``. Each row adds the products of its
    own non-zeros: work ``sum_i nnz_i^2``, with no sparse product's symbolic pass. The
    block of the first ``n_common`` columns (the common coefficients, first in both ``A``
    and ``R``) is left at zero: the caller adds it with a dense product.
    """
    br_data[:] = 0.0
    GRR[:, :] = 0.0
    for i in range(indptr.size - 1):
        wi = w[i]
        s, e = indptr[i], indptr[i + 1]
        for p in range(s, e):
            cp = indices[p]
            if where[cp] == 1:
                ptr = br_indptr[at[cp]]
                v = wi * data[p]
                for q in range(s, e):
                    cq = indices[q]
                    if where[cq] == 1:
                        continue
                    r = at[cq]
                    # both sorted: walk row b of the pattern to column r (it is there)
                    while br_indices[ptr] < r:
                        ptr += 1
                    br_data[ptr] += v * data[q]
            elif cp >= n_common:  # columns are sorted: a common one pairs only with common
                r1 = at[cp]
                v = wi * data[p]
                for q in range(s, p + 1):
                    cq = indices[q]
                    if where[cq] == 0:
                        r2 = at[cq]
                        x = v * data[q]
                        GRR[r1, r2] += x
                        if r2 != r1:
                            GRR[r2, r1] += x


class SchurFactor:
    """``Q`` factored by eliminating a block-diagonal part (see the module docstring)."""

    __slots__ = ("B", "R", "Binv", "Bchol", "BcholInvT", "QBR", "chol_S", "logdet", "dim")

    def __init__(self, B, R, Binv, Bchol, BcholInvT, QBR, chol_S, logdet, dim):
        self.B, self.R, self.Binv, self.Bchol, self.QBR = B, R, Binv, Bchol, QBR
        self.chol_S, self.logdet, self.dim = chol_S, logdet, dim
        # C^-T block by block (None for k = 1): a sample multiplies by it instead of solving,
        # which for many small blocks costs numpy's batched solve more than the arithmetic
        self.BcholInvT = BcholInvT

    def sample(self, eps) -> np.ndarray:
        """``x ~ N(0, Q^{-1})`` from ``eps ~ N(0, I)``, with ``x^T Q x = eps^T eps``.

        ``x_R = L_S^{-T} eps_R`` (``S = L_S L_S^T`` the Schur complement), then
        ``x_B = -Q_BB^{-1} Q_BR x_R + C^{-T} eps_B`` with ``Q_BB = C C^T`` block by block.
        """
        x = np.empty(self.dim)
        L, k, _ = self.Bchol.shape
        eB = eps[: L * k]
        if k == 1:
            zB = eB / self.Bchol[:, 0, 0]
        else:
            zB = np.einsum("lab,lb->la", self.BcholInvT, eB.reshape(L, k)).ravel()
        if self.R.size:
            # LAPACK directly, as in DenseFactor: SciPy's wrappers cost more than these
            # small solves, which run several times per iteration
            xR = _trtrs(self.chol_S, eps[L * k :], lower=1, trans=1)[0]
            x[self.R] = xR
            x[self.B] = zB - self._block_solve(self.QBR @ xR)
        else:
            x[self.B] = zB
        return x

    def whiten(self, x) -> np.ndarray:
        """The inverse of :meth:`sample`: ``eps`` with ``sample(eps) == x``.

        ``eps_R = L_S^T x_R`` and ``eps_B = C^T (x_B + Q_BB^{-1} Q_BR x_R)``.
        """
        L, k, _ = self.Bchol.shape
        eps = np.empty(self.dim)
        xB = x[self.B]
        if self.R.size:
            xR = x[self.R]
            eps[L * k :] = self.chol_S.T @ xR
            xB = xB + self._block_solve(self.QBR @ xR)
        if k == 1:
            eps[: L * k] = self.Bchol[:, 0, 0] * xB
        else:
            eps[: L * k] = np.einsum("lba,lb->la", self.Bchol, xB.reshape(L, k)).ravel()
        return eps

    def _block_solve(self, v):
        """``Q_BB^{-1} v``; ``Binv`` is the (L, k, k) array of block inverses."""
        L, k, _ = self.Binv.shape
        if k == 1:
            return self.Binv[:, 0, 0] * v
        return np.einsum("lab,lb->la", self.Binv, v.reshape(L, k)).ravel()

    def solve(self, b) -> np.ndarray:
        """``Q^{-1} b``."""
        bB, bR = b[self.B], b[self.R]
        x = np.empty(self.dim)
        if self.R.size:
            y = self._block_solve(bB)
            xR = _potrs(self.chol_S, bR - self.QBR.T @ y, lower=1)[0]
            x[self.R] = xR
            x[self.B] = self._block_solve(bB - self.QBR @ xR)
        else:
            x[self.B] = self._block_solve(bB)
        return x


class DenseFactor:
    """``Q = L L^T`` densely, for small models where sparse bookkeeping costs more."""

    __slots__ = ("chol", "logdet")

    def __init__(self, chol, logdet):
        self.chol, self.logdet = chol, logdet

    def solve(self, b) -> np.ndarray:
        # LAPACK directly: these small solves run several times per iteration, and SciPy's
        # wrappers cost more than the arithmetic
        x, info = _potrs(self.chol, b, lower=1)
        return x

    def sample(self, eps) -> np.ndarray:
        """``x ~ N(0, Q^{-1})`` from ``eps ~ N(0, I)``: ``L^{-T} eps``, so ``x^T Q x = eps^T eps``."""
        x, info = _trtrs(self.chol, eps, lower=1, trans=1)
        return x

    def whiten(self, x) -> np.ndarray:
        """The inverse of :meth:`sample`: ``L^T x``."""
        return self.chol.T @ x


class SparseFactor:
    """``Q`` as a sparse ``P (I + L) D (I + L)^T P^T`` (QDLDL)."""

    __slots__ = ("solver", "logdet")

    def __init__(self, solver, logdet):
        self.solver, self.logdet = solver, logdet

    def solve(self, b) -> np.ndarray:
        return self.solver.solve(np.ascontiguousarray(b, dtype=float))

    def sample(self, eps) -> np.ndarray:
        """``x ~ N(0, Q^{-1})``: ``P (I + L)^{-T} D^{-1/2} eps``, so ``x^T Q x = eps^T eps``."""
        import scipy.sparse.linalg as spla

        L, d, perm = self.solver.factors()
        n = d.size
        upper = sp.csr_matrix((sp.eye(n) + L).T)
        y = spla.spsolve_triangular(upper, eps / np.sqrt(d), lower=False, unit_diagonal=True)
        x = np.empty(n)
        x[perm] = y
        return x

    def whiten(self, x) -> np.ndarray:
        """The inverse of :meth:`sample`: ``D^{1/2} (I + L)^T P^T x``."""
        L, d, perm = self.solver.factors()
        y = np.asarray(x, dtype=float)[perm]
        return np.sqrt(d) * (y + L.T @ y)


class MixedPrecision:
    """The Gram pieces of ``A^T W A`` and the factorization of ``Q`` for any ``(lambda, s)``.

    Parameters
    ----------
    problem : MixedProblem
    row_weights : ndarray, optional
        ``W`` (default the identity).
    method : {"auto", "dense", "schur", "sparse"}
        ``"auto"`` factors ``Q`` densely up to :data:`DENSE_SMALL` coefficients, else it
        eliminates the largest grouping factor and factors the rest densely
        when the rest has at most :data:`DENSE_MAX` coefficients, else ``"sparse"``.
    schur_engine : {"numba", "scipy"}
        How a sparse coupling enters the Schur complement (:data:`SCHUR_ENGINES`);
        ``"scipy"`` is the reference the compiled loop is tested against.
    """

    def __init__(
        self, problem, row_weights=None, method: str = "auto", A=None, schur_engine="numba"
    ):
        if method not in ("auto", "dense", "schur", "sparse"):
            raise ValueError(
                f"method must be 'auto', 'dense', 'schur' or 'sparse'; received {method!r}"
            )
        if schur_engine not in SCHUR_ENGINES:
            raise ValueError(
                f"schur_engine must be one of {SCHUR_ENGINES}; received {schur_engine!r}"
            )
        self.schur_engine = schur_engine
        self.problem = problem
        self.A = design_matrix(problem) if A is None else A
        n, self.dim = self.A.shape
        starts = np.cumsum([problem.p] + [t.n_levels for t in problem.terms])
        self.term_start = starts[:-1]
        # the grouping factor with the most levels goes into the block-diagonal part
        factors = {}
        for i, t in enumerate(problem.terms):
            factors.setdefault(t.factor, []).append(i)
        big = max(factors.values(), key=lambda ts: problem.terms[ts[0]].n_levels, default=[])
        L = problem.terms[big[0]].n_levels if big else 0
        k = len(big)
        B = (
            np.stack([self.term_start[i] + np.arange(L) for i in big], axis=1).ravel()
            if big
            else np.zeros(0, dtype=np.intp)
        )  # level-major: (level 0: term 1, term 2, ...), (level 1: ...)
        R = np.setdiff1d(np.arange(self.dim), B)
        #: each correlated block's coefficients, an (levels x terms) array of positions
        self.block_positions = [
            np.stack(
                [self.term_start[i] + np.arange(problem.terms[i].n_levels) for i in ct.terms], 1
            )
            for ct in problem.correlated
        ]
        if method == "auto":
            if self.dim <= DENSE_SMALL and n * self.dim <= DENSE_ROWS:
                method = "dense"
            else:
                method = "schur" if R.size <= DENSE_MAX else "sparse"
        self.method = method
        if method == "dense":
            self._Ad = self.A.toarray()
            self._diag = np.diag_indices(self.dim)
        elif method == "schur":
            self.B, self.R, self.L, self.k, self._big = B, R, L, k, big
            # where each correlated block's precision goes: its terms' columns within the
            # Q_BB blocks (on the largest factor), or its positions in the dense remainder
            self._block_places = []
            for pos, ct in zip(self.block_positions, problem.correlated):
                if set(ct.terms) <= set(big):
                    self._block_places.append(("B", np.array([big.index(i) for i in ct.terms])))
                else:
                    self._block_places.append(("R", np.searchsorted(R, pos)))
            # with no other grouping factor, R is the common coefficients: A_B^T W A_R is a
            # dense (L k) x p matrix filled by bincounts
            self._common_only = R.size == problem.p
            self._dense_BR = B.size * R.size**2 <= DENSE_BR
            # a sparse coupling's Gram pieces by the compiled loop (else SciPy's products)
            self._gram_loop = (
                not self._common_only and not self._dense_BR and schur_engine == "numba"
            )
            if self._gram_loop:
                A_csr = self.A
                if not (sp.issparse(A_csr) and A_csr.format == "csr" and A_csr.has_sorted_indices):
                    A_csr = sp.csr_matrix(self.A, copy=True)  # sorted without touching A
                    A_csr.sort_indices()
                self._A_csr = A_csr
                # the pattern of A_B^T W A_R from A's structure (a product of the values
                # would drop the entries that cancel or are zero, e.g. a slope at x = 0)
                ones = sp.csr_matrix(
                    (np.ones(A_csr.nnz), A_csr.indices, A_csr.indptr), shape=A_csr.shape
                )
                pattern = sp.csr_matrix(ones[:, B].T @ ones[:, R])
                pattern.sort_indices()
                self._br_pattern = (pattern.indptr, pattern.indices, pattern.shape)
                # where each column of A goes: 1 for the block-diagonal part, and its
                # position there or in R
                where = np.zeros(self.dim, dtype=np.int8)
                where[B] = 1
                at = np.empty(self.dim, dtype=np.int64)
                at[B] = np.arange(B.size)
                at[R] = np.arange(R.size)
                self._gram_maps = (where, at)
            elif not self._common_only:
                self._AB_T = sp.csr_matrix(self.A[:, B].T)
                self._AR = sp.csr_matrix(self.A[:, R])
        else:
            G = sp.csc_matrix(self.A.T @ self.A)
            for pos in self.block_positions:
                L_b, k_b = pos.shape
                rows = np.repeat(pos, k_b, axis=1).ravel()
                cols = np.tile(pos, (1, k_b)).ravel()
                G = G + sp.csc_matrix((np.ones(rows.size), (rows, cols)), shape=G.shape)
            pattern = sp.triu(G + sp.eye(self.dim), format="csc")
            pattern.sort_indices()
            self.pattern = pattern
            cols = np.repeat(np.arange(self.dim), np.diff(pattern.indptr))
            self._keys = cols.astype(np.int64) * self.dim + pattern.indices
            self.diag_pos = np.searchsorted(
                self._keys, np.arange(self.dim, dtype=np.int64) * (self.dim + 1)
            )
            # each correlated block's upper-triangle entries: data positions and (i, j)
            self._block_entries = []
            for pos in self.block_positions:
                k_b = pos.shape[1]
                ii, jj = np.meshgrid(np.arange(k_b), np.arange(k_b), indexing="ij")
                r, c = pos[:, ii.ravel()], pos[:, jj.ravel()]
                upper = r <= c
                keys = c[upper].astype(np.int64) * self.dim + r[upper]
                which = np.broadcast_to(np.arange(k_b * k_b), r.shape)[upper]
                self._block_entries.append(
                    (np.searchsorted(self._keys, keys), ii.ravel()[which], jj.ravel()[which])
                )
            self._solvers = [None, None]
        self._set_weights(None if row_weights is None else np.asarray(row_weights, dtype=float))

    def factor_cost(self) -> float:
        """Multiply-adds of one :meth:`factor`, roughly: what a move that needs a
        factorization costs, against an iteration's other work.

        Dense: ``d^3 / 6``. Schur: the level blocks, the coupling's update of the complement
        (``sum`` of squared non-zeros per row of ``Q_BR``, or ``|B| |R|^2`` dense) and the
        complement's Cholesky factor, ``|R|^3 / 6``. Sparse: infinite (used only beyond
        :data:`DENSE_MAX` coefficients outside the largest factor).
        """
        if self.method == "dense":
            return self.dim**3 / 6.0
        if self.method == "sparse":
            return float("inf")
        B, R = self.B.size, self.R.size
        if R and B and sp.issparse(self.GBR):
            update = float(np.sum(np.diff(self.GBR.indptr).astype(float) ** 2))
        else:
            update = float(B) * R * R
        return self.L * self.k**3 + update + R**3 / 6.0

    def reweighted(self, row_weights) -> "MixedPrecision":
        """The same structure with row weights ``W`` (Newton steps): only the Gram values change."""
        other = copy.copy(self)
        if self.method == "sparse":
            other._solvers = [None, None]
        other._set_weights(np.asarray(row_weights, dtype=float))
        return other

    def set_row_weights(self, row_weights) -> None:
        """Replace ``W`` in place, keeping the sparse solvers (and their symbolic analysis).

        For a sampler whose row weights change every iteration (Pólya-Gamma variables); an
        object shared with others should be :meth:`reweighted` instead.
        """
        self._set_weights(np.asarray(row_weights, dtype=float))

    def _set_weights(self, w):
        problem = self.problem
        if self.method == "dense":
            Ad = self._Ad
            self.G = Ad.T @ (Ad if w is None else Ad * w[:, None])
            return
        if self.method == "schur":
            L, k, big = self.L, self.k, self._big
            GBB = np.zeros((L, k, k))
            for a, ia in enumerate(big):
                for b, ib in enumerate(big[: a + 1]):
                    ta, tb = problem.terms[ia], problem.terms[ib]
                    prod = ta.values * tb.values if w is None else ta.values * tb.values * w
                    GBB[:, a, b] = GBB[:, b, a] = np.bincount(ta.index, prod, minlength=L)
            self.GBB = GBB
            X = problem.X
            WX = X if w is None else X * w[:, None]
            if self._common_only:
                GBR = np.zeros((L, k, problem.p))
                for a, ia in enumerate(big):
                    t = problem.terms[ia]
                    for j in range(problem.p):
                        GBR[:, a, j] = np.bincount(t.index, t.values * WX[:, j], minlength=L)
                self.GBR = GBR.reshape(L * k, problem.p)
                self.GRR = X.T @ WX
            elif self._gram_loop:
                indptr, indices, shape = self._br_pattern
                A = self._A_csr
                br_data = np.empty(indices.size)
                GRR = np.empty((self.R.size, self.R.size))
                _weighted_gram(
                    A.indptr,
                    A.indices,
                    A.data,
                    *self._gram_maps,
                    np.ones(A.shape[0]) if w is None else w,
                    problem.p,
                    indptr,
                    indices,
                    br_data,
                    GRR,
                )
                self.GBR = sp.csr_matrix((br_data, indices, indptr), shape=shape)
                GRR[: problem.p, : problem.p] = X.T @ WX
                self.GRR = GRR
            else:
                WAR = self._AR if w is None else sp.diags(w) @ self._AR
                GBR = sp.csr_matrix(self._AB_T @ WAR)
                GBR.sort_indices()  # _schur_downdate reads each row's columns in order
                self.GBR = GBR.toarray() if self._dense_BR else GBR
                self.GRR = (self._AR.T @ WAR).toarray()
            return
        WA = self.A if w is None else sp.diags(w) @ self.A
        G = sp.triu(sp.csc_matrix(self.A.T @ WA), format="coo")
        keys = G.col.astype(np.int64) * self.dim + G.row
        data = np.zeros(self._keys.size)
        np.add.at(data, np.searchsorted(self._keys, keys), G.data)
        self.G_data = data

    def factor(self, prior, inv_s2: float, slot: int = 0):
        """Factor ``Q = inv_s2 * A^T W A + Lambda``.

        ``prior`` is ``Lambda``, a :class:`~pymc_sgs.mixed.prior.PriorPrecision` (a plain
        array is its diagonal).

        ``slot`` (0 or 1) selects which of two reusable sparse solvers receives the
        factorization, so that a proposal can be factored while the current state's
        factorization is kept.

        Raises
        ------
        numpy.linalg.LinAlgError
            If ``Q`` is not positive definite.
        """
        if isinstance(prior, PriorPrecision):
            lam, blocks = prior.diag, prior.blocks
        else:
            lam, blocks = np.asarray(prior, dtype=float), ()
        if len(blocks) != len(self.block_positions):
            raise ValueError(
                f"the prior precision has {len(blocks)} correlated blocks; the model has "
                f"{len(self.block_positions)}"
            )
        if self.method == "dense":
            Q = self.G * inv_s2
            Q[self._diag] += lam
            for pos, P in blocks:
                Q[pos[:, :, None], pos[:, None, :]] += P
            chol, info = _potrf(Q, lower=1, clean=1, overwrite_a=1)
            if info != 0:
                raise np.linalg.LinAlgError("precision not positive definite")
            return DenseFactor(chol, 2.0 * float(np.sum(np.log(np.diag(chol)))))
        if self.method == "schur":
            return self._schur(lam, blocks, inv_s2)
        return self._sparse(lam, blocks, inv_s2, slot)

    def _schur(self, lam, blocks, inv_s2):
        L, k, B, R = self.L, self.k, self.B, self.R
        QBB = self.GBB * inv_s2
        if k == 1:
            QBB[:, 0, 0] += lam[B]
        else:
            QBB[:, np.arange(k), np.arange(k)] += lam[B].reshape(L, k)
        in_R = []
        for (where, place), (_, P) in zip(self._block_places, blocks):
            if where == "B":
                QBB[:, place[:, None], place[None, :]] += P
            else:
                in_R.append((place, P))
        if k == 1:
            q = QBB[:, 0, 0]
            if np.any(~(q > 0)):
                raise np.linalg.LinAlgError("precision not positive definite")
            logdet = float(np.sum(np.log(q)))
            inv = (1.0 / q)[:, None, None]
            Bchol = np.sqrt(q)[:, None, None]
            inv_chol_T = None  # a draw divides by Bchol
        elif k == 2:
            Bchol, inv_chol_T, inv, logdet = _factor_pairs(QBB)
        else:
            chol = Bchol = np.linalg.cholesky(QBB)
            logdet = 2.0 * float(np.sum(np.log(np.diagonal(chol, axis1=1, axis2=2))))
            inv_chol_T = np.swapaxes(np.linalg.inv(chol), 1, 2)
            inv = np.einsum("lab,lcb->lac", inv_chol_T, inv_chol_T)  # Q_BB^-1 = C^-T C^-1
        QBR = self.GBR * inv_s2
        if R.size:
            S = self.GRR * inv_s2
            S.flat[:: S.shape[0] + 1] += lam[R]  # the diagonal
            for place, P in in_R:
                S[place[:, :, None], place[:, None, :]] += P
            if B.size:
                if sp.issparse(QBR) and self.schur_engine == "numba":
                    G = self.GBR
                    _schur_downdate(G.indptr, G.indices, G.data, inv, inv_s2 * inv_s2, S)
                elif sp.issparse(QBR):
                    if k == 1:
                        Binv = sp.diags(inv[:, 0, 0], format="csr")
                    else:
                        Binv = sp.bsr_matrix(
                            (inv, np.arange(L), np.arange(L + 1)), shape=(L * k, L * k)
                        ).tocsr()
                    S -= (QBR.T @ (Binv @ QBR)).toarray()
                elif k == 1:
                    S -= QBR.T @ (inv[:, 0, :] * QBR)
                else:
                    BQ = np.einsum("lab,lbj->laj", inv, QBR.reshape(L, k, -1)).reshape(L * k, -1)
                    S -= QBR.T @ BQ
            chol_S, info = _potrf(S, lower=1, clean=1)
            if info != 0:
                raise np.linalg.LinAlgError("precision not positive definite")
            logdet += 2.0 * float(np.sum(np.log(np.diag(chol_S))))
        else:
            chol_S = np.zeros((0, 0))
        return SchurFactor(B, R, inv, Bchol, inv_chol_T, QBR, chol_S, logdet, self.dim)

    def _sparse(self, lam, blocks, inv_s2, slot):
        import qdldl

        Q = self.pattern.copy()
        Q.data = self.G_data * inv_s2
        Q.data[self.diag_pos] += lam
        for (at, i, j), (_, P) in zip(self._block_entries, blocks):
            Q.data[at] += P[i, j]
        solver = self._solvers[slot]
        try:
            if solver is None:
                solver = self._solvers[slot] = qdldl.Solver(Q, upper=True)
            else:
                solver.update(Q, upper=True)
        except ValueError as err:
            raise np.linalg.LinAlgError(str(err)) from None
        d = solver.factors()[1]
        if np.any(~(d > 0)):
            raise np.linalg.LinAlgError("precision not positive definite")
        return SparseFactor(solver, float(np.sum(np.log(d))))
