"""Bad input fails at ``SplitGibbs(...)`` construction, with a message that names
the variable (or parameter) and says why, before any sampling starts."""

import warnings

import numpy as np
import pymc as pm
import pytest

import pymc_sgs
from pymc_sgs import SplitGibbs, UnsupportedModelError
from pymc_sgs.mixed.step import MixedSplitGibbs

N, D = 25, 3


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(N, D))
    y = (rng.random(N) < 0.5).astype(float)
    counts = rng.poisson(2.0, size=N).astype(float)
    return X, y, counts


def logistic(X, y, rho=0.2, **kwargs):
    """Build a logistic model and construct SplitGibbs in it."""
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=X.shape[1])
        pm.Bernoulli("y", logit_p=X @ b, observed=y)
        return SplitGibbs(rho=rho, **kwargs)


def test_unsupported_model_error_is_value_error():
    assert issubclass(UnsupportedModelError, ValueError)


def test_valid_model_constructs(data):
    X, y, _ = data
    step = logistic(X, y)
    assert [v.name for v in step.vars] == ["beta"]


# ------------------------------------------------------------ model structure
def test_no_observed_variable():
    with pm.Model():
        pm.Normal("beta", 0.0, 1.0, shape=2)
        with pytest.raises(UnsupportedModelError, match="no observed variables"):
            SplitGibbs(rho=0.2)


def test_non_glm_likelihood(data):
    X, _, _ = data
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Logistic("y", mu=X @ b, s=1.0, observed=np.zeros(N))
        with pytest.raises(UnsupportedModelError, match=r"'y'.*Logistic.*(not|no)"):
            SplitGibbs(rho=0.2)


def test_non_glm_likelihood_next_to_a_glm_term(data):
    X, y, _ = data
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Bernoulli("y", logit_p=X @ b, observed=y)
        pm.Logistic("w", mu=X @ b, s=1.0, observed=np.zeros(N))
        with pytest.raises(UnsupportedModelError, match=r"'w' has a Logistic likelihood"):
            SplitGibbs(rho=0.2)


@pytest.mark.parametrize(
    "make_eta, culprits",
    [
        (lambda b, X: b[0] * b[1] * X[:, 0], r"\['beta\[0\]', 'beta\[1\]'\]"),
        (lambda b, X: pm.math.exp(b) @ X.T, r"\['beta\[0\]', 'beta\[1\]', 'beta\[2\]'\]"),
        (lambda b, X: X @ b + b[2] ** 2, r"\['beta\[2\]'\]"),
    ],
    ids=["product", "exp", "square"],
)
def test_non_affine_predictor(data, make_eta, culprits):
    X, y, _ = data
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Bernoulli("y", logit_p=make_eta(b, X), observed=y)
        with pytest.raises(
            UnsupportedModelError,
            match=r"predictor of observed variable 'y' is not affine in the coefficients "
            r"\['beta'\] through " + culprits,
        ):
            SplitGibbs(rho=0.2)


def test_non_affine_in_one_of_two_scalar_coefficients(data):
    X, y, _ = data
    with pm.Model():
        a = pm.Normal("a", 0.0, 1.0)
        s = pm.Normal("s", 0.0, 1.0)
        pm.Bernoulli("y", logit_p=a + pm.math.exp(s) * X[:, 0], observed=y)
        with pytest.raises(
            UnsupportedModelError,
            match=r"not affine in the coefficients \['a', 's'\] through \['s'\]",
        ):
            SplitGibbs(rho=0.2)


def test_poisson_mu_not_exp_of_predictor(data):
    X, _, counts = data
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Poisson("c", mu=(X @ b) ** 2 + 1.0, observed=counts)
        with pytest.raises(
            UnsupportedModelError, match=r"'c'.*parameter mu is not a log-link.*exp"
        ):
            SplitGibbs(rho=0.2)


def test_poisson_mu_nonlinear_in_exp(data):
    X, _, counts = data
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Poisson("c", mu=pm.math.exp(X @ b) ** 2 + 1.0, observed=counts)
        with pytest.raises(
            UnsupportedModelError, match=r"'c'.*not exp\(eta\) times a positive constant"
        ):
            SplitGibbs(rho=0.2)


def test_bernoulli_p_scaled_sigmoid(data):
    X, y, _ = data
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Bernoulli("y", p=0.5 * pm.math.invlogit(X @ b), observed=y)
        with pytest.raises(UnsupportedModelError, match=r"'y'.*not equal to it.*logit"):
            SplitGibbs(rho=0.2)


def test_bernoulli_mixture_of_two_sigmoids(data):
    X, y, _ = data
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        p = 0.5 * pm.math.invlogit(X @ b) + 0.5 * pm.math.invlogit(-(X @ b))
        pm.Bernoulli("y", p=p, observed=y)
        with pytest.raises(UnsupportedModelError, match=r"'y'.*2 separate invlogit"):
            SplitGibbs(rho=0.2)


def test_bernoulli_cloglog_link(data):
    X, y, _ = data
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Bernoulli("y", p=1 - pm.math.exp(-pm.math.exp(X @ b)), observed=y)
        with pytest.raises(
            UnsupportedModelError, match=r"'y'.*parameter p is not a logit/probit-link"
        ):
            SplitGibbs(rho=0.2)


# -------------------------------------------------------------------- priors
def test_hierarchical_prior_with_random_mean(data):
    # a hierarchical *scale* is supported (tests/test_hierarchical.py); a random mean is not
    X, y, _ = data
    with pm.Model():
        mu = pm.Normal("mu", 0.0, 1.0)
        b = pm.Normal("beta", mu, 1.0, shape=D)
        pm.Bernoulli("y", logit_p=X @ b, observed=y)
        with pytest.raises(
            UnsupportedModelError,
            match=r"prior of coefficient 'beta'.*\['mu'\].*more than its scale",
        ):
            SplitGibbs(rho=0.2)


@pytest.mark.parametrize(
    "prior, name",
    [
        (lambda: pm.HalfNormal("beta", 1.0, shape=D), "HalfNormal"),
        (lambda: pm.StudentT("beta", nu=3.0, mu=0.0, sigma=1.0, shape=D), "StudentT"),
    ],
)
def test_non_gaussian_prior(data, prior, name):
    X, y, _ = data
    with pm.Model():
        b = prior()
        pm.Bernoulli("y", logit_p=X @ b, observed=y)
        with pytest.raises(
            UnsupportedModelError,
            match=rf"coefficient 'beta'.*{name}.*Normal, MvNormal, Laplace or Flat",
        ):
            SplitGibbs(rho=0.2)


def test_flat_prior_duplicated_columns_is_improper(data):
    X, y, _ = data
    Xdup = np.column_stack([X, X[:, 1]])
    with pm.Model():
        b = pm.Flat("beta", shape=D + 1)
        pm.Bernoulli("y", logit_p=Xdup @ b, observed=y)
        with pytest.raises(ValueError, match=r"improper.*beta\[1\].*beta\[3\].*proper prior"):
            SplitGibbs(rho=0.2)


def test_flat_prior_duplicated_columns_free_sigma(data):
    """With a free sigma the theta-step is factored only at the first sweep: the
    check must still happen at construction."""
    X, _, _ = data
    Xdup = np.column_stack([X, X[:, 0]])
    with pm.Model():
        b = pm.Flat("beta", shape=D + 1)
        s = pm.HalfNormal("sigma", 1.0)
        pm.Normal("yc", mu=Xdup @ b, sigma=s, observed=np.zeros(N))
        with pytest.raises(ValueError, match=r"improper.*beta\[0\].*beta\[3\].*proper prior"):
            SplitGibbs(rho=0.2)


def test_flat_prior_more_coefficients_than_rows():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3, 5))
    with pm.Model():
        b = pm.Flat("beta", shape=5)
        pm.Bernoulli("y", logit_p=X @ b, observed=np.array([0.0, 1.0, 1.0]))
        with pytest.raises(ValueError, match=r"improper.*'beta\[.*proper prior"):
            SplitGibbs(rho=0.2)


def test_mvnormal_prior_singular_covariance(data):
    X, y, _ = data
    with pm.Model():
        b = pm.MvNormal("beta", mu=np.zeros(D), cov=np.ones((D, D)))
        pm.Bernoulli("y", logit_p=X @ b, observed=y)
        with pytest.raises(ValueError, match=r"'beta'.*MvNormal.*positive definite"):
            SplitGibbs(rho=0.2)


def test_potential_involving_beta(data):
    X, y, _ = data
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Bernoulli("y", logit_p=X @ b, observed=y)
        pm.Potential("shrink", -pm.math.abs(b).sum())
        with pytest.raises(UnsupportedModelError, match=r"pm.Potential 'shrink'.*'beta'"):
            SplitGibbs(rho=0.2)


def test_coefficient_used_as_a_prior_parameter(data):
    X, y, _ = data
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Bernoulli("y", logit_p=X @ b, observed=y)
        pm.Normal("other", mu=b[0], sigma=1.0)
        with pytest.raises(
            UnsupportedModelError, match=r"'other' depends on the coefficient.*'beta'"
        ):
            SplitGibbs(rho=0.2)


# ---------------------------------------------------------------------- data
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_design(data, bad):
    X, y, _ = data
    Xb = X.copy()
    Xb[4, 1] = bad
    with pytest.raises(
        ValueError,
        match=r"observed variable 'y'.*non-finite.*row 4\..*an array of shape \(25, 3\).*"
        r"index \(4, 1\).*design matrix X",
    ):
        logistic(Xb, y)


def test_non_finite_design_in_pm_data(data):
    X, y, _ = data
    Xb = X.copy()
    Xb[7, 0] = np.inf  # pm.Data refuses NaN, but takes inf
    with pm.Model():
        Xd = pm.Data("X", Xb)
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Bernoulli("y", logit_p=Xd @ b, observed=y)
        with pytest.raises(ValueError, match=r"'y'.*non-finite.*row 7.*pm.Data 'X'.*\(7, 0\)"):
            SplitGibbs(rho=0.2)


def test_nan_design_through_set_data(data):
    X, y, _ = data
    Xb = X.copy()
    Xb[9, 2] = np.nan
    with pm.Model():
        Xd = pm.Data("X", X)
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Bernoulli("y", logit_p=Xd @ b, observed=y)
        pm.set_data({"X": Xb})
        with pytest.raises(ValueError, match=r"'y'.*non-finite.*row 9.*pm.Data 'X'.*\(9, 2\)"):
            SplitGibbs(rho=0.2)


def test_non_finite_offset(data):
    X, _, counts = data
    expo = np.ones(N)
    expo[2] = 0.0  # log(0) = -inf
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        with np.errstate(divide="ignore"):
            log_expo = np.log(expo)
        pm.Poisson("c", mu=pm.math.exp(log_expo + X @ b), observed=counts)
        with pytest.raises(
            ValueError, match=r"'c'.*non-finite.*row 2\..*shape \(25,\).*\(2,\).*log\(0\)"
        ):
            SplitGibbs(rho=0.2)


def test_zero_exposure_factor(data):
    X, _, counts = data
    expo = np.ones(N)
    expo[5] = 0.0
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Poisson("c", mu=expo * pm.math.exp(X @ b), observed=counts)
        with pytest.raises(ValueError, match=r"'c'.*zero or non-finite exposure.*row 5"):
            SplitGibbs(rho=0.2)


def test_nan_in_y_imputed_by_pymc(data):
    X, y, _ = data
    yb = y.copy()
    yb[5] = np.nan
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        with pytest.warns(UserWarning), np.errstate(invalid="ignore"):  # PyMC imputes y
            pm.Bernoulli("y", logit_p=X @ b, observed=yb)
        with pytest.raises(
            ValueError, match=r"observed data of 'y' contains NaN.*'y_unobserved'.*Drop"
        ):
            SplitGibbs(rho=0.2)


def test_nan_in_y_of_normal_likelihood(data):
    X, _, _ = data
    yc = np.zeros(N)
    yc[0] = np.nan
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        with pytest.warns(UserWarning):
            pm.Normal("yc", mu=X @ b, sigma=1.0, observed=yc)
        with pytest.raises(ValueError, match=r"observed data of 'yc' contains NaN"):
            SplitGibbs(rho=0.2)


def test_bernoulli_y_outside_support(data):
    X, y, _ = data
    yb = y.copy()
    yb[3] = 2.0
    with pytest.raises(
        ValueError, match=r"observed data of 'y' must be 0 or 1.*received 2 at flat index 3"
    ):
        logistic(X, yb)


@pytest.mark.parametrize(
    "value, msg",
    [(-1.0, r"must be non-negative counts.*received -1 at"), (1.5, r"must be whole numbers.*1\.5")],
)
def test_poisson_y_outside_support(data, value, msg):
    """Through a float pm.Data container: PyMC casts it to int in the graph (and
    truncates a plain numpy 1.5 to 1 when the model is built, before we see it)."""
    X, _, counts = data
    c = counts.copy()
    c[6] = value
    with pm.Model():
        cd = pm.Data("counts", c)
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Poisson("c", mu=pm.math.exp(X @ b), observed=cd)
        with pytest.raises(ValueError, match=r"observed data of 'c'.*" + msg):
            SplitGibbs(rho=0.2)


def test_poisson_negative_count_numpy(data):
    X, _, counts = data
    c = counts.copy()
    c[2] = -3
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Poisson("c", mu=pm.math.exp(X @ b), observed=c)
        with pytest.raises(
            ValueError, match=r"observed data of 'c' must be non-negative counts.*-3"
        ):
            SplitGibbs(rho=0.2)


def test_binomial_successes_above_trials(data):
    X, _, _ = data
    n = np.full(N, 3)
    k = np.ones(N, dtype=int)
    k[8] = 5
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Binomial("k", n=n, logit_p=X @ b, observed=k)
        with pytest.raises(
            ValueError,
            match=r"observed data of 'k' must lie in \[0, n\].*y=5 with n=3 at flat index 8",
        ):
            SplitGibbs(rho=0.2)


# ----------------------------------------------------------------------- rho
@pytest.mark.parametrize(
    "rho, msg",
    [
        (-0.5, r"rho must be positive and finite; received"),
        (np.nan, r"rho must be positive and finite; received"),
        (np.inf, r"rho must be positive and finite; received"),
        ("abc", r"rho must be 'auto', 'tuned', a positive coupling .*received 'abc'"),
        (None, r"rho must be 'auto', 'tuned', a positive coupling .*received None"),
        (np.array([0.2, 0.0] * 12 + [0.2]), r"rho must be positive and finite"),
        (np.ones((2, 2)), r"rho must be a scalar or a 1-D array"),
    ],
    # rho=0 (a number) is valid: no split (tests/test_direct.py)
    ids=["negative", "nan", "inf", "string", "None", "zero-entry", "2-D"],
)
def test_bad_rho(data, rho, msg):
    X, y, _ = data
    with pytest.raises(ValueError, match=msg):
        logistic(X, y, rho=rho)


def test_rho_defaults_to_auto(data):
    X, y, _ = data
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Bernoulli("y", logit_p=X @ b, observed=y)
        step = SplitGibbs()
        tuned = SplitGibbs(rho="tuned")
    # a logistic regression: no split (rho=0) by default
    assert step.direct and step.auto_direct and not step.auto_rho
    # rho="tuned" is set at the first chain's start (from the Laplace approximation), not yet
    assert tuned.auto_rho and tuned._auto_rho_value is None and not tuned.direct


def test_rho_array_wrong_length(data):
    X, y, _ = data
    with pytest.raises(
        ValueError,
        match=rf"rho given per observation must have one value per split row \({N}\); received an array of length {N - 1}",
    ):
        logistic(X, y, rho=np.full(N - 1, 0.2))


def test_rho_array_right_length(data):
    X, y, _ = data
    step = logistic(X, y, rho=np.full(N, 0.2))
    assert step.kernel.rho.shape == (N,)


# ------------------------------------------------------------------- vars
def test_vars_missing_a_coefficient(data):
    X, y, _ = data
    with pm.Model():
        a = pm.Normal("a", 0.0, 1.0)
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Bernoulli("y", logit_p=a + X @ b, observed=y)
        with pytest.raises(
            UnsupportedModelError, match=r"depend on \['a'\].*not among the variables"
        ):
            SplitGibbs([b], rho=0.2)


def test_data_changed_after_construction():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(50, 2)), rng.integers(0, 2, 50)
    kw = dict(draws=5, tune=5, chains=1, progressbar=False, compute_convergence_checks=False)
    with pm.Model():
        Xd = pm.Data("X", X)
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Bernoulli("y", logit_p=Xd @ b, observed=y)
        step = SplitGibbs(rho=0.3)
        pm.sample(step=step, **kw)  # unchanged data: fine
        pm.set_data({"X": 2 * X})
        with pytest.raises(
            ValueError, match=r"data container 'X' changed .*Construct a new SplitGibbs"
        ):
            pm.sample(step=step, **kw)
        pm.sample(step=SplitGibbs(rho=0.3), **kw)  # rebuilt: fine


def test_design_modified_in_place_after_construction():
    # SplitGibbs uses the model's own float64 design array; writing into it afterwards is
    # caught before the first sweep (the kernel's A^T A and start would be stale)
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(60, 2)), rng.integers(0, 2, 60)
    kw = dict(draws=5, tune=5, chains=1, progressbar=False, compute_convergence_checks=False)
    with pm.Model():
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Bernoulli("y", logit_p=pm.math.dot(X, b), observed=y)
        step = SplitGibbs(rho=0.3)
        assert np.shares_memory(step.kernel.rows.A, X)
        X[0, 0] += 1.0
        with pytest.raises(
            ValueError,
            match=r"array of observed variable 'y' .*was "
            r"modified in place.*Construct a new SplitGibbs",
        ):
            pm.sample(step=step, **kw)
        pm.sample(step=SplitGibbs(rho=0.3), **kw)  # rebuilt: fine
    # a Normal likelihood's design (a Gaussian term of theta | z, not a split one) too
    with pm.Model():
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Normal("y", mu=pm.math.dot(X, b), sigma=1.0, observed=y.astype(float))
        step = SplitGibbs(rho=0.3)
        X[0, 1] += 1.0
        with pytest.raises(
            ValueError,
            match=r"array of observed variable 'y' .*was "
            r"modified in place",
        ):
            pm.sample(step=step, **kw)


def test_empty_data_gives_the_prior():
    # no observations: a correct result (the prior), not an error; theta draws are exact
    with pm.Model():
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Bernoulli("y", logit_p=np.zeros((0, 2)) @ b, observed=np.zeros(0))
        idata = pm.sample(
            step=SplitGibbs(rho=0.3),
            draws=2000,
            tune=20,
            chains=1,
            random_seed=1,
            progressbar=False,
            compute_convergence_checks=False,
        )
    draws = idata.posterior["b"].values.reshape(-1, 2)
    # iid N(0, 1) draws: mean within 4.5 / sqrt(2000), sd within 4.5 * sqrt(1 / (2 * 2000))
    assert np.all(np.abs(draws.mean(0)) < 4.5 / np.sqrt(2000))
    assert np.all(np.abs(draws.std(0) - 1) < 4.5 * np.sqrt(1 / 4000))


# ------------------------------------------------------------ solver options
@pytest.mark.parametrize(
    "kwargs, msg",
    [
        (
            dict(theta_solver="lu"),
            r"theta_solver must be 'auto', 'cholesky' or 'cg'; received 'lu'",
        ),
        (dict(theta_solver=None), r"theta_solver must be .*received None"),
        (dict(dtype="float16"), r"dtype must be 'float64' or 'float32' .*received 'float16'"),
    ],
    ids=["solver-name", "solver-None", "dtype"],
)
def test_bad_solver_options(data, kwargs, msg):
    X, y, _ = data
    with pytest.raises(ValueError, match=msg):
        logistic(X, y, rho=0.2, **kwargs)


def test_cg_with_a_flat_prior_is_a_clear_error(data):
    from pymc_sgs.conditionals import SingularPrecisionError

    X, y, _ = data
    with pm.Model():
        b = pm.Flat("beta", shape=D)
        pm.Bernoulli("y", logit_p=X @ b, observed=y)
        with pytest.raises(
            SingularPrecisionError, match=r"theta_solver='cg' needs a proper Gaussian prior"
        ):
            SplitGibbs(rho=0.2, theta_solver="cg")


@pytest.mark.parametrize("value", [0, -2, 1.5, "3"], ids=["zero", "negative", "float", "str"])
def test_bad_log_weights(data, value):
    X, y, _ = data
    with pytest.raises(ValueError, match=r"log_weights must be True, False or a positive integer"):
        logistic(X, y, rho=0.2, log_weights=value)


def test_thinned_weights_with_exact_mode(data):
    X, y, _ = data
    with pytest.raises(ValueError, match=r"exact=True needs the importance weight of every draw"):
        logistic(X, y, rho=0.2, exact=True, log_weights=4)


# ------------------------------------------------ nuisance parameters of split likelihoods
def test_gamma_shape_from_mu_sigma(data):
    X, _, _ = data
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Gamma("y", mu=pm.math.exp(X @ b), sigma=1.0, observed=np.ones(N))
        with pytest.raises(
            UnsupportedModelError,
            match=r"shape of the Gamma likelihood of 'y' depends on the coefficient\(s\) \['beta'\]"
            r".*alpha=k, beta=k / pm.math.exp\(eta\)",
        ):
            SplitGibbs(rho=0.2)


def test_nuisance_depends_on_coefficients(data):
    X, _, counts = data
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.NegativeBinomial("c", mu=pm.math.exp(X @ b), alpha=pm.math.exp(b[0]), observed=counts)
        with pytest.raises(
            UnsupportedModelError,
            match=r"alpha of the NegativeBinomial likelihood of 'c' depends on the coefficient",
        ):
            SplitGibbs(rho=0.2)


def test_nuisance_per_observation(data):
    X, _, counts = data
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.NegativeBinomial(
            "c", mu=pm.math.exp(X @ b), alpha=np.arange(1.0, N + 1), observed=counts
        )
        with pytest.raises(
            UnsupportedModelError, match=r"alpha of .*'c' differs between observations"
        ):
            SplitGibbs(rho=0.2)


def test_nuisance_non_scalar_free_variable(data):
    X, _, _ = data
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        s = pm.HalfNormal("s", 1.0, shape=N)
        pm.StudentT("w", nu=3, mu=X @ b, sigma=s, observed=np.zeros(N))
        with pytest.raises(
            UnsupportedModelError,
            match=r"sigma of .*'w' depends on the non-scalar free variable 's'",
        ):
            SplitGibbs(rho=0.2)


def test_nuisance_used_elsewhere(data):
    X, _, _ = data
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        s = pm.HalfNormal("s", 1.0)
        pm.StudentT("w", nu=3, mu=X @ b, sigma=s, observed=np.zeros(N))
        pm.Normal("v", 0.0, s, observed=np.ones(4))
        with pytest.raises(
            UnsupportedModelError, match=r"variable 'v' depends on \['s'\], which parametrise"
        ):
            SplitGibbs(rho=0.2)


def test_vars_leave_out_a_nuisance_parameter(data):
    X, _, counts = data
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        alpha = pm.HalfNormal("alpha", 5.0)
        pm.NegativeBinomial("c", mu=pm.math.exp(X @ b), alpha=alpha, observed=counts)
        with pytest.raises(
            UnsupportedModelError, match=r"\['alpha'\] parametrise.*not among the variables"
        ):
            SplitGibbs([b], rho=0.2)
        step = SplitGibbs([b, alpha], rho=0.2)
        assert [v.name for v in step.vars] == ["beta", "alpha_log__"]


def test_gamma_data_must_be_positive(data):
    X, _, _ = data
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Gamma("y", alpha=2.0, beta=2.0 / pm.math.exp(X @ b), observed=np.r_[np.ones(N - 1), 0.0])
        with pytest.raises(
            ValueError, match=r"'y' must be positive for a Gamma likelihood; received 0"
        ):
            SplitGibbs(rho=0.2)


def test_negative_binomial_counts(data):
    X, _, _ = data
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        obs = pm.Data("obs", np.r_[np.ones(N - 1), 1.5])
        pm.NegativeBinomial("c", mu=pm.math.exp(X @ b), alpha=2.0, observed=obs)
        with pytest.raises(
            ValueError, match=r"'c' \(NegativeBinomial counts\) must be whole numbers"
        ):
            SplitGibbs(rho=0.2)


def test_nuisance_given_to_another_step(data):
    # PyMC lets two steps update one variable, so this one surfaces at SplitGibbs's next step
    X, _, counts = data
    with pm.Model() as model:
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        alpha = pm.HalfNormal("alpha", 5.0)
        pm.NegativeBinomial("c", mu=pm.math.exp(X @ b), alpha=alpha, observed=counts)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="'alpha_log__' was changed by another step method"):
            pm.sample(
                step=[SplitGibbs(rho=0.2), pm.Slice([model["alpha"]])],
                draws=5,
                tune=5,
                chains=1,
                cores=1,
                random_seed=1,
                progressbar=False,
                compute_convergence_checks=False,
            )


def test_bambi_noncentered_group_term():
    bmb = pytest.importorskip("bambi")
    import pandas as pd

    rng = np.random.default_rng(4)
    df = pd.DataFrame({"x": rng.normal(size=40), "g": rng.choice(["a", "b", "c"], 40)})
    df["y"] = (rng.random(40) < 0.5).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = bmb.Model("y ~ x + (1|g)", df, family="bernoulli")
        m.build()
    # Bambi's default (non-centred) group terms are read by the mixed-model step (issue 19);
    # the GLM path cannot leave the scale out
    with m.backend.model:
        assert isinstance(SplitGibbs(rho=0.2), MixedSplitGibbs)
        with pytest.raises(UnsupportedModelError, match=r"depend on \['1\|g_sigma'\].*vars"):
            SplitGibbs(vars=["Intercept", "x", "1|g_offset"], rho=0.2)


# ------------------------------------------- combinations of strategies and model features
def test_center_needs_a_canonical_link_family(data):
    X, _, _ = data
    y = np.random.default_rng(0).poisson(2.0, N)
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.NegativeBinomial("y", mu=pm.math.exp(X @ b), alpha=2.0, observed=y)
        with pytest.raises(
            ValueError,
            match=r"center=True supports Bernoulli/Binomial-logit, Poisson-log and Normal terms",
        ):
            SplitGibbs(rho=0.2, center=True)


def test_center_with_a_free_likelihood_parameter(data):
    X, _, _ = data
    y = np.random.default_rng(0).poisson(2.0, N)
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        a = pm.Exponential("alpha", 1.0)
        pm.NegativeBinomial("y", mu=pm.math.exp(X @ b), alpha=a, observed=y)
        with pytest.raises(
            ValueError, match=r"center=True needs fixed likelihood parameters; \['alpha_log__'\]"
        ):
            SplitGibbs(rho=0.2, center=True)


def test_shards_with_a_kinked_likelihood(data):
    X, _, _ = data
    y = np.random.default_rng(0).normal(size=N)
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.AsymmetricLaplace("y", mu=X @ b, b=1.0, kappa=1.0, observed=y)
        with pytest.raises(
            ValueError,
            match=r"split='shards' needs smooth log-concave potentials; received the terms \['y'\]",
        ):
            SplitGibbs(rho=0.2, alpha=0, split="shards", n_shards=2)


def test_shards_with_a_sharded_backend(data):
    X, y, _ = data
    with pytest.raises(
        ValueError,
        match=r"split='shards' runs its shards in this process; received backend=LocalBackend\(n_shards=2\)",
    ):
        logistic(
            X,
            y,
            rho=0.2,
            alpha=0,
            split="shards",
            n_shards=2,
            backend=pymc_sgs.LocalBackend(n_shards=2),
        )


# ------------------------------------------- models that are no GLM: say what they are
NUTS = r"Sample this model with NUTS \(pm\.sample\(\) without step=, or nutpie\)"


def _ordered_cutpoints():
    return pm.Normal(
        "cut", [-1.0, 1.0], 1.0, transform=pm.distributions.transforms.ordered, shape=2
    )


@pytest.mark.parametrize("ordered", [pm.OrderedLogistic, pm.OrderedProbit])
def test_ordinal_likelihood_is_named_not_told_to_use_softmax(data, ordered):
    X, _, _ = data
    y = np.random.default_rng(0).integers(0, 3, N)
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        ordered("y", eta=X @ b, cutpoints=_ordered_cutpoints(), observed=y)
        with pytest.raises(
            UnsupportedModelError, match=r"'y'.*ordinal likelihood.*does not support\. " + NUTS
        ):
            SplitGibbs(rho=0.2)


def test_bambi_cumulative_family_is_ordinal():
    bmb = pytest.importorskip("bambi")
    import pandas as pd

    rng = np.random.default_rng(5)
    df = pd.DataFrame(
        {"x": rng.normal(size=30), "y": pd.Categorical(rng.integers(0, 3, 30), ordered=True)}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = bmb.Model("y ~ x", df, family="cumulative")
        m.build()
    with m.backend.model:
        with pytest.raises(UnsupportedModelError, match=r"ordinal likelihood.*" + NUTS):
            SplitGibbs(rho=0.2)


@pytest.mark.parametrize("formula", ["y ~ x", "y ~ x + (1|g)"])
def test_bambi_gamma_default_inverse_link_names_the_link(formula):
    # Bambi's family="gamma" is pm.Gamma(mu=1/eta, sigma=mu/alpha): the shape's graph holds
    # the coefficients, so the term is not read as a GLM term; the error must still say
    # that the link is what is unsupported, and how to get the log link
    bmb = pytest.importorskip("bambi")
    import pandas as pd

    rng = np.random.default_rng(6)
    df = pd.DataFrame({"x": rng.normal(size=40), "g": rng.choice(["a", "b", "c"], 40)})
    df["y"] = rng.gamma(4.0, np.exp(0.3 * df["x"]) / 4.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = bmb.Model(formula, df, family="gamma")
        m.build()
        log_link = bmb.Model(formula, df, family="gamma", link="log")
        log_link.build()
    with m.backend.model:
        with pytest.raises(
            UnsupportedModelError,
            match=r"'y': its Gamma parameter mean.*not a log-link function.*"
            r"Bambi's family='gamma' uses the inverse link.*link='log'.*NUTS",
        ):
            SplitGibbs()
    with log_link.backend.model:
        SplitGibbs()  # the advice works


def test_gp_lengthscale_is_not_called_a_coefficient(data):
    X, y, _ = data
    with pm.Model():
        ell = pm.Gamma("ell", 2.0, 1.0)
        f = pm.gp.Latent(cov_func=pm.gp.cov.ExpQuad(1, ls=ell)).prior("f", X=X[:, :1])
        pm.Bernoulli("y", logit_p=f, observed=y)
        with pytest.raises(
            UnsupportedModelError,
            match=r"variable 'ell' enters the linear predictor of 'y' non-linearly.*not a "
            r"regression coefficient.*" + NUTS,
        ):
            SplitGibbs(rho=0.2)


def test_noncentred_scale_gets_the_centred_form(data):
    X, y, _ = data
    g = np.arange(N) % 4
    with pm.Model():
        tau = pm.HalfNormal("tau", 1.0)
        u_raw = pm.Normal("u_raw", 0.0, 1.0, shape=4)
        u = pm.Deterministic("u", tau * u_raw)
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Bernoulli("y", logit_p=X @ b + u[g], observed=y)
        # read by the mixed-model step (issue 19); the GLM path cannot leave tau out
        assert isinstance(SplitGibbs(rho=0.2), MixedSplitGibbs)
        with pytest.raises(UnsupportedModelError, match=r"depend on \['tau'\].*vars"):
            SplitGibbs(vars=["beta", "u_raw"], rho=0.2)


@pytest.mark.parametrize(
    "name, make",
    [
        (
            "ZeroInflatedPoisson",
            lambda X, b, c: pm.ZeroInflatedPoisson("y", psi=0.7, mu=pm.math.exp(X @ b), observed=c),
        ),
        (
            "ZeroInflatedNegativeBinomial",
            lambda X, b, c: pm.ZeroInflatedNegativeBinomial(
                "y", psi=0.7, mu=pm.math.exp(X @ b), alpha=2.0, observed=c
            ),
        ),
        (
            "ZeroInflatedBinomial",
            lambda X, b, c: pm.ZeroInflatedBinomial(
                "y", psi=0.7, n=20, p=pm.math.invlogit(X @ b), observed=c
            ),
        ),
        (
            "HurdlePoisson",
            lambda X, b, c: pm.HurdlePoisson("y", psi=0.7, mu=pm.math.exp(X @ b), observed=c),
        ),
    ],
)
def test_zero_inflated_likelihood_is_named(data, name, make):
    X, _, counts = data
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        make(X, b, counts)
        with pytest.raises(
            UnsupportedModelError, match=rf"'y' has a {name} likelihood.*does not support\. " + NUTS
        ):
            SplitGibbs(rho=0.2)


def test_no_glm_term_says_what_to_use(data):
    X, _, _ = data
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Logistic("y", mu=X @ b, s=1.0, observed=np.zeros(N))
        with pytest.raises(
            UnsupportedModelError, match=r"no observed variable .*'Logistic'.*" + NUTS + " instead"
        ):
            SplitGibbs(rho=0.2)


@pytest.mark.parametrize(
    "make",
    [
        lambda X, b, y: pm.Bernoulli("y", logit_p=X @ b, observed=y),
        lambda X, b, y: pm.Binomial("y", n=3, logit_p=X @ b, observed=y),
        lambda X, b, y: pm.Poisson("y", mu=pm.math.exp(X @ b), observed=y),
        lambda X, b, y: pm.NegativeBinomial("y", mu=pm.math.exp(X @ b), alpha=2.0, observed=y),
    ],
    ids=["bernoulli", "binomial", "poisson", "negativebinomial"],
)
def test_inf_in_discrete_data_is_reported_as_inf(data, make):
    # PyMC casts a float y to the discrete likelihood's int type: inf becomes -9.2e18
    X, y, _ = data
    y = y.copy()
    y[3] = np.inf
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            make(X, b, y)
        with pytest.raises(
            ValueError,
            match=r"observed data of 'y' must be finite; found 1 "
            r"NaN/inf value\(s\), first at flat index 3 .*Drop or impute",
        ):
            SplitGibbs(rho=0.2)


def test_inf_in_binomial_trials_is_reported_as_inf(data):
    X, y, _ = data
    n = np.full(N, 3.0)
    n[2] = np.inf
    with pm.Model():
        b = pm.Normal("beta", 0.0, 1.0, shape=D)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pm.Binomial("y", n=n, logit_p=X @ b, observed=y)
        with pytest.raises(
            ValueError,
            match=r"trials \(n\) of 'y' must be finite; found 1 "
            r"NaN/inf value\(s\), first at flat index 2",
        ):
            SplitGibbs(rho=0.2)


def test_inf_in_categorical_data_is_reported_as_inf(data):
    import pytensor.tensor as pt

    X, _, _ = data
    y = np.random.default_rng(1).integers(0, 3, N).astype(float)
    y[4] = np.inf
    with pm.Model():
        B = pm.Normal("B", 0.0, 1.0, shape=(D, 2))
        logits = X @ pt.concatenate([pt.zeros((D, 1)), B], axis=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pm.Categorical("y", p=pm.math.softmax(logits, axis=-1), observed=y)
        with pytest.raises(
            ValueError,
            match=r"observed data of 'y' must be finite; found 1 "
            r"NaN/inf value\(s\), first at flat index 4",
        ):
            SplitGibbs(rho=0.2)


# ------------------------------------------------------------------------ vars
def _other_model_variable():
    with pm.Model():
        return pm.Normal("other", 0.0, 1.0)


@pytest.mark.parametrize(
    "vars, received",
    [
        (["nope"], r"'nope', which is no variable of the model"),
        ("nope", r"'nope', which is no variable of the model"),
        (5, r"5 of type int"),
        ([_other_model_variable()], r"'other', which is not a variable of this model"),
        (["y"], r"'y', which is an observed variable"),
    ],
    ids=["unknown-name", "unknown-name-not-a-list", "int", "other-model", "observed"],
)
def test_vars_not_free_variables_of_the_model(data, vars, received):
    with pytest.raises(
        ValueError,
        match=r"vars must list free variables of the model "
        r"\(variables or names\), among \['beta'\]; received " + received,
    ):
        logistic(*data[:2], vars=vars)
