"""Slice-sampling updates of a likelihood's free parameters given the coefficients.

A mixed model's dispersion or shape parameters (the Student-t's ``sigma`` and ``nu``) are
hyperparameters that the likelihood alone involves. Given the coefficients their
conditional density is

    p(h | c, y)  propto  p(h) p(c | h) prod_i p(y_i | eta_i, h),

which costs one pass over the rows per evaluation and needs no factorization. Updating the
coordinates of ``h`` that move those parameters by slice sampling along the directions of
the hyperparameters' tuned proposal scale (Neal, 2003: stepping out, then shrinkage) is
exact for any width, and leaves the posterior invariant as any update of a full
conditional does. :class:`~pymc_sgs.mixed.scale_mixture.StudentTKernel` updates ``sigma``
and ``nu`` this way.

References
----------
Neal, R. M. (2003). Slice sampling. Annals of Statistics 31(3), 705-767.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SLICE_STEPS", "family_coordinates", "slice_update", "sub_cholesky"]

#: stepping-out limit of the slice sampler, in widths on each side (Neal, 2003, fig. 3)
SLICE_STEPS = 8


def family_coordinates(problem, h, names=None) -> np.ndarray:
    """Indices of the coordinates of ``h`` that change the likelihood's parameters.

    ``names`` restricts the search to those parameters (all of them by default). Found by
    moving each coordinate by 0.5: the parameters are smooth, one-to-one transforms of
    their own coordinates (a log, a log of a shifted value), never constant over that
    step.
    """
    h = np.asarray(h, dtype=float)
    if problem.family_params is None:
        return np.zeros(0, dtype=np.intp)
    base = problem.family_params(h)
    names = list(base) if names is None else [n for n in names if n in base]
    coords = []
    for k in range(h.shape[0]):
        e = h.copy()
        e[k] += 0.5
        moved = problem.family_params(e)
        if any(moved[name] != base[name] for name in names):
            coords.append(k)
    return np.array(coords, dtype=np.intp)


def sub_cholesky(scale, coords) -> np.ndarray:
    """Cholesky factor of the sub-block ``coords`` of ``scale @ scale.T``.

    Of the hyperparameters' proposal scale, it gives the directions (columns) and widths
    of the slice updates. Directions along it rather than the coordinate axes matter where
    the parameters are correlated a posteriori (Student-t ``sigma`` and ``nu``: heavier
    tails go with a smaller ``sigma``), since axis-aligned updates crawl along such a ridge.
    """
    cov = (scale @ scale.T)[np.ix_(coords, coords)]
    return np.linalg.cholesky(cov + 1e-12 * np.eye(coords.size))


def slice_update(log_density, h, coords, directions, rng, admissible=None) -> np.ndarray:
    """One slice-sampling update of ``h`` along each column of ``directions`` in turn.

    Parameters
    ----------
    log_density : callable
        ``h -> log density`` up to a constant (``-inf`` outside the support).
    h : ndarray
        The current point; only ``h[coords]`` moves.
    coords : ndarray of int
        Coordinates of ``h`` the directions act on.
    directions : ndarray, shape (len(coords), m)
        One update along each column, whose length is the initial slice width.
    rng : numpy.random.Generator
    admissible : callable, optional
        ``h -> bool``: a point the shrinkage may only stop at when this holds (the target
        restricted to where it holds; the current point must satisfy it). It is checked
        after the density, so only at the points the shrinkage would accept. The interval
        is stepped out on ``log_density`` alone: for every point of the restricted slice
        in the interval, stepping out from there finds the same interval with the same
        probability, which is all the update's reversibility needs (Neal, 2003, sec. 4.3).

    Returns
    -------
    ndarray : the new point.
    """
    f_cur = log_density(h)
    for j in range(directions.shape[1]):
        d = np.zeros_like(h)
        d[coords] = directions[:, j]
        h0 = h

        def f(t, h0=h0, d=d):
            return log_density(h0 + t * d)

        log_y = f_cur + np.log(rng.uniform())
        lo = -rng.uniform()
        hi = lo + 1.0
        left = int(np.floor(SLICE_STEPS * rng.uniform()))
        right = SLICE_STEPS - 1 - left
        while left > 0 and f(lo) > log_y:
            lo -= 1.0
            left -= 1
        while right > 0 and f(hi) > log_y:
            hi += 1.0
            right -= 1
        while True:
            t = lo + (hi - lo) * rng.uniform()
            f_cur = f(t)
            if f_cur > log_y and (admissible is None or admissible(h0 + t * d)):
                break
            if t < 0:
                lo = t
            else:
                hi = t
        h = h0 + t * d
    return h
