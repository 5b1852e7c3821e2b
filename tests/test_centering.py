"""Centering of the split potentials at the MAP (pymc_sgs.centering)."""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest
from scipy.special import expit

import pymc_sgs
from pymc_sgs.centering import _objective, center_problem, map_estimate
from pymc_sgs.families import FAMILIES, BernoulliProbit, BinomialProbit
from pymc_sgs.kernel import SplitGibbsKernel
from pymc_sgs.problem import ParamSlice, SplitProblem, SplitTerm
from pymc_sgs.shards import ShardKernel


def _logistic_problem(n=200, d=3, seed=0, prior_sd=2.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) / np.sqrt(d)
    y = (rng.random(n) < expit(X @ np.array([1.5, -1.0, 0.5]) + 0.3)).astype(float)
    term = SplitTerm("y", FAMILIES["bernoulli"], X, np.full(n, 0.3), y)
    return SplitProblem(
        (ParamSlice("b", (d,), 0, d),), np.full(d, 0.2), np.eye(d) / prior_sd**2, (term,)
    )


@pytest.mark.parametrize("family", ["bernoulli", "poisson", "binomial"])
def test_centering_keeps_pi_and_centres_every_potential(family):
    rng = np.random.default_rng(1)
    n, d = 150, 3
    X = rng.normal(size=(n, d)) / np.sqrt(d)
    eta = X @ np.array([0.5, -0.5, 0.3])
    trials = None
    if family == "bernoulli":
        y = (rng.random(n) < expit(eta)).astype(float)
    elif family == "binomial":
        trials = np.full(n, 5.0)
        y = rng.binomial(5, expit(eta)).astype(float)
    else:
        y = rng.poisson(np.exp(eta)).astype(float)
    term = SplitTerm("y", FAMILIES[family], X, np.zeros(n), y, trials)
    prob = SplitProblem((ParamSlice("b", (d,), 0, d),), np.zeros(d), np.eye(d), (term,))
    cen, theta_star = center_problem(prob)
    # the MAP: zero gradient of the negative log posterior
    assert np.linalg.norm(_objective(prob)(theta_star)[1]) < 1e-6
    # every centred potential has zero derivative at a_i^T theta*: its minimum sits at the MAP
    t = cen.split_terms[0]
    g = t.family.grad(t.A @ theta_star + t.offset, t.y, t.trials)
    assert np.max(np.abs(g)) < 1e-10
    # pi unchanged: log densities differ by a constant
    f0, f1 = _objective(prob), _objective(cen)
    pts = rng.normal(size=(5, d))
    diffs = [f0(p)[0] - f1(p)[0] for p in pts]
    assert np.ptp(diffs) < 1e-8
    # negative control: shifting y without moving the linear term into the prior changes pi
    import dataclasses

    wrong = dataclasses.replace(cen, prior_mean=prob.prior_mean)
    f2 = _objective(wrong)
    assert np.ptp([f0(p)[0] - f2(p)[0] for p in pts]) > 1e-3


@pytest.mark.parametrize("family, trials", [(BernoulliProbit(), None), (BinomialProbit(), 5.0)])
def test_centering_refuses_the_probit_link(family, trials):
    # probit's potential is not -y z + psi(z): moving y would change pi. The probit families
    # share the logit families' names ("bernoulli", "binomial"), which the check once read
    rng = np.random.default_rng(2)
    n, d = 60, 2
    X = rng.normal(size=(n, d))
    y = (rng.random(n) < 0.5).astype(float)
    tr = None if trials is None else np.full(n, trials)
    term = SplitTerm("y", family, X, np.zeros(n), y, tr)
    prob = SplitProblem((ParamSlice("b", (d,), 0, d),), np.zeros(d), np.eye(d), (term,))
    with pytest.raises(ValueError, match="canonical-link families"):
        center_problem(prob)


def test_centered_gaussian_split_model_has_the_map_as_mean():
    # Normal potentials split on purpose: the centred pi_rho has mean exactly theta* (the MAP,
    # here the posterior mean), whatever rho; the uncentred one does not (a proper prior pulls
    # it towards the prior mean as rho grows)
    rng = np.random.default_rng(2)
    n, d, sigma, rho = 30, 2, 1.0, 1.5
    X = rng.normal(size=(n, d))
    y = X @ np.array([2.0, -1.0]) + sigma * rng.normal(size=n)
    term = SplitTerm("y", FAMILIES["normal"], X, np.zeros(n), y, np.full(n, sigma))
    prob = SplitProblem((ParamSlice("b", (d,), 0, d),), np.zeros(d), np.eye(d), (term,))
    cen, theta_star = center_problem(prob)
    Q = np.eye(d) + X.T @ X / (sigma**2 + rho**2)
    plain_mean = np.linalg.solve(Q, X.T @ y / (sigma**2 + rho**2))
    assert np.max(np.abs(plain_mean - theta_star)) > 0.05  # the control is a different target

    def chain_mean(problem, kernel_cls, *args):
        k = kernel_cls(problem, rho, *args)
        r = np.random.default_rng(3)
        s = k.init(theta_star, r)
        out = []
        for _ in range(2000):
            s, _ = k.sweep(s, r)
            out.append(s.theta)
        x = np.array(out)[100:]
        return x.mean(0), np.array([float(az.mcse(x[None, :, j])) for j in range(d)])

    for kernel_cls, args in ((SplitGibbsKernel, (0.0,)), (ShardKernel, (3,))):
        m, se = chain_mean(cen, kernel_cls, *args)
        assert np.all(np.abs(m - theta_star) < 4 * se + 1e-3), (kernel_cls, m, theta_star, se)
        assert np.any(np.abs(m - plain_mean) > 4 * se + 1e-3)
    m_plain, se = chain_mean(prob, SplitGibbsKernel, 0.0)
    assert np.all(np.abs(m_plain - plain_mean) < 4 * se + 1e-3)


def test_center_option_of_splitgibbs_and_its_errors():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(60, 2))
    y = (rng.random(60) < expit(X @ np.array([1.0, -1.0]))).astype(float)
    with pm.Model():
        beta = pm.Normal("beta", 0.0, 2.0, shape=2)
        pm.Bernoulli("y", logit_p=pm.math.dot(X, beta), observed=y)
        step = pymc_sgs.SplitGibbs(rho=0.5, center=True)
        prob = step.detected.problem
        theta_star = map_estimate(prob)
        # the step's problem is centred: the potentials' derivatives vanish at the MAP
        t = prob.split_terms[0]
        assert np.max(np.abs(t.family.grad(t.A @ theta_star, t.y))) < 1e-8
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pm.sample(
                draws=200,
                tune=100,
                chains=1,
                step=step,
                random_seed=1,
                progressbar=False,
                compute_convergence_checks=False,
            )
        assert np.all(np.isfinite(idata.posterior["beta"].values))
    with pm.Model():
        beta = pm.Flat("beta", shape=2)
        pm.Bernoulli("y", logit_p=pm.math.dot(X, beta), observed=y)
        with pytest.raises(ValueError, match="proper prior"):
            pymc_sgs.SplitGibbs(rho=0.5, center=True)
    with pm.Model():
        tau = pm.HalfNormal("tau", 1.0)
        beta = pm.Normal("beta", 0.0, tau, shape=2)
        pm.Bernoulli("y", logit_p=pm.math.dot(X, beta), observed=y)
        with pytest.raises(ValueError, match="hierarchical prior"):
            pymc_sgs.SplitGibbs(rho=0.5, center=True)
