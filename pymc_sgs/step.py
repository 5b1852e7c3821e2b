"""``SplitGibbs``: the PyMC step method, a thin adapter around the kernel."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

import pymc as pm
from pymc.step_methods.compound import BlockedStep, Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator

from .centering import center_problem
from .detect import detect_split_problem
from .kernel import SGSState, SplitGibbsKernel, validate_alpha, validate_rho
from .shards import ShardKernel, validate_n_shards
from .rho import RhoTuner, validate_bias_tol

#: starting value of rho="auto" (in linear-predictor units)
AUTO_RHO_START = 0.5

__all__ = ["SplitGibbs", "SamplerFeedbackWarning"]


class SamplerFeedbackWarning(UserWarning):
    """SplitGibbs's settings look poor for this model (low acceptance, short tuning)."""


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


class SplitGibbs(BlockedStep):
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
        linear predictor(s).
    rho : "auto", float or array
        Coupling between ``z`` and the linear predictor (same units as the
        linear predictor); scalar or one value per observation. The chain
        targets ``pi_rho``, whose bias vanishes as ``rho -> 0`` and whose
        mixing slows down as rho shrinks. ``"auto"`` (default) starts at 0.5
        and, during tuning, moves rho to the largest value whose importance
        weights certify ``bias_tol`` (:mod:`pymc_sgs.rho`); the chosen rho is
        the ``rho`` sampler stat.
    bias_tol : float
        For ``rho="auto"``: target bound, in posterior standard deviations, on
        the bias of any posterior expectation (``sd(w / E w) <= bias_tol``).
    exact : bool
        Target ``pi`` exactly: every draw is an MH step whose proposal is
        ``exact_sweeps`` over-relaxed SGS sweeps (z-first or theta-first at
        random, which makes it ``Pi_rho``-reversible), accepted with
        probability ``min(1, w(theta') / w(theta))``. Applies after tuning
        (tuning draws sample ``pi_rho`` to burn in and tune rho).
    exact_sweeps : int
        Sweeps per MH proposal in exact mode (more sweeps keep more of the
        over-relaxation speed-up, at a lower acceptance rate).
    alpha : float
        Over-relaxation of both Gibbs blocks, in ``(-1, 1)``. ``0`` gives plain
        SGS (exact z draws by rejection); negative values (default ``-0.99``)
        over-relax theta with Adler's update and move z by over-relaxed MH
        around its Laplace approximation, which keeps ``Pi_rho`` invariant and
        mixes much faster at small rho (docs: "How SGS works").
    log_weights : bool
        Record ``log_weight = log pi(theta) - log pi_rho(theta)`` (up to a
        constant) for every draw, for :func:`pymc_sgs.psis_summary` to measure
        and remove the rho-bias. Costs about 16 likelihood evaluations per
        sweep; set False to skip.
    model : pm.Model, optional
    rng : numpy.random.Generator or seed, optional
        PyMC replaces it by a per-chain Generator through :meth:`set_rng`.
    split_gaussian : bool
        Test-only: split Normal-identity likelihoods too.
    split : {"observations", "shards"}
        Splitting strategy of the paper (Section 5.3.1). ``"observations"``
        (strategy 1, default): one scalar ``z_i`` per observation, ``A_i = x_i^T``.
        ``"shards"`` (strategy 2): the rows are cut into ``n_shards`` contiguous
        shards, one ``z_s in R^d`` per shard with ``A_s = I_d``, drawn exactly
        by the d-dimensional rejection sampler of Proposition 3
        (:class:`pymc_sgs.shards.ShardKernel`). It needs a fixed scalar
        ``rho``, ``alpha=0``, ``exact=False`` and a single split likelihood;
        importance weights are not available (``log_weight`` is nan).
    n_shards : int, optional
        Number of shards ``b`` for ``split="shards"`` (required there, not
        allowed otherwise).
    center : bool
        Centre the split potentials at the MAP before sampling
        (:func:`pymc_sgs.centering.center_problem`): ``pi`` is unchanged,
        ``pi_rho`` becomes the smoothing of potentials whose minima all sit at
        the MAP (the paper's assumption). Needs a proper Normal prior on every
        coefficient, fixed Normal sigmas and no hierarchical prior scales.

    Notes
    -----
    Normal-identity likelihoods are never split: they are Gaussian in theta
    and enter the theta-step exactly. When their sigma is a free variable,
    PyMC's NUTS updates sigma given theta while SplitGibbs updates (z, theta)
    given sigma. Both are exact conditional updates of the joint
    ``Pi_rho(theta, z, sigma)`` (sigma's conditional does not involve z), so
    the compound chain leaves it invariant and the theta-marginal is the same
    ``pi_rho`` as with sigma fixed; with no split terms it is exactly ``pi``.
    Hierarchical Normal priors (random effects ``u ~ Normal(0, tau)`` with
    ``tau`` free) work the same way: NUTS updates ``tau`` given ``u``, and
    SplitGibbs refactors the precision of ``theta | z`` when ``tau`` changed.

    Sampler stats (in ``idata.sample_stats``): ``rho``; ``z_proposals``, the
    mean number of Gaussian proposals per exact ``z_i`` draw (``alpha=0``);
    ``z_accept``, the mean MH acceptance probability of the over-relaxed
    z-moves (``alpha != 0``); ``log_weight``, the draw's log importance
    weight (nan when ``log_weights=False``); ``exact_accept``, the acceptance
    probability of the pi-correction (exact mode; nan otherwise).

    References
    ----------
    .. [1] M. Vono, D. Paulin, A. Doucet (2022). Efficient MCMC sampling with
       dimension-free convergence rate using ADMM-type splitting. JMLR 23.
    """

    name = "split_gibbs"
    default_blocked = True
    stats_dtypes_shapes = {
        "rho": (np.float64, []),
        "z_proposals": (np.float64, []),
        "z_accept": (np.float64, []),
        "log_weight": (np.float64, []),
        "exact_accept": (np.float64, []),
    }
    _state_class = SplitGibbsState

    def __init__(
        self,
        vars=None,
        *,
        rho="auto",
        alpha: float = -0.99,
        bias_tol: float = 0.1,
        exact: bool = False,
        exact_sweeps: int = 10,
        log_weights: bool = True,
        model=None,
        rng=None,
        split_gaussian: bool = False,
        blocked: bool = True,
        split: str = "observations",
        n_shards: int | None = None,
        center: bool = False,
    ):
        # parameters are checked before the model is read, so mistakes surface at once
        self.auto_rho = isinstance(rho, str) and rho == "auto"
        if not self.auto_rho:
            if isinstance(rho, str) or rho is None:
                raise ValueError(
                    "rho must be 'auto' or a positive coupling such as rho=0.2 (in units of "
                    f"the linear predictor); received {rho!r}."
                )
            validate_rho(rho, np.size(rho))
        validate_alpha(alpha)
        _check_split_args(split, n_shards, rho, alpha, exact)
        self.split = split
        bias_tol = validate_bias_tol(bias_tol)
        if isinstance(exact_sweeps, bool) or not isinstance(exact_sweeps, (int, np.integer)) or exact_sweeps < 1:
            raise ValueError(f"exact_sweeps must be a positive integer; received {exact_sweeps!r}.")
        if (self.auto_rho or exact) and not log_weights:
            raise ValueError(
                "log_weights=False is incompatible with rho='auto' and exact=True, which need "
                "the importance weights; received log_weights=False."
            )
        model = pm.modelcontext(model)
        self.detected = detect_split_problem(model, vars, split_gaussian=split_gaussian)
        if center:
            self.detected = _centered(self.detected)
        self._data_fingerprints = _data_fingerprints(model)
        self._check_data = True
        start_rho = AUTO_RHO_START if self.auto_rho else rho
        if split == "shards":
            self.kernel = ShardKernel(self.detected.problem, rho, n_shards)
        else:
            self.kernel = SplitGibbsKernel(
                self.detected.problem, start_rho, alpha, log_weights=log_weights
            )
        self.exact = bool(exact)
        self.exact_sweeps = int(exact_sweeps)
        self.bias_tol = bias_tol
        self.vars = [model[name] for name in self.detected.value_var_names]
        self.vars = [model.rvs_to_values.get(v, v) for v in self.vars]
        self._free_sigma = any(s is not None for s in self.detected.sigma_sources)
        self.tune = True
        self.rho_tuner = (
            RhoTuner(AUTO_RHO_START, bias_tol)
            if self.auto_rho and self.detected.problem.n_split
            else None
        )
        self._reset_chain_state()
        self.rng = get_random_generator(rng)

    def __repr__(self) -> str:
        p = self.detected.problem
        fams = ", ".join(f"{t.name}: {t.family!r}" for t in p.split_terms)
        gauss = ", ".join(t.name for t in p.gaussian_terms)
        rho = self.kernel.rho
        rho_s = f"{float(rho):.4g}" if rho.ndim == 0 else f"per-row [{rho.min():.3g}, {rho.max():.3g}]"
        return (
            f"SplitGibbs(vars={self.detected.value_var_names}, d={p.d}, n_split={p.n_split}, "
            f"split=[{fams}], gaussian=[{gauss}], rho={rho_s})"
        )

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
        theta = self._theta_from_point(point)
        if self.rho_tuner is not None and float(self.kernel.rho) != self.rho_tuner.rho:
            # sequential chains restore the tuner; keep the kernel in step with it
            self.kernel.set_rho(self.rho_tuner.rho)
            self.log_weight, self.atz = float("nan"), None
        if self.detected.prior_sources:
            self.kernel.set_prior_precision(self.detected.prior_precision(point))
        if self._free_sigma:
            self.kernel.set_sigmas(self.detected.sigmas(point))
        if self._check_data:
            self._check_data_unchanged()
            self._check_data = False
        if self.z_mode is None:
            state = self.kernel.init(theta, self.rng)
        else:
            state = SGSState(
                theta=theta, z=self.z, z_mode=self.z_mode, log_weight=self.log_weight, atz=self.atz
            )
        if self.exact and not self.tune:
            # tuning draws are discarded: they burn in on pi_rho, which is much faster
            # than an MH chain started in the tails, and they tune rho
            state, info = self.kernel.exact_step(state, self.rng, self.exact_sweeps)
        else:
            state, info = self.kernel.sweep(state, self.rng)
        self.z, self.z_mode, self.log_weight, self.atz = (
            state.z, state.z_mode, state.log_weight, state.atz
        )
        stats = {
            "rho": float(np.mean(self.kernel.rho)),
            "z_proposals": float(info.z_proposals),
            "z_accept": float(info.z_accept),
            "log_weight": float(info.log_weight),
            "exact_accept": float(info.exact_accept),
        }
        if self.tune and self.rho_tuner is not None:
            new_rho = self.rho_tuner.update(info.log_weight)
            if new_rho is not None:
                self.kernel.set_rho(new_rho)
                # the weight of theta and A^T z / rho^2 both depend on rho
                self.log_weight, self.atz = float("nan"), None
        if not self.tune:
            self._check_health(stats)
        return self._theta_to_point(state.theta, point), [stats]

    def set_rng(self, rng):
        """PyMC hands every chain its Generator here, at the start of the chain.

        The per-chain state starts afresh (z, rho='auto' tuning), so a step
        object reused for another ``pm.sample`` call gives the same draws for
        the same seed, and the data are re-checked at the chain's first step.
        """
        super().set_rng(rng)
        self._reset_chain_state()
        self._check_data = True

    def _reset_chain_state(self):
        self.z = self.z_mode = self.atz = None
        self.log_weight = float("nan")
        self.feedback = {"draws": 0, "z_accept": 0.0, "exact_accept": 0.0, "warned": False}
        if self.rho_tuner is not None:
            self.rho_tuner = RhoTuner(AUTO_RHO_START, self.bias_tol)
            self.kernel.set_rho(AUTO_RHO_START)

    def _check_data_unchanged(self):
        for var, digest in self._data_fingerprints:
            if _digest(var.get_value(borrow=True)) != digest:
                raise ValueError(
                    f"the data container {var.name!r} changed (pm.set_data) after SplitGibbs was "
                    "built; SplitGibbs reads the design and the data when it is constructed. "
                    "Construct a new SplitGibbs after pm.set_data."
                )

    #: draws after tuning at which the acceptance rates are checked
    HEALTH_CHECK_DRAW = 200

    def _check_health(self, stats):
        """Warn once per chain when the acceptance rates say the settings are poor."""
        fb = self.feedback
        fb["draws"] += 1
        fb["z_accept"] += stats["z_accept"]
        if np.isfinite(stats["exact_accept"]):
            fb["exact_accept"] += stats["exact_accept"]
        if fb["warned"] or fb["draws"] != self.HEALTH_CHECK_DRAW:
            return
        fb["warned"] = True
        z_acc = fb["z_accept"] / fb["draws"]
        if z_acc < 0.5:
            warnings.warn(
                f"SplitGibbs: mean acceptance of the over-relaxed z-moves is {z_acc:.2f} "
                "(< 0.5): the Laplace approximation of z | theta is poor for these data. Use "
                "a smaller rho, or alpha=0 (exact z-draws by rejection).",
                SamplerFeedbackWarning,
                stacklevel=2,
            )
        if self.exact:
            ex_acc = fb["exact_accept"] / fb["draws"]
            if ex_acc < 0.1:
                warnings.warn(
                    f"SplitGibbs(exact=True): mean acceptance of the pi-correction is "
                    f"{ex_acc:.2f} (< 0.1), so the chain rarely moves. Use a smaller rho (or "
                    "rho='auto'), or fewer exact_sweeps.",
                    SamplerFeedbackWarning,
                    stacklevel=2,
                )

    def stop_tuning(self):
        """End of tuning: freeze rho (rho='auto')."""
        if self.tune and self.rho_tuner is not None:
            if self.rho_tuner.n_windows < 4:
                warnings.warn(
                    f"SplitGibbs: rho='auto' adapted over only {self.rho_tuner.n_windows} "
                    "window(s) of tuning draws, too few to certify the bias; increase tune "
                    "(500 or more), or pass a fixed rho.",
                    SamplerFeedbackWarning,
                    stacklevel=2,
                )
            self.kernel.set_rho(self.rho_tuner.finish())
            self.log_weight, self.atz = float("nan"), None
        self.tune = False

    @staticmethod
    def competence(var, has_grad):
        """Compatible with continuous variables; never chosen automatically."""
        if var.dtype in pm.discrete_types:
            return Competence.INCOMPATIBLE
        return Competence.COMPATIBLE


def _centered(detected):
    """The detected model with its split potentials centred at the MAP."""
    if detected.prior_sources:
        raise ValueError(
            "center=True needs fixed prior scales; the prior sd of "
            + ", ".join(p.name for p, _, _ in detected.prior_sources)
            + " is a free variable (hierarchical prior). Use center=False for this model."
        )
    problem, _ = center_problem(detected.problem)
    return dataclasses.replace(detected, problem=problem)


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


def _digest(value):
    """Cheap fingerprint of an array: shape, dtype, sum and a strided sample."""
    arr = np.asarray(value)
    flat = arr.ravel()
    sample = flat[:: max(1, flat.size // 4096)]
    return (arr.shape, str(arr.dtype), float(np.sum(flat, dtype=float)) if flat.size else 0.0,
            sample.tobytes())


def _data_fingerprints(model):
    """Fingerprints of the pm.Data containers the observed terms depend on."""
    from pytensor.compile.sharedvalue import SharedVariable
    from pytensor.graph.traversal import ancestors

    graphs = list(model.observed_RVs) + [model.rvs_to_values[rv] for rv in model.observed_RVs]
    out = []
    for var in ancestors(graphs):
        if isinstance(var, SharedVariable) and isinstance(var.get_value(borrow=True), np.ndarray):
            out.append((var, _digest(var.get_value(borrow=True))))
    return out
