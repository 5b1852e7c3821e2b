"""The conjugate-gradient theta-step (large d, sparse designs) against exact answers."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

from pymc_sgs.families import FAMILIES
from pymc_sgs.kernel import SplitGibbsKernel
from pymc_sgs.problem import ParamSlice, SplitProblem, SplitTerm
from pymc_sgs.theta_cg import CGThetaConditional

from .test_conditionals import ALPHA, make_theta_case, reference_Qb, whitening_pvalues

N_DRAWS = 4000


def build_cg(case, rho_scale=1.0):
    cond = CGThetaConditional(
        case["P0"],
        case["m0"],
        case["A"],
        case["off"],
        np.asarray(case["rho"]) * rho_scale,
        case["gaussian"],
    )
    if case["gaussian"]:
        cond.set_sigmas(case["sigmas"])
    return cond


def cg_draws(case, seed, rho_scale=1.0):
    cond = build_cg(case, rho_scale)
    rng = np.random.default_rng(seed)
    return np.array([cond.sample(case["z"], rng) for _ in range(N_DRAWS)])


@pytest.mark.parametrize("kind", ["spd_vecrho", "nosplit"])
def test_cg_draws_are_exact(kind):
    # perturbation-optimisation: theta = Q^{-1}(b + xi), xi ~ N(0, Q); whitened with the
    # independently computed (Q, b) the draws must be standard normal
    case = make_theta_case(kind)
    samples = cg_draws(case, seed=31)
    Q, b = reference_Qb(case)
    ps = whitening_pvalues(samples, Q, b)
    assert min(ps.values()) > ALPHA, ps


@pytest.mark.parametrize("kind", ["flat_scalar", "flat_vector"])
def test_cg_draws_are_exact_with_gaussian_terms(kind):
    # the flat-prior cases of the dense tests, with a proper prior (CG requires one)
    case = make_theta_case(kind)
    case["P0"] = np.diag(np.linspace(0.2, 1.0, case["m0"].shape[0]))
    samples = cg_draws(case, seed=33)
    Q, b = reference_Qb(case)
    ps = whitening_pvalues(samples, Q, b)
    assert min(ps.values()) > ALPHA, ps


def test_cg_check_detects_a_wrong_rho():
    # negative control: a 15% error in rho is rejected by the same check
    case = make_theta_case("spd_vecrho")
    samples = cg_draws(case, seed=32, rho_scale=1.15)
    Q, b = reference_Qb(case)
    assert min(whitening_pvalues(samples, Q, b).values()) < 1e-6


@pytest.mark.parametrize("alpha", [-0.95, 0.5])
def test_cg_overrelaxed_update_solves_adlers_equation(alpha):
    # Q theta' = alpha Q theta + (1 - alpha) b + sqrt(1 - alpha^2) xi, with the same xi the
    # sampler drew (replayed from the same seed)
    case = make_theta_case("flat_vector")
    case["P0"] = np.eye(case["m0"].shape[0])
    cond = build_cg(case)
    Q, b = reference_Qb(case)
    theta = np.arange(Q.shape[0], dtype=float)
    new = cond.sample(case["z"], np.random.default_rng(5), theta=theta, alpha=alpha)
    xi = cond._perturbation(np.random.default_rng(5))
    rhs = alpha * Q @ theta + (1 - alpha) * b + np.sqrt(1 - alpha**2) * xi
    np.testing.assert_allclose(Q @ new, rhs, rtol=1e-7, atol=1e-7 * np.abs(rhs).max())
    assert cond.iterations <= 10 * Q.shape[0]


def test_cg_refuses_an_improper_prior():
    from pymc_sgs.conditionals import SingularPrecisionError

    case = make_theta_case("flat_scalar")
    with pytest.raises(SingularPrecisionError, match="proper Gaussian prior"):
        CGThetaConditional(case["P0"], case["m0"], case["A"], case["off"], 0.7)


def _split_gaussian_problem(sparse, n=300, d=12, sigma=0.6, seed=4):
    # a sparse design (20% non-zeros) whose Normal likelihood is split on purpose: then
    # pi_rho is the Gaussian posterior with noise variance sigma^2 + rho^2, in closed form
    rng = np.random.default_rng(seed)
    X = scipy.sparse.random(n, d, density=0.2, random_state=seed, format="csr") * 2.0
    beta = rng.normal(size=d)
    y = X @ beta + sigma * rng.normal(size=n)
    A = X if sparse else X.toarray()
    prob = SplitProblem(
        params=(ParamSlice("b", (d,), 0, d),),
        prior_mean=np.zeros(d),
        prior_precision=np.eye(d),
        split_terms=(SplitTerm("y", FAMILIES["normal"], A, np.zeros(n), y, np.full(n, sigma)),),
    )
    return prob, X.toarray(), y, sigma


def _closed_form(X, y, noise_var):
    Q = np.eye(X.shape[1]) + X.T @ X / noise_var
    cov = np.linalg.inv(Q)
    return cov @ (X.T @ y / noise_var), np.sqrt(np.diag(cov))


def _chain(kernel, d, n_draws, seed):
    rng = np.random.default_rng(seed)
    state = kernel.init(np.zeros(d), rng)
    out = np.empty((n_draws, d))
    for t in range(200):
        state, _ = kernel.sweep(state, rng)
    for t in range(n_draws):
        state, _ = kernel.sweep(state, rng)
        out[t] = state.theta
    return out


def test_sparse_design_with_cg_matches_closed_form_pi_rho():
    import arviz as az

    prob, X, y, sigma = _split_gaussian_problem(sparse=True)
    rho = 0.5
    k = SplitGibbsKernel(prob, rho=rho, alpha=-0.9)
    assert k.theta_solver == "cg" and k.engine == "numpy"
    draws = _chain(k, prob.d, 2000, seed=8)
    mean, sd = _closed_form(X, y, sigma**2 + rho**2)
    mcse = np.array([az.mcse(draws[None, :, j]) for j in range(prob.d)])
    z = (draws.mean(0) - mean) / mcse
    assert np.all(np.abs(z) < 4.5), z
    np.testing.assert_allclose(draws.std(0), sd, rtol=0.15)
    # negative control: the same check rejects the unsplit posterior (its sds are ~25% smaller)
    mean0, sd0 = _closed_form(X, y, sigma**2)
    z0 = (draws.mean(0) - mean0) / mcse
    assert np.max(np.abs(z0)) > 4.5 or not np.allclose(draws.std(0), sd0, rtol=0.15)


def test_cg_and_cholesky_kernels_agree_on_the_first_draw():
    # same random numbers are not consumed in the same way (xi vs eps), but both theta-steps
    # have the same conditional mean: check it directly on a dense design
    prob, X, y, sigma = _split_gaussian_problem(sparse=False)
    kc = SplitGibbsKernel(prob, rho=0.5, theta_solver="cholesky")
    kg = SplitGibbsKernel(prob, rho=0.5, theta_solver="cg")
    rhs = kc.theta_conditional.split_rhs(y + 0.1)
    np.testing.assert_allclose(
        kg.theta_conditional.mean(rhs), kc.theta_conditional.mean(rhs), rtol=1e-7, atol=1e-9
    )


def test_kernel_option_validation():
    prob, *_ = _split_gaussian_problem(sparse=True, n=50, d=5)
    with pytest.raises(ValueError, match="theta_solver must be"):
        SplitGibbsKernel(prob, rho=0.5, theta_solver="lu")
    with pytest.raises(ValueError, match="needs a dense design"):
        SplitGibbsKernel(prob, rho=0.5, theta_solver="cholesky")
    with pytest.raises(ValueError, match="dtype must be"):
        SplitGibbsKernel(prob, rho=0.5, dtype="float16")
    with pytest.raises(ValueError, match="engine='numba' needs a dense design"):
        SplitGibbsKernel(prob, rho=0.5, engine="numba")


def test_float32_design_tracks_float64_chain():
    # float32 storage changes the predictor by ~1e-7 relative: the chains stay close over a
    # few sweeps (same random numbers), and a different rho (negative control) does not
    rng = np.random.default_rng(3)
    n, d = 500, 6
    X = rng.normal(size=(n, d)) / np.sqrt(d)
    y = rng.binomial(1, 1 / (1 + np.exp(-X @ rng.normal(size=d)))).astype(float)
    prob = SplitProblem(
        params=(ParamSlice("b", (d,), 0, d),),
        prior_mean=np.zeros(d),
        prior_precision=np.eye(d),
        split_terms=(SplitTerm("y", FAMILIES["bernoulli"], X, np.zeros(n), y),),
    )
    out = {}
    for dtype, rho in (("float64", 0.3), ("float32", 0.3), ("float64", 0.31)):
        k = SplitGibbsKernel(
            prob, rho=rho, alpha=-0.9, log_weights=True, dtype=dtype, engine="numba"
        )
        r = np.random.default_rng(9)
        s = k.init(np.zeros(d), r)
        for _ in range(5):
            s, info = k.sweep(s, r)
        out[(dtype, rho)] = (s.theta, info.log_weight)
    t64, w64 = out[("float64", 0.3)]
    t32, w32 = out[("float32", 0.3)]
    np.testing.assert_allclose(t32, t64, rtol=1e-4, atol=1e-4)
    assert abs(w32 - w64) < 1e-3
    assert not np.allclose(out[("float64", 0.31)][0], t64, rtol=1e-4, atol=1e-4)
