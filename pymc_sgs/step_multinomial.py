"""``SplitGibbs`` on multinomial logistic regression: ``pm.Categorical`` with a softmax of ``X @ B``.

``SplitGibbs(...)`` builds this step when the model observes a ``pm.Categorical``
whose probabilities depend on free variables (:func:`pymc_sgs.detect_multinomial.
has_categorical_likelihood`); it runs :class:`pymc_sgs.multinomial.CategoricalSplitKernel`
on the design read by :func:`pymc_sgs.detect_multinomial.detect_categorical`.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pymc as pm
from pymc.step_methods.compound import StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator

from .backends import LocalBackend
from .categorical_direct import IndependenceMove
from .detect_multinomial import detect_categorical
from .kernel import validate_alpha
from .multinomial import CategoricalSplitKernel, max_weight_classes
from .rho import RhoTuner, validate_bias_tol
from .shift import moves_for_acceptance
from .step_base import (
    AUTO_RHO_START,
    BaseSplitGibbs,
    _data_fingerprints,
    _refuse_unavailable,
    _validate_scalar_rho,
    _validate_weight_options,
    _validate_without_shift,
    is_zero_rho,
)

__all__ = ["CategoricalSplitGibbs"]

#: tuning draws (Gaussian proposals) before the independence moves per draw follow their
#: acceptance (rho=0 / "auto" without a split)
DIRECT_MOVES_WINDOW = 20


@dataclass_state
class CategoricalSplitGibbsState(StepMethodState):
    # per-chain state: restored between sequentially sampled chains
    z: Any
    log_weight: float
    feedback: Any
    tune: bool
    rho_tuner: Any
    direct_moves: int
    direct_accept: Any
    direct_last: Any


class CategoricalSplitGibbs(BaseSplitGibbs):
    """:class:`~pymc_sgs.SplitGibbs` for a ``pm.Categorical`` likelihood with softmax logits.

    Built by ``SplitGibbs(...)`` itself; takes the same arguments. ``rho="auto"`` (the
    default) and ``rho=0`` make no split where the Laplace approximation of the posterior
    exists: independence Metropolis-Hastings from it (:mod:`pymc_sgs.categorical_direct`;
    stats ``shift_accept`` and ``shift_moves``, ``rho`` 0), exact. ``rho="tuned"`` (or
    ``"auto"`` where Newton finds no mode) and a positive rho are the split model below.
    Supported: ``rho`` (``"auto"``, ``"tuned"``, 0 or a scalar), ``alpha``, ``bias_tol``, ``exact`` and
    ``exact_sweeps`` (the Metropolis–Hastings correction to ``pi`` of
    :meth:`pymc_sgs.multinomial.CategoricalSplitKernel.exact_step`),
    ``log_weights``, ``vars``, ``model``, ``rng``, ``init`` (``"laplace"``,
    the default: each chain's first tuning step moves the coefficients to a
    draw from the Laplace approximation of the posterior,
    :meth:`pymc_sgs.multinomial.CategoricalSplitKernel.laplace_start`; rho="auto"
    still starts at 0.5, without the GLM path's pilot rho). Options of the GLM path
    that do not apply here raise ``ValueError`` at construction: a per-row
    ``rho`` array, ``split="shards"`` / ``n_shards``, ``theta_solver="cg"``,
    ``dtype="float32"``, a non-default ``backend``, ``center=True`` and
    ``split_gaussian=True``.

    ``rho="tuned"`` is the rule of the GLM path (:class:`pymc_sgs.rho.RhoTuner`):
    the importance weights ``w = pi / pi_rho`` of the tuning draws are computed
    with a (K-1)-dimensional adaptive Gauss–Hermite rule per row
    (:func:`pymc_sgs.multinomial.smoothed_log_likelihood_rows`), which is
    available up to :func:`pymc_sgs.multinomial.max_weight_classes` classes;
    for more classes pass a fixed rho and ``log_weights=False``.

    Sampler stats are those of :class:`~pymc_sgs.SplitGibbs`: ``rho``,
    ``z_proposals`` (mean Gaussian proposals per exact ``z_i`` draw of the
    Proposition 3 sampler, ``alpha=0``; 0 otherwise), ``z_accept`` (mean MH
    acceptance of the over-relaxed z-moves, ``alpha != 0``; 1 otherwise),
    ``log_weight`` and ``exact_accept`` (acceptance probability of the
    correction to ``pi`` with ``exact=True`` after tuning; nan otherwise).
    """

    _state_class = CategoricalSplitGibbsState

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
        """The constructor proper (``SplitGibbs.__init__`` maps the public arguments here)."""
        where = "for a pm.Categorical (multinomial logit) likelihood"
        if (isinstance(rho, str) and rho not in ("auto", "tuned")) or rho is None:
            raise ValueError(
                "rho must be 'auto', 'tuned', 0 or a positive coupling such as rho=0.2 (in "
                f"units of the logits); received {rho!r}."
            )
        # rho=0, and rho="auto" where the Laplace approximation exists: no split
        # (pymc_sgs.categorical_direct); checked once the kernel is built
        want_direct = is_zero_rho(rho) or (isinstance(rho, str) and rho == "auto")
        self.auto_rho = True if want_direct else _validate_scalar_rho(rho, where)
        # the joint (theta, z) shift of pymc_sgs.shift is written for one-dimensional
        # potentials; this step has none, whatever ``shift`` says
        self.init = _validate_without_shift(
            init, shift, shift_moves, shift_relaxation, sweep_every, where
        )
        self.alpha = validate_alpha(alpha)
        self.bias_tol = validate_bias_tol(bias_tol)
        unsupported = [
            ("split_gaussian", split_gaussian, not split_gaussian, "split_gaussian=False"),
            (
                "theta_solver",
                theta_solver,
                theta_solver in ("auto", "cholesky"),
                "theta_solver='auto' (a Cholesky factor of the d x d precision)",
            ),
            ("dtype", dtype, dtype == "float64", "dtype='float64'"),
            (
                "split",
                split,
                split == "observations",
                "split='observations' (one z_i in R^(K-1) per observation)",
            ),
            ("n_shards", n_shards, n_shards is None, "no n_shards"),
            ("center", center, not center, "center=False"),
        ]
        _refuse_unavailable(unsupported, where)
        if backend is not None and not (
            isinstance(backend, LocalBackend) and backend.n_shards is None
        ):
            raise ValueError(
                f"backend={getattr(backend, 'describe', lambda: backend)()} is not available "
                f"{where}; the kernel runs in this process (leave backend unset)."
            )
        model = pm.modelcontext(model)
        self.detected = detect_categorical(model, vars)
        K = self.detected.n_classes
        det = self.detected
        # the split model's kernel; without a split its posterior (neg_log_posterior), which
        # does not depend on rho, gives the Laplace fit and the target
        start_rho = AUTO_RHO_START if self.auto_rho else float(np.asarray(rho, dtype=float))
        self.kernel = CategoricalSplitKernel(
            det.A,
            det.offset,
            det.y,
            K,
            det.prior_mean,
            det.prior_precision,
            start_rho,
            alpha=self.alpha,
        )
        self.direct_move = None
        if want_direct and not (exact and not is_zero_rho(rho)):
            fit = self.kernel.laplace_fit(self._theta_from_point(model.initial_point()))
            if fit is not None:
                self.direct_move = IndependenceMove(
                    functools.partial(self.kernel.neg_log_posterior, derivatives=False), *fit
                )
            elif is_zero_rho(rho):
                raise ValueError(
                    "rho=0 proposes from the Laplace approximation of the posterior, whose "
                    "Newton search found no mode here (e.g. separated classes with flat "
                    "priors). Use rho='tuned' (the split model) or proper priors."
                )
        self.direct = self.direct_move is not None
        if self.direct:
            exact = False  # the draws are exact already
            self.auto_rho = False
        # without a split no importance weights are needed (they are checked for type only)
        self.weight_every = _validate_weight_options(
            exact, exact_sweeps, log_weights, self.auto_rho
        )
        if log_weights and K > max_weight_classes() and not self.direct:
            raise ValueError(
                f"log_weights={log_weights!r}"
                + (" (needed by a tuned rho and exact=True)" if self.auto_rho or exact else "")
                + f": the importance weights need a {K - 1}-dimensional integral per "
                f"observation, computed for at most {max_weight_classes()} classes; the model "
                f"has K = {K}. Pass a fixed rho (e.g. rho=0.3) and log_weights=False."
            )
        self.exact = bool(exact)
        self.exact_sweeps = int(exact_sweeps)
        self.split = "observations"
        self.backend = LocalBackend()
        self.free_rates = []
        self._nuisance_names = []
        self._free_sigma = False
        self._data_fingerprints = _data_fingerprints(model)
        # detect_categorical builds its own design (a copy), which nothing else writes to
        self._check_data = True
        self.log_weights = bool(log_weights)
        by_name = {v.name: v for v in model.value_vars}
        self.vars = [by_name[name] for name in det.value_var_names]
        self.tune = True
        self.rho_tuner = RhoTuner(AUTO_RHO_START, self.bias_tol) if self.auto_rho else None
        self._reset_chain_state()
        self.rng = get_random_generator(rng)

    def __repr__(self) -> str:
        det = self.detected
        if self.direct:
            return (
                f"SplitGibbs(vars={det.value_var_names}, d={det.d}, categorical={det.name!r}, "
                f"K={det.n_classes}, n={det.y.shape[0]}, rho=0 (no split: independence "
                "Metropolis-Hastings from the Laplace approximation))"
            )
        return (
            f"SplitGibbs(vars={det.value_var_names}, d={det.d}, categorical={det.name!r}, "
            f"K={det.n_classes}, n={det.y.shape[0]}, rho={self.kernel.rho:.4g}, "
            f"alpha={self.alpha})"
        )

    def _theta_from_point(self, point) -> np.ndarray:
        return np.concatenate(
            [np.asarray(point[p.name], dtype=float).ravel() for p in self.detected.params]
        )

    def _theta_to_point(self, theta, point) -> dict:
        new = dict(point)
        for p in self.detected.params:
            new[p.name] = theta[p.start : p.stop].reshape(p.shape).astype(p.dtype)
        return new

    def step(self, point):
        theta = self._theta_from_point(point)
        if self.direct:
            return self._direct_step(theta, point)
        if self.rho_tuner is not None and self.kernel.rho != self.rho_tuner.rho:
            # sequential chains restore the tuner; keep the kernel in step with it
            self.kernel.set_rho(self.rho_tuner.rho)
        if self._check_data:
            self._check_data_unchanged()
            self._check_data = False
        if self.z is None:
            if self.tune and self.init == "laplace":
                # burn-in (and the tuning of rho) starts inside the posterior; tuning draws
                # are discarded
                start = self.kernel.laplace_start(theta, self.rng)
                if start is not None:
                    theta = start
            self.z = self.kernel.init(theta, self.rng)
        weights = self.log_weights
        if self.weight_every > 1 and not self.tune:
            weights = self.feedback["draws"] % self.weight_every == 0
        exact_accept = float("nan")
        if self.exact and not self.tune:
            # tuning draws sample pi_rho: they burn in and tune rho
            theta, self.z, info, exact_accept = self.kernel.exact_step(
                theta, self.z, self.log_weight, self.rng, self.exact_sweeps
            )
        else:
            theta, self.z, info = self.kernel.sweep(theta, self.z, self.rng, weights=weights)
        self.log_weight = info.log_weight
        stats = {
            "rho": float(self.kernel.rho),
            "z_proposals": float(info.z_proposals),
            "z_accept": float(info.z_accept),
            "log_weight": float(info.log_weight),
            "exact_accept": exact_accept,
            "shift_accept": float("nan"),
            "shift_moves": float("nan"),
            "shift_beta": float("nan"),
            "swept": 1.0,
        }
        if self.tune and self.rho_tuner is not None:
            new_rho = self.rho_tuner.update(info.log_weight)
            if new_rho is not None:
                self.kernel.set_rho(new_rho)
                self.log_weight = float("nan")  # the weight of theta depends on rho
        if not self.tune:
            self._check_health(stats)
        return self._theta_to_point(theta, point), [stats]

    def _direct_step(self, theta, point):
        """``self.direct_moves`` independence moves (see :mod:`pymc_sgs.categorical_direct`);
        during tuning the number of moves follows the Gaussian component's acceptance
        (:func:`pymc_sgs.shift.moves_for_acceptance`), then it is fixed."""
        move = self.direct_move
        if self.direct_last is not None and np.array_equal(theta, self.direct_last[0]):
            log_p = self.direct_last[1]
        else:
            log_p = move.log_target(theta)
        total = 0.0
        for _ in range(self.direct_moves):
            theta, log_p, info = move.step(theta, log_p, self.rng)
            total += info.accept_prob
            if self.tune and not info.heavy:
                self.direct_accept.append(info.accept_prob)
        self.direct_last = (theta, log_p)
        accept = total / self.direct_moves
        if self.tune and len(self.direct_accept) >= DIRECT_MOVES_WINDOW:
            self.direct_moves = moves_for_acceptance(float(np.mean(self.direct_accept)))
        stats = {
            "rho": 0.0,
            "z_proposals": float("nan"),
            "z_accept": float("nan"),
            "log_weight": 0.0,
            "exact_accept": float("nan"),
            "shift_accept": float(accept),
            "shift_moves": float(self.direct_moves),
            "shift_beta": 0.0,
            "swept": 0.0,
        }
        if not self.tune:
            self._check_health(stats)
        return self._theta_to_point(theta, point), [stats]

    def _reset_chain_state(self):
        self.direct_moves = 1
        self.direct_accept = []
        self.direct_last = None
        self.z = None
        # no shift move and no Laplace rho here: the windowed tuner adapts rho on each chain
        self.shift_move = None
        self.rho_check = None
        self.log_weight = float("nan")
        self.feedback = self._fresh_feedback()
        if self.rho_tuner is not None:
            self.rho_tuner = RhoTuner(AUTO_RHO_START, self.bias_tol)
            self.kernel.set_rho(AUTO_RHO_START)
