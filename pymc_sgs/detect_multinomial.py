"""Graph reading for multinomial logistic regression: ``pm.Categorical``, softmax of ``X @ B``.

Recognises an observed ``pm.Categorical("y", p=pm.math.softmax(eta, axis=-1))`` or
``pm.Categorical("y", logit_p=eta)`` (PyMC turns ``logit_p`` into the same softmax),
where the logits ``eta`` (n, K) are affine in the coefficients: ``X @ B`` with ``B``
(p, K), ``X @ B_full`` with ``B_full = pt.concatenate([pt.zeros((p, 1)), B], axis=1)``
(a reference class), plus an intercept vector per class, an offset, ``pm.Data`` —
anything affine, read numerically as in :mod:`pymc_sgs.detect`. The coefficients
need Normal, MvNormal or Flat priors with fixed parameters.

The result is the design of :class:`pymc_sgs.multinomial.CategoricalSplitKernel`:
softmax depends only on differences of logits, so row i's potential is a function of
``z_i = (eta_ik - eta_i0)_{k=1..K-1}``, affine in theta with matrix ``A_i = D M_i``
(``M_i`` the K x d map of theta to ``eta_i``, ``D = [-1, I_{K-1}]``). With a zero
reference column in class 0 this is ``I_{K-1} ⊗ x_i^T``; with a full (p, K) matrix
it is ``D ⊗ x_i^T``, whose null direction (one constant added to every class) is
controlled by the prior, as it is in the model itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pymc as pm
import pytensor
import scipy.sparse
from pymc.distributions.continuous import FlatRV
from pytensor.scalar.basic import Exp
from pytensor.scalar.math import Erf, Erfc, Erfcx, Sigmoid
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.random.basic import CategoricalRV, MvNormalRV, NormalRV
from pytensor.tensor.special import Softmax
from scipy.special import softmax as np_softmax

from .graph import (
    NUTS,
    UnsupportedModelError,
    check_no_other_dependants,
    coef_labels,
    dist_name,
    find_outermost,
    free_rvs_in,
    gaussian_prior,
    observed_data,
    shape_of,
    user_theta_rvs,
)
from .problem import ParamSlice

__all__ = ["DetectedCategorical", "detect_categorical", "has_categorical_likelihood", "is_ordinal"]

_HOW = "p=pm.math.softmax(eta, axis=-1) or logit_p=eta, with eta = X @ B (+ intercepts)"


@dataclass
class DetectedCategorical:
    """A categorical likelihood with an affine softmax predictor, in kernel form.

    Attributes
    ----------
    name : str
        The observed variable.
    A : scipy.sparse.csr_matrix, shape (n (K-1), d)
        Row ``i (K-1) + k - 1`` maps theta to ``z_ik = eta_ik - eta_i0``.
    offset : ndarray (n (K-1),)
    y : ndarray of int (n,)
    n_classes : int
    prior_mean, prior_precision : ndarray
        Gaussian prior of theta (zero precision for Flat priors).
    params : tuple of ParamSlice
        Where each model variable sits in theta.
    """

    name: str
    A: scipy.sparse.csr_matrix
    offset: np.ndarray
    y: np.ndarray
    n_classes: int
    prior_mean: np.ndarray
    prior_precision: np.ndarray
    params: tuple

    @property
    def value_var_names(self) -> list:
        return [p.name for p in self.params]

    @property
    def d(self) -> int:
        return self.A.shape[1]


def _categorical_rvs(model):
    """Observed ``pm.Categorical`` variables whose probabilities depend on free variables."""
    return [
        rv
        for rv in model.observed_RVs
        if isinstance(rv.owner.op, CategoricalRV) and free_rvs_in([rv.owner.inputs[2]], model)
    ]


def has_categorical_likelihood(model=None) -> bool:
    """Does the model observe a ``pm.Categorical`` whose ``p`` depends on free variables?"""
    return bool(_categorical_rvs(pm.modelcontext(model)))


def is_ordinal(rv, model) -> bool:
    """Is the ``pm.Categorical`` ``rv`` an ordinal likelihood rather than a softmax?

    ``pm.OrderedLogistic`` / ``pm.OrderedProbit`` and Bambi's ``cumulative`` and ``sratio``
    families build their class probabilities from an inverse link (invlogit, invprobit or
    Bambi's cloglog ``1 - exp(-exp(x))``) of cutpoints minus the predictor, with no softmax.
    """
    if not isinstance(rv.owner.op, CategoricalRV):
        return False
    param = rv.owner.inputs[2]
    free = set(model.free_RVs)
    if not free_rvs_in([param], model) or _find_softmax(param, free):
        return False

    def is_op(node, types):
        return isinstance(node.op, Elemwise) and isinstance(node.op.scalar_op, types)

    def cloglog(node):  # exp(-exp(x))
        return is_op(node, Exp) and bool(
            find_outermost(node.inputs[0], free, lambda inner: is_op(inner, Exp))
        )

    return bool(
        find_outermost(
            param, free, lambda node: is_op(node, (Sigmoid, Erf, Erfc, Erfcx)) or cloglog(node)
        )
    )


def _find_softmax(param, free):
    """Outermost Softmax nodes of the free variables in the graph of ``param``."""
    return find_outermost(param, free, lambda node: isinstance(node.op, Softmax))


def _prior(rv, model, size):
    """``(mean, precision)`` of a coefficient's Normal, MvNormal or Flat prior (fixed parameters)."""
    op = rv.owner.op
    transformed = model.rvs_to_transforms.get(rv) is not None
    if transformed or not isinstance(op, (NormalRV, MvNormalRV, FlatRV)):
        raise UnsupportedModelError(
            f"coefficient {rv.name!r} of the softmax has a {dist_name(rv)} prior. SplitGibbs "
            "samples multinomial logistic regression with Normal, MvNormal or Flat priors on "
            "the coefficients (theta | z must be Gaussian); use one of those, or sample this "
            "model with NUTS."
        )
    hyper = free_rvs_in(rv.owner.inputs[2:], model)
    if hyper:
        raise UnsupportedModelError(
            f"the prior of coefficient {rv.name!r} of the softmax depends on the free "
            f"variable(s) {[h.name for h in hyper]}; for pm.Categorical SplitGibbs supports "
            "priors with fixed parameters only (no hierarchical scales). Fix them, or sample "
            "this model with NUTS."
        )
    mean, prec, _ = gaussian_prior(rv, model, size)
    return mean, prec


def detect_categorical(model=None, vars=None, seed: int = 0) -> DetectedCategorical:
    """Describe ``pm.Categorical(p=softmax(X @ B + b))`` as a :class:`DetectedCategorical`.

    Parameters
    ----------
    model : pm.Model, optional
    vars : list, optional
        The coefficient variables (default: every free variable of the logits);
        must include all of them.
    seed : int
        Seed of the random points at which affinity and the softmax are verified.

    Raises
    ------
    UnsupportedModelError
        Naming the unsupported part of the graph (no softmax, softmax over the
        wrong axis, logits not affine, non-Gaussian or hierarchical prior, other
        likelihoods or variables depending on the coefficients).
    ValueError
        Observations outside ``0..K-1``, non-finite design, improper ``theta | z``.
    """
    model = pm.modelcontext(model)
    cats = _categorical_rvs(model)
    if len(cats) != 1:
        raise UnsupportedModelError(
            f"SplitGibbs samples one pm.Categorical likelihood at a time; the model has "
            f"{len(cats)} whose p depends on free variables ({[r.name for r in cats]}). Merge "
            "them into one observed variable, or sample this model with NUTS."
        )
    (rv,) = cats
    name = rv.name
    param = rv.owner.inputs[2]
    free = set(model.free_RVs)
    found = _find_softmax(param, free)
    if not found and is_ordinal(rv, model):
        raise UnsupportedModelError(
            f"observed variable {name!r}: its Categorical probabilities are cumulative "
            "(an ordinal likelihood: pm.OrderedLogistic, pm.OrderedProbit, Bambi's "
            "family='cumulative' or 'sratio'), which SplitGibbs does not support. Sample this "
            f"model with {NUTS}."
        )
    if not found:
        raise UnsupportedModelError(
            f"observed variable {name!r}: its Categorical probabilities p are not a softmax of "
            f"a linear predictor (no pm.math.softmax of the coefficients in its graph). Write "
            f"{_HOW}, or sample this model with {NUTS}."
        )
    if len(found) > 1:
        raise UnsupportedModelError(
            f"observed variable {name!r}: its p combines {len(found)} softmax terms of the "
            f"coefficients (e.g. a mixture), so it is not one multinomial logit. Write {_HOW}."
        )
    sm = found[0]
    eta = sm.owner.inputs[0]
    axis = sm.owner.op.axis
    if axis is None or axis not in (-1, eta.ndim - 1):
        raise UnsupportedModelError(
            f"observed variable {name!r}: the softmax runs over axis {axis} of the logits "
            f"(ndim {eta.ndim}); the classes must be the last axis, pm.math.softmax(eta, "
            "axis=-1) with eta of shape (n, K)."
        )
    eta_rvs = free_rvs_in([eta], model)
    if vars is not None:
        theta_rvs = user_theta_rvs(vars, model)
        missing = [r.name for r in eta_rvs if r not in theta_rvs]
        if missing:
            raise UnsupportedModelError(
                f"the logits of {name!r} depend on {missing}, which are not among the variables "
                "given to SplitGibbs (vars); SplitGibbs must own every coefficient of the "
                "softmax. Add them to vars or leave vars unset."
            )
        extra = [r.name for r in theta_rvs if r not in eta_rvs]
        if extra:
            raise UnsupportedModelError(
                f"vars contains {extra}, which the logits of {name!r} do not depend on; "
                "SplitGibbs samples the coefficients of the softmax only."
            )
    else:
        theta_rvs = eta_rvs
    theta_set = set(theta_rvs)
    for other in model.observed_RVs:
        if other is not rv and set(free_rvs_in(other.owner.inputs[2:], model)) & theta_set:
            raise UnsupportedModelError(
                f"observed variable {other.name!r} depends on the softmax coefficients of "
                f"{name!r}; SplitGibbs samples a pm.Categorical likelihood on its own. Use "
                "separate coefficients, or sample this model with NUTS."
            )
    check_no_other_dependants(model, theta_rvs, [SimpleNamespace(rv=rv, eta=eta)])

    params, means, precs, start = [], [], [], 0
    for r in theta_rvs:
        shape = shape_of(r)
        size = int(np.prod(shape))
        vv = model.rvs_to_values[r]
        params.append(ParamSlice(vv.name, shape, start, start + size, str(vv.dtype)))
        mean, prec = _prior(r, model, size)
        means.append(mean)
        precs.append(prec)
        start += size
    d = start
    prior_precision = np.zeros((d, d))
    for p, prec in zip(params, precs):
        prior_precision[p.start : p.stop, p.start : p.stop] = prec

    y = observed_data(model.rvs_to_values[rv], name)
    eta_shape = tuple(
        int(s) for s in np.broadcast_shapes(y.shape + (1,), tuple(int(s) for s in eta.shape.eval()))
    )
    K = eta_shape[-1]
    if eta_shape[:-1] != y.shape or y.ndim != 1:
        raise UnsupportedModelError(
            f"observed variable {name!r}: SplitGibbs needs a vector of n observations and "
            f"logits of shape (n, K); received observations of shape {y.shape} and logits "
            f"broadcasting to {eta_shape}."
        )
    if K < 2:
        raise UnsupportedModelError(
            f"observed variable {name!r}: the softmax has {K} class; it needs at least 2."
        )
    if np.any(~np.isfinite(y)) or np.any((y < 0) | (y > K - 1) | (y != np.round(y))):
        raise ValueError(
            f"observed variable {name!r}: Categorical observations must be integers in "
            f"0..{K - 1} (K = {K} classes); received values from {np.nanmin(y):g} to "
            f"{np.nanmax(y):g}."
        )
    n = y.shape[0]

    value_vars = [model.rvs_to_values[r] for r in theta_rvs]
    graphs = model.replace_rvs_by_values([eta, param])
    fn = pytensor.function(value_vars, graphs, on_unused_input="ignore")
    shapes = [shape_of(r) for r in theta_rvs]
    splits = np.cumsum([int(np.prod(s)) for s in shapes])[:-1]

    def evaluate(theta):
        args = [
            np.asarray(part.reshape(s), dtype=vv.dtype)
            for part, s, vv in zip(np.split(theta, splits), shapes, value_vars)
        ]
        with np.errstate(all="ignore"):
            e, p = fn(*args)
        return (
            np.broadcast_to(e, eta_shape).astype(float),
            np.broadcast_to(p, eta_shape).astype(float),
        )

    def check_softmax(e, p):
        if not np.allclose(p, np_softmax(e, axis=-1), rtol=0.0, atol=1e-9):
            raise UnsupportedModelError(
                f"observed variable {name!r}: its Categorical p contains a softmax of the "
                "coefficients but is not equal to softmax(eta, axis=-1) (e.g. a transformed or "
                f"mixed probability). Write {_HOW}."
            )

    e0, p0 = evaluate(np.zeros(d))
    check_softmax(e0, p0)
    offset = e0.reshape(n * K)
    if not np.all(np.isfinite(offset)):
        raise ValueError(
            f"observed variable {name!r}: the logits have non-finite values (NaN or inf) at "
            "zero coefficients; the design X (and any offset) must be finite."
        )
    rows, cols, vals = [], [], []
    unit = np.zeros(d)
    for j in range(d):
        unit[j] = 1.0
        col = evaluate(unit)[0].reshape(n * K) - offset
        unit[j] = 0.0
        if not np.all(np.isfinite(col)):
            raise ValueError(
                f"observed variable {name!r}: the logits have non-finite values (NaN or inf); "
                "the design X must be finite (remove or impute rows with missing values)."
            )
        nz = np.flatnonzero(col)
        rows.append(nz)
        cols.append(np.full(nz.size, j))
        vals.append(col[nz])
    M = scipy.sparse.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n * K, d)
    )
    rng = np.random.default_rng(seed)
    labels = coef_labels(theta_rvs, shapes)
    for _ in range(2):
        theta = rng.normal(size=d) * 1.7
        e, p = evaluate(theta)
        pred = offset + M @ theta
        scale = 1.0 + np.abs(offset) + abs(M) @ np.abs(theta)
        if not np.all(np.abs(e.reshape(-1) - pred) <= 1e-7 * scale):
            raise UnsupportedModelError(
                f"the logits of observed variable {name!r} are not affine in the coefficients "
                f"{[r.name for r in theta_rvs]} (e.g. products of coefficients or nonlinear "
                "functions of them). SplitGibbs needs eta = X @ B (+ intercepts, offsets); "
                "sample this model with NUTS instead."
            )
        check_softmax(e, p)

    # z_ik = eta_ik - eta_i0: D = [-1, I_{K-1}] for every row
    D = scipy.sparse.hstack([-np.ones((K - 1, 1)), scipy.sparse.eye(K - 1)])
    DD = scipy.sparse.kron(scipy.sparse.eye(n), D, format="csr")
    A = (DD @ M).tocsr()
    A.eliminate_zeros()
    Q = prior_precision + (A.T @ A).toarray()
    try:
        np.linalg.cholesky(Q)
    except np.linalg.LinAlgError:
        w, V = np.linalg.eigh(Q)
        v = np.abs(V[:, 0])
        unseen = [labels[j] for j in np.flatnonzero(v > 0.1 * v.max())]
        raise ValueError(
            f"the posterior of the softmax coefficients of {name!r} is improper: the "
            f"coefficient(s) {unseen[:10]} have a flat prior in a direction that does not "
            "change the class probabilities (a full (p, K) coefficient matrix, to which "
            "softmax is invariant up to one constant per row of X, or collinear columns). "
            "Give them a proper prior (pm.Normal) or use a reference class: "
            "B_full = pt.concatenate([pt.zeros((p, 1)), B], axis=1) with B of shape (p, K-1)."
        ) from None
    return DetectedCategorical(
        name=name,
        A=A,
        offset=DD @ offset,
        y=y.astype(int),
        n_classes=K,
        prior_mean=np.concatenate(means) if means else np.zeros(0),
        prior_precision=prior_precision,
        params=tuple(params),
    )
