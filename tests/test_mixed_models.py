"""Mixed models through PyMC and Bambi: what is read, what comes back, what is refused."""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

import pymc_sgs
from pymc_sgs.mixed.adapt import FIRST_REFIT
from pymc_sgs.mixed.read import read_mixed_model
from pymc_sgs.mixed.step import MixedSplitGibbs

N_GROUPS = 12


def grouped_data(seed=0, n=180, family="normal"):
    rng = np.random.default_rng(seed)
    g = rng.integers(0, N_GROUPS, n)
    x = rng.normal(size=n)
    u = rng.normal(0, 0.7, N_GROUPS)
    eta = 0.4 + 0.8 * x + u[g]
    if family == "normal":
        y = eta + rng.normal(0, 0.5, n)
    elif family == "bernoulli":
        y = (rng.uniform(size=n) < 1 / (1 + np.exp(-eta))).astype(int)
    else:
        y = rng.poisson(np.exp(eta))
    return g, x, y


def lmm(form, family="normal", seed=0):
    """The same random-intercept model written the ways users write it in PyMC."""
    g, x, y = grouped_data(seed, family=family)
    with pm.Model() as model:
        b0 = pm.Normal("b0", 0, 5)
        b1 = pm.Normal("b1", 0, 5)
        tau = pm.HalfNormal("tau", 1.0)
        if form == "centred":
            u = pm.Normal("u", 0, tau, shape=N_GROUPS)
            eta = b0 + b1 * x + u[g]
        elif form == "noncentred":
            u_raw = pm.Normal("u_raw", 0, 1, shape=N_GROUPS)
            eta = b0 + b1 * x + (tau * u_raw)[g]
        elif form == "noncentred-indexed":
            # the scale multiplies the indexed offsets: tau * u_raw[g]
            u_raw = pm.Normal("u_raw", 0, 1, shape=N_GROUPS)
            eta = b0 + b1 * x + tau * u_raw[g]
        elif form == "mean":
            # u ~ Normal(m, tau): the hierarchical mean is the intercept
            u = pm.Normal("u", b0, tau, shape=N_GROUPS)
            eta = b1 * x + u[g]
        if family == "normal":
            sigma = pm.HalfNormal("sigma", 1.0)
            pm.Normal("y", eta, sigma, observed=y)
        elif family == "bernoulli":
            pm.Bernoulli("y", logit_p=eta, observed=y)
        else:
            pm.Poisson("y", pm.math.exp(eta), observed=y)
    return model


@pytest.mark.parametrize("form", ["centred", "noncentred", "noncentred-indexed", "mean"])
def test_the_pymc_forms_read_as_the_same_problem(form):
    ref = read_mixed_model(lmm("centred")).problem
    got = read_mixed_model(lmm(form)).problem
    assert got.dim == ref.dim and got.hyper_size == ref.hyper_size
    (t_ref,), (t_got,) = ref.terms, got.terms
    np.testing.assert_array_equal(t_got.index, t_ref.index)
    np.testing.assert_allclose(t_got.values, t_ref.values)
    # the hierarchical mean's column is the intercept's: 1 for every row
    np.testing.assert_allclose(np.sort(got.X, axis=1), np.sort(ref.X, axis=1))


def test_scale_times_indexed_offsets_samples_as_the_indexed_product():
    """``tau * u_raw[g]`` is ``(tau * u_raw)[g]``: the same draws, the same variables."""
    draws = {}
    for form in ("noncentred", "noncentred-indexed"):
        with lmm(form, family="bernoulli"):
            step = pymc_sgs.SplitGibbs()
            assert isinstance(step, MixedSplitGibbs)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                idata = pm.sample(
                    step=step,
                    draws=40,
                    tune=60,
                    chains=1,
                    random_seed=8,
                    progressbar=False,
                    compute_convergence_checks=False,
                )
        draws[form] = idata.posterior
    for v in ("u_raw", "tau", "b0", "b1"):
        np.testing.assert_array_equal(
            draws["noncentred"][v].values, draws["noncentred-indexed"][v].values
        )


def test_the_layout_maps_back_to_each_form():
    model = lmm("noncentred")
    mixed = read_mixed_model(model)
    p = mixed.problem
    rng = np.random.default_rng(1)
    h = rng.normal(size=p.hyper_size)
    coef = rng.normal(size=p.dim)
    _, sds, _ = p.hyper(h)
    point = mixed.layout.to_point(h, coef, sds)
    # non-centred offsets are the group effects divided by their scale
    u = coef[p.p :]
    np.testing.assert_allclose(point["u_raw"], u / sds[p.terms[0].scale])
    h2, coef2 = mixed.layout.from_point(point, p.hyper)
    np.testing.assert_allclose(h2, h)
    np.testing.assert_allclose(coef2, coef)
    model = lmm("mean")
    mixed = read_mixed_model(model)
    point = mixed.layout.to_point(h, coef, sds)
    # u = m + v, m the intercept b0
    b0 = point["b0"]
    np.testing.assert_allclose(point["u"], b0 + coef[mixed.problem.p :])


@pytest.mark.parametrize("family", ["normal", "bernoulli", "poisson"])
def test_splitgibbs_builds_the_mixed_step_and_samples(family):
    with lmm("noncentred", family=family):
        step = pymc_sgs.SplitGibbs()
        assert isinstance(step, MixedSplitGibbs)
        assert isinstance(step, pymc_sgs.SplitGibbs)
        idata = pm.sample(
            step=step,
            draws=300,
            tune=300,
            chains=2,
            cores=1,
            random_seed=3,
            progressbar=False,
            compute_convergence_checks=False,
        )
    post = idata.posterior
    assert set(post.data_vars) >= {"b0", "b1", "u_raw", "tau"}
    assert np.all(post["tau"].values > 0)
    stats = idata.sample_stats
    assert float(stats["hyper_accept"].mean()) > 0.1
    if family != "normal":
        assert float(stats["coef_accept"].mean()) > 0.2


def test_same_seed_same_draws_for_any_cores():
    draws = []
    for cores in (1, 2):
        with lmm("centred", family="bernoulli"):
            idata = pm.sample(
                step=pymc_sgs.SplitGibbs(),
                draws=60,
                # past a refit of the proposal shape, which each chain's state carries
                tune=FIRST_REFIT + 10,
                chains=2,
                cores=cores,
                random_seed=11,
                progressbar=False,
                compute_convergence_checks=False,
            )
        draws.append(idata.posterior["tau"].values)
    np.testing.assert_array_equal(draws[0], draws[1])


def test_lmm_chains_keep_the_moves_their_tuning_chose(monkeypatch):
    """A linear mixed model's chain drops the random-walk h-move after tuning when its
    independence moves were accepted often since the last refit: one move per iteration
    when a factorization is expensive, else two; otherwise it keeps both kinds. Each chain
    decides from its own tuning (the decision is part of the chain's state)."""
    import pymc_sgs.mixed.step as mixed_step

    def sample(tune=2 * FIRST_REFIT + mixed_step.INDEP_WINDOW, chains=2, **patch):
        for name, value in patch.items():
            monkeypatch.setattr(mixed_step, name, value)
        with lmm("centred"):
            step = pymc_sgs.SplitGibbs()
            idata = pm.sample(
                step=step,
                draws=20,
                tune=tune,
                chains=chains,
                cores=1,
                random_seed=5,
                progressbar=False,
                compute_convergence_checks=False,
                discard_tuned_samples=False,
            )
        return step, idata

    step, idata = sample()
    assert step.hyper_moves == (2, False)  # the last chain's; a cheap 15 x 15 factorization
    assert float(idata.sample_stats["hyper_accept"].mean()) >= 0.5
    step, _ = sample(EXPENSIVE_FACTOR=0.0)
    assert step.hyper_moves == (1, False)
    step, _ = sample(EXPENSIVE_FACTOR=1e7, INDEP_ONLY_ACCEPT=1.01)
    assert step.hyper_moves == (2, True)
    # decided again at the refits from EARLY_MOVES_DRAW on, for the rest of tuning: the
    # iteration's h-moves (sampler stat) fall to one there
    early = mixed_step.EARLY_MOVES_DRAW
    _, idata = sample(early + 30, chains=1, EXPENSIVE_FACTOR=0.0, INDEP_ONLY_ACCEPT=0.5)
    moves = idata.warmup_sample_stats["hyper_moves"].values[0]
    assert np.all(moves[:early] == 2) and np.all(moves[early:] == 1)
    assert np.all(idata.sample_stats["hyper_moves"].values == 1)
    # too few tuning draws since the last refit to judge: both kinds kept
    step, _ = sample(FIRST_REFIT + 5, chains=1)
    assert step.hyper_moves == (2, True)


def test_crossed_factors_are_read_as_two_factors():
    rng = np.random.default_rng(5)
    n = 300
    g1, g2 = rng.integers(0, 20, n), rng.integers(0, 8, n)
    y = rng.normal(size=n)
    with pm.Model() as model:
        s1, s2 = pm.HalfNormal("s1", 1), pm.HalfNormal("s2", 1)
        u1 = pm.Normal("u1", 0, s1, shape=20)
        u2 = pm.Normal("u2", 0, s2, shape=8)
        b = pm.Normal("b", 0, 3)
        pm.Normal("y", b + u1[g1] + u2[g2], pm.HalfNormal("sigma", 1), observed=y)
    p = read_mixed_model(model).problem
    assert {t.factor for t in p.terms} == {"factor0", "factor1"}
    assert p.hyper_size == 3


def errors_for(build):
    with pm.Model() as model:
        build()
    with pytest.raises(ValueError) as err:
        with model:
            pymc_sgs.SplitGibbs()
    return str(err.value)


def test_noncentred_correlated_effects_are_sampled_by_the_mixed_model_step():
    """Correlated effects written non-centred as in PyMC's examples, z @ chol.T, go to the
    mixed-model step with the centred ones (test_mixed_correlated.py checks the reading and
    the posterior against references); the offsets z and the LKJ factor are its variables."""
    g, x, y = grouped_data()
    with pm.Model():
        chol, _, _ = pm.LKJCholeskyCov(
            "chol", n=2, eta=2.0, sd_dist=pm.Exponential.dist(1.0, shape=2)
        )
        z = pm.Normal("z", 0, 1, shape=(N_GROUPS, 2))
        u = z @ chol.T
        b0 = pm.Normal("b0", 0, 5)
        eta = b0 + u[g, 0] + u[g, 1] * x
        pm.Normal("y", eta, 1.0, observed=y)
        step = pymc_sgs.SplitGibbs()
    assert isinstance(step, MixedSplitGibbs)
    assert {v.name for v in step.vars} == {"z", "b0", "chol_cholesky-cov-packed__"}


def test_free_dispersion_moves_with_the_mixed_model():
    """A NegativeBinomial alpha joins the hyperparameters of the mixed-model step (its
    sampling is checked against quadrature in test_mixed_dispersion.py); with a fixed rho
    the GLM path samples it."""
    g, x, y = grouped_data(family="poisson")
    with pm.Model():
        tau = pm.HalfNormal("tau", 1)
        u = pm.Normal("u", 0, tau, shape=N_GROUPS)
        alpha = pm.Exponential("alpha", 1)
        mu = pm.math.exp(pm.Normal("b0", 0, 3) + u[g])
        pm.NegativeBinomial("y", mu=mu, alpha=alpha, observed=y)
        step = pymc_sgs.SplitGibbs()
        assert isinstance(step, MixedSplitGibbs)
        assert "alpha_log__" in {v.name for v in step.vars}
        assert step.problem.hyper_size == 2
        # a fixed rho: the GLM path's split model samples alpha (the scale by NUTS), as before
        glm = pymc_sgs.SplitGibbs(rho=0.5)
        assert not isinstance(glm, MixedSplitGibbs)
        assert "alpha_log__" in {v.name for v in glm.vars}
        with pytest.raises(ValueError, match="rho='auto'"):
            MixedSplitGibbs(rho=0.5)


@pytest.mark.parametrize(
    ("family", "link", "shown"),
    [
        ("bernoulli", "probit", "bernoulli(probit)"),
        ("exponential", "log", "exponential(log)"),
        ("negativebinomial", None, "negativebinomial(log, alpha sampled)"),
    ],
)
def test_bambi_default_group_terms_take_the_mixed_step_for_every_family(family, link, shown):
    """Bambi's default (non-centred) ``(1|g)`` of the families not sampled elsewhere in
    these tests builds the mixed-model step, with the likelihood and link the model has."""
    bmb = pytest.importorskip("bambi")
    import pandas as pd

    g, x, y = grouped_data(family="bernoulli" if family == "bernoulli" else "poisson")
    if family == "exponential":
        y = y + 0.5  # positive
    df = pd.DataFrame({"y": y, "x": x, "g": pd.Categorical(g)})
    bm = bmb.Model("y ~ x + (1|g)", df, family=family, **({"link": link} if link else {}))
    bm.build()
    with bm.backend.model:
        step = pymc_sgs.SplitGibbs()
    assert isinstance(step, MixedSplitGibbs)
    assert f"mixed model: {shown}" in repr(step)
    assert "terms=[1|g_offset[12]]" in repr(step)


def test_options_that_do_not_apply_are_refused():
    with lmm("centred"):
        with pytest.raises(ValueError, match="exact=True is not available"):
            pymc_sgs.SplitGibbs(exact=True)
        with pytest.raises(ValueError, match="vars must be None or every variable"):
            pymc_sgs.SplitGibbs(vars=["b1", "tau", "sigma"])
        with pytest.raises(ValueError, match="log_weights"):
            pymc_sgs.SplitGibbs(log_weights=3)


def test_a_fixed_rho_runs_the_split_kernel_with_weights():
    with lmm("centred", family="bernoulli"):
        step = pymc_sgs.SplitGibbs(rho=0.5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pm.sample(
                step=step,
                draws=100,
                tune=100,
                chains=1,
                random_seed=2,
                progressbar=False,
                compute_convergence_checks=False,
            )
    stats = idata.sample_stats
    assert np.all(stats["rho"].values == 0.5)
    assert np.all(np.isfinite(stats["log_weight"].values))
    assert np.all(stats["z_proposals"].values >= 1.0)


def test_vars_without_the_scales_keep_the_glm_path():
    with lmm("centred", family="bernoulli"):
        step = pymc_sgs.SplitGibbs(vars=["b0", "b1", "u"])
    assert not isinstance(step, MixedSplitGibbs)


def test_fixed_scale_group_terms_stay_with_the_glm_path():
    g, x, y = grouped_data()
    with pm.Model():
        u = pm.Normal("u", 0, 1.0, shape=N_GROUPS)
        pm.Normal("y", pm.Normal("b0", 0, 5) + u[g], 1.0, observed=y)
        step = pymc_sgs.SplitGibbs()
    assert not isinstance(step, MixedSplitGibbs)


def test_rarely_accepted_moves_are_reported():
    from pymc_sgs.step_base import SamplerFeedbackWarning

    with lmm("centred", family="bernoulli"):
        step = pymc_sgs.SplitGibbs()
    step.tune = False
    with pytest.warns(SamplerFeedbackWarning, match="coef_accept = 0.010"):
        for _ in range(step.HEALTH_CHECK_DRAW):
            step._check_acceptance(0.5, 0.01)
    # healthy rates: no warning
    step._reset_chain_state()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(step.HEALTH_CHECK_DRAW):
            step._check_acceptance(0.4, 0.6)
