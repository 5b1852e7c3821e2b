"""The public surface: twelve keyword arguments, option objects, and the former keywords.

The former keywords keep working for one release with a ``FutureWarning`` naming their
replacement, and give the draws of the new spelling.
"""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pymc as pm
import pytest

import pymc_sgs
from pymc_sgs import BlockSplitGibbs, ExactOptions, LocalBackend, ShiftOptions, SplitGibbs


def _model(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = rng.binomial(1, 1 / (1 + np.exp(-(X @ np.array([1.0, -0.5])))))
    with pm.Model() as model:
        b = pm.Normal("b", 0, 2.0, shape=2)
        pm.Bernoulli("y", logit_p=X @ b, observed=y)
    return model


def _draws(model, step):
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(
            draws=30,
            tune=120,
            chains=1,
            cores=1,
            random_seed=11,
            step=step,
            progressbar=False,
            compute_convergence_checks=False,
        )
    return idata.posterior["b"].values


def test_public_signature_has_at_most_twelve_parameters():
    params = [
        p
        for p in inspect.signature(SplitGibbs.__init__).parameters.values()
        if p.name != "self"
        and not p.name.startswith("_")
        and p.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    assert len(params) <= 12, [p.name for p in params]


@pytest.mark.parametrize(
    "legacy, new",
    [
        (dict(exact=True, exact_sweeps=3), dict(exact=ExactOptions(sweeps=3))),
        (dict(shift_moves=2), dict(shift=ShiftOptions(moves=2))),
        (dict(shift_relaxation=0.0), dict(shift=ShiftOptions(relaxation=0.0))),
        (dict(sweep_every=2), dict(shift=ShiftOptions(sweep_every=2))),
        (dict(theta_solver="cholesky"), dict(backend=LocalBackend(theta_solver="cholesky"))),
        (dict(dtype="float32"), dict(backend=LocalBackend(dtype="float32"))),
    ],
    ids=["exact_sweeps", "shift_moves", "shift_relaxation", "sweep_every", "theta_solver", "dtype"],
)
def test_former_keywords_warn_and_give_the_same_draws(legacy, new):
    model = _model()
    with model:
        with pytest.warns(FutureWarning, match=f"{next(iter(legacy.keys() - {'exact'}))} -> "):
            old_step = SplitGibbs(rho=0.4, **legacy)
        new_step = SplitGibbs(rho=0.4, **new)
    np.testing.assert_array_equal(_draws(model, old_step), _draws(model, new_step))


def test_block_split_gibbs_is_the_former_split_shards():
    model = _model(n=60)
    with model:
        with pytest.warns(FutureWarning, match="BlockSplitGibbs"):
            old_step = SplitGibbs(split="shards", n_shards=3, rho=0.5, alpha=0)
        new_step = BlockSplitGibbs(n_blocks=3, rho=0.5)
    np.testing.assert_array_equal(_draws(model, old_step), _draws(model, new_step))


def test_blocked_is_ignored_with_a_warning():
    # blocked=False used to reach PyMC's BlockedStep, which would build one step per variable
    with _model():
        with pytest.warns(FutureWarning, match="blocked -> nothing"):
            step = SplitGibbs(rho=0.4, blocked=False)
    assert isinstance(step, SplitGibbs)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (
            dict(exact="yes"),
            ValueError,
            r"exact must be True, False or a pymc_sgs.ExactOptions\(...\); received 'yes'",
        ),
        (
            dict(shift=1),
            ValueError,
            r"shift must be True, False or a pymc_sgs.ShiftOptions\(...\); received 1",
        ),
        (dict(rhoo=0.3), TypeError, "unexpected keyword argument 'rhoo'"),
    ],
)
def test_bad_options_are_named(kwargs, error, match):
    with _model(), pytest.raises(error, match=match):
        SplitGibbs(**kwargs)


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: ExactOptions(sweeps=0), r"ExactOptions\(sweeps=...\) must be a positive"),
        (lambda: ShiftOptions(moves=0), "shift_moves must be 'auto' or an integer"),
        (lambda: ShiftOptions(relaxation=1.0), r"shift_relaxation must be a number in \[0, 1\)"),
        (lambda: ShiftOptions(sweep_every="4"), r"ShiftOptions\(sweep_every=...\) must be"),
        (lambda: LocalBackend(theta_solver="lu"), "theta_solver must be 'auto', 'cholesky'"),
        (lambda: LocalBackend(dtype="float16"), "dtype must be 'float64' or 'float32'"),
        (lambda: LocalBackend(n_shards=2, dtype="float32"), "dtype='float32' is not available"),
    ],
)
def test_option_objects_check_their_values(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_option_objects_are_frozen_and_exported():
    opts = ShiftOptions()
    with pytest.raises(AttributeError):
        opts.moves = 2
    assert {"ExactOptions", "ShiftOptions", "BlockSplitGibbs"} <= set(pymc_sgs.__all__)
