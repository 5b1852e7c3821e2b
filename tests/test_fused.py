"""The compiled (numba) z-pass against the pure-numpy reference path."""

import numpy as np
import pytest

from pymc_sgs.families import FAMILIES
from pymc_sgs.kernel import SplitGibbsKernel
from pymc_sgs.problem import ParamSlice, SplitProblem, SplitTerm

from .engine_runs import assert_engines_agree, run_both_engines

NUISANCE = {"negativebinomial": {"alpha": 2.5}}


def _problem(family, n=300, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) / np.sqrt(d)
    eta = X @ rng.normal(size=d) + 0.3
    trials = None
    if family == "bernoulli":
        y = rng.binomial(1, 1 / (1 + np.exp(-eta))).astype(float)
    elif family == "binomial":
        trials = rng.integers(1, 20, size=n).astype(float)
        y = rng.binomial(trials.astype(int), 1 / (1 + np.exp(-eta))).astype(float)
    elif family == "poisson":
        y = rng.poisson(np.exp(eta + 1.0)).astype(float)
    elif family == "negativebinomial":
        y = rng.negative_binomial(2.5, 2.5 / (2.5 + np.exp(eta + 1.0))).astype(float)
    else:
        trials = np.full(n, 0.7)  # the Normal family's sigma
        y = eta + 0.7 * rng.normal(size=n)
    # two terms sharing theta, to exercise the per-term loop
    half = n // 2
    terms = tuple(
        SplitTerm(
            f"y{k}",
            FAMILIES[family].bind(**NUISANCE.get(family, {})),
            X[sl],
            np.full(sl.stop - sl.start, 0.1 * k),
            y[sl],
            None if trials is None else trials[sl],
        )
        for k, sl in enumerate([slice(0, half), slice(half, n)])
    )
    return SplitProblem(
        params=(ParamSlice("b", (d,), 0, d),),
        prior_mean=np.zeros(d),
        prior_precision=np.eye(d) / 4.0,
        split_terms=terms,
    )


@pytest.mark.parametrize(
    "family", ["bernoulli", "binomial", "poisson", "normal", "negativebinomial"]
)
@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("block", [None, 64])
def test_numba_path_reproduces_numpy_path(family, exact, block, monkeypatch):
    if block is not None:
        # both paths draw the z-move's random numbers block by block (rows.Z_BLOCK rows);
        # with blocks of 64 rows each term of 150 rows takes three calls, the last one short
        import pymc_sgs.rows as rows_module

        monkeypatch.setattr(rows_module, "Z_BLOCK", block)
    prob = _problem(family)
    runs = run_both_engines(prob, rho=0.4, alpha=-0.95, seed=7, n_steps=30, exact=exact)
    assert_engines_agree(runs)


def test_row_blocks_change_the_random_numbers_not_the_rows(monkeypatch):
    # negative control for the blocked comparison above: the block size does change which
    # random number each row gets (so that comparison exercises the blocking), while a block
    # size at least the term's length reproduces the unblocked stream exactly
    import pymc_sgs.rows as rows_module

    prob = _problem("bernoulli")
    zs = {}
    for block in (64, 150, 10_000):
        monkeypatch.setattr(rows_module, "Z_BLOCK", block)
        k = SplitGibbsKernel(prob, rho=0.4, alpha=-0.95, engine="numba")
        rng = np.random.default_rng(11)
        state = k.init(np.zeros(prob.d), rng)
        state, _ = k.sweep(state, rng)
        zs[block] = state.z
    assert not np.allclose(zs[64], zs[150])
    np.testing.assert_array_equal(zs[150], zs[10_000])


def test_paths_differ_when_the_target_differs():
    # negative control: the comparison above does detect a different kernel
    prob = _problem("bernoulli")
    thetas = []
    for rho in (0.4, 0.41):
        k = SplitGibbsKernel(prob, rho=rho, alpha=-0.95, engine="numba")
        rng = np.random.default_rng(7)
        state = k.init(np.zeros(prob.d), rng)
        for _ in range(10):
            state, _ = k.sweep(state, rng)
        thetas.append(state.theta)
    assert not np.allclose(thetas[0], thetas[1], rtol=1e-8, atol=1e-8)


def test_engine_validation():
    prob = _problem("bernoulli")
    with pytest.raises(ValueError, match="engine"):
        SplitGibbsKernel(prob, rho=0.4, engine="fortran")


def test_numba_path_follows_nuisance_changes():
    # NegativeBinomial alpha changed between sweeps (as SplitGibbs's slice update does):
    # both paths use the new value
    prob = _problem("negativebinomial")
    runs = {}
    for engine in ("numpy", "numba"):
        k = SplitGibbsKernel(prob, rho=0.4, alpha=-0.95, log_weights=True, engine=engine)
        rng = np.random.default_rng(3)
        state = k.init(np.zeros(prob.d), rng)
        out = []
        for i in range(20):
            for j, fam in enumerate(k.families):
                k.rows.set_family(j, fam.bind(alpha=1.0 + 0.2 * i))
            state, info = k.sweep(state, rng)
            out.append((state.theta.copy(), info.log_weight))
        runs[engine] = out
    for (t0, w0), (t1, w1) in zip(runs["numpy"], runs["numba"]):
        np.testing.assert_allclose(t1, t0, rtol=1e-8, atol=1e-8)
        np.testing.assert_allclose(w1, w0, rtol=1e-8, atol=1e-6)
    # negative control: without the change on one path the chains part
    k = SplitGibbsKernel(prob, rho=0.4, alpha=-0.95, log_weights=True, engine="numba")
    rng = np.random.default_rng(3)
    state = k.init(np.zeros(prob.d), rng)
    for _ in range(20):
        state, _ = k.sweep(state, rng)
    assert not np.allclose(state.theta, runs["numpy"][-1][0], rtol=1e-8, atol=1e-8)
