"""Graph reading for the non-smooth terms: asymmetric Laplace likelihoods, Laplace priors.

Called from :mod:`pymc_sgs.detect` (which owns the rest of the graph reading);
builds the :class:`~pymc_sgs.problem.SplitTerm` of each non-smooth term, see
:mod:`pymc_sgs.nonsmooth` for the potentials and their samplers.
"""

from __future__ import annotations

import numpy as np
from pytensor.tensor.random.basic import LaplaceRV

from pymc.distributions.continuous import AsymmetricLaplaceRV

from .nonsmooth import AsymmetricLaplaceIdentity, LaplacePrior
from .problem import SplitTerm

__all__ = ["is_asymmetric_laplace", "is_laplace", "asymmetric_laplace_term", "laplace_prior_term"]


def is_asymmetric_laplace(rv) -> bool:
    """Is ``rv`` a ``pm.AsymmetricLaplace`` (either parametrisation: ``kappa`` or ``q``)?"""
    return isinstance(rv.owner.op, AsymmetricLaplaceRV)


def is_laplace(rv) -> bool:
    """Is ``rv`` a ``pm.Laplace``?"""
    return isinstance(rv.owner.op, LaplaceRV)


def _fixed_values(graph, what, name, model, shape, instead):
    """Numeric value of a distribution parameter that must be data, broadcast to ``shape``."""
    from .detect import UnsupportedModelError, _free_rvs_in, _value_of

    free = _free_rvs_in([graph], model)
    if free:
        raise UnsupportedModelError(
            f"{what} of {name!r} depends on the free variable(s) {[r.name for r in free]}; "
            f"SplitGibbs needs it fixed (data or a constant). {instead}"
        )
    return np.broadcast_to(_value_of(graph).astype(float), shape).ravel()


def asymmetric_laplace_term(rv, model, A, offset, y) -> SplitTerm:
    """Split term of ``y ~ AsymmetricLaplace(b, kappa, mu=eta)`` (quantile regression).

    ``b`` (PyMC's rate) may vary per row; ``kappa`` (or ``q``) must be one value
    for the whole term, and both must be fixed.
    """
    from .detect import UnsupportedModelError

    b_graph, kappa_graph = rv.owner.inputs[2], rv.owner.inputs[3]
    name = rv.name
    instead = (
        "A free b (or kappa / q) is not supported: fix it (e.g. at a pilot estimate), or sample "
        "this model with NUTS."
    )
    b = _fixed_values(b_graph, "the parameter b (rate) of the AsymmetricLaplace likelihood", name,
                      model, y.shape, instead)
    kappa = _fixed_values(kappa_graph, "the asymmetry kappa (or q) of the AsymmetricLaplace "
                          "likelihood", name, model, y.shape, instead)
    if not (np.all(np.isfinite(b)) and np.all(b > 0)):
        raise ValueError(
            f"observed variable {name!r}: the AsymmetricLaplace parameter b must be positive and "
            f"finite; received min {float(np.min(b)):g}."
        )
    if not (np.all(np.isfinite(kappa)) and np.all(kappa > 0)):
        raise ValueError(
            f"observed variable {name!r}: the AsymmetricLaplace kappa must be positive and finite "
            f"(q in (0, 1)); received {float(np.min(kappa)):g}."
        )
    if kappa.size and np.ptp(kappa) > 1e-12 * float(np.max(kappa)):
        raise UnsupportedModelError(
            f"observed variable {name!r}: the AsymmetricLaplace kappa (or q) varies across rows "
            f"(from {float(kappa.min()):g} to {float(kappa.max()):g}); SplitGibbs needs one "
            "quantile per likelihood term. Use one pm.AsymmetricLaplace per quantile."
        )
    family = AsymmetricLaplaceIdentity(float(kappa[0]) if kappa.size else 1.0)
    family.validate(y, b, name)
    return SplitTerm(name, family, A, offset, y, b)


def laplace_prior_term(rv, model, param, d) -> tuple[SplitTerm, np.ndarray, np.ndarray]:
    """Split term of a Laplace prior on the coefficient block ``param`` (a ParamSlice).

    Every entry ``j`` of the block becomes a split row with design row
    ``e_j^T`` and potential ``|z - mu_j| / b_j``. Returns the term and the
    block's Gaussian prior (zero mean and zero precision: the prior is entirely
    in the split rows).
    """
    loc_graph, scale_graph = rv.owner.inputs[2], rv.owner.inputs[3]
    name = rv.name
    size = param.stop - param.start
    shape = param.shape
    instead = (
        "A Bayesian lasso with a free penalty (a hyperprior on b) is not supported: fix b, or "
        "sample this model with NUTS."
    )
    loc = _fixed_values(loc_graph, "the location mu of the Laplace prior", name, model, shape,
                        instead)
    scale = _fixed_values(scale_graph, "the scale b of the Laplace prior", name, model, shape,
                          instead)
    if not (np.all(np.isfinite(loc)) and np.all(np.isfinite(scale)) and np.all(scale > 0)):
        raise ValueError(
            f"coefficient {name!r}: its Laplace prior needs a finite mu and a positive, finite b; "
            f"received mu={loc[:5]}, b={scale[:5]}."
        )
    A = np.zeros((size, d))
    A[np.arange(size), param.start + np.arange(size)] = 1.0
    term = SplitTerm(f"{name} (Laplace prior)", LaplacePrior(), A, np.zeros(size), loc.copy(),
                     1.0 / scale)
    return term, np.zeros(size), np.zeros((size, size))
