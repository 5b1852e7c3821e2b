"""Split Gibbs kernel for mixed models, with hyperparameters that move with the coefficients.

The split model of a GLMM (Vono, Paulin and Doucet, 2022) is

    pi_rho(h, c, z) ∝ p(h) N(c; 0, Lambda(h)^-1) prod_i exp(-U(z_i)) N(z_i; a_i^T c + o_i, rho^2).

Given ``z`` it is a Gaussian linear model in the coefficients ``c``, so the coefficients
can be integrated out exactly: ``p(h | z)`` is known up to a constant through one
factorization of ``Q(h) = A^T A / rho^2 + Lambda(h)`` (:mod:`pymc_sgs.mixed.precision`).
One iteration is therefore

1. ``z | c``: every row exactly (:func:`pymc_sgs.conditionals.sample_z_exact`);
2. ``h | z``: random-walk Metropolis on the unconstrained hyperparameters (group sds,
   and for a linear mixed model the observation sd) with ``c`` integrated out;
3. ``c | h, z``: an exact Gaussian draw (perturbation of the right-hand side, so only
   solves with ``Q`` are needed).

Steps 2-3 are one block update of ``(h, c)`` given ``z``: the group scales never wait
for the coefficients, the slow "centred Gibbs" case of Papaspiliopoulos, Roberts and
Sköld (2007), and the sampler is the same whether the model was written centred or
non-centred. A linear mixed model has no ``z`` (the data play its part, with ``rho``
the free observation sd), and the kernel is an exact collapsed sampler of the posterior.

The kernel is pure: :class:`MixedState` in, ``(MixedState, MixedInfo)`` out; the tuned
proposal of step 2 is an argument.

References
----------
Vono, M., Paulin, D. and Doucet, A. (2022). Efficient MCMC sampling with
dimension-free convergence rate using ADMM-type splitting. JMLR 23(25).
Papaspiliopoulos, O., Roberts, G. O. and Sköld, M. (2007). A general framework for the
parametrization of hierarchical models. Statistical Science 22(1), 59-73.
Rue, H., Martino, S. and Chopin, N. (2009). Approximate Bayesian inference for latent
Gaussian models by using integrated nested Laplace approximations. JRSS B 71(2).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..conditionals import sample_z_exact
from ..weights import log_weight_rows
from .precision import MixedPrecision
from .prior import PriorPrecision

__all__ = ["AugmentedKernel", "HyperProposal", "MixedState", "MixedInfo", "MixedKernel"]


class MixedState(NamedTuple):
    """``h`` unconstrained hyperparameters, ``coef`` = (beta, v_1, ..., v_T), split ``z``."""

    h: np.ndarray
    coef: np.ndarray
    z: np.ndarray | None
    z_mode: np.ndarray | None


class MixedInfo(NamedTuple):
    hyper_accept: float  # mean Metropolis acceptance probability of the h-moves
    walk_accept: float  # ... of the random-walk h-moves alone (what their scale is tuned on)
    log_weight: float  # log w_rho(c) = log p(y|c) - log p_rho(y|c); 0 for an unsplit model
    n_proposals: int  # z rejection-sampler proposals
    indep_accept: float = float("nan")  # ... of the independence h-moves alone


class HyperProposal(NamedTuple):
    """The proposals of the ``h | z`` moves, alternated within an iteration.

    ``walk_chol``: random-walk step ``h + walk_chol @ N(0, I)``. ``centre`` /
    ``indep_chol`` / ``df``: an independence proposal, multivariate Student-t around the
    mode of ``p(h | y)`` (fitted once, :func:`pymc_sgs.mixed.laplace.hyper_mode`); None
    disables it. Both are Metropolis-Hastings moves for ``p(h | z)``, exact for any value.
    ``moves`` per iteration; with ``walk`` False (and a centre) every one of them is an
    independence move. ``indep_split`` (``(K, 2)``, optional) makes the independence
    proposal a two-piece t: in the coordinates ``z = indep_chol^-1 (h - centre)``, scale
    ``indep_split[k, 0]`` below the centre and ``indep_split[k, 1]`` above it
    (:func:`pymc_sgs.mixed.adapt.split_scales`); ``indep_draws``, the draws it was fitted
    to, gives a restriction to some coordinates its own.
    """

    walk_chol: np.ndarray
    centre: np.ndarray | None = None
    indep_chol: np.ndarray | None = None
    df: float = 4.0
    moves: int = 2
    walk: bool = True
    indep_split: np.ndarray | None = None  # (K, 2): lower / upper scales (two-piece t)
    indep_draws: np.ndarray | None = None  # the draws the split was fitted to

    def draw(self, m: int, h, rng):
        """Move ``m``'s proposal from ``h``: ``(h_new, log q-ratio, independent)``.

        Even moves (every move when ``walk`` is False) are independence moves when there
        is a centre, the others random-walk moves; the q-ratio ``log q(h) - log q(h_new)``
        is 0 for the symmetric walk.
        """
        K = h.shape[0]
        if self.centre is not None and (m % 2 == 0 or not self.walk):
            # multivariate t: a normal scaled by sqrt(df / chi2_df)
            g = np.sqrt(self.df / rng.chisquare(self.df))
            split = self.indep_split
            if split is None:
                h_new = self.centre + g * (self.indep_chol @ rng.standard_normal(K))
            else:
                # two-piece: each coordinate's side chosen with probability proportional to
                # its scale, which makes the density t(w(z)) times a constant (continuous)
                w = np.abs(g * rng.standard_normal(K))
                lower = rng.uniform(size=K) * (split[:, 0] + split[:, 1]) < split[:, 0]
                z = np.where(lower, -split[:, 0] * w, split[:, 1] * w)
                h_new = self.centre + self.indep_chol @ z
            log_qh = _t_logpdf_unnorm(
                h, self.centre, self.indep_chol, self.df, split
            ) - _t_logpdf_unnorm(h_new, self.centre, self.indep_chol, self.df, split)
            return h_new, log_qh, True
        return h + self.walk_chol @ rng.standard_normal(K), 0.0, False


def accept_prob(log_ratio) -> float:
    """Metropolis-Hastings acceptance probability ``min(1, exp(log_ratio))``; 0 for nan."""
    if not np.isfinite(log_ratio):
        return 0.0 if log_ratio < 0 or np.isnan(log_ratio) else 1.0
    return 1.0 if log_ratio >= 0 else float(np.exp(log_ratio))


def _t_logpdf_unnorm(h, centre, chol, df, split=None):
    """Log density of the (two-piece, with ``split``) multivariate t, up to a constant."""
    x = np.linalg.solve(chol, h - centre) if chol.size else np.zeros(0)
    if split is not None:
        x = x / np.where(x < 0, split[:, 0], split[:, 1])
    return -0.5 * (df + x.size) * np.log1p(float(x @ x) / df)


class _Factored(NamedTuple):
    h: np.ndarray
    factor: object
    lam: object  # the prior precision, a PriorPrecision
    inv_s2: float
    const: float  # the part of log p(h) + log p(z | h) that does not depend on z
    slot: int
    sds: np.ndarray  # the term sds at h


class _Eval(NamedTuple):
    h: np.ndarray
    log_post: float
    mean: np.ndarray | None
    factored: _Factored | None


class MixedKernel:
    """Collapsed split Gibbs kernel of a :class:`~pymc_sgs.mixed.problem.MixedProblem`.

    Parameters
    ----------
    problem : MixedProblem
    rho : float
        Split coupling (an sd, as in :class:`pymc_sgs.kernel.SplitGibbsKernel`); ignored
        for a linear mixed model (``problem.family is None``).
    method : str
        Factorization, see :class:`~pymc_sgs.mixed.precision.MixedPrecision`.
    log_weights : bool
        Compute ``log w_rho`` of every draw (split models only).
    """

    def __init__(self, problem, rho: float | None = None, method: str = "auto", log_weights=True):
        self.problem = problem
        self.split = problem.family is not None
        if self.split and not (rho is not None and np.isfinite(rho) and rho > 0):
            raise ValueError(f"rho must be a positive finite number; received {rho!r}")
        self.rho = float(rho) if self.split else None
        self.log_weights = bool(log_weights)
        self.precision = MixedPrecision(problem, method=method)
        self.A = self.precision.A
        self.AT = self.A.T.tocsr()
        self.dim = self.precision.dim
        p = problem.p
        # prior means of the common coefficients go into the offset: c is a deviation
        self.offset = problem.offset + (problem.X @ problem.beta_mean if p else 0.0)
        self.coef_mean = np.concatenate([problem.beta_mean, np.zeros(self.dim - p)])
        self.beta_precision = np.asarray(problem.beta_precision, dtype=float)
        self._flat_beta = self.beta_precision > 0
        self.level_term = (
            np.concatenate([np.full(t.n_levels, t.scale) for t in problem.terms]).astype(np.intp)
            if problem.terms
            else np.zeros(0, dtype=np.intp)
        )
        # correlated group effects: each block's coefficients (the precision's positions)
        # and its covariance
        self._blocks = [
            (pos, ct.cov) for pos, ct in zip(self.precision.block_positions, problem.correlated)
        ]
        self._in_block = np.zeros(self.dim, dtype=bool)
        for pos, _ in self._blocks:
            self._in_block[pos] = True
        if not self.split:
            r = problem.y - self.offset
            self._data = (self.AT @ r, float(r @ r))
        # the factorization of the current state's Q(h), which z does not change
        self._factored = None

    # -- pieces ----------------------------------------------------------------------
    def hyper_values(self, h):
        """``(log prior, term sds, observation sd)`` at ``h``."""
        return self.problem.hyper(np.asarray(h, dtype=float))

    def prior_at(self, h):
        """``(log prior, term sds, observation sd, prior precision)`` at ``h``; None where the
        prior density is zero or the sds or precisions are not positive and finite.

        The prior precision is a :class:`~pymc_sgs.mixed.prior.PriorPrecision`.
        """
        h = np.asarray(h, dtype=float)
        covs = ()
        if self._blocks:
            log_prior, sds, noise_sd, covs = self.problem.hyper_cov(h)
        else:
            log_prior, sds, noise_sd = self.hyper_values(h)
        if not (np.isfinite(log_prior) and np.all(np.isfinite(sds)) and np.all(sds > 0)):
            return None
        try:
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                lam = self.prior_precision(sds, covs)
        except np.linalg.LinAlgError:
            return None  # a covariance that is not positive definite
        if not lam.is_finite():
            return None  # an sd so small its precision overflows: no density to speak of
        return float(log_prior), sds, noise_sd, lam

    def leaves_prior_scales(self, h, k: int, step: float = 0.5) -> bool:
        """Whether moving coordinate ``k`` of ``h`` by ``step`` leaves the group effects'
        prior alone (the term sds and, for correlated blocks, their covariances): then
        ``log p(c | h)`` does not depend on that coordinate."""

        def prior_scales(x):
            if self._blocks:
                _, sds, _, covs = self.problem.hyper_cov(x)
                return [np.asarray(sds, dtype=float)] + [np.asarray(c) for c in covs]
            return [np.asarray(self.hyper_values(x)[1], dtype=float)]

        moved = np.array(h, dtype=float)
        moved[k] += step
        return all(
            np.array_equal(a, b) for a, b in zip(prior_scales(h), prior_scales(moved), strict=True)
        )

    def scales(self, h) -> np.ndarray:
        """Term sds at ``h``: those of the state's factorization when it is ``h``'s."""
        f = self._factored
        if f is not None and np.array_equal(f.h, h):
            return f.sds
        return self.hyper_values(h)[1]

    def prior_precision(self, sds, covs=()) -> PriorPrecision:
        """``Lambda`` from the term sds and, for correlated blocks, their covariances.

        Raises
        ------
        numpy.linalg.LinAlgError
            If a covariance is not positive definite.
        """
        sds = np.asarray(sds, dtype=float)
        diag = np.concatenate([self.beta_precision, 1.0 / sds[self.level_term] ** 2])
        if not self._blocks:
            return PriorPrecision(diag)
        diag[self._in_block] = 0.0
        blocks = []
        for pos, i in self._blocks:
            chol = np.linalg.cholesky(np.asarray(covs[i], dtype=float))
            inv_chol = np.linalg.inv(chol)
            blocks.append((pos, inv_chol.T @ inv_chol))
        return PriorPrecision(diag, tuple(blocks))

    def eta(self, coef) -> np.ndarray:
        return self.A @ (coef - self.coef_mean) + self.offset

    def data_part(self, z):
        """``(A^T r, r^T r)`` with ``r = z - offset``."""
        if z is None:
            return self._data
        r = z - self.offset
        return self.AT @ r, float(r @ r)

    def observation_sd(self, h, noise_sd) -> float:
        """The sd of the Gaussian linear model the coefficients are in: ``rho`` when split,
        else the likelihood's own (``noise_sd`` from :attr:`MixedProblem.hyper`)."""
        return self.rho if self.split else float(noise_sd)

    def factorize(self, h, slot: int = 0):
        """Prior precision and factorization of ``Q(h)``; None where ``h`` is impossible."""
        prior = self.prior_at(h)
        if prior is None:
            return None
        log_prior, sds, noise_sd, lam = prior
        s = self.observation_sd(h, noise_sd)
        if not (np.isfinite(s) and s > 0):
            return None
        inv_s2 = 1.0 / s**2
        try:
            factor = self.precision.factor(lam, inv_s2, slot)
        except np.linalg.LinAlgError:
            return None
        const = (
            float(log_prior)
            - self.problem.n * np.log(s)
            + float(lam.half_logdet())
            - 0.5 * factor.logdet
        )
        return _Factored(np.asarray(h, dtype=float), factor, lam, inv_s2, const, slot, sds)

    def evaluate(self, h, data, slot: int = 0, factored=None) -> _Eval:
        """Log of ``p(h) p(z | h)`` (coefficients integrated out) and the factorization.

        ``factored`` is a previous :meth:`factorize` of the same ``h`` (``Q`` does not
        depend on ``z``, so the current state's factorization is reused across
        iterations).
        """
        f = self.factorize(h, slot) if factored is None else factored
        if f is None:
            return _Eval(np.asarray(h, dtype=float), -np.inf, None, None)
        atr, rr = data
        b = atr * f.inv_s2
        mean = f.factor.solve(b)
        lp = f.const - 0.5 * rr * f.inv_s2 + 0.5 * float(b @ mean)
        return _Eval(f.h, lp if np.isfinite(lp) else -np.inf, mean, f)

    def draw_coef(self, ev: _Eval, rng) -> np.ndarray:
        """``c | h, z`` exactly: the conditional mean plus ``Q^{-1/2}`` noise from the factor."""
        f = ev.factored
        return ev.mean + f.factor.sample(rng.standard_normal(self.dim)) + self.coef_mean

    def draw_z(self, coef, rng, z_init=None):
        fam = self.problem.family
        d = sample_z_exact(
            fam, self.problem.y, self.problem.trials, self.eta(coef), self.rho, rng, z_init
        )
        return d.z, d.mode, d.n_proposals

    def log_weight(self, coef) -> float:
        fam = self.problem.family
        lw, _ = log_weight_rows(fam, self.problem.y, self.problem.trials, self.eta(coef), self.rho)
        return float(np.sum(lw))

    # -- the kernel ------------------------------------------------------------------
    def init(self, h, coef, rng) -> MixedState:
        h = np.asarray(h, dtype=float).copy()
        coef = np.asarray(coef, dtype=float).copy()
        if not self.split:
            return MixedState(h, coef, None, None)
        z, mode, _ = self.draw_z(coef, rng)
        return MixedState(h, coef, z, mode)

    def step(self, state: MixedState, rng, proposal: HyperProposal):
        """One iteration: ``z | c``, then ``(h, c) | z`` as one block."""
        n_prop = 0
        z, mode = state.z, state.z_mode
        if self.split:
            z, mode, n_prop = self.draw_z(state.coef, rng, mode)
        data = self.data_part(z)
        cached = self._factored
        if cached is None or not np.array_equal(cached.h, state.h):
            cached = self.factorize(state.h, 0)
        coef, h, accept, walk_accept, indep_accept = self.collapsed_block(
            state.h, data, cached, rng, proposal
        )
        lw = self.log_weight(coef) if (self.split and self.log_weights) else 0.0
        info = MixedInfo(accept, walk_accept, lw, n_prop, indep_accept)
        return MixedState(h, coef, z, mode), info

    def collapsed_block(self, h, data, factored, rng, proposal: HyperProposal):
        """``h | data`` by Metropolis-Hastings with the coefficients integrated out, then
        ``c | h, data`` exactly: ``(coef, h, mean acceptance, mean walk acceptance, mean
        independence acceptance)``; with no walk moves their mean is 1, with no
        independence moves theirs is nan.

        ``data`` is :meth:`data_part`'s ``(A^T W r, r^T W r)`` for the Gaussian linear model
        the coefficients are in (given ``z``, or the data of a linear mixed model);
        ``factored`` is :meth:`factorize` of the current ``h``.
        """
        cur = self.evaluate(h, data, factored=factored)
        accept = walk_accept = 0.0
        K = h.shape[0]
        n_moves = proposal.moves if K else 0
        n_walk = 0
        for m in range(n_moves):
            h_new, log_qh, independent = proposal.draw(m, cur.h, rng)
            n_walk += not independent
            slot = 1 - cur.factored.slot if cur.factored is not None else 1
            prop = self.evaluate(h_new, data, slot=slot)
            log_ratio = (prop.log_post - cur.log_post) + log_qh
            a = accept_prob(log_ratio)
            accept += a
            walk_accept += 0.0 if independent else a
            if np.log(rng.uniform()) < log_ratio:
                cur = prop
        if not np.isfinite(cur.log_post):
            raise FloatingPointError(
                "the collapsed hyperparameter density is not finite at the current state "
                f"(h={cur.h}); the model's hyperparameter priors or data may be degenerate"
            )
        self._factored = cur.factored
        coef = self.draw_coef(cur, rng)
        n_indep = n_moves - n_walk
        return (
            coef,
            cur.h,
            accept / n_moves if n_moves else 1.0,
            walk_accept / n_walk if n_walk else 1.0,
            (accept - walk_accept) / n_indep if n_indep else float("nan"),
        )


class AugmentedKernel(MixedKernel):
    """Base of the data-augmentation kernels (Pólya-Gamma, the Student-t's scale mixture).

    Given latent row weights ``w`` drawn from the coefficients, the model is a linear mixed
    model with weights ``W``: :meth:`block_given_weights` sets them and makes the collapsed
    block of ``(h, c)``. ``rho`` is 1 (the Gaussian model's scale, unless a subclass gives
    its own :meth:`observation_sd`); the state's ``z`` and ``z_mode`` are None, since the
    weights are drawn afresh every iteration and are not part of the state.
    """

    def __init__(self, problem, method: str = "auto"):
        super().__init__(problem, rho=1.0, method=method, log_weights=False)
        # a copy whose row weights are replaced every iteration (its sparse solvers kept)
        self.precision = self.precision.reweighted(np.ones(problem.n))

    def init(self, h, coef, rng=None) -> MixedState:
        h = np.asarray(h, dtype=float).copy()
        return MixedState(h, np.asarray(coef, dtype=float).copy(), None, None)

    def block_given_weights(self, h, weights, data, rng, proposal):
        """:meth:`collapsed_block` of the model with row weights ``weights`` and ``data``
        (its ``(A^T W r, r^T W r)``)."""
        self.precision.set_row_weights(weights)
        self._factored = None  # Q changed with the weights
        factored = self.factorize(h, 0)
        return self.collapsed_block(h, data, factored, rng, proposal)
