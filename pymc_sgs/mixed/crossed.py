"""Blocked Gibbs for mixed models with several large grouping factors (crossed or nested).

A linear mixed model, and a logistic GLMM given its Pólya-Gamma variables ``omega`` (a
linear mixed model with row weights ``omega_i``, :mod:`pymc_sgs.mixed.polya_gamma`), is
Gaussian in its coefficients. With crossed or nested grouping factors that each have many
levels (lme4's InstEval: 2,972 students crossed with 1,128 lecturers), the collapsed
kernel's factorization of all coefficients at once is dense in every factor but the
largest (a 1,152 x 1,152 Schur complement, one to three Cholesky factorizations an
iteration). This kernel cuts the coefficients into blocks instead:

* the *core*: the common coefficients and the levels of every small grouping factor
  (at most :data:`CORE_LEVELS` levels each, :data:`CORE_MAX` coefficients in all);
* one block per large grouping factor.

It updates, for each large factor ``k`` in turn, the triple ``(h_k, core, v_k)`` given the
other large factors' levels (and ``omega``): ``h_k`` (the factor's scale, the core's
scales and a Normal likelihood's sigma) by random-walk Metropolis moves on their conditional with ``(core, v_k)``
integrated out exactly, then ``(core, v_k)`` from their Gaussian conditional. Given the
others, the levels of factor ``k`` are independent, so the precision of ``(core, v_k)`` is
an arrowhead matrix: diagonal in ``v_k``, dense in the small core, and the integration and
the draw cost ``O(n p + L_k p^2)``, linear in the data. Every step is an exact Gibbs or
Metropolis-Hastings step of the posterior, so the chain samples it exactly.

The common coefficients are in every block, so the intercept and the factors' level means
move together: the collapsed Gibbs sampler of Papaspiliopoulos, Roberts and Zanella
(2020), whose cost is proportional to the data on balanced crossed designs with known
variances (the plain Gibbs sampler's is not). Scales move with their levels, never given
them, as in the blocked sampler of Johnson, Kuehnel and Amini (2016).

References
----------
Johnson, N. A., Kuehnel, F. O. and Amini, A. N. (2016). A scalable blocked Gibbs sampling
algorithm for Gaussian and Poisson regression models. arXiv:1602.00047.
Papaspiliopoulos, O., Roberts, G. O. and Zanella, G. (2020). Scalable inference for
crossed random effects models. Biometrika 107(1), 25-40.
Polson, N. G., Scott, J. G. and Windle, J. (2013). Bayesian inference for logistic models
using Pólya-Gamma latent variables. JASA 108(504), 1339-1349.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from scipy.linalg.lapack import dpotrf, dpotrs, dtrtrs

from .kernel import MixedState, accept_prob
from .polya_gamma import PolyaGammaRows, polya_gamma_applies

__all__ = [
    "CORE_LEVELS",
    "CORE_MAX",
    "CrossedInfo",
    "CrossedKernel",
    "CrossedPlan",
    "crossed_plan",
]

#: a grouping factor with at most this many levels joins the dense core of every block
CORE_LEVELS = 64
#: ... while the core (common coefficients and those levels) has at most this many
#: coefficients
CORE_MAX = 256
#: random-walk moves of each block's hyperparameters per block and coordinate
MOVES_PER_COORD = 2


class CrossedPlan(NamedTuple):
    """How :class:`CrossedKernel` cuts a model's coefficients.

    ``core_terms`` and ``block_terms`` are positions in ``problem.terms``; ``block_hyper``
    holds, for each block, the coordinates of ``h`` its moves update (those of its own
    scale, then the core's and the observation sd's).
    """

    core_terms: tuple
    block_terms: tuple
    block_hyper: tuple


class CrossedInfo(NamedTuple):
    hyper_accept: float  # mean acceptance probability of all hyperparameter moves
    coord_accept: np.ndarray  # ... of the moves of each coordinate of h (nan: none made)


def _influence(problem, h, step: float = 0.25):
    """For each coordinate of ``h``, the set of terms whose sd it changes (numerically,
    at ``h`` and ``h + step e_j``), with ``"noise"`` for the observation sd of a linear
    mixed model; None if ``h`` is not a valid point."""
    h = np.asarray(h, dtype=float)
    lp, sds, noise = problem.hyper(h)
    if not (np.isfinite(lp) and np.all(np.isfinite(sds))):
        return None
    out = []
    for j in range(h.size):
        h2 = h.copy()
        h2[j] += step
        _, sds2, noise2 = problem.hyper(h2)
        hit = {t for t, term in enumerate(problem.terms) if sds2[term.scale] != sds[term.scale]}
        if problem.family is None and noise2 != noise:
            hit.add("noise")
        out.append(hit)
    return out


def crossed_plan(
    problem, h, core_levels: int = CORE_LEVELS, core_max: int = CORE_MAX
) -> CrossedPlan | None:
    """The blocks of :class:`CrossedKernel` for ``problem``, or None where the kernel does
    not apply or brings nothing.

    It applies to a linear mixed model or a Bernoulli or Binomial logit GLMM with
    independent group effects (no correlated blocks) whose large grouping factors (more
    than ``core_levels`` levels) carry one term each, at least two of them. Every
    coordinate of ``h`` must set the sds of the core's terms (or the observation sd) or
    the sd of one large factor's term only; this is checked numerically at ``h``, a valid
    hyperparameter value (the mode). The small factors join the core, smallest first,
    while it has at most ``core_max`` coefficients.
    """
    gaussian = problem.family is None
    if not (gaussian or polya_gamma_applies(problem.family)) or problem.correlated:
        return None
    if problem.family_params is not None:
        return None
    terms = problem.terms
    by_factor: dict = {}
    for i, t in enumerate(terms):
        by_factor.setdefault(t.factor, []).append(i)
    small = sorted(
        (f for f, idx in by_factor.items() if terms[idx[0]].n_levels <= core_levels),
        key=lambda f: terms[by_factor[f][0]].n_levels,
    )
    core, size = [], problem.p
    for f in small:
        add = sum(terms[i].n_levels for i in by_factor[f])
        if size + add > core_max:
            break
        core.extend(by_factor[f])
        size += add
    blocks = [idx for f, idx in by_factor.items() if not set(idx) <= set(core)]
    if len(blocks) < 2 or any(len(idx) != 1 for idx in blocks):
        return None
    block_terms = tuple(idx[0] for idx in blocks)
    influence = _influence(problem, h)
    if influence is None:
        return None
    core_set = set(core) | {"noise"}
    own = {b: [] for b in block_terms}
    core_h = []
    for j, hit in enumerate(influence):
        if not hit:
            return None  # a coordinate no block would move
        if hit <= core_set:
            core_h.append(j)
        elif len(hit) == 1 and next(iter(hit)) in own:
            own[next(iter(hit))].append(j)
        else:
            return None  # shared by several blocks, or by a block and the core
    return CrossedPlan(
        tuple(core),
        block_terms,
        tuple(tuple(own[b] + core_h) for b in block_terms),
    )


def _level_matrix(index, values, n_levels) -> sp.csr_matrix:
    """``Z^T`` of one term: ``n_levels x n``, row ``l`` holding the values of level ``l``'s
    rows."""
    n = index.size
    return sp.csr_matrix((values, (index, np.arange(n))), shape=(n_levels, n))


class _Pieces(NamedTuple):
    """One block's Gram pieces and data, with row weights ``W`` (``omega``, or 1 for a
    linear mixed model, whose ``1 / sigma^2`` :meth:`CrossedKernel.evaluate` applies)."""

    gram: np.ndarray  # core^T W core, without the prior
    G: np.ndarray  # (L_k, pc): Z_k^T W core
    wk: np.ndarray  # (L_k,): Z_k^T W Z_k's diagonal
    bc: np.ndarray  # core^T W r
    bk: np.ndarray  # Z_k^T W r
    rr: float = 0.0  # r^T W r (linear mixed models only: constant in h otherwise)


class _Block(NamedTuple):
    log_post: float
    chol: np.ndarray  # lower Cholesky factor of the Schur complement onto the core
    mean: np.ndarray  # the core's conditional mean
    D: np.ndarray  # the block's diagonal precision
    inv_s2: float  # 1 / sigma^2 of a linear mixed model, else 1


class CrossedKernel:
    """Exact blocked Gibbs kernel of a linear mixed model or a logistic GLMM with crossed or
    nested large factors (see the module docstring).

    Parameters
    ----------
    problem : MixedProblem
        Normal likelihood (``family`` None), or Bernoulli or Binomial with logit link.
    plan : CrossedPlan
        From :func:`crossed_plan`.

    The state is a :class:`~pymc_sgs.mixed.kernel.MixedState` with absolute coefficients
    (``z`` and ``z_mode`` None), as :class:`~pymc_sgs.mixed.polya_gamma.PolyaGammaKernel`'s.
    """

    def __init__(self, problem, plan: CrossedPlan):
        self.gaussian = problem.family is None
        if not (self.gaussian or polya_gamma_applies(problem.family)):
            raise ValueError(
                "CrossedKernel needs a Normal likelihood, or a Bernoulli or Binomial "
                f"likelihood with logit link; received {problem.family!r}"
            )
        self.problem, self.plan = problem, plan
        p, terms = problem.p, problem.terms
        self.rows = None if self.gaussian else PolyaGammaRows(problem)
        self.X = np.ascontiguousarray(problem.X, dtype=float)
        self.offset = problem.offset + (self.X @ problem.beta_mean if p else 0.0)
        starts = np.cumsum([p] + [t.n_levels for t in terms])
        self.slices = [slice(int(starts[i]), int(starts[i + 1])) for i in range(len(terms))]
        self.dim = problem.dim
        self.coef_mean = np.concatenate([problem.beta_mean, np.zeros(self.dim - p)])
        # the core's coefficients inside the full vector, in core order
        self.core_pos = np.concatenate(
            [np.arange(p)] + [np.arange(self.dim)[self.slices[i]] for i in plan.core_terms]
        ).astype(np.intp)
        self.pc = self.core_pos.size
        self._core_ZT = [
            _level_matrix(terms[i].index, terms[i].values, terms[i].n_levels)
            for i in plan.core_terms
        ]
        self._block_ZT = [
            _level_matrix(terms[i].index, terms[i].values, terms[i].n_levels)
            for i in plan.block_terms
        ]
        self._block_values = [np.asarray(terms[i].values, dtype=float) for i in plan.block_terms]

        def pair(a, b):
            # the rows' cells of Z_a^T W Z_b, flattened, and their value products
            ta, tb = terms[a], terms[b]
            index = ta.index.astype(np.intp) * tb.n_levels + tb.index.astype(np.intp)
            return index, ta.values * tb.values, (ta.n_levels, tb.n_levels)

        core = plan.core_terms
        self._core_pairs = [[pair(a, b) for b in core[: i + 1]] for i, a in enumerate(core)]
        self._block_pairs = [[pair(k, c) for c in core] for k in plan.block_terms]
        # core columns of each core term, and of the common coefficients
        core_starts = np.cumsum([p] + [terms[i].n_levels for i in plan.core_terms])
        self._core_cols = [
            slice(int(core_starts[j]), int(core_starts[j + 1])) for j in range(len(plan.core_terms))
        ]
        self.beta_precision = np.asarray(problem.beta_precision, dtype=float)
        #: hyperparameter moves per iteration
        self.moves = MOVES_PER_COORD * sum(len(c) for c in plan.block_hyper)
        if self.gaussian:
            # unit row weights: the Gram pieces are those of the data, computed once
            ones = np.ones(problem.n)
            self._gram = self.core_gram(ones)
            self._cross = [self.block_cross(k, ones) for k in range(len(plan.block_terms))]

    # -- pieces ----------------------------------------------------------------------
    def prior(self, h):
        """``(log p(h), sds, core prior precision, 1 / sigma^2)`` (1 for a logistic GLMM);
        None where ``h`` is impossible."""
        lp, sds, noise = self.problem.hyper(np.asarray(h, dtype=float))
        if not (np.isfinite(lp) and np.all(np.isfinite(sds)) and np.all(sds > 0)):
            return None
        inv_s2 = 1.0
        if self.gaussian:
            if not (np.isfinite(noise) and noise > 0):
                return None
            inv_s2 = float(noise) ** -2.0
            if not np.isfinite(inv_s2):
                return None
        terms = self.problem.terms
        with np.errstate(over="ignore", divide="ignore"):
            lam = np.concatenate(
                [self.beta_precision]
                + [
                    np.full(terms[i].n_levels, sds[terms[i].scale] ** -2.0)
                    for i in self.plan.core_terms
                ]
            )
        if not np.all(np.isfinite(lam)):
            return None
        return float(lp), np.asarray(sds, dtype=float), lam, inv_s2

    def term_times(self, i, levels) -> np.ndarray:
        """Term ``i``'s part of the linear predictor: ``values * levels[index]``."""
        t = self.problem.terms[i]
        return t.values * levels[t.index]

    def core_times(self, core) -> np.ndarray:
        """The core's part of the linear predictor."""
        p = self.problem.p
        out = self.X @ core[:p] if p else np.zeros(self.problem.n)
        for i, cols in zip(self.plan.core_terms, self._core_cols):
            out = out + self.term_times(i, core[cols])
        return out

    def core_transpose(self, v) -> np.ndarray:
        """``core^T v``."""
        p = self.problem.p
        return np.concatenate(
            [self.X.T @ v if p else np.zeros(0)] + [ZT @ v for ZT in self._core_ZT]
        )

    def core_gram(self, w, Xw=None) -> np.ndarray:
        """``core^T W core``: the common block by BLAS, the small factors' by sums over the
        rows (``Xw`` is ``X`` with its rows scaled by ``w``, when already at hand)."""
        p, pc = self.problem.p, self.pc
        gram = np.zeros((pc, pc))
        if p:
            Xw = self.X * w[:, None] if Xw is None else Xw
            gram[:p, :p] = Xw.T @ self.X
        for a, (ZTa, ca) in enumerate(zip(self._core_ZT, self._core_cols)):
            if p:
                gram[ca, :p] = ZTa @ Xw
                gram[:p, ca] = gram[ca, :p].T
            for b in range(a + 1):
                block = self._pair_sums(self._core_pairs[a][b], w)
                cb = self._core_cols[b]
                gram[ca, cb] = block
                gram[cb, ca] = block.T
        return gram

    @staticmethod
    def _pair_sums(pair, w) -> np.ndarray:
        """``Z_a^T W Z_b`` as a dense ``L_a x L_b`` array, one pass over the rows."""
        index, values, shape = pair
        sums = np.bincount(index, weights=w * values, minlength=shape[0] * shape[1])
        return sums.reshape(shape)

    def block_cross(self, k, w, Xw=None) -> tuple:
        """``(Z_k^T W core, diag(Z_k^T W Z_k))``."""
        ZT = self._block_ZT[k]
        p = self.problem.p
        parts = []
        if p:
            parts.append(ZT @ (self.X * w[:, None] if Xw is None else Xw))
        parts += [self._pair_sums(pair, w) for pair in self._block_pairs[k]]
        G = np.hstack(parts) if parts else np.zeros((ZT.shape[0], 0))
        wk = ZT @ (w * self._block_values[k])
        return np.ascontiguousarray(G), wk

    def evaluate(self, h, k, pieces: _Pieces) -> _Block | None:
        """``log p(h) + log p(r | h)`` with the block's ``(core, v_k)`` integrated out, and
        what the draw needs; None where ``h`` is impossible or the precision not positive
        definite.

        ``r | h ~ N(A_k c, s^2 W^-1)``, ``c ~ N(0, Lambda(h)^-1)``:
        ``log p = 0.5 (log det Lambda - log det Q + b^T Q^-1 b - r^T W r / s^2) - n log s
        + const``, ``Q = A_k^T W A_k / s^2 + Lambda`` the arrowhead precision, through its
        Schur complement onto the core; ``s`` is a linear mixed model's sigma, else 1
        (and the last two terms are left out: they do not depend on ``h``).
        """
        prior = self.prior(h)
        if prior is None:
            return None
        lp, sds, lam_c, inv_s2 = prior
        term = self.problem.terms[self.plan.block_terms[k]]
        lam_k = sds[term.scale] ** -2.0
        if not np.isfinite(lam_k):
            return None
        if self.gaussian:
            pieces = _Pieces(*(x * inv_s2 for x in pieces))
        D = pieces.wk + lam_k
        G, bk = pieces.G, pieces.bk
        S = pieces.gram - G.T @ (G / D[:, None])
        S[np.diag_indices_from(S)] += lam_c
        rhs = pieces.bc - G.T @ (bk / D)
        chol, info = dpotrf(S, lower=1, clean=1, overwrite_a=1)
        if info != 0:
            return None
        mean, info = dpotrs(chol, rhs, lower=1)
        if info != 0:
            return None
        pos = lam_c > 0
        val = (
            lp
            + 0.5 * float(np.sum(np.log(lam_c[pos])))
            + 0.5 * D.size * np.log(lam_k)
            - 0.5 * float(np.sum(np.log(D)))
            - float(np.sum(np.log(np.diag(chol))))
            + 0.5 * (float(np.sum(bk * bk / D)) + float(rhs @ mean))
        )
        if self.gaussian:
            val += 0.5 * self.problem.n * np.log(inv_s2) - 0.5 * pieces.rr
        if not np.isfinite(val):
            return None
        return _Block(val, chol, mean, D, inv_s2)

    def draw_block(self, ev: _Block, k, pieces: _Pieces, rng):
        """``(core, v_k)`` from their Gaussian conditional (deviations from the prior mean)."""
        eps = rng.standard_normal(self.pc)
        noise, info = dtrtrs(ev.chol, eps, lower=1, trans=1)
        core = ev.mean + noise
        s = ev.inv_s2
        vk = (
            (pieces.bk * s - (pieces.G * s) @ core) / ev.D
            if self.gaussian
            else ((pieces.bk - pieces.G @ core) / ev.D)
        )
        vk = vk + rng.standard_normal(ev.D.size) / np.sqrt(ev.D)
        return core, vk

    def scales(self, h) -> np.ndarray:
        return self.problem.hyper(np.asarray(h, dtype=float))[1]

    # -- the kernel ------------------------------------------------------------------
    def init(self, h, coef, rng=None) -> MixedState:
        h = np.asarray(h, dtype=float).copy()
        return MixedState(h, np.asarray(coef, dtype=float).copy(), None, None)

    def step(self, state: MixedState, rng, walk_sds):
        """One iteration: ``omega | c`` (logistic GLMMs), then each large factor's
        ``(h_k, core, v_k)``.

        ``walk_sds`` holds the random-walk sd of each coordinate of ``h``.
        """
        h = np.asarray(state.h, dtype=float).copy()
        c = np.asarray(state.coef, dtype=float) - self.coef_mean
        core = c[self.core_pos]
        eta_core = self.core_times(core)
        block_eta = [self.term_times(i, c[self.slices[i]]) for i in self.plan.block_terms]
        total = sum(block_eta)
        if self.gaussian:
            w, gram, target = None, self._gram, self.problem.y - self.offset
        else:
            w = self.rows.draw(eta_core + total + self.offset, rng)
            Xw = self.X * w[:, None]
            gram = self.core_gram(w, Xw)
            target = None
        K = h.size
        acc_sum, acc_n = np.zeros(K), np.zeros(K)
        for k, i in enumerate(self.plan.block_terms):
            others = total - block_eta[k]
            if self.gaussian:
                rw = target - others
                G, wk = self._cross[k]
                rr = float(rw @ rw)
            else:
                rw = self.rows.kappa - w * (self.offset + others)
                G, wk = self.block_cross(k, w, Xw)
                rr = 0.0
            pieces = _Pieces(gram, G, wk, self.core_transpose(rw), self._block_ZT[k] @ rw, rr)
            cur = self.evaluate(h, k, pieces)
            if cur is None:
                raise FloatingPointError(
                    "the blocked kernel's hyperparameter density is not finite at "
                    f"the current state (h={h}); the model's priors or data may be degenerate"
                )
            coords = self.plan.block_hyper[k]
            for m in range(MOVES_PER_COORD * len(coords)):
                j = coords[m % len(coords)]
                h_new = h.copy()
                h_new[j] += walk_sds[j] * rng.standard_normal()
                prop = self.evaluate(h_new, k, pieces)
                log_ratio = -np.inf if prop is None else prop.log_post - cur.log_post
                a = accept_prob(log_ratio)
                acc_sum[j] += a
                acc_n[j] += 1
                if np.log(rng.uniform()) < log_ratio:
                    h, cur = h_new, prop
            core, vk = self.draw_block(cur, k, pieces, rng)
            c[self.slices[i]] = vk
            new_eta = self.term_times(i, vk)
            total = others + new_eta
            block_eta[k] = new_eta
        c[self.core_pos] = core
        coord = np.where(acc_n > 0, acc_sum / np.maximum(acc_n, 1), np.nan)
        mean_acc = float(acc_sum.sum() / acc_n.sum()) if acc_n.sum() else 1.0
        info = CrossedInfo(mean_acc, coord)
        return MixedState(h, c + self.coef_mean, None, None), info
