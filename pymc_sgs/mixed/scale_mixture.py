"""Exact Gibbs kernel for Student-t linear mixed models, through the scale mixture of normals.

The Student-t likelihood is a Gaussian scale mixture (Andrews and Mallows, 1974):

    t_nu(y; eta, sigma) = int N(y; eta, sigma^2 / lambda) Gamma(lambda; nu/2, nu/2) dlambda.

Given the row precisions ``lambda`` a Student-t mixed model is therefore a *linear* mixed
model with known row weights, and everything :class:`~pymc_sgs.mixed.kernel.MixedKernel`
does for one applies: the coefficients integrate out through one structured factorization
of ``Q(h) = A^T Lambda A / sigma^2 + Lambda_prior(h)``. One iteration is

1. ``lambda | c, h``: ``lambda_i ~ Gamma((nu + 1) / 2, (nu + r_i^2 / sigma^2) / 2)`` with
   ``r_i = y_i - eta_i``, exactly;
2. ``(h, c) | lambda``: Metropolis moves of the group sds and ``sigma`` with the
   coefficients integrated out, then ``c`` from its Gaussian conditional (the block of
   :meth:`~pymc_sgs.mixed.kernel.MixedKernel.collapsed_block`); a free ``nu`` stays where
   it is, because given ``lambda`` it is pinned by ``n`` precisions (the slow case of data
   augmentation);
3. ``sigma`` and ``nu`` | ``c``, with ``lambda`` integrated out: slice sampling (Neal, 2003)
   of their unconstrained coordinates on ``p(h) p(c | h) prod_i t_nu(y_i; eta_i, sigma)``,
   along the directions of the proposals' (tuned) scale, which needs no augmentation.

Steps 1-2 are a Gibbs update of the augmented posterior ``p(h, c, lambda | y)``, whose
marginal is the posterior; ``lambda`` is then dropped and step 3 updates the marginal
directly, so every step leaves ``p(h, c | y)`` invariant and nothing is approximated. The
Laplace proposal of :class:`~pymc_sgs.mixed.joint.LaplaceJointKernel` fits a Student-t
posterior poorly wherever outliers make the likelihood non-log-concave in the coefficients
(lme4's sleepstudy as a t model: R-hat 1.10), which is why the mixed-model step samples
every Student-t mixed model with this kernel.

References
----------
Andrews, D. F. and Mallows, C. L. (1974). Scale mixtures of normal distributions. JRSS B
36(1), 99-102.
Gelman, A., Carlin, J. B., Stern, H. S., Dunson, D. B., Vehtari, A. and Rubin, D. B.
(2013). Bayesian Data Analysis, 3rd ed., section 17.2 (the t model by data augmentation).
Neal, R. M. (2003). Slice sampling. Annals of Statistics 31(3), 705-767.
"""

from __future__ import annotations

import numpy as np

from ..families import StudentTIdentity
from .adapt import split_of
from .family_slice import family_coordinates, slice_update, sub_cholesky
from .kernel import AugmentedKernel, HyperProposal, MixedInfo, MixedState

__all__ = ["SLICE_WIDTH", "StudentTKernel", "scale_mixture_applies"]

#: initial width of the slice updates of sigma and nu, in units of the hyperparameters'
#: independence-proposal scale. Given the coefficients their conditional is not narrower
#: than that scale (nu's has a long upper tail): on sleepstudy as a t model, 2000 updates
#: at fixed coefficients took 9.7 rather than 10.8 evaluations each, with ESS 1770 rather
#: than 1260, at 3 widths against 1 (2 to 6 widths perform alike)
SLICE_WIDTH = 3.0


def scale_mixture_applies(family) -> bool:
    """Whether ``family`` is the Student-t (identity link) this kernel augments."""
    return isinstance(family, StudentTIdentity)


class _Restricted:
    """A :class:`HyperProposal` that moves only the coordinates ``free`` of ``h``.

    The proposal's marginal on those coordinates (the sub-block of its scale matrix):
    a Metropolis-Hastings move of ``p(h_free | h_rest, ...)``, with the q-ratio of the
    moved coordinates.
    """

    def __init__(self, proposal: HyperProposal, free: np.ndarray):
        self.free = free
        self.moves = proposal.moves if free.size else 0
        indep = proposal.indep_chol
        indep_sub = None if indep is None else sub_cholesky(indep, free)
        split = None
        if indep_sub is not None and proposal.indep_split is not None and free.size:
            # the two-piece scales of the restriction's own whitened coordinates (those of
            # the full proposal mix in the coordinates left out)
            draws = proposal.indep_draws
            if draws is not None:
                split = split_of(draws[:, free], proposal.centre[free], indep_sub)
        self.inner = HyperProposal(
            walk_chol=sub_cholesky(proposal.walk_chol, free),
            centre=None if proposal.centre is None else proposal.centre[free],
            indep_chol=indep_sub,
            df=proposal.df,
            moves=self.moves,
            indep_split=split,
        )

    def draw(self, m: int, h, rng):
        sub, log_qh, independent = self.inner.draw(m, h[self.free], rng)
        out = h.copy()
        out[self.free] = sub
        return out, log_qh, independent


class StudentTKernel(AugmentedKernel):
    """Exact Gibbs kernel of a Student-t mixed model (see the module docstring).

    Parameters
    ----------
    problem : MixedProblem
        With a Student-t likelihood (identity link); ``sigma`` and ``nu`` fixed or part of
        the hyperparameters (:attr:`MixedProblem.family_params`).
    method : str
        Factorization, see :class:`~pymc_sgs.mixed.precision.MixedPrecision`.

    The state is a :class:`~pymc_sgs.mixed.kernel.MixedState` whose ``z`` and ``z_mode``
    are None: ``lambda`` is drawn afresh from the coefficients every iteration.
    """

    def __init__(self, problem, method: str = "auto"):
        if not scale_mixture_applies(problem.family):
            raise ValueError(
                "StudentTKernel needs a Student-t likelihood with identity link; received "
                f"{problem.family!r}"
            )
        # the Gaussian model given lambda has the likelihood's sigma (observation_sd) and
        # row weights lambda
        super().__init__(problem, method=method)
        self._r0 = problem.y - self.offset
        # which coordinates of h move sigma and nu, and whether they leave the term sds
        # alone: found at the first state (_coordinates)
        self._coords = None
        self._family_only = False
        self._moves_cache = None

    # -- pieces ----------------------------------------------------------------------
    def family(self, h):
        """The Student-t at ``h`` (None where its parameters are not valid)."""
        return self.problem.family_at(h)

    def observation_sd(self, h, noise_sd) -> float:
        fam = self.family(h)
        return float(fam.params["sigma"]) if fam is not None else float("nan")

    def _coordinates(self, h):
        """``(free, params)``: the coordinates of ``h`` the collapsed block moves (all but
        those that change ``nu``) and those that change ``sigma`` or ``nu``."""
        if self._coords is None:
            params = family_coordinates(self.problem, h)
            nu_coords = family_coordinates(self.problem, h, ["nu"])
            free = np.setdiff1d(np.arange(h.shape[0]), nu_coords).astype(np.intp)
            self._coords = (free, params)
            # (correlated blocks: log_conditional's block prior is always computed)
            self._family_only = not self._blocks and all(
                self.leaves_prior_scales(h, k) for k in params
            )
        return self._coords

    def draw_precisions(self, coef, fam, rng) -> np.ndarray:
        """``lambda_i | c, h ~ Gamma((nu + 1) / 2, rate (nu + r_i^2 / sigma^2) / 2)``."""
        nu, sigma = fam.params["nu"], fam.params["sigma"]
        r = (self.problem.y - self.eta(coef)) / sigma
        return rng.gamma(0.5 * (nu + 1.0), 2.0 / (nu + r * r))

    def data_given(self, lam):
        """``(A^T Lambda r, r^T Lambda r)`` with ``r = y - offset``."""
        wr = lam * self._r0
        return self.AT @ wr, float(self._r0 @ wr)

    def log_conditional(self, h, eta, group, family_only: bool = False) -> float:
        """``log p(h) + log p(c | h) + sum_i log t_nu(y_i; eta_i, sigma)`` up to a constant:
        the density of ``h`` given the coefficients, ``lambda`` integrated out.

        ``family_only``: ``h`` differs from the points it is compared with only in
        coordinates that leave the term sds alone, so ``log p(c | h)`` is a constant and is
        left out.
        """
        fam = self.family(h)
        if fam is None:
            return -np.inf
        if family_only:
            lp = self.hyper_values(h)[0] + float(np.sum(fam.log_likelihood(eta, self.problem.y)))
            return lp if np.isfinite(lp) else -np.inf
        if self._blocks:
            # correlated group effects: the block prior (the common coefficients' prior
            # does not depend on h)
            prior = self.prior_at(h)
            if prior is None:
                return -np.inf
            log_prior, lam = prior[0], prior[3]
            c = np.concatenate([np.zeros(self.problem.p), group])
            lp = log_prior + float(lam.half_logdet()) - 0.5 * lam.quad(c)
            lp += float(np.sum(fam.log_likelihood(eta, self.problem.y)))
            return lp if np.isfinite(lp) else -np.inf
        log_prior, sds, _ = self.hyper_values(h)
        if not (np.isfinite(log_prior) and np.all(np.isfinite(sds))):
            return -np.inf
        if not np.all(sds > 0):
            return -np.inf
        prec = 1.0 / sds[self.level_term] ** 2
        lp = (
            log_prior
            + 0.5 * float(np.sum(np.log(prec)))
            - 0.5 * float(prec @ (group * group))
            + float(np.sum(fam.log_likelihood(eta, self.problem.y)))
        )
        return lp if np.isfinite(lp) else -np.inf

    def slice_parameters(self, h, coef, directions, rng):
        """One slice-sampling update (stepping out, then shrinkage) of the coordinates that
        move ``sigma`` or ``nu``, given the coefficients, along each column of
        ``directions`` in turn (its length is the initial width).

        The columns are the Cholesky factor of the proposals' scale on those coordinates:
        ``sigma`` and ``nu`` are strongly correlated a posteriori (heavier tails go with a
        smaller ``sigma``), and updates along the coordinate axes crawl along that ridge
        (sleepstudy as a t model: bulk ESS 393 and 362 of 2000 draws against 761 and 856).
        """
        _, params = self._coordinates(h)
        if not params.size:
            return h
        eta = self.eta(coef)
        group = (coef - self.coef_mean)[self.problem.p :]
        only = self._family_only
        return slice_update(
            lambda x: self.log_conditional(x, eta, group, only), h, params, directions, rng
        )

    # -- the kernel ------------------------------------------------------------------
    def step(self, state: MixedState, rng, proposal: HyperProposal):
        """One iteration: ``lambda | c``, ``(h, c) | lambda``, then ``sigma, nu | c``."""
        free, params = self._coordinates(state.h)
        fam = self.family(state.h)
        lam = self.draw_precisions(state.coef, fam, rng)
        block, directions = self._moves(proposal, free, params, state.h.shape[0])
        coef, h, accept, walk_accept, indep_accept = self.block_given_weights(
            state.h, lam, self.data_given(lam), rng, block
        )
        if params.size:
            h = self.slice_parameters(h, coef, directions, rng)
        return MixedState(h, coef, None, None), MixedInfo(accept, walk_accept, 0.0, 0, indep_accept)

    def _moves(self, proposal: HyperProposal, free, params, K):
        """``(block proposal, slice directions)`` from ``proposal``: its restriction to the
        coordinates ``free`` and the slice widths on ``params``. Kept while the proposal's
        arrays are unchanged (they change only when tuning refits them), since the
        sub-block factorizations cost about as much as a slice update's evaluation."""
        cached = self._moves_cache
        if cached is not None and cached[0].moves == proposal.moves:
            old = cached[0]
            same = (
                all(
                    (a is None and b is None)
                    or (a is not None and b is not None and np.array_equal(a, b))
                    for a, b in (
                        (old.walk_chol, proposal.walk_chol),
                        (old.centre, proposal.centre),
                        (old.indep_chol, proposal.indep_chol),
                        (old.indep_split, proposal.indep_split),
                    )
                )
                and old.df == proposal.df
            )
            if same:
                return cached[1], cached[2]
        block = proposal if free.size == K else _Restricted(proposal, free)
        directions = None
        if params.size:
            scale = proposal.indep_chol if proposal.indep_chol is not None else proposal.walk_chol
            directions = SLICE_WIDTH * sub_cholesky(scale, params)
        self._moves_cache = (proposal, block, directions)
        return block, directions
