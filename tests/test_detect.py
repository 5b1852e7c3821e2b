"""Graph detection: every way of writing a GLM gives the true design, offset and prior.

Each test builds a small PyMC model whose design matrix ``X``, offset and
prior are known, runs :func:`pymc_sgs.detect_split_problem` on it and checks
the :class:`~pymc_sgs.SplitProblem` it returns (``A``, ``offset``, ``y``,
``trials``, family, prior mean and precision, parameter layout).
"""

import warnings

import numpy as np
import pandas as pd
import pymc as pm
import pytest

from pymc_sgs import SplitGibbs, UnsupportedModelError, detect_split_problem

N, D = 30, 3


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(42)
    X = rng.normal(size=(N, D))
    x1, x2 = rng.normal(size=N), rng.normal(size=N)
    y_bin = (rng.random(N) < 0.5).astype(float)
    counts = rng.poisson(2.0, size=N).astype(float)
    trials = rng.integers(1, 8, size=N).astype(float)
    succ = np.floor(trials * rng.random(N))
    expo = rng.uniform(0.5, 3.0, size=N)
    y_cont = rng.normal(size=N)
    return dict(
        X=X,
        x1=x1,
        x2=x2,
        y=y_bin,
        counts=counts,
        trials=trials,
        succ=succ,
        expo=expo,
        y_cont=y_cont,
    )


def only_split(problem):
    assert len(problem.split_terms) == 1
    assert not problem.gaussian_terms
    return problem.split_terms[0]


def assert_normal_prior(problem, mean, sd):
    mean = np.broadcast_to(np.asarray(mean, float), (problem.d,))
    sd = np.broadcast_to(np.asarray(sd, float), (problem.d,))
    np.testing.assert_allclose(problem.prior_mean, mean)
    np.testing.assert_allclose(problem.prior_precision, np.diag(1.0 / sd**2))


def layout(problem):
    return [(p.name, p.shape, p.start, p.stop) for p in problem.params]


# --------------------------------------------------------------- predictors
def test_dot_bernoulli_logit_p(data):
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, 2.0, shape=D)
        pm.Bernoulli("y", logit_p=pm.math.dot(data["X"], b), observed=data["y"])
    p = detect_split_problem(m).problem
    t = only_split(p)
    assert t.name == "y" and t.family.name == "bernoulli" and t.family.link == "logit"
    np.testing.assert_allclose(t.A, data["X"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(t.offset, 0.0, atol=1e-12)
    np.testing.assert_array_equal(t.y, data["y"])
    assert t.trials is None
    assert layout(p) == [("b", (D,), 0, D)]
    assert_normal_prior(p, 0.0, 2.0)


def test_matmul_plus_intercept_column_order(data):
    with pm.Model() as m:
        a = pm.Normal("a", 1.0, 5.0)
        b = pm.Normal("b", [0.0, 0.5, -0.5], [1.0, 2.0, 3.0], shape=D)
        pm.Bernoulli("y", logit_p=data["X"] @ b + a, observed=data["y"])
    p = detect_split_problem(m).problem
    t = only_split(p)
    # free_RVs order: a then b
    np.testing.assert_allclose(t.A, np.column_stack([np.ones(N), data["X"]]), atol=1e-12)
    np.testing.assert_allclose(t.offset, 0.0, atol=1e-12)
    assert layout(p) == [("a", (), 0, 1), ("b", (D,), 1, D + 1)]
    np.testing.assert_allclose(p.prior_mean, [1.0, 0.0, 0.5, -0.5])
    np.testing.assert_allclose(p.prior_precision, np.diag(1 / np.array([5.0, 1, 2, 3]) ** 2))


def test_scalar_coefficients_follow_free_rv_order(data):
    x1, x2 = data["x1"], data["x2"]
    with pm.Model() as m:
        # declared in the order b2, b0, b1: A's columns must follow this order
        b2 = pm.Normal("b2", 0.0, 3.0)
        b0 = pm.Normal("b0", 0.0, 1.0)
        b1 = pm.Normal("b1", 0.0, 2.0)
        pm.Bernoulli("y", logit_p=b0 + b1 * x1 + b2 * x2, observed=data["y"])
    p = detect_split_problem(m).problem
    t = only_split(p)
    assert [q.name for q in p.params] == [rv.name for rv in m.free_RVs] == ["b2", "b0", "b1"]
    np.testing.assert_allclose(t.A, np.column_stack([x2, np.ones(N), x1]), atol=1e-12)
    np.testing.assert_allclose(t.offset, 0.0, atol=1e-12)
    assert_normal_prior(p, 0.0, [3.0, 1.0, 2.0])


def test_pm_data_containers(data):
    with pm.Model() as m:
        Xd = pm.Data("X", data["X"])
        yd = pm.Data("y_obs", data["y"])
        b = pm.Normal("b", 0.0, 1.0, shape=D)
        pm.Bernoulli("y", logit_p=Xd @ b, observed=yd)
    t = only_split(detect_split_problem(m).problem)
    np.testing.assert_allclose(t.A, data["X"], atol=1e-12)
    np.testing.assert_array_equal(t.y, data["y"])


def test_dims_and_coords(data):
    coords = {"obs": np.arange(N), "feature": ["f0", "f1", "f2"]}
    with pm.Model(coords=coords) as m:
        Xd = pm.Data("X", data["X"], dims=("obs", "feature"))
        b = pm.Normal("b", 0.0, 1.5, dims="feature")
        a = pm.Normal("a", 0.0, 10.0)
        pm.Bernoulli("y", logit_p=a + Xd @ b, observed=data["y"], dims="obs")
    p = detect_split_problem(m).problem
    t = only_split(p)
    np.testing.assert_allclose(t.A, np.column_stack([data["X"], np.ones(N)]), atol=1e-12)
    assert layout(p) == [("b", (D,), 0, D), ("a", (), D, D + 1)]
    assert_normal_prior(p, 0.0, [1.5, 1.5, 1.5, 10.0])


def test_deterministic_wrappers(data):
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, 1.0, shape=D)
        eta = pm.Deterministic("eta", data["X"] @ b)
        pm.Bernoulli("y", logit_p=eta, observed=data["y"])
    t = only_split(detect_split_problem(m).problem)
    np.testing.assert_allclose(t.A, data["X"], atol=1e-12)
    # a Deterministic around the probability itself (a ViewOp over the sigmoid)
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, 1.0, shape=D)
        prob = pm.Deterministic("prob", pm.math.invlogit(data["X"] @ b))
        pm.Bernoulli("y", p=prob, observed=data["y"])
    t = only_split(detect_split_problem(m).problem)
    np.testing.assert_allclose(t.A, data["X"], atol=1e-12)
    assert t.family.name == "bernoulli"


def test_p_invlogit_instead_of_logit_p(data):
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, 1.0, shape=D)
        pm.Bernoulli("y", p=pm.math.invlogit(data["X"] @ b + 0.3), observed=data["y"])
    t = only_split(detect_split_problem(m).problem)
    np.testing.assert_allclose(t.A, data["X"], atol=1e-12)
    np.testing.assert_allclose(t.offset, 0.3, atol=1e-12)


def test_binomial_trials_array(data):
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, 1.0, shape=D)
        pm.Binomial(
            "k",
            n=data["trials"].astype(int),
            logit_p=data["X"] @ b,
            observed=data["succ"].astype(int),
        )
    t = only_split(detect_split_problem(m).problem)
    assert t.family.name == "binomial"
    np.testing.assert_allclose(t.A, data["X"], atol=1e-12)
    np.testing.assert_array_equal(t.trials, data["trials"])
    np.testing.assert_array_equal(t.y, data["succ"])


def test_poisson_exp(data):
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, 1.0, shape=D)
        pm.Poisson("c", mu=pm.math.exp(data["X"] @ b), observed=data["counts"])
    t = only_split(detect_split_problem(m).problem)
    assert t.family.name == "poisson" and t.family.link == "log"
    np.testing.assert_allclose(t.A, data["X"], atol=1e-12)
    np.testing.assert_allclose(t.offset, 0.0, atol=1e-12)


def test_poisson_log_exposure_offset(data):
    expo = data["expo"]
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, 1.0, shape=D)
        pm.Poisson("c", mu=pm.math.exp(np.log(expo) + data["X"] @ b), observed=data["counts"])
    t = only_split(detect_split_problem(m).problem)
    np.testing.assert_allclose(t.A, data["X"], atol=1e-12)
    np.testing.assert_allclose(t.offset, np.log(expo), atol=1e-12)
    # the same model with the exposure as a factor outside exp
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, 1.0, shape=D)
        pm.Poisson("c", mu=expo * pm.math.exp(data["X"] @ b), observed=data["counts"])
    t = only_split(detect_split_problem(m).problem)
    np.testing.assert_allclose(t.A, data["X"], atol=1e-12)
    np.testing.assert_allclose(t.offset, np.log(expo), atol=1e-10)


# ------------------------------------------------------------------- priors
def test_mvnormal_prior(data):
    rng = np.random.default_rng(1)
    L = rng.normal(size=(D, D))
    cov = L @ L.T + D * np.eye(D)
    mu = np.array([0.1, -0.2, 0.3])
    with pm.Model() as m:
        b = pm.MvNormal("b", mu=mu, cov=cov)
        pm.Bernoulli("y", logit_p=data["X"] @ b, observed=data["y"])
    p = detect_split_problem(m).problem
    np.testing.assert_allclose(only_split(p).A, data["X"], atol=1e-12)
    np.testing.assert_allclose(p.prior_mean, mu)
    np.testing.assert_allclose(p.prior_precision, np.linalg.inv(cov), rtol=1e-10, atol=1e-12)


def test_flat_prior(data):
    with pm.Model() as m:
        a = pm.Flat("a")
        b = pm.Normal("b", 0.0, 2.0, shape=D)
        pm.Bernoulli("y", logit_p=a + data["X"] @ b, observed=data["y"])
    p = detect_split_problem(m).problem
    np.testing.assert_allclose(p.prior_mean, 0.0)
    np.testing.assert_allclose(p.prior_precision, np.diag([0.0, 0.25, 0.25, 0.25]))


# -------------------------------------------------------- Normal likelihood
def test_normal_fixed_sigma(data):
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, 1.0, shape=D)
        pm.Normal("yc", mu=data["X"] @ b + 2.0, sigma=0.7, observed=data["y_cont"])
    det = detect_split_problem(m)
    p = det.problem
    assert not p.split_terms and len(p.gaussian_terms) == 1
    g = p.gaussian_terms[0]
    np.testing.assert_allclose(g.A, data["X"], atol=1e-12)
    np.testing.assert_allclose(g.offset, 2.0, atol=1e-12)
    np.testing.assert_allclose(g.sigma, np.full(N, 0.7))
    np.testing.assert_array_equal(g.y, data["y_cont"])
    assert det.sigma_sources == [None]


def test_normal_free_sigma_left_to_nuts(data):
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, 1.0, shape=D)
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Normal("yc", mu=data["X"] @ b, sigma=sigma, observed=data["y_cont"])
        det = detect_split_problem(m)
        g = det.problem.gaussian_terms[0]
        assert g.sigma is None
        np.testing.assert_allclose(g.A, data["X"], atol=1e-12)
        # sigma is read from the point (on its original scale) at every sweep
        point = m.initial_point()
        point["sigma_log__"] = np.log(1.3)
        np.testing.assert_allclose(det.sigmas(point)[0], np.full(N, 1.3))
        step = SplitGibbs(rho=0.2)
        assert [v.name for v in step.vars] == ["b"]
        assert det.value_var_names == ["b"]
        # pm.sample gives sigma to NUTS, in a compound step with SplitGibbs
        idata = pm.sample(
            draws=30,
            tune=30,
            chains=1,
            cores=1,
            step=step,
            progressbar=False,
            random_seed=0,
            compute_convergence_checks=False,
        )
    stats = idata.sample_stats
    assert "rho" in stats and "step_size" in stats  # SplitGibbs and NUTS stats
    assert np.unique(idata.posterior["sigma"].values).size > 10
    assert np.unique(idata.posterior["b"].values[..., 0]).size > 10


# ----------------------------------------------------------- other layouts
def test_two_observed_terms_share_beta(data):
    X, X2 = data["X"], data["X"][::-1] * 2.0
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, 1.0, shape=D)
        pm.Bernoulli("y1", logit_p=X @ b, observed=data["y"])
        pm.Poisson("y2", mu=pm.math.exp(X2 @ b - 1.0), observed=data["counts"])
    p = detect_split_problem(m).problem
    assert [t.name for t in p.split_terms] == ["y1", "y2"]
    assert [t.family.name for t in p.split_terms] == ["bernoulli", "poisson"]
    np.testing.assert_allclose(p.split_terms[0].A, X, atol=1e-12)
    np.testing.assert_allclose(p.split_terms[1].A, X2, atol=1e-12)
    np.testing.assert_allclose(p.split_terms[1].offset, -1.0, atol=1e-12)
    A, off = p.stacked_split()
    assert A.shape == (2 * N, D) and p.n_split == 2 * N


def test_scalar_eta_broadcast_to_vector_y(data):
    with pm.Model() as m:
        a = pm.Normal("a", 0.0, 1.0)
        pm.Bernoulli("y", logit_p=a, observed=data["y"])
    p = detect_split_problem(m).problem
    t = only_split(p)
    np.testing.assert_allclose(t.A, np.ones((N, 1)))
    np.testing.assert_allclose(t.offset, np.zeros(N))
    assert layout(p) == [("a", (), 0, 1)]


def test_vars_argument_and_unrelated_fixed_likelihood(data):
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, 1.0, shape=D)
        pm.Bernoulli("y", logit_p=data["X"] @ b, observed=data["y"])
        pm.Bernoulli("other", p=0.3, observed=data["y"])  # no free variable: ignored
    det = detect_split_problem(m, vars=[b])
    assert [t.name for t in det.problem.split_terms] == ["y"]
    assert det.value_var_names == ["b"]


# -------------------------------------------------------------------- Bambi
bmb = pytest.importorskip("bambi")


@pytest.fixture(scope="module")
def bambi_df():
    rng = np.random.default_rng(7)
    n = 200
    df = pd.DataFrame({"x1": rng.normal(size=n), "x2": rng.normal(size=n)})
    eta = -0.3 + 0.8 * df.x1 - 0.5 * df.x2
    df["y"] = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(int)
    df["c"] = rng.poisson(np.exp(0.2 + 0.3 * df.x1))
    df["g"] = 1.0 + df.x1 - df.x2 + rng.normal(size=n)
    return df


def bambi_pymc_model(df, formula, family, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = bmb.Model(formula, df, family=family, **kwargs)
        model.build()
    return model


def design(df, centered=True):
    """The design Bambi puts in the graph: by default it centres the predictors
    when there is an intercept (and moves the intercept back after sampling)."""
    x = df[["x1", "x2"]].to_numpy(float)
    if centered:
        x = x - x.mean(axis=0)
    return np.column_stack([np.ones(len(df)), x])


def bambi_prior(pm_model):
    """Mean and precision of Bambi's (independent Normal) priors, read from its graph."""
    means, precs = [], []
    for rv in pm_model.free_RVs:
        if rv.name in ("Intercept", "x1", "x2"):
            mu, sd = (float(v.eval()) for v in rv.owner.inputs[2:4])
            means.append(mu)
            precs.append(1 / sd**2)
    return np.array(means), np.diag(precs)


@pytest.mark.parametrize(
    "family, resp, fam_name, link",
    [("bernoulli", "y", "bernoulli", "logit"), ("poisson", "c", "poisson", "log")],
)
@pytest.mark.parametrize("centered", [True, False])
def test_bambi_split_families(bambi_df, family, resp, fam_name, link, centered):
    bm = bambi_pymc_model(bambi_df, f"{resp} ~ x1 + x2", family, center_predictors=centered)
    pm_model = bm.backend.model
    p = detect_split_problem(pm_model).problem
    t = only_split(p)
    assert t.family.name == fam_name and t.family.link == link
    assert [q.name for q in p.params] == ["Intercept", "x1", "x2"]
    np.testing.assert_allclose(t.A, design(bambi_df, centered), atol=1e-12)
    np.testing.assert_allclose(t.offset, 0.0, atol=1e-12)
    np.testing.assert_array_equal(t.y, bambi_df[resp].to_numpy(float))
    mean, prec = bambi_prior(pm_model)
    np.testing.assert_allclose(p.prior_mean, mean)
    np.testing.assert_allclose(p.prior_precision, prec)


def test_bambi_gamma_log_link_free_shape(bambi_df):
    # Bambi writes pm.Gamma(mu=exp(eta), sigma=mu / alpha**0.5): the shape mu^2 / sigma^2 is
    # alpha, though its graph holds the coefficients. It is read as the Gamma-log GLM with
    # a free shape, whose value follows alpha alone
    df = bambi_df.assign(gam=np.random.default_rng(8).gamma(4.0, np.exp(0.3 * bambi_df.x1) / 4))
    bm = bambi_pymc_model(df, "gam ~ x1 + x2", "gamma", link="log")
    pm_model = bm.backend.model
    det = detect_split_problem(pm_model)
    t = only_split(det.problem)
    assert t.family.name == "gamma" and t.family.link == "log"
    np.testing.assert_allclose(t.A, design(df), atol=1e-12)
    np.testing.assert_array_equal(t.y, df.gam.to_numpy(float))
    assert [name for name, _ in det.nuisance_vars] == ["alpha_log__"]
    point = pm_model.initial_point()
    for alpha in (0.5, 3.7, 40.0):
        for coef in (-2.0, 0.0, 1.5):  # the coefficients do not change the shape
            at = {**point, "alpha_log__": np.log(alpha), "Intercept": coef, "x1": -coef}
            got = det.nuisance_values(at)[0]["shape"]
            np.testing.assert_allclose(got, alpha, rtol=1e-12)


def test_gamma_shape_that_follows_the_mean_is_still_refused():
    # the negative control: pm.Gamma(mu=exp(eta), sigma=s) has shape exp(2 eta) / s^2, which
    # does vary with the coefficients, so no value may be fixed
    rng = np.random.default_rng(9)
    x = rng.normal(size=50)
    with pm.Model():
        b = pm.Normal("b", 0.0, 1.0, shape=2)
        s = pm.HalfNormal("s", 1.0)
        pm.Gamma("y", mu=pm.math.exp(b[0] + b[1] * x), sigma=s, observed=rng.gamma(3.0, 1.0, 50))
        with pytest.raises(
            UnsupportedModelError,
            match=r"shape of the Gamma likelihood of 'y' "
            r"depends on the coefficient\(s\) \['b'\]",
        ):
            detect_split_problem()


def test_bambi_binomial_with_categorical(bambi_df):
    rng = np.random.default_rng(11)
    df = bambi_df[["x1"]].copy()
    df["grp"] = rng.choice(["a", "b", "c"], size=len(df))
    df["n"] = rng.integers(1, 10, size=len(df))
    df["k"] = rng.binomial(df.n, 0.4)
    bm = bambi_pymc_model(df, "p(k, n) ~ x1 + grp", "binomial")
    p = detect_split_problem(bm.backend.model).problem
    t = only_split(p)
    assert t.family.name == "binomial"
    assert [q.name for q in p.params] == ["Intercept", "x1", "grp"]
    assert p.params[2].shape == (2,)
    # treatment coding (reference "a"), centred like the numeric predictor
    raw = np.column_stack([df.x1, df.grp == "b", df.grp == "c"]).astype(float)
    np.testing.assert_allclose(
        t.A, np.column_stack([np.ones(len(df)), raw - raw.mean(axis=0)]), atol=1e-12
    )
    np.testing.assert_array_equal(t.trials, df.n.to_numpy(float))
    np.testing.assert_array_equal(t.y, df.k.to_numpy(float))


def test_bambi_gaussian(bambi_df):
    bm = bambi_pymc_model(bambi_df, "g ~ x1 + x2", "gaussian")
    pm_model = bm.backend.model
    det = detect_split_problem(pm_model)
    p = det.problem
    assert not p.split_terms and len(p.gaussian_terms) == 1
    g = p.gaussian_terms[0]
    np.testing.assert_allclose(g.A, design(bambi_df), atol=1e-12)
    assert g.sigma is None  # Bambi's sigma is a free variable, left to NUTS
    with pm_model:
        step = SplitGibbs(rho=0.1)
    assert sorted(v.name for v in step.vars) == ["Intercept", "x1", "x2"]


def test_bambi_logistic_runs_in_pm_sample(bambi_df):
    """Short run-check: SplitGibbs as the step of pm.sample on Bambi's model."""
    bm = bambi_pymc_model(bambi_df, "y ~ x1 + x2", "bernoulli")
    with bm.backend.model:
        idata = pm.sample(
            draws=200,
            tune=100,
            chains=2,
            cores=1,
            step=SplitGibbs(rho=0.05),
            progressbar=False,
            random_seed=3,
            compute_convergence_checks=False,
        )
    assert idata.posterior["x1"].shape == (2, 200)
    for nm in ["Intercept", "x1", "x2"]:
        assert np.all(np.isfinite(idata.posterior[nm]))
        assert np.unique(idata.posterior[nm].values).size > 100  # the chain moves
    np.testing.assert_allclose(idata.sample_stats["rho"], 0.05)


def test_bambi_logistic_matches_nuts(bambi_df):
    """Posterior of SplitGibbs (defaults: rho="auto") on Bambi's model vs NUTS.

    With rho="auto" and bias_tol=0.1 the bias of every posterior mean is
    certified below 0.1 posterior sd, so the difference of means must be below
    0.1 sd plus 4 Monte Carlo standard errors (ArviZ mcse of both runs).
    """
    import arviz as az

    bm = bambi_pymc_model(bambi_df, "y ~ x1 + x2", "bernoulli")
    with bm.backend.model:
        idata = pm.sample(
            draws=3000,
            tune=1000,
            chains=2,
            cores=1,
            step=SplitGibbs(),
            progressbar=False,
            random_seed=1,
            compute_convergence_checks=False,
        )
        ref = pm.sample(
            draws=1000,
            tune=500,
            chains=2,
            cores=1,
            progressbar=False,
            random_seed=2,
            compute_convergence_checks=False,
        )
    mcse_sgs, mcse_ref = az.mcse(idata), az.mcse(ref)
    for nm in ["Intercept", "x1", "x2"]:
        sgs_mean = float(idata.posterior[nm].mean())
        nuts_mean = float(ref.posterior[nm].mean())
        sd = float(ref.posterior[nm].std())
        mcse = np.hypot(float(mcse_sgs[nm]), float(mcse_ref[nm]))
        assert mcse < 0.1 * sd, (nm, mcse, sd)  # precise enough to mean something
        assert abs(sgs_mean - nuts_mean) < 0.1 * sd + 4 * mcse, (nm, sgs_mean, nuts_mean, sd, mcse)
        assert abs(float(idata.posterior[nm].std()) / sd - 1) < 0.15, nm


# ------------------------------------------------- the design is the model's own array
def _design_of(Xm, y, offset=0.0, data=False):
    with pm.Model():
        b = pm.Normal("b", 0.0, 2.0, shape=Xm.shape[1])
        X_node = pm.Data("X", Xm) if data else Xm
        pm.Bernoulli("y", logit_p=pm.math.dot(X_node, b) + offset, observed=y)
        prob = detect_split_problem().problem
    (term,) = prob.split_terms
    return term


def test_constant_design_is_not_copied():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 4))
    y = (rng.random(200) < 0.5).astype(float)
    for offset in (0.0, 1.7 + rng.normal(size=200)):
        term = _design_of(X, y, offset)
        # the model's array itself (no second n x d copy), and the offset read off beside it
        assert np.shares_memory(term.A, X)
        np.testing.assert_array_equal(term.A, X)
        np.testing.assert_allclose(term.offset, np.broadcast_to(offset, (200,)), atol=1e-12)


def test_pm_data_design_is_not_copied():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(150, 3))
    y = (rng.random(150) < 0.5).astype(float)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 2.0, shape=3)
        Xd = pm.Data("X", X)
        pm.Bernoulli("y", logit_p=pm.math.dot(Xd, b), observed=y)
        prob = detect_split_problem().problem
    assert np.shares_memory(prob.split_terms[0].A, model["X"].get_value(borrow=True))
    np.testing.assert_array_equal(prob.split_terms[0].A, X)


def test_design_not_in_the_graph_is_built():
    # negative controls: a transformed design (2 X), a Fortran-ordered one and a design
    # with an intercept coefficient are read off as before, into a new array
    rng = np.random.default_rng(5)
    X = rng.normal(size=(120, 3))
    y = (rng.random(120) < 0.5).astype(float)
    term = _design_of(2.0 * X, y)
    np.testing.assert_allclose(term.A, 2.0 * X, rtol=1e-14)
    XF = np.asfortranarray(X)
    term = _design_of(XF, y)
    assert not np.shares_memory(term.A, XF)
    np.testing.assert_array_equal(term.A, X)
    with pm.Model():
        a = pm.Normal("a", 0.0, 2.0)
        b = pm.Normal("b", 0.0, 2.0, shape=3)
        pm.Bernoulli("y", logit_p=a + pm.math.dot(X, b), observed=y)
        prob = detect_split_problem().problem
    np.testing.assert_allclose(prob.split_terms[0].A, np.column_stack([np.ones(120), X]))


def test_shared_design_gives_the_same_draws_as_a_copied_one():
    # the kernel reading the model's array or a built copy of it: identical chains
    rng = np.random.default_rng(6)
    X = rng.normal(size=(300, 3)) / np.sqrt(3)
    y = (rng.random(300) < 0.5).astype(float)
    draws = []
    for Xm in (X, np.asfortranarray(X)):
        with pm.Model():
            b = pm.Normal("b", 0.0, 2.0, shape=3)
            pm.Bernoulli("y", logit_p=pm.math.dot(Xm, b), observed=y)
            step = SplitGibbs()
            idata = pm.sample(
                step=step,
                tune=50,
                draws=50,
                chains=1,
                random_seed=9,
                progressbar=False,
                compute_convergence_checks=False,
            )
        draws.append(idata.posterior["b"].values)
    assert not np.shares_memory(step.kernel.rows.A, X)  # the second (Fortran) run copied
    np.testing.assert_array_equal(draws[0], draws[1])
