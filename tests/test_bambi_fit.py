"""``SplitGibbs(...)`` made with no model on the context stack (``pymc_sgs.deferred``).

``bmb.Model(...).fit(step=pymc_sgs.SplitGibbs())`` constructs the step before Bambi builds
its model; ``pm.sample`` then builds it in the model it samples, with the same draws as a
step constructed inside ``with model:``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

import pymc_sgs
from pymc_sgs.deferred import DeferredStep
from pymc_sgs.step_multinomial import CategoricalSplitGibbs

SAMPLE = dict(
    draws=30, tune=30, chains=2, random_seed=3, progressbar=False, compute_convergence_checks=False
)


def _data(n=80, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(X @ [1.0, -0.5])))).astype(int)
    return X, y


def _logistic():
    X, y = _data()
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 1.0, shape=2)
        pm.Bernoulli("y", logit_p=X @ b, observed=y)
    return model


def _sample(model, step, cores):
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pm.sample(step=step, cores=cores, **SAMPLE)


def test_outside_a_model_the_step_is_deferred():
    step = pymc_sgs.SplitGibbs(rho=0.3)
    assert isinstance(step, DeferredStep)
    assert "deferred" in repr(step)
    with pytest.raises(
        ValueError,
        match=r"no model on the context stack.*'vars'.*inside "
        r"`with model:`.*pm\.sample.*fit\(step=\.\.\.\)",
    ):
        step.vars
    with pytest.raises(TypeError, match="unexpected keyword argument 'rhoo'"):
        pymc_sgs.SplitGibbs(rhoo=0.3)


def test_deferred_step_needs_a_model_where_it_is_used():
    # pm.sample(model=...) does not put the model on the context stack
    with pytest.raises(ValueError, match=r"none is active where it is used.*`with model:`"):
        pm.sample(model=_logistic(), step=pymc_sgs.SplitGibbs(), **SAMPLE)


@pytest.mark.parametrize("cores", [1, 2])
def test_deferred_step_draws_as_one_built_in_the_model(cores):
    model = _logistic()
    with model:
        built = pymc_sgs.SplitGibbs(rho=0.3)
    assert type(built) is pymc_sgs.SplitGibbs
    deferred = pymc_sgs.SplitGibbs(rho=0.3)
    a = _sample(model, built, cores)
    b = _sample(model, deferred, cores)
    np.testing.assert_array_equal(a.posterior["b"].values, b.posterior["b"].values)
    np.testing.assert_array_equal(a.sample_stats["rho"].values, b.sample_stats["rho"].values)


def test_deferred_step_of_a_categorical_model():
    X, _ = _data()
    y = np.random.default_rng(1).integers(0, 3, X.shape[0])
    with pm.Model() as model:
        B = pm.Normal("B", 0.0, 1.0, shape=(2, 2))
        pm.Categorical(
            "y",
            p=pm.math.softmax(X @ pt.concatenate([pt.zeros((2, 1)), B], axis=1), axis=-1),
            observed=y,
        )
    deferred = pymc_sgs.SplitGibbs(rho=0.3)
    with model:
        (step,) = list(deferred)
    assert type(step) is CategoricalSplitGibbs


def test_bambi_fit_with_split_gibbs():
    bmb = pytest.importorskip("bambi")
    import pandas as pd

    X, y = _data(n=120)
    df = pd.DataFrame({"x": X[:, 0] + 5.0, "z": X[:, 1], "y": y})
    kw = dict(draws=40, tune=40, chains=1, cores=1, random_seed=2, progressbar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = bmb.Model("y ~ x + z", df, family="bernoulli")
        m.build()
        fitted = m.fit(step=pymc_sgs.SplitGibbs(), **kw)
        with m.backend.model:
            direct = pm.sample(step=pymc_sgs.SplitGibbs(), compute_convergence_checks=False, **kw)
    assert "rho" in fitted.sample_stats
    # same draws; Bambi reports the Intercept of its centred predictors on the data's scale
    for v in ("x", "z"):
        np.testing.assert_array_equal(fitted.posterior[v].values, direct.posterior[v].values)
    shift = df["x"].mean() * direct.posterior["x"] + df["z"].mean() * direct.posterior["z"]
    np.testing.assert_allclose(
        fitted.posterior["Intercept"].values,
        (direct.posterior["Intercept"] - shift).values,
        rtol=1e-10,
    )
