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
from pytensor.graph.basic import Constant, ancestors
from pytensor.scalar.basic import Exp
from pytensor.scalar.math import Sigmoid
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.random.basic import (
    BernoulliRV,
    BinomialRV,
    MvNormalRV,
    NormalRV,
    PoissonRV,
)

import pymc as pm
from pymc.distributions.continuous import FlatRV

from .families import FAMILIES
from .problem import GaussianTerm, ParamSlice, SplitProblem, SplitTerm

__all__ = ["DetectedModel", "UnsupportedModelError", "detect_split_problem"]

SUPPORTED = (
    "Bernoulli and Binomial with logit link (logit_p=eta or p=pm.math.invlogit(eta)), "
    "Poisson with log link (mu=pm.math.exp(eta)), Normal with identity link (mu=eta)"
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
    """

    problem: SplitProblem
    value_var_names: list
    sigma_sources: list = field(default_factory=list)

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
    return np.asarray(var.eval())


def _strip_inverse_link(param, scalar_op_type):
    """Return ``eta`` when ``param`` is ``inverse_link(eta)`` (through broadcasts), else None."""
    node = param.owner
    if node is None:
        return None
    if isinstance(node.op, Elemwise) and isinstance(node.op.scalar_op, scalar_op_type):
        return node.inputs[0]
    if isinstance(node.op, DimShuffle):
        inner = _strip_inverse_link(node.inputs[0], scalar_op_type)
        return None if inner is None else node.op(inner)
    return None


def _dist_name(rv):
    return type(rv.owner.op).__name__.replace("RV", "")


@dataclass
class _ObservedTerm:
    rv: object
    kind: str  # "split" or "gaussian"
    family: str
    eta: object
    y: np.ndarray
    trials: object = None  # graph (binomial n) or None
    sigma: object = None  # graph (normal sigma) or None


def _classify_observed(rv):
    """Recognise family and link of an observed variable; None if not a GLM term."""
    op = rv.owner.op
    params = rv.owner.inputs[2:]
    name = rv.name
    if isinstance(op, BernoulliRV):
        eta = _strip_inverse_link(params[0], Sigmoid)
        fam, trials = "bernoulli", None
    elif isinstance(op, BinomialRV):
        eta = _strip_inverse_link(params[1], Sigmoid)
        fam, trials = "binomial", params[0]
    elif isinstance(op, PoissonRV):
        eta = _strip_inverse_link(params[0], Exp)
        fam, trials = "poisson", None
    elif isinstance(op, NormalRV):
        return _ObservedTerm(rv, "gaussian", "normal", params[0], None, sigma=params[1])
    else:
        return None
    if eta is None:
        raise UnsupportedModelError(
            f"observed variable {name!r}: its {_dist_name(rv)} parameter is not the inverse "
            f"link of a linear predictor. Supported: {SUPPORTED}."
        )
    return _ObservedTerm(rv, "split", fam, eta, None, trials=trials)


def _free_rvs_in(graphs, model):
    """Free random variables of ``model`` that the (RV-space) graphs depend on."""
    free = set(model.free_RVs)
    found = [v for v in ancestors(graphs) if v in free]
    order = {rv: i for i, rv in enumerate(model.free_RVs)}
    return sorted(set(found), key=order.__getitem__)


def _gaussian_prior(rv, model, size):
    """(mean, precision) of a coefficient's Normal / MvNormal / Flat prior."""
    op = rv.owner.op
    name = rv.name
    if model.rvs_to_transforms.get(rv) is not None:
        raise UnsupportedModelError(
            f"coefficient {name!r} has a transformed ({_dist_name(rv)}) prior. SplitGibbs needs "
            "Normal, MvNormal or Flat priors on the variables of the linear predictor; use one "
            "of those, or sample this model with NUTS."
        )
    params = rv.owner.inputs[2:]
    hyper = _free_rvs_in(params, model)
    if hyper:
        raise UnsupportedModelError(
            f"the prior of coefficient {name!r} depends on the free variable(s) "
            f"{[h.name for h in hyper]} (a hierarchical prior), which this version of SplitGibbs "
            "does not support. Fix the hyperparameters, or sample this model with NUTS."
        )
    if isinstance(op, NormalRV):
        mu = np.broadcast_to(_value_of(params[0]), _shape_of(rv)).ravel().astype(float)
        sd = np.broadcast_to(_value_of(params[1]), _shape_of(rv)).ravel().astype(float)
        return mu, np.diag(1.0 / sd**2)
    if isinstance(op, FlatRV):
        return np.zeros(size), np.zeros((size, size))
    if isinstance(op, MvNormalRV):
        mu = _value_of(params[0]).astype(float)
        cov = _value_of(params[1]).astype(float)
        if cov.ndim != 2 or mu.shape[-1] != size:
            raise UnsupportedModelError(
                f"coefficient {name!r}: batched MvNormal priors are not supported; use one "
                "MvNormal per coefficient vector."
            )
        mu = np.broadcast_to(mu, (size,))
        return mu.copy(), np.linalg.inv(cov)
    raise UnsupportedModelError(
        f"coefficient {name!r} has a {_dist_name(rv)} prior. SplitGibbs needs Normal, MvNormal "
        "or Flat priors on the variables of the linear predictor; use one of those, or sample "
        "this model with NUTS."
    )


def _shape_of(rv):
    return tuple(int(s) for s in rv.shape.eval())


def _affine_map(eta_graphs, out_shapes, theta_rvs, model, rng, names):
    """Read off ``(A, offset)`` of each linear predictor, verifying affinity numerically."""
    value_vars = [model.rvs_to_values[rv] for rv in theta_rvs]
    eta_vals = model.replace_rvs_by_values(eta_graphs)
    fn = pytensor.function(value_vars, eta_vals, on_unused_input="ignore")
    shapes = [_shape_of(rv) for rv in theta_rvs]
    sizes = [int(np.prod(s)) for s in shapes]
    d = sum(sizes)
    splits = np.cumsum(sizes)[:-1]

    def evaluate(theta):
        args = [
            np.asarray(part.reshape(shape), dtype=vv.dtype)
            for part, shape, vv in zip(np.split(theta, splits), shapes, value_vars)
        ]
        outs = fn(*args)
        return [np.broadcast_to(o, s).ravel().astype(float) for o, s in zip(outs, out_shapes)]

    offsets = evaluate(np.zeros(d))
    cols = [np.empty((o.shape[0], d)) for o in offsets]
    for j in range(d):
        e = np.zeros(d)
        e[j] = 1.0
        for A, o, v in zip(cols, offsets, evaluate(e)):
            A[:, j] = v - o
    for _ in range(2):
        t = rng.normal(size=d) * 1.7
        for A, o, v, nm in zip(cols, offsets, evaluate(t), names):
            pred = o + A @ t
            scale = 1.0 + np.abs(o) + np.abs(A) @ np.abs(t)
            if not np.all(np.abs(v - pred) <= 1e-7 * scale):
                raise UnsupportedModelError(
                    f"the linear predictor of observed variable {nm!r} is not affine in the "
                    f"coefficients {[rv.name for rv in theta_rvs]} (e.g. it contains products "
                    "of coefficients or nonlinear functions of them). SplitGibbs needs "
                    "eta = X @ beta + offset; sample this model with NUTS instead."
                )
    return cols, offsets


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
            f"({SUPPORTED})."
        )
    terms = []
    unsupported = []
    for rv in model.observed_RVs:
        term = _classify_observed(rv)
        if term is None:
            unsupported.append(rv)
            continue
        terms.append(term)

    eta_rvs = _free_rvs_in([t.eta for t in terms], model) if terms else []
    if vars is not None:
        theta_rvs = _user_theta_rvs(vars, model)
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
        raise UnsupportedModelError(
            "no observed variable of the model is a GLM term SplitGibbs can sample "
            f"(found: {[(rv.name, _dist_name(rv)) for rv in model.observed_RVs]}). "
            f"Supported: {SUPPORTED}."
        )
    theta_set = set(theta_rvs)
    for rv in unsupported:
        deps = set(_free_rvs_in(rv.owner.inputs[2:], model))
        if deps & theta_set:
            raise UnsupportedModelError(
                f"observed variable {rv.name!r} has a {_dist_name(rv)} likelihood, which "
                f"SplitGibbs does not support. Supported: {SUPPORTED}. Sample this model with "
                "NUTS, or rewrite the likelihood."
            )

    _check_no_other_dependants(model, theta_rvs, terms)

    # observed data, trials and sigmas
    names = [t.rv.name for t in terms]
    for t in terms:
        y = _value_of(model.rvs_to_values[t.rv]).astype(float)
        t.y = y
    rng = np.random.default_rng(seed)
    cols, offsets = _affine_map(
        [t.eta for t in terms], [t.y.shape for t in terms], theta_rvs, model, rng, names
    )

    split_terms, gaussian_terms, sigma_sources = [], [], []
    for t, A, off in zip(terms, cols, offsets):
        y = t.y.ravel()
        if t.kind == "split":
            trials = None
            if t.trials is not None:
                if _free_rvs_in([t.trials], model):
                    raise UnsupportedModelError(
                        f"observed variable {t.rv.name!r}: the number of trials n must be data, "
                        "not a random variable."
                    )
                trials = np.broadcast_to(_value_of(t.trials), t.y.shape).ravel().astype(float)
            fam = FAMILIES[t.family]
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
            fn = pytensor.function(inputs, sigma_val, on_unused_input="ignore")
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

    params, means, precs = [], [], []
    start = 0
    for rv in theta_rvs:
        shape = _shape_of(rv)
        size = int(np.prod(shape))
        mean, prec = _gaussian_prior(rv, model, size)
        vv = model.rvs_to_values[rv]
        params.append(ParamSlice(vv.name, shape, start, start + size, str(vv.dtype)))
        means.append(mean)
        precs.append(prec)
        start += size
    d = start
    prior_precision = np.zeros((d, d))
    for p, prec in zip(params, precs):
        prior_precision[p.start : p.stop, p.start : p.stop] = prec
    problem = SplitProblem(
        params=tuple(params),
        prior_mean=np.concatenate(means) if means else np.zeros(0),
        prior_precision=prior_precision,
        split_terms=tuple(split_terms),
        gaussian_terms=tuple(gaussian_terms),
    )
    return DetectedModel(problem, [p.name for p in params], sigma_sources)


def _user_theta_rvs(vars, model):
    if not isinstance(vars, (list, tuple)):
        vars = [vars]
    values_to_rvs = {v: rv for rv, v in model.rvs_to_values.items()}
    out = []
    for v in vars:
        rv = values_to_rvs.get(v, v)
        if isinstance(v, str):
            rv = model[v]
            rv = values_to_rvs.get(rv, rv)
        if rv not in model.free_RVs:
            raise ValueError(
                f"vars must be free variables of the model; received {getattr(v, 'name', v)!r}."
            )
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
