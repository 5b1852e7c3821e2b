"""Plain description of a split problem (no PyMC inside).

:func:`pymc_sgs.detect.detect_split_problem` builds a :class:`SplitProblem`
from a PyMC model; the kernel, the diagnostics and the back ends only read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .families import Family

__all__ = ["SplitTerm", "GaussianTerm", "ParamSlice", "SplitProblem"]


@dataclass(frozen=True)
class SplitTerm:
    """An observed likelihood term whose potentials are split, one per row.

    ``eta = A @ theta + offset`` is the linear predictor of the rows of ``y``.
    """

    name: str
    family: Family
    A: np.ndarray
    offset: np.ndarray
    y: np.ndarray
    trials: np.ndarray | None = None

    @property
    def n(self) -> int:
        return self.A.shape[0]


@dataclass(frozen=True)
class GaussianTerm:
    """A Normal-identity likelihood term, kept unsplit (exact in the theta-step).

    ``sigma`` is an array when it is fixed, or ``None`` when it is a function of
    other model variables and is supplied at every sweep.
    """

    name: str
    A: np.ndarray
    offset: np.ndarray
    y: np.ndarray
    sigma: np.ndarray | None = None

    @property
    def n(self) -> int:
        return self.A.shape[0]


@dataclass(frozen=True)
class ParamSlice:
    """Where one model variable sits in the flat coefficient vector ``theta``."""

    name: str
    shape: tuple
    start: int
    stop: int
    dtype: str = "float64"


@dataclass(frozen=True)
class SplitProblem:
    """Everything the kernel needs: ``pi(theta) ∝ exp(-V(theta) - sum_i U_i(a_i^T theta + o_i))``.

    Attributes
    ----------
    params : tuple of ParamSlice
        Layout of ``theta`` (concatenated, raveled model variables).
    prior_mean, prior_precision : ndarray
        Gaussian prior of ``theta`` (``prior_precision`` may be singular).
    split_terms : tuple of SplitTerm
    gaussian_terms : tuple of GaussianTerm
    """

    params: tuple
    prior_mean: np.ndarray
    prior_precision: np.ndarray
    split_terms: tuple = ()
    gaussian_terms: tuple = ()
    notes: dict = field(default_factory=dict)

    @property
    def d(self) -> int:
        """Number of coefficients."""
        return self.prior_mean.shape[0]

    @property
    def n_split(self) -> int:
        """Number of split potentials (rows of the split terms)."""
        return sum(t.n for t in self.split_terms)

    def stacked_split(self):
        """``(A, offset)`` of all split terms stacked row-wise."""
        if not self.split_terms:
            return np.zeros((0, self.d)), np.zeros(0)
        if len(self.split_terms) == 1:
            t = self.split_terms[0]
            return t.A, t.offset
        return (
            np.vstack([t.A for t in self.split_terms]),
            np.concatenate([t.offset for t in self.split_terms]),
        )

    def term_slices(self):
        """Row slice of each split term in the stacked arrays."""
        out, start = [], 0
        for t in self.split_terms:
            out.append(slice(start, start + t.n))
            start += t.n
        return out
