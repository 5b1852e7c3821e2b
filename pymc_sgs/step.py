"""``SplitGibbs``: the PyMC step method, a thin adapter around the kernel."""

from __future__ import annotations

from typing import Any

import numpy as np

import pymc as pm
from pymc.step_methods.compound import BlockedStep, Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator

from .detect import detect_split_problem
from .kernel import SGSState, SplitGibbsKernel, validate_alpha, validate_rho

__all__ = ["SplitGibbs"]


@dataclass_state
class SplitGibbsState(StepMethodState):
    # per-chain state: restored between sequentially sampled chains
    z: Any
    z_mode: Any
    tune: bool


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
    rho : float or array
        Coupling between ``z`` and the linear predictor (same units as the
        linear predictor); scalar or one value per observation. The chain
        targets ``pi_rho``, whose bias vanishes as ``rho -> 0`` and whose
        mixing slows down like ``1/rho^2``.
    alpha : float
        Over-relaxation of both Gibbs blocks, in ``(-1, 1)``. ``0`` gives plain
        SGS (exact z draws by rejection); negative values (default ``-0.98``)
        over-relax theta with Adler's update and move z by over-relaxed MH
        around its Laplace approximation, which keeps ``Pi_rho`` invariant and
        mixes much faster at small rho (ALGORITHM.md, section 3).
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

    Notes
    -----
    Normal-identity likelihoods are never split: they are Gaussian in theta
    and enter the theta-step exactly. When their sigma is a free variable,
    PyMC's NUTS updates sigma given theta while SplitGibbs updates (z, theta)
    given sigma. Both are exact conditional updates of the joint
    ``Pi_rho(theta, z, sigma)`` (sigma's conditional does not involve z), so
    the compound chain leaves it invariant and the theta-marginal is the same
    ``pi_rho`` as with sigma fixed; with no split terms it is exactly ``pi``.

    Sampler stats (in ``idata.sample_stats``): ``rho``; ``z_proposals``, the
    mean number of Gaussian proposals per exact ``z_i`` draw (``alpha=0``);
    ``z_accept``, the mean MH acceptance probability of the over-relaxed
    z-moves (``alpha != 0``); ``log_weight``, the draw's log importance
    weight (nan when ``log_weights=False``).

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
    }
    _state_class = SplitGibbsState

    def __init__(
        self,
        vars=None,
        *,
        rho=None,
        alpha: float = -0.98,
        log_weights: bool = True,
        model=None,
        rng=None,
        split_gaussian: bool = False,
        blocked: bool = True,
    ):
        if rho is None:
            raise ValueError(
                "rho must be given: a positive coupling such as rho=0.2 (in units of the "
                "linear predictor); received None."
            )
        validate_rho(rho, np.size(rho))  # fail on a bad value before reading the model
        validate_alpha(alpha)
        model = pm.modelcontext(model)
        self.detected = detect_split_problem(model, vars, split_gaussian=split_gaussian)
        self.kernel = SplitGibbsKernel(self.detected.problem, rho, alpha, log_weights=log_weights)
        self.vars = [model[name] for name in self.detected.value_var_names]
        self.vars = [model.rvs_to_values.get(v, v) for v in self.vars]
        self._free_sigma = any(s is not None for s in self.detected.sigma_sources)
        self.z = None
        self.z_mode = None
        self.tune = True
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
        if self._free_sigma:
            self.kernel.set_sigmas(self.detected.sigmas(point))
        if self.z_mode is None:
            state = self.kernel.init(theta, self.rng)
        else:
            state = SGSState(theta=theta, z=self.z, z_mode=self.z_mode)
        state, info = self.kernel.sweep(state, self.rng)
        self.z, self.z_mode = state.z, state.z_mode
        rho = self.kernel.rho
        stats = {
            "rho": float(np.mean(rho)),
            "z_proposals": float(info.z_proposals),
            "z_accept": float(info.z_accept),
            "log_weight": float(info.log_weight),
        }
        return self._theta_to_point(state.theta, point), [stats]

    @staticmethod
    def competence(var, has_grad):
        """Compatible with continuous variables; never chosen automatically."""
        if var.dtype in pm.discrete_types:
            return Competence.INCOMPATIBLE
        return Competence.COMPATIBLE
