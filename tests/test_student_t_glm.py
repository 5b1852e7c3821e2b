"""Student-t GLMs without group terms take the mixed-model step's exact scale mixture.

* Which step: ``SplitGibbs()`` on a Student-t GLM (PyMC's or Bambi's ``family="t"``, sigma
  and nu free or fixed) is the mixed-model step with no group terms; ``rho="tuned"``, a
  fixed rho, ``vars``, a non-default option or a prior the mixed-model reader refuses
  (Laplace, a hierarchical scale) keep the GLM path (the split model), and a Student-t
  with group terms is the mixed model as before.
* The target: ``pm.sample`` with the default step against quadrature of the exact posterior
  of a one-coefficient t model with an outlier (sigma free, then nu free), within 4 MCSE.
  Negative control: the same run with row precisions drawn without the residuals (outliers
  keep a normal likelihood's weight) is rejected by the same check.
"""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest
import scipy.special

import pymc_sgs
from pymc_sgs.mixed import scale_mixture
from pymc_sgs.mixed.step import MixedSplitGibbs

# an outlier (9.0) makes the likelihood non-log-concave in b
Y = np.array([0.3, -0.5, 4.0, 2.1, 1.4, 2.8, 1.9, 9.0, 2.2])
NU, SIGMA = 4.0, 0.8


def t_model(free="sigma"):
    """``y_i ~ t_nu(b, sigma)``, ``b ~ N(0, 3^2)``; ``sigma ~ HalfNormal(2)`` (nu fixed) or
    ``nu ~ Gamma(2, 0.2)`` (sigma fixed)."""
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, 3.0)
        sigma = pm.HalfNormal("sigma", 2.0) if free == "sigma" else SIGMA
        nu = pm.Gamma("nu", 2.0, 0.2) if free == "nu" else NU
        pm.StudentT("y", nu=nu, mu=b, sigma=sigma, observed=Y)
    return m


def quadrature_means(free):
    """``E[b]`` and ``E[free parameter]`` on a grid of (b, log parameter)."""
    b = np.linspace(-6.0, 10.0, 801)
    h = np.linspace(-5.0, 5.0, 401) if free == "sigma" else np.linspace(-4.0, 7.0, 401)
    k = np.exp(h)[:, None]
    if free == "sigma":
        s, nu = k, NU
        log_prior = -0.5 * (k / 2.0) ** 2 + h[:, None]  # HalfNormal(2), Jacobian
    else:
        s, nu = SIGMA, k
        log_prior = np.log(k) - 0.2 * k + h[:, None]  # Gamma(2, 0.2), Jacobian
    log_p = log_prior - 0.5 * (b[None, :] / 3.0) ** 2
    for yi in Y:
        log_p = log_p + (
            scipy.special.gammaln(0.5 * (nu + 1))
            - scipy.special.gammaln(0.5 * nu)
            - 0.5 * np.log(nu)
            - np.log(s)
            - 0.5 * (nu + 1) * np.log1p(((yi - b[None, :]) / s) ** 2 / nu)
        )
    p = np.exp(log_p - log_p.max())
    p /= p.sum()
    return {"b": float(np.sum(p * b[None, :])), free: float(np.sum(p * k))}


def sample(free, seed):
    with t_model(free) as m:
        step = pymc_sgs.SplitGibbs()
        assert isinstance(step, MixedSplitGibbs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pm.sample(
                draws=4000,
                tune=500,
                chains=2,
                cores=1,
                step=step,
                random_seed=seed,
                progressbar=False,
                compute_convergence_checks=False,
                model=m,
            )
    return idata


def z_scores(idata, refs):
    return {
        k: abs(float(idata.posterior[k].mean()) - v) / float(az.mcse(idata, var_names=[k])[k])
        for k, v in refs.items()
    }


class _BlindPrecisions(scale_mixture.StudentTKernel):
    """Row precisions that ignore the residuals: a wrong target (a normal-like likelihood)."""

    def draw_precisions(self, coef, fam, rng):
        nu = fam.params["nu"]
        return rng.gamma(0.5 * (nu + 1.0), 2.0 / nu, size=self.problem.n)


@pytest.mark.parametrize("free", ["sigma", "nu"])
def test_default_step_matches_quadrature_and_rejects_a_wrong_target(free, monkeypatch):
    refs = quadrature_means(free)
    z = z_scores(sample(free, seed=11), refs)
    assert max(z.values()) < 4, (z, refs)
    import pymc_sgs.mixed.step as mixed_step

    monkeypatch.setattr(mixed_step, "StudentTKernel", _BlindPrecisions)
    z_wrong = z_scores(sample(free, seed=11), refs)
    assert max(z_wrong.values()) > 4, (z_wrong, refs)


def _flat():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(60, 2))
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, 2.0, shape=2)
        sigma = pm.HalfNormal("sigma", 1.0)
        nu = pm.Gamma("nu", 2.0, 0.1)
        pm.StudentT("y", nu=nu, mu=X @ b, sigma=sigma, observed=rng.standard_t(3, 60))
    return m


def test_which_step_samples_a_student_t_glm():
    m = _flat()
    step = pymc_sgs.SplitGibbs(model=m)
    assert isinstance(step, MixedSplitGibbs)
    assert "Student-t GLM, exact scale mixture: studentt(identity, nu, sigma sampled)" in repr(step)
    assert sorted(v.name for v in step.vars) == ["b", "nu_log__", "sigma_log__"]
    # fixed nu and sigma: no hyperparameters, the same step
    with t_model("sigma"):
        shown = repr(pymc_sgs.SplitGibbs())
    assert "sigma sampled; nu=4" in shown
    # any choice the mixed-model step does not make keeps the split model of the GLM path
    for kwargs in (
        dict(rho="tuned"),
        dict(rho=0.5),
        dict(shift=False),
        dict(vars=[m["b"], m["sigma"], m["nu"]]),
        dict(backend=pymc_sgs.LocalBackend(theta_solver="cg")),
    ):
        step = pymc_sgs.SplitGibbs(model=m, **kwargs)
        assert not isinstance(step, MixedSplitGibbs), kwargs
    # priors the mixed-model reader does not take keep the GLM path, which samples them
    rng = np.random.default_rng(4)
    X = rng.normal(size=(40, 2))
    for prior in ("laplace", "hierarchical scale"):
        with pm.Model():
            if prior == "laplace":
                b = pm.Laplace("b", 0.0, 1.0, shape=2)
            else:
                b = pm.Normal("b", 0.0, pm.HalfNormal("tau", 1.0), shape=2)
            pm.StudentT("y", nu=4.0, mu=X @ b, sigma=1.0, observed=rng.standard_t(4, 40))
            step = pymc_sgs.SplitGibbs()
        assert not isinstance(step, MixedSplitGibbs), prior


def test_bambi_t_family_takes_the_scale_mixture():
    bmb = pytest.importorskip("bambi")
    import pandas as pd

    rng = np.random.default_rng(3)
    df = pd.DataFrame({"x": rng.normal(size=50)})
    df["y"] = 1.0 + 0.5 * df.x + rng.standard_t(3, 50)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bm = bmb.Model("y ~ x", df, family="t")
        bm.build()
    with bm.backend.model:
        step = pymc_sgs.SplitGibbs()
    assert isinstance(step, MixedSplitGibbs)
    assert {v.name for v in step.vars} >= {"Intercept", "x", "sigma_log__", "nu_log__"}
