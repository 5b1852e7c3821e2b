"""The independence Metropolis-Hastings move of pymc_sgs.categorical_direct (the default step
of a Categorical likelihood, no split): it targets the density it is given, whatever the
proposal, and only with the proposal's density in its ratio (negative control); PyMC runs
with it give the same draws for any ``cores``."""

from __future__ import annotations

import arviz as az
import numpy as np
import pymc as pm
import pytest

import pymc_sgs
from pymc_sgs.categorical_direct import IndependenceMove


def _logistic_target(theta):
    # independent standard logistic coordinates: mean 0, variance pi^2 / 3
    t = np.asarray(theta, dtype=float)
    return float(np.sum(t + 2.0 * np.log1p(np.exp(-t))))


def _chain(move, n, seed):
    rng = np.random.default_rng(seed)
    theta = np.zeros(2)
    lp = move.log_target(theta)
    out = np.empty((n, 2))
    for i in range(n):
        theta, lp, _ = move.step(theta, lp, rng)
        out[i] = theta
    return out


def _z(draws, mean):
    return np.array(
        [abs(draws[:, j].mean() - mean) / float(az.mcse(draws[None, :, j])) for j in range(2)]
    )


def test_independence_move_targets_its_density_and_needs_the_proposal_ratio():
    # a proposal off centre and too narrow, so that the q-ratio matters
    move = IndependenceMove(_logistic_target, np.array([0.6, -0.4]), np.eye(2) * 1.2)
    draws = _chain(move, 20_000, seed=3)
    assert np.all(_z(draws, 0.0) < 4), _z(draws, 0.0)
    var = draws.var(axis=0)
    assert np.all(np.abs(var - np.pi**2 / 3) < 0.12 * np.pi**2 / 3), var

    class NoRatio(IndependenceMove):
        def log_proposal(self, theta):
            return 0.0

    wrong = _chain(NoRatio(_logistic_target, move.mode, move.chol), 20_000, seed=3)
    assert np.max(_z(wrong, 0.0)) > 4, _z(wrong, 0.0)


def test_default_categorical_draws_do_not_depend_on_cores():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(80, 2))
    y = rng.integers(0, 3, 80)
    with pm.Model():
        B = pm.Normal("B", 0.0, 1.0, shape=(2, 2))
        b = pm.Normal("b", 0.0, 2.0, shape=2)
        eta = pm.math.concatenate([pm.math.zeros((80, 1)), X @ B + b], axis=1)
        pm.Categorical("y", p=pm.math.softmax(eta, axis=-1), observed=y)
        runs = [
            pm.sample(
                draws=100,
                tune=60,
                chains=2,
                cores=c,
                step=pymc_sgs.SplitGibbs(),
                random_seed=4,
                progressbar=False,
                compute_convergence_checks=False,
            )
            for c in (1, 2)
        ]
    for name in ("B", "b"):
        np.testing.assert_array_equal(
            runs[0].posterior[name].values, runs[1].posterior[name].values
        )
    moves = runs[0].sample_stats["shift_moves"].values
    assert np.all(moves == moves[:, :1])  # fixed after tuning, per chain


def _three_class_model():
    """40 rows, 2 predictors, K = 3 (class 0 the reference)."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(40, 2))
    with pm.Model() as model:
        B = pm.Normal("B", 0.0, 1.0, shape=(2, 2))
        pm.Categorical(
            "y",
            logit_p=pm.math.concatenate([np.zeros((40, 1)), X @ B], axis=1),
            observed=rng.integers(0, 3, 40),
        )
    return model


@pytest.mark.parametrize("rho", ["tuned", 0.3])
def test_split_model_on_request(rho):
    with _three_class_model():
        step = pymc_sgs.SplitGibbs(rho=rho)
    assert not step.direct and "no split" not in repr(step)


def test_options_without_a_split():
    # no importance weights are needed without a split: log_weights=False is accepted, and
    # exact=True with rho=0 changes nothing; exact=True with rho="auto" keeps the split model
    # with its correction
    with _three_class_model():
        assert pymc_sgs.SplitGibbs(log_weights=False).direct
        assert pymc_sgs.SplitGibbs(rho=0, log_weights=False).direct
        assert pymc_sgs.SplitGibbs(rho=0, exact=True).direct
        assert not pymc_sgs.SplitGibbs(exact=True).direct
        with pytest.raises(ValueError, match="log_weights"):
            pymc_sgs.SplitGibbs(log_weights="no")
