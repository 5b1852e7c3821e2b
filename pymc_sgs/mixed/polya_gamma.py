"""Pólya-Gamma Gibbs kernel for logistic GLMMs, with the hyperparameters collapsed.

The Binomial likelihood with logit link is a Gaussian scale mixture in the linear
predictor (Polson, Scott and Windle, 2013):

    expit(eta)^y (1 - expit(eta))^(m - y) = 2^-m e^(kappa eta) E[exp(-omega eta^2 / 2)],

``omega ~ PG(m, 0)``, ``kappa = y - m / 2``. Given the Pólya-Gamma variables ``omega`` a
logistic GLMM is therefore a *linear* mixed model with known row weights ``omega_i`` and
pseudo-data ``kappa_i / omega_i``, and everything :class:`~pymc_sgs.mixed.kernel.MixedKernel`
does for a linear mixed model applies: the coefficients integrate out exactly through one
structured factorization of ``Q(h) = A^T Omega A + Lambda(h)``. One iteration is

1. ``omega | c``: ``omega_i ~ PG(m_i, eta_i)``, exactly (the ``polyagamma`` package);
2. ``h | omega``: the Metropolis moves of ``MixedKernel`` with the coefficients integrated
   out;
3. ``c | h, omega``: an exact Gaussian draw.

No approximation enters anywhere (no split, no Laplace proposal), so the chain samples the
posterior exactly whatever the number of coefficients. It is the kernel of choice where
the Laplace proposal of :class:`~pymc_sgs.mixed.joint.LaplaceJointKernel` has too many
coefficients to be accepted (lme4's InstEval as a logistic GLMM, 4,124 coefficients:
acceptance 0.02). Where that proposal works it mixes better per iteration than this data
augmentation (cbpp, Contraception: ``benchmarks/results/mixed.md``), which is why the
mixed-model step starts every chain on it and changes over only when its acceptance
during tuning says it fails (:mod:`pymc_sgs.mixed.step`).

References
----------
Polson, N. G., Scott, J. G. and Windle, J. (2013). Bayesian inference for logistic models
using Pólya-Gamma latent variables. JASA 108(504), 1339-1349.
Windle, J., Polson, N. G. and Scott, J. G. (2014). Sampling Pólya-Gamma random variates:
alternate and approximate techniques. arXiv:1405.0506.
"""

from __future__ import annotations

import numpy as np

from ..families import BinomialLogit
from .kernel import AugmentedKernel, HyperProposal, MixedInfo, MixedState

__all__ = ["PolyaGammaKernel", "PolyaGammaRows", "polya_gamma_applies"]


def polya_gamma_applies(family) -> bool:
    """Whether ``family`` has the Pólya-Gamma representation (Bernoulli/Binomial, logit)."""
    return isinstance(family, BinomialLogit)


class PolyaGammaRows:
    """The Pólya-Gamma variables of a Binomial logit likelihood's rows.

    ``trials`` are the rows' numbers of trials, ``kappa = y - trials / 2``;
    :meth:`draw` gives ``omega_i ~ PG(m_i, eta_i)``.
    """

    def __init__(self, problem):
        n = problem.n
        trials = np.ones(n) if problem.trials is None else problem.trials
        m = np.ascontiguousarray(np.broadcast_to(np.asarray(trials, dtype=float), (n,)))
        self.n = n
        self.trials = m
        self.kappa = problem.y - 0.5 * m
        # PG(0, .) is the point mass at 0: rows with no trials carry no information
        self._rows = np.flatnonzero(m > 0)
        self._all_rows = self._rows.size == n
        self._ones = m[self._rows] == 1.0

    def draw(self, eta, rng) -> np.ndarray:
        """``omega_i ~ PG(m_i, eta_i)`` for every row, exactly.

        Devroye's sampler for one trial, the alternate/saddle-point samplers of Windle et
        al. (2014) otherwise: all exact (the package's default "hybrid" switches to a
        normal approximation for many trials, which this kernel must not).
        """
        from polyagamma import random_polyagamma

        omega = np.zeros(self.n)
        rows, ones = self._rows, self._ones
        e = eta if self._all_rows else eta[rows]
        out = np.empty(rows.size)
        if np.all(ones):
            out[:] = random_polyagamma(1.0, e, method="devroye", random_state=rng)
        else:
            m = self.trials[rows]
            out[ones] = random_polyagamma(1.0, e[ones], method="devroye", random_state=rng)
            many = ~ones
            big = many & (m >= 8.0)
            mid = many & ~big
            if np.any(mid):
                out[mid] = random_polyagamma(m[mid], e[mid], method="alternate", random_state=rng)
            if np.any(big):
                out[big] = random_polyagamma(m[big], e[big], method="saddle", random_state=rng)
        omega[rows] = out
        return omega


class PolyaGammaKernel(AugmentedKernel):
    """Exact Gibbs kernel of a logistic GLMM (see the module docstring).

    Parameters
    ----------
    problem : MixedProblem
        With a Bernoulli or Binomial likelihood and logit link.
    method : str
        Factorization, see :class:`~pymc_sgs.mixed.precision.MixedPrecision`.

    The state is a :class:`~pymc_sgs.mixed.kernel.MixedState` whose ``z`` and ``z_mode``
    are None: ``omega`` is drawn afresh from the coefficients every iteration, so it is
    not part of the state.
    """

    def __init__(self, problem, method: str = "auto"):
        if not polya_gamma_applies(problem.family):
            raise ValueError(
                "PolyaGammaKernel needs a Bernoulli or Binomial likelihood with logit link; "
                f"received {problem.family!r}"
            )
        # the Gaussian model given omega has unit scale (rho = 1), its weights carry the rest
        super().__init__(problem, method=method)
        self.rows = PolyaGammaRows(problem)
        self.trials = self.rows.trials
        self.kappa = self.rows.kappa

    def draw_omega(self, coef, rng) -> np.ndarray:
        """``omega_i ~ PG(m_i, eta_i)`` for every row, exactly (:class:`PolyaGammaRows`)."""
        return self.rows.draw(self.eta(coef), rng)

    def data_given(self, omega):
        """``(A^T Omega r, 0)`` with ``r = kappa / omega - offset`` the pseudo-data's residual.

        The second element, ``r^T Omega r``, does not depend on ``h`` and is left out: the
        Metropolis moves compare hyperparameters at the same ``omega``.
        """
        return self.AT @ (self.kappa - omega * self.offset), 0.0

    def step(self, state: MixedState, rng, proposal: HyperProposal):
        """One iteration: ``omega | c``, then ``(h, c) | omega`` as one block."""
        omega = self.draw_omega(state.coef, rng)
        coef, h, accept, walk_accept, indep_accept = self.block_given_weights(
            state.h, omega, self.data_given(omega), rng, proposal
        )
        return MixedState(h, coef, None, None), MixedInfo(accept, walk_accept, 0.0, 0, indep_accept)
