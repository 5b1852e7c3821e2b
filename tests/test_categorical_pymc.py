"""Multinomial logistic regression through PyMC: pm.Categorical with a softmax of X @ B.

Detection is checked against the design it must find; the sampler against a NUTS
run on the same model (MCSE-scaled tolerances plus the rho-bias bound certified by
rho='auto'), with the softmax reference class put in the wrong place as the negative
control; unsupported graphs and options must raise clear errors.
"""

from __future__ import annotations

import time
import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

import pymc_sgs
from pymc_sgs.detect import UnsupportedModelError
from pymc_sgs.detect_multinomial import detect_categorical
from pymc_sgs.step_multinomial import CategoricalSplitGibbs


def _data(n=150, p=2, K=3, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    B = np.zeros((p, K))
    B[:, 1:] = rng.normal(size=(p, K - 1))
    eta = X @ B + np.r_[0.0, 0.3 * np.ones(K - 1)]
    pr = np.exp(eta - eta.max(1, keepdims=True))
    pr /= pr.sum(1, keepdims=True)
    y = np.array([rng.choice(K, p=q) for q in pr])
    return X, y


def _reference_model(X, y, K=3, reference="first", logit_p=False):
    """B (p, K-1) and b (K-1,) with a zero reference column; ``reference`` says where."""
    p = X.shape[1]
    with pm.Model() as model:
        B = pm.Normal("B", 0.0, 1.5, shape=(p, K - 1))
        b = pm.Normal("b", 0.0, 2.0, shape=K - 1)
        zc, zi = pt.zeros((p, 1)), pt.zeros(1)
        if reference == "first":
            Bf, bf = pt.concatenate([zc, B], axis=1), pt.concatenate([zi, b])
        else:
            Bf, bf = pt.concatenate([B, zc], axis=1), pt.concatenate([b, zi])
        eta = X @ Bf + bf
        if logit_p:
            pm.Categorical("y", logit_p=eta, observed=y)
        else:
            pm.Categorical("y", p=pm.math.softmax(eta, axis=-1), observed=y)
    return model


# ------------------------------------------------------------------------------ detection
def test_detects_reference_column_intercepts_and_logit_p():
    X, y = _data(n=12)
    det = detect_categorical(_reference_model(X, y))
    n, p = X.shape
    assert det.n_classes == 3 and det.value_var_names == ["B", "b"] and det.d == 6
    A = det.A.toarray().reshape(n, 2, 6)
    # z_ik = x_i^T B[:, k-1] + b[k-1]: B is row-major (p, K-1), then b
    for k in range(2):
        expect = np.zeros((n, 6))
        expect[:, k:4:2] = X
        expect[:, 4 + k] = 1.0
        np.testing.assert_allclose(A[:, k], expect)
    np.testing.assert_array_equal(det.y, y)
    np.testing.assert_allclose(np.diag(det.prior_precision), [1 / 1.5**2] * 4 + [0.25] * 2)
    det2 = detect_categorical(_reference_model(X, y, logit_p=True))
    np.testing.assert_allclose(det2.A.toarray(), det.A.toarray())


def test_detects_full_coefficient_matrix_as_differences():
    X, y = _data(n=10)
    with pm.Model() as model:
        B = pm.Normal("B", 0.0, 1.0, shape=(2, 3))
        pm.Categorical("y", p=pm.math.softmax(X @ B, axis=-1), observed=y)
    det = detect_categorical(model)
    A = det.A.toarray().reshape(10, 2, 6)
    for k in (1, 2):
        expect = np.zeros((10, 2, 3))
        expect[:, :, k] = X
        expect[:, :, 0] = -X
        np.testing.assert_allclose(A[:, k - 1], expect.reshape(10, 6))


# ------------------------------------------------------------------------------ sampling
def _agreement(draws, ref, slack_sd):
    """Largest |mean diff| and |sd diff| over the coefficients, in units of their tolerance."""
    worst = 0.0
    for name in ("B", "b"):
        a = draws.posterior[name].values
        r = ref.posterior[name].values
        a, r = a.reshape(*a.shape[:2], -1), r.reshape(*r.shape[:2], -1)
        for j in range(a.shape[-1]):
            sa, sr = az.convert_to_dataset(a[..., j]), az.convert_to_dataset(r[..., j])
            mcse_m = np.hypot(float(az.mcse(sa)["x"]), float(az.mcse(sr)["x"]))
            mcse_s = np.hypot(
                float(az.mcse(sa, method="sd")["x"]), float(az.mcse(sr, method="sd")["x"])
            )
            sd = r[..., j].std()
            dm = abs(a[..., j].mean() - r[..., j].mean()) / (4 * mcse_m + slack_sd * sd)
            ds = abs(a[..., j].std() - sd) / (4 * mcse_s + slack_sd * sd)
            worst = max(worst, dm, ds)
    return worst


@pytest.fixture(scope="module")
def sgs_and_nuts():
    X, y = _data()
    model = _reference_model(X, y)
    kw = dict(chains=2, cores=1, random_seed=7, progressbar=False, compute_convergence_checks=False)
    with model:
        t0 = time.time()
        sgs = pm.sample(step=pymc_sgs.SplitGibbs(rho="tuned"), draws=1500, tune=600, **kw)
        t_sgs = time.time() - t0
        # the default: no split (independence MH from the Laplace approximation)
        direct = pm.sample(step=pymc_sgs.SplitGibbs(), draws=1500, tune=600, **kw)
        t0 = time.time()
        nuts = pm.sample(draws=1000, tune=500, **kw)
        t_nuts = time.time() - t0
    wrong = _reference_model(X, y, reference="last")
    with wrong:
        nuts_wrong = pm.sample(draws=1000, tune=500, **kw)
    print(f"SplitGibbs {t_sgs:.1f} s, NUTS {t_nuts:.1f} s")
    return sgs, nuts, nuts_wrong, t_sgs, direct


def test_splitgibbs_matches_nuts_on_multinomial_logit(sgs_and_nuts):
    sgs, nuts, _, _, _ = sgs_and_nuts
    rho = sgs.sample_stats["rho"].values
    # rho='tuned' certifies a bias below bias_tol = 0.1 posterior sd of any expectation
    # tuned per chain, then frozen
    assert np.all(rho == rho[:, :1]) and np.all((0.02 < rho) & (rho < 0.5))
    worst = _agreement(sgs, nuts, slack_sd=0.1)
    print(f"worst |diff| / tolerance vs NUTS: {worst:.3f}")
    assert worst < 1.0


def test_wrong_reference_class_is_detected_by_the_same_check(sgs_and_nuts):
    # negative control: NUTS on the model whose zero column is the last class, not the first
    sgs, _, nuts_wrong, _, direct = sgs_and_nuts
    assert _agreement(sgs, nuts_wrong, slack_sd=0.1) > 1.0
    assert _agreement(direct, nuts_wrong, slack_sd=0.0) > 1.0


def test_default_without_split_matches_nuts(sgs_and_nuts):
    # exact draws: no rho-bias slack in the tolerance
    _, nuts, _, _, direct = sgs_and_nuts
    worst = _agreement(direct, nuts, slack_sd=0.0)
    assert worst < 1.0, worst
    ss = direct.sample_stats
    assert np.all(ss["rho"].values == 0.0) and np.all(ss["log_weight"].values == 0.0)
    assert np.all(np.isnan(ss["z_accept"].values)) and np.all(ss["swept"].values == 0.0)
    acc = ss["shift_accept"].values
    assert 0.5 < float(acc.mean()) <= 1.0
    moves = ss["shift_moves"].values
    assert np.all(moves == moves[:, :1]) and np.all((moves >= 1) & (moves <= 3))


def test_categorical_sampler_stats(sgs_and_nuts):
    sgs = sgs_and_nuts[0]  # rho="tuned": the split model
    ss = sgs.sample_stats
    for key in ("rho", "z_proposals", "z_accept", "log_weight", "exact_accept"):
        assert key in ss, key
    assert float(ss["z_accept"].mean()) > 0.9  # over-relaxed MH around the Laplace approximation
    assert np.all(np.isfinite(ss["log_weight"].values))
    assert np.all(np.isnan(ss["exact_accept"].values))


def test_exact_z_draws_report_proposals_and_same_seed_same_draws():
    X, y = _data(n=60)
    model = _reference_model(X, y)
    kw = dict(
        draws=40,
        tune=10,
        chains=2,
        random_seed=11,
        progressbar=False,
        compute_convergence_checks=False,
    )
    with model:
        runs = [
            pm.sample(step=pymc_sgs.SplitGibbs(rho=0.3, alpha=0.0), cores=c, **kw) for c in (1, 2)
        ]
        # one step object reused: every pm.sample call starts its chains afresh (set_rng)
        step = pymc_sgs.SplitGibbs(rho=0.3, alpha=0.0)
        runs += [pm.sample(step=step, cores=1, **kw) for _ in range(2)]
    for r in runs[1:]:
        np.testing.assert_array_equal(r.posterior["B"].values, runs[0].posterior["B"].values)
    props = runs[0].sample_stats["z_proposals"].values
    # Lemma 31: at most (1 + rho^2 / 2)^((K-1)/2) proposals per z_i on average
    assert np.all(props >= 1.0) and props.mean() < (1 + 0.3**2 / 2) ** 1.0 + 0.05
    assert not np.array_equal(runs[0].posterior["B"].values[0], runs[0].posterior["B"].values[1])


def test_exact_mode_corrects_the_rho_bias():
    # at rho = 1 the split model's logits are attenuated by about sqrt(1 + pi / 8) (probit
    # approximation), a bias of several MCSE; exact=True removes it, plain SGS does not
    X, y = _data(n=150)
    kw = dict(
        draws=800,
        tune=300,
        chains=2,
        cores=1,
        random_seed=13,
        progressbar=False,
        compute_convergence_checks=False,
    )
    with _reference_model(X, y):
        exact = pm.sample(step=pymc_sgs.SplitGibbs(rho=1.0, exact=True, exact_sweeps=2), **kw)
        plain = pm.sample(step=pymc_sgs.SplitGibbs(rho=1.0, log_weights=False), **kw)
        nuts = pm.sample(
            draws=1000,
            tune=500,
            chains=2,
            cores=1,
            random_seed=13,
            progressbar=False,
            compute_convergence_checks=False,
        )
    acc = exact.sample_stats["exact_accept"].values
    assert np.all(np.isfinite(acc)) and 0.1 < acc.mean() < 1.0
    assert np.all(np.isnan(plain.sample_stats["exact_accept"].values))
    worst_exact = _agreement(exact, nuts, slack_sd=0.02)
    worst_plain = _agreement(plain, nuts, slack_sd=0.02)
    print(f"worst |diff| / tolerance at rho = 1: exact {worst_exact:.2f}, plain {worst_plain:.2f}")
    assert worst_exact < 1.0
    assert worst_plain > 1.0  # negative control: the same check on pi_rho fails


def test_splitgibbs_builds_the_categorical_step():
    X, y = _data(n=20)
    with _reference_model(X, y):
        step = pymc_sgs.SplitGibbs(rho=0.3)
    assert isinstance(step, CategoricalSplitGibbs) and isinstance(step, pymc_sgs.SplitGibbs)
    assert "categorical='y'" in repr(step) and "K=3" in repr(step)


# ------------------------------------------------------------------------------ errors
def _model_with(prior="normal", axis=-1, eta_fn=None, p_fn=None, n=20):
    X, y = _data(n=n)
    with pm.Model() as model:
        if prior == "normal":
            B = pm.Normal("B", 0.0, 1.0, shape=(2, 2))
        elif prior == "studentt":
            B = pm.StudentT("B", nu=3, mu=0.0, sigma=1.0, shape=(2, 2))
        elif prior == "hierarchical":
            tau = pm.HalfNormal("tau", 1.0)
            B = pm.Normal("B", 0.0, tau, shape=(2, 2))
        Bf = pt.concatenate([pt.zeros((2, 1)), B], axis=1)
        eta = X @ Bf if eta_fn is None else eta_fn(X, Bf)
        p = pm.math.softmax(eta, axis=axis) if p_fn is None else p_fn(eta)
        pm.Categorical("y", p=p, observed=y)
    return model


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(prior="studentt"), "StudentT prior.*Normal, MvNormal or Flat"),
        (dict(prior="hierarchical"), "depends on the free variable.*tau"),
        (dict(axis=0), "softmax runs over axis 0.*last axis"),
        (
            dict(p_fn=lambda e: pt.exp(e) / pt.exp(e).sum(axis=-1, keepdims=True)),
            "not a softmax of a linear predictor",
        ),
        (dict(eta_fn=lambda X, B: X @ (B**3)), "not affine in the coefficients"),
        (dict(p_fn=lambda e: 0.5 * pm.math.softmax(e, axis=-1) + 0.5 / 3), "not equal to softmax"),
    ],
)
def test_unsupported_graphs_raise_clear_errors(kwargs, match):
    with _model_with(**kwargs):
        with pytest.raises(UnsupportedModelError, match=match):
            pymc_sgs.SplitGibbs(rho=0.3)


def test_full_matrix_with_flat_prior_is_improper():
    X, y = _data(n=20)
    with pm.Model():
        B = pm.Flat("B", shape=(2, 3))
        pm.Categorical("y", p=pm.math.softmax(X @ B, axis=-1), observed=y)
        with pytest.raises(ValueError, match="improper.*reference class"):
            pymc_sgs.SplitGibbs(rho=0.3)


def test_other_likelihood_on_the_coefficients_is_rejected():
    X, y = _data(n=20)
    with pm.Model():
        B = pm.Normal("B", 0.0, 1.0, shape=(2, 2))
        Bf = pt.concatenate([pt.zeros((2, 1)), B], axis=1)
        pm.Categorical("y", p=pm.math.softmax(X @ Bf, axis=-1), observed=y)
        pm.Normal("w", mu=B.sum(), sigma=1.0, observed=0.3)
        with pytest.raises(UnsupportedModelError, match="'w' depends on the softmax coefficients"):
            pymc_sgs.SplitGibbs(rho=0.3)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(exact=True, log_weights=3), "exact=True needs the importance weight of every"),
        (dict(split="shards", n_shards=2), "split='shards' is not available"),
        (dict(theta_solver="cg"), "theta_solver='cg' is not available"),
        (dict(dtype="float32"), "dtype='float32' is not available"),
        (dict(center=True), "center=True is not available"),
        (dict(backend=pymc_sgs.LocalBackend(n_shards=2)), "backend=.* is not available"),
        (dict(rho=np.full(20, 0.3)), "rho must be 'auto' or a scalar"),
        (dict(rho=-1.0), "rho"),
        (dict(alpha=1.5), "alpha"),
        (dict(rho="tuned", log_weights=False), "log_weights=False is incompatible"),
    ],
)
def test_unsupported_options_raise_at_construction(kwargs, match):
    with _model_with():
        with pytest.raises(ValueError, match=match):
            pymc_sgs.SplitGibbs(**kwargs)


def test_observations_outside_the_classes_are_rejected():
    X, _ = _data(n=20)
    y = np.zeros(20, dtype=int)
    y[3] = 3
    with pm.Model():
        B = pm.Normal("B", 0.0, 1.0, shape=(2, 2))
        Bf = pt.concatenate([pt.zeros((2, 1)), B], axis=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pm.Categorical("y", p=pm.math.softmax(X @ Bf, axis=-1), observed=y)
        with pytest.raises(ValueError, match=r"integers in 0..2"):
            pymc_sgs.SplitGibbs(rho=0.3)


@pytest.mark.slow
def test_full_coefficient_matrix_matches_nuts():
    # B (p, K) without a reference column: softmax ignores one constant per row of X, the
    # prior alone controls that direction, in pi as in theta | z
    X, y = _data(n=120, seed=4)
    with pm.Model() as model:
        B = pm.Normal("B", 0.0, 1.0, shape=(2, 3))
        b = pm.Normal("b", 0.0, 1.0, shape=3)
        pm.Categorical("y", logit_p=X @ B + b, observed=y)
    kw = dict(chains=2, cores=1, random_seed=5, progressbar=False, compute_convergence_checks=False)
    with model:
        sgs = pm.sample(step=pymc_sgs.SplitGibbs(), draws=3000, tune=600, **kw)
        nuts = pm.sample(draws=1000, tune=500, **kw)
    assert _agreement(sgs, nuts, slack_sd=0.1) < 1.0
    # the non-identified direction: the mean over classes of each row of B follows the prior
    # sd / sqrt(3), which the data cannot narrow
    row_mean = sgs.posterior["B"].values.mean(-1)
    np.testing.assert_allclose(row_mean.std(axis=(0, 1)), 1 / np.sqrt(3), rtol=0.15)


def test_weights_with_too_many_classes_raise_at_construction():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(30, 2)), rng.integers(0, 9, 30)
    with pm.Model():
        B = pm.Normal("B", 0.0, 1.0, shape=(2, 9))
        pm.Categorical("y", logit_p=X @ B, observed=y)
        with pytest.raises(ValueError, match="at most 7 classes.*log_weights=False"):
            pymc_sgs.SplitGibbs(rho="tuned")
        # the default makes no split here and needs no weights
        assert pymc_sgs.SplitGibbs().direct
        step = pymc_sgs.SplitGibbs(rho=0.3, log_weights=False)
        assert step.detected.n_classes == 9


def test_vars_must_be_the_softmax_coefficients():
    X, y = _data(n=20)
    with _reference_model(X, y) as model:
        with pytest.raises(UnsupportedModelError, match=r"depend on \['b'\].*vars"):
            pymc_sgs.SplitGibbs([model["B"]], rho=0.3)
        step = pymc_sgs.SplitGibbs(["B", "b"], rho=0.3)
        assert [v.name for v in step.vars] == ["B", "b"]


def test_data_container_and_set_data_check():
    X, y = _data(n=30)
    with pm.Model():
        Xd = pm.Data("X", X)
        B = pm.Normal("B", 0.0, 1.0, shape=(2, 2))
        Bf = pt.concatenate([pt.zeros((2, 1)), B], axis=1)
        pm.Categorical("y", p=pm.math.softmax(Xd @ Bf, axis=-1), observed=y)
        step = pymc_sgs.SplitGibbs(rho=0.3)
        np.testing.assert_allclose(step.detected.A.toarray()[0], np.r_[X[0, 0], 0, X[0, 1], 0])
        pm.set_data({"X": X + 1.0})
        with pytest.raises(ValueError, match="changed \\(pm.set_data\\)"):
            pm.sample(step=step, draws=5, tune=5, chains=1, progressbar=False)


def test_laplace_start_objective_and_init_option():
    X, y = _data(n=60)
    with _reference_model(X, y):
        step = pymc_sgs.SplitGibbs(rho=0.3)
        with pytest.raises(ValueError, match="init must be 'laplace' or 'point'"):
            pymc_sgs.SplitGibbs(rho=0.3, init="map")
        assert pymc_sgs.SplitGibbs(rho=0.3, init="point").init == "point"
    k = step.kernel
    theta = np.linspace(-0.5, 0.5, k.d)
    f, g, H = k.neg_log_posterior(theta)
    eps = 1e-6
    E = np.eye(k.d) * eps
    fd_g = [
        (k.neg_log_posterior(theta + e, False) - k.neg_log_posterior(theta - e, False)) / (2 * eps)
        for e in E
    ]
    fd_H = [
        (k.neg_log_posterior(theta + e)[1] - k.neg_log_posterior(theta - e)[1]) / (2 * eps)
        for e in E
    ]
    np.testing.assert_allclose(g, fd_g, atol=1e-6)
    np.testing.assert_allclose(H, fd_H, atol=1e-6)
    # starts are draws from N(theta*, H^-1): their spread is the Laplace sd
    starts = np.array(
        [k.laplace_start(np.zeros(k.d), np.random.default_rng(s)) for s in range(200)]
    )
    _, g_mean, H_mean = k.neg_log_posterior(starts.mean(0))
    np.testing.assert_allclose(starts.std(0), np.sqrt(np.diag(np.linalg.inv(H_mean))), rtol=0.2)
    # their mean is the mode up to Monte Carlo error: |H^-1/2 grad| ~ sqrt(d / 200)
    whitened = np.linalg.solve(np.linalg.cholesky(H_mean), g_mean)
    assert np.linalg.norm(whitened) < 4 * np.sqrt(k.d / len(starts))
