"""Non-smooth potentials: asymmetric Laplace likelihood (quantile regression), Laplace priors.

Checked against exact answers: the two-piece conditional of ``z`` against
numerical integration and by Kolmogorov–Smirnov tests of the draws; the
closed-form importance weights against ``scipy.integrate.quad``; one-dimensional
posteriors (Laplace prior with a Gaussian likelihood, intercept-only quantile
regression) against numerical integration at small rho, within Monte Carlo
standard errors; longer regressions against long NUTS runs (``slow``). Every
statistical check has a negative control (the same check against a wrong
target fails). Seeds are fixed and were not searched.
"""

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest
from scipy import integrate, stats

import pymc_sgs
from pymc_sgs import UnsupportedModelError
from pymc_sgs.detect import detect_split_problem
from pymc_sgs.kernel import SplitGibbsKernel
from pymc_sgs.nonsmooth import (
    AsymmetricLaplaceIdentity,
    LaplacePrior,
    log_weight_rows_piecewise,
    move_z_piecewise,
    sample_z_piecewise,
    two_piece_log_cdf,
    two_piece_parts,
    two_piece_quantile,
)

from .engine_runs import assert_engines_agree, run_both_engines

Z_MAX = 4.5

# (kink y, rate, centre c, rho): near the kink, far on either side, rho above the scale
CASES = [
    (0.3, 2.0, 0.1, 0.5),
    (0.0, 1.0, 5.0, 0.2),
    (1.0, 3.0, -4.0, 0.05),
    (0.0, 1.0, 0.0, 3.0),
    (-1.0, 0.5, -1.2, 0.01),
]


def _full(n, *vals):
    return [np.full(n, float(v)) for v in vals]


def _density(family, y, rate, c, rho):
    return lambda z: np.exp(-family.potential(z, y, rate)) * stats.norm.pdf(z, c, rho)


def _quad_mass(family, y, rate, c, rho, upper=np.inf):
    """∫_{-inf}^{upper} exp(-U(z)) N(z; c, rho^2) dz, split at the kink and around c."""
    f = _density(family, y, rate, c, rho)
    lo, hi = min(y, c) - 40 * rho, max(y, c) + 40 * rho
    pts = sorted({y, c})
    upper = min(upper, hi)
    if upper <= lo:
        return 0.0
    breaks = [lo] + [p for p in pts if lo < p < upper] + [upper]
    return sum(
        integrate.quad(f, a, b, epsabs=0, epsrel=1e-11, limit=200)[0]
        for a, b in zip(breaks[:-1], breaks[1:])
    )


# ------------------------------------------------------------------ z | theta
@pytest.mark.parametrize("y, rate, c, rho", CASES)
def test_two_piece_cdf_matches_quadrature(y, rate, c, rho):
    fam = AsymmetricLaplaceIdentity(0.6)
    total = _quad_mass(fam, y, rate, c, rho)
    for z in (y - 0.3, y, y + 0.2, c, c + rho):
        log_f, log_s = two_piece_log_cdf(fam, *_full(1, y, rate, c, rho), np.array([z]))
        F = _quad_mass(fam, y, rate, c, rho, upper=z) / total
        assert np.exp(log_f[0]) == pytest.approx(F, rel=1e-6, abs=1e-12)
        assert np.exp(log_s[0]) == pytest.approx(1 - F, rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("y, rate, c, rho", CASES)
def test_exact_z_draws_ks_and_negative_control(y, rate, c, rho):
    n = 20000
    fam = AsymmetricLaplaceIdentity(0.6)
    args = _full(n, y, rate, c, rho)
    z = sample_z_piecewise(fam, *args, np.random.default_rng(1)).z

    def cdf(family):
        return lambda v: np.exp(
            two_piece_log_cdf(family, *_full(np.size(v), y, rate, c, rho), np.atleast_1d(v))[0]
        )

    assert stats.kstest(z, cdf(fam)).pvalue > 1e-3
    # over-relaxed moves from exact draws are exact draws again (and anti-correlated)
    moved = move_z_piecewise(fam, *args, z, -0.9, np.random.default_rng(2)).z
    assert stats.kstest(moved, cdf(fam)).pvalue > 1e-3
    assert np.corrcoef(z, moved)[0, 1] < -0.5
    # negative control: the CDF of a wrong asymmetry (where it changes the conditional)
    if rate * rho > 0.1:
        assert stats.kstest(z, cdf(AsymmetricLaplaceIdentity(1.5))).pvalue < 1e-6


def test_quantile_inverts_cdf_in_both_tails():
    fam = AsymmetricLaplaceIdentity(2.0)
    n = 2000
    rng = np.random.default_rng(3)
    y, rate, c, rho = (
        rng.normal(size=n),
        np.exp(rng.normal(size=n)),
        3 * rng.normal(size=n),
        np.exp(rng.normal(size=n) - 1),
    )
    z = c + rho * 6 * rng.normal(size=n)  # far into the tails too
    log_f, log_s = two_piece_log_cdf(fam, y, rate, c, rho, z)
    back = two_piece_quantile(fam, y, rate, c, rho, log_f, log_s)
    ok = np.isfinite(log_f) & np.isfinite(log_s)
    assert ok.mean() > 0.95
    err = np.abs(back[ok] - z[ok]) / (1 + np.abs(z[ok]))
    assert np.max(err) < 1e-8, np.max(err)


# ------------------------------------------------------------------- weights
@pytest.mark.parametrize("family", [AsymmetricLaplaceIdentity(0.6), LaplacePrior()])
@pytest.mark.parametrize("y, rate, c, rho", CASES)
def test_log_weight_matches_quadrature(family, y, rate, c, rho):
    rows, _ = log_weight_rows_piecewise(family, *_full(1, y, rate, c, rho))
    exact = family.log_likelihood(c, y, rate) - np.log(
        _quad_mass(family, y, rate, c, rho) * np.exp(family.log_normaliser(rate))
    )
    assert rows[0] == pytest.approx(exact, abs=1e-7)
    # negative control: a different slope gives a clearly different weight
    if rate * rho > 0.1:
        wrong, _ = log_weight_rows_piecewise(family, *_full(1, y, 2 * rate, c, rho))
        assert abs(wrong[0] - exact) > 1e-3


def test_log_density_matches_pymc():
    # the family's log-likelihood is PyMC's AsymmetricLaplace / Laplace logp (rate b, kappa)
    y, mu = np.array([-1.3, 0.2, 2.5]), np.array([0.1, 0.2, -0.4])
    ald = AsymmetricLaplaceIdentity(0.7)
    ref = pm.logp(pm.AsymmetricLaplace.dist(b=1.8, kappa=0.7, mu=mu), y).eval()
    np.testing.assert_allclose(ald.log_likelihood(mu, y, 1.8), ref, rtol=1e-10)
    ref_q = pm.logp(pm.AsymmetricLaplace.dist(b=1.8, q=0.7**2 / (1 + 0.7**2), mu=mu), y).eval()
    np.testing.assert_allclose(ald.log_likelihood(mu, y, 1.8), ref_q, rtol=1e-10)
    lap = LaplacePrior()
    ref_l = pm.logp(pm.Laplace.dist(mu=y, b=0.4), mu).eval()
    np.testing.assert_allclose(lap.log_likelihood(mu, y, 1 / 0.4), ref_l, rtol=1e-10)


# ----------------------------------------------------------------- detection
def _lasso_data(seed=0, n=30, d=4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ np.array([1.5, 0.0, -0.7, 0.0][:d]) + rng.normal(size=n)
    return X, y


def test_detects_quantile_regression_and_laplace_prior():
    X, y = _lasso_data()
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 5.0)
        beta = pm.Laplace("beta", mu=0.1, b=np.array([0.5, 1.0, 2.0, 0.5]), shape=4)
        pm.AsymmetricLaplace("y", mu=a + X @ beta, b=1.5, q=0.8, observed=y)
    p = detect_split_problem(model).problem
    assert [t.name for t in p.split_terms] == ["y", "beta (Laplace prior)"]
    lik, prior = p.split_terms
    assert isinstance(lik.family, AsymmetricLaplaceIdentity)
    assert lik.family.kappa == pytest.approx(np.sqrt(0.8 / 0.2))
    np.testing.assert_allclose(lik.trials, 1.5)
    np.testing.assert_allclose(lik.A, np.column_stack([np.ones(30), X]))
    # Laplace prior rows: e_j^T on beta's slots, potential |z - 0.1| / b
    assert isinstance(prior.family, LaplacePrior)
    np.testing.assert_allclose(prior.A, np.eye(5)[1:])
    np.testing.assert_allclose(prior.y, 0.1)
    np.testing.assert_allclose(prior.trials, 1 / np.array([0.5, 1.0, 2.0, 0.5]))
    # Normal prior on a, nothing Gaussian left for beta
    np.testing.assert_allclose(p.prior_precision, np.diag([1 / 25, 0, 0, 0, 0]))


def test_kappa_and_q_parametrisations_agree():
    X, y = _lasso_data()
    kappa = np.sqrt(0.3 / 0.7)
    out = []
    for kw in ({"q": 0.3}, {"kappa": kappa}):
        with pm.Model() as model:
            beta = pm.Normal("beta", 0.0, 1.0, shape=4)
            pm.AsymmetricLaplace("y", mu=X @ beta, b=2.0, observed=y, **kw)
        out.append(detect_split_problem(model).problem.split_terms[0].family.kappa)
    assert out[0] == pytest.approx(out[1]) == pytest.approx(kappa)


def test_laplace_prior_with_bernoulli_detected():
    X, y = _lasso_data()
    with pm.Model() as model:
        beta = pm.Laplace("beta", 0.0, 1.0, shape=4)
        pm.Bernoulli("yb", logit_p=X @ beta, observed=(y > 0).astype(float))
    p = detect_split_problem(model).problem
    assert [t.family.name for t in p.split_terms] == ["bernoulli", "laplace_prior"]
    assert SplitGibbsKernel(p, 0.2).engine == "numba"


# -------------------------------------------------------------------- errors
def test_free_b_is_owned_and_exact_mode_refused():
    X, y = _lasso_data()
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 1.0, shape=4)
        b = pm.HalfNormal("b", 1.0)
        pm.AsymmetricLaplace("y", mu=X @ beta, b=b, q=0.5, observed=y)
        step = pymc_sgs.SplitGibbs(rho=0.2)
        assert [v.name for v in step.vars] == ["beta", "b_log__"]
        (fr,) = step.free_rates
        assert fr.term_index == 0 and fr.value_name == "b_log__"
        np.testing.assert_allclose(fr.rates(np.log(1.7)), 1.7)
        # the prior log density includes the Jacobian of the log transform
        point = model.initial_point()
        ref = pm.logp(pm.HalfNormal.dist(1.0), 1.7).eval() + np.log(1.7)
        assert float(fr.prior_logp({**point, "b_log__": np.log(1.7)})) == pytest.approx(ref)
        with pytest.raises(ValueError, match=r"exact=True is not available.*\['b_log__'\]"):
            pymc_sgs.SplitGibbs(rho=0.2, exact=True)


def test_error_b_depends_on_coefficients_or_is_shared():
    X, y = _lasso_data()
    with pm.Model():
        beta = pm.Normal("beta", 0.0, 1.0, shape=4)
        pm.AsymmetricLaplace("y", mu=X @ beta, b=pm.math.exp(beta[0]), q=0.5, observed=y)
        with pytest.raises(
            UnsupportedModelError,
            match=r"b \(rate\).*'y' depends on the "
            r"coefficient\(s\) \['beta'\]",
        ):
            pymc_sgs.SplitGibbs(rho=0.2)
    with pm.Model():
        beta = pm.Normal("beta", 0.0, 1.0, shape=4)
        s = pm.HalfNormal("s", 1.0)
        pm.AsymmetricLaplace("y", mu=X @ beta, b=1 / s, q=0.5, observed=y)
        pm.Normal("other", 0.0, s, observed=y)
        with pytest.raises(
            UnsupportedModelError,
            match=r"'y' depends on 's', which 'other' also "
            r"depends on",
        ):
            pymc_sgs.SplitGibbs(rho=0.2)
    with pm.Model():
        beta = pm.Normal("beta", 0.0, 1.0, shape=4)
        s1 = pm.HalfNormal("s1", 1.0)
        s2 = pm.HalfNormal("s2", 1.0)
        pm.AsymmetricLaplace("y", mu=X @ beta, b=s1 * s2, q=0.5, observed=y)
        with pytest.raises(UnsupportedModelError, match=r"several free variables \['s1', 's2'\]"):
            pymc_sgs.SplitGibbs(rho=0.2)


def test_error_free_q():
    X, y = _lasso_data()
    with pm.Model():
        beta = pm.Normal("beta", 0.0, 1.0, shape=4)
        q = pm.Beta("q", 2.0, 2.0)
        pm.AsymmetricLaplace("y", mu=X @ beta, b=1.0, q=q, observed=y)
        with pytest.raises(UnsupportedModelError, match=r"kappa \(or q\).*'y'.*\['q'\].*fixed"):
            pymc_sgs.SplitGibbs(rho=0.2)


def test_error_kappa_varies_across_rows():
    X, y = _lasso_data()
    with pm.Model():
        beta = pm.Normal("beta", 0.0, 1.0, shape=4)
        pm.AsymmetricLaplace("y", mu=X @ beta, b=1.0, q=np.linspace(0.2, 0.8, 30), observed=y)
        with pytest.raises(
            UnsupportedModelError,
            match=r"'y'.*varies across rows.*one "
            r"pm.AsymmetricLaplace per quantile",
        ):
            pymc_sgs.SplitGibbs(rho=0.2)


def test_error_quantile_regression_with_log_link():
    X, y = _lasso_data()
    with pm.Model():
        beta = pm.Normal("beta", 0.0, 1.0, shape=4)
        pm.AsymmetricLaplace("y", mu=pm.math.exp(X @ beta), b=1.0, q=0.5, observed=y)
        with pytest.raises(
            UnsupportedModelError,
            match=r"linear predictor of observed variable "
            r"'y' is not affine",
        ):
            pymc_sgs.SplitGibbs(rho=0.2)


def test_error_free_laplace_scale():
    X, y = _lasso_data()
    with pm.Model():
        lam = pm.HalfCauchy("lam", 1.0)
        beta = pm.Laplace("beta", 0.0, lam, shape=4)
        pm.Normal("y", mu=X @ beta, sigma=1.0, observed=y)
        with pytest.raises(
            UnsupportedModelError,
            match=r"scale b of the Laplace prior of 'beta'"
            r".*\['lam'\].*fixed",
        ):
            pymc_sgs.SplitGibbs(rho=0.2)


def test_error_bad_laplace_scale_and_bad_b():
    X, y = _lasso_data()
    with pm.Model():
        beta = pm.Laplace("beta", 0.0, np.array([1.0, 0.0, 1.0, 1.0]), shape=4)
        pm.Normal("y", mu=X @ beta, sigma=1.0, observed=y)
        with pytest.raises(ValueError, match=r"'beta': its Laplace prior needs .*positive"):
            pymc_sgs.SplitGibbs(rho=0.2)
    with pm.Model():
        beta = pm.Normal("beta", 0.0, 1.0, shape=4)
        pm.AsymmetricLaplace("y", mu=X @ beta, b=-1.0, q=0.5, observed=y)
        with pytest.raises(ValueError, match=r"'y'.*parameter b must be positive"):
            pymc_sgs.SplitGibbs(rho=0.2)


# ----------------------------------------------------- whole chains, 1-D exact
def _sample(model, step_kwargs, **kwargs):
    kwargs.setdefault("progressbar", False)
    kwargs.setdefault("compute_convergence_checks", False)
    kwargs.setdefault("cores", 1)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = pymc_sgs.SplitGibbs(**step_kwargs)
        return pm.sample(step=step, **kwargs)


def _moments_1d(log_density, lo, hi, kinks=()):
    pts = sorted(k for k in kinks if lo < k < hi)
    edges = [lo, *pts, hi]

    def integral(f):
        return sum(integrate.quad(f, a, b, limit=200)[0] for a, b in zip(edges[:-1], edges[1:]))

    mode_shift = max(log_density(x) for x in np.linspace(lo, hi, 2001))
    dens = lambda x: np.exp(log_density(x) - mode_shift)  # noqa: E731
    z0 = integral(dens)
    mean = integral(lambda x: x * dens(x)) / z0
    var = integral(lambda x: (x - mean) ** 2 * dens(x)) / z0
    return mean, np.sqrt(var)


def _z(draws, mean, sd):
    x = np.asarray(draws)
    z_mean = (x.mean() - mean) / float(az.mcse(x, method="mean"))
    z_sd = (x.std(ddof=1) - sd) / float(az.mcse(x, method="sd"))
    return z_mean, z_sd


def _laplace_1d_model(b=0.25):
    """beta ~ Laplace(0, b), four y_i ~ N(beta, 1) with mean 1.5 (the kink 1.4 sd from the mean)."""
    e = np.random.default_rng(7).normal(size=4)
    y = 1.5 + e - e.mean()
    with pm.Model() as model:
        beta = pm.Laplace("beta", 0.0, b)
        pm.Normal("y", mu=beta, sigma=1.0, observed=y)
    loglik = lambda t: -0.5 * np.sum((y - t) ** 2)  # noqa: E731
    return model, y, loglik


def test_laplace_prior_gaussian_likelihood_exact_1d():
    """Exact posterior by quadrature; SplitGibbs at small rho within MCSE."""
    b = 0.25
    model, y, loglik = _laplace_1d_model(b)
    mean, sd = _moments_1d(lambda t: loglik(t) - abs(t) / b, -4, 5, kinks=(0.0,))
    idata = _sample(model, {"rho": 0.05}, draws=3000, tune=300, chains=2, random_seed=11)
    draws = idata.posterior["beta"].values
    zm, zs = _z(draws, mean, sd)
    assert abs(zm) < Z_MAX and abs(zs) < Z_MAX, (zm, zs, mean, sd, draws.mean(), draws.std())
    # negative control: a Normal prior with the same variance (2 b^2) is a different posterior
    prec = y.size + 1 / (2 * b**2)
    zm_wrong, zs_wrong = _z(draws, y.sum() / prec, 1 / np.sqrt(prec))
    assert max(abs(zm_wrong), abs(zs_wrong)) > Z_MAX


def test_intercept_only_quantile_regression_exact_1d():
    """y_i ~ AsymmetricLaplace(b, q=0.8, mu), mu ~ N(0, 3): exact posterior by quadrature."""
    rng = np.random.default_rng(5)
    y = rng.gamma(2.0, 1.0, size=25)
    q, b = 0.8, 1.5
    kappa = np.sqrt(q / (1 - q))
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 3.0)
        pm.AsymmetricLaplace("y", mu=mu, b=b, q=q, observed=y)

    def log_post(m, kap):
        u = y - m
        return -np.sum(np.where(u > 0, u * b * kap, -u * b / kap)) - m**2 / 18

    lo, hi = np.min(y) - 2, np.max(y) + 2
    mean, sd = _moments_1d(lambda m: log_post(m, kappa), lo, hi, kinks=y)
    idata = _sample(model, {"rho": 0.02}, draws=3000, tune=300, chains=2, random_seed=12)
    draws = idata.posterior["mu"].values
    zm, zs = _z(draws, mean, sd)
    assert abs(zm) < Z_MAX and abs(zs) < Z_MAX, (zm, zs, mean, sd, draws.mean(), draws.std())
    # negative control: the posterior of the median (q = 0.5)
    mean_w, sd_w = _moments_1d(lambda m: log_post(m, 1.0), lo, hi, kinks=y)
    zm_wrong, zs_wrong = _z(draws, mean_w, sd_w)
    assert max(abs(zm_wrong), abs(zs_wrong)) > Z_MAX


def test_exact_mode_quantile_regression_1d():
    """exact=True at rho = 0.5, where pi_rho is 0.27 sd / 24% in sd off: the chain targets pi."""
    rng = np.random.default_rng(5)
    y = rng.gamma(2.0, 1.0, size=25)
    q, b, rho = 0.8, 1.5, 0.5
    fam = AsymmetricLaplaceIdentity(np.sqrt(q / (1 - q)))
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 3.0)
        pm.AsymmetricLaplace("y", mu=mu, b=b, q=q, observed=y)
    lo, hi = np.min(y) - 2, np.max(y) + 2
    mean, sd = _moments_1d(lambda m: -np.sum(fam.potential(m, y, b)) - m**2 / 18, lo, hi, kinks=y)
    smoothed = lambda m: np.sum(  # noqa: E731
        two_piece_parts(fam, y, np.full(y.size, b), np.full(y.size, m), rho)[-1]
    )
    mean_rho, sd_rho = _moments_1d(lambda m: smoothed(m) - m**2 / 18, lo, hi)
    idata = _sample(
        model,
        {"rho": rho, "exact": True, "exact_sweeps": 3},
        draws=1500,
        tune=300,
        chains=2,
        random_seed=15,
    )
    draws = idata.posterior["mu"].values
    zm, zs = _z(draws, mean, sd)
    assert abs(zm) < Z_MAX and abs(zs) < Z_MAX, (zm, zs)
    zm_rho, zs_rho = _z(draws, mean_rho, sd_rho)  # negative control: pi_rho
    assert max(abs(zm_rho), abs(zs_rho)) > Z_MAX, (zm, zs, zm_rho, zs_rho)


def test_intercept_only_quantile_regression_free_b_exact_2d():
    """mu ~ N(0, 3), b ~ HalfNormal(2) owned by SplitGibbs: exact posterior on a 2-D grid."""
    rng = np.random.default_rng(6)
    y = rng.gamma(2.0, 1.0, size=25)
    q = 0.3
    kappa = np.sqrt(q / (1 - q))
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 3.0)
        b = pm.HalfNormal("b", 2.0)
        pm.AsymmetricLaplace("y", mu=mu, b=b, q=q, observed=y)

    def moments(prior_sd):
        m = np.linspace(np.min(y) - 1.5, np.max(y) + 1.5, 3001)
        bb = np.linspace(1e-3, 4.0, 1200)
        u = y[None, :] - m[:, None]
        r = np.sum(np.where(u > 0, kappa * u, -u / kappa), axis=1)  # check losses / b
        lp = (
            -(m[:, None] ** 2) / 18
            - bb[None, :] ** 2 / (2 * prior_sd**2)
            + y.size * np.log(bb)[None, :]
            - bb[None, :] * r[:, None]
        )
        w = np.exp(lp - lp.max())
        w /= w.sum()
        out = []
        for grid in (m[:, None], bb[None, :]):
            mean = float(np.sum(w * grid))
            out.append((mean, float(np.sqrt(np.sum(w * (grid - mean) ** 2)))))
        return out

    idata = _sample(model, {"rho": 0.02}, draws=3000, tune=300, chains=2, random_seed=16)
    for (mean, sd), name in zip(moments(2.0), ["mu", "b"]):
        zm, zs = _z(idata.posterior[name].values, mean, sd)
        assert abs(zm) < Z_MAX and abs(zs) < Z_MAX, (name, zm, zs)
    # negative control: a much tighter prior on b gives another posterior of b
    (mean_w, sd_w) = moments(0.3)[1]
    zm_w, zs_w = _z(idata.posterior["b"].values, mean_w, sd_w)
    assert max(abs(zm_w), abs(zs_w)) > Z_MAX


def test_free_b_same_seed_same_draws():
    rng = np.random.default_rng(6)
    y = rng.gamma(2.0, 1.0, size=25)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 3.0)
        b = pm.HalfNormal("b", 2.0)
        pm.AsymmetricLaplace("y", mu=mu, b=b, q=0.3, observed=y)
    runs = [
        _sample(model, {"rho": 0.1}, draws=50, tune=20, chains=1, random_seed=s) for s in (3, 3, 4)
    ]
    b0, b1, b2 = (r.posterior["b"].values for r in runs)
    np.testing.assert_array_equal(b0, b1)
    assert not np.array_equal(b0, b2)


def test_large_rho_matches_split_model_and_psis_corrects_it_1d():
    """At rho = 0.6 the chain targets pi_rho (closed form), ~0.9 sd off pi; the weights fix it."""
    b, rho = 0.25, 0.6
    model, y, loglik = _laplace_1d_model(b)
    mean, sd = _moments_1d(lambda t: loglik(t) - abs(t) / b, -4, 5, kinks=(0.0,))
    # pi_rho: the prior smoothed by N(0, rho^2), exactly (pymc_sgs.nonsmooth.two_piece_parts)
    smoothed = lambda t: two_piece_parts(LaplacePrior(), 0.0, 1 / b, t, rho)[-1]  # noqa: E731
    mean_rho, sd_rho = _moments_1d(lambda t: loglik(t) + smoothed(t), -4, 5)
    # plain SGS (alpha=0): ArviZ's MCSE of weighted draws is unreliable for the strongly
    # antithetic over-relaxed chain
    idata = _sample(
        model, {"rho": rho, "alpha": 0.0}, draws=4000, tune=300, chains=2, random_seed=13
    )
    draws = idata.posterior["beta"].values
    zm, zs = _z(draws, mean_rho, sd_rho)
    assert abs(zm) < Z_MAX and abs(zs) < Z_MAX, (zm, zs)
    zm_pi, _ = _z(draws, mean, sd)
    assert abs(zm_pi) > Z_MAX  # negative control: pi_rho is visibly biased at this rho
    summ = pymc_sgs.psis_summary(idata, ["beta"], warn=False)
    corrected = summ["mean"].iloc[0]
    # MCSE of the self-normalised estimate (delta method): the MCSE of the chain mean of
    # w (beta - corrected) / mean(w), which keeps the autocorrelation of the weighted draws
    log_w = idata.sample_stats["log_weight"].values
    w = np.exp(log_w - log_w.max())
    se = float(az.mcse(w * (draws - corrected) / w.mean(), method="mean"))
    assert abs(corrected - mean) < Z_MAX * se, (summ, mean, se)
    assert abs(corrected - mean) < 0.15 * abs(summ["mean_rho"].iloc[0] - mean)


def test_auto_rho_1d():
    """rho="auto" tunes rho from the exact weights to a small bias."""
    b = 0.25
    model, y, loglik = _laplace_1d_model(b)
    mean, sd = _moments_1d(lambda t: loglik(t) - abs(t) / b, -4, 5, kinks=(0.0,))
    idata = _sample(model, {}, draws=1500, tune=600, chains=2, random_seed=14)
    rho = idata.posterior["beta"].values
    assert float(idata.sample_stats["rho"].values[0, -1]) < 0.5
    zm, zs = _z(rho, mean, sd)
    assert abs(zm) < Z_MAX and abs(zs) < Z_MAX, (zm, zs)


# ------------------------------------------------------------ long NUTS runs
def _nuts(model, seed, draws=20000):
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pm.sample(
            draws=draws,
            tune=2000,
            chains=4,
            cores=1,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )


def _compare_to_nuts(sgs, nuts, names):
    """z-scores of SGS means/sds against a long NUTS run (both MCSEs combined)."""
    out = []
    for name in names:
        a = sgs.posterior[name].values
        r = nuts.posterior[name].values
        a = a.reshape(a.shape[0], a.shape[1], -1)
        r = r.reshape(r.shape[0], r.shape[1], -1)
        for j in range(a.shape[-1]):
            x, v = a[..., j], r[..., j]
            se_m = np.hypot(float(az.mcse(x, method="mean")), float(az.mcse(v, method="mean")))
            se_s = np.hypot(float(az.mcse(x, method="sd")), float(az.mcse(v, method="sd")))
            out.append(((x.mean() - v.mean()) / se_m, (x.std(ddof=1) - v.std(ddof=1)) / se_s))
    return np.array(out)


def _heteroscedastic(seed=0, n=150):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 4, size=n)
    y = 1.0 + 0.8 * x + (0.3 + 0.4 * x) * rng.normal(size=n)
    return x, y


@pytest.mark.slow
@pytest.mark.parametrize("q", [0.1, 0.5, 0.9])
def test_quantile_regression_vs_long_nuts(q):
    x, y = _heteroscedastic()
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 10.0)
        slope = pm.Normal("slope", 0.0, 10.0)
        pm.AsymmetricLaplace("y", mu=a + slope * x, b=2.0, q=q, observed=y)
    sgs = _sample(model, {"rho": 0.02}, draws=10000, tune=1000, chains=4, random_seed=21)
    nuts = _nuts(model, 22)
    z = _compare_to_nuts(sgs, nuts, ["a", "slope"])
    print("z-scores (mean, sd) against NUTS:", np.round(z, 2).tolist())
    assert np.all(np.abs(z) < Z_MAX), z
    # negative control: the NUTS posterior of another quantile
    with pm.Model() as wrong:
        a = pm.Normal("a", 0.0, 10.0)
        slope = pm.Normal("slope", 0.0, 10.0)
        pm.AsymmetricLaplace("y", mu=a + slope * x, b=2.0, q=0.5 if q != 0.5 else 0.7, observed=y)
    z_wrong = _compare_to_nuts(sgs, _nuts(wrong, 23, draws=5000), ["a", "slope"])
    print("negative control, max |z|:", round(float(np.max(np.abs(z_wrong))), 1))
    assert np.max(np.abs(z_wrong)) > Z_MAX


@pytest.mark.slow
def test_quantile_regression_free_b_vs_long_nuts():
    x, y = _heteroscedastic()
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 10.0)
        slope = pm.Normal("slope", 0.0, 10.0)
        b = pm.HalfNormal("b", 2.0)
        pm.AsymmetricLaplace("y", mu=a + slope * x, b=b, q=0.75, observed=y)
    sgs = _sample(model, {"rho": 0.02}, draws=10000, tune=1000, chains=4, random_seed=24)
    nuts = _nuts(model, 25)
    z = _compare_to_nuts(sgs, nuts, ["a", "slope", "b"])
    print("z-scores (mean, sd) against NUTS:", np.round(z, 2).tolist())
    assert np.all(np.abs(z) < Z_MAX), z
    # negative control: b fixed at three times its posterior mean (a narrower posterior)
    b_hat = float(nuts.posterior["b"].mean())
    with pm.Model() as wrong:
        a = pm.Normal("a", 0.0, 10.0)
        slope = pm.Normal("slope", 0.0, 10.0)
        pm.AsymmetricLaplace("y", mu=a + slope * x, b=3 * b_hat, q=0.75, observed=y)
    z_wrong = _compare_to_nuts(sgs, _nuts(wrong, 26, draws=5000), ["a", "slope"])
    print("negative control, max |z|:", round(float(np.max(np.abs(z_wrong))), 1))
    assert np.max(np.abs(z_wrong)) > Z_MAX


@pytest.mark.slow
def test_bayesian_lasso_vs_long_nuts():
    rng = np.random.default_rng(4)
    n, d = 60, 8
    X = rng.normal(size=(n, d))
    beta_true = np.array([2.0, -1.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0])
    y = 0.5 + X @ beta_true + rng.normal(size=n)
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 5.0)
        beta = pm.Laplace("beta", 0.0, 0.3, shape=d)
        pm.Normal("y", mu=a + X @ beta, sigma=1.0, observed=y)
    sgs = _sample(model, {"rho": 0.02}, draws=10000, tune=1000, chains=4, random_seed=31)
    nuts = _nuts(model, 32)
    z = _compare_to_nuts(sgs, nuts, ["a", "beta"])
    print("z-scores (mean, sd) against NUTS:", np.round(z, 2).tolist())
    assert np.all(np.abs(z) < Z_MAX), z
    # negative control: Normal priors with the same variance
    with pm.Model() as wrong:
        a = pm.Normal("a", 0.0, 5.0)
        beta = pm.Normal("beta", 0.0, 0.3 * np.sqrt(2), shape=d)
        pm.Normal("y", mu=a + X @ beta, sigma=1.0, observed=y)
    z_wrong = _compare_to_nuts(sgs, _nuts(wrong, 33, draws=5000), ["a", "beta"])
    print("negative control, max |z|:", round(float(np.max(np.abs(z_wrong))), 1))
    assert np.max(np.abs(z_wrong)) > Z_MAX


# ------------------------------------------------------------- numba engine
@pytest.mark.parametrize("exact", [False, True])
def test_numba_engine_with_laplace_prior_reproduces_numpy(exact):
    """Bernoulli likelihood (compiled) + Laplace prior rows (closed forms) in one kernel."""
    X, y = _lasso_data()
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 2.0)
        beta = pm.Laplace("beta", 0.0, 0.5, shape=4)
        pm.Bernoulli("yb", logit_p=a + X @ beta, observed=(y > 0).astype(float))
    prob = detect_split_problem(model).problem
    runs = run_both_engines(prob, rho=0.3, alpha=-0.9, seed=3, n_steps=20, exact=exact)
    assert_engines_agree(runs)
    # negative control: a slightly different rho gives a different chain
    k = SplitGibbsKernel(prob, rho=0.31, alpha=-0.9, log_weights=True, engine="numba")
    rng = np.random.default_rng(3)
    state = k.init(np.zeros(prob.d), rng)
    for _ in range(20):
        state, _ = k.exact_step(state, rng, 3) if exact else k.sweep(state, rng)
    assert not np.allclose(state.theta, runs["numba"][-1][0], rtol=1e-8, atol=1e-8)


def test_per_row_rho_likelihood_rows_first_then_prior_rows():
    X, y = _lasso_data()
    with pm.Model():
        a = pm.Normal("a", 0.0, 2.0)
        beta = pm.Laplace("beta", 0.0, 0.5, shape=4)
        pm.Bernoulli("yb", logit_p=a + X @ beta, observed=(y > 0).astype(float))
        rho = np.r_[np.full(30, 0.3), np.full(4, 0.05)]
        step = pymc_sgs.SplitGibbs(rho=rho)
        rows = step.kernel.rows._rho_rows
        sl_lik, sl_prior = step.detected.problem.term_slices()
        np.testing.assert_array_equal(rows[sl_lik], 0.3)
        np.testing.assert_array_equal(rows[sl_prior], 0.05)
        assert "n_split=34" in repr(step)
        with pytest.raises(ValueError, match=r"one value per split row \(34\)"):
            pymc_sgs.SplitGibbs(rho=np.full(30, 0.3))
