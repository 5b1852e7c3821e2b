"""NegativeBinomial, probit, Gamma, Exponential and StudentT likelihoods, and the
nuisance parameters SplitGibbs owns (NegativeBinomial alpha, Gamma shape, StudentT nu and
sigma).

* the potentials against scipy's densities and finite differences;
* exact z-draws (convex potentials) and the MH z-update (StudentT) against the
  numerically integrated z-conditional (KS tests, with negative controls);
* the slice update of a nuisance parameter given z against its numerically integrated
  conditional (KS test, negative control);
* end-to-end pm.sample(step=SplitGibbs()) at small rho against NUTS (slow for most
  families; the negative binomial with a free alpha runs by default).
"""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest
from scipy import stats
from scipy.special import ndtr

import pymc_sgs
from pymc_sgs.conditionals import find_z_mode, mh_z_move, sample_z_exact
from pymc_sgs.families import (
    BernoulliProbit,
    BinomialProbit,
    ExponentialLog,
    GammaLog,
    NegativeBinomialLog,
    StudentTIdentity,
)

# (family, y, trials, centre, rho) for the 1-D checks
CASES = {
    "negativebinomial": (NegativeBinomialLog(alpha=2.5), 7.0, None, 0.3, 0.8),
    "bernoulli_probit": (BernoulliProbit(), 1.0, None, -1.0, 1.0),
    "binomial_probit": (BinomialProbit(), 3.0, 10.0, 0.5, 0.7),
    "gamma": (GammaLog(shape=3.0), 2.0, None, 0.0, 0.6),
    "exponential": (ExponentialLog(), 0.5, None, 1.0, 0.9),
    "studentt": (StudentTIdentity(nu=3.0, sigma=0.5), 2.0, None, 0.0, 1.0),
}


def scipy_logpdf(name, fam, z, y, t):
    mu = np.exp(z)
    if name == "negativebinomial":
        a = fam.params["alpha"]
        return stats.nbinom(n=a, p=a / (a + mu)).logpmf(y)
    if name == "bernoulli_probit":
        return stats.bernoulli(ndtr(z)).logpmf(y)
    if name == "binomial_probit":
        return stats.binom(t, ndtr(z)).logpmf(y)
    if name == "gamma":
        k = fam.params["shape"]
        return stats.gamma(a=k, scale=mu / k).logpdf(y)
    if name == "exponential":
        return stats.expon(scale=mu).logpdf(y)
    return stats.t(fam.params["nu"], loc=z, scale=fam.params["sigma"]).logpdf(y)


@pytest.mark.parametrize(
    "fam, other, y",
    [
        (NegativeBinomialLog(alpha=2.5), NegativeBinomialLog(alpha=0.7), "counts"),
        (GammaLog(shape=3.0), GammaLog(shape=11.0), "positive"),
        (StudentTIdentity(nu=3.0, sigma=0.5), StudentTIdentity(nu=8.0, sigma=2.0), "real"),
    ],
)
def test_nuisance_log_likelihood_is_the_summed_log_likelihood(fam, other, y):
    """The slice sampler's precomputed sums give scipy's log density summed over the rows, for
    nuisance values other than the ones they were built with, and what the row-wise
    log_likelihood gives at an extreme linear predictor (finite for the negative binomial,
    whose mean overflows; -inf, not NaN, for the Gamma)."""
    rng = np.random.default_rng(4)
    z = rng.normal(0.5, 1.5, size=500)
    values = {
        "counts": rng.poisson(3.0, size=500).astype(float),
        "positive": rng.gamma(2.0, 1.0, size=500),
        "real": rng.normal(size=500),
    }[y]
    f = fam.nuisance_log_likelihood(z, values)
    name = {NegativeBinomialLog: "negativebinomial", GammaLog: "gamma"}.get(type(fam), "studentt")
    for g in (fam, other):
        want = float(np.sum(scipy_logpdf(name, g, z, values, None)))
        np.testing.assert_allclose(f(g), want, rtol=1e-10)
    if y != "real":
        z_big = z.copy()
        z_big[0] = 800.0 if y == "counts" else -800.0
        with np.errstate(over="ignore", invalid="ignore"):
            rowwise = float(np.sum(other.log_likelihood(z_big, values)))
        got = fam.nuisance_log_likelihood(z_big, values)(other)
        if y == "counts":
            assert np.isfinite(got)
            np.testing.assert_allclose(got, rowwise, rtol=1e-10)
        else:
            assert got == -np.inf and rowwise == -np.inf


@pytest.mark.parametrize("name", list(CASES))
def test_potential_matches_scipy_and_derivatives(name):
    fam, y, t, _, _ = CASES[name]
    z = np.linspace(-4.0, 4.0, 41)
    ll = fam.log_likelihood(z, y, t)
    np.testing.assert_allclose(ll, scipy_logpdf(name, fam, z, y, t), rtol=1e-9, atol=1e-9)
    # the potential is -log p up to a z-free constant
    np.testing.assert_allclose(np.ptp(ll + fam.potential(z, y, t)), 0.0, atol=1e-9)
    h = 1e-5
    fd_grad = (fam.potential(z + h, y, t) - fam.potential(z - h, y, t)) / (2 * h)
    fd_hess = (fam.grad(z + h, y, t) - fam.grad(z - h, y, t)) / (2 * h)
    np.testing.assert_allclose(fam.grad(z, y, t), fd_grad, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(fam.hess(z, y, t), fd_hess, rtol=1e-6, atol=1e-7)
    if fam.log_concave:
        assert np.all(fam.hess(z, y, t) >= 0)
        z0 = z[::-1]
        direct = fam.potential(z, y, t) - fam.potential(z0, y, t) - fam.grad(z0, y, t) * (z - z0)
        np.testing.assert_allclose(fam.bregman(z, z0, y, t), direct, rtol=1e-8, atol=1e-10)
    else:
        assert np.any(fam.hess(z, y, t) < 0)


def test_probit_tails_are_finite():
    fam = BinomialProbit()
    z = np.array([-40.0, -10.0, 10.0, 40.0])
    for arr in (fam.potential(z, 2.0, 5.0), fam.grad(z, 2.0, 5.0), fam.hess(z, 2.0, 5.0)):
        assert np.all(np.isfinite(arr))
    # -log Phi(z) ~ z^2 / 2 and its derivative ~ -z far in the lower tail
    np.testing.assert_allclose(BernoulliProbit().grad(np.array([-40.0]), 1.0), [-40.0], rtol=1e-3)


def conditional_cdf(fam, y, t, c, rho):
    """CDF of z | theta (density ∝ exp(-U(z) - (z - c)^2 / (2 rho^2))) by quadrature on a grid."""
    grid = np.linspace(c - 14 * rho, c + 14 * rho, 200_001)
    logd = -fam.potential(grid, y, t) - 0.5 * ((grid - c) / rho) ** 2
    dens = np.exp(logd - logd.max())
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (dens[1:] + dens[:-1]) * np.diff(grid))])
    cdf /= cdf[-1]
    return grid, cdf


def exact_draws(fam, y, t, c, rho, n, rng):
    grid, cdf = conditional_cdf(fam, y, t, c, rho)
    return np.interp(rng.random(n), cdf, grid)


def ks_pvalue(draws, fam, y, t, c, rho):
    grid, cdf = conditional_cdf(fam, y, t, c, rho)
    return stats.kstest(draws, lambda x: np.interp(x, grid, cdf)).pvalue


@pytest.mark.parametrize("name", [n for n in CASES if CASES[n][0].log_concave])
def test_exact_z_draws_match_numerical_conditional(name):
    fam, y, t, c, rho = CASES[name]
    n = 4000
    rng = np.random.default_rng(11)
    draw = sample_z_exact(
        fam, np.full(n, y), None if t is None else np.full(n, t), np.full(n, c), rho, rng
    )
    assert ks_pvalue(draw.z, fam, y, t, c, rho) > 1e-3
    # negative control: the conditional at a centre shifted by 0.3 rho is rejected
    assert ks_pvalue(draw.z, fam, y, t, c + 0.3 * rho, rho) < 1e-3


@pytest.mark.parametrize("alpha", [0.0, -0.9])
@pytest.mark.parametrize("c", [0.0, 2.0])
def test_studentt_mh_z_move_keeps_conditional_invariant(alpha, c):
    # start every row at an exact draw; after one MH move the rows must still follow the
    # conditional (an MH move that were not reversible for it would distort them)
    fam, y, t, _, rho = CASES["studentt"]
    n = 4000
    rng = np.random.default_rng(12)
    z0 = exact_draws(fam, y, t, c, rho, n, rng)
    mv = mh_z_move(fam, np.full(n, y), None, np.full(n, c), rho, z0, alpha, rng)
    assert 0.3 < mv.accept_prob <= 1.0
    assert np.mean(mv.z != z0) > 0.3  # the move does move
    assert ks_pvalue(mv.z, fam, y, t, c, rho) > 1e-3
    # negative control: a plain Laplace-proposal draw without the accept step is wrong
    m = find_z_mode(fam, np.full(n, y), None, np.full(n, c), np.full(n, rho))
    s = 1.0 / np.sqrt(np.maximum(fam.hess(m, y), 0.0) + 1.0 / rho**2)
    laplace = m + s * rng.standard_normal(n)
    assert ks_pvalue(laplace, fam, y, t, c, rho) < 1e-3


@pytest.mark.parametrize("name", [n for n in CASES if CASES[n][0].log_concave])
def test_find_z_mode_random_inputs_new_families(name):
    fam = CASES[name][0]
    rng = np.random.default_rng(5)
    n = 3000
    rho = np.exp(rng.uniform(np.log(1e-2), np.log(10.0), n))
    c = rng.uniform(-20, 20, n)
    t = None
    if name in ("gamma", "exponential"):
        y = np.exp(rng.uniform(-5, 5, n))
    elif name == "binomial_probit":
        t = rng.integers(1, 50, n).astype(float)
        y = np.floor(rng.random(n) * (t + 1))
    elif name == "bernoulli_probit":
        y = rng.integers(0, 2, n).astype(float)
    else:
        y = rng.integers(0, 200, n).astype(float)
    z = find_z_mode(fam, y, t, c, rho, rng.uniform(-100, 100, n))
    resid = np.abs(fam.grad(z, y, t) + (z - c) / rho**2) * rho
    assert np.all(np.isfinite(z)) and resid.max() < 1e-6


def test_family_parameters_are_validated():
    with pytest.raises(ValueError, match="alpha must be positive"):
        NegativeBinomialLog(alpha=0.0)
    with pytest.raises(ValueError, match="no parameter"):
        GammaLog(alpha=1.0)
    fam = NegativeBinomialLog(alpha=2.0).bind(alpha=3.0)
    assert fam.params == {"alpha": 3.0}


# ----------------------------------------------------------------------------- detection
N = 60


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(21)
    X = rng.normal(size=(N, 2))
    eta = 0.4 + X @ np.array([0.6, -0.4])
    return {
        "X": X,
        "eta": eta,
        "nb": rng.negative_binomial(3.0, 3.0 / (3.0 + np.exp(eta))),
        "bern": (rng.random(N) < ndtr(eta)).astype(int),
        "binom": rng.binomial(6, ndtr(eta)),
        "gamma": rng.gamma(4.0, np.exp(eta) / 4.0),
        "expo": rng.exponential(np.exp(eta)),
        "t": eta + 0.5 * rng.standard_t(4.0, N),
    }


def build(kind, data, free=True):
    """A small GLM of each kind; nuisance parameters free (or fixed)."""
    X = data["X"]
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 2.0)
        b = pm.Normal("b", 0.0, 1.0, shape=2)
        eta = a + X @ b
        if kind == "nb":
            alpha = pm.HalfNormal("alpha", 5.0) if free else 3.0
            pm.NegativeBinomial("y", mu=pm.math.exp(eta), alpha=alpha, observed=data["nb"])
        elif kind == "probit":
            pm.Bernoulli("y", p=pm.math.invprobit(eta), observed=data["bern"])
        elif kind == "binomial_probit":
            pm.Binomial("y", n=6, p=pm.math.invprobit(eta), observed=data["binom"])
        elif kind == "gamma":
            k = pm.HalfNormal("k", 5.0) if free else 4.0
            pm.Gamma("y", alpha=k, beta=k / pm.math.exp(eta), observed=data["gamma"])
        elif kind == "exponential":
            pm.Exponential("y", lam=pm.math.exp(-eta), observed=data["expo"])
        elif kind == "studentt":
            nu = pm.Gamma("nu", 2.0, 0.1) if free else 4.0
            sigma = pm.HalfNormal("sigma", 1.0) if free else 0.5
            pm.StudentT("y", nu=nu, mu=eta, sigma=sigma, observed=data["t"])
    return model


DESIGN_FAMILY = {
    "nb": ("negativebinomial", "log"),
    "probit": ("bernoulli", "probit"),
    "binomial_probit": ("binomial", "probit"),
    "gamma": ("gamma", "log"),
    "exponential": ("exponential", "log"),
    "studentt": ("studentt", "identity"),
}


@pytest.mark.parametrize("kind", list(DESIGN_FAMILY))
def test_detection_reads_design_family_and_nuisance(kind, data):
    model = build(kind, data)
    det = pymc_sgs.detect_split_problem(model)
    (term,) = det.problem.split_terms
    assert (term.family.name, term.family.link) == DESIGN_FAMILY[kind]
    order = [p.name for p in det.problem.params]
    assert sorted(order) == ["a", "b"]
    A = np.column_stack([np.ones(N), data["X"]]) if order == ["a", "b"] else None
    if A is None:
        A = np.column_stack([data["X"], np.ones(N)])
    # PyMC's invprobit divides by a float32 sqrt(2): the model's own link, read exactly
    np.testing.assert_allclose(term.A, A, rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(term.offset, 0.0, atol=1e-12)
    nuis = {"nb": ["alpha_log__"], "gamma": ["k_log__"], "studentt": ["nu_log__", "sigma_log__"]}
    assert [n for n, _ in det.nuisance_vars] == nuis.get(kind, [])


def test_detection_fixed_nuisance_is_bound(data):
    det = pymc_sgs.detect_split_problem(build("nb", data, free=False))
    assert det.nuisance_vars == [] and det.problem.split_terms[0].family.params == {"alpha": 3.0}
    det = pymc_sgs.detect_split_problem(build("studentt", data, free=False))
    assert det.problem.split_terms[0].family.params == {"nu": 4.0, "sigma": 0.5}


def test_exposure_times_exp_goes_to_offset(data):
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 1.0, shape=2)
        pm.NegativeBinomial(
            "y", mu=3.0 * pm.math.exp(data["X"] @ b), alpha=2.0, observed=data["nb"]
        )
    (term,) = pymc_sgs.detect_split_problem(model).problem.split_terms
    np.testing.assert_allclose(term.offset, np.log(3.0), rtol=1e-9)


def test_step_owns_nuisance_vars(data):
    with build("studentt", data):
        step = pymc_sgs.SplitGibbs(rho=0.1)
    assert [v.name for v in step.vars] == ["a", "b", "nu_log__", "sigma_log__"]


# ------------------------------------------------------------------- nuisance slice update
def _nb_alpha_conditional_cdf(z, y, grid_log_alpha):
    """CDF of log(alpha) | z under HalfNormal(5) prior: prior * Jacobian * prod NB(y | e^z, alpha)."""
    alpha = np.exp(grid_log_alpha)
    logd = stats.halfnorm(scale=5.0).logpdf(alpha) + grid_log_alpha
    for zi, yi in zip(z, y):
        logd += stats.nbinom(n=alpha, p=alpha / (alpha + np.exp(zi))).logpmf(yi)
    dens = np.exp(logd - logd.max())
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (dens[1:] + dens[:-1]) * np.diff(grid_log_alpha))])
    return cdf / cdf[-1], logd


def test_nuisance_slice_update_keeps_conditional_invariant(data):
    # alpha | z, from exact starting draws, through the step's own update (PyMC's prior logp
    # in the log space, Jacobian included): the updated values follow the conditional
    model = build("nb", data)
    with model:
        step = pymc_sgs.SplitGibbs(rho=0.3)
    rng = np.random.default_rng(31)
    step.set_rng(rng)
    y = data["nb"].astype(float)
    z_full = np.log(y + 0.5) + 0.1 * rng.standard_normal(N)
    grid = np.linspace(-6.0, 7.0, 20001)
    cdf, _ = _nb_alpha_conditional_cdf(z_full, data["nb"].astype(float), grid)
    point = model.initial_point()
    state = step.kernel.init(np.zeros(3), rng)._replace(z=z_full)
    n = 600
    starts = np.interp(rng.random(n), cdf, grid)
    out = np.empty(n)
    for i, s in enumerate(starts):
        point["alpha_log__"] = np.asarray(s)
        out[i] = step._update_nuisance(point, state)["alpha_log__"]
    assert np.mean(out != starts) > 0.9
    target = lambda x: np.interp(x, grid, cdf)  # noqa: E731
    assert stats.kstest(out, target).pvalue > 1e-3
    # negative control: the conditional without the log-Jacobian (a classic mistake)
    alpha = np.exp(grid)
    logd = stats.halfnorm(scale=5.0).logpdf(alpha)
    for zi, yi in zip(z_full, data["nb"]):
        logd += stats.nbinom(n=alpha, p=alpha / (alpha + np.exp(zi))).logpmf(yi)
    dens = np.exp(logd - logd.max())
    wrong = np.concatenate([[0.0], np.cumsum(0.5 * (dens[1:] + dens[:-1]) * np.diff(grid))])
    wrong /= wrong[-1]
    assert stats.kstest(out, lambda x: np.interp(x, grid, wrong)).pvalue < 1e-3


# ----------------------------------------------------------------- end-to-end against NUTS
def compare_to_nuts(model, var_names, rho, draws, seed=1, nuts_draws=1000):
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sgs = pm.sample(
            step=pymc_sgs.SplitGibbs(rho=rho),
            draws=draws,
            tune=300,
            chains=2,
            cores=1,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )
        ref = pm.sample(
            draws=nuts_draws,
            tune=500,
            chains=2,
            cores=1,
            random_seed=seed + 1,
            progressbar=False,
            compute_convergence_checks=False,
        )
    out = {}
    for v in var_names:
        s, r = sgs.posterior[v], ref.posterior[v]
        diff = np.abs(s.mean(("chain", "draw")) - r.mean(("chain", "draw"))).values.ravel()
        mcse = np.hypot(
            az.mcse(sgs, var_names=[v])[v].values, az.mcse(ref, var_names=[v])[v].values
        ).ravel()
        sd = r.std(("chain", "draw")).values.ravel()
        out[v] = (diff, 4 * mcse + 0.1 * sd)
    return out, sgs


def assert_close(out):
    for v, (diff, tol) in out.items():
        assert np.all(diff < tol), (v, diff, tol)


def test_negative_binomial_free_alpha_matches_nuts(data):
    out, idata = compare_to_nuts(build("nb", data), ["a", "b", "alpha"], rho=0.05, draws=600)
    assert_close(out)
    assert "alpha" in idata.posterior


KINDS_SLOW = ["probit", "binomial_probit", "gamma", "exponential", "studentt"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS_SLOW)
def test_family_matches_nuts(kind, data):
    names = {"gamma": ["a", "b", "k"], "studentt": ["a", "b", "nu", "sigma"]}
    out, idata = compare_to_nuts(
        build(kind, data), names.get(kind, ["a", "b"]), rho=0.05, draws=2000
    )
    assert_close(out)
    if kind == "studentt":
        acc = idata.sample_stats["z_accept"].values
        assert np.all((acc > 0.5) & (acc <= 1.0))


@pytest.mark.slow
def test_exact_mode_with_free_alpha_matches_nuts(data):
    # exact=True: the alpha update targets the tilted conditional p(alpha) prod p(y | z, alpha)
    # w(theta, alpha), so even a large rho gives the exact posterior
    model = build("nb", data)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sgs = pm.sample(
            step=pymc_sgs.SplitGibbs(rho=0.5, exact=True),
            draws=2000,
            tune=300,
            chains=2,
            cores=1,
            random_seed=3,
            progressbar=False,
            compute_convergence_checks=False,
        )
        ref = pm.sample(
            draws=1000,
            tune=500,
            chains=2,
            cores=1,
            random_seed=4,
            progressbar=False,
            compute_convergence_checks=False,
        )
    for v in ["a", "b", "alpha"]:
        diff = np.abs(
            sgs.posterior[v].mean(("chain", "draw")) - ref.posterior[v].mean(("chain", "draw"))
        ).values.ravel()
        mcse = np.hypot(
            az.mcse(sgs, var_names=[v])[v].values, az.mcse(ref, var_names=[v])[v].values
        ).ravel()
        sd = ref.posterior[v].std(("chain", "draw")).values.ravel()
        assert np.all(diff < 4 * mcse + 0.1 * sd), (v, diff, mcse, sd)


@pytest.mark.slow
def test_end_to_end_negative_control(data):
    # the same comparison at a large rho (a visibly biased pi_rho) must fail
    out, _ = compare_to_nuts(build("probit", data), ["a", "b"], rho=1.5, draws=2000)
    with pytest.raises(AssertionError):
        assert_close(out)


def test_studentt_mode_search_finds_local_minimum_in_few_iterations():
    # random inputs including bimodal z-conditionals (large rho, residual beyond sqrt(nu) sigma)
    fam = StudentTIdentity(nu=2.0, sigma=0.3)
    rng = np.random.default_rng(9)
    n = 5000
    y = 5 * rng.standard_normal(n)
    c = rng.uniform(-20, 20, n)
    rho = np.exp(rng.uniform(np.log(1e-2), np.log(10.0), n))
    z = find_z_mode(fam, y, None, c, rho, max_iter=100)
    gp = fam.grad(z, y) + (z - c) / rho**2
    assert np.all(np.abs(gp) * rho < 1e-6)
    assert np.all(fam.hess(z, y) + 1 / rho**2 > 0)  # a minimum, not a maximum, of g
    bound = np.max(np.abs(fam.grad(np.linspace(-50, 50, 100001), 0.0)))
    np.testing.assert_allclose(fam.grad_bound(0.0), bound, rtol=1e-6)


@pytest.mark.parametrize("name", list(CASES))
def test_smoothed_likelihood_matches_quadrature(name):
    # the importance weights' Gauss–Hermite integral against adaptive quadrature
    from scipy.integrate import quad

    from pymc_sgs.weights import smoothed_log_likelihood

    fam, y, t, c, rho = CASES[name]
    for rho_k in (0.1 * rho, rho):
        got, _ = smoothed_log_likelihood(
            fam, np.array([y]), None if t is None else np.array([t]), np.array([c]), rho_k
        )
        f = lambda z: np.exp(fam.log_likelihood(z, y, t)) * stats.norm.pdf(z, c, rho_k)  # noqa: E731
        ref = np.log(quad(f, c - 12 * rho_k, c + 12 * rho_k, points=[c], limit=200)[0])
        # Student-t at rho = 2 sigma: the integrand is far from Gaussian, 16 nodes give ~3e-4
        tol = 1e-4 if fam.log_concave or rho_k < 0.5 else 1e-3
        assert abs(got[0] - ref) < tol, (rho_k, got[0], ref)
    # negative control: the same comparison notices a wrong family parameter
    if fam.nuisance:
        key = fam.nuisance[0]
        wrong = fam.bind(**{key: 1.5 * fam.params[key]})
        got, _ = smoothed_log_likelihood(wrong, np.array([y]), None, np.array([c]), rho)
        assert abs(got[0] - ref) > 1e-3
