"""Plain description of a generalised linear mixed model (no PyMC inside).

The linear predictor is ``eta = X beta + sum_t values_t * v_t[index_t] + offset``: a
dense block of common coefficients and, for every group-specific term, one integer
column (the level of each row) and one value column (1 for a random intercept, the
covariate for a random slope). Nothing of size ``n x levels`` is ever stored, as in
lme4's sparse ``Z`` (Bates et al., 2015).

:func:`pymc_sgs.mixed.read.read_mixed_model` builds a :class:`MixedProblem` from a PyMC
model; :mod:`pymc_sgs.mixed.kernel` only reads it.

References
----------
Bates, D., Maechler, M., Bolker, B. and Walker, S. (2015). Fitting linear mixed-effects
models using lme4. Journal of Statistical Software 67(1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..families import Family

__all__ = ["CorrelatedTerms", "GroupTerm", "MixedProblem"]


@dataclass(frozen=True)
class GroupTerm:
    """One group-specific term: ``values * v[index]`` with ``v_l ~ N(0, sd^2)`` iid.

    ``scale`` is the position of this term's sd in the output of
    :attr:`MixedProblem.hyper`; ``factor`` names the grouping factor, so that terms on
    the same factor (a random intercept and slope) are recognised as one block.
    """

    name: str
    factor: str
    index: np.ndarray
    values: np.ndarray
    n_levels: int
    scale: int

    def __post_init__(self):
        if self.index.ndim != 1 or self.values.shape != self.index.shape:
            raise ValueError(f"group term {self.name!r}: index and values must be 1-D, same size")
        if self.index.size and (self.index.min() < 0 or self.index.max() >= self.n_levels):
            raise ValueError(
                f"group term {self.name!r}: levels must lie in [0, {self.n_levels}); received "
                f"[{self.index.min()}, {self.index.max()}]"
            )


@dataclass(frozen=True)
class CorrelatedTerms:
    """Terms of one grouping factor with a joint prior ``v_l ~ N(0, Sigma(h))`` per level.

    ``terms`` are positions in :attr:`MixedProblem.terms` (the order of ``Sigma``'s rows);
    ``Sigma`` is the ``cov``-th covariance :attr:`MixedProblem.hyper_cov` returns. The
    terms' entries in the sds are ``sqrt(diag(Sigma))``.
    """

    terms: tuple
    cov: int


@dataclass(frozen=True)
class MixedProblem:
    """A GLMM (``family`` set, its rows split) or a linear mixed model (``family=None``).

    ``hyper(h)`` maps the unconstrained hyperparameter vector ``h`` (the model's own value
    variables: log of a HalfNormal scale, ...) to ``(log prior density including the
    Jacobian, term sds, observation sd)``; the observation sd is used only when
    ``family`` is None (:meth:`family_at` gives the family at ``h``). ``beta_precision`` is the diagonal of the common coefficients'
    prior precision (0 for a flat prior).
    """

    y: np.ndarray
    X: np.ndarray
    offset: np.ndarray
    beta_mean: np.ndarray
    beta_precision: np.ndarray
    terms: tuple
    hyper: Callable
    hyper_size: int
    family: Family | None = None
    trials: np.ndarray | None = None
    #: ``h -> {name: value}`` of the likelihood's free nuisance parameters (NegativeBinomial
    #: ``alpha``, Gamma ``shape``), which are then part of ``h``; None when they are fixed
    family_params: Callable | None = None
    #: correlated group effects (:class:`CorrelatedTerms`); their covariances come from
    #: ``hyper_cov(h) -> (log prior, term sds, observation sd, (Sigma_1, ...))``
    correlated: tuple = ()
    hyper_cov: Callable | None = None

    def family_at(self, h) -> Family | None:
        """The likelihood family at hyperparameters ``h``; None where its parameters are
        not valid (not positive and finite)."""
        if self.family_params is None:
            return self.family
        params = self.family_params(np.asarray(h, dtype=float))
        # kernels ask again at the same parameters (a factorization, then a density):
        # the last family is kept, as binding validates every parameter
        last = self.__dict__.get("_last_family")
        if last is not None and last[0] == params:
            return last[1]
        try:
            fam = self.family.bind(**params)
        except ValueError:
            fam = None
        object.__setattr__(self, "_last_family", (params, fam))
        return fam

    @property
    def n(self) -> int:
        return self.y.shape[0]

    @property
    def p(self) -> int:
        return self.X.shape[1]

    @property
    def dim(self) -> int:
        return self.p + sum(t.n_levels for t in self.terms)
