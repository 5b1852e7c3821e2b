"""Exact joint moves of hyperparameters and coefficients for GLMMs (no split, no bias).

For a non-Gaussian likelihood the coefficients cannot be integrated out exactly, but
their conditional ``p(c | h, y)`` is close to its Laplace approximation
``N(c*(h), H(h)^-1)`` (Newton's method with the structured factorization of
:mod:`pymc_sgs.mixed.precision`). One move proposes

1. ``h'`` (an independence proposal around the mode of ``p(h | y)``, or a random walk), then
2. ``c' = c*(h') + L(h')^-T eps`` with the *same* standardised coefficients
   ``eps = L(h)^T (c - c*(h))`` as the current state (``H = L L^T``),

and accepts with the exact Metropolis-Hastings ratio

    p(y, c', h') det H(h')^-1/2 / [p(y, c, h) det H(h)^-1/2] x q-ratio of h.

This is a Metropolis-Hastings move in the coordinates ``(h, eps)``, in which the target
has the density ``p(y, c(h, eps), h) det H(h)^-1/2``, so the chain targets the posterior
itself. Were ``p(c | h, y)`` exactly ``N(c*(h), H(h)^-1)`` the ratio would be that of the
marginal ``p(h | y)``; where the Laplace approximation is off, keeping ``eps`` lets the
error of the current and the proposed coefficients largely cancel, which a fresh
``c' ~ N(c*(h'), H(h')^-1)`` does not (contraception: independence-move acceptance 0.69
against 0.56). The construction is INLA's (Rue, Martino and Chopin, 2009) used as a
reparametrisation, as in Laplace-based non-centring: the group scales move together with
the coefficients, whatever the parametrisation. Moves of ``c`` alone (independence
proposals ``c' ~ N(c*(h), H(h)^-1)`` at the current ``h``, the factorization reused,
mixed with a multivariate t of the same centre and scale so that the chain leaves a
posterior tail the Gaussian underweights) follow; they renew ``eps``. Autoregressive
(preconditioned Crank-Nicolson) moves of ``eps`` close the iteration: local steps that
are accepted where the Laplace Gaussian is too far off for independence proposals.

The split of :class:`pymc_sgs.mixed.kernel.MixedKernel` pins the linear predictor to the
split variables when the data are informative (small rho), which made its chains crawl on
binomial GLMMs (``benchmarks/results/mixed.md``); this kernel is therefore the default for
GLMMs, and the split kernel is used for linear mixed models (where it is the exact
collapsed sampler) and when a fixed rho is asked for.

References
----------
Cotter, S. L., Roberts, G. O., Stuart, A. M. and White, D. (2013). MCMC methods for
functions: modifying old algorithms to make them faster. Statistical Science 28(3), 424-446.
Rue, H., Martino, S. and Chopin, N. (2009). Approximate Bayesian inference for latent
Gaussian models by using integrated nested Laplace approximations. JRSS B 71(2), 319-392.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..defensive import heavy_scale, log_mixture_density
from ..fused import csr_potential_sum, family_code, row_parameter
from .family_slice import family_coordinates, slice_update, sub_cholesky
from .kernel import HyperProposal, MixedKernel, accept_prob
from .laplace import coef_mode, likelihood_constant

__all__ = ["COEF_TAIL_DF", "COEF_TAIL_WEIGHT", "JointState", "JointInfo", "LaplaceJointKernel"]

#: weight and degrees of freedom of the t component of the coefficient moves' proposal: the
#: Laplace Gaussian alone left chains on cbpp in the lower tail of a period effect for 30
#: draws at a time (tail ESS 42 of 2000)
COEF_TAIL_WEIGHT = 0.3
COEF_TAIL_DF = 5.0


class _Fit(NamedTuple):
    h: np.ndarray
    lam: object  # the prior precision, a PriorPrecision
    log_prior: float
    mode: np.ndarray  # c*(h), deviations from the prior mean
    factor: object  # of H(h) = A^T W A + Lambda
    w: np.ndarray  # likelihood curvature of each row at c*(h)
    sds: np.ndarray  # the term sds at h
    slot: int  # which of the precision's two sparse solvers holds the factor
    half_log_lam: float  # 0.5 log det of the prior precision (its non-zero part)
    family: object  # the likelihood family at h (its nuisance parameters may be part of h)
    lik_const: float  # the z-free part of log p(y | c) at h's nuisance parameters (else 0)
    row_param: np.ndarray | None  # the compiled pass's row parameter at h (None: the fixed one)


class JointState(NamedTuple):
    h: np.ndarray
    coef: np.ndarray  # deviations from the prior mean
    log_post: float  # log p(y, c, h) + const
    log_q: float  # log of the coefficient proposal's density at coef (LaplaceJointKernel.log_q)
    eps: np.ndarray  # L(h)^T (coef - c*(h)): the standardised coefficients


class JointInfo(NamedTuple):
    hyper_accept: float  # mean acceptance probability of all hyperparameter moves
    walk_accept: float  # ... of the random-walk moves alone (what their scale is tuned on)
    coef_accept: float  # ... of the independence moves of the coefficients
    local_accept: float  # ... of their autoregressive (pCN) moves; nan when none are made


class LaplaceJointKernel(MixedKernel):
    """Exact kernel of a GLMM (see the module docstring)."""

    def __init__(
        self,
        problem,
        method: str = "auto",
        compiled: bool = True,
        tail_weight: float = COEF_TAIL_WEIGHT,
        tail_df: float = COEF_TAIL_DF,
    ):
        if problem.family is None:
            raise ValueError(
                "LaplaceJointKernel is for GLMMs; a linear mixed model uses MixedKernel"
            )
        super().__init__(problem, rho=1.0, method=method, log_weights=False)
        if not (0.0 <= tail_weight < 1.0 and tail_df > 0.0):
            raise ValueError(
                "tail_weight must be in [0, 1) and tail_df positive; received "
                f"tail_weight={tail_weight!r}, tail_df={tail_df!r}."
            )
        self.tail_weight, self.tail_df = float(tail_weight), float(tail_df)
        self._fit = None
        self._reference = None
        # the coordinates of h that set the likelihood's free parameters and leave the term
        # sds alone (found at the first slice update; None: not yet looked for)
        self._family_coords = None
        code = family_code(problem.family)
        # the likelihood of every proposal in one compiled pass (numpy is the reference)
        self._compiled = None
        if compiled and code is not None:
            A = self.A
            self._compiled = (
                int(code),
                A.indptr.astype(np.int64),
                A.indices.astype(np.int64),
                np.ascontiguousarray(A.data, dtype=float),
                np.ascontiguousarray(np.broadcast_to(self.offset, (problem.n,)), dtype=float),
                np.ascontiguousarray(problem.y, dtype=float),
                row_parameter(problem.family, problem.trials, problem.n),
            )

    def set_reference(self, coef, row_weights=None, reference_h=None) -> None:
        """Use one Newton step from ``coef`` (deviations) with the curvature there.

        The proposal for ``h`` is then ``N(c0 - H(h)^-1 grad(c0; h), H(h)^-1)`` with
        ``H(h) = A^T W0 A + Lambda(h)``: a deterministic function of ``h`` (so the
        Metropolis-Hastings ratio stays exact) that costs one factorization, against a
        Newton solve for the exact conditional mode. ``coef`` is the conditional mode at the
        hyperparameters' mode ``reference_h``, where the two coincide. None restores the
        Newton solve.

        With free nuisance parameters (NegativeBinomial ``alpha``, Gamma ``shape``) in ``h``,
        the gradient at ``c0`` is recomputed at each ``h``'s parameters (one pass over the
        rows) and ``A^T W0 A`` is scaled by the ratio of the rows' total curvature at ``c0``
        to that at ``reference_h`` (exact for the Gamma, whose curvature is proportional to
        its shape): still a deterministic function of ``h``.
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
        fam0 = p.family if reference_h is None else p.family_at(reference_h)
        g0 = self.AT @ fam0.grad(eta, p.y, p.trials)
        w0 = np.asarray(w0, dtype=float)
        self._reference = (c0, w0, g0, self.precision.reweighted(w0), eta, float(np.sum(w0)))
        self._fit = None

    def fit(self, h, c0=None, slot: int = 0):
        """The Gaussian proposal of ``c | h, y``; None where ``h`` is impossible.

        ``slot`` picks the sparse solver that receives the factorization, so that a
        proposal's does not overwrite the current state's.
        """
        prior = self.prior_at(h)
        if prior is None:
            return None
        log_prior, sds, _, lam = prior
        p = self.problem
        free_params = p.family_params is not None
        family = p.family_at(h) if free_params else p.family
        if family is None:
            return None
        try:
            # an extreme proposal (an sd of 1e-150) may overflow: it is rejected below
            with np.errstate(over="ignore", invalid="ignore"):
                if self._reference is not None:
                    c_ref, w, g0, prec, eta0, w0_sum = self._reference
                    scale = 1.0
                    if free_params:
                        g0 = self.AT @ family.grad(eta0, p.y, p.trials)
                        # clipped as w0 is (a Student-t row's curvature can be negative)
                        w_h = np.maximum(family.hess(eta0, p.y, p.trials), 0.0)
                        scale = float(np.sum(w_h)) / w0_sum
                    factor = prec.factor(lam, scale, slot)
                    mode = c_ref - factor.solve(g0 + lam.matvec(c_ref))
                else:
                    mode, _, factor, w = coef_mode(self, lam, c0, family=family)
        except np.linalg.LinAlgError:
            return None
        if not (np.all(np.isfinite(mode)) and np.isfinite(factor.logdet)):
            return None
        half_log_lam = float(lam.half_logdet())
        lik_const, row_param = 0.0, None
        if free_params:
            lik_const = likelihood_constant(family, p.y, p.trials)
            if not np.isfinite(lik_const):
                return None
            if self._compiled is not None:
                row_param = row_parameter(family, p.trials, p.n)
        return _Fit(
            np.asarray(h, dtype=float),
            lam,
            float(log_prior),
            mode,
            factor,
            w,
            sds,
            slot,
            half_log_lam,
            family,
            lik_const,
            row_param,
        )

    def scales(self, h) -> np.ndarray:
        """Term sds at ``h``: those of the current fit when it is ``h``'s."""
        f = self._fit
        if f is not None and np.array_equal(f.h, h):
            return f.sds
        return self.hyper_values(h)[1]

    def log_joint(self, fit: _Fit, c) -> float:
        """``log p(y | c) + log N(c; 0, Lambda^-1) + log p(h)`` up to a constant.

        The likelihood's ``z``-free part counts only when ``h`` holds its nuisance
        parameters (:func:`pymc_sgs.mixed.laplace.likelihood_constant`).
        """
        p = self.problem
        if self._compiled is not None:
            code, indptr, indices, data, offset, y, t = self._compiled
            if fit.row_param is not None:
                t = fit.row_param
            u = csr_potential_sum(code, indptr, indices, data, c, offset, y, t)
        else:
            eta = self.A @ c + self.offset
            with np.errstate(over="ignore", invalid="ignore"):
                u = float(np.sum(fit.family.potential(eta, p.y, p.trials)))
        lam = fit.lam
        val = fit.log_prior - u - 0.5 * lam.quad(c)
        val += fit.half_log_lam
        if p.family_params is not None:
            val += fit.lik_const
        return val if np.isfinite(val) else -np.inf

    def log_q(self, eps, fit: _Fit) -> float:
        """Log density of the coefficient proposal at ``c = c* + L^-T eps``, up to a constant.

        ``N(c*, H^-1)`` mixed with a ``t`` of the same centre and scale (weight
        ``tail_weight``, :mod:`pymc_sgs.defensive`). Its ``0.5 log det H`` is also the
        Jacobian of the ``(h, eps)`` coordinates the hyperparameter moves use; the ``eps``
        part cancels there, as ``eps`` is kept.
        """
        log_ref = -0.5 * float(eps @ eps)
        if self.tail_weight > 0.0:
            log_ref = log_mixture_density(log_ref, self.dim, self.tail_weight, self.tail_df)
        return 0.5 * fit.factor.logdet + log_ref

    def state_at(self, fit: _Fit, eps) -> JointState:
        """The state ``c = c*(h) + L^-T eps`` at ``fit``'s ``h``."""
        c = fit.mode + fit.factor.sample(eps)
        return JointState(fit.h, c, self.log_joint(fit, c), self.log_q(eps, fit), eps)

    def init(self, h, coef, rng=None) -> JointState:
        fit = self.fit(h)
        if fit is None:
            raise ValueError(f"the hyperparameters' start {h} has zero prior density")
        self._fit = fit
        c = np.asarray(coef, dtype=float) - self.coef_mean
        eps = fit.factor.whiten(c - fit.mode)
        return JointState(fit.h, c, self.log_joint(fit, c), self.log_q(eps, fit), eps)

    def step(
        self,
        state: JointState,
        rng,
        proposal: HyperProposal,
        coef_moves: int = 1,
        local_moves: int = 0,
        local_rho: float = 0.8,
        family_slice_width: float = 0.0,
    ):
        """One iteration: the ``(h, c)`` moves, ``coef_moves`` independence moves of ``c``,
        ``local_moves`` autoregressive moves of ``c`` (see :meth:`local_move`), then, when
        ``family_slice_width`` is positive, a slice update of the likelihood's free
        parameters given ``c`` (see :meth:`family_update`)."""
        fit = self._fit
        if fit is None or not np.array_equal(fit.h, state.h):
            fit = self.fit(state.h, state.coef)
        K = state.h.shape[0]
        h_acc = walk_acc = 0.0
        n_h = proposal.moves if K else 0
        n_walk = 0
        for m in range(n_h):
            h_new, log_qh, independent = proposal.draw(m, state.h, rng)
            n_walk += not independent
            new_fit = self.fit(h_new, fit.mode, slot=1 - fit.slot)
            a = 0.0
            if new_fit is not None:  # else zero prior density: rejected
                new = self.state_at(new_fit, state.eps)
                log_ratio = (new.log_post - new.log_q) - (state.log_post - state.log_q) + log_qh
                a = accept_prob(log_ratio)
                if np.log(rng.uniform()) < log_ratio:
                    fit, state = new_fit, new
            h_acc += a
            walk_acc += 0.0 if independent else a
        c_acc = 0.0
        for _ in range(coef_moves):
            eps = rng.standard_normal(self.dim)
            if self.tail_weight > 0.0 and rng.random() < self.tail_weight:
                eps = eps * heavy_scale(rng, self.tail_df)
            new = self.state_at(fit, eps)
            log_ratio = (new.log_post - new.log_q) - (state.log_post - state.log_q)
            c_acc += accept_prob(log_ratio)
            if np.log(rng.uniform()) < log_ratio:
                state = new
        l_acc = 0.0
        for _ in range(local_moves):
            state, a = self.local_move(state, fit, rng, local_rho)
            l_acc += a
        if family_slice_width > 0.0:
            state, fit = self.family_update(state, fit, proposal, family_slice_width, rng)
        self._fit = fit
        info = JointInfo(
            h_acc / n_h if n_h else 1.0,
            walk_acc / n_walk if n_walk else 1.0,
            c_acc / coef_moves if coef_moves else 1.0,
            l_acc / local_moves if local_moves else float("nan"),
        )
        return state, info

    def local_move(self, state: JointState, fit: _Fit, rng, rho: float):
        """An autoregressive move of the standardised coefficients at the current ``h``:
        ``eps' = rho eps + sqrt(1 - rho^2) xi`` (preconditioned Crank-Nicolson; Cotter et al.,
        2013). It is reversible for ``N(0, I)``, the Laplace Gaussian in these coordinates,
        so the acceptance ratio is the ratio of the target to that Gaussian: ``p(y, c', h)
        e^{|eps'|^2 / 2} / (p(y, c, h) e^{|eps|^2 / 2})``. Where the independence moves are
        rarely accepted because a few coefficients' conditionals are far from Gaussian, a
        step of size ``sqrt(1 - rho^2)`` still is (lme4's grouseticks: tail ESS 44 -> 348).

        Returns ``(state, acceptance probability)``.
        """
        eps = rho * state.eps + np.sqrt(1.0 - rho * rho) * rng.standard_normal(self.dim)
        new = self.state_at(fit, eps)
        log_ratio = (new.log_post + 0.5 * float(eps @ eps)) - (
            state.log_post + 0.5 * float(state.eps @ state.eps)
        )
        a = accept_prob(log_ratio)
        if np.log(rng.uniform()) < log_ratio:
            state = new
        return state, a

    def family_coordinates(self, h) -> np.ndarray:
        """Coordinates of ``h`` that set the likelihood's free parameters (NegativeBinomial
        ``alpha``, Gamma ``shape``) and leave every term sd alone; empty when there are
        none."""
        if self._family_coords is None:
            keep = [
                k for k in family_coordinates(self.problem, h) if self.leaves_prior_scales(h, k)
            ]
            self._family_coords = np.array(keep, dtype=np.intp)
        return self._family_coords

    def family_log_density(self, h, eta, log_likelihood=None) -> float:
        """``log p(h) + log p(y | eta, h)`` up to a constant: the density of the family
        coordinates of ``h`` given the coefficients (``log p(c | h)`` does not depend on
        them, see :meth:`family_coordinates`).

        ``log_likelihood``: the family's
        :meth:`~pymc_sgs.families.Family.nuisance_log_likelihood` at ``eta`` (what does not
        depend on the parameters computed once), else the rows are summed afresh.
        """
        p = self.problem
        fam = p.family_at(h)
        if fam is None:
            return -np.inf
        if log_likelihood is None:
            log_likelihood = p.family.nuisance_log_likelihood(eta, p.y, p.trials)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            lp = self.hyper_values(h)[0] + log_likelihood(fam)
        return lp if np.isfinite(lp) else -np.inf

    def family_update(self, state: JointState, fit: _Fit, proposal, width: float, rng):
        """A slice update (Neal, 2003) of the likelihood's free parameters given ``c``.

        Their conditional costs one pass over the rows per evaluation and no factorization,
        and updating a full conditional leaves the posterior invariant. The joint moves
        change ``alpha`` only with the Laplace-integrated coefficients, through a proposal
        that has to move every hyperparameter at once; given ``c`` the dispersion is
        pinned by the residuals alone. The direction and width come from the proposal's
        scale on those coordinates (``width`` times it). The coefficients stay; their
        standardised form ``eps`` and the fit are recomputed at the new ``h`` (one
        factorization). Returns ``(state, fit)``.
        """
        coords = self.family_coordinates(state.h)
        if not coords.size:
            return state, fit
        scale = proposal.indep_chol if proposal.indep_chol is not None else proposal.walk_chol
        directions = width * sub_cholesky(scale, coords)
        eta = self.A @ state.coef + self.offset
        p = self.problem
        log_likelihood = p.family.nuisance_log_likelihood(eta, p.y, p.trials)
        fits = {}

        def admissible(x):
            # the target in the joint moves' (h, eps) coordinates lives where the Laplace fit
            # exists; the fit at the point the update stops at is the new state's
            fits["last"] = self.fit(x, fit.mode, slot=1 - fit.slot)
            return fits["last"] is not None

        h = slice_update(
            lambda x: self.family_log_density(x, eta, log_likelihood),
            state.h,
            coords,
            directions,
            rng,
            admissible,
        )
        if np.array_equal(h, state.h):
            return state, fit
        new_fit = fits["last"]
        c = state.coef
        eps = new_fit.factor.whiten(c - new_fit.mode)
        new = JointState(new_fit.h, c, self.log_joint(new_fit, c), self.log_q(eps, new_fit), eps)
        return new, new_fit
