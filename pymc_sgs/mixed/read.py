"""Read a PyMC (or Bambi) mixed model into a :class:`~pymc_sgs.mixed.problem.MixedProblem`.

A group-specific term is found in the linear predictor as an indexing of a vector (or of
an ``L x k`` matrix) of group coefficients by a constant integer array, ``u[g]``,
multiplied by a value column. The group coefficients may be written

* centred: ``u ~ Normal(mu, tau)`` with ``tau`` a free scale and ``mu`` a constant or a
  free coefficient with a Normal prior (a hierarchical mean);
* non-centred: ``tau * offset`` with ``offset ~ Normal(0, 1)``, as Bambi writes them by
  default (``1|g = 1|g_sigma * 1|g_offset``);
* correlated (``k`` terms per level, an ``L x k`` matrix): centred, ``u ~ MvNormal(mu,
  chol=chol)``, or non-centred, ``u = offset @ chol.T`` with ``offset ~ Normal(0, 1)`` and
  ``chol`` a Cholesky factor of free variables (``pm.LKJCholeskyCov``), as PyMC's examples
  write them for NUTS.

The term is read as (index column, value column): nothing of size ``n x levels`` is built.
Internally every term is centred at zero, ``v ~ N(0, tau^2)``; :class:`MixedLayout` maps
the draws back to the model's own variables (non-centred offsets included) so that
ArviZ, Bambi's ``predict`` and ``interpret`` see the model they built.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pymc as pm
import pytensor
import scipy.linalg
from pytensor.compile.ops import ViewOp
from pytensor.graph.replace import clone_replace

try:  # moved in pytensor 2.32; the old location warns
    from pytensor.graph.traversal import io_toposort
except ImportError:  # pragma: no cover - older pytensor
    from pytensor.graph.basic import io_toposort
from pytensor.scalar.basic import Mul, Second
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.random.basic import MvNormalRV, NormalRV
from pytensor.tensor.random.op import RandomVariable
from pytensor.tensor.subtensor import AdvancedSubtensor, AdvancedSubtensor1

from ..families import StudentTIdentity
from ..graph import (
    DETECT_MODE,
    NUTS,
    UnsupportedModelError,
    ancestors,
    dist_name,
    find_outermost,
    fixed_through,
    free_rvs_in,
    observed_data,
    rebuild_graph,
    shape_of,
    value_of,
    values_at,
)
from ..recognise import classify_observed
from .problem import CorrelatedTerms, GroupTerm, MixedProblem

__all__ = [
    "MixedLayout",
    "MixedModel",
    "group_hyperparameters",
    "read_mixed_model",
    "student_t_glm_parameters",
]

#: families whose rows the mixed kernel splits (log-concave, exact z-sampler)
_INDEX_OPS = (AdvancedSubtensor, AdvancedSubtensor1)


def _strip(var):
    """Skip the wrappers that do not change values (Deterministic's ViewOp, broadcasts)."""
    while var.owner is not None and (
        isinstance(var.owner.op, ViewOp)
        or (isinstance(var.owner.op, DimShuffle) and var.owner.op.is_expand_dims)
    ):
        var = var.owner.inputs[0]
    return var


def _index_nodes(eta, model):
    free = set(model.free_RVs)

    def matches(node):
        if not isinstance(node.op, _INDEX_OPS) or len(node.inputs) != 2:
            return False
        return not free_rvs_in([node.inputs[1]], model)

    return find_outermost(eta, free, matches)


def _hoist_scales(graphs, model):
    """Rewrite ``tau * offset[g]`` as ``(tau * offset)[g]`` in ``graphs`` (same values).

    Users write the non-centred term both ways; the reading below recognises the second
    (Bambi's). Only a scalar free ``tau`` and a vector ``offset ~ Normal(0, 1)`` indexed by
    constant integers are rewritten; anything else is left as it is.
    """
    free = set(model.free_RVs)

    def unit_offset(x):
        if x in free and isinstance(x.owner.op, NormalRV) and x.ndim == 1:
            mu, sd = x.owner.inputs[2:]
            if _is_const(mu, model) and _is_const(sd, model):
                return bool(np.all(value_of(mu) == 0) and np.all(value_of(sd) == 1))
        return False

    replace = {}
    for node in io_toposort([], [g for g in graphs if g is not None]):
        if not (
            isinstance(node.op, Elemwise)
            and isinstance(node.op.scalar_op, Mul)
            and len(node.inputs) == 2
        ):
            continue
        for idx_side, sc_side in ((0, 1), (1, 0)):
            indexed = _strip(node.inputs[idx_side])
            scale = _strip(node.inputs[sc_side])
            inner = indexed.owner
            if (
                inner is not None
                and isinstance(inner.op, _INDEX_OPS)
                and len(inner.inputs) == 2
                and not free_rvs_in([inner.inputs[1]], model)
                and unit_offset(_strip(inner.inputs[0]))
                and scale in free
                and int(np.prod(shape_of(scale))) == 1
                and indexed.type.shape == node.outputs[0].type.shape
            ):
                src = _strip(inner.inputs[0])
                replace[node.outputs[0]] = (scale * src)[inner.inputs[1]]
                break
    if not replace:
        return list(graphs)
    memo = dict(replace)
    return [None if g is None else rebuild_graph(g, memo) for g in graphs]


def _const_int(var):
    """The value of a constant integer scalar graph (a column position), else None."""
    try:
        val = np.asarray(value_of(var))
    except Exception:  # not constant
        return None
    if val.ndim != 0 or not np.issubdtype(val.dtype, np.integer):
        return None
    return int(val)


def _canonical_indexing(graphs, model):
    """Rewrite every indexing of a group-coefficient matrix by rows as one ``u[g]``.

    Users pick the columns of an ``L x k`` matrix ``u`` as ``u[g, j]`` or ``u[g][:, j]``;
    either way the rows are one group-specific array ``u[g]`` (``n x k``), which is what the
    reading below recognises. ``u[g, j]`` becomes ``u[g][:, j]``, and all ``u[g]`` with the
    same ``u`` and the same index values become one variable (same values).
    """
    shared = {}
    replace = {}
    for node in io_toposort([], [g for g in graphs if g is not None]):
        if not isinstance(node.op, _INDEX_OPS) or len(node.inputs) < 2:
            continue
        src, idx, *rest = node.inputs
        if src.ndim != 2 or idx.ndim != 1 or free_rvs_in([idx, *rest], model):
            continue
        if not free_rvs_in([src], model):
            continue
        cols = [_const_int(r) for r in rest]
        if len(rest) > 1 or any(c is None for c in cols):
            continue
        idx_val = np.asarray(value_of(idx))
        if not np.issubdtype(idx_val.dtype, np.integer):
            continue
        key = (src, idx_val.shape, idx_val.tobytes())
        if key not in shared:
            shared[key] = node.outputs[0] if not rest else src[idx]
        rows = shared[key]
        out = rows if not rest else rows[:, cols[0]]
        if out is not node.outputs[0]:
            replace[node.outputs[0]] = out
    if not replace:
        return list(graphs)
    memo = dict(replace)
    return [None if g is None else rebuild_graph(g, memo) for g in graphs]


def _normal_form(graphs, model):
    """``graphs`` with group terms in the forms the reading recognises (same values): one
    ``u[g]`` per group-coefficient matrix, then ``(tau * offset)[g]``."""
    return _hoist_scales(_canonical_indexing(graphs, model), model)


def group_hyperparameters(model, free_dispersion: bool = True) -> list:
    """The free scales and means of group coefficients ``u[g]`` (empty: no mixed model).

    ``u[g]`` with ``u ~ Normal(mu, tau)`` and ``tau`` (or ``mu``) free, or a non-centred
    product ``tau * offset[g]``. Group coefficients with a fixed prior are ordinary
    coefficients of a GLM and stay with :class:`pymc_sgs.SplitGibbs`'s GLM path. A cheap
    test; the full reading (and its messages) is :func:`read_mixed_model`.
    ``free_dispersion=False`` leaves out likelihoods with a free dispersion or shape
    parameter (the GLM path takes those).
    """
    found = []
    if len(model.observed_RVs) != 1:
        return found  # the GLM path (scales by NUTS) takes several likelihood terms
    for rv in model.observed_RVs:
        try:
            term = classify_observed(rv, model)
        except UnsupportedModelError:
            continue
        if term is None or not _likelihood_supported(term, model, free_dispersion):
            # free dispersion / shape parameters, non-log-concave likelihoods: the GLM path
            # (centred group terms, scales updated by NUTS) samples them
            continue
        (eta,) = _normal_form([term.eta], model)
        for gv in _index_nodes(eta, model):
            try:
                source = _read_source(gv.owner.inputs[0], model, "group term")
            except UnsupportedModelError:
                continue  # not a group term this path reads; the GLM path says why
            found += [v for v in source.hyper_rvs if v not in found]
    return found


def student_t_glm_parameters(model) -> list | None:
    """The free ``sigma`` / ``nu`` variables of a Student-t GLM without group terms (empty
    when both are fixed); None when ``model`` is not one.

    The mixed-model step samples such a model exactly, through the scale mixture of normals
    (:class:`~pymc_sgs.mixed.scale_mixture.StudentTKernel` with no group terms: the row
    precisions, then the coefficients with ``sigma`` integrated out and ``sigma``, ``nu``
    by slice updates), where the GLM path can only split its non-log-concave likelihood.
    One observed ``StudentT`` with an identity link, no indexed coefficients.
    """
    if len(model.observed_RVs) != 1:
        return None
    (rv,) = model.observed_RVs
    try:
        term = classify_observed(rv, model)
    except UnsupportedModelError:
        return None
    if term is None or term.kind != "split" or term.family is not StudentTIdentity:
        return None
    (eta,) = _normal_form([term.eta], model)
    if _index_nodes(eta, model):
        return None  # indexed coefficients: group terms (group_hyperparameters) or the GLM path
    return free_rvs_in(list(term.nuisance.values()), model)


def _likelihood_supported(term, model, free_dispersion: bool = True) -> bool:
    """Normal, or a smooth split family (its dispersion/shape parameters data, or free if
    ``free_dispersion``)."""
    if term.kind == "gaussian":
        sig = _strip(term.sigma)
        if sig in set(model.free_RVs):
            return int(np.prod(shape_of(sig))) == 1
        return _is_const(term.sigma, model) and np.size(value_of(term.sigma)) == 1
    if term.kind != "split" or not _smooth(term.family):
        return False
    return free_dispersion or not (
        term.nuisance and free_rvs_in(list(term.nuisance.values()), model)
    )


def _smooth(family) -> bool:
    """A likelihood the GLMM kernels take: a potential with a gradient and a curvature.

    Log-concavity is not needed (Student-t): the Laplace proposal's curvature is clipped at 0
    and the moves are exact Metropolis-Hastings.
    """
    return family is not None and not getattr(family, "piecewise_linear", True)


@dataclass(frozen=True)
class _Source:
    """What one indexed group-coefficient array is made of."""

    rv: object  # the free variable of the group coefficients (u, or the offset)
    noncentred: bool
    scale: object  # free scale variable, or None for a constant scale
    scale_value: np.ndarray | None  # the constant scale, broadcast to (k,)
    mean_rv: object  # free hierarchical mean, or None
    mean_value: np.ndarray  # the constant mean, broadcast to (k,)
    k: int  # columns (terms) of this group coefficient array
    n_levels: int
    cov: object = None  # the k x k covariance graph of correlated effects (MvNormal), else None
    cov_rvs: tuple = ()  # the free variables of ``cov`` (e.g. an LKJ Cholesky factor's)

    @property
    def hyper_rvs(self) -> list:
        """The free variables of this term's prior (its scale or covariance, and mean)."""
        return [v for v in [self.scale, *self.cov_rvs, self.mean_rv] if v is not None]


def _is_const(graph, model):
    return not free_rvs_in([graph], model)


def _broadcast_source(var):
    """The values ``var`` broadcasts: PyMC's MvNormal broadcasts its mean against the
    covariance (``second(cov[..., 0], mu)``), which makes a constant mean look dependent on
    the covariance's free variables."""
    while var.owner is not None:
        op = var.owner.op
        if isinstance(op, DimShuffle) and op.is_expand_dims:
            var = var.owner.inputs[0]
        elif isinstance(op, Elemwise) and isinstance(op.scalar_op, Second):
            var = var.owner.inputs[1]
        else:
            break
    return var


def _check_covariance_priors(deps, model, name, rv) -> None:
    """Refuse a covariance of the group effects ``rv`` whose free variables ``deps`` have
    priors that depend on other free variables (a hyperprior on the LKJ sds)."""
    for d in deps:
        if free_rvs_in(d.owner.inputs[2:], model):
            raise UnsupportedModelError(
                f"group-specific term {name!r}: the prior of {d.name!r} (in the covariance of "
                f"{rv.name!r}) depends on other free variables, which the mixed-model sampler "
                f"does not support. Sample this model with {NUTS}."
            )


def _read_correlated(rv, model, name, mean_of):
    """``u ~ MvNormal(mu, Sigma)``, an ``L x k`` matrix: ``k`` correlated terms per level."""
    rshape = shape_of(rv)
    if len(rshape) != 2:
        raise UnsupportedModelError(
            f"group-specific term {name!r}: {rv.name!r} is an MvNormal of shape {rshape}; "
            "SplitGibbs reads correlated group effects as an L x k matrix (one row per level). "
            f"Sample this model with {NUTS}."
        )
    L, k = (int(x) for x in rshape)
    mu, cov = rv.owner.inputs[2:4]
    lead = cov.type.shape[:-2]
    if cov.type.ndim >= 2 and all(d == 1 for d in lead):
        # PyMC gives the covariance the batch shape (1, k, k)
        cov = cov.reshape((k, k)) if lead else cov
    else:
        raise UnsupportedModelError(
            f"group-specific term {name!r}: {rv.name!r} has a covariance per level; SplitGibbs "
            f"needs one k x k covariance shared by the levels. Sample this model with {NUTS}."
        )
    deps = free_rvs_in([cov], model)
    _check_covariance_priors(deps, model, name, rv)
    mean_rv, mean_value = mean_of(mu, rshape, L, k)
    return _Source(rv, False, None, None, mean_rv, mean_value, k, L, cov=cov, cov_rvs=tuple(deps))


def _read_source(var, model, name):
    """The group coefficients ``var`` (before indexing) as a :class:`_Source`."""
    free = set(model.free_RVs)
    src = _strip(var)
    shape = tuple(int(s) for s in var.type.shape) if None not in var.type.shape else None
    if shape is None:
        shape = tuple(np.shape(var.eval(mode=DETECT_MODE))) if _is_const(var, model) else None
    hint = (
        "SplitGibbs reads group-specific terms written u[g] with u ~ Normal(mu, tau) "
        "(centred) or tau * offset[g] with offset ~ Normal(0, 1) (non-centred, Bambi's "
        "default), tau a free scale with its own prior; correlated effects as an L x k "
        "matrix u ~ MvNormal(mu, chol=chol) (centred) or offset @ chol.T with offset ~ "
        "Normal(0, 1) (non-centred), the covariance a function of free variables with their "
        "own priors (e.g. pm.LKJCholeskyCov)"
    )

    def scale_of(graph, k):
        s = _strip(graph)
        if s in free:
            if free_rvs_in(s.owner.inputs[2:], model):
                raise UnsupportedModelError(
                    f"group-specific term {name!r}: the prior of its scale {s.name!r} depends on "
                    "other free variables, which the mixed-model sampler does not support. Give "
                    f"the scale a prior with fixed parameters, or sample this model with {NUTS}."
                )
            size = int(np.prod(shape_of(s)))
            if size not in (1, k):
                raise UnsupportedModelError(
                    f"group-specific term {name!r}: its scale {s.name!r} has {size} entries for "
                    f"{k} columns."
                )
            return s, None
        if _is_const(graph, model):
            val = np.broadcast_to(np.asarray(value_of(graph), dtype=float), (k,)).copy()
            if not np.all(np.isfinite(val) & (val > 0)):
                raise ValueError(
                    f"group-specific term {name!r}: its fixed scale must be positive and "
                    f"finite; received {val}."
                )
            return None, val
        raise UnsupportedModelError(
            f"group-specific term {name!r}: its scale is a function of free variables "
            f"{[r.name for r in free_rvs_in([graph], model)]}, not one free scale variable. "
            f"{hint}; or sample this model with {NUTS}."
        )

    def mean_of(mu, rshape, L, k):
        """``(free mean variable or None, constant mean per column)``."""
        mu = _broadcast_source(mu)
        if _is_const(mu, model):
            mean_value = np.broadcast_to(np.asarray(value_of(mu), dtype=float), rshape)
            mean_value = mean_value.reshape(L, k)
            if not np.all(mean_value == mean_value[:1]):
                raise UnsupportedModelError(
                    f"group-specific term {name!r}: its prior mean differs between levels; "
                    "SplitGibbs needs one mean per term."
                )
            return None, mean_value[0].copy()
        m = _strip(mu)
        if m not in free or not isinstance(m.owner.op, NormalRV):
            raise UnsupportedModelError(
                f"group-specific term {name!r}: its prior mean is a function of free "
                f"variables {[r.name for r in free_rvs_in([mu], model)]}, not one free "
                f"Normal variable. {hint}; or sample this model with {NUTS}."
            )
        if int(np.prod(shape_of(m))) not in (1, k):
            raise UnsupportedModelError(
                f"group-specific term {name!r}: its mean {m.name!r} must be a scalar or have "
                f"one entry per column ({k})."
            )
        return m, np.zeros(k)

    if src in free:
        rv = src
        if isinstance(rv.owner.op, MvNormalRV):
            return _read_correlated(rv, model, name, mean_of)
        if not isinstance(rv.owner.op, NormalRV):
            raise UnsupportedModelError(
                f"group-specific term {name!r}: {rv.name!r} has a {dist_name(rv)} prior. {hint}; "
                f"or sample this model with {NUTS}."
            )
        rshape = shape_of(rv)
        k = 1 if len(rshape) == 1 else int(np.prod(rshape[1:]))
        L = int(rshape[0])
        mu, sd = rv.owner.inputs[2:]
        scale, scale_value = scale_of(sd, k)
        mean_rv, mean_value = mean_of(mu, rshape, L, k)
        return _Source(rv, False, scale, scale_value, mean_rv, mean_value, k, L)

    node = src.owner
    if (
        node is not None
        and isinstance(node.op, Elemwise)
        and isinstance(node.op.scalar_op, Mul)
        and len(node.inputs) == 2
    ):
        a, b = (_strip(x) for x in node.inputs)
        for offset, sc in ((a, b), (b, a)):
            if offset in free and isinstance(offset.owner.op, NormalRV):
                mu, sd = offset.owner.inputs[2:]
                if not (_is_const(mu, model) and _is_const(sd, model)):
                    continue
                if not (np.all(value_of(mu) == 0) and np.all(value_of(sd) == 1)):
                    raise UnsupportedModelError(
                        f"group-specific term {name!r}: the non-centred offset {offset.name!r} "
                        "must have a Normal(0, 1) prior."
                    )
                rshape = shape_of(offset)
                k = 1 if len(rshape) == 1 else int(np.prod(rshape[1:]))
                scale, scale_value = scale_of(node.inputs[1 if offset is a else 0], k)
                if scale is None:
                    continue
                return _Source(offset, True, scale, None, None, np.zeros(k), k, int(rshape[0]))
    correlated = _read_noncentred_correlated(var, model, name)
    if correlated is not None:
        return correlated
    raise UnsupportedModelError(
        f"group-specific term {name!r} is not a form the mixed-model sampler reads. {hint}; or "
        f"sample this model with {NUTS}."
    )


def _read_noncentred_correlated(var, model, name, seed: int = 0):
    """``u = offset @ chol.T`` with ``offset ~ Normal(0, 1)`` an ``L x k`` matrix and ``chol``
    a lower-triangular function of free variables (``pm.LKJCholeskyCov``'s factor): the
    non-centred form of correlated effects that PyMC's examples write for NUTS. None if
    ``var`` is not of that form.

    The product is read numerically rather than from its graph (``z @ chol.T``,
    ``pt.dot(chol, z.T).T`` and einsum forms all occur): ``var`` must be ``offset @ M.T``
    for the matrix ``M`` obtained by putting the identity in the first ``k`` rows of
    ``offset``, at the model's initial point and at a perturbed one, for random offsets.
    ``M`` lower-triangular with a positive diagonal is then the Cholesky factor of the
    rows' covariance ``M M^T``, which is what is read; the draws map back to the offsets
    through that factor (:meth:`MixedLayout.to_point`).
    """
    deps = free_rvs_in([var], model)
    shape = tuple(var.type.shape)
    candidates = [
        d
        for d in deps
        if isinstance(d.owner.op, NormalRV)
        and len(shape_of(d)) == 2
        and _is_const(d.owner.inputs[2], model)
        and _is_const(d.owner.inputs[3], model)
        and np.all(value_of(d.owner.inputs[2]) == 0)
        and np.all(value_of(d.owner.inputs[3]) == 1)
    ]
    if len(candidates) != 1:
        return None
    (offset,) = candidates
    L, k = (int(x) for x in shape_of(offset))
    cov_rvs = [d for d in deps if d is not offset]
    if k < 2 or L < k or not cov_rvs or shape != (L, k):
        return None
    _check_covariance_priors(cov_rvs, model, name, offset)
    unit = np.zeros((L, k))
    unit[:k] = np.eye(k)
    unit = pytensor.tensor.constant(unit.astype(offset.dtype))
    values = [model.rvs_to_values[offset]] + [model.rvs_to_values[d] for d in cov_rvs]
    # in terms of the value variables: cloning a graph that holds the random variables
    # themselves would clone them into fresh, unrelated random draws
    (var_v,) = model.replace_rvs_by_values([var])
    factor = clone_replace([var_v], replace={values[0]: unit})[0][:k].T
    fn = pytensor.function(values, [var_v, factor], on_unused_input="ignore", mode=DETECT_MODE)
    start = model.initial_point()
    rng = np.random.default_rng(seed)
    for jitter in (0.0, 0.3):
        args = [rng.normal(size=(L, k)).astype(offset.dtype)]
        for v in values[1:]:
            x = np.asarray(start[v.name], dtype=float)
            args.append((x + jitter * rng.normal(size=x.shape)).astype(v.dtype))
        with np.errstate(all="ignore"):
            got, M = (np.asarray(a, dtype=float) for a in fn(*args))
        want = args[0] @ M.T
        if not np.all(np.abs(got - want) <= 1e-8 * (1.0 + np.abs(want))):
            return None
        if not (np.all(np.triu(M, 1) == 0) and np.all(np.diag(M) > 0)):
            raise UnsupportedModelError(
                f"group-specific term {name!r}: the non-centred correlated effects "
                f"{offset.name!r} enter as offset @ M.T with an M that is not lower-triangular "
                "with a positive diagonal. SplitGibbs reads offset @ chol.T with chol a "
                "Cholesky factor (e.g. pm.LKJCholeskyCov's), or the centred u ~ "
                f"MvNormal(0, chol=chol); or sample this model with {NUTS}."
            )
    cov = factor @ factor.T
    return _Source(
        offset, True, None, None, None, np.zeros(k), k, L, cov=cov, cov_rvs=tuple(cov_rvs)
    )


@dataclass
class MixedLayout:
    """Where each of the model's variables sits in ``(h, coef)`` and how to map it back."""

    #: (value variable name, shape, ("beta", start, stop) | ("hyper", start, stop) | group)
    entries: list
    hyper_size: int
    dim: int

    def to_point(self, h, coef, sds, covs=()) -> dict:
        """The model's value variables from the kernel's ``(h, coef)`` (and term sds; the
        correlated terms' covariances ``covs`` where non-centred ones need them)."""
        out = {}
        for name, shape, dtype, how in self.entries:
            kind = how[0]
            if kind in ("beta", "hyper"):
                src = coef if kind == "beta" else h
                val = src[how[1] : how[2]]
            else:  # ("group", [(start, L, scale_index, mean_const, mean_idx|None)], noncentred, cov)
                cols = []
                for start, L, scale, mean_const, mean_idx in how[1]:
                    v = coef[start : start + L]
                    if how[2] and how[3] is None:
                        cols.append(v / sds[scale])
                    else:
                        m = mean_const if mean_idx is None else coef[mean_idx]
                        cols.append(v + m)
                if how[2] and how[3] is not None:
                    # u = offset @ chol.T: offset = u chol^-T
                    chol = np.linalg.cholesky(np.asarray(covs[how[3]], dtype=float))
                    u = np.stack(cols, axis=1)
                    cols = list(scipy.linalg.solve_triangular(chol, u.T, lower=True))
                val = np.stack(cols, axis=1) if len(cols) > 1 or len(shape) == 2 else cols[0]
            out[name] = np.asarray(val, dtype=dtype).reshape(shape)
        return out

    @cached_property
    def needs_covs(self) -> bool:
        """Whether :meth:`to_point` needs the covariances (non-centred correlated terms)."""
        return any(how[0] == "group" and how[2] and how[3] is not None for *_, how in self.entries)

    def from_point(self, point, hyper_fn, hyper_cov=None):
        """``(h, coef)`` from a point of the model (the inverse of :meth:`to_point`);
        ``hyper_cov`` (:attr:`MixedProblem.hyper_cov`) where :attr:`needs_covs`."""
        h = np.zeros(self.hyper_size)
        for name, shape, dtype, how in self.entries:
            if how[0] == "hyper":
                h[how[1] : how[2]] = np.ravel(point[name])
        _, sds, _ = hyper_fn(h)
        covs = hyper_cov(h)[3] if (self.needs_covs and hyper_cov is not None) else None
        coef = np.zeros(self.dim)
        for name, shape, dtype, how in self.entries:
            if how[0] == "beta":
                coef[how[1] : how[2]] = np.ravel(point[name])
        for name, shape, dtype, how in self.entries:
            if how[0] == "group":
                val = np.asarray(point[name], dtype=float).reshape(-1, len(how[1]))
                if how[2] and how[3] is not None:
                    if covs is None:
                        raise ValueError(
                            f"from_point: {name!r} is a non-centred correlated term; pass "
                            "hyper_cov to map it."
                        )
                    val = val @ np.linalg.cholesky(np.asarray(covs[how[3]], dtype=float)).T
                for j, (start, L, scale, mean_const, mean_idx) in enumerate(how[1]):
                    if how[2] and how[3] is None:
                        coef[start : start + L] = val[:, j] * sds[scale]
                    else:
                        m = mean_const if mean_idx is None else coef[mean_idx]
                        coef[start : start + L] = val[:, j] - m
        return h, coef


@dataclass
class MixedModel:
    """A mixed model read from PyMC: the problem, its layout and the variables it owns."""

    problem: MixedProblem
    layout: MixedLayout
    rvs: list  # every free variable the mixed step owns
    hyper_names: list  # names of the hyperparameters' value variables (for messages)


class _HyperFunctions:
    """Everything the kernels read at a hyperparameter point ``h``: ``(log prior, term
    sds, observation sd)`` (:meth:`hyper`), the same with the covariances of correlated
    terms appended (:meth:`hyper_cov`), and the likelihood's free nuisance parameters
    (:meth:`family_params`).

    A kernel asks for several of these at the same ``h`` (a slice update's density needs
    the prior and the likelihood's parameters; a factorization the sds and the observation
    sd), and each evaluation costs several microseconds of call overhead against a few for
    the arithmetic: so one evaluation computes them all and the last point's values are
    kept.

    ``cov_slots`` are ``(covariance, column)`` of the correlated terms, whose sds (``sqrt``
    of the covariance's diagonal) follow those of ``scale_slots``.
    """

    def __init__(
        self,
        hyper_rvs,
        scale_slots,
        const_sds,
        noise,
        model,
        covs=(),
        cov_slots=(),
        free_params=None,
    ):
        values = [model.rvs_to_values[r] for r in hyper_rvs]
        self.param_names = list(free_params or {})
        if hyper_rvs or covs:
            logp = model.logp(vars=hyper_rvs, jacobian=True, sum=True) if hyper_rvs else None
            if logp is None:
                logp = pytensor.tensor.constant(0.0)
            untransformed = model.replace_rvs_by_values(list(hyper_rvs))
            cov_values = model.replace_rvs_by_values(list(covs))
            self._fn = pytensor.function(
                values, [logp, *untransformed, *cov_values], on_unused_input="ignore"
            )
            self._fn.trust_input = True
        else:
            self._fn = None
        # compiled on its own: merged into one graph with the prior, PyTensor's rewrites
        # may round a parameter differently (Bambi's Gamma shape, mu^2 / sigma^2, moved by
        # an ulp), and the draws would no longer repeat those of earlier versions
        self._param_fn = None
        if self.param_names:
            params = model.replace_rvs_by_values([free_params[k] for k in self.param_names])
            self._param_fn = pytensor.function(values, params, on_unused_input="ignore")
            self._param_fn.trust_input = True
        shapes = [shape_of(r) for r in hyper_rvs]
        sizes = [int(np.prod(s)) for s in shapes]
        ends = np.cumsum(sizes)
        # the slicing and the scale lookup are laid out once
        self._pieces = [
            (int(e - z), int(e), s, v.dtype) for e, z, s, v in zip(ends, sizes, shapes, values)
        ]
        self._float_pieces = all(np.dtype(dt) == np.float64 for *_, dt in self._pieces)
        by_rv = {r: i for i, r in enumerate(hyper_rvs)}
        # (output, element) of each term's sd; a scalar scale shared by k terms has one element
        self._slots = [(by_rv[rv], j, k) for rv, k, j in scale_slots]
        self._const_sds = np.asarray(const_sds, dtype=float)
        self._cov_slots = list(cov_slots)
        self._n_hyper = len(hyper_rvs)
        self._n_covs = len(covs)
        # the observation sd: an output of the compiled function, or a fixed value (nan when
        # the model has none)
        self._noise_rv = None if noise[0] is None else by_rv[noise[0]]
        self._fixed_noise = float(noise[1]) if noise[1] is not None else np.nan
        self._last_key = None
        self._last = None

    def _evaluate(self, h):
        """``(log prior, sds, noise sd, covariances, nuisance parameters)`` at ``h``."""
        h = np.asarray(h, dtype=float)
        key = h.tobytes()
        if key == self._last_key:
            return self._last
        if self._fn is None:
            out = (0.0, self._const_sds.copy(), self._fixed_noise, (), ())
        else:
            if self._float_pieces:  # views of h (asarray would return the same views)
                parts = [h[a:b].reshape(s) for a, b, s, _ in self._pieces]
            else:
                parts = [np.asarray(h[a:b].reshape(s), dtype=dt) for a, b, s, dt in self._pieces]
            with np.errstate(all="ignore"):
                raw = self._fn(*parts)
                raw_params = self._param_fn(*parts) if self._param_fn is not None else ()
            n_hyper, n_covs = self._n_hyper, self._n_covs
            vals = [np.asarray(v, dtype=float).reshape(-1) for v in raw[1 : 1 + n_hyper]]
            slots = self._slots
            sds = np.empty(len(slots) + len(self._cov_slots) + self._const_sds.size)
            for t, (i, j, k) in enumerate(slots):
                v = vals[i]
                sds[t] = v[j] if v.size == k else np.broadcast_to(v, (k,))[j]
            cov_mats = tuple(
                np.array(c, dtype=float) for c in raw[1 + n_hyper : 1 + n_hyper + n_covs]
            )
            if self._cov_slots:
                with np.errstate(invalid="ignore"):
                    for t, (c, j) in enumerate(self._cov_slots):
                        sds[len(slots) + t] = np.sqrt(cov_mats[c][j, j])
            sds[len(slots) + len(self._cov_slots) :] = self._const_sds
            noise_rv = self._noise_rv
            noise_sd = float(vals[noise_rv][0]) if noise_rv is not None else self._fixed_noise
            params = tuple(float(np.asarray(v, dtype=float).reshape(())) for v in raw_params)
            out = (float(raw[0]), sds, noise_sd, cov_mats, params)
        self._last_key, self._last = key, out
        return out

    def hyper(self, h):
        """``(log prior including the Jacobian, term sds, observation sd)`` at ``h``."""
        logp, sds, noise_sd, _, _ = self._evaluate(h)
        return logp, sds.copy(), noise_sd

    def hyper_cov(self, h):
        """:meth:`hyper` with the correlated terms' covariances appended."""
        logp, sds, noise_sd, covs, _ = self._evaluate(h)
        return logp, sds.copy(), noise_sd, tuple(c.copy() for c in covs)

    def family_params(self, h) -> dict:
        """``{name: value}`` of the likelihood's free nuisance parameters at ``h``."""
        return dict(zip(self.param_names, self._evaluate(h)[4]))


def _family_parameters(term, obs, model, predictor_rvs=(), seed: int = 0):
    """``({name: value}, {name: graph})``: the likelihood's fixed and free nuisance parameters.

    A free one (NegativeBinomial ``alpha``, Gamma ``shape``) must be one value for all rows,
    a function of scalar free variables whose priors are fixed; they join the
    hyperparameters and move with the coefficients. Its graph may involve the variables of
    the linear predictor (``predictor_rvs``) if its value does not: Bambi's Gamma passes
    ``sigma = mu / alpha**0.5``, whose shape ``mu**2 / sigma**2`` is ``alpha``. That is
    checked numerically (the model's start, and the predictor's variables moved), and those
    variables are then fixed at the start in the returned graph.
    """
    fixed, free_ = {}, {}
    predictor_rvs = set(predictor_rvs)
    for key, graph in (term.nuisance or {}).items():
        deps = free_rvs_in([graph], model)
        where = f"observed variable {obs.name!r}: its {dist_name(obs)} {key}"
        if not deps:
            v = np.asarray(value_of(graph), dtype=float)
            if v.size != 1 and not np.all(v == v.ravel()[0]):
                raise UnsupportedModelError(
                    f"{where} must be one number in a mixed model; received shape {v.shape}. "
                    f"Sample this model with {NUTS}."
                )
            fixed[key] = float(v.ravel()[0])
            continue
        through = [r for r in deps if r in predictor_rvs]
        own = [r for r in deps if r not in predictor_rvs]
        bad = [
            r.name
            for r in own
            if int(np.prod(shape_of(r))) != 1 or free_rvs_in(r.owner.inputs[2:], model)
        ]
        refuse = UnsupportedModelError(
            f"{where} must be data or one value, a function of scalar free variables with "
            f"fixed priors, in a mixed model; received a function of "
            f"{sorted(r.name for r in deps)}"
            + (f" ({bad} not scalar or with a hierarchical prior)" if bad else "")
            + f".{term.nuisance_hint} Otherwise sample this model with {NUTS}."
        )
        if bad or not own:
            raise refuse
        graph = fixed_through(graph, through, deps, model, seed, refuse)
        if int(np.prod(shape_of(graph))) != 1:
            graph = graph.ravel()[0]
        free_[key] = graph
    return fixed, free_


def read_mixed_model(model=None, seed: int = 0) -> MixedModel:
    """Describe the mixed model in ``model`` (see the module docstring).

    Raises
    ------
    UnsupportedModelError
        Naming the part of the model that is not supported and what to use instead.
    """
    model = pm.modelcontext(model)
    free = set(model.free_RVs)
    observed = list(model.observed_RVs)
    if len(observed) != 1:
        raise UnsupportedModelError(
            f"the mixed-model sampler needs exactly one observed variable; the model has "
            f"{[r.name for r in observed]}. Sample this model with {NUTS}."
        )
    (obs,) = observed
    term = classify_observed(obs, model)
    if term is None:
        raise UnsupportedModelError(
            f"observed variable {obs.name!r} ({dist_name(obs)}) is not a GLM likelihood "
            f"SplitGibbs reads. Sample this model with {NUTS}."
        )
    if term.kind == "split":
        if not _smooth(term.family):
            raise UnsupportedModelError(
                f"observed variable {obs.name!r}: the {dist_name(obs)} likelihood is not yet "
                f"supported in mixed models by SplitGibbs. Sample this model with {NUTS}."
            )
    elif term.kind != "gaussian":
        raise UnsupportedModelError(
            f"observed variable {obs.name!r}: {dist_name(obs)} likelihoods are not supported "
            f"in mixed models by SplitGibbs. Sample this model with {NUTS}."
        )
    eta, mean_param = _normal_form([term.eta, term.param], model)
    group_vars = _index_nodes(eta, model)
    # a Student-t GLM needs no group terms: the scale-mixture kernel samples it exactly
    # (student_t_glm_parameters)
    if not group_vars and term.family is not StudentTIdentity:
        raise UnsupportedModelError(
            f"observed variable {obs.name!r}: no group-specific term u[g] found in its linear "
            "predictor."
        )
    y = observed_data(model.rvs_to_values[obs], obs.name).ravel()
    n = y.shape[0]

    sources, indices = [], []
    for gv in group_vars:
        node = gv.owner
        src_var, idx_var = node.inputs
        name = _strip(src_var).name or getattr(src_var, "name", None) or "group term"
        source = _read_source(src_var, model, name)
        idx = np.asarray(value_of(idx_var))
        if idx.ndim != 1 or idx.shape[0] != n or not np.issubdtype(idx.dtype, np.integer):
            raise UnsupportedModelError(
                f"group-specific term {name!r}: its index must be one integer per row "
                f"({n}); received shape {idx.shape} of {idx.dtype}."
            )
        if idx.size and (idx.min() < 0 or idx.max() >= source.n_levels):
            raise ValueError(
                f"group-specific term {name!r}: its group index must lie in [0, "
                f"{source.n_levels}); received values from {idx.min()} to {idx.max()}."
            )
        sources.append(source)
        indices.append(idx.astype(np.intp))
    owners = {}
    for gv, s in zip(group_vars, sources):
        if s.rv in owners:
            raise UnsupportedModelError(
                f"group coefficients {s.rv.name!r} enter the linear predictor more than once."
            )
        owners[s.rv] = gv

    # common coefficients: the free variables reached without passing through a term
    blockers = list(group_vars) + list(free)
    common = [r for r in model.free_RVs if r in set(ancestors([eta], blockers=blockers))]
    means = [s.mean_rv for s in sources if s.mean_rv is not None]
    for m in means:
        if m not in common:
            common.append(m)
    hyper_rvs = []
    for s in sources:
        for r in [s.scale, *s.cov_rvs]:
            if r is not None and r not in hyper_rvs:
                hyper_rvs.append(r)
    const_params, free_params = {}, {}
    if term.kind == "split":
        predictor_rvs = set(common) | set(owners) | set(hyper_rvs)
        const_params, free_params = _family_parameters(term, obs, model, predictor_rvs, seed)
        # in the family's own parameter order, not the model's: Bambi orders a family's
        # free parameters differently from one process to the next, and the order of h
        # decides the draws
        for key in free_params:
            for r in free_rvs_in([free_params[key]], model):
                if r not in hyper_rvs:
                    hyper_rvs.append(r)
    noise = (None, None)
    if term.kind == "gaussian":
        sig = _strip(term.sigma)
        if sig in free:
            if free_rvs_in(sig.owner.inputs[2:], model):
                raise UnsupportedModelError(
                    f"observed variable {obs.name!r}: the prior of its sigma depends on other "
                    f"free variables. Sample this model with {NUTS}."
                )
            if int(np.prod(shape_of(sig))) != 1:
                raise UnsupportedModelError(
                    f"observed variable {obs.name!r}: sigma must be one scalar (heteroscedastic "
                    f"models are not supported in mixed models). Sample this model with {NUTS}."
                )
            if sig not in hyper_rvs:
                hyper_rvs.append(sig)
            noise = (sig, None)
        elif _is_const(term.sigma, model):
            sval = np.asarray(value_of(term.sigma), dtype=float)
            if sval.size != 1 or not (np.isfinite(sval).all() and (sval > 0).all()):
                raise UnsupportedModelError(
                    f"observed variable {obs.name!r}: a fixed sigma must be one positive number."
                )
            noise = (None, float(sval.ravel()[0]))
        else:
            raise UnsupportedModelError(
                f"observed variable {obs.name!r}: its sigma is a function of free variables, "
                f"not one free scale. Sample this model with {NUTS}."
            )
    for r in common:
        if r in hyper_rvs or r in owners:
            raise UnsupportedModelError(
                f"variable {r.name!r} is both a coefficient and part of a group term."
            )
        if model.rvs_to_transforms.get(r) is not None or not isinstance(
            r.owner.op, (NormalRV, pm.distributions.continuous.FlatRV)
        ):
            raise UnsupportedModelError(
                f"coefficient {r.name!r} has a {dist_name(r)} prior; the mixed-model sampler "
                f"needs Normal or Flat priors on the common coefficients. Sample this model "
                f"with {NUTS}."
            )
        if free_rvs_in(r.owner.inputs[2:], model):
            raise UnsupportedModelError(
                f"coefficient {r.name!r}: its prior depends on free variables "
                f"{[x.name for x in free_rvs_in(r.owner.inputs[2:], model)]} but it is not "
                f"indexed by a group (u[g]); SplitGibbs reads hierarchical priors only on "
                f"group-specific terms. Sample this model with {NUTS}."
            )
    owned = set(common) | set(owners) | set(hyper_rvs)
    # nothing else in the model may depend on what the step owns
    for rv in model.basic_RVs:
        if rv in owned or rv is obs:
            continue
        deps = set(free_rvs_in(rv.owner.inputs[2:], model)) & owned
        if deps:
            raise UnsupportedModelError(
                f"variable {rv.name!r} depends on {sorted(d.name for d in deps)}, which the "
                f"mixed-model sampler updates; that is not supported. Sample this model with "
                f"{NUTS}."
            )
    for pot in model.potentials:
        if set(free_rvs_in([pot], model)) & owned:
            raise UnsupportedModelError(
                f"pm.Potential {pot.name!r} involves variables of the mixed model; SplitGibbs "
                f"cannot include arbitrary potentials. Sample this model with {NUTS}."
            )

    # -- affine reading of eta in (common coefficients, indexed group columns) ---------
    placeholders = [gv.type() for gv in group_vars]
    replace = {gv: ph for gv, ph in zip(group_vars, placeholders)}
    common_values = [model.rvs_to_values[r] for r in common]
    replace.update({r: v for r, v in zip(common, common_values)})
    nuisance_deps = free_rvs_in(list(free_params.values()), model) if free_params else []
    if nuisance_deps:
        # the mean does not depend on them (checked numerically below): any valid value will
        # do, the model's initial point is one
        at_start = values_at(nuisance_deps, model, model.initial_point())
        replace.update(
            {
                r: pytensor.tensor.constant(np.asarray(v, dtype=r.dtype))
                for r, v in zip(nuisance_deps, at_start)
            }
        )
    outs = [eta]
    split = term.kind == "split"
    # an identity link (Student-t) reads its mean as eta itself: nothing to compare
    check_link = split and mean_param is not None
    if check_link:
        outs.append(mean_param)
    graphs = clone_replace(outs, replace=replace)
    leftover = [
        v
        for v in ancestors(graphs)
        if v.owner is not None and isinstance(v.owner.op, RandomVariable)
    ]
    if leftover:
        raise UnsupportedModelError(
            f"observed variable {obs.name!r}: its linear predictor depends on free variables "
            "other than the common coefficients and the group-specific terms, or on a group "
            f"term outside u[g] (e.g. {[getattr(v, 'name', None) for v in leftover][:3]}). "
            f"Sample this model with {NUTS}."
        )
    fn = pytensor.function(
        common_values + placeholders, graphs, on_unused_input="ignore", mode=DETECT_MODE
    )
    c_shapes = [shape_of(r) for r in common]
    c_sizes = [int(np.prod(s)) for s in c_shapes]
    p = int(sum(c_sizes))
    ph_shapes = [
        (n,) if s.k == 1 and gv.ndim == 1 else (n, s.k) for gv, s in zip(group_vars, sources)
    ]

    def evaluate(beta, ws):
        parts = np.split(beta, np.cumsum(c_sizes)[:-1]) if p else []
        args = [
            np.asarray(b.reshape(s), dtype=v.dtype)
            for b, s, v in zip(parts, c_shapes, common_values)
        ] + [
            np.asarray(w.reshape(s), dtype=ph.dtype)
            for w, s, ph in zip(ws, ph_shapes, placeholders)
        ]
        with np.errstate(all="ignore"):
            res = fn(*args)
        return [np.broadcast_to(np.asarray(r, dtype=float), (n,)).copy() for r in res]

    zeros_w = [np.zeros((n, s.k)) for s in sources]
    base = evaluate(np.zeros(p), zeros_w)
    offset = base[0]
    X = np.empty((n, p))
    for j in range(p):
        e = np.zeros(p)
        e[j] = 1.0
        X[:, j] = evaluate(e, zeros_w)[0] - offset
    columns = []
    for t, s in enumerate(sources):
        cols = []
        for j in range(s.k):
            ws = [np.zeros((n, q.k)) for q in sources]
            ws[t][:, j] = 1.0
            cols.append(evaluate(np.zeros(p), ws)[0] - offset)
        columns.append(cols)
    rng = np.random.default_rng(seed)
    for _ in range(2):
        beta = rng.normal(size=p)
        ws = [rng.normal(size=(n, s.k)) for s in sources]
        got = evaluate(beta, ws)
        want = offset + X @ beta
        for t, s in enumerate(sources):
            for j in range(s.k):
                want = want + columns[t][j] * ws[t][:, j]
        scale = 1.0 + np.abs(want)
        if not np.all(np.abs(got[0] - want) <= 1e-8 * scale):
            raise UnsupportedModelError(
                f"observed variable {obs.name!r}: its linear predictor is not linear in the "
                "coefficients and the group-specific terms (e.g. a product of two group terms, "
                f"or a nonlinear function of a coefficient). Sample this model with {NUTS}."
            )
        if check_link:
            par = got[1]
            link = term.link
            with np.errstate(all="ignore"):
                if link.exposure:
                    ratio = np.log(par) - got[0]
                    ok = np.allclose(ratio, np.log(base[1]) - base[0], rtol=1e-8, atol=1e-8)
                else:
                    ok = np.all(np.abs(par - link.inverse(got[0])) <= 1e-9)
            if not ok:
                raise UnsupportedModelError(
                    f"observed variable {obs.name!r}: its {term.pname} is not the inverse link "
                    f"of the linear predictor (found {link.inverse_name}). Sample this model with "
                    f"{NUTS}."
                )
    if check_link and term.link.exposure:
        with np.errstate(all="ignore"):
            offset = offset + (np.log(base[1]) - base[0])

    # priors of the common coefficients
    beta_mean, beta_prec = np.zeros(p), np.zeros(p)
    start = 0
    for r, size in zip(common, c_sizes):
        if isinstance(r.owner.op, NormalRV):
            mu, sd = (np.asarray(value_of(x), dtype=float) for x in r.owner.inputs[2:])
            sd = np.broadcast_to(sd, shape_of(r)).ravel()
            if not (np.all(np.isfinite(sd)) and np.all(sd > 0)):
                raise ValueError(
                    f"coefficient {r.name!r}: its Normal prior needs a positive sigma."
                )
            beta_mean[start : start + size] = np.broadcast_to(mu, shape_of(r)).ravel()
            beta_prec[start : start + size] = 1.0 / sd**2
        start += size
    common_start = dict(zip(common, np.cumsum([0] + c_sizes[:-1]).astype(int)))

    # scales: one slot per (scale variable, column), then one per column of the correlated
    # terms (the sqrt of their covariance's diagonal), then the fixed scales
    scale_slots, const_sds, terms = [], [], []
    cov_graphs, cov_slots = [], []
    cov_index = {}  # group variable -> its covariance's position in hyper_cov's output
    term_specs = []
    slot_of = {}
    for t, s in enumerate(sources):
        specs = []
        if s.cov is not None:
            cov_index[s.rv] = len(cov_graphs)
            cov_graphs.append(s.cov)
        for j in range(s.k):
            if s.cov is not None:
                slot = ("cov", len(cov_slots))
                cov_slots.append((len(cov_graphs) - 1, j))
            elif s.scale is not None:
                k_sc = int(np.prod(shape_of(s.scale)))
                key = (s.scale, j if k_sc > 1 else 0)
                if key not in slot_of:
                    slot_of[key] = len(scale_slots)
                    scale_slots.append((s.scale, k_sc, key[1]))
                slot = slot_of[key]
            else:
                slot = ("const", len(const_sds))
                const_sds.append(float(s.scale_value[j]))
            specs.append(slot)
        term_specs.append(specs)
    n_rv_slots = len(scale_slots)
    col = p
    layout_groups = []
    correlated = []
    for t, (s, gv) in enumerate(zip(sources, group_vars)):
        rv_name = model.rvs_to_values[s.rv].name
        cols_layout = []
        if s.cov is not None:
            correlated.append(
                CorrelatedTerms(tuple(range(len(terms), len(terms) + s.k)), len(correlated))
            )
        for j in range(s.k):
            spec = term_specs[t][j]
            if not isinstance(spec, tuple):
                slot = spec
            elif spec[0] == "cov":
                slot = n_rv_slots + spec[1]
            else:
                slot = n_rv_slots + len(cov_slots) + spec[1]
            values = columns[t][j]
            label = rv_name if s.k == 1 else f"{rv_name}[{j}]"
            terms.append(GroupTerm(label, f"factor{t}", indices[t], values, s.n_levels, slot))
            mean_idx = None
            mean_const = float(s.mean_value[j]) if not s.noncentred else 0.0
            if s.mean_rv is not None:
                m_size = int(np.prod(shape_of(s.mean_rv)))
                mean_idx = int(common_start[s.mean_rv] + (j if m_size > 1 else 0))
                # u = m + v: m multiplies the term's value column
                X[:, mean_idx] += values
            elif mean_const != 0.0:
                offset = offset + values * mean_const
            cols_layout.append((col, s.n_levels, slot, mean_const, mean_idx))
            col += s.n_levels
        layout_groups.append((s, cols_layout))
    # terms indexed by the same integer column share a grouping factor (one Q_BB block)
    factor_ids = {}
    relabelled = []
    for gt in terms:
        key = (gt.n_levels, gt.index.tobytes())
        fid = factor_ids.setdefault(key, f"factor{len(factor_ids)}")
        relabelled.append(GroupTerm(gt.name, fid, gt.index, gt.values, gt.n_levels, gt.scale))
    terms = tuple(relabelled)

    hyper_size = int(sum(int(np.prod(shape_of(r))) for r in hyper_rvs))
    at_h = _HyperFunctions(
        hyper_rvs, scale_slots, const_sds, noise, model, cov_graphs, cov_slots, free_params
    )
    hyper = at_h.hyper
    hyper_cov = at_h.hyper_cov if cov_graphs else None
    family_params = at_h.family_params if free_params else None
    trials = None
    family = None
    if split:
        if term.trials is not None:
            if free_rvs_in([term.trials], model):
                raise UnsupportedModelError(
                    f"observed variable {obs.name!r}: the number of trials must be data."
                )
            trials = np.broadcast_to(np.asarray(value_of(term.trials), dtype=float), (n,)).copy()
        family = term.family().bind(**const_params)
        family.validate(y, trials, obs.name)
    problem = MixedProblem(
        y=y,
        X=X,
        offset=offset,
        beta_mean=beta_mean,
        beta_precision=beta_prec,
        terms=terms,
        hyper=hyper,
        hyper_size=hyper_size,
        family=family,
        trials=trials,
        family_params=family_params,
        correlated=tuple(correlated),
        hyper_cov=hyper_cov,
    )
    entries = []
    for r in common:
        vv = model.rvs_to_values[r]
        st = int(common_start[r])
        entries.append(
            (vv.name, shape_of(r), vv.dtype, ("beta", st, st + int(np.prod(shape_of(r)))))
        )
    for s, cols_layout in layout_groups:
        vv = model.rvs_to_values[s.rv]
        how = ("group", cols_layout, s.noncentred, cov_index.get(s.rv))
        entries.append((vv.name, shape_of(s.rv), vv.dtype, how))
    hs = 0
    for r in hyper_rvs:
        vv = model.rvs_to_values[r]
        size = int(np.prod(shape_of(r)))
        entries.append((vv.name, shape_of(r), vv.dtype, ("hyper", hs, hs + size)))
        hs += size
    layout = MixedLayout(entries, hyper_size, problem.dim)
    rvs = list(common) + [s.rv for s in sources] + list(hyper_rvs)
    return MixedModel(problem, layout, rvs, [model.rvs_to_values[r].name for r in hyper_rvs])
