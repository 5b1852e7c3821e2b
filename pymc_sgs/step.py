"""``SplitGibbs``: the PyMC step method, a thin adapter around the kernel."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pymc as pm
from pymc.step_methods.compound import StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator

from .backends import Backend, LocalBackend
from .centering import center_problem
from .detect import detect_split_problem
from .detect_multinomial import has_categorical_likelihood
from .graph import UnsupportedModelError
from .kernel import (
    SGSInfo,
    SGSState,
    SplitGibbsKernel,
    validate_alpha,
    validate_rho,
    validate_theta_solver,
)
from .mixed.step import MixedSplitGibbs, has_mixed_terms, takes_student_t_glm
from .nuisance import slice_sample
from .propriety import check_proper
from .rho import RhoTuner, pilot_rho, validate_bias_tol
from .shards import ShardKernel, validate_n_shards
from .shift import ShiftMove, validate_shift, validate_shift_moves, validate_shift_relaxation
from .start import laplace_applies, laplace_start, validate_init
from .step_base import (  # noqa: F401 - SamplerFeedbackWarning and AUTO_RHO_START re-exported
    AUTO_RHO_CHOICES,
    AUTO_RHO_START,
    BaseSplitGibbs,
    SamplerFeedbackWarning,
    _data_fingerprints,
    _flat_options,
    _validate_sweep_every,
    _validate_weight_options,
    _warn_user,
    check_weights_needed,
    is_zero_rho,
)
from .step_multinomial import CategoricalSplitGibbs
from .validate import check_bool

#: largest rho="auto" chooses, in units of the linear predictor's natural scale
#: (:meth:`pymc_sgs.families.Family.eta_scale`): a nearly flat likelihood certifies any rho,
#: and beyond this the z-draws are noise on a scale where the split buys nothing more
AUTO_RHO_MAX = 10.0
#: tuning draws sweep_every="auto" needs before it thins the sweeps: the shift move tunes its
#: moves and relaxation over the first windows of tuning
MIN_TUNE_FOR_THINNING = 100
#: draws per sweep with sweep_every="auto" after tuning: a shift move costs a fraction of a
#: sweep, and with the move doing the mixing the draws between sweeps are about as good as
#: swept ones (benchmarks/results/compare_sweep_every.md, benchmarks/sweep_cost.py), so 4
#: saves most of the sweeps' cost
AUTO_SWEEP_EVERY = 4

__all__ = ["SplitGibbs", "BlockSplitGibbs", "SamplerFeedbackWarning"]


@dataclass_state
class SplitGibbsState(StepMethodState):
    # per-chain state: restored between sequentially sampled chains
    z: Any
    z_mode: Any
    log_weight: float
    atz: Any
    feedback: Any
    tune: bool
    rho_tuner: Any
    rho_check: Any
    nuisance_out: Any
    shift_move: Any


class SplitGibbs(BaseSplitGibbs):
    """Split Gibbs sampler (SGS) for the coefficients of a GLM.

    Reads the model graph, finds the observed GLM term(s) and the Gaussian
    priors of their coefficients, and updates the coefficients ``theta``
    together with one auxiliary ``z_i`` per observation by exact Gibbs sweeps
    of the split model ``Pi_rho`` (Vono, Paulin & Doucet 2022, Algorithm 1).
    Variables it does not own (e.g. a Normal likelihood's sigma) are left to
    the step methods PyMC assigns to them (NUTS), in a compound step.

    Parameters
    ----------
    vars : list, optional
        Coefficient variables to own. Default: every free variable of the
        linear predictor(s), plus the free nuisance parameters of split
        likelihoods (which must be included when ``vars`` is given).
    rho : "auto", "tuned", float or array
        Coupling between ``z`` and the linear predictor (same units as the
        linear predictor); scalar or one value per observation. The split
        chain targets ``pi_rho``, whose bias vanishes as ``rho -> 0`` and whose
        mixing slows down as rho shrinks. ``0``: no split; theta moves by the
        shift move alone, which then targets the posterior itself (a
        Metropolis–Hastings chain with the mean-corrected Laplace proposal,
        mixed with a Student-t for the tails, over-relaxed where it is accepted
        often; no z-sweeps, no bias, importance weights all 1). It needs smooth
        log-concave likelihoods, the Cholesky theta-step and the default
        in-process back end. ``"auto"`` (default): ``0`` wherever it can run
        (with ``shift=True`` and at least one split term);
        elsewhere as ``"tuned"``. The choice reads the model and the options
        only, so every chain of a run makes the same one; ``repr`` shows it.
        ``"tuned"``: always the split model, with 0.9 times the largest rho
        whose importance weights certify ``bias_tol`` under the Laplace
        approximation of the posterior (:func:`pymc_sgs.rho.pilot_rho`), a
        deterministic function of the data computed once, so every chain
        targets the same ``pi_rho``; the tuning draws check the certificate
        and warn when it fails. Where that approximation is unavailable (kinked
        or non-log-concave likelihoods, ``theta_solver="cg"``) each chain adapts
        rho over windows of tuning draws from 0.5 (:class:`pymc_sgs.rho.RhoTuner`).
        Bounded by ten natural scales of the linear predictor. The rho in use
        is the ``rho`` sampler stat (0 without a split). The split model's
        options (``alpha``, ``sweep_every``, ``log_weights``, ``bias_tol``)
        have no effect without a split.
    bias_tol : float
        For ``rho="tuned"`` (and ``"auto"`` where it splits): target bound, in posterior standard deviations, on
        the bias of any posterior expectation (``sd(w / E w) <= bias_tol``).
    alpha : float
        Over-relaxation of both Gibbs blocks, in ``(-1, 1)``. ``0`` gives plain
        SGS (exact z draws by rejection); negative values (default ``-0.99``)
        over-relax theta with Adler's update and move z by over-relaxed MH
        around its Laplace approximation, which keeps ``Pi_rho`` invariant and
        mixes much faster at small rho (docs: "How SGS works").
    exact : bool or ExactOptions
        Target ``pi`` exactly: every draw is an MH step whose proposal is
        :attr:`ExactOptions.sweeps` over-relaxed SGS sweeps (z-first or
        theta-first at random, which makes it ``Pi_rho``-reversible), accepted
        with probability ``min(1, w(theta') / w(theta))``. Applies after tuning
        (tuning draws sample ``pi_rho`` to burn in and tune rho). ``True`` is
        ``ExactOptions()``. Without a split (``rho=0``, or ``rho="auto"`` where
        it makes none) the draws target ``pi`` already and ``exact`` changes
        nothing.
    shift : bool or ShiftOptions
        Add, before every sweep, a Metropolis–Hastings move of ``(theta, z)``
        along ``(delta, A delta)``, which leaves the split model invariant and
        proposes from the Laplace approximation of the posterior, centred at
        its first-order mean rather than its mode (:mod:`pymc_sgs.shift`):
        theta then decorrelates in about one accepted move instead of the
        ``1 / (rho sqrt(U''))`` sweeps of plain SGS, without changing the
        target, the weights or the bias certificate. Default ``True``
        (``ShiftOptions()``: moves per sweep tuned from the acceptance, one
        over-relaxed move where the proposal is accepted >= 90% of the time,
        and after tuning a z/theta sweep on every 4th draw only, the shift move
        making the others; see :class:`~pymc_sgs.ShiftOptions`). Applies where
        the Laplace approximation is available (see ``init``) and
        ``exact=False``. Sampler stats ``shift_accept``, ``shift_moves``,
        ``shift_beta`` and ``swept``.
    log_weights : bool or int
        Record ``log_weight = log pi(theta) - log pi_rho(theta)`` (up to a
        constant) for every swept draw (``True``), for
        :func:`pymc_sgs.psis_summary` to measure and remove the rho-bias; they
        cost 8 to 16 likelihood evaluations per row and sweep. An integer ``k``
        records them on the first swept draw at least k draws after the last
        weighted one, after tuning (the others get nan; :func:`psis_summary`
        uses the weighted draws): since successive draws are correlated,
        thinning the weights by less than about half the integrated
        autocorrelation time loses little precision and saves most of their
        cost. ``False`` skips them (incompatible with ``rho="auto"`` and
        ``exact=True``).
    init : {"laplace", "point"}
        Where each chain's burn-in starts. ``"laplace"`` (default): at the
        chain's first step, move the coefficients to a draw from the Laplace
        approximation ``N(theta*, H^-1)`` of the posterior (Newton from
        PyMC's initial point, with every prior and likelihood parameter at
        its current value; :mod:`pymc_sgs.start`), so burn-in starts inside
        the posterior instead of drifting there at a small rho. Falls back to
        the initial point when it does not apply (kinked or non-log-concave
        likelihoods, ``theta_solver="cg"``) or the Newton search fails. With a
        sharded back end the Newton passes run on the shards. ``"point"``:
        start at PyMC's initial point.
    center : bool
        Centre the split potentials at the MAP before sampling
        (:func:`pymc_sgs.centering.center_problem`): ``pi`` is unchanged,
        ``pi_rho`` becomes the smoothing of potentials whose minima all sit at
        the MAP (the paper's assumption). Needs a proper Normal prior on every
        coefficient, fixed Normal sigmas and no hierarchical prior scales.
    backend : Backend, optional
        Where the kernel runs and how it stores and solves:
        :class:`~pymc_sgs.backends.LocalBackend` (default, this process;
        ``theta_solver`` and ``dtype`` are its options) or
        :class:`~pymc_sgs.backends.DaskBackend` (the z-block on row shards
        held by Dask workers; docs: "Distributed sampling").
    model : pm.Model, optional
    rng : numpy.random.Generator or seed, optional
        PyMC replaces it by a per-chain Generator through :meth:`set_rng`.

    The keywords ``exact_sweeps``, ``shift_moves``, ``shift_relaxation``,
    ``sweep_every``, ``theta_solver``, ``dtype``, ``split``, ``n_shards``,
    ``split_gaussian`` and ``blocked`` of the previous release still work,
    with a ``FutureWarning`` naming their replacement (:mod:`pymc_sgs.options`);
    the paper's splitting strategy 2 is :class:`BlockSplitGibbs`.

    Notes
    -----
    Normal-identity likelihoods are never split: they are Gaussian in theta
    and enter the theta-step exactly. When their sigma is a free variable,
    PyMC's NUTS updates sigma given theta while SplitGibbs updates (z, theta)
    given sigma. Both are exact conditional updates of the joint
    ``Pi_rho(theta, z, sigma)`` (sigma's conditional does not involve z), so
    the compound chain leaves it invariant and the theta-marginal is the same
    ``pi_rho`` as with sigma fixed; with no split terms it is exactly ``pi``.
    Nuisance parameters of split likelihoods (NegativeBinomial ``alpha``, Gamma
    shape, StudentT ``nu`` and ``sigma``) are different: their conditional
    ``p(phi) prod_i p(y_i | z_i, phi)`` involves ``z``, so SplitGibbs owns them
    and, before each sweep, updates each free one by slice sampling that
    conditional in the variable's transformed space
    (:func:`pymc_sgs.nuisance.slice_sample`); in exact mode the conditional is
    tilted by the importance weight ``w(theta, phi)``. Giving such a variable
    to another step method raises ``ValueError`` at SplitGibbs's next step.
    StudentT potentials are not convex: their ``z_i`` move by
    Metropolis–Hastings (:func:`pymc_sgs.conditionals.mh_z_move`) even when
    ``alpha=0``, and ``z_accept`` reports the acceptance.
    Hierarchical Normal priors (random effects ``u ~ Normal(0, tau)`` with
    ``tau`` free) work the same way: NUTS updates ``tau`` given ``u``, and
    SplitGibbs refactors the precision of ``theta | z`` when ``tau`` changed.
    The rate ``b`` of an asymmetric Laplace likelihood (quantile regression)
    is different: its conditional involves the split variables, so when it is
    a function of a free variable SplitGibbs owns that variable and
    slice-samples it given ``z`` (:mod:`pymc_sgs.free_rate`).

    Sampler stats (in ``idata.sample_stats``): ``rho``; ``z_proposals``, the
    mean number of Gaussian proposals per exact ``z_i`` draw (``alpha=0``);
    ``z_accept``, the fraction of the over-relaxed z-moves accepted
    (``alpha != 0``); ``log_weight``, the draw's log importance
    weight (nan when ``log_weights=False``); ``exact_accept``, the acceptance
    probability of the pi-correction (exact mode; nan otherwise);
    ``shift_accept``, ``shift_moves`` and ``shift_beta``, the mean acceptance,
    the number and the persistence (negative: over-relaxed) of the shift moves
    made before the sweep (nan where none was made); ``swept``, 1 where the
    draw made a z/theta sweep and 0 where the shift move alone made it
    (``sweep_every``).

    References
    ----------
    .. [1] M. Vono, D. Paulin, A. Doucet (2022). Efficient MCMC sampling with
       dimension-free convergence rate using ADMM-type splitting. JMLR 23.
    """

    _state_class = SplitGibbsState

    def __new__(cls, *args, **kwargs):
        # a pm.Categorical likelihood (multinomial logit) has its own step: same arguments
        if (
            cls is SplitGibbs
            and "_unpickle" not in kwargs
            and (
                kwargs.get("model") is not None
                or pm.Model.get_context(error_if_none=False) is not None
            )
        ):
            if has_categorical_likelihood(kwargs.get("model")):
                return CategoricalSplitGibbs(*args, **kwargs)
            vars_ = kwargs.get("vars", args[0] if args else None)
            rho = kwargs.get("rho", "auto")
            model = pm.modelcontext(kwargs.get("model"))
            if has_mixed_terms(model, vars_, rho=rho):
                return MixedSplitGibbs(*args, **kwargs)
            if takes_student_t_glm(model, vars_, rho=rho, options=kwargs):
                try:
                    return MixedSplitGibbs(*args, **kwargs)
                except UnsupportedModelError:
                    # a prior the mixed-model reader does not take (Laplace, MvNormal, a
                    # hierarchical scale, ...): the GLM path's split model samples it
                    pass
        return super().__new__(cls, *args, **kwargs)

    def _setup(
        self,
        vars,
        *,
        rho,
        alpha,
        bias_tol,
        exact,
        exact_sweeps,
        log_weights,
        model,
        rng,
        split_gaussian,
        theta_solver,
        dtype,
        backend,
        split,
        n_shards,
        center,
        init,
        shift,
        shift_moves,
        shift_relaxation,
        sweep_every,
    ):
        """The constructor proper, on the flat options of :func:`_flat_options`."""
        # parameters are checked before the model is read, so mistakes surface at once
        if backend is None:
            backend = LocalBackend()
        if not isinstance(backend, Backend):
            raise ValueError(
                "backend must be a pymc_sgs back end such as pymc_sgs.LocalBackend() or "
                f"pymc_sgs.DaskBackend(client); received {type(backend).__name__}."
            )
        if not backend.per_row_rho and np.ndim(rho) != 0:
            raise ValueError(
                f"rho must be 'auto' or a scalar with {backend.describe()} (the rows live on "
                f"the shards); received an array of shape {np.shape(rho)}."
            )
        #: rho="auto" or "tuned": the split model's rho comes from bias_tol
        self.auto_rho = isinstance(rho, str) and rho in AUTO_RHO_CHOICES
        #: how the user asked for a rho from bias_tol, in messages ('auto' or 'tuned')
        self.rho_name = rho if self.auto_rho else "auto"
        #: rho=0: no split, the shift move samples the posterior itself (_direct_step);
        #: rho="auto" sets it below where the model allows
        self.direct = is_zero_rho(rho)
        #: rho="auto" chose no split
        self.auto_direct = False
        if not self.auto_rho and not self.direct:
            if isinstance(rho, str) or rho is None:
                raise ValueError(
                    "rho must be 'auto', 'tuned', a positive coupling such as rho=0.2 (in "
                    f"units of the linear predictor) or 0 (no split); received {rho!r}."
                )
            validate_rho(rho, np.size(rho))
        validate_alpha(alpha)
        validate_theta_solver(theta_solver)
        if dtype not in ("float64", "float32"):
            raise ValueError(
                f"dtype must be 'float64' or 'float32' (storage of the design for the compiled "
                f"pass); received {dtype!r}."
            )
        exact = check_bool("exact", exact)
        center = check_bool("center", center)
        _check_split_args(split, n_shards, rho, alpha, exact)
        self.init = validate_init(init)
        self.shift = validate_shift(shift)
        self.shift_moves = validate_shift_moves(shift_moves)
        self.shift_relaxation = validate_shift_relaxation(shift_relaxation)
        self.sweep_every = _validate_sweep_every(
            sweep_every,
            "shift=False"
            if not self.shift
            else "exact=True (which does not use the shift move)"
            if exact
            else None,
        )
        self.split = split
        bias_tol = validate_bias_tol(bias_tol)
        # whether a tuned rho needs the weights is known once rho="auto" has chosen (below)
        self.weight_every = _validate_weight_options(exact, exact_sweeps, log_weights, False)
        model = pm.modelcontext(model)
        self.detected = detect_split_problem(model, vars, split_gaussian=split_gaussian)
        self.free_rates = list(self.detected.free_rates)
        if self.free_rates and exact:
            raise ValueError(
                "exact=True is not available when the rate b of an AsymmetricLaplace likelihood "
                f"is free ({[r.value_name for r in self.free_rates]}): its update targets the "
                "split model. Use exact=False (the default) with psis_summary, or fix b."
            )
        owned = [name for name, _ in self.detected.nuisance_vars] + [
            r.value_name for r in self.free_rates
        ]
        if center:
            self.detected = _centered(self.detected, owned)
        if isinstance(backend, LocalBackend):
            # a back end handed more rows than the model's (DaskBackend(X=...)) is checked by
            # none here: a subset of the rows can be separated when all of them are not
            _check_proper(self.detected)
        # the data the model reads (pm.Data and arrays it holds without copying, whatever
        # their dtype or layout): the kernel copied or factored them, so a later change would
        # leave it stale
        self._data_fingerprints = _data_fingerprints(model)
        self._check_data = True
        obstacle = _direct_obstacle(self.detected, backend, split, self.shift)
        if self.direct and obstacle is not None:
            raise ValueError(obstacle)
        # rho="auto" skips the split wherever rho=0 can run (a choice from the model and the
        # options only, the same for every chain); the kernel decides the last condition, a
        # Cholesky theta-step
        may_skip_split = (
            isinstance(rho, str)
            and rho == "auto"
            and bool(self.detected.problem.n_split)
            and obstacle is None
        )
        # rho=0 never sweeps: its kernel holds the rows, the prior and the Gaussian terms, and
        # a coupling that is never used
        start_rho = (
            1.0 if self.direct or may_skip_split else AUTO_RHO_START if self.auto_rho else rho
        )
        self.backend = backend
        if owned and not (isinstance(backend, LocalBackend) and backend.n_shards is None):
            names = owned
            raise ValueError(
                f"the likelihood parameters {names} are updated by SplitGibbs given z, which "
                f"needs every row in this process; received backend={backend.describe()}. Use "
                "the default LocalBackend(), or fix these parameters."
            )
        if split == "shards":
            _check_shards_model(self.detected, owned, backend, theta_solver, dtype)
            self.kernel = ShardKernel(self.detected.problem, rho, n_shards)
        else:
            self.kernel = backend.build_kernel(
                self.detected.problem,
                start_rho,
                alpha,
                bool(log_weights),
                theta_solver=theta_solver,
                dtype=dtype,
            )
        if may_skip_split and self.kernel.theta_solver == "cholesky":
            # the shift move alone samples the posterior exactly here: no split, no rho-bias;
            # built at the coupling of an explicit rho=0, so that both give the same draws
            self.direct = self.auto_direct = True
            self.auto_rho = False
        elif may_skip_split:
            # a matrix-free theta-step keeps the split, from rho="auto"'s starting coupling
            # (a cheap change without a factorisation)
            self.kernel.set_rho(AUTO_RHO_START)
        if self.direct and self.kernel.theta_solver != "cholesky":
            raise ValueError(
                "rho=0 proposes from the d x d Laplace approximation of the posterior; here "
                f"the theta-step is matrix-free (theta_solver={theta_solver!r}, d="
                f"{self.detected.problem.d}, or a sparse design). Use rho='tuned' (the split "
                "model), which samples this model."
            )
        check_weights_needed(self.auto_rho, log_weights)
        # without a split the draws are exact already: exact=True asks for nothing more
        self.exact = bool(exact) and not self.direct
        self.exact_sweeps = int(exact_sweeps)
        self.bias_tol = bias_tol
        self.vars = [model[name] for name in self.detected.value_var_names]
        self.vars = [model.rvs_to_values.get(v, v) for v in self.vars]
        self._nuisance_names = [name for name, _ in self.detected.nuisance_vars]
        # for messages: the model's names of value variables (alpha, not alpha_log__)
        self._rv_names = {v.name: model.values_to_rvs[v].name for v in model.value_vars}
        by_name = {v.name: v for v in model.value_vars}
        self.vars += [by_name[name] for name in self._nuisance_names]
        # free AsymmetricLaplace rates are updated here too (pymc_sgs.free_rate)
        self.vars += [by_name[r.value_name] for r in self.free_rates]
        self._free_sigma = any(s is not None for s in self.detected.sigma_sources)
        # values that other updates change between draws, on which the posterior of theta
        # (and so its Laplace approximation) depends
        self._hyper = bool(
            self._free_sigma or self.detected.prior_sources or self.detected.nuisance_vars
        )
        # sweep_every="auto" thins the sweeps only where the shift move can make the draws in
        # between: with no split term a sweep is an exact draw of theta, and a prior scale,
        # sigma or likelihood parameter updated between draws moves the posterior away from
        # the Laplace approximation the move was built on
        self._thinning_helps = bool(
            self.detected.problem.n_split
            and not self.detected.prior_sources
            and not self._free_sigma
            and not owned
        )
        self.tune = True
        # rho="auto" from the Laplace approximation: computed at the first chain's start and
        # shared by every later chain of this step object (one target per run)
        self._auto_rho_value = None
        self._reset_chain_state()
        self.rng = get_random_generator(rng)

    def __repr__(self) -> str:
        p = self.detected.problem
        # a likelihood parameter the step samples has no value to show, only its variable
        free = {}
        for index, key, _, names in self.detected.nuisance_sources:
            free.setdefault(index, {})[key] = ", ".join(self._rv_names.get(n, n) for n in names)
        terms = []
        for i, t in enumerate(p.split_terms):
            fam = t.family
            params = "".join(
                f", {k}={free[i][k]}" if k in free.get(i, {}) else f", {k}={v:.4g}"
                for k, v in getattr(fam, "params", {}).items()
            )
            terms.append(
                f"{t.name}: {fam.name}({fam.link}{params})"
                if hasattr(fam, "params")
                else f"{t.name}: {fam!r}"
            )
        gauss = ", ".join(t.name for t in p.gaussian_terms)
        return (
            # a back end given the full data knows more rows than the model's head
            f"SplitGibbs(vars={self.detected.value_var_names}, d={p.d}, "
            f"n_split={self.kernel.n}, "
            f"split=[{', '.join(terms)}], gaussian=[{gauss}]"
            + (f", rho={self._rho_repr()}" if p.n_split else "")
            + f", backend={self.backend.describe()}"
            + (
                f", nuisance={[self._rv_names.get(n, n) for n in self._nuisance_names]}"
                if self._nuisance_names
                else ""
            )
            + ")"
        )

    def _rho_repr(self) -> str:
        if self.direct:
            return "0 (auto: no split)" if self.auto_direct else "0 (no split)"
        if self.auto_rho and self._auto_rho_value is None:
            return "'auto'"
        rho = np.asarray(self.kernel.rho)
        if rho.ndim:
            return f"per-row [{rho.min():.3g}, {rho.max():.3g}]"
        return f"{float(rho):.4g}" + (" (auto)" if self.auto_rho else "")

    # ------------------------------------------------------------------ mapping
    def _theta_from_point(self, point) -> np.ndarray:
        return np.concatenate(
            [np.asarray(point[p.name], dtype=float).ravel() for p in self.detected.problem.params]
        )

    def _theta_to_point(self, theta, point) -> dict:
        new = dict(point)
        for p in self.detected.problem.params:
            new[p.name] = theta[p.start : p.stop].reshape(p.shape).astype(p.dtype)
        return new

    # --------------------------------------------------------------------- step
    def step(self, point):
        if self.direct:
            return self._direct_step(point)
        theta = self._theta_from_point(point)
        if (
            self.rho_tuner is not None
            and self.z_mode is not None
            and float(self.kernel.rho) != self.rho_tuner.rho
        ):
            # sequential chains restore the tuner; keep the kernel in step with it
            self.kernel.set_rho(self.rho_tuner.rho)
            self.log_weight, self.atz = float("nan"), None
        self._read_hyperparameters(point)
        rate_values = {}
        for fr in self.free_rates:
            sl = self.detected.problem.term_slices()[fr.term_index]
            if self.z is not None:
                # Gibbs update of b | z (the split model's conditional), before theta | z
                rate_values[fr.value_name], rates = fr.update(point, self.z[sl], self.rng)
            else:
                rates = fr.rates(point[fr.value_name])
            self.kernel.rows.set_term_rate(fr.term_index, rates)
        if self.z_mode is None:
            theta = self._start_chain(theta)
            state = self.kernel.init(theta, self.rng)
        else:
            state = SGSState(
                theta=theta, z=self.z, z_mode=self.z_mode, log_weight=self.log_weight, atz=self.atz
            )
        if self._nuisance_names:
            point = self._update_nuisance(point, state)
            # the weight of theta depends on the nuisance parameters; A^T z does not
            state = state._replace(log_weight=float("nan"))
        shift_accept = shift_moves = shift_beta = float("nan")
        if self.shift_move is not None:
            # Pi_rho-invariant joint move of (theta, z) (pymc_sgs.shift), before the sweep
            state, shift_accept, shift_moves, shift_beta = self._run_shift_move(state)
        swept = self.feedback["iterations"] % self._sweep_stride() == 0
        self.feedback["iterations"] += 1
        if not swept:
            # the shift move alone this draw (sweep_every): no z-refresh, no weight
            info = SGSInfo(z_proposals=float("nan"), z_accept=float("nan"))
        elif self.exact and not self.tune:
            # tuning draws are discarded: they burn in on pi_rho, which is much faster
            # than an MH chain started in the tails, and they tune rho
            state, info = self.kernel.exact_step(state, self.rng, self.exact_sweeps)
        else:
            weights = None
            if self.weight_every > 1 and not self.tune:
                # the first swept draw at least weight_every draws after the last weighted one:
                # counting draws alone would miss every sweep when the two strides do not align
                weights = self.feedback["draws"] >= self.feedback["next_weight"]
                if weights:
                    self.feedback["next_weight"] = self.feedback["draws"] + self.weight_every
            state, info = self.kernel.sweep(state, self.rng, weights=weights)
        self.z, self.z_mode, self.log_weight, self.atz = (
            state.z,
            state.z_mode,
            state.log_weight,
            state.atz,
        )
        stats = {
            "rho": float(np.mean(self.kernel.rho)),
            "z_proposals": float(info.z_proposals),
            "z_accept": float(info.z_accept),
            "log_weight": float(info.log_weight),
            "exact_accept": float(info.exact_accept),
            "shift_accept": shift_accept,
            "shift_moves": shift_moves,
            "shift_beta": shift_beta,
            "swept": float(swept),
        }
        if self.tune and self.rho_tuner is not None:
            new_rho = self.rho_tuner.update(info.log_weight, swept)
            if new_rho is not None:
                self.kernel.set_rho(new_rho)
                # the weight of theta and A^T z / rho^2 both depend on rho
                self.log_weight, self.atz = float("nan"), None
        if self.tune and self.rho_check is not None and np.isfinite(info.log_weight):
            self.rho_check.append(float(info.log_weight))
        self._finish_draw(stats, state.theta, point)
        new_point = self._theta_to_point(state.theta, point)
        new_point.update(rate_values)
        return new_point, [stats]

    def _read_hyperparameters(self, point) -> None:
        """The kernel at the point's prior scales, Normal sigmas and likelihood parameters;
        the data and the owned likelihood parameters checked against what they were."""
        if self.detected.prior_sources:
            self.kernel.set_prior_precision(self.detected.prior_precision(point))
        if self._free_sigma:
            self.kernel.set_sigmas(self.detected.sigmas(point))
        if self._check_data:
            self._check_data_unchanged()
            self._check_data = False
        if self._nuisance_names:
            self._check_nuisance_unchanged(point)
            self._set_families(point)

    def _finish_draw(self, stats, theta, point) -> None:
        """Count the draw (tuning) or check the chain's health; keep the likelihood
        parameters this step set, to detect another step changing them."""
        if self.tune:
            self.feedback["tune_draws"] += 1
        else:
            self._check_health(stats, theta)
        if self._nuisance_names:
            self.nuisance_out = {nm: np.array(point[nm], copy=True) for nm in self._nuisance_names}

    def _new_shift_move(self, start, recenter: bool = True) -> ShiftMove:
        """The chain's shift move, proposing from the Laplace approximation ``start``; frozen
        at once when there is no tuning (tune=0)."""
        move = ShiftMove(
            self.kernel,
            start.mode,
            start.chol,
            moves=self.shift_moves,
            relaxation=self.shift_relaxation,
            recenter=recenter,
            # rho=0 proposes for the posterior itself, whose skewed tail a Gaussian alone
            # leaves under-covered (benchmarks/results/laplace_hard.md)
            tail_weight=DIRECT_TAIL_WEIGHT if self.direct else 0.0,
            tail_df=DIRECT_TAIL_DF,
        )
        if not self.tune:
            move.freeze()
        return move

    def _run_shift_move(self, state):
        """The draw's shift moves (recentred first during tuning, tuned after):
        ``(state, acceptance, moves, beta)`` (moves and beta as they were for this draw)."""
        self._recentre_shift_move(state)
        beta = float(self.shift_move.beta)
        state, accept = self.shift_move.run(state, self.rng)
        moves = float(self.shift_move.moves)
        if self.tune:
            self.shift_move.tune()
        return state, accept, moves, beta

    def _recentre_shift_move(self, state) -> None:
        """During tuning, at draws :data:`RECENTRE_AT` of a model whose hyperparameters move
        between draws (free likelihood parameters, prior scales, a Normal term's sigma), the
        shift move's proposal becomes the Laplace approximation at their current values (it
        was made at PyMC's initial values; an alpha or a scale off by a factor of a few left
        the proposal's spread wrong and its acceptance at 0.3). After tuning it stays fixed."""
        if not (self.tune and self._hyper and self.feedback["iterations"] in RECENTRE_AT):
            return
        start = laplace_start(self.kernel, state.theta, self.rng)
        if start.theta is not None:
            self.shift_move.recentre(start.mode, start.chol)

    # ------------------------------------------------------------------ rho = 0
    def _direct_step(self, point):
        """A draw of ``rho=0``: shift moves on ``(theta, A theta + o)``, no sweep.

        With ``z = A theta + o`` the residuals are zero, so the shift move's target is the
        posterior itself and its acceptance ratio the exact one; it proposes from the
        mean-corrected Laplace approximation (pCN, tuned as in the split model's runs).
        Free likelihood parameters (NegativeBinomial ``alpha``, Gamma ``alpha``) are first
        slice-sampled given theta from the likelihood at ``A theta + o`` (a Gibbs scan of
        the posterior itself); the shift move's ratio uses their current values, its
        proposal the Laplace approximation at their values at the last recentring
        (:meth:`_recentre_shift_move`).
        """
        theta = self._theta_from_point(point)
        self._read_hyperparameters(point)
        if self.z_mode is None:
            start = laplace_start(self.kernel, theta, self.rng)
            if start.theta is None:
                raise ValueError(
                    "rho=0 proposes from the Laplace approximation of the posterior, which is "
                    f"not available here ({start.reason}). Use rho='tuned' (the split model)."
                )
            # zero residuals: nothing to recentre on
            self.shift_move = self._new_shift_move(start, recenter=False)
            if self.init == "laplace":
                theta = start.theta
            state = self.kernel.init(theta)
        else:
            state = SGSState(theta=theta, z=self.z, z_mode=self.z_mode)
        if self._nuisance_names:
            # phi | theta from the likelihood itself: z = A theta + o is the linear predictor
            point = self._update_nuisance(point, state)
        state, shift_accept, shift_moves, shift_beta = self._run_shift_move(state)
        self.feedback["iterations"] += 1
        if self.feedback["iterations"] % DIRECT_REFRESH == 0:
            # z = A theta + o afresh: accepted moves add A delta, whose rounding would drift
            state = state._replace(z=self.kernel.init(state.theta).z)
        self.z, self.z_mode = state.z, state.z_mode
        nan = float("nan")
        stats = {
            "rho": 0.0,
            "z_proposals": nan,
            "z_accept": nan,
            # log pi - log pi_0 = 0: the chain targets pi
            "log_weight": 0.0,
            "exact_accept": nan,
            "shift_accept": shift_accept,
            "shift_moves": shift_moves,
            "shift_beta": shift_beta,
            "swept": 0.0,
        }
        self._finish_draw(stats, state.theta, point)
        return self._theta_to_point(state.theta, point), [stats]

    # ------------------------------------------------------------- chain start
    def _start_chain(self, theta):
        """A chain's first step: the Laplace start, the shift move and rho="auto".

        The Laplace approximation (:func:`pymc_sgs.start.laplace_start`) gives the chain's
        starting draw (``init="laplace"``), the shift move's proposal, and the rho of
        ``rho="auto"`` (:func:`pymc_sgs.rho.pilot_rho`). That rho is a deterministic function
        of the data and of the hyperparameters at PyMC's initial point, computed once per
        step object, so every chain of a run, in any process, targets the same ``pi_rho``;
        the tuning draws then check its certificate (:meth:`stop_tuning`). Without the
        approximation (kinked or non-log-concave likelihoods, ``theta_solver="cg"``) each
        chain adapts rho over windows of tuning draws (:class:`pymc_sgs.rho.RhoTuner`).

        Returns the chain's starting coefficients.
        """
        use_shift = self.shift and not self.exact
        untuned = not self.tune  # tune=0: stop_tuning came before the first draw
        start = None
        if (self.init == "laplace" or use_shift or self.auto_rho) and isinstance(
            self.kernel, SplitGibbsKernel
        ):
            start = laplace_start(self.kernel, theta, self.rng)
        have_laplace = start is not None and start.theta is not None
        if have_laplace and use_shift:
            # a sharded kernel's passes over the rows run on its shards
            self.shift_move = self._new_shift_move(start)
        if have_laplace and self.init == "laplace":
            # burn-in (or, with tune=0, the first draw) starts inside the posterior
            theta = start.theta
        if not (self.auto_rho and self.detected.problem.n_split):
            return theta
        rho_max = self._rho_max()
        if have_laplace:
            if self._auto_rho_value is None:
                rho = (
                    pilot_rho(self.kernel, start.mode, start.chol, self.bias_tol, rho_max=rho_max)
                    * RhoTuner.safety
                )
                # 4 significant digits: processes that repeat the computation agree exactly
                self._auto_rho_value = float(f"{min(rho, rho_max):.4g}")
            self.kernel.set_rho(self._auto_rho_value)
            self.rho_check = []
            if untuned:
                _warn_user(
                    f"SplitGibbs: tune=0, so rho={self.rho_name!r} is rho={self._auto_rho_value:.4g} from "
                    "the Laplace approximation, unchecked against the chain's importance "
                    "weights, and there is no burn-in (the chain starts at a draw from the "
                    "Laplace approximation). Use tune=500 or more to check the bias "
                    "certificate; psis_summary still measures and removes the bias.",
                )
            return theta
        # no Laplace approximation: this chain adapts its own rho over tuning windows
        self.rho_tuner = RhoTuner(AUTO_RHO_START, self.bias_tol, max_rho=rho_max)
        self.kernel.set_rho(AUTO_RHO_START)
        if untuned:
            why = start.reason if start is not None else "not available for this model"
            _warn_user(
                f"SplitGibbs: tune=0 with rho={self.rho_name!r} leaves rho at {AUTO_RHO_START}, "
                f"uncertified: the Laplace approximation that sets rho without tuning draws "
                f"is unavailable ({why}). Use tune=500 or more, or pass a fixed rho.",
            )
        return theta

    def _rho_max(self) -> float:
        """Largest rho for rho="auto": :data:`AUTO_RHO_MAX` natural scales of the predictor."""
        terms = self.detected.problem.split_terms
        return AUTO_RHO_MAX * max(
            f.eta_scale(t.trials) for f, t in zip(self.kernel.families, terms)
        )

    # ------------------------------------------------------- nuisance parameters
    def _set_families(self, point):
        for index, params in self.detected.nuisance_values(point).items():
            self.kernel.rows.set_family(index, self.kernel.families[index].bind(**params))

    def _check_nuisance_unchanged(self, point):
        if self.nuisance_out is None:
            return
        for nm, value in self.nuisance_out.items():
            if not np.array_equal(np.asarray(point[nm]), value):
                raise ValueError(
                    f"the variable {nm!r} was changed by another step method: it parametrises a "
                    "split likelihood (e.g. NegativeBinomial alpha, StudentT nu or sigma) and "
                    "SplitGibbs updates it given the auxiliary variables z of the split model; "
                    "an update from the original likelihood (e.g. pm.NUTS([...])) targets a "
                    "different distribution. Do not assign it to another step method (pass only "
                    "pymc_sgs.SplitGibbs() for it)."
                )

    def _update_nuisance(self, point, state):
        """Slice-sample every owned nuisance variable from its conditional given z.

        Target: prior (value space, Jacobian included) times the split
        likelihood ``prod_i p(y_i | z_i, phi)`` of the terms it parametrises; in
        exact mode after tuning also times the importance weight ``w(theta, phi)``,
        the conditional of ``phi`` under the tilted target ``Pi_rho w``.
        """
        point = dict(point)
        tilt = self.exact and not self.tune
        theta = self._theta_from_point(point) if tilt else None
        for name, prior_logp in self.detected.nuisance_vars:
            indices = sorted(
                {i for i, _, _, names in self.detected.nuisance_sources if name in names}
            )
            dtype = np.asarray(point[name]).dtype
            # z stays fixed while the parameter is sampled: what does not depend on it is
            # summed once
            term_ll = {
                i: self.kernel.rows.term_nuisance_log_likelihood(i, state.z) for i in indices
            }

            def log_density(x, name=name, indices=indices, dtype=dtype, term_ll=term_ll):
                trial = dict(point)
                trial[name] = np.asarray(x, dtype=dtype)
                lp = float(prior_logp(trial))
                if not np.isfinite(lp):
                    return -np.inf
                values = self.detected.nuisance_values(trial)
                fams = {}
                for i in indices:
                    try:
                        fams[i] = self.kernel.families[i].bind(**values[i])
                    except ValueError:  # e.g. alpha underflowed to 0
                        return -np.inf
                    lp += term_ll[i](fams[i])
                if tilt and np.isfinite(lp):
                    saved = {i: self.kernel.families[i] for i in indices}
                    for i, f in fams.items():
                        self.kernel.rows.set_family(i, f)
                    try:
                        lp += self.kernel.log_weight(theta, state.z_mode)[0]
                    finally:
                        for i, f in saved.items():
                            self.kernel.rows.set_family(i, f)
                return lp if not np.isnan(lp) else -np.inf

            x, _, _ = slice_sample(log_density, float(point[name]), self.rng, width=1.0)
            point[name] = np.asarray(x, dtype=dtype)
            self._set_families(point)
        return point

    def _reset_chain_state(self):
        self.z = self.z_mode = self.atz = None
        self.nuisance_out = None
        self.shift_move = None
        self.log_weight = float("nan")
        self.feedback = self._fresh_feedback()
        # rho="auto": set at the chain's first step (_start_chain)
        self.rho_tuner = None
        self.rho_check = None

    def _sweep_stride(self) -> int:
        """Draws per sweep now: ``sweep_every``, or for ``"auto"`` :data:`AUTO_SWEEP_EVERY`
        after a tuning of at least :data:`MIN_TUNE_FOR_THINNING` draws on a model whose
        hyperparameters stay where the shift move's Laplace approximation was made, else 1.

        The rule reads nothing random, so every chain of a run has the same schedule (a rule on
        the measured acceptance put chains of one run on different strides).
        """
        if self.shift_move is None or self.exact:
            return 1
        if self.sweep_every != "auto":
            return self.sweep_every
        if (
            self.tune
            or self.feedback["tune_draws"] < MIN_TUNE_FOR_THINNING
            or not self._thinning_helps
        ):
            return 1
        return AUTO_SWEEP_EVERY


# a Categorical model's SplitGibbs(...) is a CategoricalSplitGibbs (SplitGibbs.__new__)
SplitGibbs.register(CategoricalSplitGibbs)
SplitGibbs.register(MixedSplitGibbs)


class BlockSplitGibbs(SplitGibbs):
    """Splitting strategy 2 of the paper: one ``z_s in R^d`` per block of rows.

    The rows are cut into ``n_blocks`` contiguous blocks, each with its own auxiliary
    ``z_s`` and ``A_s = I_d`` (Vono, Paulin & Doucet 2022, Section 5.3.1), drawn exactly by
    the d-dimensional rejection sampler of their Proposition 3
    (:class:`pymc_sgs.shards.ShardKernel`). It needs a single smooth log-concave split
    likelihood with fixed parameters, takes a fixed scalar ``rho``, and records no
    importance weights (``log_weight`` is nan); it exists to reproduce the paper's
    comparisons (``examples/paper/strategy_mixing.py``). :class:`SplitGibbs`'s strategy 1
    (one scalar ``z_i`` per row) mixes faster per unit of work on every GLM measured there.

    Parameters
    ----------
    vars : list, optional
    n_blocks : int
        Number of blocks ``b``, at most the number of rows.
    rho : float
        The coupling (a positive scalar).
    model : pm.Model, optional
    rng : numpy.random.Generator or seed, optional
    """

    def __init__(self, vars=None, *, n_blocks: int, rho: float, model=None, rng=None) -> None:
        options = _flat_options(
            type(self).__name__,
            rho=rho,
            bias_tol=0.1,
            alpha=0.0,
            exact=False,
            shift=False,
            log_weights=True,
            init="laplace",
            center=False,
            backend=None,
            model=model,
            rng=rng,
            split_gaussian=False,
            legacy={},
        )
        self._setup(vars, **{**options, "split": "shards", "n_shards": n_blocks})


def _centered(detected, owned=()):
    """The detected model with its split potentials centred at the MAP."""
    if owned:
        raise ValueError(
            f"center=True needs fixed likelihood parameters; {list(owned)} are free variables "
            "updated by SplitGibbs (centring at one value would be wrong at the others). Use "
            "center=False for this model."
        )
    other = [
        f"{t.name} ({t.family!r})"
        for t in detected.problem.split_terms
        # canonical links: the potential is linear in y, so shifting y centres it
        if not t.family.canonical_link
    ]
    if other:
        raise ValueError(
            "center=True supports Bernoulli/Binomial-logit, Poisson-log and Normal terms, whose "
            f"potentials are centred by shifting y; received {other}. Use center=False."
        )
    if detected.prior_sources:
        raise ValueError(
            "center=True needs fixed prior scales; the prior sd of "
            + ", ".join(p.name for p, _, _ in detected.prior_sources)
            + " is a free variable (hierarchical prior). Use center=False for this model."
        )
    problem, _ = center_problem(detected.problem)
    return dataclasses.replace(detected, problem=problem)


def _check_shards_model(detected, owned, backend, theta_solver, dtype):
    """What split='shards' cannot combine with (checked once the model is read)."""
    if owned:
        raise ValueError(
            f"split='shards' needs fixed likelihood parameters; {list(owned)} are free variables "
            "updated by SplitGibbs given z. Use split='observations' for this model."
        )
    if not (isinstance(backend, LocalBackend) and backend.n_shards is None):
        raise ValueError(
            "split='shards' runs its shards in this process; received "
            f"backend={backend.describe()}. Use the default backend, or split='observations'."
        )
    if theta_solver == "cg" or dtype != "float64":
        raise ValueError(
            "split='shards' has its own theta-step and float64 data; received "
            f"theta_solver={theta_solver!r}, dtype={dtype!r}. Leave them at their defaults."
        )
    kinked = [
        t.name
        for t in detected.problem.split_terms
        if t.family.piecewise_linear or not t.family.log_concave
    ]
    if kinked:
        raise ValueError(
            f"split='shards' needs smooth log-concave potentials; received the terms {kinked}. "
            "Use split='observations'."
        )


#: rho=0 recomputes z = A theta + o every this many draws
DIRECT_REFRESH = 100
#: rho=0's shift move: weight and degrees of freedom of the Student-t component of its
#: independence proposal (ShiftMove.tail_weight); a common defensive choice, not tuned per case
DIRECT_TAIL_WEIGHT = 0.3
DIRECT_TAIL_DF = 5.0
#: tuning iterations at which the shift move's proposal moves to the Laplace approximation at
#: the current hyperparameters (SplitGibbs._recentre_shift_move)
RECENTRE_AT = (50, 200)


def _direct_obstacle(detected, backend, split, shift) -> str | None:
    """Why ``rho=0`` (no split, shift moves on the posterior) cannot run here, or None.

    The message of its ``ValueError`` for an explicit ``rho=0``; ``rho="auto"`` keeps the
    split model wherever there is one (and with a matrix-free theta-step, which the kernel
    decides)."""
    alternative = "Use rho='tuned' (the split model), which samples this model."
    if split == "shards":
        return "rho=0 leaves nothing to split; BlockSplitGibbs needs a positive rho."
    if not shift:
        return (
            "rho=0 moves the coefficients by the shift move alone; shift=False would leave "
            "them fixed. Use shift=True (the default) or rho='auto'."
        )
    if not (isinstance(backend, LocalBackend) and backend.n_shards is None):
        return (
            f"rho=0 runs in one process; received backend={backend.describe()}. Use the default "
            f"LocalBackend(). {alternative}"
        )
    for term in detected.problem.split_terms:
        fam = term.family
        if not laplace_applies(fam):
            return (
                f"rho=0 proposes from the Laplace approximation of the posterior, which needs "
                f"smooth log-concave likelihoods; the term {term.name!r} is {fam!r}. {alternative}"
            )
    return None


def _check_split_args(split, n_shards, rho, alpha, exact):
    """Validate the splitting strategy and what it requires of the other arguments."""
    if split not in ("observations", "shards"):
        raise ValueError(f"split must be 'observations' or 'shards'; received {split!r}.")
    if split == "observations":
        if n_shards is not None:
            raise ValueError(
                f"n_shards applies only to split='shards'; received n_shards={n_shards!r} with "
                "split='observations'."
            )
        return
    validate_n_shards(n_shards)
    if isinstance(rho, str) or np.ndim(rho) != 0:
        raise ValueError(
            "split='shards' needs a fixed scalar rho (rho='auto' relies on importance weights, "
            f"which are not available for d-dimensional shards); received rho={rho!r}."
        )
    if alpha != 0:
        raise ValueError(
            "split='shards' draws every z_s exactly and has no over-relaxed z-move; pass "
            f"alpha=0. Received alpha={alpha!r}."
        )
    if exact:
        raise ValueError(
            "exact=True needs importance weights, which split='shards' cannot compute; "
            "received exact=True with split='shards'."
        )


def _check_proper(detected) -> None:
    """``ValueError`` when Flat-prior coefficients leave the posterior improper."""
    problem = detected.problem
    flat = np.asarray(problem.prior_precision).diagonal() == 0
    for p, _, _ in detected.prior_sources:  # hierarchical Normal priors: proper
        flat[p.start : p.stop] = False
    if not flat.any():
        return
    labels = []
    for p in problem.params:
        labels += (
            [p.name]
            if p.shape == ()
            else [f"{p.name}[{', '.join(map(str, ix))}]" for ix in np.ndindex(*p.shape)]
        )
    check_proper(problem, flat, labels)
