"""The coefficients' prior precision ``Lambda(h)`` of a mixed model.

``Lambda`` is diagonal except where group effects are correlated: the ``k`` terms of one
grouping factor with a joint prior ``v_l ~ N(0, Sigma)`` (an ``MvNormal``, e.g. with an LKJ
covariance) give ``Lambda`` the block ``Sigma^{-1}`` at each level ``l``, so
``Lambda = diag(d) + sum_blocks I_L (x) Sigma^{-1}`` on the block's coefficients. Stored as
the diagonal plus ``(positions, P)`` per block, never as a matrix: O(dim + k^2) memory.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["PriorPrecision"]


class PriorPrecision(NamedTuple):
    """``Lambda = diag(diag) + blocks``.

    ``diag`` has one entry per coefficient (0 for a flat prior and at the coefficients of
    correlated blocks); each block is ``(positions, P)``, ``positions`` an ``(L, k)``
    integer array (the coefficients of level ``l``, in the order of ``P``'s rows) and ``P``
    the ``k x k`` precision shared by the levels.
    """

    diag: np.ndarray
    blocks: tuple = ()

    def matvec(self, c) -> np.ndarray:
        """``Lambda c``."""
        out = self.diag * c
        for pos, P in self.blocks:
            out[pos] += c[pos] @ P
        return out

    def quad(self, c) -> float:
        """``c^T Lambda c``."""
        val = float(np.sum(self.diag * c * c))
        for pos, P in self.blocks:
            cb = c[pos]
            val += float(np.sum((cb @ P) * cb))
        return val

    def half_logdet(self):
        """``0.5 log det`` of ``Lambda`` restricted to its non-flat coefficients."""
        d = self.diag
        val = 0.5 * np.sum(np.log(d[d > 0]))
        for pos, P in self.blocks:
            sign, logdet = np.linalg.slogdet(P)
            val += 0.5 * pos.shape[0] * logdet
        return val

    def is_finite(self) -> bool:
        return bool(np.all(np.isfinite(self.diag))) and all(
            bool(np.all(np.isfinite(P))) for _, P in self.blocks
        )
