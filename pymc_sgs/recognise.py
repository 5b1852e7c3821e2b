"""Recognisers: which PyMC likelihoods SplitGibbs reads, as which family and link.

The registry of the families on the PyMC side, in one place:

* :data:`LINKS`: how each link appears in a graph (the scalar ops of its inverse), how
  the linear predictor is read off a match, how the parameter is checked against the
  inverse link numerically (:func:`pymc_sgs.affine.affine_map`), and how to write it in
  a model (for messages);
* :data:`RECOGNISERS`: for each PyTensor random-variable op of a GLM likelihood, the
  :class:`~pymc_sgs.families.Family` class it is read as for each link (tried in order),
  and where its mean parameter, trials and nuisance parameters are.

Normal (put into the theta-step exactly), StudentT (identity link, no inverse link to
find) and AsymmetricLaplace (a kinked potential, :mod:`pymc_sgs.detect_nonsmooth`) are
recognised by :func:`classify_observed` directly. Adding a family with another PyMC
distribution or link is one entry here; the family declares everything else itself
(:mod:`pymc_sgs.families`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from pytensor.scalar.basic import Exp
from pytensor.scalar.math import Erf, Erfc, Sigmoid
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.random.basic import (
    BernoulliRV,
    BinomialRV,
    ExponentialRV,
    GammaRV,
    NegBinomialRV,
    NormalRV,
    PoissonRV,
    StudentTRV,
)
from scipy.special import expit, ndtr

from .detect_multinomial import is_ordinal
from .detect_nonsmooth import is_asymmetric_laplace
from .families import (
    BernoulliLogit,
    BernoulliProbit,
    BinomialLogit,
    BinomialProbit,
    ExponentialLog,
    GammaLog,
    NegativeBinomialLog,
    NormalIdentity,
    PoissonLog,
    StudentTIdentity,
)
from .graph import (
    NUTS,
    UnsupportedModelError,
    ancestors,
    dist_name,
    find_outermost,
    free_rvs_in,
    op_dist_name,
)
from .nonsmooth import AsymmetricLaplaceIdentity

__all__ = [
    "SUPPORTED",
    "Link",
    "LINKS",
    "IDENTITY",
    "Recogniser",
    "RECOGNISERS",
    "ObservedTerm",
    "classify_observed",
    "describe_likelihood",
    "find_inverse_link",
    "raise_known_unsupported",
]

SUPPORTED = (
    "Bernoulli and Binomial with logit or probit link (logit_p=eta, p=pm.math.invlogit(eta) "
    "or p=pm.math.invprobit(eta)), Poisson, NegativeBinomial (mu, alpha), Gamma (alpha, "
    "beta=alpha/mu) and Exponential with log link (mu=pm.math.exp(eta)), Normal and StudentT "
    "with identity link (mu=eta), "
    "AsymmetricLaplace with identity link (mu=eta, fixed kappa or q)"
)


def _input(var):
    return var.owner.inputs[0]


def _probit_predictor(var):
    # 0.5 * erfc(-x / sqrt 2) (pm.math.invprobit) or 0.5 + 0.5 * erf(x / sqrt 2) (Bambi):
    # eta = -sqrt(2) * (erfc's input) or sqrt(2) * (erf's input), checked numerically later
    sign = 1.0 if isinstance(var.owner.op.scalar_op, Erf) else -1.0
    return (sign * np.sqrt(2.0)) * var.owner.inputs[0]


@dataclass(frozen=True)
class Link:
    """A link function as detection meets it in a graph."""

    #: name in messages ("logit", "probit", "log", "identity")
    name: str
    #: scalar ops of its inverse (what :func:`find_inverse_link` looks for)
    ops: tuple = ()
    #: name of the inverse in messages
    inverse_name: str = ""
    #: how to write it in a PyMC model (messages)
    how: str = ""
    #: the inverse link as a numpy function: the parameter must equal ``inverse(eta)``
    inverse: Callable | None = None
    #: True when the parameter may be ``inverse(eta)`` times a positive constant (an exposure
    #: of a log link, which goes into the offset) and ``inverse(-eta)`` flips the sign of the
    #: predictor; the parameter is then checked on the log scale
    exposure: bool = False
    #: the linear predictor's graph from a matched inverse-link node
    predictor: Callable = _input


LINKS = {
    "logit": Link("logit", (Sigmoid,), "invlogit", "logit_p=eta or p=pm.math.invlogit(eta)", expit),
    "probit": Link(
        "probit",
        (Erf, Erfc),
        "invprobit",
        "p=pm.math.invprobit(eta)",
        ndtr,
        predictor=_probit_predictor,
    ),
    "log": Link("log", (Exp,), "exp", "mu=pm.math.exp(eta)", np.exp, exposure=True),
}
#: the identity link (Normal, StudentT, AsymmetricLaplace: ``mu = eta``, nothing to find)
IDENTITY = Link("identity", how="mu=eta")


def _bernoulli(params):
    return None, params[0], "p", {}


def _binomial(params):
    return params[0], params[1], "p", {}


def _poisson(params):
    return None, params[0], "mu", {}


def _negative_binomial(params):
    # PyMC stores NegativeBinomial(mu, alpha) as (n, p) = (alpha, alpha / (mu + alpha))
    n, p = params
    return None, n * (1.0 - p) / p, "mu", {"alpha": n}


def _gamma(params):
    # PyTensor's Gamma is (shape, scale); the mean is shape * scale
    shape, scale = params
    return None, shape * scale, "mean (alpha / beta)", {"shape": shape}


def _exponential(params):
    return None, params[0], "mean (1 / lam)", {}


@dataclass(frozen=True)
class Recogniser:
    """How one PyMC likelihood is read as a split family."""

    #: the PyTensor random-variable op class of the likelihood
    op: type
    #: link name -> Family class, in the order the links are looked for
    families: dict
    #: the op's parameters -> ``(trials graph or None, mean parameter graph, its name in
    #: messages, {nuisance parameter name: graph})``
    read: Callable
    #: the mean is recovered from the op's parameters by a division (NegativeBinomial's
    #: ``p = alpha / (mu + alpha)``), so the numerical link check allows for its rounding
    mean_from_p: bool = False
    #: appended to the message when a nuisance parameter depends on the coefficients
    nuisance_hint: str = ""
    #: appended to the message when the mean is no supported link of a linear predictor
    link_hint: str = ""


#: the GLM likelihoods with an inverse link to find, in the order they are tried
RECOGNISERS = (
    Recogniser(BernoulliRV, {"logit": BernoulliLogit, "probit": BernoulliProbit}, _bernoulli),
    Recogniser(BinomialRV, {"logit": BinomialLogit, "probit": BinomialProbit}, _binomial),
    Recogniser(PoissonRV, {"log": PoissonLog}, _poisson),
    Recogniser(NegBinomialRV, {"log": NegativeBinomialLog}, _negative_binomial, mean_from_p=True),
    Recogniser(
        GammaRV,
        {"log": GammaLog},
        _gamma,
        nuisance_hint=(
            " (pm.Gamma(mu=..., sigma=...) has shape mu^2 / sigma^2: write "
            "pm.Gamma('y', alpha=k, beta=k / pm.math.exp(eta)) with k data or a "
            "separate variable.)"
        ),
        link_hint=(
            " Bambi's family='gamma' uses the inverse link (mu = 1/eta) unless told "
            "otherwise: pass link='log' to bmb.Model, or sample this model with NUTS."
        ),
    ),
    Recogniser(ExponentialRV, {"log": ExponentialLog}, _exponential),
)


@dataclass
class ObservedTerm:
    """An observed variable recognised as a likelihood term, before its data are read."""

    rv: object
    kind: str  # "split", "gaussian" or "nonsmooth"
    family: type  # the Family class it is read as
    eta: object
    y: np.ndarray
    trials: object = None  # graph (binomial n) or None
    sigma: object = None  # graph (normal sigma) or None
    param: object = None  # graph compared with inverse_link(eta) (split terms), or None
    link: Link = IDENTITY
    pname: str = ""  # name of the parameter in messages
    #: nuisance parameter name -> graph (NegativeBinomial alpha, Gamma shape, StudentT nu, sigma)
    nuisance: dict = field(default_factory=dict)
    #: see :attr:`Recogniser.mean_from_p`
    mean_from_p: bool = False
    #: see :attr:`Recogniser.nuisance_hint`
    nuisance_hint: str = ""


def find_inverse_link(param, scalar_op_type, free):
    """Outermost ``inverse_link(eta)`` nodes in the graph of ``param``.

    Walks the graph of a distribution parameter down to the free variables and
    returns every output of an ``Elemwise`` whose scalar op is ``scalar_op_type``
    (``Sigmoid`` for logit links, ``Exp`` for log links) and whose input
    depends on a free variable, without looking inside the matches. Whatever
    wraps the match (``pm.Deterministic``'s ``ViewOp``, broadcasts, Bambi's
    clipping of probabilities away from 0 and 1, a multiplicative exposure) is
    accepted here and checked numerically later (:func:`pymc_sgs.affine.affine_map`).
    """
    return find_outermost(
        param,
        free,
        lambda node: (
            isinstance(node.op, Elemwise) and isinstance(node.op.scalar_op, scalar_op_type)
        ),
    )


def describe_likelihood(rv, model):
    """``(name, kind)`` of an observed variable's likelihood for messages.

    ``kind`` names the known likelihoods that are no GLM SplitGibbs samples (zero-inflated,
    hurdle, mixture, ordinal), else it is None. PyMC builds ``ZeroInflatedPoisson`` (and
    ZeroInflatedBinomial / NegativeBinomial) as a ``Mixture`` of ``DiracDelta(0)`` and the
    count distribution, the ``Hurdle*`` ones as a hurdle mixture of ``DiracDelta(0)`` and a
    truncated one, and ``OrderedLogistic`` / ``OrderedProbit`` as a ``Categorical``.
    """
    op_name = type(rv.owner.op).__name__
    if op_name in ("MixtureRV", "_HurdleRV"):
        # the components; a hurdle's non-zero part is Truncated(base)
        names = [
            op_dist_name(getattr(c.owner.op, "base_rv_op", c.owner.op))
            for c in rv.owner.inputs[2:]
            if c.owner is not None
        ]
        others = [nm for nm in names if nm != "DiracDelta"]
        if "DiracDelta" in names and len(others) == 1:
            (other,) = others
            if op_name == "_HurdleRV":
                return (
                    f"Hurdle{other}",
                    f"a hurdle model: a point mass at 0 and a truncated {other}",
                )
            return (
                f"ZeroInflated{other}",
                f"zero-inflated: a mixture of a point mass at 0 and a {other}",
            )
        return "Mixture", f"a mixture of {names}"
    if op_name == "CategoricalRV" and is_ordinal(rv, model):
        return "Categorical", (
            "an ordinal likelihood: cumulative probabilities, as built by pm.OrderedLogistic, "
            "pm.OrderedProbit or Bambi's family='cumulative' / 'sratio'"
        )
    return dist_name(rv), None


def raise_known_unsupported(rv, model):
    """Raise for an observed variable whose likelihood is a known non-GLM (zero-inflated, ...)."""
    name, kind = describe_likelihood(rv, model)
    if kind is not None:
        raise UnsupportedModelError(
            f"observed variable {rv.name!r} has a {name} likelihood ({kind}), which SplitGibbs "
            f"does not support. Sample this model with {NUTS}."
        )


def explain_missing_link(rv, model) -> str | None:
    """The error message for a known GLM likelihood, depending on free variables, that was
    not read as a GLM term because its mean is no supported link of a linear predictor; None
    when it has one, or when the likelihood is none of :data:`RECOGNISERS`.

    :func:`classify_observed` says so itself unless every free variable of the mean also
    reaches a nuisance parameter, as in ``pm.Gamma(mu=mu, sigma=mu / k)`` (Bambi's gamma),
    whose shape ``mu^2 / sigma^2`` holds the coefficients in its graph; it then takes the
    variable for a likelihood with a fixed mean, and the model's error asks this.
    """
    rec = next((r for r in RECOGNISERS if isinstance(rv.owner.op, r.op)), None)
    if rec is None:
        return None
    _, param, pname, _ = rec.read(rv.owner.inputs[2:])
    free = set(model.free_RVs)
    if any(find_inverse_link(param, LINKS[lk].ops, free) for lk in rec.families):
        return None
    message = _missing_link_message(rv.name, dist_name(rv), pname, rec)
    return message if rec.link_hint else f"{message} Or sample this model with {NUTS}."


def _missing_link_message(name, dist, pname, rec) -> str:
    """The mean parameter ``pname`` of ``name``'s likelihood is none of ``rec``'s links of a
    linear predictor (with the recogniser's hint)."""
    links = tuple(rec.families)
    inv_names = " or ".join(LINKS[lk].inverse_name for lk in links)
    how = " or ".join(LINKS[lk].how for lk in links)
    return (
        f"observed variable {name!r}: its {dist} parameter {pname} is not a "
        f"{'/'.join(links)}-link function of a linear predictor (no {inv_names} of the "
        f"coefficients found in its graph). Write {how}. Supported: {SUPPORTED}." + rec.link_hint
    )


def _nuisance_free(graphs, model):
    return set(free_rvs_in(list(graphs), model)) if graphs else set()


def classify_observed(rv, model):
    """Recognise family and link of an observed variable; None if not a GLM term."""
    op = rv.owner.op
    params = rv.owner.inputs[2:]
    name = rv.name
    rec = next((r for r in RECOGNISERS if isinstance(op, r.op)), None)
    if rec is None:
        if isinstance(op, StudentTRV):
            nu, mu, sigma = params
            term = ObservedTerm(
                rv,
                "split",
                StudentTIdentity,
                mu,
                None,
                param=None,
                pname="mu",
                nuisance={"nu": nu, "sigma": sigma},
            )
            return term if free_rvs_in([mu], model) else None
        if isinstance(op, NormalRV):
            return ObservedTerm(rv, "gaussian", NormalIdentity, params[0], None, sigma=params[1])
        if is_asymmetric_laplace(rv):
            # quantile regression: identity link, the kinked potential is split (pymc_sgs.nonsmooth)
            mu = params[2]
            if not set(model.free_RVs).intersection(ancestors([mu], blockers=model.free_RVs)):
                return None
            return ObservedTerm(rv, "nonsmooth", AsymmetricLaplaceIdentity, mu, None)
        return None
    trials, param, pname, nuisance = rec.read(params)
    links = tuple(rec.families)
    free = set(model.free_RVs)
    param_deps = free.intersection(ancestors([param], blockers=free))
    if not param_deps:
        return None  # a fixed likelihood: nothing to sample
    # inverse-link nodes that reach the parameter only through a nuisance parameter
    # (e.g. NegativeBinomial alpha = exp(log_alpha)) are not the link of the mean
    roots = set(nuisance.values())
    for g in list(roots):
        while g.owner is not None and isinstance(g.owner.op, DimShuffle):
            g = g.owner.inputs[0]
            roots.add(g)
    reach = set(ancestors([param], blockers=list(roots) + list(model.free_RVs)))
    nuis_free = _nuisance_free(nuisance.values(), model)
    dist = dist_name(rv)

    found, link = [], links[0]
    for link in links:
        found = [
            v
            for v in find_inverse_link(param, LINKS[link].ops, free)
            if v in reach and v not in roots
        ]
        if found:
            break
    if not found and param_deps <= nuis_free:
        return None  # only the nuisance parameters are free (e.g. a fixed mean): not a GLM term
    if not found:
        raise UnsupportedModelError(_missing_link_message(name, dist, pname, rec))
    if len(found) > 1:
        raise UnsupportedModelError(
            f"observed variable {name!r}: its {dist} parameter {pname} combines "
            f"{len(found)} separate {LINKS[link].inverse_name} terms of the "
            f"coefficients (e.g. a mixture), so it is not one GLM with a {link} link. Write "
            f"{LINKS[link].how} with a single linear predictor eta. Supported: {SUPPORTED}."
        )
    eta = LINKS[link].predictor(found[0])
    return ObservedTerm(
        rv,
        "split",
        rec.families[link],
        eta,
        None,
        trials=trials,
        param=param,
        link=LINKS[link],
        pname=pname,
        nuisance=nuisance,
        mean_from_p=rec.mean_from_p,
        nuisance_hint=rec.nuisance_hint,
    )
