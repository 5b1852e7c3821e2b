"""The exact GLMM kernel (pymc_sgs.mixed.joint) and the adapted proposal shape (mixed.adapt).

* A two-level Poisson random intercept with sparse counts: the chain's means of ``sigma``
  and ``u`` against quadrature of the exact posterior, within 4 MCSE. Negative controls:
  the same move without the Jacobian ``det H(h)^-1/2`` of the ``(h, eps)`` coordinates, and
  coefficient proposals from the Gaussian/t mixture corrected as if Gaussian, target other
  posteriors, and the same check rejects them; the autoregressive (pCN) moves alone, and
  as negative control the same moves accepted as a symmetric random walk.
* The same check on a Bernoulli probit random intercept (a family without a compiled pass).
* The compiled likelihood pass against numpy's.
* ``whiten`` and the two sparse solver slots: a proposal's factorization leaves the
  current state's intact.
* The proposal shape refitted to the tuning draws, frozen afterwards, reset per chain (same
  draws for any ``cores``: ``test_mixed_models.test_same_seed_same_draws_for_any_cores``).
"""

from __future__ import annotations

import dataclasses

import arviz as az
import numpy as np
import pymc as pm
import pytest
import scipy.special

import pymc_sgs
from pymc_sgs.families import (
    BernoulliLogit,
    BernoulliProbit,
    BinomialLogit,
    NegativeBinomialLog,
    PoissonLog,
)
from pymc_sgs.mixed.adapt import FIRST_REFIT, MAX_SPLIT, empirical_shape, refit_due, split_scales
from pymc_sgs.mixed.joint import LaplaceJointKernel
from pymc_sgs.mixed.kernel import HyperProposal
from pymc_sgs.mixed.laplace import hyper_mode
from pymc_sgs.mixed.precision import design_matrix
from pymc_sgs.mixed.problem import GroupTerm, MixedProblem

from .test_mixed_kernel import crossed_problem, half_normal_log_sd

COUNTS = ([0, 1, 0], [3, 5])  # two levels; the first nearly empty


def two_level_poisson():
    y = np.concatenate([np.asarray(c, dtype=float) for c in COUNTS])
    g = np.concatenate([np.full(len(c), j) for j, c in enumerate(COUNTS)])
    n = y.size
    return MixedProblem(
        y=y,
        X=np.zeros((n, 0)),
        offset=np.zeros(n),
        beta_mean=np.zeros(0),
        beta_precision=np.zeros(0),
        terms=(GroupTerm("1|g", "g", g, np.ones(n), len(COUNTS), 0),),
        hyper=half_normal_log_sd([1.0]),
        hyper_size=1,
        family=PoissonLog(),
    )


BINARY = ([1, 0, 1, 1], [0, 0, 0, 1, 0, 0])  # two levels of a probit random intercept


def two_level_probit():
    y = np.concatenate([np.asarray(c, dtype=float) for c in BINARY])
    g = np.concatenate([np.full(len(c), j) for j, c in enumerate(BINARY)])
    problem = two_level_poisson()
    n = y.size
    return dataclasses.replace(
        problem,
        y=y,
        X=np.zeros((n, 0)),
        offset=np.zeros(n),
        terms=(GroupTerm("1|g", "g", g, np.ones(n), len(BINARY), 0),),
        family=BernoulliProbit(),
    )


def _loglik_poisson(c, u):
    return c.sum() * u - c.size * np.exp(u)  # up to a constant in u


def _loglik_probit(c, u):
    return sum(scipy.special.log_ndtr(u if yi else -u) for yi in c)


def quadrature_means(levels=COUNTS, loglik_of=_loglik_poisson):
    """``E[sigma]`` and ``E[u_j]`` of the exact posterior: the levels are independent given h."""
    h = np.linspace(-12.0, 2.5, 1500)
    u = np.linspace(-12.0, 5.0, 1500)
    sd = np.exp(h)
    log_w = -0.5 * sd**2 + h  # HalfNormal(1) on sigma, Jacobian of h = log sigma
    log_m, first = [], []
    for c in levels:
        c = np.asarray(c, dtype=float)
        loglik = loglik_of(c, u)
        log_prior = -0.5 * (u[None, :] / sd[:, None]) ** 2 - h[:, None]
        joint = loglik[None, :] + log_prior
        lm = scipy.special.logsumexp(joint, axis=1)
        log_m.append(lm)
        first.append(np.exp(joint - lm[:, None]) @ u)  # E[u_j | h]
    log_post = log_w + sum(log_m)
    p = np.exp(log_post - log_post.max())
    p /= p.sum()
    return float(p @ sd), [float(p @ f) for f in first]


def run(kernel, n_iter, seed, coef_moves=3, local_moves=0):
    rng = np.random.default_rng(seed)
    mode = hyper_mode(kernel, np.zeros(1))
    kernel.set_reference(mode.coef, mode.row_weights)
    chol = np.linalg.cholesky(mode.h_cov)
    prop = HyperProposal(walk_chol=2.0 * chol, centre=mode.h, indep_chol=1.2 * chol, df=4.0)
    state = kernel.init(mode.h, mode.coef)
    out = np.empty((n_iter, 3))
    for i in range(n_iter):
        state, _ = kernel.step(state, rng, prop, coef_moves=coef_moves, local_moves=local_moves)
        out[i] = np.exp(state.h[0]), *state.coef
    return out


class _NoJacobian(LaplaceJointKernel):
    """The move with ``eps`` kept and the Jacobian ``det H(h)^-1/2`` forgotten."""

    def log_q(self, eps, fit):
        return super().log_q(eps, fit) - 0.5 * fit.factor.logdet


class _GaussianRatio(LaplaceJointKernel):
    """Coefficient proposals from the Gaussian/t mixture, corrected as if Gaussian alone."""

    def log_q(self, eps, fit):
        return 0.5 * fit.factor.logdet - 0.5 * float(eps @ eps)


class _SymmetricLocal(LaplaceJointKernel):
    """The autoregressive move accepted as if it were a symmetric random walk."""

    def local_move(self, state, fit, rng, rho):
        eps = rho * state.eps + np.sqrt(1.0 - rho * rho) * rng.standard_normal(self.dim)
        new = self.state_at(fit, eps)
        if np.log(rng.uniform()) < new.log_post - state.log_post:
            state = new
        return state, 0.0


def _check(draws, ref_sigma, ref_u):
    errors = []
    for k, ref in enumerate([ref_sigma, *ref_u]):
        x = draws[:, k]
        mcse = float(az.mcse(x[None, :], method="mean"))
        errors.append(abs(x.mean() - ref) / mcse)
    return np.array(errors)


def test_joint_kernel_matches_quadrature_and_the_jacobian_matters():
    problem = two_level_poisson()
    ref_sigma, ref_u = quadrature_means()
    draws = run(LaplaceJointKernel(problem), 20_000, seed=3)
    assert np.all(_check(draws, ref_sigma, ref_u) < 4)

    wrong = run(_NoJacobian(problem), 20_000, seed=3)
    assert _check(wrong, ref_sigma, ref_u)[0] > 4
    wrong = run(_GaussianRatio(problem), 20_000, seed=3)
    assert np.max(_check(wrong, ref_sigma, ref_u)) > 4


def test_probit_random_intercept_matches_quadrature():
    ref_sigma, ref_u = quadrature_means(BINARY, _loglik_probit)
    kernel = LaplaceJointKernel(two_level_probit())
    assert kernel._compiled is None  # the numpy path
    draws = run(kernel, 20_000, seed=3)
    assert np.all(_check(draws, ref_sigma, ref_u) < 4)
    wrong = run(_NoJacobian(two_level_probit()), 20_000, seed=3)
    assert _check(wrong, ref_sigma, ref_u)[0] > 4


def test_local_moves_keep_the_target_and_their_ratio_matters():
    """The coefficients' autoregressive moves alone (no independence moves) against the
    same quadrature; accepted as a symmetric random walk they target another posterior."""
    problem = two_level_poisson()
    ref_sigma, ref_u = quadrature_means()
    draws = run(LaplaceJointKernel(problem), 20_000, seed=6, coef_moves=0, local_moves=3)
    assert np.all(_check(draws, ref_sigma, ref_u) < 4)
    wrong = run(_SymmetricLocal(problem), 20_000, seed=6, coef_moves=0, local_moves=3)
    assert np.max(_check(wrong, ref_sigma, ref_u)) > 4


@pytest.mark.parametrize("family", ["bernoulli", "binomial", "poisson", "negative_binomial"])
def test_compiled_log_joint_equals_numpy_reference(family):
    problem = crossed_problem(seed=5, n=150, L1=10, L2=4, family=BernoulliLogit())
    rng = np.random.default_rng(6)
    if family == "binomial":
        trials = rng.integers(1, 6, problem.n).astype(float)
        y = np.minimum(problem.y * trials, trials)
        problem = dataclasses.replace(problem, family=BinomialLogit(), y=y, trials=trials)
    elif family == "poisson":
        problem = dataclasses.replace(problem, family=PoissonLog(), y=rng.poisson(2.0, problem.n))
    elif family == "negative_binomial":
        y = rng.negative_binomial(2.5, 0.4, problem.n).astype(float)
        problem = dataclasses.replace(problem, family=NegativeBinomialLog(alpha=2.5), y=y)
    fast, slow = LaplaceJointKernel(problem), LaplaceJointKernel(problem, compiled=False)
    assert fast._compiled is not None and slow._compiled is None
    fit = slow.fit(np.array([-0.3, 0.2, -1.0]))
    for scale in (0.1, 1.0, 3.0):
        c = scale * rng.normal(size=slow.dim)
        np.testing.assert_allclose(fast.log_joint(fit, c), slow.log_joint(fit, c), rtol=1e-11)
    # a linear predictor whose likelihood overflows is an impossible state on both paths
    c = np.full(slow.dim, 400.0)
    if family == "poisson":
        assert fast.log_joint(fit, c) == slow.log_joint(fit, c) == -np.inf


def test_a_proposal_factorization_leaves_the_current_one_intact():
    """Two sparse solver slots: the current state's factor survives a proposal's."""
    problem = crossed_problem(seed=4, n=200, L1=12, L2=7, family=BernoulliLogit())
    kernel = LaplaceJointKernel(problem, method="sparse")
    mode = hyper_mode(kernel, np.zeros(3))
    kernel.set_reference(mode.coef, mode.row_weights)
    h1, h2 = mode.h, mode.h + 0.7
    f1 = kernel.fit(h1, slot=0)
    f2 = kernel.fit(h2, slot=1 - f1.slot)
    A = design_matrix(problem).toarray()
    w = kernel._reference[1]
    b = np.linspace(-1.0, 1.0, kernel.dim)
    for f in (f1, f2):
        Q = A.T @ (A * w[:, None]) + np.diag(f.lam.diag)
        np.testing.assert_allclose(f.factor.solve(b), np.linalg.solve(Q, b), rtol=1e-8)
        eps = f.factor.whiten(b)
        np.testing.assert_allclose(f.factor.sample(eps), b, rtol=1e-8, atol=1e-10)


def test_refit_schedule_and_empirical_shape():
    due = [n for n in range(1, 1700) if refit_due(n)]
    assert due == [FIRST_REFIT * 2**k for k in range(6)]
    rng = np.random.default_rng(0)
    cov = np.array([[1.0, 0.6], [0.6, 2.0]])
    burn = np.full((4000, 2), 50.0)  # the first half is dropped as burn-in
    draws = np.vstack([burn, rng.multivariate_normal([1.0, -2.0], cov, 4000)])
    shape = empirical_shape(draws)
    np.testing.assert_allclose(shape.centre, [1.0, -2.0], atol=0.1)
    np.testing.assert_allclose(shape.chol @ shape.chol.T, cov, atol=0.15)
    # a chain that has not moved determines no shape: the caller keeps the one it has
    assert empirical_shape(np.ones((100, 2))) is None
    assert empirical_shape(np.ones((2, 2))) is None


def test_split_scales_follow_the_skew_and_keep_a_unit_second_moment():
    rng = np.random.default_rng(0)
    sym = rng.standard_normal((20000, 2))
    np.testing.assert_allclose(split_scales(sym), 1.0, atol=0.03)
    # a long lower tail (the log of a Gamma(2) variable), standardised
    x = np.log(rng.gamma(2.0, size=20000))
    z = ((x - x.mean()) / x.std())[:, None]
    ((s_lo, s_hi),) = split_scales(z)
    assert s_lo > 1.0 > s_hi and s_lo / s_hi > 1.1
    assert (s_lo**3 + s_hi**3) / (s_lo + s_hi) == pytest.approx(1.0)
    ((s_lo, s_hi),) = split_scales(-z)  # mirrored
    assert s_hi > 1.0 > s_lo and s_hi / s_lo > 1.1
    # degenerate columns stay symmetric; extreme ratios are clipped
    ((s_lo, s_hi),) = split_scales(np.abs(z))
    assert s_lo / s_hi == pytest.approx(1.0 / MAX_SPLIT)
    assert empirical_shape(np.vstack([z, z])).split.shape == (1, 2)


def _split_chain(correct_ratio, n_iter=20000, seed=0):
    """Independence Metropolis-Hastings on ``h1 = log Gamma(2)``, ``h2 | h1 ~ N(h1 / 2, 1)``
    with the two-piece t proposal; ``correct_ratio=False`` uses the symmetric t's
    q-ratio for the same draws."""
    from pymc_sgs.mixed.kernel import _t_logpdf_unnorm

    def log_p(h):
        return 2.0 * h[0] - np.exp(h[0]) - 0.5 * (h[1] - 0.5 * h[0]) ** 2

    centre = np.array([0.4, 0.2])
    chol = np.array([[0.9, 0.0], [0.4, 1.1]])
    prop = HyperProposal(
        walk_chol=chol,
        centre=centre,
        indep_chol=chol,
        df=4.0,
        indep_split=np.array([[1.5, 0.7], [1.0, 1.0]]),
    )
    rng = np.random.default_rng(seed)
    h = centre.copy()
    out = np.empty((n_iter, 2))
    for i in range(n_iter):
        h_new, log_qh, independent = prop.draw(0, h, rng)
        assert independent
        if not correct_ratio:
            log_qh = _t_logpdf_unnorm(h, centre, chol, 4.0) - _t_logpdf_unnorm(
                h_new, centre, chol, 4.0
            )
        if np.log(rng.uniform()) < log_p(h_new) - log_p(h) + log_qh:
            h = h_new
        out[i] = h
    return out


def test_two_piece_independence_proposal_keeps_the_target_and_its_ratio_matters():
    """The exact moments of ``log Gamma(2)`` (digamma, trigamma) and of ``h2``: within 4
    MCSE with the two-piece t's own q-ratio, not with the symmetric t's."""
    exact = [scipy.special.digamma(2.0), 0.5 * scipy.special.digamma(2.0)]
    exact_var = scipy.special.polygamma(1, 2.0)

    def errors(draws):
        z = []
        for k in range(2):
            mcse = float(az.mcse(draws[None, :, k], method="mean"))
            z.append(abs(draws[:, k].mean() - exact[k]) / mcse)
        sq = (draws[:, 0] - exact[0]) ** 2
        z.append(abs(sq.mean() - exact_var) / float(az.mcse(sq[None, :], method="mean")))
        return np.array(z)

    assert np.all(errors(_split_chain(True)) < 4.0)
    assert np.max(errors(_split_chain(False))) > 6.0


def _glmm(seed=0):
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(12), 8)
    u = rng.normal(0, 0.5, 12)
    y = rng.poisson(np.exp(0.3 + u[g]))
    with pm.Model() as model:
        b = pm.Normal("b", 0, 2)
        tau = pm.HalfNormal("tau", 1)
        v = pm.Normal("v", 0, tau, shape=12)
        pm.Poisson("y", mu=pm.math.exp(b + v[g]), observed=y)
    return model


def test_proposal_shape_is_refitted_in_tuning_frozen_after_and_reset_per_chain():
    model = _glmm()
    with model:
        step = pymc_sgs.SplitGibbs()
    laplace = step.shape
    step.set_rng(np.random.default_rng(1))
    point = model.initial_point()
    for _ in range(2 * FIRST_REFIT):
        point, _ = step.step(point)
    tuned = step.shape
    assert not np.array_equal(tuned.centre, laplace.centre)
    assert len(step.h_draws) == 2 * FIRST_REFIT
    step.stop_tuning()
    assert step.h_draws == []
    for _ in range(3 * FIRST_REFIT):
        point, _ = step.step(point)
    assert step.shape is tuned  # frozen after tuning
    # the random walk's own acceptance, not the average with the independence moves, is
    # what its scale was tuned towards (0.3)
    rng = np.random.default_rng(2)
    walk = [
        step.kernel.step(step.state, rng, step._proposal(), 0)[1].walk_accept for _ in range(400)
    ]
    assert 0.12 < np.mean(walk) < 0.6
    # a new chain starts from the Laplace fit again
    step.set_rng(np.random.default_rng(3))
    assert step.shape is not tuned and np.array_equal(step.shape.centre, laplace.centre)
