"""``SplitGibbs`` on mixed models: group-specific terms with free scales.

``SplitGibbs(...)`` builds this step when an observed variable's linear predictor indexes
group coefficients whose scale is a free variable (``u[g]`` with ``u ~ Normal(0, tau)``,
or Bambi's ``tau * offset[g]``; :func:`has_mixed_terms`). It runs
:class:`pymc_sgs.mixed.kernel.MixedKernel` on the model read by
:func:`pymc_sgs.mixed.read.read_mixed_model`, and owns the common coefficients, the group
coefficients, their scales and (for a Normal likelihood) the observation sd.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pymc as pm
from pymc.step_methods.compound import StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator

from ..backends import LocalBackend
from ..kernel import validate_alpha
from ..rho import validate_bias_tol
from ..step_base import (
    BaseSplitGibbs,
    _data_fingerprints,
    _refuse_unavailable,
    _validate_scalar_rho,
    _validate_without_shift,
    _warn_user,
)
from .adapt import HyperShape, empirical_shape, refit_due
from .crossed import CrossedKernel, crossed_plan
from .joint import LaplaceJointKernel
from .kernel import HyperProposal, MixedKernel, MixedState
from .laplace import hyper_mode
from .polya_gamma import PolyaGammaKernel, polya_gamma_applies
from .read import read_mixed_model
from .scale_mixture import StudentTKernel, scale_mixture_applies

__all__ = ["MixedSplitGibbs", "has_mixed_terms", "takes_student_t_glm"]

#: acceptance rate the random-walk h-moves are tuned towards (Roberts and Rosenthal, 2001)
WALK_TARGET = 0.3
#: hyperparameter moves per iteration: an independence move from the Laplace fit of
#: p(h | y) (refitted to the tuning draws), then a random-walk move
HYPER_MOVES = 2
#: scale of the independence proposal (a multivariate t_4) relative to the covariance
#: factor of the fit
INDEP_SCALE = 1.2
#: linear mixed models: a chain whose independence moves were accepted with mean
#: probability at least INDEP_ONLY_ACCEPT over its tuning draws since the shape's last refit
#: (at least INDEP_WINDOW of them) drops the random-walk move after tuning. It makes
#: independence moves only: one per iteration when a factorization costs at least
#: EXPENSIVE_FACTOR multiply-adds (MixedPrecision.factor_cost), else two. With the shape
#: frozen, the kernel after tuning is a fixed Metropolis-Hastings kernel either way. In the
#: hyperparameters' chain at fixed shape (2,000 iterations; benchmarks/results/mixed_moves.md):
#: lme4 InstEval (acceptance 0.61, a factorization 26 ms) min ESS per factorization 0.24 ->
#: 0.47 with one move; sleepstudy (0.61, the per-draw overhead dominates) min ESS per
#: iteration 0.52 -> 0.76 with two
INDEP_ONLY_ACCEPT = 0.5
INDEP_WINDOW = 20
EXPENSIVE_FACTOR = 1e7
#: ... and the same choice is made at the shape's refits from this tuning draw on, for the
#: rest of tuning: on InstEval the two moves of tuning cost as much as the draws after it
EARLY_MOVES_DRAW = 200
#: mean acceptance (hyperparameter or coefficient moves) over the first HEALTH_CHECK_DRAW
#: draws after tuning below which the step warns that it barely moves
ACCEPT_WARN = 0.05
#: moves of the coefficients alone per iteration (GLMMs, exact kernel): each costs one
#: likelihood evaluation, against a factorization for a hyperparameter move
COEF_MOVES = 3
#: then autoregressive (pCN) moves of the coefficients, and their autocorrelation: on lme4's
#: grouseticks (NegativeBinomial, two nested factors, independence acceptance 0.27) they
#: raised the minimum tail ESS from 44 to 348 of 2000 draws for 6% more time
LOCAL_MOVES = 2
LOCAL_RHO = 0.8
#: ... made only by chains whose independence moves were accepted with mean probability
#: below LOCAL_ACCEPT over the second half of the first PROBE_DRAWS tuning iterations: where
#: they are accepted nearly always they mix the coefficients alone. Over 8 seeds
#: (benchmarks/results/mixed_seeds.md; both cases at acceptance 0.58) a threshold of 0.9
#: against 0.5 gave cbpp +19% bulk and +45% tail ESS/s (worst tail ESS 786 against 272) and
#: Contraception -14% and -15%: 0.9 keeps both above the 2x-NUTS target in expectation
LOCAL_ACCEPT = 0.9
#: ... and LOCAL_MOVES_POOR of them by chains whose independence moves were accepted with
#: mean probability below LOCAL_POOR_ACCEPT in the probe, where the coefficients mix
#: through the autoregressive moves mostly, if a pass over the rows (``A.nnz``
#: multiply-adds, what each move costs) costs no more than a factorization
#: (MixedPrecision.factor_cost, two or three of which an iteration makes). lme4's
#: grouseticks (NegativeBinomial; probe acceptance 0.12-0.47 over 8 seeds, 0.28 over whole
#: runs), seeds 2-8, 2 x 1000 draws, every chain with 6 moves: max R-hat over its 369
#: parameters <= 1.01 in 6 of 7 runs, in none with 2 (1.012-1.017), min bulk ESS alike,
#: 10-18% more sampling time (A/B, benchmarks/results/mixed_dispersion_grouseticks.md).
#: cbpp and Contraception (probe acceptance 0.49-0.72) and sleepstudy as a Gamma model
#: (0.79 over a run) keep LOCAL_MOVES: there 6 moves cost 16-32% more time for 0-24% more
#: ESS
LOCAL_POOR_ACCEPT = 0.4
LOCAL_MOVES_POOR = 6
#: logistic GLMMs: tuning iterations on the Laplace kernel after which a chain whose
#: coefficient moves were accepted with mean probability below SWITCH_ACCEPT over the
#: second half of them changes over to the Pólya-Gamma kernel for good. InstEval: 0.02 to
#: 0.10 from chain to chain, with no mixing (a threshold of 0.1 left one of two chains
#: stuck, R-hat 1.37); cbpp and Contraception: 0.58, where the Laplace kernel's ESS was
#: 1.3x (Contraception) to 2x (cbpp) the Pólya-Gamma kernel's from the same draws
PROBE_DRAWS = 50
SWITCH_ACCEPT = 0.3
#: initial width of the GLMM kernel's slice update of a free dispersion or shape parameter
#: given the coefficients (NegativeBinomial alpha, Gamma shape; LaplaceJointKernel.
#: family_update), in units of the independence proposal's scale on it. Over seeds 2-4 on
#: lme4's grouseticks (2 chains x 1000 draws): alpha's bulk ESS 545 without the update,
#: 1211 with width 3 and 1112 with width 1, each iteration 1.7x as long
#: (benchmarks/results/mixed_dispersion.md has the end-to-end comparison)
FAMILY_SLICE_WIDTH = 3.0
#: the blocked kernel's one-dimensional random-walk moves are tuned towards this acceptance
#: (Roberts and Rosenthal, 2001)
COORD_TARGET = 0.44


@dataclass_state
class MixedSplitGibbsState(StepMethodState):
    # per-chain state: restored between sequentially sampled chains
    state: Any
    feedback: Any
    tune: bool
    walk_log_scale: float
    rho_check: Any
    h_draws: Any
    shape: Any
    augmented: Any
    local_moves: Any
    hyper_moves: Any
    coord_log_scales: Any


class MixedSplitGibbs(BaseSplitGibbs):
    """:class:`~pymc_sgs.SplitGibbs` for generalised linear mixed models.

    Built by ``SplitGibbs(...)`` itself; takes the same arguments. The group scales (and a
    Normal likelihood's sigma) move *together with* the coefficients, never given them:

    * Normal likelihood (linear mixed model): the coefficients are integrated out exactly,
      the hyperparameters ``h`` take Metropolis moves on ``p(h | y)``, and the
      coefficients are drawn from their Gaussian conditional
      (:class:`pymc_sgs.mixed.kernel.MixedKernel`). Exact. With two large grouping factors
      or more (crossed or nested) whose joint factorization is expensive
      (``EXPENSIVE_FACTOR``), the same is done one large factor at a time, the common
      coefficients and small factors in every block
      (:class:`pymc_sgs.mixed.crossed.CrossedKernel`). Exact.
    * Bernoulli, Binomial, Poisson, NegativeBinomial, Gamma (GLMMs; a free ``alpha`` or
      shape is one of the hyperparameters), ``rho="auto"`` (the default): joint moves of
      ``(h, coefficients)`` whose coefficient part is the Laplace approximation given the
      proposed ``h``, accepted with the exact Metropolis-Hastings ratio, then moves of the
      coefficients alone and a slice update of a free ``alpha`` or shape given them
      (:class:`pymc_sgs.mixed.joint.LaplaceJointKernel`). Exact: there
      is no split, so no rho and no bias. A logistic GLMM's chain whose coefficient moves
      are rarely accepted in tuning (too many coefficients for one Gaussian proposal)
      changes over to the exact Pólya-Gamma Gibbs kernel
      (:class:`pymc_sgs.mixed.polya_gamma.PolyaGammaKernel`; ``PROBE_DRAWS``,
      ``SWITCH_ACCEPT``). With several large grouping factors (and an expensive joint
      factorization) every chain runs that kernel blocked as for a linear mixed model from
      its start, without the probe (:class:`pymc_sgs.mixed.crossed.CrossedKernel`).
    * Student-t likelihood (identity link; ``sigma`` and ``nu`` fixed or free),
      ``rho="auto"``: exact Gibbs through the t's scale mixture of normals (row
      precisions given the coefficients, then the collapsed block of a linear mixed model,
      then slice moves of ``sigma`` and ``nu`` given the coefficients;
      :class:`pymc_sgs.mixed.scale_mixture.StudentTKernel`).
    * GLMMs with a fixed ``rho``: the split model of the paper, ``z | coefficients`` exactly
      and then ``(h, coefficients) | z`` with the coefficients integrated out
      (:class:`~pymc_sgs.mixed.kernel.MixedKernel`); the draws carry importance weights
      for :func:`pymc_sgs.psis_summary`. It mixes slowly when the data pin the linear
      predictor (``benchmarks/results/mixed.md``), which is why it is not the default.

    Supported options: ``rho``, ``log_weights`` (True/False; split GLMMs), ``vars`` (None,
    or every variable the step owns), ``model``, ``rng``; ``bias_tol`` is accepted and has
    no effect (nothing is split by default). ``exact=True``, a non-default ``backend``,
    ``center=True`` and the shift-move options of the GLM path are refused: this step has
    no shift move and runs in-process.

    Sampler stats: ``rho`` (nan unless split), ``log_weight`` (``log pi - log pi_rho`` + const
    of every draw when split, else 0), ``z_proposals`` (mean Gaussian proposals per exact
    ``z_i`` draw when split, else nan), ``hyper_accept`` and ``coef_accept`` (mean acceptance
    probabilities of the hyperparameter and the coefficient moves; 1 for the coefficients'
    exact Gibbs draws), ``local_accept`` (of the coefficients' autoregressive moves, GLMMs
    on the Laplace kernel; else nan), ``polya_gamma`` (whether the chain has changed over to the
    Pólya-Gamma kernel), ``hyper_moves`` (the iteration's moves of the hyperparameters).

    The hyperparameters' mode and the inverse Hessian there (exact for a Normal
    likelihood, Laplace otherwise; :func:`pymc_sgs.mixed.laplace.hyper_mode`) are computed
    once, when the step is built: they start every chain at a draw from that
    approximation and shape the proposals until tuning has refitted the shape to the
    chain's own draws (:mod:`pymc_sgs.mixed.adapt`). The random walk's scale is tuned
    towards acceptance 0.3; scale and shape are frozen when tuning ends.
    """

    _state_class = MixedSplitGibbsState
    stats_dtypes_shapes = {
        "rho": (np.float64, []),
        "log_weight": (np.float64, []),
        "z_proposals": (np.float64, []),
        "hyper_accept": (np.float64, []),
        "coef_accept": (np.float64, []),
        "local_accept": (np.float64, []),
        "polya_gamma": (bool, []),
        "hyper_moves": (np.int64, []),
    }

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
        where = "for a mixed model (group-specific terms with free scales)"
        self.auto_rho = _validate_scalar_rho(rho, where, tuned=False)
        _validate_without_shift(init, shift, shift_moves, shift_relaxation, sweep_every, where)
        validate_alpha(alpha)
        self.bias_tol = validate_bias_tol(bias_tol)
        if not isinstance(log_weights, (bool, np.bool_)):
            raise ValueError(
                f"log_weights must be True or False {where}; received {log_weights!r}."
            )
        refused = [
            ("exact", exact, not exact, "exact=False (the default)"),
            ("split_gaussian", split_gaussian, not split_gaussian, "split_gaussian=False"),
            ("theta_solver", theta_solver, theta_solver == "auto", "theta_solver='auto'"),
            ("dtype", dtype, dtype == "float64", "dtype='float64'"),
            ("split", split, split == "observations", "split='observations'"),
            ("n_shards", n_shards, n_shards is None, "n_shards=None"),
            ("center", center, not center, "center=False"),
            (
                "backend",
                backend,
                backend is None or (isinstance(backend, LocalBackend) and not backend.n_shards),
                "the default in-process back end",
            ),
        ]
        _refuse_unavailable(
            refused,
            where,
            " The mixed-model step samples the group scales with the coefficients in-process "
            "(pymc_sgs.mixed); exact=True is not needed: with rho='auto' it samples the "
            "posterior exactly (with a fixed rho, psis_summary removes the rho-bias).",
        )
        model = pm.modelcontext(model)
        mixed = read_mixed_model(model)
        self.mixed = mixed
        self.problem = problem = mixed.problem
        owned = [model.rvs_to_values[r] for r in mixed.rvs]
        if vars is not None:
            from ..graph import user_theta_rvs

            given = {model.rvs_to_values[r].name for r in user_theta_rvs(vars, model)}
            want = {v.name for v in owned}
            if given != want:
                raise ValueError(
                    f"vars must be None or every variable of the mixed model {sorted(want)}: "
                    "the step updates the scales together with the coefficients. Received "
                    f"{sorted(given)}."
                )
        self.vars = owned
        self.log_weights = bool(log_weights)
        self.split = problem.family is not None and not self.auto_rho
        if self.split and problem.family_params is not None:
            # SplitGibbs(...) sends such models to the GLM path; only a direct construction
            # of this class arrives here
            raise ValueError(
                f"rho={rho!r}: the split model of a mixed model keeps the likelihood's "
                f"{problem.family.name} {', '.join(problem.family.nuisance)} fixed, and this "
                "model samples it. Use rho='auto' (the default: exact joint moves, no split)."
            )
        if problem.family is None:
            kernel = MixedKernel(problem)
            self.rho = float("nan")
        else:
            kernel = LaplaceJointKernel(problem)
            self.rho = float("nan") if self.auto_rho else float(rho)
        # the Pólya-Gamma kernel (collapsed or blocked) or a crossed linear mixed model's
        # blocked kernel, built on first use: most models never need it
        self._second_kernel = None
        self.can_augment = (
            problem.family is not None and self.auto_rho and polya_gamma_applies(problem.family)
        )
        h0 = mixed.layout.from_point(model.initial_point(), problem.hyper, problem.hyper_cov)[0]
        self.mode = hyper_mode(kernel, h0)
        # a logistic GLMM's or linear mixed model's chain runs the blocked kernel
        # (pymc_sgs.mixed.crossed) when the model has two large grouping factors or more and
        # the collapsed kernel's factorization is expensive (InstEval: a 1,152 x 1,152
        # dense Schur complement, one to three factorizations an iteration)
        self.crossed = None
        lmm = problem.family is None
        if (self.can_augment or lmm) and kernel.precision.factor_cost() >= EXPENSIVE_FACTOR:
            self.crossed = crossed_plan(problem, self.mode.h)
        self.blocked_lmm = lmm and self.crossed is not None
        if self.split:
            kernel = MixedKernel(problem, rho=self.rho, log_weights=self.log_weights)
        elif scale_mixture_applies(problem.family):
            # exact Gibbs through the scale mixture: the Laplace proposal fits a Student-t
            # posterior poorly wherever outliers make it non-log-concave (sleepstudy as a
            # t model: R-hat 1.10), so it only provides the start and the proposals' shape
            kernel = StudentTKernel(problem)
        elif problem.family is not None:
            kernel.set_reference(self.mode.coef, self.mode.row_weights, self.mode.h)
        self.kernel = kernel
        K = problem.hyper_size
        if K:
            cov = self.mode.h_cov
            self.h_chol = np.linalg.cholesky(cov + 1e-12 * np.eye(K))
        else:
            self.h_chol = np.zeros((0, 0))
        self._data_fingerprints = _data_fingerprints(model)
        self._check_data = True
        self.tune = True
        self._reset_chain_state()
        self.rng = get_random_generator(rng)

    def __repr__(self) -> str:
        p = self.problem
        fam = "Normal (exact)" if p.family is None else repr(p.family)
        if p.family_params is not None:
            free = list(p.family_params(np.asarray(self.mode.h, dtype=float)))
            fixed = [f"{k}={v:g}" for k, v in p.family.params.items() if k not in free]
            fam = (
                f"{p.family.name}({p.family.link}, {', '.join(free)} sampled"
                + (f"; {', '.join(fixed)}" if fixed else "")
                + ")"
            )
        if not p.terms:
            return f"SplitGibbs(Student-t GLM, exact scale mixture: {fam}, n={p.n}, p={p.p})"
        terms = ", ".join(f"{t.name}[{t.n_levels}]" for t in p.terms)
        rho = f", rho={self.rho:.4g}" if self.split else ""
        return f"SplitGibbs(mixed model: {fam}, n={p.n}, p={p.p}, terms=[{terms}]{rho})"

    def _reset_chain_state(self):
        self.state = None
        self.feedback = self._fresh_feedback()
        self.walk_log_scale = 0.0
        self.rho_check = [] if self.split else None
        # the proposals' shape: the Laplace fit of p(h | y), refitted to the chain's tuning
        # draws (pymc_sgs.mixed.adapt)
        self.h_draws = []
        self.shape = HyperShape(self.mode.h, self.h_chol)
        # whether this chain has changed over to the Pólya-Gamma kernel
        self.augmented = False
        # autoregressive coefficient moves per iteration (Laplace kernel), set by the probe
        self.local_moves = LOCAL_MOVES
        # h-moves per iteration and whether every other one is a random walk (a linear
        # mixed model's chain chooses them in tuning: INDEP_ONLY_ACCEPT, EARLY_MOVES_DRAW)
        self.hyper_moves = (HYPER_MOVES, True)
        # the blocked kernel's random-walk sds, relative to the shape's marginal sds (log)
        self.coord_log_scales = np.zeros(self.problem.hyper_size)

    @property
    def second_kernel(self) -> PolyaGammaKernel | CrossedKernel:
        """The kernel a logistic GLMM's chain changes over to, or the blocked kernel a crossed
        linear mixed model runs (built on first use)."""
        if self._second_kernel is None:
            if self.crossed is not None:
                self._second_kernel = CrossedKernel(self.problem, self.crossed)
            else:
                self._second_kernel = PolyaGammaKernel(self.problem)
        return self._second_kernel

    def _active_kernel(self):
        return self.second_kernel if (self.augmented or self.blocked_lmm) else self.kernel

    def _change_over(self, state):
        """Continue the chain on the Pólya-Gamma kernel from the Laplace kernel's state.

        The proposals' shape and walk scale start afresh: the ones tuned on a chain that
        barely moved would be too narrow.
        """
        self.augmented = True
        self.h_draws = []
        self.shape = HyperShape(self.mode.h, self.h_chol)
        self.walk_log_scale = 0.0
        self.coord_log_scales = np.zeros(self.problem.hyper_size)
        self.feedback["tune_draws"] = 0
        coef = state.coef + self.kernel.coef_mean
        return self.second_kernel.init(state.h, coef)

    def _proposal(self) -> HyperProposal:
        K = self.problem.hyper_size
        scale = 2.38 / np.sqrt(max(K, 1)) * np.exp(self.walk_log_scale)
        centre, chol, split, draws = self.shape
        return HyperProposal(
            walk_chol=scale * chol,
            centre=centre if K else None,
            indep_chol=INDEP_SCALE * chol if K else None,
            df=4.0,
            moves=self.hyper_moves[0],
            walk=self.hyper_moves[1],
            indep_split=split if K else None,
            indep_draws=draws if K else None,
        )

    def _walk_sds(self) -> np.ndarray:
        """The blocked kernel's random-walk sd of each coordinate of ``h``: the shape's
        marginal sds, times ``2.38`` and the tuned factors."""
        chol = self.shape.chol
        sd = np.sqrt(np.sum(chol * chol, axis=1))
        return 2.38 * sd * np.exp(self.coord_log_scales)

    def _start(self) -> MixedState:
        """A chain's start: ``h`` from the Laplace fit of ``p(h | y)``, then the coefficients."""
        kernel = self.kernel
        K = self.problem.hyper_size
        h = self.mode.h + (self.h_chol @ self.rng.standard_normal(K) if K else 0.0)
        if kernel.factorize(h) is None:
            h = self.mode.h
        if self.problem.family is not None:
            coef = self.mode.coef + kernel.coef_mean
            return kernel.init(h, coef, self.rng)
        ev = kernel.evaluate(h, kernel.data_part(None))
        return kernel.init(h, kernel.draw_coef(ev, self.rng), self.rng)

    def step(self, point):
        if self._check_data:
            self._check_data_unchanged()
            self._check_data = False
        if self.state is None:
            self.state = self._start()
            if self.crossed is not None and self.can_augment:
                # no probe: each Laplace iteration factors the expensive joint precision, and
                # on both crossed logistic GLMMs measured its proposal failed the probe
                # (InstEval; synthetic, n = 1e5 with 1,000 x 500 levels), costing 30% of
                # InstEval's sampling time before the change-over
                self.state = self._change_over(self.state)
        kernel = self._active_kernel()
        n_hyper_moves = self.hyper_moves[0] if self.problem.hyper_size else 0
        if isinstance(kernel, LaplaceJointKernel):
            state, info = kernel.step(
                self.state,
                self.rng,
                self._proposal(),
                COEF_MOVES,
                self.local_moves,
                LOCAL_RHO,
                FAMILY_SLICE_WIDTH,
            )
            coef = state.coef + kernel.coef_mean
            log_weight, z_prop, coef_acc = 0.0, float("nan"), info.coef_accept
            local_acc = info.local_accept
        elif isinstance(kernel, CrossedKernel):
            state, info = kernel.step(self.state, self.rng, self._walk_sds())
            coef = state.coef
            log_weight, z_prop, coef_acc, local_acc = 0.0, float("nan"), 1.0, float("nan")
            n_hyper_moves = kernel.moves
        else:
            state, info = kernel.step(self.state, self.rng, self._proposal())
            coef = state.coef
            log_weight = info.log_weight if self.split else 0.0
            z_prop = info.n_proposals / max(self.problem.n, 1) if self.split else float("nan")
            coef_acc = 1.0  # an exact Gibbs draw
            local_acc = float("nan")
        self.state = state
        if self.tune:
            # Robbins-Monro on the random-walk scale, during tuning only (then frozen), on
            # the walk's own acceptance: the independence moves' is higher, and averaging
            # both drove the walk towards acceptance 0.01 (contraception)
            t = self.feedback["tune_draws"] = self.feedback["tune_draws"] + 1
            if isinstance(kernel, CrossedKernel):
                moved = np.isfinite(info.coord_accept)
                gap = info.coord_accept[moved] - COORD_TARGET
                self.coord_log_scales[moved] += gap / np.sqrt(t)
            elif self.hyper_moves[1]:  # (a chain that has dropped the walk leaves its scale)
                self.walk_log_scale += (info.walk_accept - WALK_TARGET) / np.sqrt(t)
            if self.problem.hyper_size:
                self.h_draws.append(state.h)
                fb = self.feedback
                if self._exact_lmm() and np.isfinite(info.indep_accept):
                    fb["indep_sum"] = fb.get("indep_sum", 0.0) + info.indep_accept
                    fb["indep_n"] = fb.get("indep_n", 0) + 1
                if refit_due(len(self.h_draws)):
                    if len(self.h_draws) >= EARLY_MOVES_DRAW and self._exact_lmm():
                        self.hyper_moves = self._chosen_moves() or self.hyper_moves
                    self.shape = empirical_shape(self.h_draws) or self.shape
                    fb["indep_sum"], fb["indep_n"] = 0.0, 0  # measured anew with the new shape
            if self.rho_check is not None:
                self.rho_check.append(log_weight)
            if isinstance(kernel, LaplaceJointKernel) and t > PROBE_DRAWS // 2:
                # the second half of the probe: the first iterations from the mode accept
                # more than the chain will (InstEval: 0.2 in the first 25, 0.02 after)
                fb = self.feedback
                fb["probe_coef_accept"] = fb.get("probe_coef_accept", 0.0) + coef_acc
                if t == PROBE_DRAWS:
                    rate = fb["probe_coef_accept"] / (PROBE_DRAWS - PROBE_DRAWS // 2)
                    if self.can_augment and rate < SWITCH_ACCEPT:
                        state = self.state = self._change_over(state)
                    else:
                        self.local_moves = self._local_moves_after_probe(rate)
        if not self.tune:
            self._check_acceptance(info.hyper_accept, coef_acc)
        sds = kernel.scales(state.h)
        new = dict(point)
        layout = self.mixed.layout
        covs = self.problem.hyper_cov(state.h)[3] if layout.needs_covs else ()
        new.update(layout.to_point(state.h, coef, sds, covs))
        stats = {
            "rho": float(self.rho),
            "log_weight": float(log_weight),
            "z_proposals": float(z_prop),
            "hyper_accept": float(info.hyper_accept),
            "coef_accept": float(coef_acc),
            "local_accept": float(local_acc),
            "polya_gamma": bool(self.augmented),
            "hyper_moves": int(n_hyper_moves),
        }
        return new, [stats]

    def _local_moves_after_probe(self, rate: float) -> int:
        """Autoregressive moves per iteration of a chain on the Laplace kernel whose
        independence moves were accepted with mean probability ``rate`` in the probe
        (``LOCAL_ACCEPT``, ``LOCAL_POOR_ACCEPT``)."""
        if rate >= LOCAL_ACCEPT:
            return 0
        kernel = self.kernel
        if rate < LOCAL_POOR_ACCEPT and kernel.A.nnz <= kernel.precision.factor_cost():
            return LOCAL_MOVES_POOR
        return LOCAL_MOVES

    def _check_acceptance(self, hyper_accept, coef_accept):
        """Warn once per chain when the moves are rarely accepted (the chain barely mixes).

        The Gaussian proposal of the coefficients degrades with the number of coefficients
        and with how far the likelihood is from Gaussian: on lme4's InstEval as a logistic
        GLMM (4,124 coefficients) its acceptance was 0.02. A logistic GLMM's chain changes
        over to the Pólya-Gamma kernel then (with at least PROBE_DRAWS tuning iterations);
        a Poisson GLMM's has no such alternative.
        """
        fb = self.feedback
        fb["draws"] += 1
        fb["hyper_accept"] = fb.get("hyper_accept", 0.0) + float(hyper_accept)
        fb["coef_accept"] = fb.get("coef_accept", 0.0) + float(coef_accept)
        if fb["warned"] or fb["draws"] != self.HEALTH_CHECK_DRAW:
            return
        fb["warned"] = True
        rates = {k: fb[k] / fb["draws"] for k in ("hyper_accept", "coef_accept")}
        low = {k: v for k, v in rates.items() if v < ACCEPT_WARN}
        if low:
            what = ", ".join(f"{k} = {v:.3f}" for k, v in low.items())
            _warn_user(
                f"SplitGibbs (mixed model): mean acceptance {what} over the first "
                f"{self.HEALTH_CHECK_DRAW} draws (< {ACCEPT_WARN}): the Gaussian proposal of "
                "the coefficients fits this posterior poorly, so the chain barely moves and its "
                "draws are unreliable. Check R-hat and the ESS; sample this model with NUTS "
                "(nutpie) instead.",
            )

    def stop_tuning(self):
        """End of tuning: freeze the proposals' scale and shape; with a fixed rho, check its bias."""
        if self.tune and self.rho_check is not None:
            self._check_rho_certificate(
                origin=None, instead="or pass a smaller rho, or rho='auto' (exact moves, no split)"
            )
        if self.tune and self._exact_lmm():
            self.hyper_moves = self._chosen_moves() or self.hyper_moves
        self.tune = False
        self.h_draws = []

    def _exact_lmm(self) -> bool:
        """Whether the chain runs the collapsed sampler of a linear mixed model."""
        kernel = self._active_kernel()
        return type(kernel) is MixedKernel and not kernel.split

    def _chosen_moves(self):
        """``(moves, walk)`` of the h-moves from the independence moves' acceptance since
        the shape's last refit (see ``INDEP_ONLY_ACCEPT``); None when too few draws tell."""
        fb = self.feedback
        n = fb.get("indep_n", 0)
        if n < INDEP_WINDOW:
            return None
        if fb["indep_sum"] / n < INDEP_ONLY_ACCEPT:
            return (HYPER_MOVES, True)
        cost = self._active_kernel().precision.factor_cost()
        return (1 if cost >= EXPENSIVE_FACTOR else 2, False)


#: SplitGibbs's keyword arguments a Student-t GLM may set and still take the mixed-model
#: step; any other must have its default (the GLM path implements it)
_STUDENT_T_FREE = ("vars", "rho", "bias_tol", "alpha", "log_weights", "model", "rng")


def takes_student_t_glm(model, vars=None, rho="auto", options=None) -> bool:
    """Whether ``SplitGibbs(**options)`` samples a Student-t GLM without group terms with
    the mixed-model step's exact scale-mixture kernel.

    Yes for ``rho="auto"`` with every variable owned (``vars`` None) and the other options at
    their defaults: the GLM path could only split the likelihood, which is not log-concave,
    so its rho-bias is large (sleepstudy's ``Reaction ~ Days`` as Bambi's t model: Intercept
    sd 5.7 against 6.2, R-hat 1.05, min ESS 181 of 2000 draws), while the scale mixture is
    exact (see :func:`pymc_sgs.mixed.read.student_t_glm_parameters`).
    """
    from .read import student_t_glm_parameters

    if not (isinstance(rho, str) and rho == "auto") or vars is not None:
        return False
    # the defaults of SplitGibbs(...)'s keywords; a legacy keyword (**legacy) has none
    params = inspect.signature(BaseSplitGibbs.__init__).parameters
    for key, value in (options or {}).items():
        if key in _STUDENT_T_FREE:
            continue
        default = params[key].default if key in params else inspect.Parameter.empty
        if value is not default and value != default:
            return False
    return student_t_glm_parameters(model) is not None


def has_mixed_terms(model, vars=None, rho="auto") -> bool:
    """Whether ``SplitGibbs(vars, rho=rho, ...)`` builds :class:`MixedSplitGibbs` for ``model``.

    Yes when group coefficients have a free scale (or mean), unless ``vars`` leaves those
    hyperparameters out: then the GLM path samples the coefficients and PyMC assigns the
    scales to NUTS, as before this step existed. A likelihood with a free dispersion or
    shape parameter takes the mixed-model step only with ``rho="auto"`` (its exact joint
    moves sample the parameter); with a fixed ``rho`` the GLM path's split model samples it,
    as before the mixed-model step could.
    """
    from ..graph import user_theta_rvs
    from .read import group_hyperparameters

    hyper = group_hyperparameters(model, free_dispersion=isinstance(rho, str) and rho == "auto")
    if not hyper:
        return False
    if vars is None:
        return True
    return set(hyper) <= set(user_theta_rvs(vars, model))
