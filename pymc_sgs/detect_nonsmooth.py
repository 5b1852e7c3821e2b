"""Graph reading for the non-smooth terms: asymmetric Laplace likelihoods, Laplace priors.

Called from :mod:`pymc_sgs.detect` and :mod:`pymc_sgs.recognise`; imports the graph
helpers of :mod:`pymc_sgs.graph` only (no cycle with :mod:`pymc_sgs.detect`). Builds the :class:`~pymc_sgs.problem.SplitTerm` of each non-smooth term, see
:mod:`pymc_sgs.nonsmooth` for the potentials and their samplers.
"""

from __future__ import annotations

import numpy as np
import pytensor
from pymc.distributions.continuous import AsymmetricLaplaceRV
from pytensor.tensor.random.basic import LaplaceRV

from .free_rate import FreeRate
from .graph import UnsupportedModelError, dependants, free_rvs_in, shape_of, value_of
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
    free = free_rvs_in([graph], model)
    if free:
        raise UnsupportedModelError(
            f"{what} of {name!r} depends on the free variable(s) {[r.name for r in free]}; "
            f"SplitGibbs needs it fixed (data or a constant). {instead}"
        )
    return np.broadcast_to(value_of(graph).astype(float), shape).ravel()


def asymmetric_laplace_term(rv, model, A, offset, y, theta_rvs=(), term_index=0):
    """Split term of ``y ~ AsymmetricLaplace(b, kappa, mu=eta)`` (quantile regression).

    ``b`` (PyMC's rate) may vary per row and may be a function of one free
    scalar variable (returned as a :class:`~pymc_sgs.free_rate.FreeRate`, which
    ``SplitGibbs`` then owns); ``kappa`` (or ``q``) must be fixed and one value
    for the whole term. Returns ``(term, free_rate or None)``.
    """
    b_graph, kappa_graph = rv.owner.inputs[2], rv.owner.inputs[3]
    name = rv.name
    instead = "A free kappa / q is not supported: fix it, or sample this model with NUTS."
    kappa = _fixed_values(
        kappa_graph,
        "the asymmetry kappa (or q) of the AsymmetricLaplace likelihood",
        name,
        model,
        y.shape,
        instead,
    )
    free_rate = None
    if free_rvs_in([b_graph], model):
        free_rate = _free_rate(rv, b_graph, model, y, theta_rvs, term_index)
        b = free_rate.rates(model.initial_point()[free_rate.value_name]).ravel()
    else:
        b = _fixed_values(
            b_graph,
            "the parameter b (rate) of the AsymmetricLaplace likelihood",
            name,
            model,
            y.shape,
            instead,
        )
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
    if free_rate is not None:
        free_rate.kappa = family.kappa
    return SplitTerm(name, family, A, offset, y, b), free_rate


def _free_rate(rv, b_graph, model, y, theta_rvs, term_index):
    """The :class:`FreeRate` of a likelihood whose ``b`` depends on one free scalar variable."""
    name = rv.name
    free = free_rvs_in([b_graph], model)
    where = f"the parameter b (rate) of the AsymmetricLaplace likelihood of {name!r}"
    if set(free) & set(theta_rvs):
        raise UnsupportedModelError(
            f"{where} depends on the coefficient(s) {[r.name for r in free if r in theta_rvs]}; "
            "b must be data or a function of a separate variable."
        )
    if len(free) > 1:
        raise UnsupportedModelError(
            f"{where} depends on several free variables {[r.name for r in free]}; SplitGibbs "
            "can own one free scalar variable for b (e.g. b = pm.HalfNormal(...)). Fix the "
            "others, or sample this model with NUTS."
        )
    (phi,) = free
    if int(np.prod(shape_of(phi))) != 1:
        raise UnsupportedModelError(
            f"{where} depends on the non-scalar free variable {phi.name!r}; SplitGibbs can own "
            "one free scalar variable for b."
        )
    # phi's conditional must be its prior times this likelihood only
    for other, _, potential in dependants(model, [phi], skip=[rv, phi]):
        if potential:
            raise UnsupportedModelError(
                f"{where} depends on {phi.name!r}, which pm.Potential {other.name!r} also "
                "involves; SplitGibbs cannot include it. Sample this model with NUTS."
            )
        raise UnsupportedModelError(
            f"{where} depends on {phi.name!r}, which {other.name!r} also depends on; "
            f"SplitGibbs updates {phi.name!r} from this likelihood and its prior only. Use a "
            "separate variable for b, or sample this model with NUTS."
        )
    value = model.rvs_to_values[phi]
    (b_val,) = model.replace_rvs_by_values([b_graph])
    rate_fn = pytensor.function([value], b_val, on_unused_input="ignore")
    prior_logp = model.compile_logp(vars=[phi], jacobian=True)
    return FreeRate(
        term_index=term_index,
        value_name=value.name,
        rate_fn=rate_fn,
        prior_logp=prior_logp,
        kappa=1.0,
        y=np.asarray(y, dtype=float),
        value_shape=tuple(value.type.shape or ()),
        value_dtype=str(value.dtype),
    )


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
    loc = _fixed_values(
        loc_graph, "the location mu of the Laplace prior", name, model, shape, instead
    )
    scale = _fixed_values(
        scale_graph, "the scale b of the Laplace prior", name, model, shape, instead
    )
    if not (np.all(np.isfinite(loc)) and np.all(np.isfinite(scale)) and np.all(scale > 0)):
        raise ValueError(
            f"coefficient {name!r}: its Laplace prior needs a finite mu and a positive, finite b; "
            f"received mu={loc[:5]}, b={scale[:5]}."
        )
    A = np.zeros((size, d))
    A[np.arange(size), param.start + np.arange(size)] = 1.0
    term = SplitTerm(
        f"{name} (Laplace prior)", LaplacePrior(), A, np.zeros(size), loc.copy(), 1.0 / scale
    )
    return term, np.zeros(size), np.zeros((size, size))
