"""The PyMC-written synthetic GLMM of ``benchmarks/mixed.py`` (``harness.mixed_cases``).

``pymc-synthetic-<n>-<L>`` cases hold the synthetic data of ``synthetic-<n>-<L>`` in a model
written with index columns (the scale benchmark at n = 1e6, L = 1e4, where Bambi's dense
group design would not fit in memory). The model must be the one the Bambi case describes:

* ``SplitGibbs`` reads it as a mixed model with one group term of ``L`` levels, stored as
  index + value columns (no ``n x L`` array), and with the same parametrisation names as
  Bambi (``1|g_sigma``, ``1|g_offset``);
* its log density at a point equals a direct numpy evaluation of the stated priors and
  Bernoulli-logit likelihood (a wrong sign or a missing term fails it).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import scipy.stats

sys.path.append(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
)

from harness.mixed_cases import IndexModel, case_info, load_data  # noqa: E402

pytest.importorskip("pandas")

CASE = "pymc-synthetic-300-7x3"


def test_case_is_the_synthetic_data_written_with_index_columns():
    df = load_data(CASE)
    assert len(df) == 300 and len(df["g"].cat.categories) == 7
    assert "PyMC with index columns" in case_info(CASE)["label"]
    bm = IndexModel(df, centred=False)
    import pymc_sgs
    from pymc_sgs.mixed.step import MixedSplitGibbs

    with bm.backend.model:
        step = pymc_sgs.SplitGibbs()
    assert isinstance(step, MixedSplitGibbs)
    terms = step.problem.terms
    assert sorted((t.n_levels, t.index.shape) for t in terms) == [(3, (300,)), (7, (300,))]
    names = {v.name for v in bm.backend.model.free_RVs}
    assert {"1|g_sigma", "1|g_offset", "1|h_sigma", "1|h_offset", "Intercept"} <= names


@pytest.mark.parametrize("centred", [False, True])
def test_log_density_is_the_stated_model(centred):
    df = load_data(CASE)
    model = IndexModel(df, centred=centred).backend.model
    rng = np.random.default_rng(3)
    point = {
        "Intercept": 0.3,
        "x1": -0.2,
        "x2": 0.4,
        "1|g_sigma_log__": np.log(0.7),
        "1|h_sigma_log__": np.log(1.3),
    }
    key = "1|{}" if centred else "1|{}_offset"
    u = {f: rng.standard_normal(len(df[f].cat.categories)) for f in ("g", "h")}
    for f in ("g", "h"):
        point[key.format(f)] = u[f]
    got = float(model.compile_logp()(point))

    sd = {"g": 0.7, "h": 1.3}
    lp = sum(scipy.stats.norm.logpdf(point[k], 0, 2.5) for k in ("Intercept", "x1", "x2"))
    eta = point["Intercept"] + point["x1"] * df["x1"].to_numpy() + point["x2"] * df["x2"].to_numpy()
    for f in ("g", "h"):
        # HalfNormal(2.5) on the log scale, with the Jacobian
        lp += scipy.stats.halfnorm.logpdf(sd[f], scale=2.5) + np.log(sd[f])
        effect = u[f] if centred else sd[f] * u[f]
        lp += np.sum(scipy.stats.norm.logpdf(u[f], 0, sd[f] if centred else 1.0))
        eta = eta + effect[df[f].cat.codes.to_numpy()]
    y = df["y"].to_numpy()
    lp += np.sum(y * eta - np.logaddexp(0.0, eta))
    # PyTensor's log1p(exp) is piecewise: about 1e-9 per row from numpy's logaddexp
    assert got == pytest.approx(lp, rel=1e-8, abs=0)


@pytest.mark.parametrize("name", ["sleepstudy-lkj", "contraception-lkj"])
def test_correlated_cases_write_one_posterior_two_ways(name):
    """The ``*-lkj`` cases' non-centred model (``u = u_offset @ chol.T``, the NUTS baseline)
    is the centred one (``u ~ MvNormal(0, chol=chol)``, what SplitGibbs reads) in other
    coordinates: at any point, log p_nc(b, chol, u_offset) = log p_c(b, chol, u) + L log det
    chol with ``u = u_offset @ chol.T``. The transposed product ``chol @ u_offset.T`` (a
    different prior) fails the identity. SplitGibbs reads both (the same step)."""
    from harness.mixed_cases import build_model

    import pymc_sgs

    nc = build_model(name, None, centred=False).backend.model
    c = build_model(name, None, centred=True).backend.model
    rng = np.random.default_rng(11)
    point = nc.initial_point()
    for k, v in point.items():
        point[k] = v + 0.3 * rng.standard_normal(np.shape(v))
    # the Cholesky factor at the point, from the packed lower triangle ``chol`` (row-major)
    (packed_at,) = nc.replace_rvs_by_values([nc["chol"]])
    packed = nc.compile_fn(packed_at, inputs=nc.value_vars, on_unused_input="ignore")(point)
    chol = np.zeros((2, 2))
    chol[np.tril_indices(2)] = packed
    z = point["u_offset"]
    L = z.shape[0]
    log_det = float(np.sum(np.log(np.diag(chol))))
    cpoint = {k: v for k, v in point.items() if k != "u_offset"}
    logp_c = c.compile_logp()
    got = float(nc.compile_logp()(point))
    assert got == pytest.approx(float(logp_c({**cpoint, "u": z @ chol.T})) + L * log_det, rel=1e-9)
    wrong = float(logp_c({**cpoint, "u": (chol @ z.T).T[:, ::-1]})) + L * log_det
    assert abs(got - wrong) > 1.0

    for model in (c, nc):
        with model:
            assert type(pymc_sgs.SplitGibbs()).__name__ == "MixedSplitGibbs"
