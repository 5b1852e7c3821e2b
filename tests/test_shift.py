"""The joint (theta, z) shift move (pymc_sgs.shift): invariance of the split model, and use."""

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest

import pymc_sgs
from pymc_sgs.families import FAMILIES
from pymc_sgs.kernel import SplitGibbsKernel
from pymc_sgs.problem import ParamSlice, SplitProblem, SplitTerm
from pymc_sgs.shift import ShiftMove
from pymc_sgs.start import laplace_start

SIGMA, RHO, PRIOR_SD = 1.0, 0.7, 2.0


def _gaussian_split_problem(n=40, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ np.array([1.0, -0.5]) + SIGMA * rng.normal(size=n)
    prob = SplitProblem(
        params=(ParamSlice("b", (d,), 0, d),),
        prior_mean=np.zeros(d),
        prior_precision=np.eye(d) / PRIOR_SD**2,
        split_terms=(SplitTerm("y", FAMILIES["normal"], X, np.zeros(n), y, np.full(n, SIGMA)),),
    )
    return prob, X, y


def _closed_form(X, y, noise_var):
    """Posterior of theta when each y_i ~ N(x_i^T theta, noise_var) (pi_rho: sigma^2 + rho^2)."""
    Q = np.eye(X.shape[1]) / PRIOR_SD**2 + X.T @ X / noise_var
    cov = np.linalg.inv(Q)
    return cov @ (X.T @ y / noise_var), cov


class _NoReferenceShift(ShiftMove):
    """Broken on purpose: accepts with the target ratio alone, as if the proposal (which is
    reversible for the reference Gaussian, not symmetric) needed no correction."""

    def _log_reference(self, theta, centre):
        return 0.0


class _MovingCentreShift(ShiftMove):
    """Broken on purpose: centres the reference at a point that the move itself changes
    (from ``A^T z`` alone, without the ``A^T A theta`` that keeps it fixed), so the proposal
    is no longer reversible for the Gaussian in the MH ratio."""

    def centre(self, state):
        tc = self.kernel.theta_conditional
        g = 4.0 * self.mean_curvature() * tc._scalar_rho**2 * state.atz
        return self.mean - np.linalg.solve(self.chol @ self.chol.T, g)


class _GaussianRatioMixture(ShiftMove):
    """Broken on purpose: proposes from the defensive mixture but corrects with the Gaussian
    component's density alone."""

    def _log_mixture(self, theta, centre):
        return self._log_reference(theta, centre)


def _chain(move_class, n_iter=12000, seed=1, beta=0.3, offset=None, **move_kw):
    """Alternate the exact z | theta draw with the shift move only (no theta | z step), so the
    theta-marginal is right only if the shift move leaves Pi_rho invariant."""
    prob, X, y = _gaussian_split_problem()
    kernel = SplitGibbsKernel(prob, rho=RHO)
    rng = np.random.default_rng(seed)
    start = laplace_start(kernel, np.zeros(2), rng)
    # the reference Gaussian is the Laplace approximation of pi (noise sigma^2), not of the
    # chain's target pi_rho (noise sigma^2 + rho^2): the MH ratio has to correct for it
    move = move_class(kernel, start.mode, start.chol, beta=beta, **move_kw)
    if offset is not None:
        move._mean_offset = offset
    thetas, accs = _alternate(kernel, move, kernel.init(start.theta, rng), rng, n_iter)
    return thetas[500:], np.mean(accs), X, y


def _alternate(kernel, move, state, rng, n_iter):
    """``n_iter`` rounds of the exact z | theta draw then one shift move: (thetas, accepts)."""
    thetas, accs = [], []
    for _ in range(n_iter):
        z, mode, _, _ = kernel.rows.draw_z(state.theta, state.z_mode, rng, state.z)
        # A^T z kept current, as the sweeps do: the move's reference is centred from it
        state = state._replace(z=z, z_mode=mode, atz=kernel.theta_conditional.split_rhs(z))
        state, acc = move.step(state, rng)
        thetas.append(state.theta)
        accs.append(acc)
    return np.array(thetas), np.array(accs)


def _z_scores(draws, mean, cov):
    ess = np.array([float(az.ess(draws[None, :, j])) for j in range(draws.shape[1])])
    sd = np.sqrt(np.diag(cov))
    z_mean = (draws.mean(0) - mean) / (sd / np.sqrt(ess))
    # a sample variance of ess normals has relative sd sqrt(2 / ess)
    z_var = (draws.var(0) - sd**2) / (sd**2 * np.sqrt(2.0 / ess))
    return np.concatenate([z_mean, z_var]), ess


def test_shift_move_leaves_the_split_model_invariant():
    draws, acc, X, y = _chain(ShiftMove)
    assert 0.2 < acc < 1.0
    mean, cov = _closed_form(X, y, SIGMA**2 + RHO**2)
    z, ess = _z_scores(draws, mean, cov)
    assert np.all(ess > 1000), ess
    assert np.all(np.abs(z) < 4.5), z
    # negative control 1: the same draws against pi (rho = 0) fail the check
    z_pi, _ = _z_scores(draws, *_closed_form(X, y, SIGMA**2))
    assert np.any(np.abs(z_pi) > 4.5), z_pi


def test_over_relaxed_shift_move_leaves_the_split_model_invariant():
    # beta < 0 (shift_relaxation): the proposal reflects theta through the mode; still
    # reversible for the reference Gaussian, so the split model stays invariant
    draws, acc, X, y = _chain(ShiftMove, beta=-0.5)
    assert 0.2 < acc < 1.0
    mean, cov = _closed_form(X, y, SIGMA**2 + RHO**2)
    z, ess = _z_scores(draws, mean, cov)
    assert np.all(np.abs(z) < 4.5), z
    z_pi, _ = _z_scores(draws, *_closed_form(X, y, SIGMA**2))
    assert np.any(np.abs(z_pi) > 4.5), z_pi
    # the broken move fails the same check with this proposal too
    bad, _, _, _ = _chain(_NoReferenceShift, beta=-0.5)
    z_bad, _ = _z_scores(bad, mean, cov)
    assert np.any(np.abs(z_bad) > 4.5), z_bad


def test_defensive_mixture_shift_move_leaves_the_split_model_invariant():
    # tail_weight (rho=0's proposal): an independence proposal from the Gaussian/Student-t
    # mixture, corrected with the mixture's density, keeps Pi_rho invariant; corrected with the
    # Gaussian's alone it does not (negative control)
    kw = dict(beta=0.0, tail_weight=0.3, tail_df=3.0)
    draws, acc, X, y = _chain(ShiftMove, **kw)
    assert 0.2 < acc < 1.0
    mean, cov = _closed_form(X, y, SIGMA**2 + RHO**2)
    z, ess = _z_scores(draws, mean, cov)
    assert np.all(ess > 1000), ess
    assert np.all(np.abs(z) < 4.5), z
    bad, _, _, _ = _chain(_GaussianRatioMixture, **kw)
    z_bad, _ = _z_scores(bad, mean, cov)
    assert np.any(np.abs(z_bad) > 4.5), z_bad


def test_defensive_mixture_density_is_the_gaussian_t_mixture():
    """``_log_mixture`` differences equal scipy's mixture of N(c, H^-1) and t_nu(c, H^-1)."""
    from scipy import stats

    prob, _, _ = _gaussian_split_problem()
    kernel = SplitGibbsKernel(prob, rho=RHO)
    start = laplace_start(kernel, np.zeros(2), np.random.default_rng(0))
    move = ShiftMove(kernel, start.mode, start.chol, tail_weight=0.25, tail_df=4.0)
    cov = np.linalg.inv(start.chol @ start.chol.T)
    centre = start.mode + np.array([0.1, -0.2])

    def scipy_log_mix(x):
        return np.logaddexp(
            np.log(0.75) + stats.multivariate_normal(centre, cov).logpdf(x),
            np.log(0.25) + stats.multivariate_t(centre, cov, df=4.0).logpdf(x),
        )

    points = centre + np.array([[0.0, 0.0], [0.3, -0.1], [2.0, 1.5], [-8.0, 5.0]])
    ours = np.array([move._log_mixture(x, centre) for x in points])
    theirs = np.array([scipy_log_mix(x) for x in points])
    np.testing.assert_allclose(ours - ours[0], theirs - theirs[0], rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="tail_weight must be in"):
        ShiftMove(kernel, start.mode, start.chol, tail_weight=1.0)


def test_broken_shift_move_is_detected():
    # negative control 2: a move without the proposal's correction targets something else
    draws, _, X, y = _chain(_NoReferenceShift)
    z, _ = _z_scores(draws, *_closed_form(X, y, SIGMA**2 + RHO**2))
    assert np.any(np.abs(z) > 4.5), z
    # negative control 3: a reference centre that moves with the move
    draws, _, X, y = _chain(_MovingCentreShift)
    z, _ = _z_scores(draws, *_closed_form(X, y, SIGMA**2 + RHO**2))
    assert np.any(np.abs(z) > 4.5), z


def test_recentred_reference_follows_the_residuals():
    # the centre is one Newton step towards the mode of the conditional given the residuals:
    # with h = U'' (constant for a Normal potential) it is exact for a Gaussian split model
    prob, X, y = _gaussian_split_problem()
    kernel = SplitGibbsKernel(prob, rho=RHO)
    rng = np.random.default_rng(5)
    start = laplace_start(kernel, np.zeros(2), rng)
    move = ShiftMove(kernel, start.mode, start.chol)
    state = kernel.init(start.theta, rng)
    z, mode, _, _ = kernel.rows.draw_z(state.theta, state.z_mode, rng, state.z)
    state = state._replace(z=z, atz=kernel.theta_conditional.split_rhs(z))
    r = z - X @ state.theta
    # mode of -log prior - sum_i (y_i - x_i^T t - r_i)^2 / (2 sigma^2)
    Q = np.eye(2) / PRIOR_SD**2 + X.T @ X / SIGMA**2
    exact = np.linalg.solve(Q, X.T @ (y - r) / SIGMA**2)
    np.testing.assert_allclose(move.centre(state), exact, rtol=1e-8, atol=1e-10)
    assert np.linalg.norm(exact - start.mode) > 1e-3
    move.recenter = False
    np.testing.assert_array_equal(move.centre(state), start.mode)


def _logistic_model(n=2000, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) / np.sqrt(d)
    y = rng.binomial(1, 1 / (1 + np.exp(-(X @ rng.normal(size=d)))))
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=d)
        pm.Bernoulli("y", logit_p=X @ b, observed=y)
    return model


def _run(model, seed=3, **kw):
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pm.sample(
            draws=500,
            tune=500,
            chains=2,
            cores=1,
            random_seed=seed,
            step=pymc_sgs.SplitGibbs(**kw),
            progressbar=False,
            compute_convergence_checks=False,
        )


def test_shift_speeds_up_mixing_and_agrees_with_plain_sgs():
    """Same split model, same rho: with the shift move the draws are nearly independent, and
    the two samplers' means agree within their Monte Carlo errors."""
    model = _logistic_model()
    fast = _run(model, rho=0.1)
    slow = _run(model, rho=0.1, shift=False)
    acc = fast.sample_stats["shift_accept"].values
    assert np.all(np.isfinite(acc)) and acc.mean() > 0.8, acc.mean()
    assert np.all(np.isnan(slow.sample_stats["shift_accept"].values))
    ess_fast = az.ess(fast).b.values
    ess_slow = az.ess(slow).b.values
    assert ess_fast.min() > 5 * ess_slow.min(), (ess_fast, ess_slow)
    a, b = fast.posterior.b.values, slow.posterior.b.values
    for j in range(a.shape[-1]):
        mcse = np.hypot(float(az.mcse(a[..., j])), float(az.mcse(b[..., j])))
        assert abs(a[..., j].mean() - b[..., j].mean()) < 4 * mcse, j


def test_shift_is_checked_and_skipped_where_it_does_not_apply():
    model = _logistic_model(n=50)
    with (
        model,
        pytest.raises(
            ValueError,
            match=r"shift must be True, False or a pymc_sgs.ShiftOptions\(...\); received 'yes'",
        ),
    ):
        pymc_sgs.SplitGibbs(shift="yes")
    # exact mode targets Pi_rho * w, for which the move is not reversible: it is not used
    idata = _run(model, rho=0.3, exact=True, exact_sweeps=2)
    assert np.all(np.isnan(idata.sample_stats["shift_accept"].values))


@pytest.mark.parametrize("family", ["bernoulli", "binomial", "poisson", "negativebinomial"])
def test_compiled_shift_change_matches_numpy(family):
    # more than 256 rows: the compiled pass logs its running product every 256 rows
    rng = np.random.default_rng(2)
    n, d = 1000, 3
    X = rng.normal(size=(n, d)) / 2
    trials = rng.integers(1, 9, n).astype(float) if family == "binomial" else None
    y = (
        (rng.random(n) < 0.5).astype(float)
        if family == "bernoulli"
        else rng.binomial(trials.astype(int), 0.4).astype(float)
        if family == "binomial"
        else rng.poisson(2.0, n).astype(float)
    )
    fam = FAMILIES[family]
    if family == "negativebinomial":
        fam = fam.bind(alpha=3.0)
    prob = SplitProblem(
        params=(ParamSlice("b", (d,), 0, d),),
        prior_mean=np.zeros(d),
        prior_precision=np.eye(d) / 4,
        split_terms=(SplitTerm("y", fam, X, np.zeros(n), y, trials),),
    )
    z0 = rng.normal(0.5, 1, n)
    delta = rng.normal(size=d)
    out = {}
    for engine in ("numba", "numpy"):
        kernel = SplitGibbsKernel(prob, rho=0.2, engine=engine)
        assert kernel.rows.engine == engine
        move = ShiftMove(kernel, np.zeros(d), np.eye(d))
        out[engine] = move._split_change(z0, delta)
    # the numpy path sums U at both points; the change is O(n), so compare to its size
    assert np.isfinite(out["numpy"][0]) and abs(out["numpy"][0]) > 1.0
    np.testing.assert_allclose(out["numba"][0], out["numpy"][0], rtol=1e-10, atol=1e-8)
    np.testing.assert_allclose(out["numba"][1], z0 + X @ delta, rtol=0, atol=1e-12)
    np.testing.assert_allclose(out["numba"][2], X @ delta, rtol=0, atol=1e-12)


@pytest.mark.parametrize("per_row_rho", [False, True])
def test_accepted_shift_keeps_the_linear_term_exact(per_row_rho):
    # on acceptance A^T ((z - o) / rho^2) is updated by A^T A delta / rho^2 (a d x d product
    # for a scalar rho) instead of a pass over the data: it must equal the recomputed one
    rng = np.random.default_rng(4)
    n, d = 500, 3
    X = rng.normal(size=(n, d)) / 2
    y = (rng.random(n) < 0.5).astype(float)
    prob = SplitProblem(
        params=(ParamSlice("b", (d,), 0, d),),
        prior_mean=np.zeros(d),
        prior_precision=np.eye(d) / 4,
        split_terms=(SplitTerm("y", FAMILIES["bernoulli"], X, np.ones(n), y),),
    )
    rho = np.exp(rng.uniform(-3, -1, n)) if per_row_rho else 0.1
    kernel = SplitGibbsKernel(prob, rho=rho, alpha=-0.9)
    start = laplace_start(kernel, np.zeros(d), rng)
    move = ShiftMove(kernel, start.mode, start.chol)
    state = kernel.init(start.theta, rng)
    accepted = 0
    for _ in range(20):
        state, _ = kernel.sweep(state, rng)
        assert state.atz is not None
        before = state.theta
        state, _ = move.step(state, rng)
        if state.theta is not before:
            accepted += 1
            assert state.atz is not None
            np.testing.assert_allclose(
                state.atz, kernel.theta_conditional.split_rhs(state.z), rtol=1e-10, atol=1e-8
            )
    assert accepted >= 10


def test_auto_number_of_moves():
    from pymc_sgs.shift import moves_for_acceptance

    # every move rejected with probability <= 8%, at most 3 moves
    assert [moves_for_acceptance(a) for a in (1.0, 0.97, 0.95, 0.9, 0.8, 0.7, 0.5, 0.1, 0.0)] == [
        1,
        1,
        1,
        2,
        2,
        3,
        3,
        3,
        3,
    ]
    for a in np.linspace(0.01, 0.99, 99):
        k = moves_for_acceptance(a)
        assert (1 - a) ** k <= 0.08 + 1e-12 or k == 3
        assert k == 1 or (1 - a) ** (k - 1) > 0.08


def _tuned(move, accepts):
    """Feed ``move.tune`` one window per acceptance; return (beta, moves) after each."""
    out = []
    for a in accepts:
        # every move from the Gaussian component (no tail_weight)
        move._window = [a] * move.WINDOW
        move._gauss_window = list(move._window)
        move.tune()
        out.append((move.beta, move.moves))
    return out


def test_over_relaxed_regime_is_entered_and_left_with_hysteresis():
    move = ShiftMove(None, np.zeros(2), np.eye(2), moves="auto", relaxation=0.5)
    assert _tuned(move, [0.95]) == [(-0.5, 1)]
    # inside the regime, 0.88 and 0.86 keep it (>= 0.85 on average); with 0.75 the mean
    # since entering drops to 0.83 and it is left
    assert _tuned(move, [0.88, 0.86]) == [(-0.5, 1), (-0.5, 1)]
    assert _tuned(move, [0.75]) == [(0.0, 2)]
    # back in the independent regime, the mean since leaving decides: 0.85 is not enough
    assert _tuned(move, [0.85, 0.97]) == [(0.0, 2), (-0.5, 1)]
    # relaxation 0 never over-relaxes; a fixed count above one never does either
    for kw in (dict(moves="auto", relaxation=0.0), dict(moves=2, relaxation=0.5)):
        move = ShiftMove(None, np.zeros(2), np.eye(2), **kw)
        assert all(beta == 0.0 for beta, _ in _tuned(move, [0.99] * 4))
    move = ShiftMove(None, np.zeros(2), np.eye(2), moves=1, relaxation=0.3)
    assert _tuned(move, [0.99]) == [(-0.3, 1)]
    # a badly approximated posterior still gets a persistent (local) proposal
    move = ShiftMove(None, np.zeros(2), np.eye(2), moves="auto", relaxation=0.5)
    assert _tuned(move, [0.1])[0][0] > 0.0


def test_over_relaxed_shift_through_pymc():
    # n = 20000: the Laplace proposal is accepted > 90% of the time, so tuning settles on one
    # over-relaxed move per sweep; the stat reports it, and relaxation 0 keeps beta = 0
    model = _logistic_model(n=20000, d=4)
    relaxed = _run(model, rho=0.05)
    beta = relaxed.sample_stats["shift_beta"].values
    assert np.all(beta == -0.3), np.unique(beta)
    assert np.all(relaxed.sample_stats["shift_moves"].values == 1)
    plain = _run(model, rho=0.05, shift_relaxation=0.0)
    assert np.all(plain.sample_stats["shift_beta"].values == 0.0)
    # anti-correlated draws: the bulk ESS of every coefficient exceeds the 1000 draws
    assert az.ess(relaxed).b.values.min() > 1000
    a, b = relaxed.posterior.b.values, plain.posterior.b.values
    for j in range(a.shape[-1]):
        mcse = np.hypot(float(az.mcse(a[..., j])), float(az.mcse(b[..., j])))
        assert abs(a[..., j].mean() - b[..., j].mean()) < 4 * mcse, j
    with model:
        for bad in (-0.1, 1.0, 1.5, "half", True, None):
            with pytest.raises(ValueError, match="shift_relaxation must be a number in"):
                pymc_sgs.SplitGibbs(shift_relaxation=bad)


def test_shift_moves_through_pymc():
    # a small data set, where one Laplace proposal is accepted less often than 92% (about 83%
    # at n = 120, d = 12): "auto" settles on more than one move per sweep, keeps it after
    # tuning and reports it; a fixed count is honoured
    model = _logistic_model(n=120, d=12)
    idata = _run(model, rho=0.1)
    k = idata.sample_stats["shift_moves"].values
    acc = idata.sample_stats["shift_accept"].values
    assert np.all(k == k[:, :1]) and np.all((k >= 2) & (k <= 3)), k[:, 0]
    assert np.nanmean(acc) < 0.95
    fixed = _run(model, rho=0.1, shift_moves=3)
    assert np.all(fixed.sample_stats["shift_moves"].values == 3)
    with model:
        for bad in (0, 21, 2.5, "many", True):
            with pytest.raises(ValueError, match="shift_moves"):
                pymc_sgs.SplitGibbs(shift_moves=bad)


# ------------------------------------------------------------------ mode-to-mean correction
def _glm_problem(n, family, d=2, seed=0, corr=None):
    """Intercept + N(0, 1) slope (or, with ``corr``, d equicorrelated features), prior N(0, 2^2)."""
    rng = np.random.default_rng(seed)
    if corr is None:
        X = np.column_stack([np.ones(n), rng.normal(size=(n, d - 1))])
        eta = X @ np.linspace(0.3, 0.8, d)
    else:
        X = np.sqrt(corr) * rng.normal(size=(n, 1)) + np.sqrt(1 - corr) * rng.normal(size=(n, d))
        eta = X @ (rng.normal(size=d) / np.sqrt(d))
    if family == "poisson":
        y = rng.poisson(np.exp(eta)).astype(float)
    else:
        y = rng.binomial(1, 1.0 / (1.0 + np.exp(-eta))).astype(float)
    prob = SplitProblem(
        params=(ParamSlice("b", (d,), 0, d),),
        prior_mean=np.zeros(d),
        prior_precision=np.eye(d) / PRIOR_SD**2,
        split_terms=(SplitTerm("y", FAMILIES[family], X, np.zeros(n), y, np.ones(n)),),
    )
    return prob, X, y


@pytest.mark.parametrize("family", ["poisson", "bernoulli"])
def test_mean_offset_is_the_third_derivative_contraction(family, monkeypatch):
    # the definition, written out: -H^-1 (T : H^-1) / 2 with T_klm = sum_i U_i''' a_ik a_il a_im;
    # row blocks of 7 (monkeypatched) must add up to the same vector
    from pymc_sgs import shift

    prob, X, y = _glm_problem(50, family, d=3)
    kernel = SplitGibbsKernel(prob, rho=0.1)
    start = laplace_start(kernel, np.zeros(3), np.random.default_rng(0))
    eta = X @ start.mode
    u3 = FAMILIES[family].taylor_derivatives(eta, y, np.ones(50))[2]
    T = np.einsum("i,ik,il,im->klm", u3, X, X, X)
    H_inv = np.linalg.inv(start.chol @ start.chol.T)
    want = -0.5 * H_inv @ np.einsum("klm,lm->k", T, H_inv)
    np.testing.assert_allclose(
        shift.laplace_mean_offset(kernel, start.mode, start.chol), want, rtol=1e-10
    )
    monkeypatch.setattr(pymc_sgs.rows, "ROW_BLOCK", 7)
    np.testing.assert_allclose(
        shift.laplace_mean_offset(kernel, start.mode, start.chol), want, rtol=1e-10
    )
    # a Normal likelihood is symmetric about its mode: no correction
    gauss, _, _ = _gaussian_split_problem()
    k2 = SplitGibbsKernel(gauss, rho=RHO)
    s2 = laplace_start(k2, np.zeros(2), np.random.default_rng(0))
    assert np.all(shift.laplace_mean_offset(k2, s2.mode, s2.chol) == 0.0)


@pytest.mark.parametrize("family", ["poisson", "bernoulli", "bernoulli_probit"])
@pytest.mark.parametrize("n", [20, 40])
def test_mean_offset_matches_the_posterior_mean_by_quadrature(family, n):
    # probit has no closed-form third derivative: it takes the central difference of U''
    # E[theta] - mode of the exact posterior (a 321 x 321 grid over +-8 Laplace sd): the
    # first-order correction gets within 10% of it (measured: 0.3-5%), in the Laplace metric
    from pymc_sgs.shift import laplace_mean_offset

    prob, X, y = _glm_problem(n, family)
    kernel = SplitGibbsKernel(prob, rho=0.1)
    start = laplace_start(kernel, np.zeros(2), np.random.default_rng(0))
    u = np.linspace(-8.0, 8.0, 321)
    grid = np.stack([g.ravel() for g in np.meshgrid(u, u, indexing="ij")], axis=1)
    theta = start.mode + np.linalg.solve(start.chol.T, grid.T).T
    eta = theta @ X.T
    log_p = -0.5 * np.sum(theta**2, axis=1) / PRIOR_SD**2 - np.sum(
        FAMILIES[family].potential(eta, y[None, :], np.ones_like(eta)), axis=1
    )
    w = np.exp(log_p - log_p.max())
    exact = (w / w.sum()) @ theta - start.mode
    offset = laplace_mean_offset(kernel, start.mode, start.chol)

    def rel_err(approx):
        return np.linalg.norm(start.chol.T @ (approx - exact)) / np.linalg.norm(
            start.chol.T @ exact
        )

    assert np.linalg.norm(start.chol.T @ exact) > 0.05  # skewed enough to tell them apart
    assert rel_err(offset) < 0.1, rel_err(offset)
    # negative controls: no correction, or the correction without its factor 1/2
    assert rel_err(0.0 * offset) > 0.5 and rel_err(2.0 * offset) > 0.5


def test_shift_move_with_a_centre_offset_leaves_the_split_model_invariant():
    # any fixed offset of the reference's centre keeps the move reversible; a large one (half
    # a posterior sd per coefficient, in a Gaussian model where the correction itself is 0)
    # lowers the acceptance but not the target
    draws, acc, X, y = _chain(ShiftMove, offset=np.array([0.5, -0.5]) * 0.18)
    mean, cov = _closed_form(X, y, SIGMA**2 + RHO**2)
    z, ess = _z_scores(draws, mean, cov)
    assert np.all(np.abs(z) < 4.5), z
    z_pi, _ = _z_scores(draws, *_closed_form(X, y, SIGMA**2))
    assert np.any(np.abs(z_pi) > 4.5), z_pi


def test_mean_correction_raises_the_acceptance():
    # ill-conditioned logistic (feature correlation 0.99), n = 1000, d = 20: the centred-at-
    # the-mean reference is accepted about 0.90 of the time, the one at the mode about 0.78
    prob, _, _ = _glm_problem(1000, "bernoulli", d=20, corr=0.99)
    kernel = SplitGibbsKernel(prob, rho=0.1)
    acc = {}
    for corrected in (True, False):
        rng = np.random.default_rng(1)
        start = laplace_start(kernel, np.zeros(20), rng)
        move = ShiftMove(kernel, start.mode, start.chol, mean_correction=corrected)
        _, accs = _alternate(kernel, move, kernel.init(start.theta, rng), rng, 400)
        acc[corrected] = float(np.mean(accs[50:]))
    assert acc[True] > acc[False] + 0.06, acc


def test_mean_offset_difference_path_and_overflow(monkeypatch):
    from pymc_sgs import shift

    prob, _, _ = _glm_problem(50, "poisson", d=3)
    kernel = SplitGibbsKernel(prob, rho=0.1)
    start = laplace_start(kernel, np.zeros(3), np.random.default_rng(0))
    closed = shift.laplace_mean_offset(kernel, start.mode, start.chol)
    # the central difference of U'' (for families without a closed-form third derivative)
    # agrees with the closed form
    monkeypatch.setattr(type(kernel.families[0]), "taylor_derivatives", lambda *a, **k: None)
    differenced = shift.laplace_mean_offset(kernel, start.mode, start.chol)
    np.testing.assert_allclose(differenced, closed, rtol=1e-6)
    assert np.linalg.norm(closed) > 1e-3
    # exp overflows at a linear predictor of 800: no correction rather than a non-finite centre
    off = shift.laplace_mean_offset(kernel, np.array([800.0, 0.0, 0.0]), start.chol)
    assert np.all(off == 0.0)
