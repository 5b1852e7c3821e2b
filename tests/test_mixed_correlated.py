"""Correlated group effects (``MvNormal``, e.g. with an LKJ covariance) in mixed models.

* the block prior precision against the dense Gaussian marginal of the data (closed form),
  for all three factorizations, with the correlated factor eliminated first (Schur) and
  with it in the dense remainder;
* the factorizations' samplers against ``x^T Q x = eps^T eps`` with the block prior;
* the reading of PyMC's LKJ models (the forms users write, centred and non-centred, the
  covariance at ``h``, the offsets mapped back; an upper-triangular factor refused);
* sleepstudy and Contraception with LKJ covariances against long nutpie references
  (``tests/data/mixed_ref_*_lkj.json``), with a negative control.
"""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytensor
import pytest
import scipy.stats

import pymc_sgs
from pymc_sgs.mixed.kernel import MixedKernel
from pymc_sgs.mixed.precision import MixedPrecision, design_matrix
from pymc_sgs.mixed.prior import PriorPrecision
from pymc_sgs.mixed.problem import CorrelatedTerms, GroupTerm, MixedProblem
from pymc_sgs.mixed.read import read_mixed_model

from .correlated_reference import VARS, correlated_model, load_reference
from .mixed_reference import compare_to_reference


def _cov(h):
    """``h = (log sd_1, log sd_2, atanh corr)`` -> the 2 x 2 covariance."""
    s1, s2, r = np.exp(h[0]), np.exp(h[1]), np.tanh(h[2])
    return np.array([[s1 * s1, r * s1 * s2], [r * s1 * s2, s2 * s2]])


def correlated_problem(seed=0, n=260, L1=15, L2=6):
    """A correlated intercept and slope on ``g1``, an intercept on ``g2``, two common terms.

    ``h = (log sd_1, log sd_2, atanh corr, log sd_g2, log noise sd)``.
    """
    rng = np.random.default_rng(seed)
    g1, g2 = rng.integers(0, L1, n), rng.integers(0, L2, n)
    x = rng.normal(size=n)
    X = np.column_stack([np.ones(n), x])
    terms = (
        GroupTerm("1|g1", "g1", g1, np.ones(n), L1, 0),
        GroupTerm("x|g1", "g1", g1, x, L1, 1),
        GroupTerm("1|g2", "g2", g2, np.ones(n), L2, 2),
    )
    y = X @ [0.3, -0.5] + rng.normal(0, 0.8, L1)[g1] + rng.normal(0, 0.5, L2)[g2]
    y = y + rng.normal(0, 0.7, n)

    def hyper_cov(h):
        cov = _cov(h)
        logp = float(np.sum(-0.5 * np.exp(2 * h) + h) - 0.5 * h[2] ** 2)
        sds = np.array([np.sqrt(cov[0, 0]), np.sqrt(cov[1, 1]), np.exp(h[3])])
        return logp, sds, float(np.exp(h[4])), (cov,)

    return MixedProblem(
        y=y,
        X=X,
        offset=np.zeros(n),
        beta_mean=np.array([0.1, 0.0]),
        beta_precision=np.array([1 / 4.0, 1 / 9.0]),
        terms=terms,
        hyper=lambda h: hyper_cov(h)[:3],
        hyper_size=5,
        correlated=(CorrelatedTerms((0, 1), 0),),
        hyper_cov=hyper_cov,
    )


def dense_prior_cov(problem, h):
    """``Lambda(h)^{-1}`` as a dense matrix, the block of each level written out."""
    _, sds, _, covs = problem.hyper_cov(h)
    dim = problem.dim
    V = np.zeros((dim, dim))
    V[np.arange(problem.p), np.arange(problem.p)] = 1.0 / problem.beta_precision
    starts = np.cumsum([problem.p] + [t.n_levels for t in problem.terms])
    for i, t in enumerate(problem.terms):
        idx = starts[i] + np.arange(t.n_levels)
        V[idx, idx] = sds[t.scale] ** 2
    for ct in problem.correlated:
        cov = covs[ct.cov]
        for a, ta in enumerate(ct.terms):
            for b, tb in enumerate(ct.terms):
                L = problem.terms[ta].n_levels
                V[starts[ta] + np.arange(L), starts[tb] + np.arange(L)] = cov[a, b]
    return V


@pytest.mark.parametrize("method", ["dense", "schur", "sparse"])
@pytest.mark.parametrize("largest", [True, False])
def test_block_prior_density_matches_dense_gaussian(method, largest):
    """``log p(h) + log N(y; offset + A m, s^2 I + A Lambda^-1 A^T)``: the correlated factor
    eliminated first (``largest``), or in the Schur complement's dense remainder."""
    problem = correlated_problem() if largest else correlated_problem(L1=6, L2=30)
    kernel = MixedKernel(problem, method=method)
    A = design_matrix(problem).toarray()
    rng = np.random.default_rng(1)
    diffs = []
    for _ in range(3):
        h = rng.normal(-0.4, 0.5, 5)
        got = kernel.evaluate(h, kernel.data_part(None)).log_post
        log_prior, _, s, _ = problem.hyper_cov(h)
        cov = s**2 * np.eye(problem.n) + A @ dense_prior_cov(problem, h) @ A.T
        mean = problem.X @ problem.beta_mean
        diffs.append(got - log_prior - scipy.stats.multivariate_normal(mean, cov).logpdf(problem.y))
    np.testing.assert_allclose(diffs, problem.n / 2 * np.log(2 * np.pi), rtol=0, atol=1e-8)


def test_independent_prior_fails_the_same_density_check():
    """Negative control: the block read as independent terms (its correlation dropped) is a
    different density, and the check above sees it."""
    problem = correlated_problem()
    kernel = MixedKernel(problem, method="schur")
    h = np.array([-0.2, -0.5, 1.0, -0.3, -0.4])
    A = design_matrix(problem).toarray()
    V = dense_prior_cov(problem, h)
    V_indep = np.diag(np.diag(V))
    got = kernel.evaluate(h, kernel.data_part(None)).log_post - problem.hyper_cov(h)[0]
    want = [
        scipy.stats.multivariate_normal(
            problem.X @ problem.beta_mean, np.exp(2 * h[4]) * np.eye(problem.n) + A @ W @ A.T
        ).logpdf(problem.y)
        + problem.n / 2 * np.log(2 * np.pi)
        for W in (V, V_indep)
    ]
    assert abs(got - want[0]) < 1e-8
    assert abs(got - want[1]) > 0.1


@pytest.mark.parametrize("method", ["dense", "schur", "sparse"])
@pytest.mark.parametrize("largest", [True, False])
def test_block_prior_factor_samples_and_whitens_exactly(method, largest):
    problem = correlated_problem(seed=4) if largest else correlated_problem(seed=4, L1=6, L2=30)
    kernel = MixedKernel(problem, method=method)
    h = np.array([-0.2, -0.5, 1.0, -0.3, -0.4])
    lam = kernel.prior_at(h)[3]
    assert isinstance(lam, PriorPrecision) and len(lam.blocks) == 1
    f = MixedPrecision(problem, method=method).factor(lam, 0.8)
    A = design_matrix(problem).toarray()
    Q = A.T @ A * 0.8 + np.linalg.inv(dense_prior_cov(problem, h))
    E = np.random.default_rng(5).normal(size=(problem.dim, 4))
    X = np.column_stack([f.sample(e) for e in E.T])
    np.testing.assert_allclose(X.T @ Q @ X, E.T @ E, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(f.logdet, np.linalg.slogdet(Q)[1], rtol=1e-10)
    np.testing.assert_allclose(np.column_stack([f.whiten(x) for x in X.T]), E, atol=1e-8)
    # the prior's own pieces: Lambda c, c^T Lambda c, 0.5 log det Lambda
    P = np.linalg.inv(dense_prior_cov(problem, h))
    c = np.random.default_rng(6).normal(size=problem.dim)
    np.testing.assert_allclose(lam.matvec(c), P @ c, rtol=1e-10)
    np.testing.assert_allclose(lam.quad(c), c @ P @ c, rtol=1e-10)
    np.testing.assert_allclose(lam.half_logdet(), 0.5 * np.linalg.slogdet(P)[1], rtol=1e-10)


def lkj_model(form="index", seed=0, n=200, L=10, family="normal"):
    rng = np.random.default_rng(seed)
    g, x = rng.integers(0, L, n), rng.normal(size=n)
    eta0 = 0.5 + 0.3 * x + rng.normal(0, 0.6, L)[g]
    y = eta0 + rng.normal(0, 0.5, n) if family == "normal" else rng.poisson(np.exp(eta0))
    with pm.Model() as model:
        b0 = pm.Normal("b0", 0, 5)
        b1 = pm.Normal("b1", 0, 5)
        chol, _, _ = pm.LKJCholeskyCov(
            "chol", n=2, eta=2.0, sd_dist=pm.HalfNormal.dist(1.0, shape=2), compute_corr=True
        )
        if form == "noncentred":
            u = pm.Normal("z", 0.0, 1.0, shape=(L, 2)) @ chol.T
        elif form == "noncentred-dot":
            z = pm.Normal("z", 0.0, 1.0, shape=(L, 2))
            u = pm.Deterministic("u", pytensor.tensor.dot(chol, z.T).T)
        else:
            u = pm.MvNormal("u", mu=np.zeros(2), chol=chol, shape=(L, 2))
        if form in ("index", "noncentred", "noncentred-dot"):
            group = u[g, 0] + u[g, 1] * x
        elif form == "rows":
            group = u[g][:, 0] + u[g][:, 1] * x
        else:  # "product": the rows times a design of the group terms, summed
            group = (u[g] * np.column_stack([np.ones(n), x])).sum(axis=1)
        eta = b0 + b1 * x + group
        if family == "normal":
            pm.Normal("y", eta, pm.HalfNormal("sigma", 1.0), observed=y)
        else:
            pm.Poisson("y", pm.math.exp(eta), observed=y)
    return model


@pytest.mark.parametrize("form", ["index", "rows", "product", "noncentred", "noncentred-dot"])
def test_lkj_forms_read_as_one_correlated_block(form):
    """Centred (MvNormal) and non-centred (offset @ chol.T, PyMC's examples' form) effects
    read as the same block, with the model's own covariance at h."""
    model = lkj_model(form)
    mixed = read_mixed_model(model)
    p = mixed.problem
    name = "z" if form.startswith("noncentred") else "u"
    assert [t.name for t in p.terms] == [f"{name}[0]", f"{name}[1]"]
    assert p.correlated == (CorrelatedTerms((0, 1), 0),)
    assert mixed.hyper_names == ["chol_cholesky-cov-packed__", "sigma_log__"]
    # the covariance at h is the model's own, diag(stds) corr diag(stds) (the LKJ variable
    # is "chol", its packed unconstrained value "chol_cholesky-cov-packed__")
    h = np.array([0.3, -0.4, 0.2, 0.1])
    packed, sigma = model.rvs_to_values[model["chol"]], model.rvs_to_values[model["sigma"]]
    stds, corr = pytensor.function(
        [packed], model.replace_rvs_by_values([model["chol_stds"], model["chol_corr"]])
    )(h[:3])
    log_prior, sds, noise, (cov,) = p.hyper_cov(h)
    np.testing.assert_allclose(cov, stds[:, None] * corr * stds[None, :], rtol=1e-12)
    np.testing.assert_allclose(sds, stds, rtol=1e-12)
    np.testing.assert_allclose(noise, np.exp(h[3]), rtol=1e-12)
    # the log prior is the model's own density of the hyperparameters (Jacobians included)
    logp = model.logp(vars=[model["chol"], model["sigma"]], jacobian=True, sum=True)
    want = pytensor.function([packed, sigma], logp)(h[:3], np.array(h[3]))
    np.testing.assert_allclose(log_prior, want, rtol=1e-10)


def test_lkj_draws_map_back_to_the_model_variables():
    """``u`` comes back as the model's (L, 2) matrix: the layout round-trips a point."""
    model = lkj_model()
    mixed = read_mixed_model(model)
    point = model.initial_point()
    rng = np.random.default_rng(3)
    point["u"] = rng.normal(size=(10, 2))
    point["b0"], point["b1"] = np.array(0.4), np.array(-0.2)
    h, coef = mixed.layout.from_point(point, mixed.problem.hyper)
    back = mixed.layout.to_point(h, coef, mixed.problem.hyper(h)[1])
    np.testing.assert_allclose(back["u"], point["u"])
    np.testing.assert_allclose(back["b0"], point["b0"])


def test_noncentred_lkj_draws_map_back_to_the_offsets():
    """The non-centred offsets come back as ``u chol^-T``, ``chol`` the model's factor at
    ``h`` (the Cholesky factor of the covariance read): ``from_point`` and ``to_point``
    round-trip a point, and the coefficients are the model's ``u = z @ chol.T``."""
    model = lkj_model("noncentred-dot")
    mixed = read_mixed_model(model)
    p, layout = mixed.problem, mixed.layout
    assert layout.needs_covs
    point = model.initial_point()
    rng = np.random.default_rng(4)
    point["z"] = rng.normal(size=(10, 2))
    point["chol_cholesky-cov-packed__"] = np.array([0.3, -0.5, 0.4])
    h, coef = layout.from_point(point, p.hyper, p.hyper_cov)
    (u_graph,) = model.replace_rvs_by_values([model["u"]])
    u = pytensor.function(model.value_vars, u_graph, on_unused_input="ignore")(
        **{v.name: point[v.name] for v in model.value_vars}
    )
    # the group coefficients are u's columns
    (cols,) = [how[1] for name, _, _, how in layout.entries if name == "z"]
    for j, (start, L, *_) in enumerate(cols):
        np.testing.assert_allclose(coef[start : start + L], u[:, j], rtol=1e-12)
    back = layout.to_point(h, coef, p.hyper(h)[1], p.hyper_cov(h)[3])
    np.testing.assert_allclose(back["z"], point["z"], rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="hyper_cov"):
        layout.from_point(point, p.hyper)


def test_noncentred_effects_through_an_upper_factor_are_refused():
    """``z @ chol`` (an upper-triangular factor, rows with covariance chol^T chol) is linear
    but not the Cholesky form read: refused, naming the form that is."""
    rng = np.random.default_rng(0)
    g, x = rng.integers(0, 10, 100), rng.normal(size=100)
    with pm.Model() as model:
        chol, _, _ = pm.LKJCholeskyCov(
            "chol", n=2, eta=2.0, sd_dist=pm.HalfNormal.dist(1.0, shape=2)
        )
        u = pm.Normal("z", 0.0, 1.0, shape=(10, 2)) @ chol
        pm.Normal("y", u[g, 0] + u[g, 1] * x, 1.0, observed=rng.normal(size=100))
    with pytest.raises(ValueError, match=r"not lower-triangular.*offset @ chol.T.*NUTS"):
        read_mixed_model(model)
    # the step then leaves the model to the GLM path, which refuses the product too
    with pytest.raises(ValueError, match=r"MvNormal.*NUTS"):
        with model:
            pymc_sgs.SplitGibbs()


def test_a_covariance_with_its_own_hyperprior_is_refused():
    with pm.Model() as model:
        s = pm.HalfNormal("s", 1.0)
        chol, _, _ = pm.LKJCholeskyCov(
            "chol", n=2, eta=2.0, sd_dist=pm.HalfNormal.dist(s, shape=2), compute_corr=True
        )
        u = pm.MvNormal("u", mu=np.zeros(2), chol=chol, shape=(5, 2))
        g = np.arange(20) % 5
        pm.Normal("y", u[g, 0] + u[g, 1] * np.linspace(0, 1, 20), 1.0, observed=np.zeros(20))
    # the message names the hyperprior and the form that is read, not a generic refusal
    with pytest.raises(ValueError, match=r"hyperprior on the group sds.*LKJCholeskyCov") as err:
        with model:
            pymc_sgs.SplitGibbs()
    assert "{'chol': ['s']}" in str(err.value)


def test_a_free_covariance_outside_group_effects_names_the_form_that_is_read():
    """An MvNormal vector of common coefficients with an LKJ covariance is no group term:
    the refusal says which form of a free covariance SplitGibbs reads."""
    with pm.Model() as model:
        chol, _, _ = pm.LKJCholeskyCov(
            "chol", n=2, eta=2.0, sd_dist=pm.HalfNormal.dist(1.0, shape=2), compute_corr=True
        )
        b = pm.MvNormal("b", mu=np.zeros(2), chol=chol)
        x = np.linspace(0, 1, 20)
        pm.Normal("y", b[0] + b[1] * x, 1.0, observed=np.zeros(20))
    with pytest.raises(ValueError, match=r"only as correlated group effects.*L x k matrix"):
        with model:
            pymc_sgs.SplitGibbs()


def fit_lkj(name, model=None, draws=1000, seed=1):
    model = correlated_model(name) if model is None else model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with model:
            idata = pm.sample(
                step=pymc_sgs.SplitGibbs(),
                draws=draws,
                tune=500,
                chains=2,
                cores=1,
                random_seed=seed,
                progressbar=False,
            )
    s = az.summary(idata, var_names=VARS[name], kind="all", round_to="none")
    return s[s["sd"] > 1e-8]


@pytest.mark.parametrize("noncentred", [False, True])
def test_sleepstudy_lkj_matches_reference(noncentred):
    """Every parameter (coefficients, sds, correlation, sigma, the 36 group effects) within
    0.1 sd + 3 MCSE of the nutpie reference, R-hat <= 1.01; centred, and non-centred as
    PyMC's examples write it (``u`` then a deterministic of the sampled offsets)."""
    s = fit_lkj("sleepstudy_lkj", model=correlated_model("sleepstudy_lkj", noncentred=noncentred))
    ref = load_reference("sleepstudy_lkj")
    assert len([lab for lab in s.index if lab in ref]) == len(ref) == 2 + 1 + 2 + 2 + 36
    assert compare_to_reference(s, ref) == []
    assert float(s["r_hat"].max()) <= 1.01


def test_sleepstudy_lkj_check_rejects_a_different_target():
    """Negative control: group sds a priori 10x smaller are another posterior, and the same
    check says so."""
    s = fit_lkj("sleepstudy_lkj", model=correlated_model("sleepstudy_lkj", u_sd=[5.0, 1.0]))
    bad = compare_to_reference(s, load_reference("sleepstudy_lkj"))
    assert "chol_stds[0]" in bad


@pytest.mark.parametrize("noncentred", [False, True])
def test_contraception_lkj_matches_reference(noncentred):
    """The logistic GLMM with an LKJ covariance (the Laplace joint kernel, or the
    Pólya-Gamma one after a change-over): every parameter within 0.1 sd + 3 MCSE."""
    model = correlated_model("contraception_lkj", noncentred=noncentred)
    s = fit_lkj("contraception_lkj", model=model, draws=2000)
    ref = load_reference("contraception_lkj")
    assert compare_to_reference(s, ref) == []
    assert float(s["r_hat"].max()) <= 1.01
