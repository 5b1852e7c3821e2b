"""Exact joint moves of hyperparameters and coefficients for GLMMs (no split, no bias).

For a non-Gaussian likelihood the coefficients cannot be integrated out exactly, but
their conditional ``p(c | h, y)`` is close to its Laplace approximation
``N(c*(h), H(h)^-1)`` (Newton's method with the structured factorization of
:mod:`pymc_sgs.mixed.precision`). One move proposes

1. ``h'`` (an independence proposal around the mode of the Laplace-approximated
   ``p(h | y)``, or a random walk), then
2. ``c' ~ N(c*(h'), H(h')^-1)``,

and accepts with the exact Metropolis-Hastings ratio

    [p(y, c', h') / N(c'; c*(h'), H(h')^-1)] / [p(y, c, h) / N(c; c*(h), H(h)^-1)] x q-ratio of h,

so the chain targets the posterior itself. This is the INLA construction (Rue, Martino and
Chopin, 2009) used as a proposal, in the spirit of the "Laplace within MH" samplers: the
group scales move together with the coefficients, whatever the parametrisation. Moves of
``c`` alone (``c' ~ N(c*(h), H(h)^-1)`` at the current ``h``, the Laplace factorization
reused) follow.

The split of :class:`pymc_sgs.mixed.kernel.MixedKernel` pins the linear predictor to the
split variables when the data are informative (small rho), which made its chains crawl on
binomial GLMMs (``benchmarks/results/mixed.md``); this kernel is therefore the default for
GLMMs, and the split kernel is used for linear mixed models (where it is the exact
collapsed sampler) and when a fixed rho is asked for.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .kernel import HyperProposal, MixedKernel, _t_logpdf_unnorm
from .laplace import coef_mode

__all__ = ["JointState", "JointInfo", "LaplaceJointKernel"]


class _Fit(NamedTuple):
    h: np.ndarray
    lam: np.ndarray
    log_prior: float
    mode: np.ndarray  # c*(h), deviations from the prior mean
    factor: object  # of H(h) = A^T W A + diag(lam)
    w: np.ndarray  # likelihood curvature of each row at c*(h)
    sds: np.ndarray  # the term sds at h


class JointState(NamedTuple):
    h: np.ndarray
    coef: np.ndarray  # deviations from the prior mean
    log_post: float  # log p(y, c, h) + const
    log_q: float  # log N(c; c*(h), H(h)^-1) + const


class JointInfo(NamedTuple):
    hyper_accept: float
    coef_accept: float


class LaplaceJointKernel(MixedKernel):
    """Exact kernel of a GLMM (see the module docstring)."""

    def __init__(self, problem, method: str = "auto"):
        if problem.family is None:
            raise ValueError(
                "LaplaceJointKernel is for GLMMs; a linear mixed model uses MixedKernel"
            )
        super().__init__(problem, rho=1.0, method=method, log_weights=False)
        self._fit = None
        self._reference = None

    def set_reference(self, coef, row_weights=None) -> None:
        """Use one Newton step from ``coef`` (deviations) with the curvature there.

        The proposal for ``h`` is then ``N(c0 - H(h)^-1 grad(c0; h), H(h)^-1)`` with
        ``H(h) = A^T W0 A + Lambda(h)``: a deterministic function of ``h`` (so the
        Metropolis-Hastings ratio stays exact) that costs one factorization, against a
        Newton solve for the exact conditional mode. ``coef`` is the conditional mode at the
        hyperparameters' mode, where the two coincide. None restores the Newton solve.
        """
        if coef is None:
            self._reference = None
            return
        p = self.problem
        c0 = np.asarray(coef, dtype=float)
        eta = self.A @ c0 + self.offset
        w0 = (
            np.maximum(p.family.hess(eta, p.y, p.trials), 0.0)
            if row_weights is None
            else row_weights
        )
        g0 = self.AT @ p.family.grad(eta, p.y, p.trials)
        self._reference = (c0, np.asarray(w0, dtype=float), g0, self.precision.reweighted(w0))
        self._fit = None

    def fit(self, h, c0=None):
        """The Gaussian proposal of ``c | h, y``; None where ``h`` is impossible."""
        prior = self.prior_at(h)
        if prior is None:
            return None
        log_prior, sds, _, lam = prior
        try:
            if self._reference is not None:
                c_ref, w, g0, prec = self._reference
                factor = prec.factor(lam, 1.0)
                mode = c_ref - factor.solve(g0 + lam * c_ref)
            else:
                mode, _, factor, w = coef_mode(self, lam, c0)
        except np.linalg.LinAlgError:
            return None
        return _Fit(np.asarray(h, dtype=float), lam, float(log_prior), mode, factor, w, sds)

    def scales(self, h) -> np.ndarray:
        """Term sds at ``h``: those of the current fit when it is ``h``'s."""
        f = self._fit
        if f is not None and np.array_equal(f.h, h):
            return f.sds
        return self.hyper_values(h)[1]

    def log_joint(self, fit: _Fit, c) -> float:
        """``log p(y | c) + log N(c; 0, Lambda^-1) + log p(h)`` up to a constant."""
        p = self.problem
        eta = self.A @ c + self.offset
        with np.errstate(over="ignore", invalid="ignore"):
            u = float(np.sum(p.family.potential(eta, p.y, p.trials)))
        lam = fit.lam
        val = fit.log_prior - u - 0.5 * float(np.sum(lam * c * c))
        val += 0.5 * float(np.sum(np.log(lam[lam > 0])))
        return val if np.isfinite(val) else -np.inf

    def log_q(self, fit: _Fit, c) -> float:
        """``log N(c; c*, H^-1)`` up to the constant ``-dim/2 log(2 pi)``."""
        d = c - fit.mode
        Hd = fit.lam * d + self.AT @ (fit.w * (self.A @ d))
        return 0.5 * fit.factor.logdet - 0.5 * float(d @ Hd)

    def draw(self, fit: _Fit, rng):
        """``c ~ N(c*, H^-1)`` and its ``log_q`` (the factor's sampler gives the quadratic form)."""
        eps = rng.standard_normal(self.dim)
        c = fit.mode + fit.factor.sample(eps)
        return c, 0.5 * fit.factor.logdet - 0.5 * float(eps @ eps)

    def init(self, h, coef, rng=None) -> JointState:
        fit = self.fit(h)
        if fit is None:
            raise ValueError(f"the hyperparameters' start {h} has zero prior density")
        self._fit = fit
        c = np.asarray(coef, dtype=float) - self.coef_mean
        return JointState(fit.h, c, self.log_joint(fit, c), self.log_q(fit, c))

    def step(self, state: JointState, rng, proposal: HyperProposal, coef_moves: int = 1):
        fit = self._fit
        if fit is None or not np.array_equal(fit.h, state.h):
            fit = self.fit(state.h, state.coef)
        K = state.h.shape[0]
        h_acc = 0.0
        n_h = proposal.moves if K else 0
        for m in range(n_h):
            independent = proposal.centre is not None and m % 2 == 0
            if independent:
                g = np.sqrt(proposal.df / rng.chisquare(proposal.df))
                h_new = proposal.centre + g * (proposal.indep_chol @ rng.standard_normal(K))
                log_qh = _t_logpdf_unnorm(
                    state.h, proposal.centre, proposal.indep_chol, proposal.df
                ) - _t_logpdf_unnorm(h_new, proposal.centre, proposal.indep_chol, proposal.df)
            else:
                h_new = state.h + proposal.walk_chol @ rng.standard_normal(K)
                log_qh = 0.0
            new_fit = self.fit(h_new, fit.mode)
            if new_fit is None:
                continue  # zero prior density: rejected
            c_new, lq = self.draw(new_fit, rng)
            lp = self.log_joint(new_fit, c_new)
            log_ratio = (lp - lq) - (state.log_post - state.log_q) + log_qh
            a = _accept_prob(log_ratio)
            h_acc += a
            if np.log(rng.uniform()) < log_ratio:
                fit = new_fit
                state = JointState(new_fit.h, c_new, lp, lq)
        c_acc = 0.0
        for _ in range(coef_moves):
            c_new, lq = self.draw(fit, rng)
            lp = self.log_joint(fit, c_new)
            log_ratio = (lp - lq) - (state.log_post - state.log_q)
            c_acc += _accept_prob(log_ratio)
            if np.log(rng.uniform()) < log_ratio:
                state = JointState(state.h, c_new, lp, lq)
        self._fit = fit
        info = JointInfo(h_acc / n_h if n_h else 1.0, c_acc / coef_moves if coef_moves else 1.0)
        return state, info


def _accept_prob(log_ratio) -> float:
    if not np.isfinite(log_ratio):
        return 0.0 if log_ratio < 0 or np.isnan(log_ratio) else 1.0
    return 1.0 if log_ratio >= 0 else float(np.exp(log_ratio))
