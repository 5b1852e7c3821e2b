"""Free dispersion and shape parameters in GLMMs (NegativeBinomial alpha, Gamma shape,
Student-t sigma and nu, not log-concave: the Laplace proposal clips its curvature at 0).

* Read from PyMC: a fixed parameter keeps its value (it was read as the family's default
  before), a free one joins the hyperparameters ``h``.
* The exact GLMM kernel on a two-level random intercept with the parameter free: the chain's
  means of ``sigma``, the parameter and ``u`` against quadrature of the exact posterior,
  within 4 MCSE. Negative control: the same kernel without the part of the log-likelihood
  that depends on the parameter alone (the potential's constant) targets another posterior,
  and the same check rejects it.
* The Student-t's scale-mixture kernel (what the step samples a Student-t mixed model
  with), ``sigma`` free and then ``nu`` free, against the same quadrature. Negative
  control: row precisions drawn without the residuals, which gives outliers the weight a
  normal likelihood would. The slice updates' shortcut density (without the coefficients'
  prior, where the sliced coordinates leave the group sds alone) differs from the full one
  and from PyMC's by a constant; the restricted proposal and slice directions follow the
  proposal when tuning changes it.
* Bambi's Gamma family (``sigma = mu / alpha**0.5``: the shape is ``alpha`` once
  simplified) is read with ``alpha`` as the free shape; a shape that does depend on the
  coefficients is refused.
* What is refused: a per-row parameter; the mixed-model step with a fixed ``rho``
  (``SplitGibbs(rho=...)`` sends such models to the GLM path: test_mixed_models.py).
"""

from __future__ import annotations

import arviz as az
import numpy as np
import pymc as pm
import pytest
import scipy.special

import pymc_sgs
from pymc_sgs.graph import UnsupportedModelError
from pymc_sgs.mixed.adapt import split_of, split_scales
from pymc_sgs.mixed.family_slice import slice_update
from pymc_sgs.mixed.joint import LaplaceJointKernel
from pymc_sgs.mixed.kernel import HyperProposal
from pymc_sgs.mixed.laplace import hyper_mode, likelihood_constant
from pymc_sgs.mixed.read import read_mixed_model
from pymc_sgs.mixed.scale_mixture import SLICE_WIDTH, StudentTKernel
from pymc_sgs.mixed.step import (
    FAMILY_SLICE_WIDTH,
    LOCAL_ACCEPT,
    LOCAL_MOVES,
    LOCAL_MOVES_POOR,
    LOCAL_POOR_ACCEPT,
    MixedSplitGibbs,
)

# two levels, the first with little data
NB_COUNTS = ([0, 2, 1], [7, 3, 12, 5, 0, 9])
GAMMA_Y = ([0.4, 2.5], [3.1, 0.8, 5.2, 1.9, 2.2, 0.3])
# an outlier in each level: the Student-t likelihood is not log-concave in u there
T_Y = ([0.3, -0.5, 4.0], [2.1, 1.4, 2.8, 1.9, 9.0, 2.2])
#: the fixed parameter of the Student-t cases: nu (k is sigma), then sigma (k is nu)
T_NU, T_SIGMA = 4.0, 0.5
CASES = ["negativebinomial", "gamma", "studentt", "studentt_nu"]
#: iterations of the GLMM kernel's chains checked against quadrature
N_ITER = 8_000
T_CASES = ["studentt", "studentt_nu"]


def _data(case):
    levels = {"negativebinomial": NB_COUNTS, "gamma": GAMMA_Y}.get(case, T_Y)
    y = np.concatenate([np.asarray(v, dtype=float) for v in levels])
    g = np.concatenate([np.full(len(v), j) for j, v in enumerate(levels)])
    return levels, y, g


def model(case, param=None):
    """``y_i ~ F(e^{u[g_i]}, param)`` (``F(u[g_i], ...)`` for the Student-t),
    ``u ~ N(0, sigma^2)``, sigma ~ HalfNormal(1) and ``param ~ Gamma(2, 1)`` (free) or fixed at
    ``param``: NegativeBinomial alpha, Gamma shape, Student-t sigma ("studentt", nu fixed)
    or nu ("studentt_nu", sigma fixed)."""
    _, y, g = _data(case)
    with pm.Model() as m:
        sigma = pm.HalfNormal("sigma", 1.0)
        u = pm.Normal("u", 0.0, sigma, shape=2)
        k = pm.Gamma("k", 2.0, 1.0) if param is None else param
        if case == "negativebinomial":
            pm.NegativeBinomial("y", mu=pm.math.exp(u[g]), alpha=k, observed=y.astype(int))
        elif case == "studentt":
            pm.StudentT("y", nu=T_NU, mu=u[g], sigma=k, observed=y)
        elif case == "studentt_nu":
            pm.StudentT("y", nu=k, mu=u[g], sigma=T_SIGMA, observed=y)
        else:
            pm.Gamma("y", alpha=k, beta=k / pm.math.exp(u[g]), observed=y)
    return m


def _loglik(case, y, u, k):
    """``log p(y | u, k)`` on a (k, u) grid."""
    k = k[:, None]
    if case.startswith("studentt"):
        nu, s = (T_NU, k) if case == "studentt" else (k, T_SIGMA)
        return (
            scipy.special.gammaln(0.5 * (nu + 1))
            - scipy.special.gammaln(0.5 * nu)
            - 0.5 * np.log(nu * np.pi)
            - np.log(s)
            - 0.5 * (nu + 1) * np.log1p(((y - u[None, :]) / s) ** 2 / nu)
        )
    mu = np.exp(u)[None, :]
    if case == "negativebinomial":
        return (
            scipy.special.gammaln(y + k)
            - scipy.special.gammaln(k)
            - scipy.special.gammaln(y + 1)
            + k * np.log(k / (k + mu))
            + y * np.log(mu / (k + mu))
        )
    return k * np.log(k / mu) - scipy.special.gammaln(k) + (k - 1) * np.log(y) - k * y / mu


def quadrature_means(case):
    """``E[sigma]``, ``E[k]``, ``E[u_j]``: the levels are independent given ``(sigma, k)``."""
    levels, _, _ = _data(case)
    hs = np.linspace(-9.0, 2.0, 160)
    hk = np.linspace(-3.0, 4.5, 160)
    u = np.linspace(-9.0, 6.0, 700)
    sd, k = np.exp(hs), np.exp(hk)
    log_p = -0.5 * sd[:, None] ** 2 + hs[:, None]  # HalfNormal(1), Jacobian
    log_p = log_p + (np.log(k) - k + hk)[None, :]  # Gamma(2, 1), Jacobian
    log_prior_u = -0.5 * (u[None, :] / sd[:, None]) ** 2 - hs[:, None]  # (sigma, u)
    log_m, first = [], []
    for v in levels:
        ll = sum(_loglik(case, float(yi), u, k) for yi in v)  # (k, u)
        joint = log_prior_u[:, None, :] + ll[None, :, :]  # (sigma, k, u)
        lm = scipy.special.logsumexp(joint, axis=2)
        log_m.append(lm)
        first.append(np.sum(np.exp(joint - lm[..., None]) * u, axis=2))
    log_post = log_p + sum(log_m)
    p = np.exp(log_post - log_post.max())
    p /= p.sum()
    return [float(np.sum(p * sd[:, None])), float(np.sum(p * k[None, :]))] + [
        float(np.sum(p * f)) for f in first
    ]


class _SliceNoConstant(LaplaceJointKernel):
    """The slice update given the coefficients without the likelihood's parameter-only
    part: a wrong conditional (the joint moves stay right)."""

    def family_log_density(self, h, eta, log_likelihood=None):
        p = self.problem
        fam = p.family_at(h)
        const = likelihood_constant(fam, p.y, p.trials) if fam is not None else 0.0
        return super().family_log_density(h, eta, log_likelihood) - const


class _NoConstant(_SliceNoConstant):
    """The likelihood without its parameter-only part, in the joint moves and in the slice
    update given the coefficients: a wrong target for ``k``."""

    def fit(self, h, c0=None, slot=0):
        f = super().fit(h, c0, slot)
        return None if f is None else f._replace(lik_const=0.0)


def run(kernel_class, case, n_iter, seed):
    problem = read_mixed_model(model(case)).problem
    kernel = kernel_class(problem)
    rng = np.random.default_rng(seed)
    mode = hyper_mode(kernel, np.zeros(2))
    kernel.set_reference(mode.coef, mode.row_weights, mode.h)
    chol = np.linalg.cholesky(mode.h_cov)
    prop = HyperProposal(walk_chol=1.5 * chol, centre=mode.h, indep_chol=1.2 * chol, df=4.0)
    state = kernel.init(mode.h, mode.coef)
    out = np.empty((n_iter, 4))
    for i in range(n_iter):
        state, _ = kernel.step(
            state, rng, prop, coef_moves=3, family_slice_width=FAMILY_SLICE_WIDTH
        )
        sds = problem.hyper(state.h)[1]
        (k,) = problem.family_params(state.h).values()
        out[i] = sds[0], k, *(state.coef + kernel.coef_mean)
    return out


def _z(draws, refs):
    return np.array(
        [
            abs(draws[:, j].mean() - ref) / float(az.mcse(draws[None, :, j], method="mean"))
            for j, ref in enumerate(refs)
        ]
    )


@pytest.mark.parametrize("case", ["negativebinomial", "gamma"])
def test_free_parameter_matches_quadrature_and_its_constant_matters(case):
    """The kernel as the step runs it: joint moves, then the slice update of ``k`` given
    the coefficients."""
    refs = quadrature_means(case)
    draws = run(LaplaceJointKernel, case, N_ITER, seed=4)
    assert np.all(_z(draws, refs) < 4), (_z(draws, refs), refs, draws.mean(axis=0))
    wrong = run(_NoConstant, case, N_ITER, seed=4)
    assert _z(wrong, refs)[1] > 4, (_z(wrong, refs), refs, wrong.mean(axis=0))


def test_slice_update_of_the_free_parameter_is_checked_on_its_own():
    """Negative control of the slice update alone: without the likelihood's
    parameter-only part in its conditional the chain targets another posterior, and the
    quadrature check rejects it (the joint moves, which are right, do not pull it back)."""
    refs = quadrature_means("negativebinomial")
    wrong = run(_SliceNoConstant, "negativebinomial", N_ITER, seed=4)
    assert _z(wrong, refs)[1] > 4, (_z(wrong, refs), refs, wrong.mean(axis=0))


@pytest.mark.parametrize("case", ["negativebinomial", "gamma"])
def test_slice_density_of_the_free_parameter_is_the_models(case):
    """The slice update's density differs between two values of ``k`` (coefficients and
    group sd fixed) as PyMC's joint log density does; ``k``'s coordinate is the only one
    it moves."""
    m = model(case)
    problem = read_mixed_model(m).problem
    kernel = LaplaceJointKernel(problem)
    h1 = np.array([np.log(0.8), np.log(1.5)])
    assert kernel.family_coordinates(h1).tolist() == [1]
    coef = np.array([0.4, 2.1])
    eta = kernel.eta(coef)
    logp = m.compile_logp()
    names = [v.name for v in m.value_vars]

    def point(h):
        return {names[0]: h[0], "u": coef, names[2]: h[1]}

    for step in (0.6, -1.3):
        h2 = h1 + np.array([0.0, step])
        diff = kernel.family_log_density(h2, eta) - kernel.family_log_density(h1, eta)
        assert diff == pytest.approx(logp(point(h2)) - logp(point(h1)), rel=1e-10, abs=1e-10)
        # the precomputed likelihood (distinct counts summed once) agrees with the rows' sum
        rows = problem.family_at(h2).log_likelihood(eta, problem.y, problem.trials)
        direct = problem.hyper(h2)[0] + float(np.sum(rows))
        assert kernel.family_log_density(h2, eta) == pytest.approx(direct, rel=1e-12)
    assert kernel.family_log_density(np.array([0.0, 800.0]), eta) == -np.inf


def test_slice_update_keeps_the_fit_consistent_with_the_state():
    """After the slice update the kernel's fit and the state's ``eps``, log density and
    proposal density are those at the new ``h`` (the next joint move's ratio reads them)."""
    problem = read_mixed_model(model("negativebinomial")).problem
    kernel = LaplaceJointKernel(problem)
    mode = hyper_mode(kernel, np.zeros(2))
    kernel.set_reference(mode.coef, mode.row_weights, mode.h)
    chol = np.linalg.cholesky(mode.h_cov)
    prop = HyperProposal(
        walk_chol=1.5 * chol, centre=mode.h, indep_chol=1.2 * chol, df=4.0, moves=0
    )
    state = kernel.init(mode.h, mode.coef)
    rng = np.random.default_rng(0)
    moved = 0
    for _ in range(20):
        before = state.h.copy()
        state, _ = kernel.step(state, rng, prop, coef_moves=0, family_slice_width=3.0)
        moved += not np.array_equal(before, state.h)
        fit = kernel._fit
        assert np.array_equal(fit.h, state.h)
        fresh = kernel.fit(state.h, slot=1 - fit.slot)
        eps = fresh.factor.whiten(state.coef - fresh.mode)
        np.testing.assert_allclose(state.eps, eps, rtol=1e-9, atol=1e-9)
        assert state.log_post == pytest.approx(kernel.log_joint(fresh, state.coef), rel=1e-12)
        assert state.log_q == pytest.approx(kernel.log_q(eps, fresh), rel=1e-9)
    assert moved == 20  # proposal.moves is 0 here: the slice update moved h every time


class _BlindPrecisions(StudentTKernel):
    """Row precisions that ignore the residuals (rate ``nu / 2``): outliers keep their full
    weight, as under a normal likelihood, a wrong target."""

    def draw_precisions(self, coef, fam, rng):
        nu = fam.params["nu"]
        return rng.gamma(0.5 * (nu + 1.0), 2.0 / nu, size=self.problem.n)


def _skewed_draws(centre, chol, n=400, seed=0):
    """Draws around ``centre`` with a long lower tail in every whitened coordinate."""
    rng = np.random.default_rng(seed)
    z = np.log(rng.gamma(2.0, size=(n, centre.size)))
    z = (z - z.mean(axis=0)) / z.std(axis=0)
    return centre + z @ chol.T


def run_scale_mixture(kernel_class, case, n_iter, seed, two_piece=False):
    """The scale-mixture kernel from the Laplace fit's mode, as the step starts it;
    ``two_piece``: with a split independence proposal fitted to skewed draws, as tuning
    makes it."""
    problem = read_mixed_model(model(case)).problem
    mode = hyper_mode(LaplaceJointKernel(problem), np.zeros(2))
    kernel = kernel_class(problem)
    chol = np.linalg.cholesky(mode.h_cov)
    prop = HyperProposal(walk_chol=1.5 * chol, centre=mode.h, indep_chol=1.2 * chol, df=4.0)
    if two_piece:
        draws = _skewed_draws(mode.h, chol)
        prop = prop._replace(indep_split=split_of(draws, mode.h, chol), indep_draws=draws)
    state = kernel.init(mode.h, mode.coef + kernel.coef_mean)
    rng = np.random.default_rng(seed)
    out = np.empty((n_iter, 4))
    for i in range(n_iter):
        state, info = kernel.step(state, rng, prop)
        assert 0.0 <= info.indep_accept <= 1.0  # reported by the collapsed block
        sds = problem.hyper(state.h)[1]
        (k,) = problem.family_params(state.h).values()
        out[i] = sds[0], k, *state.coef
    return out


@pytest.mark.parametrize("case", T_CASES)
def test_student_t_scale_mixture_matches_quadrature(case):
    refs = quadrature_means(case)
    draws = run_scale_mixture(StudentTKernel, case, 10_000, seed=4)
    assert np.all(_z(draws, refs) < 4), (_z(draws, refs), refs, draws.mean(axis=0))
    wrong = run_scale_mixture(_BlindPrecisions, case, 10_000, seed=4)
    assert _z(wrong, refs).max() > 4, (_z(wrong, refs), refs, wrong.mean(axis=0))


@pytest.mark.parametrize("case", T_CASES)
def test_student_t_scale_mixture_with_a_two_piece_proposal_matches_quadrature(case):
    """With ``nu`` free the collapsed block moves the other coordinates through a
    restriction of the proposal, whose two-piece scales come from the draws; with ``nu``
    fixed it uses the full proposal's."""
    refs = quadrature_means(case)
    draws = run_scale_mixture(StudentTKernel, case, 10_000, seed=4, two_piece=True)
    assert np.all(_z(draws, refs) < 4), (_z(draws, refs), refs, draws.mean(axis=0))


def test_student_t_restricted_proposal_has_its_own_two_piece_scales():
    problem = read_mixed_model(model("studentt_nu")).problem
    kernel = StudentTKernel(problem)
    h = np.array([np.log(0.8), np.log(4.0)])
    free, params = kernel._coordinates(h)
    assert free.tolist() == [0]
    chol = np.array([[0.5, 0.0], [0.3, 0.4]])
    draws = _skewed_draws(h, chol)
    prop = HyperProposal(
        walk_chol=chol,
        centre=h,
        indep_chol=1.2 * chol,
        df=4.0,
        indep_split=split_of(draws, h, chol),
        indep_draws=draws,
    )
    block, _ = kernel._moves(prop, free, params, 2)
    own = split_scales(((draws[:, 0] - h[0]) / 0.5)[:, None])
    np.testing.assert_allclose(block.inner.indep_split, own, rtol=1e-6)
    assert own[0, 0] > 1.0 > own[0, 1]
    # a refit that changes only the split rebuilds the restriction
    flipped = prop._replace(indep_split=prop.indep_split[:, ::-1].copy())
    assert kernel._moves(flipped, free, params, 2)[0] is not block
    # without draws (before the first refit) the restriction stays symmetric
    plain = prop._replace(indep_split=None, indep_draws=None, centre=h + 0.1)
    assert kernel._moves(plain, free, params, 2)[0].inner.indep_split is None


@pytest.mark.parametrize("case", T_CASES)
def test_student_t_slice_density_without_the_coefficients_prior_differs_by_a_constant(case):
    """Where the sliced coordinates leave the group sds alone the kernel drops
    ``log p(c | h)``; the differences it compares must be those of the full density, and
    the model's own (PyMC's joint log density, log-Jacobian included)."""
    m = model(case)
    problem = read_mixed_model(m).problem
    kernel = StudentTKernel(problem)
    h1 = np.array([np.log(0.8), np.log(1.5)])
    _, params = kernel._coordinates(h1)
    assert params.tolist() == [1] and kernel._family_only
    coef = np.array([0.4, 2.1])
    eta, group = kernel.eta(coef), coef - kernel.coef_mean
    h2 = h1 + np.array([0.0, 0.6])
    diffs = [
        kernel.log_conditional(h2, eta, group, only) - kernel.log_conditional(h1, eta, group, only)
        for only in (True, False)
    ]
    logp = m.compile_logp()
    names = [v.name for v in m.value_vars]

    def point(h):
        return {names[0]: h[0], "u": coef, names[2]: h[1]}

    assert diffs[0] == pytest.approx(diffs[1], rel=1e-10, abs=1e-10)
    assert diffs[0] == pytest.approx(logp(point(h2)) - logp(point(h1)), rel=1e-10, abs=1e-10)


def test_student_t_proposal_pieces_follow_the_proposal():
    """The restricted proposal and slice directions are kept while the proposal's arrays
    are unchanged, and rebuilt when tuning changes them."""
    problem = read_mixed_model(model("studentt_nu")).problem
    kernel = StudentTKernel(problem)
    h = np.array([np.log(0.8), np.log(4.0)])
    free, params = kernel._coordinates(h)
    chol = np.array([[0.5, 0.0], [0.1, 0.3]])
    prop = HyperProposal(walk_chol=chol, centre=h, indep_chol=1.2 * chol, df=4.0)
    block, directions = kernel._moves(prop, free, params, 2)
    again = HyperProposal(walk_chol=chol.copy(), centre=h.copy(), indep_chol=1.2 * chol, df=4.0)
    assert kernel._moves(again, free, params, 2)[0] is block
    np.testing.assert_allclose(directions, SLICE_WIDTH * np.array([[1.2 * np.hypot(0.1, 0.3)]]))
    wider = again._replace(indep_chol=2.0 * chol)
    block2, directions2 = kernel._moves(wider, free, params, 2)
    assert block2 is not block
    np.testing.assert_allclose(directions2, directions * 2.0 / 1.2)


@pytest.mark.parametrize("case", CASES)
def test_fixed_parameter_is_read_with_its_value(case):
    problem = read_mixed_model(model(case, param=5.0)).problem
    assert problem.family_params is None
    params = problem.family.params
    if case == "studentt":
        assert params == {"nu": T_NU, "sigma": 5.0}
    elif case == "studentt_nu":
        assert params == {"nu": 5.0, "sigma": T_SIGMA}
    else:
        assert list(params.values()) == [5.0]
    free = read_mixed_model(model(case)).problem
    assert free.hyper_size == 2
    assert list(free.family_params(np.array([0.0, np.log(3.0)])).values()) == pytest.approx([3.0])


def test_values_at_a_point_do_not_depend_on_the_calls_before():
    """The reader keeps the last point's prior, sds and parameters (kernels ask several
    times at one point): answers at a point equal a fresh reader's, whatever was asked
    before, and a caller writing into the sds it got does not change the next answer."""

    def fresh():
        return read_mixed_model(model("negativebinomial")).problem

    h1, h2 = np.array([0.3, np.log(2.0)]), np.array([-0.4, np.log(5.0)])
    ref = {}
    for h in (h1, h2):
        other = fresh()
        ref[h.tobytes()] = (other.hyper(h), other.family_params(h))
    problem = fresh()
    for h in (h1, h2, h2, h1, h2, h1):
        (lp, sds, noise), params = ref[h.tobytes()]
        got = problem.hyper(h.copy())
        assert got[0] == lp
        np.testing.assert_equal(got[2], noise)  # nan: no Gaussian noise sd here
        np.testing.assert_array_equal(got[1], sds)
        got[1][:] = -1.0
        assert problem.family_params(h) == params
        assert problem.family_at(h).params == params
        np.testing.assert_array_equal(problem.hyper(h)[1], sds)
    # the bound family is kept at the same parameters and made anew at others
    assert problem.family_at(h1) is problem.family_at(h1.copy())
    assert problem.family_at(h2).params["alpha"] == pytest.approx(5.0, rel=1e-12)


def test_unsupported_forms_are_refused():
    _, y, g = _data("negativebinomial")
    with pm.Model():
        sigma = pm.HalfNormal("sigma", 1.0)
        u = pm.Normal("u", 0.0, sigma, shape=2)
        k = pm.Gamma("k", 2.0, 1.0, shape=2)
        pm.NegativeBinomial("y", mu=pm.math.exp(u[g]), alpha=k[g], observed=y.astype(int))
        with pytest.raises(UnsupportedModelError, match="scalar free variables"):
            pymc_sgs.SplitGibbs()
    with model("gamma"):
        with pytest.raises(ValueError, match="rho='auto'"):
            MixedSplitGibbs(rho=0.3)


def _bambi_step(case, **family):
    """The step ``SplitGibbs()`` builds for Bambi's ``y ~ 1 + (1|g)`` on ``case``'s data."""
    bmb = pytest.importorskip("bambi")
    import pandas as pd

    _, y, g = _data(case)
    df = pd.DataFrame({"y": y, "g": pd.Categorical(g)})
    bm = bmb.Model("y ~ 1 + (1|g)", df, **family)
    bm.build()
    with bm.backend.model:
        step = pymc_sgs.SplitGibbs()
    assert isinstance(step, MixedSplitGibbs)
    return step


def _h_with(step, **values):
    """Hyperparameters at 0 but the named free parameters, set on their log scale."""
    names = step.mixed.hyper_names
    h = np.zeros(step.problem.hyper_size)
    for name, v in values.items():
        h[names.index(f"{name}_log__")] = np.log(v)
    return h


def test_bambi_gamma_shape_is_read_through_its_parametrisation():
    step = _bambi_step("gamma", family="gamma", link="log")
    assert "shape sampled" in repr(step)
    h = _h_with(step, alpha=2.5)
    assert step.problem.family_params(h)["shape"] == pytest.approx(2.5, rel=1e-12)


def test_bambi_gamma_shape_is_read_the_same_way_every_time():
    """The linear predictor fixed into the shape's graph (``mu**2 / sigma**2``) is the
    model's start, not a draw from its prior: a draw changed the shape's last bits, hence
    the draws, from one run to the next at the same seed (found on lme4's sleepstudy as a
    Gamma GLMM: draws differing ~1e-5 between processes)."""
    bmb = pytest.importorskip("bambi")
    import pandas as pd

    _, y, g = _data("gamma")
    df = pd.DataFrame({"y": y, "g": pd.Categorical(g)})
    bm = bmb.Model("y ~ 1 + (1|g)", df, family="gamma", link="log")
    bm.build()
    reads = [read_mixed_model(bm.backend.model) for _ in range(3)]
    names = reads[0].hyper_names
    k = names.index("alpha_log__")
    for log_alpha in np.linspace(-3.0, 6.0, 25):
        h = np.zeros(len(names))
        h[k] = log_alpha
        shapes = [r.problem.family_params(h)["shape"] for r in reads]
        assert shapes[0] == shapes[1] == shapes[2]
        assert shapes[0] == pytest.approx(np.exp(log_alpha), rel=1e-12)


def test_a_shape_that_depends_on_the_coefficients_is_refused():
    _, y, g = _data("gamma")
    with pm.Model():
        sigma = pm.HalfNormal("sigma", 1.0)
        u = pm.Normal("u", 0.0, sigma, shape=2)
        mu = pm.math.exp(u[g])
        # shape mu^2 / 0.5^2: a function of the coefficients, not one value
        pm.Gamma("y", mu=mu, sigma=0.5, observed=y)
        with pytest.raises(UnsupportedModelError, match="shape must be data or one value"):
            pymc_sgs.SplitGibbs()


def test_bambi_student_t_samples_sigma_and_nu_with_the_coefficients():
    step = _bambi_step("studentt", family="t")
    assert "nu, sigma sampled" in repr(step)
    assert isinstance(step.kernel, StudentTKernel)
    h = _h_with(step, nu=7.0, sigma=0.25)
    assert step.problem.family_params(h) == pytest.approx({"nu": 7.0, "sigma": 0.25}, rel=1e-12)


@pytest.mark.parametrize("first", ["sigma", "nu"])
def test_free_likelihood_parameters_keep_the_family_order(first):
    """``h`` holds a Student-t's nu and sigma in the family's order, whichever the model
    declares first: Bambi declares them in an order that changes from one process to the
    next, and the order of ``h`` decides the draws (same seed, same draws)."""
    _, y, g = _data("studentt")
    with pm.Model() as m:
        params = {}
        for name in (first, "sigma" if first == "nu" else "nu"):
            params[name] = pm.Gamma(name, 2.0, 1.0)
        tau = pm.HalfNormal("tau", 1.0)
        u = pm.Normal("u", 0.0, tau, shape=2)
        pm.StudentT("y", nu=params["nu"], mu=u[g], sigma=params["sigma"], observed=y)
    names = read_mixed_model(m).hyper_names
    assert names == ["tau_log__", "nu_log__", "sigma_log__"]


def test_slice_update_restricted_by_admissible_targets_the_restriction():
    """``slice_update(..., admissible=...)`` steps out on the density alone and stops only
    at admissible points: on a standard normal restricted to ``x > 0`` its draws have the
    half-normal's mean and variance; without the restriction the same check fails."""
    rng = np.random.default_rng(3)

    def log_density(x):
        return -0.5 * float(x[0] ** 2)

    def chain(admissible, n=20_000):
        x, out = np.array([0.5]), np.empty(n)
        for i in range(n):
            x = slice_update(log_density, x, np.array([0]), np.array([[2.0]]), rng, admissible)
            out[i] = x[0]
        return out

    draws = chain(lambda x: x[0] > 0.0)
    assert draws.min() > 0.0
    mean, var = np.sqrt(2.0 / np.pi), 1.0 - 2.0 / np.pi
    z_mean = abs(draws.mean() - mean) / float(az.mcse(draws[None, :], method="mean"))
    z_sq = abs(np.mean(draws**2) - 1.0) / float(az.mcse(draws[None, :] ** 2, method="mean"))
    assert z_mean < 4 and z_sq < 4, (z_mean, z_sq, draws.mean(), draws.var(), var)
    free = chain(None)
    assert abs(free.mean() - mean) / float(az.mcse(free[None, :], method="mean")) > 4


def test_chains_with_poor_independence_moves_make_more_autoregressive_moves():
    """The probe's decision: none at acceptance >= LOCAL_ACCEPT, LOCAL_MOVES_POOR below
    LOCAL_POOR_ACCEPT when a pass over the rows costs no more than a factorization, else
    LOCAL_MOVES."""
    with model("negativebinomial"):
        step = pymc_sgs.SplitGibbs()
    kernel = step.kernel
    cheap = float(kernel.A.nnz)
    kernel.precision.factor_cost = lambda: cheap  # a pass over the rows costs as much
    assert step._local_moves_after_probe(LOCAL_ACCEPT) == 0
    assert step._local_moves_after_probe(LOCAL_POOR_ACCEPT) == LOCAL_MOVES
    assert step._local_moves_after_probe(LOCAL_POOR_ACCEPT - 0.01) == LOCAL_MOVES_POOR
    kernel.precision.factor_cost = lambda: cheap - 1.0  # rows dearer than a factorization
    assert step._local_moves_after_probe(0.0) == LOCAL_MOVES
    assert LOCAL_MOVES < LOCAL_MOVES_POOR
