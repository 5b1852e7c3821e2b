"""The mixed-model kernel against closed forms (no PyMC).

* the collapsed ``log p(h) + log p(z | h)`` against the dense multivariate normal density
  of ``z`` with the coefficients integrated out, for all three factorizations;
* the coefficient draw ``c | h, z`` against its Gaussian mean and covariance;
* the hyperparameter marginal of a one-scale linear mixed model against quadrature of that
  exact marginal, with a wrong-target negative control;
* the negative control of the issue: updating the scale given the coefficients (centred
  Gibbs) fails the same mixing check the kernel passes.
"""

from __future__ import annotations

import dataclasses

import arviz as az
import numpy as np
import pytest
import scipy.sparse
import scipy.stats

from pymc_sgs.families import BernoulliLogit
from pymc_sgs.mixed.kernel import HyperProposal, MixedKernel
from pymc_sgs.mixed.laplace import coef_mode, hyper_mode
from pymc_sgs.mixed.precision import (
    MixedPrecision,
    _factor_pairs,
    design_matrix,
)
from pymc_sgs.mixed.problem import GroupTerm, MixedProblem


def half_normal_log_sd(scales):
    """``h -> (log prior, sds, noise sd)``: HalfNormal(scales) priors on exp(h), with Jacobian."""
    scales = np.asarray(scales, dtype=float)

    def hyper(h, _n_terms=None):
        sd = np.exp(h)
        logp = float(np.sum(-0.5 * (sd / scales) ** 2 + h))
        return logp, sd, np.nan

    return hyper


def crossed_problem(seed=0, n=240, L1=15, L2=6, family=None, noise_free=True):
    """Two crossed factors (intercepts on both, a slope on the first) and two common terms."""
    rng = np.random.default_rng(seed)
    g1 = rng.integers(0, L1, n)
    g2 = rng.integers(0, L2, n)
    x = rng.normal(size=n)
    X = np.column_stack([np.ones(n), x])
    terms = (
        GroupTerm("1|g1", "g1", g1, np.ones(n), L1, 0),
        GroupTerm("x|g1", "g1", g1, x, L1, 1),
        GroupTerm("1|g2", "g2", g2, np.ones(n), L2, 2),
    )
    u = [rng.normal(0, s, L) for s, L in ((0.8, L1), (0.3, L1), (0.5, L2))]
    eta = X @ [0.3, -0.5] + u[0][g1] + x * u[1][g1] + u[2][g2]
    if family is None:
        y = eta + rng.normal(0, 0.7, n)
        base = half_normal_log_sd([1.0, 1.0, 1.0, 2.0])

        def hyper(h):
            logp, sd, _ = base(h)
            return logp, sd[:3], sd[3]

        K = 4
    else:
        y = (rng.uniform(size=n) < 1 / (1 + np.exp(-eta))).astype(float)
        hyper = half_normal_log_sd([1.0, 1.0, 1.0])
        K = 3
    return MixedProblem(
        y=y,
        X=X,
        offset=np.zeros(n),
        beta_mean=np.array([0.1, 0.0]),
        beta_precision=np.array([1 / 4.0, 1 / 9.0]),
        terms=terms,
        hyper=hyper,
        hyper_size=K,
        family=family,
    )


def dense_log_marginal(problem, h, z, s):
    """``log p(h) + log N(z; offset + A m, s^2 I + A Lambda^-1 A^T)`` densely."""
    log_prior, sds, _ = problem.hyper(h)
    A = design_matrix(problem).toarray()
    lam = np.concatenate(
        [
            problem.beta_precision,
            np.concatenate([np.full(t.n_levels, sds[t.scale]) for t in problem.terms]) ** -2.0,
        ]
    )
    mean = problem.offset + problem.X @ problem.beta_mean
    cov = s**2 * np.eye(problem.n) + (A / lam) @ A.T
    return log_prior + scipy.stats.multivariate_normal(mean, cov).logpdf(z)


@pytest.mark.parametrize("method", ["dense", "schur", "sparse"])
def test_collapsed_density_matches_dense_gaussian(method):
    problem = crossed_problem()
    kernel = MixedKernel(problem, method=method)
    rng = np.random.default_rng(1)
    values = []
    for _ in range(3):
        h = rng.normal(-0.5, 0.5, problem.hyper_size)
        got = kernel.evaluate(h, kernel.data_part(None)).log_post
        _, _, s = problem.hyper(h)
        want = dense_log_marginal(problem, h, problem.y, s)
        values.append(got - want)
    # equal up to the constant n/2 log(2 pi), which the kernel leaves out
    np.testing.assert_allclose(values, problem.n / 2 * np.log(2 * np.pi), rtol=0, atol=1e-8)


def test_split_collapsed_density_uses_rho():
    problem = crossed_problem(family=BernoulliLogit())
    kernel = MixedKernel(problem, rho=0.7, method="schur")
    z = np.random.default_rng(2).normal(size=problem.n)
    h1, h2 = np.array([-0.2, -1.0, 0.1]), np.array([0.3, -0.4, -0.6])
    got = [kernel.evaluate(h, kernel.data_part(z)).log_post for h in (h1, h2)]
    want = [dense_log_marginal(problem, h, z, 0.7) for h in (h1, h2)]
    np.testing.assert_allclose(got[0] - got[1], want[0] - want[1], rtol=0, atol=1e-8)


def test_factorizations_agree():
    problem = crossed_problem(seed=3, n=500, L1=40, L2=25)
    lam = np.concatenate([[0.2, 0.3], np.linspace(0.5, 3.0, problem.dim - 2)])
    b = np.random.default_rng(0).normal(size=problem.dim)
    out = {}
    for method in ("dense", "schur", "sparse"):
        f = MixedPrecision(problem, method=method).factor(lam, 1.7)
        out[method] = (f.logdet, f.solve(b))
    for method in ("schur", "sparse"):
        np.testing.assert_allclose(out[method][0], out["dense"][0], rtol=1e-10)
        np.testing.assert_allclose(out[method][1], out["dense"][1], rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("slope", [True, False], ids=["k2", "k1"])
def test_schur_dense_and_sparse_coupling_agree(monkeypatch, slope):
    """The Schur factorization keeps ``Q_BR`` dense when that is cheap and sparse otherwise,
    and a sparse one enters the complement by the compiled loop or by SciPy's product (the
    reference); all give the same factor (log det, solve, sample and its inverse), with one
    or two terms on the eliminated factor."""
    import pymc_sgs.mixed.precision as precision

    problem = crossed_problem(seed=3, n=500, L1=40, L2=25)
    if not slope:
        problem = dataclasses.replace(
            problem,
            terms=(problem.terms[0], dataclasses.replace(problem.terms[2], scale=1)),
        )
    lam = np.concatenate([[0.2, 0.3], np.linspace(0.5, 3.0, problem.dim - 2)])
    rng = np.random.default_rng(5)
    b, eps = rng.normal(size=problem.dim), rng.normal(size=problem.dim)
    w = rng.uniform(0.5, 2.0, problem.n)  # row weights: the reweighted Gram pieces too
    out = {}
    for dense_br, engine in ((precision.DENSE_BR, "numba"), (0, "numba"), (0, "scipy")):
        monkeypatch.setattr(precision, "DENSE_BR", dense_br)
        prec = MixedPrecision(problem, method="schur", schur_engine=engine).reweighted(w)
        assert prec._dense_BR == (dense_br > 0)
        assert scipy.sparse.issparse(prec.GBR) != prec._dense_BR
        f = prec.factor(lam, 1.7)
        x = f.sample(eps)
        out[dense_br, engine] = (f.logdet, f.solve(b), x, f.whiten(x))
    dense = out[precision.DENSE_BR, "numba"]
    for key in ((0, "numba"), (0, "scipy")):
        sparse = out[key]
        np.testing.assert_allclose(dense[0], sparse[0], rtol=1e-12)
        for a, c in zip(dense[1:], sparse[1:]):
            np.testing.assert_allclose(a, c, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dense[3], eps, rtol=1e-10, atol=1e-10)


def test_compiled_gram_pieces_are_scipys(monkeypatch):
    """The row-by-row Gram pieces (``A_B^T W A_R`` into a fixed pattern, ``A_R^T W A_R``) equal
    SciPy's products, with weights, zero slope values and slopes that cancel in the unweighted
    product (entries a pattern read off the product's values would lose), and follow a
    change of weights in place."""
    import pymc_sgs.mixed.precision as precision

    monkeypatch.setattr(precision, "DENSE_BR", 0)
    problem = crossed_problem(seed=3, n=500, L1=40, L2=25)
    g1, slope, g2 = problem.terms
    values, i2 = slope.values.copy(), g2.index.copy()
    values[2:60] = 0.0
    # rows 0 and 1 alone at one (g1, g2) pair, with slopes +1 and -1
    i2[(g1.index == g1.index[0]) & (i2 == i2[0])] = (i2[0] + 1) % g2.n_levels
    i2[0] = i2[1] = g2.index[0]
    g1_index = g1.index.copy()
    g1_index[1] = g1_index[0]
    values[0], values[1] = 1.0, -1.0
    i2[2:][(g1_index[2:] == g1_index[0]) & (i2[2:] == i2[0])] = (i2[0] + 1) % g2.n_levels
    problem = dataclasses.replace(
        problem,
        terms=(
            dataclasses.replace(g1, index=g1_index),
            dataclasses.replace(slope, index=g1_index, values=values),
            dataclasses.replace(g2, index=i2),
        ),
    )
    unweighted = MixedPrecision(problem, method="schur", schur_engine="scipy").GBR
    assert unweighted.nnz < MixedPrecision(problem, method="schur")._br_pattern[1].size
    rng = np.random.default_rng(8)
    precs = {e: MixedPrecision(problem, method="schur", schur_engine=e) for e in ("numba", "scipy")}
    for w in (None, rng.uniform(0.0, 2.0, problem.n), rng.uniform(0.5, 1.0, problem.n)):
        if w is not None:
            for prec in precs.values():
                prec.set_row_weights(w)
        got, want = precs["numba"], precs["scipy"]
        assert scipy.sparse.issparse(got.GBR)
        np.testing.assert_allclose(got.GBR.toarray(), want.GBR.toarray(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got.GRR, want.GRR, rtol=1e-12, atol=1e-12)


def test_schur_engine_is_checked():
    with pytest.raises(ValueError, match="schur_engine must be one of"):
        MixedPrecision(crossed_problem(), schur_engine="fast")


def test_closed_form_pair_blocks_are_lapacks():
    """The closed forms for 2 x 2 blocks (a random intercept and slope) agree with LAPACK's
    batched factors; a block that is not positive definite, or NaN, raises as numpy does."""
    rng = np.random.default_rng(5)
    M = rng.normal(size=(40, 2, 2))
    Q = M @ np.swapaxes(M, 1, 2) + 0.1 * np.eye(2)
    C, CinvT, Qinv, logdet = _factor_pairs(Q)
    np.testing.assert_allclose(C, np.linalg.cholesky(Q), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(CinvT, np.swapaxes(np.linalg.inv(C), 1, 2), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(Qinv, np.linalg.inv(Q), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(logdet, np.sum(np.linalg.slogdet(Q)[1]), rtol=1e-12)
    for bad_block in ([[1.0, 2.0], [2.0, 1.0]], [[-1.0, 0.0], [0.0, 1.0]], [[np.nan, 0], [0, 1]]):
        bad = Q.copy()
        bad[7] = bad_block
        with pytest.raises(np.linalg.LinAlgError):
            _factor_pairs(bad)


def test_design_is_structured():
    """A is sparse with one entry per row and term: no n x levels array."""
    problem = crossed_problem(seed=4, n=20_000, L1=5_000, L2=300)
    A = design_matrix(problem)
    assert A.nnz <= problem.n * (problem.p + len(problem.terms))
    prec = MixedPrecision(problem)
    assert prec.method == "schur"
    # everything but the largest factor's levels is in the dense Schur complement
    assert prec.R.size == problem.p + 300
    # ... and the coupling of the two factors stays sparse: dense, it would be 5000 x 302
    assert not prec._dense_BR


def test_coefficient_draw_is_the_gaussian_conditional():
    problem = crossed_problem(seed=5, n=120, L1=6, L2=4)
    kernel = MixedKernel(problem)
    h = np.array([-0.3, -1.0, -0.5, -0.4])
    ev = kernel.evaluate(h, kernel.data_part(None))
    f = ev.factored
    Q = design_matrix(problem).toarray()
    Q = Q.T @ Q * f.inv_s2 + np.diag(f.lam.diag)
    cov = np.linalg.inv(Q)
    mean = ev.mean + kernel.coef_mean
    rng = np.random.default_rng(6)
    draws = np.stack([kernel.draw_coef(ev, rng) for _ in range(4000)])
    # whitened by the exact covariance the draws are iid N(0, I): per-coordinate means within
    # 4.5 sd of 0, and the quadratic form a chi-square with dim degrees of freedom
    chol = np.linalg.cholesky(cov)
    white = np.linalg.solve(chol, (draws - mean).T).T
    assert np.max(np.abs(white.mean(0))) * np.sqrt(len(draws)) < 4.5
    emp = np.cov(white.T)
    dim = problem.dim
    assert np.max(np.abs(emp - np.eye(dim))) < 0.12
    # negative control: a covariance 30% off is detected
    white_bad = np.linalg.solve(np.linalg.cholesky(cov * 1.3), (draws - mean).T).T
    assert np.max(np.abs(np.cov(white_bad.T) - np.eye(dim))) > 0.12


def one_scale_lmm(seed=7, n_groups=40, per_group=3, noise=1.0, tau=0.5, prior_scale=1.0):
    """Random intercepts with a fixed noise sd: one hyperparameter, exact marginal on a grid."""
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_groups), per_group)
    n = g.size
    y = 0.2 + rng.normal(0, tau, n_groups)[g] + rng.normal(0, noise, n)
    base = half_normal_log_sd([prior_scale])

    def hyper(h):
        logp, sd, _ = base(h)
        return logp, sd, noise

    return MixedProblem(
        y=y,
        X=np.ones((n, 1)),
        offset=np.zeros(n),
        beta_mean=np.zeros(1),
        beta_precision=np.array([1.0]),
        terms=(GroupTerm("1|g", "g", g, np.ones(n), n_groups, 0),),
        hyper=hyper,
        hyper_size=1,
    )


def grid_posterior_mean_sd(kernel, fn=np.exp):
    """E[fn(h) | y] and sd from the exact collapsed marginal on a fine grid."""
    grid = np.linspace(-8, 3, 4001)
    data = kernel.data_part(None)
    lp = np.array([kernel.evaluate(np.array([h]), data).log_post for h in grid])
    w = np.exp(lp - lp.max())
    w /= w.sum()
    m = float(np.sum(w * fn(grid)))
    return m, float(np.sqrt(np.sum(w * (fn(grid) - m) ** 2)))


def run_kernel(kernel, mode, n_iter, seed, moves=2, independent=True, walk=True):
    rng = np.random.default_rng(seed)
    K = kernel.problem.hyper_size
    C = np.linalg.cholesky(mode.h_cov)
    prop = HyperProposal(
        2.38 / np.sqrt(K) * C, mode.h if independent else None, 1.2 * C, 4.0, moves, walk
    )
    st = kernel.init(mode.h, mode.coef + kernel.coef_mean, rng)
    hs = np.empty((n_iter, K))
    for i in range(n_iter):
        st, _ = kernel.step(st, rng, prop)
        hs[i] = st.h
    return hs


@pytest.mark.parametrize(
    "moves, walk", [(2, True), (1, False), (2, False)], ids=["indep+walk", "indep", "indep x2"]
)
def test_lmm_scale_posterior_matches_quadrature(moves, walk):
    """The default moves, and the independence moves alone that a chain of a linear mixed
    model keeps after tuning when they are accepted often (``INDEP_ONLY_ACCEPT``)."""
    problem = one_scale_lmm()
    kernel = MixedKernel(problem)
    mode = hyper_mode(kernel, np.zeros(1))
    ref_mean, ref_sd = grid_posterior_mean_sd(kernel)
    tau = np.exp(run_kernel(kernel, mode, 6000, seed=8, moves=moves, walk=walk)[:, 0])
    mcse = float(az.mcse(tau[None, :], method="mean"))
    assert abs(tau.mean() - ref_mean) < 4 * mcse
    assert abs(tau.std() - ref_sd) < 0.1 * ref_sd

    # negative control: the same data with a noise sd 20% too large is a different target,
    # and the same check tells them apart
    def wrong_hyper(h):
        logp, sd, noise = problem.hyper(h)
        return logp, sd, 1.2 * noise

    wrong = MixedKernel(dataclasses.replace(problem, hyper=wrong_hyper))
    wrong_mean, _ = grid_posterior_mean_sd(wrong)
    assert abs(tau.mean() - wrong_mean) > 4 * mcse


def test_independence_only_proposal():
    """``walk=False``: every move is an independence move (with its q-ratio), and the block
    reports their acceptance and no walk acceptance."""
    rng = np.random.default_rng(3)
    C = np.array([[0.5, 0.0], [0.1, 0.3]])
    prop = HyperProposal(C, np.zeros(2), 1.2 * C, 4.0, moves=3, walk=False)
    for m in range(3):
        _, log_q, independent = prop.draw(m, np.ones(2), rng)
        assert independent and log_q != 0.0
    problem = crossed_problem()
    kernel = MixedKernel(problem)
    h = np.array([-0.5, -1.0, -0.7, -0.3])
    C4 = 0.2 * np.eye(4)
    data = kernel.data_part(None)
    for walk in (True, False):
        prop = HyperProposal(C4, h, C4, 4.0, moves=2, walk=walk)
        *_, accept, walk_accept, indep_accept = kernel.collapsed_block(
            h, data, kernel.factorize(h), np.random.default_rng(4), prop
        )
        assert np.isfinite(indep_accept) and 0.0 <= indep_accept <= 1.0
        if walk:
            np.testing.assert_allclose(accept, (walk_accept + indep_accept) / 2)
        else:
            np.testing.assert_allclose(accept, indep_accept)


def test_factor_cost_orders_the_factorizations():
    """A rough multiply-add count: larger for InstEval-like crossings than for one factor."""
    one = MixedPrecision(dataclasses.replace(crossed_problem(), terms=crossed_problem().terms[:2]))
    crossed = MixedPrecision(crossed_problem(seed=4, n=20_000, L1=5_000, L2=300))
    assert 0 < one.factor_cost() < 1e5 < crossed.factor_cost()
    assert crossed.factor_cost() >= 302**3 / 6


def centred_gibbs(problem, n_iter, seed):
    """The textbook slow sampler: u | tau, y (Gaussian), then tau | u by random-walk MH."""
    rng = np.random.default_rng(seed)
    g = problem.terms[0].index
    L = problem.terms[0].n_levels
    _, _, noise = problem.hyper(np.zeros(1))
    counts = np.bincount(g, minlength=L)
    h, beta = 0.0, 0.0
    out = np.empty(n_iter)
    for i in range(n_iter):
        tau = np.exp(h)
        prec = counts / noise**2 + 1 / tau**2
        mean = np.bincount(g, problem.y - beta, minlength=L) / noise**2 / prec
        u = mean + rng.normal(size=L) / np.sqrt(prec)
        pb = problem.n / noise**2 + problem.beta_precision[0]
        beta = np.sum(problem.y - u[g]) / noise**2 / pb + rng.normal() / np.sqrt(pb)

        def lp(h):
            return problem.hyper(np.array([h]))[0] - L * h - 0.5 * np.sum(u**2) * np.exp(-2 * h)

        for _ in range(2):
            h_new = h + 0.5 * rng.normal()
            if np.log(rng.uniform()) < lp(h_new) - lp(h):
                h = h_new
        out[i] = np.exp(h)
    return out


def test_centred_gibbs_fails_the_mixing_check_the_kernel_passes():
    """Weakly informed groups: the scale given the coefficients barely moves."""
    problem = one_scale_lmm(seed=9, n_groups=200, per_group=2, noise=2.0, tau=0.3)
    kernel = MixedKernel(problem)
    mode = hyper_mode(kernel, np.zeros(1))
    n_iter = 3000
    ours = np.exp(run_kernel(kernel, mode, n_iter, seed=10)[:, 0])
    slow = centred_gibbs(problem, n_iter, seed=10)

    def ess_fraction(x):
        return float(az.ess(x[None, 500:])) / (n_iter - 500)

    # the mixing check: bulk ESS of the scale at least 10% of the draws
    assert ess_fraction(ours) > 0.1
    assert ess_fraction(slow) < 0.1


def test_glmm_mode_newton_converges_to_a_stationary_point():
    problem = crossed_problem(seed=11, family=BernoulliLogit())
    kernel = MixedKernel(problem, rho=1.0)
    lam = kernel.prior_precision(np.array([0.7, 0.3, 0.5]))
    c, obj, factor, w = coef_mode(kernel, lam)
    eta = kernel.A @ c + kernel.offset
    grad = kernel.AT @ problem.family.grad(eta, problem.y, None) + lam.matvec(c)
    assert np.max(np.abs(grad)) < 1e-6


@pytest.mark.parametrize("method", ["dense", "schur", "sparse"])
@pytest.mark.parametrize("crossed", [True, False])
def test_factor_samplers_whiten_exactly(method, crossed):
    """``x = sample(eps)`` has ``x^T Q x = eps^T eps`` and ``Q x`` linear in eps: so x ~ N(0, Q^-1)."""
    problem = crossed_problem(seed=12, n=300, L1=20, L2=9)
    if not crossed:
        problem = dataclasses.replace(problem, terms=problem.terms[:2])
    prec = MixedPrecision(problem, method=method)
    lam = np.linspace(0.3, 2.0, prec.dim)
    f = prec.factor(lam, 0.8)
    Q = design_matrix(problem).toarray()
    Q = Q.T @ Q * 0.8 + np.diag(lam)
    rng = np.random.default_rng(13)
    E = rng.normal(size=(prec.dim, 5))
    X = np.column_stack([f.sample(e) for e in E.T])
    # X = M E with M M^T = Q^-1  <=>  X^T Q X = E^T E for every pair of columns
    np.testing.assert_allclose(X.T @ Q @ X, E.T @ E, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(f.logdet, np.linalg.slogdet(Q)[1], rtol=1e-10)
    # whiten is the inverse of sample (the joint kernel keeps eps fixed across h-moves)
    W = np.column_stack([f.whiten(x) for x in X.T])
    np.testing.assert_allclose(W, E, rtol=1e-8, atol=1e-8)
