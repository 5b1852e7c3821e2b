"""Is the posterior proper? Recession directions of a GLM under flat priors.

With a ``pm.Flat`` prior on some coefficients, the posterior is a probability distribution
only if the likelihood decays along every direction of those coefficients. The negative log
likelihood ``sum_i U_i(a_i^T theta + o_i)`` is convex for the split families, and a convex
function's recession directions do not depend on where one starts: ``v`` is a direction of
no growth when every row with ``a_i^T v > 0`` has a potential bounded as ``z -> +inf``, every
row with ``a_i^T v < 0`` one bounded as ``z -> -inf``
(:meth:`pymc_sgs.families.Family.grows`), and rows that grow on both sides (Gaussian rows,
Poisson counts above zero, Laplace prior rows) have ``a_i^T v = 0``. A non-zero such ``v``
among the flat coordinates makes the posterior improper: its density does not decay along
``v`` (integrable in no direction orthogonal to it either), and a sampler drifts along it
without end. This is separation in logistic regression (Albert & Anderson 1984), its
quasi-complete form (an all-zero ``y`` with an intercept), and collinear columns under flat
priors.

The check is exact and costs one small eigen-decomposition and one linear program
(Konis 2007): the cone ``{v : C v >= 0}`` of signed one-sided rows ``C``, within the null space
of the two-sided rows, is ``{0}`` if and only if ``C`` has full column rank and
``max sum(C v)`` over ``C v >= 0, |v| <= 1`` is 0.

References
----------
.. [1] A. Albert, J. A. Anderson (1984). On the existence of maximum likelihood estimates in
   logistic regression models. Biometrika 71(1), 1-10.
.. [2] K. Konis (2007). Linear programming algorithms for detecting separated data in binary
   logistic regression models. DPhil thesis, University of Oxford.
.. [3] R. T. Rockafellar (1970). Convex Analysis, Section 8 (recession cones).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.optimize
import scipy.sparse

__all__ = ["improper_direction", "check_proper"]

#: relative eigenvalue below which a direction counts as unconstrained by the two-sided rows
_RANK_TOL = 1e-10
#: one-sided rows tried first (every k-th row): if they admit no direction, neither do all
_SUBSET_ROWS = 4096
#: rows per block when forming Gram matrices (bounds the temporaries)
_BLOCK = 65536


def improper_direction(problem, flat) -> tuple[np.ndarray, str] | None:
    """A direction of the flat coefficients along which the posterior does not decay.

    Parameters
    ----------
    problem : SplitProblem
    flat : ndarray of bool, shape (d,)
        The coefficients with an improper (flat) prior; the others have proper priors,
        which bound them whatever the likelihood does.

    Returns
    -------
    None when the posterior is proper, else ``(v, kind)``: a unit vector over all ``d``
    coefficients (zero outside ``flat``) and ``"flat"`` (the likelihood is constant along
    ``v``: collinear or empty columns) or ``"separation"`` (it increases towards a bound
    along ``v``: separated or quasi-separated data).
    """
    cols = np.flatnonzero(flat)
    if cols.size == 0:
        return None
    k = cols.size
    gram = np.zeros((k, k))
    one_sided, signs = [], []
    for A, up, down in _row_classes(problem):
        for b in range(0, A.shape[0], _BLOCK):
            Ab = A[b : b + _BLOCK][:, cols]
            Ab = Ab.toarray() if scipy.sparse.issparse(Ab) else np.asarray(Ab, dtype=float)
            u, dn = up[b : b + _BLOCK], down[b : b + _BLOCK]
            both = u & dn
            if np.any(both):
                gram += Ab[both].T @ Ab[both]
            # a row bounded above (grows only downwards) allows a_i^T v > 0, and vice versa
            only_down, only_up = dn & ~u, u & ~dn
            if np.any(only_down):
                one_sided.append(Ab[only_down])
                signs.append(np.ones(int(only_down.sum())))
            if np.any(only_up):
                one_sided.append(Ab[only_up])
                signs.append(-np.ones(int(only_up.sum())))
    # directions the two-sided rows leave free: the null space of their Gram matrix
    evals, evecs = scipy.linalg.eigh(gram)
    scale = max(float(evals.max(initial=0.0)), 1.0)
    null = evecs[:, evals <= _RANK_TOL * scale]
    if null.shape[1] == 0:
        return None
    if one_sided:
        C = np.vstack(one_sided) * np.concatenate(signs)[:, None] @ null
    else:
        C = np.zeros((0, null.shape[1]))
    # a direction that no row sees at all: the likelihood is flat along it
    c_evals, c_evecs = scipy.linalg.eigh(C.T @ C)
    if c_evals[0] <= _RANK_TOL * max(float(c_evals[-1]), 1.0):
        return _embed(null @ c_evecs[:, 0], cols, flat.size), "flat"
    # the one-sided rows: is there v != 0 with C v >= 0? More rows only shrink that cone, so
    # a spread-out subset of rows that admits none settles it without an LP over all rows
    if C.shape[0] > _SUBSET_ROWS:
        sub = C[:: C.shape[0] // _SUBSET_ROWS]
        if np.linalg.matrix_rank(sub) == C.shape[1] and _separating(sub) is None:
            return None
    v = _separating(C)
    return None if v is None else (_embed(null @ v, cols, flat.size), "separation")


def _separating(C) -> np.ndarray | None:
    """A ``v`` with ``C v >= 0`` and ``C v != 0`` (``max sum(C v)`` over the box), or None."""
    res = scipy.optimize.linprog(
        -C.sum(axis=0),
        A_ub=-C,
        b_ub=np.zeros(C.shape[0]),
        bounds=[(-1.0, 1.0)] * C.shape[1],
        method="highs",
    )
    if res.status != 0:
        return None  # the solver certified nothing: refuse nothing
    if -res.fun <= 1e-7 * max(float(np.linalg.norm(C, axis=1).sum()), 1.0):
        return None
    return res.x


def check_proper(problem, flat, labels) -> None:
    """Raise ``ValueError`` when the posterior is improper (:func:`improper_direction`).

    ``labels`` names the entries of theta (``'b[0]'``) for the message.
    """
    found = improper_direction(problem, flat)
    if found is None:
        return
    v, kind = found
    order = np.argsort(-np.abs(v))
    main = [labels[j] for j in order if abs(v[j]) > 0.05 * abs(v[order[0]])][:5]
    flat_names = sorted({labels[j].split("[")[0] for j in np.flatnonzero(flat)})
    why = (
        "the likelihood is constant along a combination of them (collinear or all-zero "
        "design columns)"
        if kind == "flat"
        else "the data are separated: the likelihood keeps increasing as they move in one "
        "direction (e.g. a predictor, or the intercept, that perfectly predicts a binary "
        "outcome, or an all-zero outcome with an intercept)"
    )
    raise ValueError(
        f"the posterior is improper: {flat_names} have Flat priors and {why}; the "
        f"coefficients involved are {main}. Any sampler would drift without bound. Give "
        "them a proper prior (e.g. pm.Normal('b', 0, 5)), or remove the redundant or "
        "separating predictors."
    )


def _row_classes(problem):
    """``(A, up, down)`` for every term: its design and where each row's potential grows."""
    for t in problem.split_terms:
        up, down = t.family.grows(np.broadcast_to(t.y, (t.n,)), t.trials)
        yield t.A, np.broadcast_to(up, (t.n,)), np.broadcast_to(down, (t.n,))
    for t in problem.gaussian_terms:
        both = np.ones(t.n, dtype=bool)
        yield t.A, both, both


def _embed(v_flat, cols, d) -> np.ndarray:
    v = np.zeros(d)
    v[cols] = v_flat
    return v / max(np.linalg.norm(v), 1e-300)
