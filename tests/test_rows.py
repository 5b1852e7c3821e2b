"""The row-block protocol (pymc_sgs.rows): both holders of split rows implement it, and the
rows in one process compute what the theta-step's conditionals compute, bit for bit."""

import inspect

import numpy as np
import pytest
import scipy.sparse

from pymc_sgs.backends import LocalBackend
from pymc_sgs.backends.sharded import ShardedKernel, ShardedRows
from pymc_sgs.families import FAMILIES
from pymc_sgs.kernel import SplitGibbsKernel
from pymc_sgs.problem import ParamSlice, SplitProblem, SplitTerm
from pymc_sgs.rows import LocalRows, RowBlock


def _protocol_methods():
    return {
        name: inspect.signature(member)
        for name, member in vars(RowBlock).items()
        if inspect.isfunction(member) and not name.startswith("_")
    }


def _protocol_gaps(cls) -> list:
    """What ``cls`` lacks of :class:`RowBlock`: missing methods, or parameters that differ."""
    gaps = []
    for name, want in _protocol_methods().items():
        have = getattr(cls, name, None)
        if not callable(have):
            gaps.append(f"{name}: missing")
            continue
        if list(inspect.signature(have).parameters) != list(want.parameters):
            gaps.append(f"{name}: {inspect.signature(have)} != {want}")
    return gaps


def test_the_protocol_covers_the_sweep_the_shift_move_and_the_laplace_start():
    names = set(_protocol_methods())
    assert {"sample_z", "z_pass", "log_weight", "split_rhs", "restore", "hold"} <= names
    assert {"shift_propose", "shift_commit", "shift_constants", "add_laplace_terms"} <= names
    assert {"log_weight_var_parts", "design_scale", "dropping_moves", "track"} <= names


@pytest.mark.parametrize("cls", [LocalRows, ShardedRows])
def test_row_holders_implement_the_protocol(cls):
    assert _protocol_gaps(cls) == []


def test_protocol_check_detects_a_missing_or_different_method():
    """Negative control: a holder without ``z_pass`` and with another ``split_rhs`` fails."""

    class Incomplete(LocalRows):
        z_pass = None

        def split_rhs(self, z, rho):
            return None

    gaps = _protocol_gaps(Incomplete)
    assert any(g.startswith("z_pass: missing") for g in gaps)
    assert any(g.startswith("split_rhs:") for g in gaps)


def _problem(n=300, d=4, sparse=False, seed=0):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(n), rng.normal(size=(n, d - 1))])
    y = rng.binomial(1, 0.5, size=n).astype(float)
    A = scipy.sparse.csr_matrix(X) if sparse else X
    prob = SplitProblem(
        params=(ParamSlice("b", (d,), 0, d),),
        prior_mean=np.zeros(d),
        prior_precision=np.eye(d),
        split_terms=(SplitTerm("y", FAMILIES["bernoulli"], A, rng.normal(size=n), y, None),),
    )
    return prob, rng.normal(size=n)


@pytest.mark.parametrize(
    "case",
    ["cholesky, scalar rho", "cholesky, rho per row", "cg, dense", "cg, sparse"],
)
def test_local_rows_atz_is_the_conditionals_bit_for_bit(case):
    """The kernel takes ``A^T (z - o) / rho^2`` from its rows; the theta-step's conditionals
    compute the same sum, and the draws stay those of before the protocol only if the two
    agree to the last bit (also after a change of rho)."""
    sparse = case.endswith("sparse")
    prob, z = _problem(sparse=sparse)
    rho = np.linspace(0.2, 0.6, prob.n_split) if "per row" in case else 0.3
    solver = "cg" if case.startswith("cg") else "cholesky"
    kernel = SplitGibbsKernel(prob, rho=rho, theta_solver=solver)
    assert np.array_equal(kernel.rows.split_rhs(z), kernel.theta_conditional.split_rhs(z))
    kernel.set_rho(0.7)
    assert np.array_equal(kernel.rows.split_rhs(z), kernel.theta_conditional.split_rhs(z))


def test_sharded_rows_sum_what_the_local_rows_compute():
    """Through the protocol, three shards give the local rows' A^T z, log weight and Laplace
    terms (to rounding: the sums are taken shard by shard)."""
    prob, _ = _problem()
    theta = np.array([0.2, -0.3, 0.1, 0.4])
    local = SplitGibbsKernel(prob, rho=0.3)
    sharded = LocalBackend(n_shards=3).build_kernel(prob, 0.3, 0.0, False)
    assert isinstance(sharded, ShardedKernel)
    state = sharded.init(theta, np.random.default_rng(0))
    z = np.concatenate([w.z for w in sharded.transport.workers])
    np.testing.assert_allclose(sharded.rows.split_rhs(state.z), local.rows.split_rhs(z), rtol=1e-12)
    np.testing.assert_allclose(
        sharded.log_weight(theta)[0], local.log_weight(theta)[0], rtol=1e-10, atol=1e-10
    )
    for a, b in zip(sharded.neg_log_posterior()(theta), local.neg_log_posterior()(theta)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    np.testing.assert_allclose(sharded.rows.design_scale(), local.rows.design_scale(), rtol=1e-12)
