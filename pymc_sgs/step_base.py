"""What every SplitGibbs step shares: the PyMC adapter around a likelihood-specific kernel.

:class:`BaseSplitGibbs` is the thin layer between PyMC and a split-Gibbs kernel: the public
arguments (:func:`_flat_options`), pickling, the per-chain reset PyMC asks for
(:meth:`BaseSplitGibbs.set_rng`), the data fingerprints, the end of tuning and the feedback
warnings. :class:`pymc_sgs.step.SplitGibbs` (GLMs) and
:class:`pymc_sgs.step_multinomial.CategoricalSplitGibbs` (multinomial logit) implement
``_setup`` and ``step`` on top of it; ``SplitGibbs(...)`` chooses between them, so this module
imports neither.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
from pymc.step_methods.compound import BlockedStep, Competence
from pytensor.compile.sharedvalue import SharedVariable

from .backends import Backend
from .kernel import validate_rho
from .options import ExactOptions, ShiftOptions, resolve_legacy, resolve_move
from .shift import validate_shift, validate_shift_moves, validate_shift_relaxation
from .start import validate_init
from .user_warnings import warn_user
from .validate import check_count

__all__ = ["BaseSplitGibbs", "SamplerFeedbackWarning", "AUTO_RHO_START"]

#: the rho options whose rho comes from bias_tol: "auto" (the default; on a GLM it skips the
#: split where the Laplace approximation applies) and "tuned" (the split model always)
AUTO_RHO_CHOICES = ("auto", "tuned")
#: starting value of rho="auto" (in linear-predictor units) where the Laplace approximation
#: is unavailable and the windowed tuner adapts rho on each chain
AUTO_RHO_START = 0.5
#: rho="auto" with the Laplace approximation: the warning threshold on the tuning draws'
#: estimated sd(w~), as a multiple of bias_tol (a margin for that estimate's own error)
RHO_CHECK_FACTOR = 1.5
#: weighted tuning draws (past the burn-in) below which that check is not made, with a warning
RHO_CHECK_MIN_DRAWS = 100
#: exact mode: bulk ESS of the first HEALTH_CHECK_DRAW draws, as a fraction of them, below which
#: the step warns that it mixes badly
EXACT_ESS_WARN = 0.05
#: mean shift-move acceptance after tuning below which the step warns that it mixes slowly
SHIFT_ACCEPT_WARN = 0.2


class SamplerFeedbackWarning(UserWarning):
    """SplitGibbs's settings look poor for this model (low acceptance, short tuning)."""


class BaseSplitGibbs(BlockedStep):
    """The PyMC step adapter shared by the split-Gibbs steps (see the module docstring).

    Subclasses implement ``_setup`` (the constructor proper), ``step``,
    ``_reset_chain_state`` and the mapping between PyMC points and ``theta``.
    """

    name = "split_gibbs"
    default_blocked = True
    stats_dtypes_shapes = {
        "rho": (np.float64, []),
        "z_proposals": (np.float64, []),
        "z_accept": (np.float64, []),
        "log_weight": (np.float64, []),
        "exact_accept": (np.float64, []),
        "shift_accept": (np.float64, []),
        "shift_moves": (np.float64, []),
        "shift_beta": (np.float64, []),
        "swept": (np.float64, []),
    }

    def __new__(cls, *args, **kwargs):
        if kwargs.pop("_unpickle", False):
            # pickle.loads (__getnewargs_ex__): every attribute follows in the state
            return object.__new__(cls)
        # deprecated: blocked=False would make PyMC's BlockedStep build one step per variable
        kwargs.pop("blocked", None)
        # no model given nor on the context stack (bmb.Model(...).fit(step=SplitGibbs())):
        # pm.sample builds the step in its model (pymc_sgs.deferred)
        if kwargs.get("model") is None and pm.Model.get_context(error_if_none=False) is None:
            from .deferred import DeferredStep

            return DeferredStep(cls, args, kwargs)
        return super().__new__(cls, *args, **kwargs)

    def __init__(
        self,
        vars=None,
        *,
        rho="auto",
        bias_tol: float = 0.1,
        alpha: float = -0.99,
        exact: bool | ExactOptions = False,
        shift: bool | ShiftOptions = True,
        log_weights: bool | int = True,
        init: str = "laplace",
        center: bool = False,
        backend: Backend | None = None,
        model: pm.Model | None = None,
        rng: np.random.Generator | int | None = None,
        _split_gaussian: bool = False,
        **legacy,
    ) -> None:
        self._setup(
            vars,
            **_flat_options(
                type(self).__name__,
                rho=rho,
                bias_tol=bias_tol,
                alpha=alpha,
                exact=exact,
                shift=shift,
                log_weights=log_weights,
                init=init,
                center=center,
                backend=backend,
                model=model,
                rng=rng,
                split_gaussian=_split_gaussian,
                legacy=legacy,
            ),
        )

    def _setup(self, vars, **options):  # pragma: no cover - interface
        """The constructor proper, on the flat options of :func:`_flat_options`."""
        raise NotImplementedError

    def __getnewargs_ex__(self):
        # PyMC's BlockedStep re-creates a step from its constructor arguments, model included,
        # and a PyMC model does not pickle (functools.partial in its graph); the step's own
        # state is everything a copy needs
        return (), {"_unpickle": True}

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_BlockedStep__newargs", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        # unpickled inside ``with model:``, the step samples that model's own variables
        # (PyMC matches a step's variables by identity)
        model = pm.Model.get_context(error_if_none=False)
        if model is not None:
            by_name = {v.name: v for v in model.value_vars}
            if all(v.name in by_name for v in self.vars):
                self.vars = [by_name[v.name] for v in self.vars]

    def set_rng(self, rng):
        """PyMC hands every chain its Generator here, at the start of the chain.

        The per-chain state starts afresh (z, rho='auto' tuning), so a step
        object reused for another ``pm.sample`` call gives the same draws for
        the same seed, and the data are re-checked at the chain's first step.
        """
        super().set_rng(rng)
        self._reset_chain_state()
        self._check_data = True
        # a reused step ended its last run with tuning off; PyMC's worker processes do not
        # switch it back on (stop_tuning comes before the first draw when tune=0)
        self.tune = True

    def _check_data_unchanged(self):
        for observed, var, digest in self._data_fingerprints:
            if isinstance(var, SharedVariable):
                if _digest(var.get_value(borrow=True)) != digest:
                    raise ValueError(
                        f"the data container {var.name!r} changed (pm.set_data) after "
                        "SplitGibbs was built; SplitGibbs reads the design and the data when "
                        "it is constructed. Construct a new SplitGibbs after pm.set_data."
                    )
            elif _digest(var.data) != digest:
                raise ValueError(
                    f"an array of observed variable {observed!r} (shape {var.data.shape}, "
                    f"{var.data.dtype}: its design, a predictor, an offset or the data) was "
                    "modified in place after SplitGibbs was built; the model holds that array "
                    "itself, while SplitGibbs read it when it was constructed. Construct a "
                    "new SplitGibbs after changing the data (or build the model from a copy)."
                )

    #: draws after tuning at which the acceptance rates are checked
    HEALTH_CHECK_DRAW = 200
    #: how the user asked for a rho from bias_tol, in messages (SplitGibbs also has 'tuned')
    rho_name = "auto"

    @staticmethod
    def _fresh_feedback() -> dict:
        """Per-chain counters: post-tuning draws and sweeps, all iterations, acceptance sums."""
        return {
            "draws": 0,
            "z_accept": 0.0,
            "exact_accept": 0.0,
            "warned": False,
            "iterations": 0,
            "swept": 0,
            "tune_draws": 0,
            "next_weight": 0,
            "shift_accept": 0.0,
            "shift_draws": 0,
        }

    def _check_health(self, stats, theta=None):
        """Warn once per chain when the acceptance rates or the mixing say the settings are poor.

        ``theta`` (the draw's coefficients) feeds the exact-mode mixing check: an acceptance
        above 0.1 can still leave the chain nearly stuck (issue: ESS 40 and R-hat 1.04 on a
        binomial regression with d = 21).
        """
        fb = self.feedback
        fb["draws"] += 1
        if self.exact and theta is not None and fb["draws"] <= self.HEALTH_CHECK_DRAW:
            fb.setdefault("thetas", []).append(np.array(theta, dtype=float, copy=True))
        # a swept draw whose z-move was dropped (a Dask shard rebuilt mid-step) has no z_accept
        if stats["swept"] and np.isfinite(stats["z_accept"]):
            fb["swept"] += 1
            fb["z_accept"] += stats["z_accept"]
        if np.isfinite(stats["exact_accept"]):
            fb["exact_accept"] += stats["exact_accept"]
        if np.isfinite(stats["shift_accept"]):
            fb["shift_accept"] += stats["shift_accept"]
            fb["shift_draws"] += 1
        if fb["warned"] or fb["draws"] != self.HEALTH_CHECK_DRAW:
            return
        fb["warned"] = True
        z_acc = fb["z_accept"] / max(fb["swept"], 1)
        if fb["swept"] and z_acc < 0.5:
            _warn_user(
                f"SplitGibbs: mean acceptance of the over-relaxed z-moves is {z_acc:.2f} "
                "(< 0.5): the Laplace approximation of z | theta is poor for these data. Use "
                "a smaller rho, or alpha=0 (exact z-draws by rejection).",
            )
        if fb["shift_draws"]:
            shift_acc = fb["shift_accept"] / fb["shift_draws"]
            if shift_acc < SHIFT_ACCEPT_WARN:
                _warn_user(
                    f"SplitGibbs: mean acceptance of the shift move is {shift_acc:.2f} "
                    f"(< {SHIFT_ACCEPT_WARN}): the Laplace approximation of the posterior is "
                    "poor here, so the chain mixes slowly. Check the ESS; sweep_every=1 "
                    "sweeps on every draw, or NUTS (nutpie) may be faster for this model.",
                )
        if self.exact:
            ex_acc = fb["exact_accept"] / fb["draws"]
            if ex_acc < 0.1:
                _warn_user(
                    f"SplitGibbs(exact=True): mean acceptance of the pi-correction is "
                    f"{ex_acc:.2f} (< 0.1), so the chain rarely moves. Use a smaller rho (or "
                    "rho='auto'), or fewer exact_sweeps.",
                )
            elif fb.get("thetas"):
                ess = _min_ess(np.stack(fb.pop("thetas")))
                if ess < EXACT_ESS_WARN * self.HEALTH_CHECK_DRAW:
                    _warn_user(
                        f"SplitGibbs(exact=True): the first {self.HEALTH_CHECK_DRAW} draws have "
                        f"a bulk ESS of {ess:.0f} for the slowest coefficient (< "
                        f"{EXACT_ESS_WARN:.0%} of the draws), so exact mode mixes badly here. "
                        "The default (exact=False) with psis_summary removes the rho-bias at "
                        "a fraction of the cost; or sample many more draws.",
                    )

    def stop_tuning(self):
        """End of tuning: freeze rho (rho='auto') and check its bias certificate."""
        if self.tune and self.rho_tuner is not None:
            if self.rho_tuner.n_windows < 4:
                _warn_user(
                    f"SplitGibbs: rho={self.rho_name!r} adapted over only "
                    f"{self.rho_tuner.n_windows} "
                    "window(s) of tuning draws, too few to certify the bias; increase tune "
                    "(500 or more), or pass a fixed rho.",
                )
            self.kernel.set_rho(self.rho_tuner.finish())
            self.log_weight, self.atz = float("nan"), None
        if self.tune and self.rho_check is not None:
            self._check_rho_certificate(
                origin=f"rho={self.rho_name!r}, from the Laplace approximation"
            )
        if self.shift_move is not None:
            self.shift_move.freeze()
        self.tune = False

    def _check_rho_certificate(
        self,
        origin: str | None = None,
        instead: str = "or pass a smaller fixed rho (e.g. half)",
    ):
        """Warn when the tuning draws' weights say rho misses ``bias_tol``.

        rho="auto" comes from the Laplace approximation of ``Var(log w)``; the chain's own
        log weights (the last 80% of the tuning draws, past the burn-in) estimate the same
        variance without that approximation. ``origin`` says where rho came from and
        ``instead`` what else to do, in the message.
        """
        lw = np.asarray(self.rho_check[len(self.rho_check) // 5 :])
        self.rho_check = None
        if lw.size < RHO_CHECK_MIN_DRAWS:
            _warn_user(
                f"SplitGibbs: only {lw.size} tuning draws had importance weights, too few to "
                f"check the bias certificate of rho={float(self.kernel.rho):.4g}; increase "
                "tune (500 or more).",
            )
            return
        sd_w = float(np.sqrt(np.expm1(np.var(lw, ddof=1))))
        if sd_w > RHO_CHECK_FACTOR * self.bias_tol:
            _warn_user(
                f"SplitGibbs: at rho={float(self.kernel.rho):.4g}"
                + (f" ({origin})" if origin else "")
                + " the tuning draws' importance weights have sd(w/E w) = "
                f"{sd_w:.3f}, above bias_tol={self.bias_tol:g}: the bias is not certified. "
                f"psis_summary(idata) removes it; {instead}.",
            )

    @staticmethod
    def competence(var, has_grad):
        """Compatible with continuous variables; never chosen automatically."""
        if var.dtype in pm.discrete_types:
            return Competence.INCOMPATIBLE
        return Competence.COMPATIBLE


def _min_ess(thetas) -> float:
    """Smallest ArviZ bulk ESS over the coordinates of one chain's draws ``(draws, d)``."""
    import arviz as az

    ess = [
        float(az.ess(thetas[None, :, j]))
        for j in range(thetas.shape[1])
        if np.ptp(thetas[:, j]) > 0
    ]
    return min(ess) if ess else 0.0


def _flat_options(
    cls_name,
    *,
    rho,
    bias_tol,
    alpha,
    exact,
    shift,
    log_weights,
    init,
    center,
    backend,
    model,
    rng,
    split_gaussian,
    legacy,
) -> dict:
    """The public arguments (and deprecated keywords) as the flat options of ``_setup``.

    A deprecated keyword overrides what the new argument says (it was given explicitly), and
    goes through the same checks, with the same messages, as before.
    """
    legacy = resolve_legacy(cls_name, legacy)
    exact_opts = resolve_move("exact", exact, ExactOptions)
    shift_opts = resolve_move("shift", shift, ShiftOptions)
    exact_default = exact_opts or ExactOptions()
    shift_default = shift_opts or ShiftOptions()
    legacy.pop("blocked", None)  # SplitGibbs is always blocked (__new__ dropped it)
    return dict(
        rho=rho,
        bias_tol=bias_tol,
        alpha=alpha,
        exact=exact_opts is not None,
        exact_sweeps=legacy.get("exact_sweeps", exact_default.sweeps),
        log_weights=log_weights,
        model=model,
        rng=rng,
        split_gaussian=legacy.get("split_gaussian", split_gaussian),
        theta_solver=legacy.get("theta_solver", getattr(backend, "theta_solver", "auto")),
        dtype=legacy.get("dtype", getattr(backend, "dtype", "float64")),
        backend=backend,
        split=legacy.get("split", "observations"),
        n_shards=legacy.get("n_shards"),
        center=center,
        init=init,
        shift=shift_opts is not None,
        shift_moves=legacy.get("shift_moves", shift_default.moves),
        shift_relaxation=legacy.get("shift_relaxation", shift_default.relaxation),
        sweep_every=legacy.get("sweep_every", shift_default.sweep_every),
    )


def _warn_user(message: str, category=None) -> None:
    """:func:`pymc_sgs.user_warnings.warn_user`, a :class:`SamplerFeedbackWarning` by default."""
    warn_user(message, category or SamplerFeedbackWarning)


def _validate_sweep_every(sweep_every, without_shift: str | None):
    """``"auto"`` or a positive integer; above 1 it needs the shift move.

    ``without_shift`` says why the step makes no shift move (None: it makes one).
    """
    sweep_every = check_count("sweep_every", sweep_every, auto=True)
    if sweep_every == "auto":
        return "auto"
    if sweep_every > 1 and without_shift is not None:
        raise ValueError(
            f"sweep_every={sweep_every} needs the shift move, which makes the draws between "
            f"sweeps; received {without_shift}. Use sweep_every=1 (or 'auto')."
        )
    return int(sweep_every)


def is_zero_rho(rho) -> bool:
    """Whether ``rho`` is the number 0, which asks for no split (not a bool, a string or an
    array)."""
    return (
        not isinstance(rho, (bool, np.bool_, str))
        and isinstance(rho, (int, float, np.integer, np.floating))
        and rho == 0
    )


def _validate_scalar_rho(rho, where: str, tuned: bool = True) -> bool:
    """``rho="auto"`` (returns True; also ``"tuned"`` where ``tuned``, the same here) or one
    positive number (False), for steps with one rho."""
    if isinstance(rho, str) and rho == "auto":
        return True
    if isinstance(rho, str) and rho == "tuned":
        if tuned:
            return True
        raise ValueError(
            f"rho='tuned' (the split model with rho tuned to bias_tol) applies to GLMs without "
            f"group-specific terms and to Categorical likelihoods; received it {where}. Use "
            "rho='auto' (the default) or a positive rho."
        )
    if np.ndim(rho) != 0:
        raise ValueError(
            f"rho must be 'auto' or a scalar {where}; received an array of shape {np.shape(rho)}."
        )
    if is_zero_rho(rho):
        raise ValueError(
            f"rho=0 (no split) applies to GLMs without group-specific terms and to Categorical "
            f"likelihoods; received rho=0 {where}. Use rho='auto' (the default) or a positive "
            "rho."
        )
    validate_rho(rho, 1)
    return False


def _validate_without_shift(init, shift, shift_moves, shift_relaxation, sweep_every, where):
    """Check the GLM path's start and shift options for a step that makes no shift move.

    They are checked (a misspelt value fails as it would on the GLM path) and, except
    ``init``, have no effect; ``sweep_every`` above 1 is refused. Returns ``init``.
    """
    init = validate_init(init)
    validate_shift(shift)
    validate_shift_moves(shift_moves)
    validate_shift_relaxation(shift_relaxation)
    _validate_sweep_every(sweep_every, f"a model {where}, which has no shift move")
    return init


def _refuse_unavailable(options, where: str, why: str = "") -> None:
    """Raise for the first ``(name, value, ok, instead)`` whose ``ok`` is False."""
    for name, value, ok, instead in options:
        if not ok:
            raise ValueError(f"{name}={value!r} is not available {where}; use {instead}.{why}")


def _validate_weight_options(exact, exact_sweeps, log_weights, auto_rho: bool) -> int:
    """Check ``exact_sweeps`` and ``log_weights`` against ``exact`` and ``rho="auto"``.

    Returns every how many draws the weights are recorded after tuning.
    """
    check_count("exact_sweeps", exact_sweeps)
    weight_every = _validate_log_weights(log_weights)
    if exact and weight_every > 1:
        raise ValueError(
            "exact=True needs the importance weight of every draw; received "
            f"log_weights={log_weights!r}. Use log_weights=True."
        )
    check_weights_needed(auto_rho or exact, log_weights)
    return weight_every


def check_weights_needed(needed: bool, log_weights) -> None:
    """Refuse ``log_weights=False`` where the importance weights are ``needed`` (a rho tuned
    to bias_tol, exact=True)."""
    if needed and not log_weights:
        raise ValueError(
            "log_weights=False is incompatible with a rho tuned to bias_tol (rho='tuned', or "
            "'auto' where it splits) and exact=True, which need the importance weights; "
            "received log_weights=False."
        )


def _validate_log_weights(log_weights) -> int:
    """Every how many draws the weights are recorded after tuning (0: never)."""
    if isinstance(log_weights, (bool, np.bool_)):
        return int(bool(log_weights))
    if isinstance(log_weights, (int, np.integer)) and log_weights >= 1:
        return int(log_weights)
    raise ValueError(
        "log_weights must be True, False or a positive integer k (record the weights on every "
        f"k-th draw after tuning); received {log_weights!r}."
    )


def _digest(value):
    """Cheap fingerprint of an array: shape, dtype, sum and a strided sample."""
    arr = np.asarray(value)
    flat = arr.ravel()
    sample = flat[:: max(1, flat.size // 4096)]
    return (
        arr.shape,
        str(arr.dtype),
        float(np.sum(flat, dtype=float)) if flat.size else 0.0,
        sample.tobytes(),
    )


def _data_fingerprints(model):
    """``(observed name, variable, fingerprint)`` of the data the observed terms read.

    Every ``pm.Data`` container and every array constant (size > 1) among the ancestors of
    an observed variable and of its data: PyMC keeps the user's own array in a constant when
    it needs no conversion, so an in-place write would change the model behind the step.
    """
    from pytensor.graph.basic import Constant
    from pytensor.graph.traversal import ancestors

    out, seen = [], set()
    for rv in model.observed_RVs:
        for var in ancestors([rv, model.rvs_to_values[rv]]):
            if id(var) in seen:
                continue
            if isinstance(var, SharedVariable) and isinstance(
                var.get_value(borrow=True), np.ndarray
            ):
                value = var.get_value(borrow=True)
            elif (
                isinstance(var, Constant) and isinstance(var.data, np.ndarray) and var.data.size > 1
            ):
                value = var.data
            else:
                continue
            seen.add(id(var))
            out.append((rv.name, var, _digest(value)))
    return out
