"""Affine reading: ``A`` and the offset of each linear predictor, read off numerically.

Part of model detection (:mod:`pymc_sgs.detect`): the predictors found by the recognisers
(:mod:`pymc_sgs.recognise`) are evaluated at zero, at the unit vectors and at random points,
so any way of writing an affine predictor works (``pm.math.dot(X, b)``, ``X @ b + a``,
``b0 + b1 * x1 + ...``, ``pm.Data``, ``Deterministic`` wrappers, Bambi's graphs), and each
split term's parameter is checked against the inverse link of its predictor at the same
points.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant

from .graph import (
    DETECT_MODE,
    UnsupportedModelError,
    ancestors,
    coef_labels,
    dist_name,
    nonfinite_data,
    shape_of,
)
from .recognise import SUPPORTED

__all__ = ["affine_map"]


def _design_candidates(graph, n: int, d: int) -> list:
    """The C-contiguous float64 ``(n, d)`` constants and ``pm.Data`` values in ``graph``."""
    if d == 0 or n == 0:
        return []
    found = []
    for var in ancestors([graph]):
        if isinstance(var, Constant):
            value = var.data
        elif isinstance(var, SharedVariable):
            value = var.get_value(borrow=True)
        else:
            continue
        if (
            isinstance(value, np.ndarray)
            and value.shape == (n, d)
            and value.dtype == np.float64
            and value.flags.c_contiguous
            and not any(value is f for f in found)
        ):
            found.append(value)
    return found


def _same_column(col, ref, offset) -> bool:
    """Is the column read off the predictor ``ref`` up to rounding (of the offset's subtraction)?"""
    return bool(np.all(np.abs(col - ref) <= 1e-12 * (1.0 + np.abs(offset) + np.abs(ref))))


def affine_map(terms, theta_rvs, model, rng, nuisance_rvs=()):
    """Read off ``(A, offset)`` of each linear predictor, verifying affinity numerically.

    Returns ``(designs, offsets, shared)``, ``shared`` the ``(observed variable name,
    array)`` of the designs that are the model's own arrays.

    The predictors are evaluated at ``theta = 0`` and at the unit vectors, which
    gives ``A`` and the offset, then at random points, where ``eta`` must equal
    ``offset + A @ theta``. For split terms, the distribution parameter must
    equal the inverse link of ``eta`` at every one of these points (up to
    clipping at machine precision); for the log link a constant positive factor
    (``mu = exposure * exp(eta)``) is allowed and goes into the offset, and
    ``exp(-eta)`` in place of ``exp(eta)`` (e.g. a rate ``lam = exp(-eta)``)
    flips the sign of ``A`` and the offset. Nuisance parameters in the
    distribution parameter's graph (NegativeBinomial alpha) are held at the
    model's initial point.
    """
    value_vars = [model.rvs_to_values[rv] for rv in theta_rvs]
    split = [t for t in terms if t.kind == "split" and t.param is not None]
    graphs = model.replace_rvs_by_values([t.eta for t in terms] + [t.param for t in split])
    # the split terms' parameters follow the predictors in the outputs
    init = model.initial_point()
    givens = {
        model.rvs_to_values[r]: pt.constant(init[model.rvs_to_values[r].name]) for r in nuisance_rvs
    }
    fn = pytensor.function(
        value_vars, graphs, givens=givens, on_unused_input="ignore", mode=DETECT_MODE
    )
    shapes = [shape_of(rv) for rv in theta_rvs]
    sizes = [int(np.prod(s)) for s in shapes]
    d = sum(sizes)
    splits = np.cumsum(sizes)[:-1]
    out_shapes = [t.y.shape for t in terms] + [t.y.shape for t in split]
    names = [t.rv.name for t in terms]

    def evaluate(theta):
        args = [
            np.asarray(part.reshape(shape), dtype=vv.dtype)
            for part, shape, vv in zip(np.split(theta, splits), shapes, value_vars)
        ]
        with np.errstate(all="ignore"):
            outs = fn(*args)
        return [np.broadcast_to(o, s).ravel().astype(float) for o, s in zip(outs, out_shapes)]

    k = len(terms)
    param_index = {
        i: k + j
        for j, i in enumerate(
            i for i, t in enumerate(terms) if t.kind == "split" and t.param is not None
        )
    }
    # log links: one verdict per sign of eta (exp(eta) or exp(-eta))
    link_ok = {
        i: ({1.0: True, -1.0: True} if terms[i].link.exposure else True) for i in param_index
    }
    log_ref = {}

    def check_link(vals):
        """Does each split term's parameter equal inverse_link(eta) at this point?"""
        for i, m in param_index.items():
            eta, par = vals[i], vals[m]
            seen = np.isfinite(eta)  # non-finite rows are reported separately
            link = terms[i].link
            with np.errstate(all="ignore"):
                if not link.exposure:
                    # a probability (logit, probit): p must be inverse_link(eta) itself
                    inv = link.inverse(eta)
                    if not np.all((np.abs(par - inv) <= 1e-9)[seen]):
                        link_ok[i] = False
                    continue
                # log link: log(mu) - sign * eta must be the same at every point; the
                # tolerance allows for mu recovered from NegativeBinomial's p = a / (mu + a)
                for sign in (1.0, -1.0):
                    log_ratio = np.log(par) - sign * eta
                    if (i, sign) not in log_ref:
                        log_ref[i, sign] = log_ratio
                    ref = log_ref[i, sign]
                    ok_rows = seen & np.isfinite(ref) & np.isfinite(log_ratio) & (np.abs(eta) < 600)
                    tol = 1e-9 * (1.0 + np.abs(eta) + np.abs(ref))
                    if terms[i].mean_from_p:
                        tol = tol + 1e-10 * (1.0 + np.exp(np.minimum(-np.log(par), 700.0)))
                    good = np.abs(log_ratio - ref) <= tol
                    if not np.all(good[ok_rows]):
                        link_ok[i][sign] = False

    vals0 = evaluate(np.zeros(d))
    check_link(vals0)
    offsets = vals0[:k]
    # A predictor X @ beta (+ offset) with X a float64 constant or pm.Data holds its design
    # already: when the columns read off below are X's, A is X itself, not a second n x d
    # array (the columns are compared one at a time, so no copy exists even transiently)
    candidates = [_design_candidates(t.eta, o.shape[0], d) for t, o in zip(terms, offsets)]
    cols = [None if cands else np.empty((o.shape[0], d)) for cands, o in zip(candidates, offsets)]
    unit = np.zeros(d)
    for j in range(d):
        unit[j] = 1.0
        vals = evaluate(unit)
        unit[j] = 0.0
        check_link(vals)
        with np.errstate(invalid="ignore"):
            for i, (o, v) in enumerate(zip(offsets, vals)):
                col = v - o
                if cols[i] is None:
                    kept = [c for c in candidates[i] if _same_column(col, c[:, j], o)]
                    if not kept:
                        # not the graph's array after all: build A (its first j columns
                        # matched the dropped candidate)
                        cols[i] = np.empty((o.shape[0], d))
                        cols[i][:, :j] = candidates[i][0][:, :j]
                    candidates[i] = kept
                if cols[i] is not None:
                    cols[i][:, j] = col
    shared = [(t.rv.name, cands[0]) for t, A, cands in zip(terms, cols, candidates) if A is None]
    cols = [A if A is not None else cands[0] for A, cands in zip(cols, candidates)]

    labels = coef_labels(theta_rvs, shapes)
    for t, A, o in zip(terms, cols, offsets):
        bad_rows = ~np.isfinite(o)
        if d:
            bad_rows |= ~np.all(np.isfinite(A), axis=1)
        if np.any(bad_rows):
            rows = np.flatnonzero(bad_rows)
            sources = nonfinite_data(t.eta, model)
            found = f" Non-finite data in the predictor: {'; '.join(sources)}." if sources else ""
            raise ValueError(
                f"observed variable {t.rv.name!r}: the linear predictor has non-finite values "
                f"(NaN or inf) in {rows.size} row(s), first at row {rows[0]}.{found} The design "
                "matrix X (or an offset / covariate in the predictor) must be finite: remove or "
                "impute the rows with missing values (and avoid log(0) offsets) before building "
                "the model."
            )

    def close(v, pred, A, o, theta):
        scale = 1.0 + np.abs(o) + np.abs(A) @ np.abs(theta)
        return np.all(np.abs(v - pred) <= 1e-7 * scale)

    for _ in range(2):
        theta = rng.normal(size=d) * 1.7
        vals = evaluate(theta)
        check_link(vals)
        for i, (A, o, v, nm) in enumerate(zip(cols, offsets, vals, names)):
            if close(v, o + A @ theta, A, o, theta):
                continue
            # which coefficients enter non-linearly: the slope along e_j at this
            # random point differs from the slope at zero
            culprits = []
            for j in range(d):
                step = theta.copy()
                step[j] += 1.0
                moved = evaluate(step)[i]
                if not close(moved - v, A[:, j], A, o, theta):
                    culprits.append(labels[j])
            which = f" through {culprits[:10]}" if culprits else ""
            raise UnsupportedModelError(
                f"the linear predictor of observed variable {nm!r} is not affine in the "
                f"coefficients {[rv.name for rv in theta_rvs]}{which} (e.g. it contains products "
                "of coefficients or nonlinear functions of them). SplitGibbs needs "
                "eta = X @ beta + offset; sample this model with NUTS instead."
            )

    # the distribution parameter must be the inverse link of eta
    for i, ok in link_ok.items():
        t = terms[i]
        if not t.link.exposure:
            inv = t.link.inverse_name
            if not ok:
                raise UnsupportedModelError(
                    f"observed variable {t.rv.name!r}: its {dist_name(t.rv)} parameter p "
                    f"contains {inv}(eta) but is not equal to it (e.g. p = c * {inv}(eta) or "
                    f"a transformed probability), so the link is not {t.link.name}. Write "
                    f"{t.link.how}. Supported: {SUPPORTED}."
                )
            continue
        sign = 1.0 if ok[1.0] or not ok[-1.0] else -1.0
        ok = ok[sign]
        if sign < 0:
            # mean = exp(-eta'): the GLM's log-mean is -eta'
            cols[i] = -cols[i]
            offsets[i] = -offsets[i]
        ref = log_ref[i, sign]
        if ok and not np.all(np.isfinite(ref)):
            row = int(np.flatnonzero(~np.isfinite(ref))[0])
            raise ValueError(
                f"observed variable {t.rv.name!r}: mu = exposure * exp(eta) with a zero or "
                f"non-finite exposure factor, first at row {row}; the exposure must be positive "
                "and finite (drop rows with zero exposure)."
            )
        if not ok:
            raise UnsupportedModelError(
                f"observed variable {t.rv.name!r}: its {dist_name(t.rv)} {t.pname} contains "
                "exp(eta) but is not exp(eta) times a positive constant, so the link is not "
                f"log. Write mu=pm.math.exp(eta) (an exposure goes into eta as a log offset). "
                f"Supported: {SUPPORTED}."
            )
        if np.any(ref != 0.0):
            offsets[i] = offsets[i] + ref
    return cols, offsets, shared
