"""No silent bias: reused steps, tune=0, one target per run, rho bounds, stale data, improper
posteriors, strict options, honest output (issue: reliability defects).

Each test failed on the code before the fix it pins. The statistical checks compare with
closed forms (a likelihood too flat to inform: the posterior is the prior) or with a run of
the same step, using z-scores against ArviZ's MCSE, and carry a negative control.
"""

from __future__ import annotations

import pickle
import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest

import pymc_sgs
import pymc_sgs.step as step_module

Z_MAX = 4.0


def _sample(model, step, **kwargs):
    kwargs.setdefault("progressbar", False)
    kwargs.setdefault("compute_convergence_checks", False)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pm.sample(step=step, **kwargs)


def _logistic(n=2000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = rng.binomial(1, 1 / (1 + np.exp(-(0.5 + X @ np.array([1.0, -0.5, 0.25])))))
    with pm.Model() as model:
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 2.5, shape=3)
        pm.Bernoulli("y", logit_p=a + X @ b, observed=y)
    return model


def _final_rho(idata):
    return idata.sample_stats["rho"].values[:, -1]


# ------------------------------------------------------------------ a step used again
def test_reused_step_tunes_again_in_worker_processes():
    """A step reused for a parallel run must tune again (it sampled with rho=0.5 untuned)."""
    model = _logistic()
    with model:
        step = pymc_sgs.SplitGibbs(rho="tuned")
        fresh = pymc_sgs.SplitGibbs(rho="tuned")
    _sample(model, step, draws=50, tune=200, chains=1, cores=1, random_seed=1)
    again = _sample(model, step, draws=200, tune=200, chains=2, cores=2, random_seed=2)
    ref = _sample(model, fresh, draws=200, tune=200, chains=2, cores=2, random_seed=2)
    np.testing.assert_array_equal(_final_rho(again), _final_rho(ref))
    assert np.all(_final_rho(again) < 0.3), _final_rho(again)
    # the certificate holds on the reused step's draws, as on a fresh one's
    lw = again.sample_stats["log_weight"].values
    for chain in lw:
        chain = chain[np.isfinite(chain)]
        assert np.sqrt(np.expm1(np.var(chain, ddof=1))) < 0.15


# --------------------------------------------------------------------------- tune=0
def test_tune_zero_uses_the_laplace_rho_and_says_so():
    model = _logistic(n=6000)
    with model:
        tuned = _sample(
            model, pymc_sgs.SplitGibbs(rho="tuned"), draws=1000, tune=500, chains=2, random_seed=3
        )
        # the message names the rho the user asked for
        with pytest.warns(pymc_sgs.SamplerFeedbackWarning, match="tune=0, so rho=.tuned. is"):
            untuned = pm.sample(
                draws=1000,
                tune=0,
                chains=2,
                cores=1,
                random_seed=4,
                step=pymc_sgs.SplitGibbs(rho="tuned"),
                progressbar=False,
                compute_convergence_checks=False,
            )
    # the same deterministic rho as a tuned run, not the starting 0.5
    np.testing.assert_array_equal(_final_rho(untuned), _final_rho(tuned))
    # and the same posterior (both sample the same pi_rho): z-scores against both MCSEs
    for name in ("a", "b"):
        x, y = tuned.posterior[name], untuned.posterior[name]
        se = np.hypot(
            az.mcse(tuned, var_names=[name])[name].values,
            az.mcse(untuned, var_names=[name])[name].values,
        )
        z = (x.mean(("chain", "draw")).values - y.mean(("chain", "draw")).values) / se
        assert np.all(np.abs(z) < Z_MAX), (name, z)


def test_tune_zero_without_a_laplace_approximation_warns_that_rho_is_uncertified():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(200, 2))
    y = X @ np.array([1.0, -1.0]) + rng.standard_t(4, size=200)
    with pm.Model():
        b = pm.Normal("b", 0, 5, shape=2)
        pm.StudentT("y", nu=4, mu=X @ b, sigma=1.0, observed=y)
        # the split model of a Student-t GLM (rho="auto" samples it exactly, unsplit)
        with pytest.warns(pymc_sgs.SamplerFeedbackWarning, match="rho='tuned'.*uncertified"):
            pm.sample(
                draws=20,
                tune=0,
                chains=1,
                random_seed=1,
                step=pymc_sgs.SplitGibbs(rho="tuned"),
                progressbar=False,
                compute_convergence_checks=False,
            )


# ---------------------------------------------------------------- one target per run
@pytest.mark.parametrize("cores", [1, 2])
def test_chains_of_one_run_share_rho_and_schedule(cores):
    model = _logistic(seed=cores)
    with model:
        step = pymc_sgs.SplitGibbs(rho="tuned")
    idata = _sample(model, step, draws=300, tune=400, chains=3, cores=cores, random_seed=7)
    rho = idata.sample_stats["rho"].values
    assert np.all(rho == rho[0, 0]), np.unique(rho)
    swept = idata.sample_stats["swept"].values
    np.testing.assert_array_equal(swept, np.broadcast_to(swept[0], swept.shape))
    assert swept[0].mean() == pytest.approx(0.25)  # sweep_every="auto" thins after tuning


# ----------------------------------------------------------------------- rho's bound
def _flat_likelihood_model():
    """Logistic regression on a design scaled by 1e-12: the data carry no information."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 2)) * 1e-12
    y = rng.binomial(1, 0.5, size=500)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 2.0, shape=2)
        pm.Bernoulli("y", logit_p=X @ b, observed=y)
    return model


@pytest.fixture(scope="module")
def flat_run():
    model = _flat_likelihood_model()
    with model:
        step = pymc_sgs.SplitGibbs()
    return _sample(model, step, draws=1000, tune=500, chains=2, random_seed=1)


def _prior_zscores(idata, sd):
    """z-scores of the posterior mean and sd of ``b`` against N(0, sd^2) (the exact answer)."""
    x = idata.posterior["b"]
    mean = x.mean(("chain", "draw")).values
    s = x.std(("chain", "draw")).values
    mcse_mean = az.mcse(idata, var_names=["b"])["b"].values
    mcse_sd = az.mcse(idata, var_names=["b"], method="sd")["b"].values
    return np.concatenate([mean / mcse_mean, (s - sd) / mcse_sd])


def test_rho_auto_is_bounded_on_a_flat_likelihood(flat_run):
    assert np.all(_final_rho(flat_run) <= step_module.AUTO_RHO_MAX), _final_rho(flat_run)
    z = _prior_zscores(flat_run, 2.0)
    assert np.all(np.abs(z) < Z_MAX), z
    # and ArviZ's ESS is believable: not above the number of draws by more than a few x
    ess = az.ess(flat_run)["b"].values
    assert np.all(ess < 3 * 2000), ess


def test_flat_likelihood_check_detects_a_wrong_target(flat_run):
    # negative control: the same draws against a prior sd 20% off
    assert np.max(np.abs(_prior_zscores(flat_run, 1.6))) > Z_MAX


# ---------------------------------------------------------------- data written in place
def _inplace_cases():
    rng = np.random.default_rng(2)
    n = 80
    X32 = np.asfortranarray(rng.normal(size=(n, 2)).astype(np.float32))
    x1 = rng.normal(size=n)
    off = 0.1 * rng.normal(size=n)
    y = rng.poisson(1.0, size=n)

    def design():
        with pm.Model() as m:
            b = pm.Normal("b", 0, 1, shape=2)
            pm.Poisson("y", mu=pm.math.exp(X32 @ b), observed=y)
        return m, X32

    def scalar_form():
        with pm.Model() as m:
            b0 = pm.Normal("b0", 0, 1)
            b1 = pm.Normal("b1", 0, 1)
            pm.Poisson("y", mu=pm.math.exp(b0 + b1 * x1), observed=y)
        return m, x1

    def offset():
        with pm.Model() as m:
            b0 = pm.Normal("b0", 0, 1)
            pm.Poisson("y", mu=pm.math.exp(b0 + off), observed=y)
        return m, off

    return {"float32-fortran-design": design, "b0+b1*x1": scalar_form, "offset": offset}


@pytest.mark.parametrize("case", list(_inplace_cases()))
def test_data_written_in_place_after_building_the_step_is_refused(case):
    model, array = _inplace_cases()[case]()
    with model:
        step = pymc_sgs.SplitGibbs(rho=0.3)
    _sample(model, step, draws=5, tune=5, chains=1)  # negative control: unchanged data run
    array *= 2.0
    with pytest.raises(ValueError, match="modified in place"):
        _sample(model, step, draws=5, tune=5, chains=1)


# ------------------------------------------------------------------ improper posteriors
def _flat_prior_model(y, X, family="bernoulli", flat_intercept=True):
    with pm.Model() as model:
        a = pm.Flat("a") if flat_intercept else pm.Normal("a", 0, 5)
        b = pm.Flat("b", shape=X.shape[1])
        eta = a + X @ b
        if family == "bernoulli":
            pm.Bernoulli("y", logit_p=eta, observed=y)
        else:
            pm.Poisson("y", mu=pm.math.exp(eta), observed=y)
    return model


def _improper_cases():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 1))
    return {
        "separable": (_flat_prior_model((x[:, 0] > 0).astype(int), x), "separated"),
        "all-zero-logistic": (_flat_prior_model(np.zeros(200, int), x), "separated"),
        "all-zero-poisson": (_flat_prior_model(np.zeros(200, int), x, "poisson"), "separated"),
        "quasi-separable": (
            _flat_prior_model((x[:, 0] >= np.sort(x[:, 0])[100]).astype(int) * (x[:, 0] > -5), x),
            "separated",
        ),
    }


@pytest.mark.parametrize("case", list(_improper_cases()))
def test_improper_posterior_is_refused_at_construction(case):
    model, why = _improper_cases()[case]
    with model, pytest.raises(ValueError, match=f"the posterior is improper.*{why}.*proper prior"):
        pymc_sgs.SplitGibbs()


def test_proper_posteriors_with_flat_priors_are_accepted():
    # negative controls: overlapping classes, positive counts, and separable data whose
    # intercept and slope are bounded by proper priors
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 1))
    y = rng.binomial(1, 1 / (1 + np.exp(-x[:, 0])))
    for model in (
        _flat_prior_model(y, x),
        _flat_prior_model(rng.poisson(2.0, size=200), x, "poisson"),
    ):
        with model:
            pymc_sgs.SplitGibbs()
    with pm.Model():
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 2.5)
        pm.Bernoulli("y", logit_p=a + b * x[:, 0], observed=(x[:, 0] > 0).astype(int))
        pymc_sgs.SplitGibbs()


# --------------------------------------------------------------------- strict options
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            dict(exact="False"),
            r"exact must be True, False or a pymc_sgs.ExactOptions\(...\); "
            "received 'False'",
        ),
        (dict(center="no"), "center must be True or False; received 'no'"),
        (
            dict(shift="True"),
            r"shift must be True, False or a pymc_sgs.ShiftOptions\(...\); "
            "received 'True'",
        ),
        (dict(alpha="-0.5"), r"alpha must be a number in \(-1, 1\); received '-0.5'"),
        (dict(bias_tol="0.1"), r"bias_tol must be a number in \(0, 1\); received '0.1'"),
        (dict(alpha=True), r"alpha must be a number in \(-1, 1\); received True"),
        (dict(rho=1e-200), "rho must be between 1e-10 and 1e\\+10.*received 1e-200"),
        (dict(rho=1e200), "rho must be between 1e-10 and 1e\\+10.*received 1e\\+200"),
    ],
)
def test_options_are_type_checked(kwargs, match):
    with _logistic(n=50), pytest.raises(ValueError, match=match):
        pymc_sgs.SplitGibbs(**kwargs)


def test_step_pickles_with_the_standard_library():
    model = _logistic(n=100)
    with model:
        step = pymc_sgs.SplitGibbs(rho=0.3)
        loaded = pickle.loads(pickle.dumps(step))
    kw = dict(draws=20, tune=20, chains=1, cores=1, random_seed=5)
    a, b = _sample(model, step, **kw), _sample(model, loaded, **kw)
    np.testing.assert_array_equal(a.posterior["b"].values, b.posterior["b"].values)


# ---------------------------------------------------------------------- honest output
def test_log_weights_thinning_records_weights_whatever_the_sweep_stride():
    # tune=101 puts the sweeps (every 4th iteration) off the old "every 4th kept draw" grid
    model = _logistic(n=300)
    with model:
        step = pymc_sgs.SplitGibbs(rho="tuned", log_weights=4, sweep_every=4)
    idata = _sample(model, step, draws=200, tune=101, chains=2, random_seed=2)
    lw = idata.sample_stats["log_weight"].values
    assert np.all(np.isfinite(lw).sum(axis=1) >= 200 // 4 - 1), np.isfinite(lw).sum(axis=1)
    summary = pymc_sgs.psis_summary(idata, warn=False)
    assert np.all(np.isfinite(summary["mcse_mean"]))


def test_psis_summary_reports_mcse_and_lines_up_with_az_summary():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(400, 2))
    y = rng.binomial(1, 1 / (1 + np.exp(-(X @ np.array([1.0, -1.0])))))
    with pm.Model(coords={"pred": ["x1", "x2"]}) as model:
        b = pm.Normal("b", 0, 2.5, dims="pred")
        pm.Bernoulli("y", logit_p=pm.math.dot(X, b), observed=y)
    idata = _sample(
        model,
        pymc_sgs.SplitGibbs(rho="tuned", model=model),
        draws=1000,
        tune=500,
        chains=2,
        random_seed=6,
    )
    summary = pymc_sgs.psis_summary(idata, warn=False)
    assert list(summary.index) == list(az.summary(idata).index) == ["b[x1]", "b[x2]"]
    # the corrected mean's MCSE is at least the draws' own (weights add noise) and of the
    # same order; the corrected and raw means differ by the bias, within a few of them
    raw = az.summary(idata)
    assert np.all(summary["mcse_mean"] >= 0.8 * raw["mcse_mean"]), (summary, raw)
    assert np.all(summary["mcse_mean"] < 5 * raw["mcse_mean"]), (summary, raw)
    assert np.all(summary["mcse_sd"] > 0)


def test_shift_move_window_does_not_grow_after_tuning():
    model = _logistic(n=300)
    with model:
        step = pymc_sgs.SplitGibbs()
    _sample(model, step, draws=300, tune=200, chains=1, cores=1, random_seed=3)
    assert step.shift_move is not None and len(step.shift_move._window) == 0


def test_low_shift_acceptance_warns():
    model = _logistic(n=300)
    with model:
        step = pymc_sgs.SplitGibbs()
    stats = dict(swept=1.0, z_accept=0.9, exact_accept=float("nan"), shift_accept=0.05)
    with pytest.warns(pymc_sgs.SamplerFeedbackWarning, match="shift move is 0.05"):
        for _ in range(step.HEALTH_CHECK_DRAW):
            step._check_health(stats)
    # negative control: a healthy acceptance gives no warning
    step.feedback = step._fresh_feedback()
    with warnings.catch_warnings():
        warnings.simplefilter("error", pymc_sgs.SamplerFeedbackWarning)
        for _ in range(step.HEALTH_CHECK_DRAW):
            step._check_health(dict(stats, shift_accept=0.7))


def test_feedback_warnings_point_at_the_users_line():
    model = _logistic(n=300)
    with model, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pm.sample(
            draws=5,
            tune=30,
            chains=1,
            cores=1,
            random_seed=1,
            progressbar=False,
            step=pymc_sgs.SplitGibbs(rho="tuned"),
            compute_convergence_checks=False,
        )
    ours = [w for w in caught if issubclass(w.category, pymc_sgs.SamplerFeedbackWarning)]
    assert ours, "expected the short-tuning warning"
    assert all(w.filename == __file__ for w in ours), [w.filename for w in ours]


def test_repr_shows_what_is_known_not_starting_values():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(100, 2)), rng.poisson(2, size=100)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        alpha = pm.Exponential("alpha", 1)
        pm.NegativeBinomial("y", mu=pm.math.exp(X @ b), alpha=alpha, observed=y)
        text = repr(pymc_sgs.SplitGibbs(rho="tuned"))
    # the free alpha by its name (its initial value 1 is no property of the model), and rho
    # before any chain has set it
    assert "negativebinomial(log, alpha=alpha)" in text and "rho='auto'" in text, text
    assert "nuisance=['alpha']" in text, text
    with pm.Model():
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Normal("y", mu=X @ b, sigma=1.0, observed=y)
        text = repr(pymc_sgs.SplitGibbs(rho="tuned"))
    assert "rho" not in text, text  # nothing is split
    model = _logistic(n=200)
    with model:
        step = pymc_sgs.SplitGibbs(rho="tuned")
    _sample(model, step, draws=10, tune=150, chains=1, cores=1)
    assert f"rho={float(step.kernel.rho):.4g} (auto)" in repr(step), repr(step)


def test_exact_mode_that_mixes_badly_warns():
    """Acceptance above 0.1 can still leave exact mode nearly stuck: the draws' ESS is checked."""
    model = _logistic(n=200)
    with model:
        step = pymc_sgs.SplitGibbs(rho="tuned", exact=True)
    rng = np.random.default_rng(0)
    stats = dict(swept=1.0, z_accept=0.9, exact_accept=0.3, shift_accept=float("nan"))
    sticky = np.cumsum(rng.normal(scale=0.01, size=(step.HEALTH_CHECK_DRAW, 4)), axis=0)
    with pytest.warns(pymc_sgs.SamplerFeedbackWarning, match="exact mode mixes badly"):
        for theta in sticky:
            step._check_health(stats, theta)
    # negative control: independent draws
    step.feedback = step._fresh_feedback()
    with warnings.catch_warnings():
        warnings.simplefilter("error", pymc_sgs.SamplerFeedbackWarning)
        for theta in rng.normal(size=(step.HEALTH_CHECK_DRAW, 4)):
            step._check_health(stats, theta)
