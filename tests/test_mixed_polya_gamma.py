"""The Pólya-Gamma kernel of logistic GLMMs (pymc_sgs.mixed.polya_gamma) and the change-over.

* ``omega | eta``: the mean of every sampler the kernel uses (one trial, a few, many)
  against the closed form ``E[PG(m, c)] = m tanh(c / 2) / (2 c)``, within 4 MCSE; the same
  check rejects a draw at the wrong tilt.
* The kernel on a two-level Binomial random intercept (rows of 1, 3 and 12 trials): the
  chain's means of ``sigma`` and ``u`` against quadrature of the exact posterior, within 4
  MCSE. Negative control: the kernel with ``omega`` drawn at half the linear predictor
  targets another posterior, and the same check rejects it.
* The step: a logistic GLMM with many small groups, whose Laplace proposal is rarely
  accepted, changes over to this kernel after PROBE_DRAWS tuning iterations (sampler stat
  ``polya_gamma``), the same draws for any ``cores``; models whose Laplace proposal works
  never change over, and make the coefficients' autoregressive moves only when their
  independence moves are accepted less than LOCAL_ACCEPT of the time.
"""

from __future__ import annotations

import arviz as az
import numpy as np
import pymc as pm
import pytest
import scipy.special

import pymc_sgs
from pymc_sgs.families import BinomialLogit, PoissonLog
from pymc_sgs.mixed.kernel import HyperProposal
from pymc_sgs.mixed.laplace import hyper_mode
from pymc_sgs.mixed.polya_gamma import PolyaGammaKernel, polya_gamma_applies
from pymc_sgs.mixed.problem import GroupTerm, MixedProblem
from pymc_sgs.mixed.step import LOCAL_ACCEPT, PROBE_DRAWS

from .test_mixed_kernel import half_normal_log_sd

# (successes, trials) of each row, per level; the first level nearly empty
LEVELS = ([(0, 1), (1, 3)], [(2, 3), (9, 12), (1, 1), (0, 1)])


def two_level_binomial():
    rows = [(j, y, m) for j, lv in enumerate(LEVELS) for y, m in lv]
    g = np.array([r[0] for r in rows])
    y = np.array([r[1] for r in rows], dtype=float)
    m = np.array([r[2] for r in rows], dtype=float)
    n = y.size
    return MixedProblem(
        y=y,
        X=np.zeros((n, 0)),
        offset=np.zeros(n),
        beta_mean=np.zeros(0),
        beta_precision=np.zeros(0),
        terms=(GroupTerm("1|g", "g", g, np.ones(n), len(LEVELS), 0),),
        hyper=half_normal_log_sd([1.0]),
        hyper_size=1,
        family=BinomialLogit(),
        trials=m,
    )


def quadrature_means():
    """``E[sigma]`` and ``E[u_j]`` of the exact posterior: the levels are independent given h."""
    h = np.linspace(-12.0, 2.5, 1500)
    u = np.linspace(-14.0, 14.0, 2000)
    sd = np.exp(h)
    log_w = -0.5 * sd**2 + h  # HalfNormal(1) on sigma, Jacobian of h = log sigma
    log_m, first = [], []
    for lv in LEVELS:
        ys = sum(y for y, _ in lv)
        ms = sum(m for _, m in lv)
        loglik = ys * u - ms * np.logaddexp(0.0, u)
        log_prior = -0.5 * (u[None, :] / sd[:, None]) ** 2 - h[:, None]
        joint = loglik[None, :] + log_prior
        lm = scipy.special.logsumexp(joint, axis=1)
        log_m.append(lm)
        first.append(np.exp(joint - lm[:, None]) @ u)
    log_post = log_w + sum(log_m)
    p = np.exp(log_post - log_post.max())
    p /= p.sum()
    return float(p @ sd), [float(p @ f) for f in first]


class _HalfTilt(PolyaGammaKernel):
    """``omega`` drawn at half the linear predictor: a wrong augmentation."""

    def draw_omega(self, coef, rng):
        return super().draw_omega(0.5 * coef, rng)


def run(kernel, n_iter, seed):
    rng = np.random.default_rng(seed)
    mode = hyper_mode(kernel, np.zeros(1))
    chol = np.linalg.cholesky(mode.h_cov)
    prop = HyperProposal(walk_chol=2.0 * chol, centre=mode.h, indep_chol=1.2 * chol, df=4.0)
    state = kernel.init(mode.h, mode.coef)
    out = np.empty((n_iter, 3))
    for i in range(n_iter):
        state, info = kernel.step(state, rng, prop)
        # the acceptance of each kind of h-move is reported (what the step's tuning reads)
        assert 0.0 <= info.indep_accept <= 1.0 and 0.0 <= info.walk_accept <= 1.0
        out[i] = np.exp(state.h[0]), *state.coef
    return out


def _z_scores(draws, refs):
    z = []
    for k, ref in enumerate(refs):
        x = draws[:, k]
        z.append(abs(x.mean() - ref) / float(az.mcse(x[None, :], method="mean")))
    return np.array(z)


def test_kernel_matches_quadrature_and_a_wrong_augmentation_is_detected():
    problem = two_level_binomial()
    ref_sigma, ref_u = quadrature_means()
    refs = [ref_sigma, *ref_u]
    draws = run(PolyaGammaKernel(problem), 20_000, seed=5)
    assert np.all(_z_scores(draws, refs) < 4)
    wrong = run(_HalfTilt(problem), 20_000, seed=5)
    assert np.max(_z_scores(wrong, refs)) > 4


def test_omega_has_the_polya_gamma_mean_for_every_sampler_used():
    # one row per sampler: devroye (1 trial), alternate (3), saddle (12)
    eta = np.array([-3.0, 0.5, 2.0])
    m = np.array([1.0, 3.0, 12.0])
    n = eta.size
    problem = MixedProblem(
        y=np.zeros(n),
        X=np.eye(n),
        offset=np.zeros(n),
        beta_mean=np.zeros(n),
        beta_precision=np.ones(n),
        terms=(),
        hyper=lambda h: (0.0, np.zeros(0), 1.0),
        hyper_size=0,
        family=BinomialLogit(),
        trials=m,
    )
    kernel = PolyaGammaKernel(problem)
    rng = np.random.default_rng(11)
    draws = np.array([kernel.draw_omega(eta, rng) for _ in range(20_000)])
    mcse = draws.std(axis=0) / np.sqrt(draws.shape[0])  # independent draws
    exact = m * np.tanh(eta / 2) / (2 * eta)
    assert np.all(np.abs(draws.mean(axis=0) - exact) < 4 * mcse)
    wrong = m * np.tanh(eta / 4) / eta  # the mean at half the tilt
    assert np.any(np.abs(draws.mean(axis=0) - wrong) > 4 * mcse)


def test_kernel_needs_the_logit_link():
    assert polya_gamma_applies(BinomialLogit())
    assert not polya_gamma_applies(PoissonLog())
    problem = two_level_binomial()
    poisson = MixedProblem(**{**problem.__dict__, "family": PoissonLog(), "trials": None})
    with pytest.raises(ValueError, match="logit link"):
        PolyaGammaKernel(poisson)


def many_small_groups(n_groups=1500, seed=0):
    """Bernoulli random intercepts, two rows per group: a Laplace proposal for 1500
    coefficients of so little data each is rarely accepted."""
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_groups), 2)
    x = rng.standard_normal(g.size)
    eta = -0.3 + 0.5 * x + 1.5 * rng.standard_normal(n_groups)[g]
    y = (rng.random(g.size) < scipy.special.expit(eta)).astype(int)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 2.0, shape=2)
        sd = pm.HalfNormal("sd", 1.0)
        u = pm.Normal("u", 0.0, sd, shape=n_groups)
        pm.Bernoulli("y", logit_p=b[0] + b[1] * x + u[g], observed=y)
    return model


def _sample(model, cores, tune):
    with model:
        return pm.sample(
            draws=30,
            tune=tune,
            chains=2,
            cores=cores,
            step=pymc_sgs.SplitGibbs(),
            random_seed=17,
            progressbar=False,
            compute_convergence_checks=False,
        )


def test_step_changes_over_when_the_laplace_proposal_fails_same_draws_for_any_cores():
    model = many_small_groups()
    one = _sample(model, cores=1, tune=PROBE_DRAWS + 60)
    stats = one.sample_stats
    assert bool(np.all(stats["polya_gamma"].values))
    assert float(stats["coef_accept"].min()) == 1.0  # exact Gibbs draws of the coefficients
    assert 0.05 < float(stats["hyper_accept"].mean()) < 0.95
    two = _sample(model, cores=2, tune=PROBE_DRAWS + 60)
    for v in one.posterior.data_vars:
        np.testing.assert_array_equal(one.posterior[v].values, two.posterior[v].values)
    # with fewer tuning iterations than the probe needs, the chains stay on the Laplace
    # kernel (and the step warns that it barely moves once it has seen enough draws)
    short = _sample(model, cores=1, tune=PROBE_DRAWS - 1)
    assert not bool(np.any(short.sample_stats["polya_gamma"].values))


def test_step_keeps_the_laplace_kernel_where_it_works():
    rng = np.random.default_rng(1)
    g = np.repeat(np.arange(6), 40)
    eta = 0.2 + 0.7 * rng.standard_normal(6)[g]
    y = (rng.random(g.size) < scipy.special.expit(eta)).astype(int)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 2.0)
        sd = pm.HalfNormal("sd", 1.0)
        u = pm.Normal("u", 0.0, sd, shape=6)
        pm.Bernoulli("y", logit_p=b + u[g], observed=y)
    idata = _sample(model, cores=1, tune=PROBE_DRAWS + 20)
    assert not bool(np.any(idata.sample_stats["polya_gamma"].values))
    assert float(idata.sample_stats["coef_accept"].mean()) > LOCAL_ACCEPT
    # independence moves accepted this often: no autoregressive moves after the probe
    assert bool(np.all(np.isnan(idata.sample_stats["local_accept"].values)))


def test_chains_between_the_thresholds_keep_the_laplace_kernel_with_local_moves():
    # 100 groups of two rows: both chains' probe acceptance lies between SWITCH_ACCEPT and
    # LOCAL_ACCEPT (the acceptance varies from chain to chain on such models)
    idata = _sample(many_small_groups(100), cores=1, tune=PROBE_DRAWS + 20)
    stats = idata.sample_stats
    assert not bool(np.any(stats["polya_gamma"].values))
    assert float(stats["coef_accept"].mean()) < LOCAL_ACCEPT
    local = stats["local_accept"].values
    assert bool(np.all(np.isfinite(local))) and 0.05 < float(local.mean()) < 1.0
