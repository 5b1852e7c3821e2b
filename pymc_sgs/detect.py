"""Find the GLM structure in a PyMC model and describe it as a :class:`SplitProblem`.

This is the only module that reads PyTensor graphs. Detection is numerical
where it can be: the linear predictor of each observed term is evaluated at
zero and at unit vectors to read off ``A`` and the offset, and then checked at
random points, so any way of writing an affine predictor works
(``pm.math.dot(X, b)``, ``X @ b + a``, ``b0 + b1 * x1 + ...``, ``pm.Data``,
``Deterministic`` wrappers, Bambi's graphs).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant, Variable

try:  # pytensor >= 2.31
    from pytensor.graph.traversal import ancestors
except ImportError:  # pragma: no cover
    from pytensor.graph.basic import ancestors
from pytensor.scalar.basic import Cast as ScalarCast
from pytensor.scalar.basic import Exp
from pytensor.scalar.math import Erf, Erfc, Sigmoid
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from scipy.special import expit, ndtr
from pytensor.tensor.random.basic import (
    BernoulliRV,
    BinomialRV,
    ExponentialRV,
    GammaRV,
    MvNormalRV,
    NegBinomialRV,
    NormalRV,
    PoissonRV,
    StudentTRV,
)

import pymc as pm
from pymc.distributions.continuous import FlatRV

from .detect_nonsmooth import (
    asymmetric_laplace_term,
    is_asymmetric_laplace,
    is_laplace,
    laplace_prior_term,
)
from .families import FAMILIES
from .problem import GaussianTerm, ParamSlice, SplitProblem, SplitTerm

__all__ = ["DetectedModel", "UnsupportedModelError", "detect_split_problem"]

SUPPORTED = (
    "Bernoulli and Binomial with logit or probit link (logit_p=eta, p=pm.math.invlogit(eta) "
    "or p=pm.math.invprobit(eta)), Poisson, NegativeBinomial (mu, alpha), Gamma (alpha, "
    "beta=alpha/mu) and Exponential with log link (mu=pm.math.exp(eta)), Normal and StudentT "
    "with identity link (mu=eta), "
    "AsymmetricLaplace with identity link (mu=eta, fixed kappa or q)"
)


class UnsupportedModelError(ValueError):
    """The model (or part of it) is not a GLM that SplitGibbs can sample."""


@dataclass
class DetectedModel:
    """A :class:`SplitProblem` plus what maps it back to the PyMC model.

    Attributes
    ----------
    problem : SplitProblem
    value_var_names : list of str
        Names of the value variables that make up ``theta``, in order.
    sigma_sources : list
        One entry per Gaussian term of ``problem``: ``None`` when its sigma is
        fixed, else ``(function, input_names)`` computing sigma from the values
        of other model variables (updated by another step method).
    prior_sources : list
        ``(ParamSlice, function, input_names)`` for every coefficient block
        with a hierarchical Normal prior: the function gives the prior sd from
        the hyperparameters' values (updated by another step method). The
        problem's ``prior_precision`` holds a placeholder for those blocks.
    nuisance_sources : list
        ``(split term index, parameter name, function, input_names)`` for every
        nuisance parameter of a split family (NegativeBinomial alpha, Gamma
        shape, StudentT nu and sigma) that is a function of free variables.
    nuisance_vars : list
        ``(value variable name, prior_logp)`` of those free variables, which
        SplitGibbs owns and updates given ``z``; ``prior_logp(point)`` is the
        log density of the variable's prior in its transformed (value) space,
        Jacobian included.
    free_rates : list
        :class:`~pymc_sgs.free_rate.FreeRate` of every asymmetric Laplace term
        whose rate is a function of a free variable; SplitGibbs owns and
        updates those variables too.
    shared_designs : list
        ``(observed variable name, array)`` of every design that is the model's own
        array (a float64 constant or ``pm.Data`` used in place, not copied): writing into
        it would change the problem behind SplitGibbs's back.
    """

    problem: SplitProblem
    value_var_names: list
    sigma_sources: list = field(default_factory=list)
    prior_sources: list = field(default_factory=list)
    nuisance_sources: list = field(default_factory=list)
    nuisance_vars: list = field(default_factory=list)
    free_rates: list = field(default_factory=list)
    shared_designs: list = field(default_factory=list)

    def nuisance_values(self, point) -> dict:
        """``{split term index: {parameter: value}}`` of the free nuisance parameters at ``point``."""
        out = {}
        for index, key, fn, names in self.nuisance_sources:
            val = np.asarray(fn(*[point[nm] for nm in names]), dtype=float).ravel()
            out.setdefault(index, {})[key] = float(val[0])
        return out

    def prior_precision(self, point) -> np.ndarray:
        """Prior precision of theta at the hyperparameter values in ``point``."""
        P = self.problem.prior_precision
        if not self.prior_sources:
            return P
        P = P.copy()
        for p, fn, names in self.prior_sources:
            sd = np.broadcast_to(np.asarray(fn(*[point[nm] for nm in names]), float), p.shape)
            P[p.start : p.stop, p.start : p.stop] = np.diag(1.0 / sd.ravel() ** 2)
        return P

    def sigmas(self, point) -> list:
        """Current sigma of every Gaussian term whose sigma is not fixed."""
        out = []
        for term, src in zip(self.problem.gaussian_terms, self.sigma_sources):
            if src is None:
                out.append(term.sigma)
            else:
                fn, names = src
                s = np.asarray(fn(*[point[nm] for nm in names]), dtype=float)
                out.append(np.broadcast_to(s, term.y.shape).ravel())
        return out


def _value_of(var):
    """Numeric value of a graph with no random inputs (constants, pm.Data)."""
    if isinstance(var, Constant):
        return np.asarray(var.data)
    return np.asarray(var.eval(mode=DETECT_MODE))


def _find_inverse_link(param, scalar_op_type, free):
    """Outermost ``inverse_link(eta)`` nodes in the graph of ``param``.

    Walks the graph of a distribution parameter down to the free variables and
    returns every output of an ``Elemwise`` whose scalar op is ``scalar_op_type``
    (``Sigmoid`` for logit links, ``Exp`` for log links) and whose input
    depends on a free variable, without looking inside the matches. Whatever
    wraps the match (``pm.Deterministic``'s ``ViewOp``, broadcasts, Bambi's
    clipping of probabilities away from 0 and 1, a multiplicative exposure) is
    accepted here and checked numerically later (:func:`_affine_map`).
    """
    return find_outermost(
        param, free,
        lambda node: isinstance(node.op, Elemwise) and isinstance(node.op.scalar_op, scalar_op_type),
    )


def find_outermost(param, free, matches):
    """Outermost nodes ``node`` with ``matches(node)`` whose first input depends on ``free``.

    Walks the graph of ``param`` down to the free variables without looking inside the
    matches; returns their outputs, each once.
    """
    found, seen, stack = [], set(), [param]
    while stack:
        var = stack.pop()
        if var in seen or var.owner is None or var in free:
            continue
        seen.add(var)
        node = var.owner
        if matches(node):
            if free.intersection(ancestors([node.inputs[0]], blockers=free)):
                if var not in found:
                    found.append(var)
                continue
        stack.extend(node.inputs)
    return found


def _observed_data(value, where="the observed variable"):
    """Observed data as floats, read before PyMC's cast to the variable's dtype.

    PyMC casts a float ``pm.Data`` container observed by a discrete variable to
    int in the graph, which would truncate e.g. a count of 1.5 to 1 and hide it
    from the support checks. A plain array it casts when the model is built, and
    an inf there becomes the integer minimum, reported here as the inf it was.
    """
    while (
        value.owner is not None
        and isinstance(value.owner.op, Elemwise)
        and isinstance(value.owner.op.scalar_op, ScalarCast)
    ):
        value = value.owner.inputs[0]
    data = _value_of(value)
    _check_cast_nonfinite(data, f"observed data of {where!r}")
    return data.astype(float)


def _check_cast_nonfinite(data, what):
    """Raise for integer data holding the integer minimum: NumPy's cast of inf (or NaN) to int."""
    if not np.issubdtype(data.dtype, np.integer) or np.issubdtype(data.dtype, np.unsignedinteger):
        return
    bad = np.flatnonzero(np.ravel(data) == np.iinfo(data.dtype).min)
    if bad.size:
        raise ValueError(
            f"{what} must be finite; found {bad.size} NaN/inf value(s), first at flat index "
            f"{bad[0]} (PyMC cast them to the integer {np.iinfo(data.dtype).min} for this "
            "discrete likelihood). Drop or impute those rows before building the model."
        )


def _dist_name(rv):
    return _op_dist_name(rv.owner.op)


def _op_dist_name(op):
    name = type(op).__name__.replace("RV", "")
    return {"NegBinomial": "NegativeBinomial"}.get(name, name)


def _likelihood(rv, model):
    """``(name, kind)`` of an observed variable's likelihood for messages.

    ``kind`` names the known likelihoods that are no GLM SplitGibbs samples (zero-inflated,
    hurdle, mixture, ordinal), else it is None. PyMC builds ``ZeroInflatedPoisson`` (and
    ZeroInflatedBinomial / NegativeBinomial) as a ``Mixture`` of ``DiracDelta(0)`` and the
    count distribution, the ``Hurdle*`` ones as a hurdle mixture of ``DiracDelta(0)`` and a
    truncated one, and ``OrderedLogistic`` / ``OrderedProbit`` as a ``Categorical``.
    """
    from .detect_multinomial import is_ordinal

    op_name = type(rv.owner.op).__name__
    if op_name in ("MixtureRV", "_HurdleRV"):
        # the components; a hurdle's non-zero part is Truncated(base)
        names = [
            _op_dist_name(getattr(c.owner.op, "base_rv_op", c.owner.op))
            for c in rv.owner.inputs[2:] if c.owner is not None
        ]
        others = [nm for nm in names if nm != "DiracDelta"]
        if "DiracDelta" in names and len(others) == 1:
            (other,) = others
            if op_name == "_HurdleRV":
                return (f"Hurdle{other}",
                        f"a hurdle model: a point mass at 0 and a truncated {other}")
            return (f"ZeroInflated{other}",
                    f"zero-inflated: a mixture of a point mass at 0 and a {other}")
        return "Mixture", f"a mixture of {names}"
    if op_name == "CategoricalRV" and is_ordinal(rv, model):
        return "Categorical", (
            "an ordinal likelihood: cumulative probabilities, as built by pm.OrderedLogistic, "
            "pm.OrderedProbit or Bambi's family='cumulative' / 'sratio'"
        )
    return _dist_name(rv), None


#: what to use for a model SplitGibbs cannot sample
NUTS = "NUTS (pm.sample() without step=, or nutpie)"


#: how to write each supported link in a PyMC model (used in error messages)
_HOW = {
    "logit": "logit_p=eta or p=pm.math.invlogit(eta)",
    "probit": "p=pm.math.invprobit(eta)",
    "log": "mu=pm.math.exp(eta)",
}
#: link -> (scalar ops of its inverse, name used in messages)
_LINK_OPS = {"logit": ((Sigmoid,), "invlogit"), "probit": ((Erf, Erfc), "invprobit"), "log": ((Exp,), "exp")}


@dataclass
class _ObservedTerm:
    rv: object
    kind: str  # "split" or "gaussian"
    family: str
    eta: object
    y: np.ndarray
    trials: object = None  # graph (binomial n) or None
    sigma: object = None  # graph (normal sigma) or None
    param: object = None  # graph compared with inverse_link(eta) (split terms), or None
    link: str = "identity"
    pname: str = ""  # name of the parameter in messages
    #: nuisance parameter name -> graph (NegativeBinomial alpha, Gamma shape, StudentT nu, sigma)
    nuisance: dict = field(default_factory=dict)


def _nuisance_free(graphs, model):
    return set(_free_rvs_in(list(graphs), model)) if graphs else set()


def _classify_observed(rv, model):
    """Recognise family and link of an observed variable; None if not a GLM term."""
    op = rv.owner.op
    params = rv.owner.inputs[2:]
    name = rv.name
    nuisance = {}
    links = ("log",)
    if isinstance(op, BernoulliRV):
        fam, trials, param, pname, links = "bernoulli", None, params[0], "p", ("logit", "probit")
    elif isinstance(op, BinomialRV):
        fam, trials, param, pname, links = "binomial", params[0], params[1], "p", ("logit", "probit")
    elif isinstance(op, PoissonRV):
        fam, trials, param, pname = "poisson", None, params[0], "mu"
    elif isinstance(op, NegBinomialRV):
        # PyMC stores NegativeBinomial(mu, alpha) as (n, p) = (alpha, alpha / (mu + alpha))
        n, p = params
        fam, trials, param, pname = "negativebinomial", None, n * (1.0 - p) / p, "mu"
        nuisance = {"alpha": n}
    elif isinstance(op, GammaRV):
        # PyTensor's Gamma is (shape, scale); the mean is shape * scale
        shape, scale = params
        fam, trials, param, pname = "gamma", None, shape * scale, "mean (alpha / beta)"
        nuisance = {"shape": shape}
    elif isinstance(op, ExponentialRV):
        fam, trials, param, pname = "exponential", None, params[0], "mean (1 / lam)"
    elif isinstance(op, StudentTRV):
        nu, mu, sigma = params
        term = _ObservedTerm(rv, "split", "studentt", mu, None, param=None, link="identity",
                             pname="mu", nuisance={"nu": nu, "sigma": sigma})
        return term if _free_rvs_in([mu], model) else None
    elif isinstance(op, NormalRV):
        return _ObservedTerm(rv, "gaussian", "normal", params[0], None, sigma=params[1])
    elif is_asymmetric_laplace(rv):
        # quantile regression: identity link, the kinked potential is split (pymc_sgs.nonsmooth)
        mu = params[2]
        if not set(model.free_RVs).intersection(ancestors([mu], blockers=model.free_RVs)):
            return None
        return _ObservedTerm(rv, "nonsmooth", "asymmetric_laplace", mu, None)
    else:
        return None
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
    dist = _dist_name(rv)

    found, link = [], links[0]
    for link in links:
        found = [
            v for v in _find_inverse_link(param, _LINK_OPS[link][0], free)
            if v in reach and v not in roots
        ]
        if found:
            break
    if not found and param_deps <= nuis_free:
        return None  # only the nuisance parameters are free (e.g. a fixed mean): not a GLM term
    inv_names = " or ".join(_LINK_OPS[lk][1] for lk in links)
    how = " or ".join(_HOW[lk] for lk in links)
    if not found:
        raise UnsupportedModelError(
            f"observed variable {name!r}: its {dist} parameter {pname} is not a "
            f"{'/'.join(links)}-link function of a linear predictor (no {inv_names} of the "
            f"coefficients found in its graph). Write {how}. Supported: {SUPPORTED}."
        )
    if len(found) > 1:
        raise UnsupportedModelError(
            f"observed variable {name!r}: its {dist} parameter {pname} combines "
            f"{len(found)} separate {_LINK_OPS[link][1]} terms of the "
            f"coefficients (e.g. a mixture), so it is not one GLM with a {link} link. Write "
            f"{_HOW[link]} with a single linear predictor eta. Supported: {SUPPORTED}."
        )
    eta = found[0].owner.inputs[0]
    if link == "probit":
        # 0.5 * erfc(-x / sqrt 2) (pm.math.invprobit) or 0.5 + 0.5 * erf(x / sqrt 2) (Bambi):
        # eta = -sqrt(2) * (erfc's input) or sqrt(2) * (erf's input), checked numerically later
        sign = 1.0 if isinstance(found[0].owner.op.scalar_op, Erf) else -1.0
        eta = (sign * np.sqrt(2.0)) * eta
        fam = f"{fam}_probit"
    return _ObservedTerm(rv, "split", fam, eta, None, trials=trials, param=param, link=link,
                         pname=pname, nuisance=nuisance)


def _raise_known_unsupported(rv, model):
    """Raise for an observed variable whose likelihood is a known non-GLM (zero-inflated, ...)."""
    name, kind = _likelihood(rv, model)
    if kind is not None:
        raise UnsupportedModelError(
            f"observed variable {rv.name!r} has a {name} likelihood ({kind}), which SplitGibbs "
            f"does not support. Sample this model with {NUTS}."
        )


def _free_rvs_in(graphs, model):
    """Free random variables of ``model`` that the (RV-space) graphs depend on."""
    free = set(model.free_RVs)
    # free variables are leaves: do not look through them into their own priors
    found = [v for v in ancestors(graphs, blockers=model.free_RVs) if v in free]
    order = {rv: i for i, rv in enumerate(model.free_RVs)}
    return sorted(set(found), key=order.__getitem__)


def _gaussian_prior(rv, model, size):
    """(mean, precision, scale_source) of a coefficient's Normal / MvNormal / Flat prior.

    ``scale_source`` is None for fixed priors, or ``(function, input_names)``
    giving the prior sd from the values of hyperparameters (hierarchical
    Normal priors); the precision returned for those is a placeholder.
    """
    op = rv.owner.op
    name = rv.name
    if model.rvs_to_transforms.get(rv) is not None:
        raise UnsupportedModelError(
            f"coefficient {name!r} has a transformed ({_dist_name(rv)}) prior. SplitGibbs needs "
            "Normal, MvNormal, Laplace or Flat priors on the variables of the linear predictor; use one "
            "of those, or sample this model with NUTS."
            + (
                " (Bambi: its group-specific terms are non-centred by default, "
                "u = sigma * offset; build the model with bmb.Model(..., noncentered=False).)"
                if "|" in (name or "") else ""
            )
        )
    params = rv.owner.inputs[2:]
    hyper = _free_rvs_in(params, model)
    if hyper and isinstance(op, NormalRV) and not _free_rvs_in([params[0]], model):
        # hierarchical scale (random effects): the precision follows the hyperparameters,
        # which another step method (NUTS) updates
        mu = np.broadcast_to(_value_of(params[0]), _shape_of(rv)).ravel().astype(float)
        (sd_val,) = model.replace_rvs_by_values([params[1]])
        inputs = [model.rvs_to_values[h] for h in hyper]
        fn = pytensor.function(inputs, sd_val, on_unused_input="ignore", mode=DETECT_MODE)
        return mu, np.eye(size), (fn, [v.name for v in inputs])
    if hyper:
        raise UnsupportedModelError(
            f"the prior of coefficient {name!r} depends on the free variable(s) "
            f"{[h.name for h in hyper]} through more than its scale (a {_dist_name(rv)} prior "
            "or a random mean), which SplitGibbs does not support. Use a Normal prior whose "
            "sigma is the hyperparameter (u ~ Normal(0, tau)), or sample this model with NUTS."
        )
    if isinstance(op, NormalRV):
        mu = np.broadcast_to(_value_of(params[0]), _shape_of(rv)).ravel().astype(float)
        sd = np.broadcast_to(_value_of(params[1]), _shape_of(rv)).ravel().astype(float)
        if not (np.all(np.isfinite(mu)) and np.all(np.isfinite(sd)) and np.all(sd > 0)):
            raise ValueError(
                f"coefficient {name!r}: its Normal prior needs a finite mean and a positive, "
                f"finite sigma; received mu={mu[:5]}, sigma={sd[:5]}."
            )
        return mu, np.diag(1.0 / sd**2), None
    if isinstance(op, FlatRV):
        return np.zeros(size), np.zeros((size, size)), None
    if isinstance(op, MvNormalRV):
        mu = _value_of(params[0]).astype(float)
        cov = _value_of(params[1]).astype(float)
        if cov.ndim != 2 or mu.shape[-1] != size:
            raise UnsupportedModelError(
                f"coefficient {name!r}: batched MvNormal priors are not supported; use one "
                "MvNormal per coefficient vector."
            )
        mu = np.broadcast_to(mu, (size,))
        try:
            chol = np.linalg.cholesky(cov)
            if not (np.all(np.isfinite(mu)) and np.all(np.isfinite(chol))):
                raise np.linalg.LinAlgError
        except np.linalg.LinAlgError:
            raise ValueError(
                f"coefficient {name!r}: the covariance of its MvNormal prior is not symmetric "
                "positive definite (or has non-finite entries); SplitGibbs needs its inverse."
            ) from None
        inv_chol = np.linalg.inv(chol)
        return mu.copy(), inv_chol.T @ inv_chol, None
    raise UnsupportedModelError(
        f"coefficient {name!r} has a {_dist_name(rv)} prior. SplitGibbs needs Normal, MvNormal, "
        "Laplace or Flat priors on the variables of the linear predictor; use one of those, or "
        "sample this model with NUTS."
    )


#: detection evaluates a few small graphs once: PyTensor's Python linker builds them without
#: C compilation (about 1 s less setup for a plain GLM), and their run time is NumPy's either way
DETECT_MODE = "FAST_COMPILE"


def _shape_of(rv):
    static = rv.type.shape
    if all(s is not None for s in static):
        return tuple(int(s) for s in static)
    return tuple(int(s) for s in rv.shape.eval(mode=DETECT_MODE))


def _coef_labels(theta_rvs, shapes):
    """``'b[0]'``-style labels of the entries of theta (flat order)."""
    labels = []
    for rv, shape in zip(theta_rvs, shapes):
        if shape == ():
            labels.append(rv.name)
        else:
            labels.extend(
                f"{rv.name}[{', '.join(map(str, ix))}]" for ix in np.ndindex(*shape)
            )
    return labels


def _nonfinite_data(graph, model):
    """Describe the data (constants, ``pm.Data``) with NaN/inf in a predictor's graph."""
    out = []
    for var in ancestors([graph], blockers=model.free_RVs):
        if var.owner is not None or var in model.free_RVs:
            continue
        if isinstance(var, Constant):
            val = var.data
        elif isinstance(var, SharedVariable):
            val = var.get_value()
        else:
            continue
        try:
            arr = np.asarray(np.ma.getdata(val), dtype=float)
        except (TypeError, ValueError):
            continue
        bad = ~np.isfinite(arr)
        if np.ma.is_masked(val):
            bad |= np.ma.getmaskarray(val)
        if np.any(bad):
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            what = f"pm.Data {var.name!r}" if isinstance(var, SharedVariable) else "an array"
            out.append(
                f"{what} of shape {arr.shape} has {int(bad.sum())} NaN/inf value(s), first at "
                f"index {first}"
            )
    return out


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
        if (isinstance(value, np.ndarray) and value.shape == (n, d) and value.dtype == np.float64
                and value.flags.c_contiguous and not any(value is f for f in found)):
            found.append(value)
    return found


def _same_column(col, ref, offset) -> bool:
    """Is the column read off the predictor ``ref`` up to rounding (of the offset's subtraction)?"""
    return bool(np.all(np.abs(col - ref) <= 1e-12 * (1.0 + np.abs(offset) + np.abs(ref))))


def _affine_map(terms, theta_rvs, model, rng, nuisance_rvs=()):
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
        model.rvs_to_values[r]: pt.constant(init[model.rvs_to_values[r].name])
        for r in nuisance_rvs
    }
    fn = pytensor.function(value_vars, graphs, givens=givens, on_unused_input="ignore", mode=DETECT_MODE)
    shapes = [_shape_of(rv) for rv in theta_rvs]
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
        for j, i in enumerate(i for i, t in enumerate(terms) if t.kind == "split" and t.param is not None)
    }
    # log links: one verdict per sign of eta (exp(eta) or exp(-eta))
    link_ok = {i: ({1.0: True, -1.0: True} if terms[i].link == "log" else True) for i in param_index}
    log_ref = {}

    def check_link(vals):
        """Does each split term's parameter equal inverse_link(eta) at this point?"""
        for i, m in param_index.items():
            eta, par = vals[i], vals[m]
            seen = np.isfinite(eta)  # non-finite rows are reported separately
            link = terms[i].link
            with np.errstate(all="ignore"):
                if link in ("logit", "probit"):
                    inv = expit(eta) if link == "logit" else ndtr(eta)
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
                    if terms[i].family == "negativebinomial":
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

    labels = _coef_labels(theta_rvs, shapes)
    for t, A, o in zip(terms, cols, offsets):
        bad_rows = ~np.isfinite(o)
        if d:
            bad_rows |= ~np.all(np.isfinite(A), axis=1)
        if np.any(bad_rows):
            rows = np.flatnonzero(bad_rows)
            sources = _nonfinite_data(t.eta, model)
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
        if t.link in ("logit", "probit"):
            inv = _LINK_OPS[t.link][1]
            if not ok:
                raise UnsupportedModelError(
                    f"observed variable {t.rv.name!r}: its {_dist_name(t.rv)} parameter p "
                    f"contains {inv}(eta) but is not equal to it (e.g. p = c * {inv}(eta) or "
                    f"a transformed probability), so the link is not {t.link}. Write "
                    f"{_HOW[t.link]}. Supported: {SUPPORTED}."
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
                f"observed variable {t.rv.name!r}: its {_dist_name(t.rv)} {t.pname} contains "
                "exp(eta) but is not exp(eta) times a positive constant, so the link is not "
                f"log. Write mu=pm.math.exp(eta) (an exposure goes into eta as a log offset). "
                f"Supported: {SUPPORTED}."
            )
        if np.any(ref != 0.0):
            offsets[i] = offsets[i] + ref
    return cols, offsets, shared


def detect_split_problem(model=None, vars=None, *, split_gaussian=False, seed=0) -> DetectedModel:
    """Describe the GLM in ``model`` as a split problem.

    Parameters
    ----------
    model : pm.Model, optional
        Defaults to the model on the context stack.
    vars : list, optional
        Model variables (or value variables) that make up ``theta``. Default:
        every free variable in the linear predictors of the recognised terms.
    split_gaussian : bool
        Split Normal-identity likelihoods with a fixed sigma too, instead of
        putting them into the theta-step exactly. For tests of the split model
        against its closed form; users never need it.
    seed : int
        Seed of the random points at which affinity is verified.

    Returns
    -------
    DetectedModel

    Raises
    ------
    UnsupportedModelError
        Naming the variable and the reason when the model is not a supported GLM.
    ValueError
        For observed data outside the family's support or non-finite data.
    """
    model = pm.modelcontext(model)
    if not model.observed_RVs:
        raise UnsupportedModelError(
            "the model has no observed variables; SplitGibbs samples the posterior of a GLM "
            f"({SUPPORTED}). Sample this model with {NUTS}, or its prior with "
            "pm.sample_prior_predictive()."
        )
    terms = []
    unsupported = []
    for rv in model.observed_RVs:
        term = _classify_observed(rv, model)
        if term is None:
            unsupported.append(rv)
            continue
        terms.append(term)

    eta_rvs = _free_rvs_in([t.eta for t in terms], model) if terms else []
    nuisance_candidates = set(_free_rvs_in([g for t in terms for g in t.nuisance.values()], model))
    if vars is not None:
        theta_rvs = [r for r in _user_theta_rvs(vars, model) if r not in nuisance_candidates or r in eta_rvs]
        missing = [rv.name for rv in eta_rvs if rv not in theta_rvs]
        if missing:
            raise UnsupportedModelError(
                f"the linear predictors depend on {missing}, which are not among the variables "
                "given to SplitGibbs (vars). SplitGibbs must own every coefficient of the linear "
                "predictor; add them to vars or leave vars unset."
            )
    else:
        theta_rvs = eta_rvs
    terms = [t for t in terms if set(_free_rvs_in([t.eta], model)) & set(theta_rvs)]
    if not terms:
        for rv in unsupported:
            if _free_rvs_in(rv.owner.inputs[2:], model):
                _raise_known_unsupported(rv, model)
        raise UnsupportedModelError(
            "no observed variable of the model is a GLM term SplitGibbs can sample "
            f"(found: {[(rv.name, _likelihood(rv, model)[0]) for rv in model.observed_RVs]}). "
            f"Supported: {SUPPORTED}. Sample this model with {NUTS} instead."
        )
    theta_set = set(theta_rvs)
    for rv in unsupported:
        deps = set(_free_rvs_in(rv.owner.inputs[2:], model))
        if deps & theta_set:
            _raise_known_unsupported(rv, model)
            raise UnsupportedModelError(
                f"observed variable {rv.name!r} has a {_dist_name(rv)} likelihood, which "
                f"SplitGibbs does not support. Supported: {SUPPORTED}. Sample this model with "
                "NUTS, or rewrite the likelihood."
            )

    nuisance_rvs = _free_rvs_in([g for t in terms for g in t.nuisance.values()], model)
    _check_nuisance(model, terms, theta_set, nuisance_rvs, vars)
    _check_no_other_dependants(model, theta_rvs, terms)

    # priors first: a non-Gaussian (e.g. transformed) prior would otherwise
    # surface as a non-affine predictor
    params, means, precs, prior_sources, laplace_priors = [], [], [], [], []
    start = 0
    for rv in theta_rvs:
        shape = _shape_of(rv)
        size = int(np.prod(shape))
        vv = model.rvs_to_values[rv]
        params.append(ParamSlice(vv.name, shape, start, start + size, str(vv.dtype)))
        if is_laplace(rv):
            # Bayesian lasso: the prior is split too (rows e_j^T), built once d is known
            laplace_priors.append((rv, params[-1]))
            mean, prec, scale_source = np.zeros(size), np.zeros((size, size)), None
        else:
            try:
                mean, prec, scale_source = _gaussian_prior(rv, model, size)
            except UnsupportedModelError as err:
                # a variable that is no coefficient (a GP lengthscale, a non-centred scale)
                # is told so, not that its prior is wrong
                better = _not_a_coefficient(rv, terms, model)
                raise UnsupportedModelError(better or str(err)) from None
        means.append(mean)
        precs.append(prec)
        if scale_source is not None:
            prior_sources.append((params[-1], *scale_source))
        start += size
    d = start
    prior_precision = np.zeros((d, d))
    for p, prec in zip(params, precs):
        prior_precision[p.start : p.stop, p.start : p.stop] = prec

    # observed data, trials and sigmas
    for t in terms:
        t.y = _observed_data(model.rvs_to_values[t.rv], t.rv.name)
    rng = np.random.default_rng(seed)
    cols, offsets, shared_designs = _affine_map(terms, theta_rvs, model, rng, nuisance_rvs)
    init = model.initial_point()
    nuisance_sources = []

    split_terms, gaussian_terms, sigma_sources, free_rates = [], [], [], []
    for t, A, off in zip(terms, cols, offsets):
        y = t.y.ravel()
        if t.kind == "nonsmooth":
            term, free_rate = asymmetric_laplace_term(
                t.rv, model, A, off, y, theta_rvs, len(split_terms)
            )
            split_terms.append(term)
            if free_rate is not None:
                free_rates.append(free_rate)
            continue
        if t.kind == "split":
            trials = None
            if t.trials is not None:
                if _free_rvs_in([t.trials], model):
                    raise UnsupportedModelError(
                        f"observed variable {t.rv.name!r}: the number of trials n must be data, "
                        "not a random variable."
                    )
                trials = _value_of(t.trials)
                _check_cast_nonfinite(trials, f"trials (n) of {t.rv.name!r}")
                trials = np.broadcast_to(trials, t.y.shape).ravel().astype(float)
            fam = FAMILIES[t.family]
            if t.nuisance:
                values = {}
                for key, graph in t.nuisance.items():
                    fn, names, value = _nuisance_parameter(t, key, graph, model, init)
                    values[key] = value
                    if fn is not None:
                        nuisance_sources.append((len(split_terms), key, fn, names))
                fam = fam.bind(**values)
            fam.validate(y, trials, t.rv.name)
            split_terms.append(SplitTerm(t.rv.name, fam, A, off, y, trials))
            continue
        FAMILIES["normal"].validate(y, None, t.rv.name)
        sigma_rvs = _free_rvs_in([t.sigma], model)
        if sigma_rvs:
            if set(sigma_rvs) & theta_set:
                raise UnsupportedModelError(
                    f"observed variable {t.rv.name!r}: its sigma depends on the coefficients "
                    f"{[r.name for r in sigma_rvs if r in theta_set]}; SplitGibbs needs sigma to "
                    "be data or a separate variable."
                )
            if split_gaussian:
                raise ValueError("split_gaussian needs a fixed sigma.")
            (sigma_val,) = model.replace_rvs_by_values([t.sigma])
            inputs = [model.rvs_to_values[r] for r in sigma_rvs]
            fn = pytensor.function(inputs, sigma_val, on_unused_input="ignore", mode=DETECT_MODE)
            gaussian_terms.append(GaussianTerm(t.rv.name, A, off, y, None))
            sigma_sources.append((fn, [v.name for v in inputs]))
            continue
        sigma = np.broadcast_to(_value_of(t.sigma), t.y.shape).ravel().astype(float)
        if not np.all(np.isfinite(sigma)) or np.any(sigma <= 0):
            raise ValueError(f"sigma of observed variable {t.rv.name!r} must be positive and finite.")
        if split_gaussian:
            split_terms.append(SplitTerm(t.rv.name, FAMILIES["normal"], A, off, y, sigma))
        else:
            gaussian_terms.append(GaussianTerm(t.rv.name, A, off, y, sigma))
            sigma_sources.append(None)

    for rv, p in laplace_priors:
        split_terms.append(laplace_prior_term(rv, model, p, d)[0])

    _check_identified(prior_precision, split_terms, gaussian_terms, theta_rvs)
    problem = SplitProblem(
        params=tuple(params),
        prior_mean=np.concatenate(means) if means else np.zeros(0),
        prior_precision=prior_precision,
        split_terms=tuple(split_terms),
        gaussian_terms=tuple(gaussian_terms),
    )
    nuisance_vars = [
        (model.rvs_to_values[r].name, model.compile_logp(vars=[r], jacobian=True, sum=True))
        for r in nuisance_rvs
    ]
    return DetectedModel(
        problem, [p.name for p in params], sigma_sources, prior_sources, nuisance_sources,
        nuisance_vars, free_rates=free_rates, shared_designs=shared_designs,
    )


def _not_a_coefficient(rv, terms, model, seed=0):
    """Message for a free variable of the predictors that does not enter them as a coefficient.

    The predictors are evaluated as functions of their free variables at positive points
    (where scales and lengthscales are in their support). Returns a message when a predictor
    is not affine in ``rv`` with the others held fixed (e.g. a GP lengthscale), or is affine
    but with a slope that moves with other free variables (a non-centred scale,
    ``u = tau * u_raw``); None when ``rv`` enters as a coefficient, or the predictors cannot
    be evaluated. Only called for a variable whose prior SplitGibbs rejects.
    """
    etas = [t.eta for t in terms]
    free = _free_rvs_in(etas, model)
    if rv not in free:
        return None
    stand_ins = {r: r.type() for r in free}
    rng = np.random.default_rng(seed)
    try:
        fn = pytensor.function(
            list(stand_ins.values()), pytensor.clone_replace(etas, replace=stand_ins),
            on_unused_input="ignore", mode=DETECT_MODE,
        )
        point = {r: 1.0 + rng.random(_shape_of(r)) for r in free}
        step = {r: 0.5 + 0.5 * rng.random(_shape_of(r)) for r in free}

        def evaluate(moved=(), by_rv=0.0):
            values = [point[r] + step[r] * (by_rv if r is rv else any(r is m for m in moved))
                      for r in free]
            with np.errstate(all="ignore"):
                outs = fn(*[np.asarray(v, dtype=r.dtype) for v, r in zip(values, free)])
            return [np.asarray(o, dtype=float) for o in outs]

        e0, e1, e2 = evaluate(), evaluate(by_rv=1.0), evaluate(by_rv=2.0)
    except Exception:  # noqa: BLE001 - only a better message is at stake
        return None
    if not all(np.all(np.isfinite(e)) for e in (*e0, *e1, *e2)):
        return None

    def close(a, b, *refs):
        scale = 1.0 + sum(np.abs(r) for r in refs)
        return np.all(np.abs(a - b) <= 1e-7 * scale)

    for t, a, b, c in zip(terms, e0, e1, e2):
        if not close(c - b, b - a, a, b, c):
            return (
                f"variable {rv.name!r} enters the linear predictor of {t.rv.name!r} "
                "non-linearly (e.g. a GP lengthscale, or inside exp()): it is not a regression "
                f"coefficient, and SplitGibbs samples GLMs only. Sample this model with {NUTS}."
            )
    partners, where = [], None
    for r in free:
        if r is rv:
            continue
        try:
            f0, f1 = evaluate(moved=(r,)), evaluate(moved=(r,), by_rv=1.0)
        except Exception:  # noqa: BLE001
            return None
        for t, a, b, g0, g1 in zip(terms, e0, e1, f0, f1):
            if not close(g1 - g0, b - a, a, b, g0, g1):
                partners.append(r.name)
                where = where or t.rv.name
                break
    if not partners:
        return None
    if "|" in (rv.name or ""):
        instead = ("Bambi's group-specific terms are non-centred by default: build the model "
                   "with bmb.Model(..., noncentered=False)")
    else:
        instead = f"Write the centred form u ~ Normal(0, {rv.name}) in place of the product"
    return (
        f"variable {rv.name!r} multiplies the coefficient(s) {partners} in the linear predictor "
        f"of {where!r}: a non-centred hierarchical prior (u = {rv.name} * {partners[0]}), whose "
        f"scale SplitGibbs does not sample yet. {instead}, or sample this model with {NUTS}."
    )


def _nuisance_parameter(t, key, graph, model, init):
    """``(function, input_names, initial value)`` of a split family's nuisance parameter.

    The function is None when the parameter is fixed (data). The parameter must
    be one value for all rows of the term.
    """
    where = f"the {key} of the {_dist_name(t.rv)} likelihood of {t.rv.name!r}"
    deps = _free_rvs_in([graph], model)
    if not deps:
        value = np.asarray(_value_of(graph), dtype=float)
        fn, names = None, None
    else:
        for r in deps:
            if _shape_of(r) != ():
                raise UnsupportedModelError(
                    f"{where} depends on the non-scalar free variable {r.name!r}; SplitGibbs "
                    "updates nuisance parameters of split likelihoods one scalar at a time. Use "
                    "a scalar variable, or sample this model with NUTS."
                )
        (val,) = model.replace_rvs_by_values([graph])
        inputs = [model.rvs_to_values[r] for r in deps]
        fn = pytensor.function(inputs, val, on_unused_input="ignore", mode=DETECT_MODE)
        names = [v.name for v in inputs]
        value = np.asarray(fn(*[init[nm] for nm in names]), dtype=float)
    flat = value.ravel()
    if flat.size == 0 or not np.all(flat == flat[0]):
        raise UnsupportedModelError(
            f"{where} differs between observations; SplitGibbs supports one value of {key} per "
            "likelihood term (a scalar, fixed or a free variable). Sample this model with NUTS."
        )
    if not (np.isfinite(flat[0]) and flat[0] > 0):
        raise ValueError(f"{where} must be positive and finite; received {flat[0]!r}.")
    return fn, names, float(flat[0])


def _check_nuisance(model, terms, theta_set, nuisance_rvs, vars):
    """Nuisance parameters of split likelihoods: owned by SplitGibbs, used nowhere else."""
    for t in terms:
        for key, graph in t.nuisance.items():
            deps = [r.name for r in _free_rvs_in([graph], model) if r in theta_set]
            if deps:
                raise UnsupportedModelError(
                    f"the {key} of the {_dist_name(t.rv)} likelihood of {t.rv.name!r} depends "
                    f"on the coefficient(s) {deps} of the linear predictor; SplitGibbs needs "
                    f"{key} to be data or a separate free variable."
                    + (
                        " (pm.Gamma(mu=..., sigma=...) has shape mu^2 / sigma^2: write "
                        "pm.Gamma('y', alpha=k, beta=k / pm.math.exp(eta)) with k data or a "
                        "separate variable.)" if t.family == "gamma" else ""
                    )
                    + " Otherwise sample this model with NUTS."
                )
    if not nuisance_rvs:
        return
    if vars is not None:
        given = set(_user_theta_rvs(vars, model))
        missing = [r.name for r in nuisance_rvs if r not in given]
        if missing:
            raise UnsupportedModelError(
                f"{missing} parametrise(s) a split likelihood (e.g. NegativeBinomial alpha, "
                "StudentT nu or sigma), whose conditional depends on the auxiliary variables z "
                "of the split model, so SplitGibbs must update it; it is not among the variables "
                "given to SplitGibbs (vars). Add it to vars or leave vars unset, and do not "
                "assign it to another step method."
            )
    nuis = set(nuisance_rvs)
    owners = {t.rv for t in terms if t.nuisance}
    for rv in model.basic_RVs:
        if rv in owners or rv in nuis:
            continue
        deps = set(_free_rvs_in(rv.owner.inputs[2:], model)) & nuis
        if deps:
            raise UnsupportedModelError(
                f"variable {rv.name!r} depends on {sorted(d.name for d in deps)}, which "
                "parametrise(s) a split likelihood (e.g. NegativeBinomial alpha, StudentT nu "
                "or sigma); SplitGibbs updates such a parameter from that likelihood and its "
                "prior only, so it must not be used elsewhere in the model. Use separate "
                "variables, or sample this model with NUTS."
            )
    for pot in model.potentials:
        deps = set(_free_rvs_in([pot], model)) & nuis
        if deps:
            raise UnsupportedModelError(
                f"pm.Potential {pot.name!r} involves {sorted(d.name for d in deps)}, which "
                "parametrise(s) a split likelihood; SplitGibbs cannot include arbitrary "
                "potentials. Sample this model with NUTS."
            )


def _check_identified(prior_precision, split_terms, gaussian_terms, theta_rvs):
    """Raise when theta | z is improper: a direction with flat prior that no data row sees.

    ``Q = P_0 + sum A^T W A`` (any positive weights ``W`` from rho and sigma) is
    singular exactly when ``P_0 + sum A^T A`` is, so this is checked once here,
    whatever rho is and before a free sigma is known.
    """
    d = prior_precision.shape[0]
    if d == 0:
        return
    try:
        np.linalg.cholesky(prior_precision)
        return  # proper prior: always identified
    except np.linalg.LinAlgError:
        pass
    M = prior_precision.copy()
    for t in (*split_terms, *gaussian_terms):
        M += t.A.T @ t.A
    diag = np.diag(M).copy()
    shapes = [_shape_of(rv) for rv in theta_rvs]
    labels = _coef_labels(theta_rvs, shapes)
    dead = np.flatnonzero(~(diag > 0))
    if dead.size:
        unseen = [labels[j] for j in dead]
    else:
        scale = 1.0 / np.sqrt(diag)
        evals, evecs = np.linalg.eigh(M * np.outer(scale, scale))
        if evals[0] > 1e-11 * max(evals[-1], 1.0):
            return
        v = np.abs(evecs[:, 0])
        unseen = [labels[j] for j in np.flatnonzero(v > 0.1 * v.max())]
    raise ValueError(
        f"the posterior is improper: the coefficient(s) {unseen[:10]} have a flat (or singular) "
        "prior and are not identified by the data (e.g. duplicated or collinear columns of the "
        "design, a column of zeros, or more coefficients than observations), so the precision "
        "of theta | z is singular. Give them a proper prior (e.g. pm.Normal) or remove the "
        "redundant columns."
    )


def _user_theta_rvs(vars, model):
    """The free variables named by ``vars`` (variables, value variables or their names)."""
    if not isinstance(vars, (list, tuple)):
        vars = [vars]
    values_to_rvs = {v: rv for rv, v in model.rvs_to_values.items()}
    by_name = {**{v.name: rv for rv, v in model.rvs_to_values.items()}, **model.named_vars}
    expected = (
        "vars must list free variables of the model (variables or names), among "
        f"{[rv.name for rv in model.free_RVs]}; received "
    )
    out = []
    for v in vars:
        if isinstance(v, str):
            if v not in by_name:
                raise ValueError(f"{expected}{v!r}, which is no variable of the model.")
            rv = values_to_rvs.get(by_name[v], by_name[v])
        elif isinstance(v, Variable):
            rv = values_to_rvs.get(v, v)
        else:
            raise ValueError(f"{expected}{v!r} of type {type(v).__name__}.")
        if rv not in model.free_RVs:
            if rv in model.observed_RVs:
                what = "an observed variable"
            elif any(rv is x for x in model.deterministics):
                what = "a Deterministic"
            elif any(rv is x for x in model.named_vars.values()):
                what = "not a free random variable"
            else:
                what = "not a variable of this model (one of another pm.Model?)"
            raise ValueError(f"{expected}{getattr(v, 'name', v)!r}, which is {what}.")
        out.append(rv)
    order = {rv: i for i, rv in enumerate(model.free_RVs)}
    return sorted(set(out), key=order.__getitem__)


def _check_no_other_dependants(model, theta_rvs, terms):
    """theta | z must only involve the recognised terms and theta's own priors."""
    theta_set = set(theta_rvs)
    recognised = {t.rv for t in terms}
    for rv in model.basic_RVs:
        if rv in recognised or rv in theta_set:
            continue
        deps = set(_free_rvs_in(rv.owner.inputs[2:], model)) & theta_set
        if deps and rv in model.free_RVs and (rv.name or "").endswith("_unobserved"):
            base = rv.name[: -len("_unobserved")]
            raise ValueError(
                f"observed data of {base!r} contains NaN (missing values): PyMC imputes them as "
                f"the free variable {rv.name!r}, which depends on the coefficient(s) "
                f"{sorted(d.name for d in deps)} and which SplitGibbs cannot sample. Drop the "
                "rows with missing observations (or impute them) before building the model."
            )
        if deps:
            raise UnsupportedModelError(
                f"variable {rv.name!r} depends on the coefficient(s) {[d.name for d in deps]} "
                "outside a supported likelihood (e.g. a coefficient used as a prior parameter), "
                "so theta | z is not Gaussian. Sample this model with NUTS."
            )
    for pot in model.potentials:
        deps = set(_free_rvs_in([pot], model)) & theta_set
        if deps:
            raise UnsupportedModelError(
                f"pm.Potential {pot.name!r} involves the coefficient(s) "
                f"{[d.name for d in deps]}; SplitGibbs cannot include arbitrary potentials. "
                "Sample this model with NUTS."
            )
    for t in terms:
        extra = [r.name for r in _free_rvs_in([t.eta], model) if r not in theta_set]
        if extra:
            raise UnsupportedModelError(
                f"the linear predictor of {t.rv.name!r} depends on {extra}, which SplitGibbs "
                "does not own. Give SplitGibbs every coefficient of the predictor."
            )
