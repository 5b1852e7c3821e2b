"""``LaplaceMH``: Metropolis-Hastings on the exact posterior with a Laplace proposal.

The exact baseline of issue 23: the proposal of SplitGibbs's shift move without the split
(no z, no rho, no bias). A PyMC step method, so that ``pm.sample(step=LaplaceMH())`` pays
the same per-draw overhead as ``pm.sample(step=pymc_sgs.SplitGibbs())``.

* Setup (once, in ``__init__``): the Laplace approximation ``N(c, H^-1)``, ``H = L L^T`` the
  Hessian of ``-log p`` at the posterior mode and ``c`` the first-order mean. For a GLM that
  the package recognises, it is the shift move's own reference Gaussian
  (:func:`pymc_sgs.start.laplace_start`, :func:`pymc_sgs.shift.laplace_mean_offset`);
  otherwise a damped Newton with a finite-difference Hessian of the model's gradient, centred
  at the mode. The log density of the acceptance ratio is always the model's own (PyTensor,
  ``model.logp()`` of the raveled free variables), not the package's.
* Each draw: ``prop = c + beta (theta - c) + sqrt(1 - beta^2) L^-T eps``, reversible for the
  reference ``N(c, H^-1)``, accepted with probability ``min(1, p(prop) N(theta) / (p(theta)
  N(prop)))`` (exact for pCN and independence proposals). ``beta = 0`` is the independence
  sampler.
* Tuning (:meth:`pymc_sgs.shift.ShiftMove.tune` itself, one move per draw): windows of 50 draws;
  mean acceptance >= 0.9 switches to the over-relaxed ``beta = -relaxation`` (0.3), which is
  kept while it stays >= 0.85; below 0.25 the proposal is made more local (``beta -> 1 -
  (1 - beta) / 2``), above 0.6 relaxed again.

``ratio="no_reference"`` drops the proposal's density from the ratio: a deliberately wrong
sampler (it then targets about ``p(theta) N(theta; c, H^-1)``), the negative control of the
tests.
"""

from __future__ import annotations

from dataclasses import field

import numpy as np
import scipy.linalg
import scipy.optimize

#: tuning window (draws), as ShiftMove.WINDOW
WINDOW = 50


def flat_logp(model, vars):
    """``(logp, q0, shared)``: the model's log density as a function of the raveled ``vars``
    (PyTensor, compiled once), the raveled initial point and the other variables' shared
    replacements."""
    import pymc as pm
    from pymc.blocking import DictToArrayBijection
    from pymc.pytensorf import compile as pt_compile
    from pymc.pytensorf import join_nonshared_inputs

    point = model.initial_point()
    shared = pm.make_shared_replacements(point, vars, model)
    [out], inarray = join_nonshared_inputs(point, [model.logp()], vars, shared)
    fn = pt_compile([inarray], out)
    q0 = DictToArrayBijection.map({v.name: point[v.name] for v in vars}).data
    return (lambda q: float(fn(q))), q0, shared


def flat_dlogp(model, vars, shared):
    """Gradient of the model's log density as a function of the raveled ``vars``."""
    from pymc.pytensorf import compile as pt_compile
    from pymc.pytensorf import join_nonshared_inputs

    rvs = [model.values_to_rvs[v] for v in vars]
    [out], inarray = join_nonshared_inputs(model.initial_point(), [model.dlogp(rvs)], vars, shared)
    return pt_compile([inarray], out)


class LaplaceApprox:
    """Gaussian ``N(mean, (L L^T)^-1)``: mode, Cholesky factor of the Hessian of ``-log p`` at
    the mode, ``mean = mode + offset`` (first-order mean correction)."""

    def __init__(self, mode, chol, offset=None, how=""):
        self.mode = np.asarray(mode, dtype=float)
        self.chol = np.asarray(chol, dtype=float)
        self.offset = np.zeros_like(self.mode) if offset is None else np.asarray(offset, float)
        self.mean = self.mode + self.offset
        self.how = how

    @classmethod
    def from_split_problem(cls, model, vars, q0, mean_correction=True):
        """Analytic: the package's Newton (:func:`pymc_sgs.start.laplace_start`) and mean
        correction (:func:`pymc_sgs.shift.laplace_mean_offset`) on the detected GLM, i.e. the
        shift move's own reference Gaussian. Raises when the model is not such a GLM or its
        coefficient layout differs from the raveled ``vars``."""
        from pymc_sgs.detect import detect_split_problem
        from pymc_sgs.kernel import SplitGibbsKernel
        from pymc_sgs.shift import laplace_mean_offset
        from pymc_sgs.start import laplace_start

        problem = detect_split_problem(model, vars).problem
        layout = [(p.name, p.stop - p.start) for p in problem.params]
        if layout != [
            (v.name, int(np.prod(model.initial_point()[v.name].shape) or 1)) for v in vars
        ]:
            raise ValueError(f"coefficient layout {layout} differs from the step's variables")
        kernel = SplitGibbsKernel(problem, rho=1.0, theta_solver="cholesky")
        start = laplace_start(kernel, np.asarray(q0, float), np.random.default_rng(0))
        if start.theta is None:
            raise ValueError(f"Laplace start failed: {start.reason}")
        offset = laplace_mean_offset(kernel, start.mode, start.chol) if mean_correction else None
        return cls(start.mode, start.chol, offset, how="pymc_sgs.start.laplace_start")

    @classmethod
    def from_gradient(cls, logp, dlogp, q0, max_iter=100, tol=1e-10):
        """Generic: damped Newton with the Hessian by central differences of the compiled
        gradient (2 d gradients per Hessian; a compiled PyTensor Hessian takes ~10 s to
        build), after L-BFGS where Newton alone does not converge; no mean correction."""

        def hess_at(t):
            d = t.shape[0]
            h = 1e-5 * np.maximum(1.0, np.abs(t))
            H = np.empty((d, d))
            for k in range(d):
                e = np.zeros(d)
                e[k] = h[k]
                H[:, k] = -(dlogp(t + e) - dlogp(t - e)) / (2 * h[k])
            return 0.5 * (H + H.T)

        theta = np.asarray(q0, dtype=float).copy()
        try:
            theta = cls._newton(logp, dlogp, hess_at, theta, max_iter, tol)
            how = "finite-difference Newton"
        except RuntimeError:
            # far from the mode (a hierarchical model's joint posterior from its initial
            # point): quasi-Newton first, then Newton from there
            res = scipy.optimize.minimize(
                lambda t: -logp(t), theta, jac=lambda t: -dlogp(t), method="L-BFGS-B"
            )
            theta = cls._newton(logp, dlogp, hess_at, res.x, max_iter, tol)
            how = "L-BFGS, then finite-difference Newton"
        return cls(theta, scipy.linalg.cholesky(hess_at(theta), lower=True), how=how)

    @staticmethod
    def _newton(logp, dlogp, hess_at, theta, max_iter, tol):
        """Damped Newton from ``theta``; RuntimeError if it does not converge."""
        theta = np.asarray(theta, dtype=float).copy()
        val = -logp(theta)
        for _ in range(max_iter):
            grad = -dlogp(theta)
            hess = hess_at(theta)
            try:
                step = scipy.linalg.cho_solve(scipy.linalg.cho_factor(hess, lower=True), grad)
            except np.linalg.LinAlgError:  # far from the mode: scaled gradient step
                step = grad / max(np.abs(np.diag(hess)).max(), 1.0)
            dec = float(grad @ step)
            if dec < tol:
                break
            t = 1.0
            while t > 1e-12:
                new = -logp(theta - t * step)
                if np.isfinite(new) and new <= val - 0.25 * t * dec:
                    break
                t *= 0.5
            theta = theta - t * step
            val = -logp(theta)
        else:
            raise RuntimeError("LaplaceMH: Newton did not converge")
        return theta

    def draw(self, rng, size=None):
        """Draws of ``N(mean, H^-1)``: (d,) or (size, d)."""
        d = self.mode.shape[0]
        eps = rng.standard_normal(d if size is None else (size, d))
        noise = scipy.linalg.solve_triangular(self.chol, eps.T, lower=True, trans="T").T
        return self.mean + noise

    def log_density(self, theta):
        """``log N(theta; mean, H^-1)`` (normalised); theta (d,) or (N, d)."""
        u = (np.atleast_2d(theta) - self.mean) @ self.chol  # rows: (L^T (theta - mean))^T
        d = self.mode.shape[0]
        out = (
            -0.5 * np.sum(u * u, axis=1)
            - 0.5 * d * np.log(2 * np.pi)
            + np.sum(np.log(np.diag(self.chol)))
        )
        return out if np.ndim(theta) == 2 else float(out[0])


def laplace_approximation(model, vars=None, mean_correction=True):
    """``(LaplaceApprox, logp, shared)`` of the model: the analytic GLM route when the package
    recognises the model, else the generic one. ``logp`` is the model's compiled log density of
    the raveled ``vars``."""
    if vars is None:
        vars = model.value_vars
    logp, q0, shared = flat_logp(model, vars)
    try:
        lap = LaplaceApprox.from_split_problem(model, vars, q0, mean_correction)
    except Exception:  # noqa: BLE001  (not a GLM the package recognises)
        lap = LaplaceApprox.from_gradient(logp, flat_dlogp(model, vars, shared), q0)
    return lap, logp, shared


def _step_base():
    from pymc.step_methods.arraystep import ArrayStepShared

    return ArrayStepShared


def _make_state_class():
    from pymc.step_methods.compound import StepMethodState
    from pymc.step_methods.state import dataclass_state

    @dataclass_state
    class LaplaceMHState(StepMethodState):
        tune: bool
        beta: float
        window_accept: float = None
        _window: list = field(default_factory=list)
        _gauss_window: list = field(default_factory=list)
        _regime_accept: list = field(default_factory=list)
        _last: tuple = None

    return LaplaceMHState


class LaplaceMH(_step_base()):
    """Independence / over-relaxed pCN Metropolis-Hastings with a Laplace proposal.

    Parameters
    ----------
    vars : list, optional
        Free variables (default: all of the model's; blocked).
    relaxation : float
        ``-beta`` of the over-relaxed regime (0 never over-relaxes).
    mean_correction : bool
        Centre the proposal at the first-order mean instead of the mode.
    ratio : {"exact", "no_reference"}
        ``"no_reference"``: wrong acceptance ratio (negative control).
    model, rng, blocked : as PyMC's step methods.
    """

    name = "laplace_mh"
    default_blocked = True
    stats_dtypes_shapes = {
        "accept": (np.float64, []),
        "accepted": (bool, []),
        "beta": (np.float64, []),
    }
    _state_class = _make_state_class()

    def __init__(
        self,
        vars=None,
        *,
        relaxation=0.3,
        mean_correction=True,
        ratio="exact",
        tune=True,
        model=None,
        rng=None,
        blocked=True,
    ):
        import pymc as pm
        from pymc.util import get_value_vars_from_user_vars

        model = pm.modelcontext(model)
        vars = model.value_vars if vars is None else get_value_vars_from_user_vars(vars, model)
        if ratio not in ("exact", "no_reference"):
            raise ValueError(f"ratio must be 'exact' or 'no_reference', not {ratio!r}")
        self.laplace, self._logp, shared = laplace_approximation(model, vars, mean_correction)
        self.relaxation = float(relaxation)
        self.ratio = ratio
        self.tune = tune
        self.beta = 0.0
        # the attributes that ShiftMove.tune reads and writes (one move per draw)
        self.moves, self._adapt_moves, self.WINDOW = 1, False, WINDOW
        self.window_accept = None
        self._window = []
        # its proposal is the Gaussian alone: every move counts for the regime
        self._gauss_window = []
        self._regime_accept = []
        self._last = None
        self._chol_f = np.asfortranarray(self.laplace.chol)
        super().__init__(vars, shared, blocked=blocked, rng=rng)

    @staticmethod
    def competence(var, has_grad):
        from pymc.step_methods.compound import Competence

        return Competence.COMPATIBLE if has_grad else Competence.INCOMPATIBLE

    def _log_reference(self, theta):
        u = self.laplace.chol.T @ (theta - self.laplace.mean)
        return -0.5 * float(u @ u)

    def _logp_at(self, theta):
        last = self._last
        if last is not None and np.array_equal(last[0], theta):
            return last[1]
        return self._logp(theta)

    def astep(self, q0):
        from pymc.blocking import RaveledVars

        theta = q0.data
        c = self.laplace.mean
        eps = self.rng.standard_normal(theta.shape[0])
        noise = scipy.linalg.solve_triangular(
            self._chol_f, eps, lower=True, trans="T", check_finite=False
        )
        b = self.beta
        prop = c + b * (theta - c) + np.sqrt(1.0 - b * b) * noise
        lp0 = self._logp_at(theta)
        lp1 = self._logp(prop)
        log_ratio = lp1 - lp0
        if self.ratio == "exact":
            log_ratio -= self._log_reference(prop) - self._log_reference(theta)
        accept = float(np.exp(min(0.0, log_ratio))) if np.isfinite(log_ratio) else 0.0
        accepted = bool(self.rng.random() < accept)
        if accepted:
            theta, lp0 = prop, lp1
        self._last = (theta.copy(), lp0)
        if self.tune:
            self._adapt(accept)
        stats = {"accept": accept, "accepted": accepted, "beta": self.beta}
        return RaveledVars(theta, q0.point_map_info), [stats]

    def _adapt(self, accept):
        """:meth:`pymc_sgs.shift.ShiftMove.tune` itself, with one move per draw."""
        from pymc_sgs.shift import ShiftMove

        self._window.append(accept)
        self._gauss_window.append(accept)
        ShiftMove.tune(self)
