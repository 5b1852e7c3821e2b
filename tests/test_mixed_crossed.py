"""The blocked kernel of mixed models with several large factors (pymc_sgs.mixed.crossed).

* One block's integration against the closed form: with ``(core, v_k)`` integrated out,
  ``r ~ N(0, s^2 W^-1 + A_k Lambda^-1 A_k^T)``; the log density's differences between
  hyperparameter values, and the conditional mean and covariance of ``(core, v_k)``, match
  the dense computation to rounding (Pólya-Gamma weights; a linear mixed model's sigma;
  slope terms, whose value columns are not 1).
* Which models it applies to (:func:`crossed_plan`).
* The chain on a small crossed Binomial GLMM against the collapsed Pólya-Gamma kernel, and
  on a small crossed linear mixed model against the collapsed kernel (both exact, tested
  against quadrature elsewhere): means of the scales and of common and group coefficients
  within 4 combined MCSE. Negative control: the block density without its ``-0.5 log det``
  of the level precisions targets another posterior, and the same check rejects it.
* The step: a logistic GLMM and a linear mixed model with two large crossed factors run
  this kernel from their start, with the same draws for any ``cores``.
"""

from __future__ import annotations

import arviz as az
import numpy as np
import pymc as pm
import pytest

import pymc_sgs
from pymc_sgs.families import BinomialLogit, PoissonLog
from pymc_sgs.mixed import crossed as crossed_mod
from pymc_sgs.mixed import step as step_mod
from pymc_sgs.mixed.crossed import CrossedKernel, _Pieces, crossed_plan
from pymc_sgs.mixed.kernel import HyperProposal, MixedKernel
from pymc_sgs.mixed.laplace import hyper_mode
from pymc_sgs.mixed.polya_gamma import PolyaGammaKernel
from pymc_sgs.mixed.problem import GroupTerm, MixedProblem

from .test_mixed_kernel import half_normal_log_sd


def crossed_binomial(seed=0, n=300, L1=9, L2=7, L3=3, trials=4, gaussian=False, slopes=False):
    """Binomial logit (or Normal, sigma 0.7 with a HalfNormal(1) prior on it, ``gaussian``):
    two crossed factors (L1, L2 levels), a small one (L3), two common coefficients. With
    ``slopes`` the second large factor's and the small factor's terms are slopes on ``x``
    (value columns other than 1)."""
    rng = np.random.default_rng(seed)
    g1, g2, g3 = rng.integers(0, L1, n), rng.integers(0, L2, n), rng.integers(0, L3, n)
    x = rng.normal(size=n)
    X = np.column_stack([np.ones(n), x])
    eta = X @ [-0.3, 0.6] + rng.normal(0, 0.9, L1)[g1] + rng.normal(0, 0.5, L2)[g2]
    eta += rng.normal(0, 0.4, L3)[g3]
    m = np.full(n, float(trials))
    y = rng.binomial(trials, 1.0 / (1.0 + np.exp(-eta))).astype(float)
    hyper = half_normal_log_sd([1.0, 1.0, 1.0])
    if gaussian:
        y = eta + 0.7 * rng.normal(size=n)
        noise_prior = half_normal_log_sd([1.0])

        def hyper(h, _hyper=hyper):
            lp, sds, _ = _hyper(h[:3])
            lp_s, s, _ = noise_prior(h[3:])
            return lp + lp_s, sds, float(s[0])

    return MixedProblem(
        y=y,
        X=X,
        offset=np.zeros(n),
        beta_mean=np.array([0.1, 0.0]),
        beta_precision=np.array([0.25, 1.0]),
        terms=(
            GroupTerm("1|g3", "g3", g3, x if slopes else np.ones(n), L3, 0),
            GroupTerm("1|g1", "g1", g1, np.ones(n), L1, 1),
            GroupTerm("1|g2", "g2", g2, x if slopes else np.ones(n), L2, 2),
        ),
        hyper=hyper,
        hyper_size=4 if gaussian else 3,
        family=None if gaussian else BinomialLogit(),
        trials=None if gaussian else m,
    )


def _plan(problem):
    return crossed_plan(problem, np.zeros(problem.hyper_size), core_levels=4)


def test_plan_moves_a_linear_mixed_models_sigma_in_every_block():
    plan = _plan(crossed_binomial(gaussian=True))
    assert plan.block_terms == (1, 2)
    assert plan.block_hyper == ((1, 0, 3), (2, 0, 3))


def test_plan_cuts_core_and_blocks():
    problem = crossed_binomial()
    plan = _plan(problem)
    assert plan.core_terms == (0,)
    assert plan.block_terms == (1, 2)
    # each block moves its own scale, then the core's
    assert plan.block_hyper == ((1, 0), (2, 0))
    # one large factor: the collapsed kernel is already one block
    assert crossed_plan(problem, np.zeros(3), core_levels=8) is None
    # a likelihood without the Pólya-Gamma representation
    pois = MixedProblem(**{**problem.__dict__, "family": PoissonLog(), "trials": None})
    assert _plan(pois) is None
    # a scale shared by two large factors
    shared = MixedProblem(
        **{
            **problem.__dict__,
            "terms": tuple(
                GroupTerm(t.name, t.factor, t.index, t.values, t.n_levels, min(t.scale, 1))
                for t in problem.terms
            ),
            "hyper": half_normal_log_sd([1.0, 1.0]),
            "hyper_size": 2,
        }
    )
    assert crossed_plan(shared, np.zeros(2), core_levels=4) is None


def _dense_block(kernel, k, w, r, h):
    """Log of ``p(h) N(r; 0, W^-1 + A Lambda^-1 A^T)`` and the conditional mean and
    covariance of ``(core, v_k)``, densely."""
    problem = kernel.problem
    n = problem.n
    cols = [problem.X]
    for i in kernel.plan.core_terms:
        t = problem.terms[i]
        Z = np.zeros((n, t.n_levels))
        Z[np.arange(n), t.index] = t.values
        cols.append(Z)
    t = problem.terms[kernel.plan.block_terms[k]]
    Z = np.zeros((n, t.n_levels))
    Z[np.arange(n), t.index] = t.values
    cols.append(Z)
    A = np.hstack(cols)
    lp, sds, lam_c, inv_s2 = kernel.prior(h)
    lam = np.concatenate([lam_c, np.full(t.n_levels, sds[t.scale] ** -2.0)])
    cov = np.diag(1.0 / (w * inv_s2)) + (A / lam) @ A.T
    sign, logdet = np.linalg.slogdet(cov)
    log_marg = lp - 0.5 * logdet - 0.5 * r @ np.linalg.solve(cov, r)
    Q = inv_s2 * A.T @ (w[:, None] * A) + np.diag(lam)
    Qinv = np.linalg.inv(Q)
    return log_marg, Qinv @ (inv_s2 * A.T @ (w * r)), Qinv


@pytest.mark.parametrize("gaussian, slopes", [(False, False), (True, False), (False, True)])
def test_block_integration_matches_dense_closed_form(gaussian, slopes):
    problem = crossed_binomial(n=120, gaussian=gaussian, slopes=slopes)
    kernel = CrossedKernel(problem, _plan(problem))
    rng = np.random.default_rng(3)
    # Pólya-Gamma-like weights, or the unit weights of a linear mixed model
    w = np.ones(problem.n) if gaussian else rng.gamma(2.0, 0.1, problem.n)
    r = rng.normal(size=problem.n)
    gram = kernel.core_gram(w)
    pc = kernel.pc
    hs = [np.zeros(3), np.array([-0.7, 0.4, 0.9]), np.array([0.5, -1.2, -0.3])]
    if gaussian:
        hs = [np.append(h, s) for h, s in zip(hs, (0.0, -0.6, 0.3))]
    for k in range(2):
        G, wk = kernel.block_cross(k, w)
        rw = w * r
        pieces = _Pieces(
            gram, G, wk, kernel.core_transpose(rw), kernel._block_ZT[k] @ rw, float(r @ rw)
        )
        evs = [kernel.evaluate(h, k, pieces) for h in hs]
        dense = [_dense_block(kernel, k, w, r, h) for h in hs]
        for ev, (log_marg, mean, cov) in zip(evs[1:], dense[1:]):
            np.testing.assert_allclose(
                ev.log_post - evs[0].log_post, log_marg - dense[0][0], rtol=1e-9, atol=1e-9
            )
        for ev, (_, mean, cov) in zip(evs, dense):
            np.testing.assert_allclose(ev.mean, mean[:pc], rtol=1e-8, atol=1e-10)
            # the core's covariance (the Schur complement's inverse) and the levels' given it
            S_inv = np.linalg.inv(ev.chol @ ev.chol.T)
            np.testing.assert_allclose(S_inv, cov[:pc, :pc], rtol=1e-8, atol=1e-12)
            Gs = pieces.G * ev.inv_s2
            v_mean = (pieces.bk * ev.inv_s2 - Gs @ ev.mean) / ev.D
            np.testing.assert_allclose(v_mean, mean[pc:], rtol=1e-8, atol=1e-10)
            GD = Gs / ev.D[:, None]
            explained = np.einsum("ij,jk,ik->i", GD, cov[:pc, :pc], GD)
            np.testing.assert_allclose(1.0 / ev.D, np.diag(cov)[pc:] - explained, rtol=1e-8)


class _NoLevelDeterminant(CrossedKernel):
    """The block density without ``-0.5 sum log D``: a wrong target."""

    def evaluate(self, h, k, pieces):
        ev = super().evaluate(h, k, pieces)
        if ev is None:
            return None
        return ev._replace(log_post=ev.log_post + 0.5 * float(np.sum(np.log(ev.D))))


def _run_crossed(kernel, n_iter, seed):
    rng = np.random.default_rng(seed)
    K = kernel.problem.hyper_size
    walk = np.full(K, 0.6)
    state = kernel.init(np.zeros(K), np.zeros(kernel.dim) + kernel.coef_mean)
    out = []
    for _ in range(n_iter):
        state, info = kernel.step(state, rng, walk)
        out.append(np.concatenate([np.exp(state.h), state.coef[:2], state.coef[[5, 12]]]))
    return np.array(out)


def _run_collapsed(problem, n_iter, seed):
    """The collapsed kernel: Pólya-Gamma for the GLMM, MixedKernel for the linear model."""
    K = problem.hyper_size
    gaussian = problem.family is None
    kernel = MixedKernel(problem) if gaussian else PolyaGammaKernel(problem)
    mode = hyper_mode(kernel, np.zeros(K))
    chol = np.linalg.cholesky(mode.h_cov)
    prop = HyperProposal(walk_chol=1.4 * chol, centre=mode.h, indep_chol=1.2 * chol, df=4.0)
    rng = np.random.default_rng(seed)
    coef = np.zeros(kernel.dim) if gaussian else mode.coef
    state = kernel.init(mode.h, coef + kernel.coef_mean, rng)
    out = []
    for _ in range(n_iter):
        state, _ = kernel.step(state, rng, prop)
        out.append(np.concatenate([np.exp(state.h), state.coef[:2], state.coef[[5, 12]]]))
    return np.array(out)


def _z(a, b):
    z = []
    for j in range(a.shape[1]):
        ma = float(az.mcse(a[None, :, j], method="mean"))
        mb = float(az.mcse(b[None, :, j], method="mean"))
        z.append(abs(a[:, j].mean() - b[:, j].mean()) / np.hypot(ma, mb))
    return np.array(z)


@pytest.mark.parametrize("gaussian", [False, True])
def test_chain_matches_collapsed_kernel_and_a_wrong_density_is_detected(gaussian):
    problem = crossed_binomial(gaussian=gaussian)
    plan = _plan(problem)
    burn = 500
    ref = _run_collapsed(problem, 8_000, seed=11)[burn:]
    draws = _run_crossed(CrossedKernel(problem, plan), 8_000, seed=12)[burn:]
    assert np.all(_z(draws, ref) < 4)
    wrong = _run_crossed(_NoLevelDeterminant(problem, plan), 8_000, seed=12)[burn:]
    assert np.max(_z(wrong, ref)) > 4


def _crossed_glmm(n=4000, L1=90, L2=70, seed=0, gaussian=False):
    rng = np.random.default_rng(seed)
    g1, g2 = rng.integers(0, L1, n), rng.integers(0, L2, n)
    x = rng.normal(size=n)
    eta = -0.4 + 0.5 * x + rng.normal(0, 0.8, L1)[g1] + rng.normal(0, 0.5, L2)[g2]
    y = eta + rng.normal(size=n) if gaussian else rng.binomial(1, 1.0 / (1.0 + np.exp(-eta)))
    with pm.Model() as model:
        b0 = pm.Normal("b0", 0.0, 2.5)
        b1 = pm.Normal("b1", 0.0, 2.5)
        s1 = pm.HalfNormal("s1", 1.0)
        s2 = pm.HalfNormal("s2", 1.0)
        o1 = pm.Normal("o1", 0.0, 1.0, shape=L1)
        o2 = pm.Normal("o2", 0.0, 1.0, shape=L2)
        mu = b0 + b1 * x + (s1 * o1)[g1] + (s2 * o2)[g2]
        if gaussian:
            pm.Normal("y", mu, pm.HalfNormal("sigma", 2.0), observed=y)
        else:
            pm.Bernoulli("y", logit_p=mu, observed=y)
    return model


@pytest.mark.parametrize("gaussian", [False, True])
def test_step_takes_the_blocked_kernel(monkeypatch, gaussian):
    # a factorization this small is cheap: make it count as expensive, so that a
    # unit-test-sized model takes the blocked kernel
    monkeypatch.setattr(step_mod, "EXPENSIVE_FACTOR", 0.0)
    model = _crossed_glmm(gaussian=gaussian)
    runs = []
    for cores in (1, 2):
        with model:
            step = pymc_sgs.SplitGibbs()
            assert step.crossed is not None and step.crossed.block_terms
            assert step.blocked_lmm == gaussian
            idata = pm.sample(
                draws=150,
                tune=100,
                chains=2,
                cores=cores,
                step=step,
                random_seed=7,
                progressbar=False,
                compute_convergence_checks=False,
                discard_tuned_samples=False,
            )
        runs.append(idata)
    # Pólya-Gamma from the first tuning draw (logistic: no probe), never for the linear model
    assert bool(runs[0].warmup_sample_stats["polya_gamma"].all()) != gaussian
    assert bool(runs[0].warmup_sample_stats["polya_gamma"].any()) != gaussian
    st = runs[0].sample_stats
    per_block = 2 if gaussian else 1  # each block's own scale (the core has none), sigma
    assert int(st["hyper_moves"].values[0, -1]) == crossed_mod.MOVES_PER_COORD * 2 * per_block
    assert 0.15 < float(st["hyper_accept"].mean()) < 0.8
    names = ("b0", "b1", "s1", "s2", "o1", "o2") + (("sigma",) if gaussian else ())
    for v in names:
        np.testing.assert_array_equal(runs[0].posterior[v].values, runs[1].posterior[v].values)
        assert np.all(np.isfinite(runs[0].posterior[v].values))
