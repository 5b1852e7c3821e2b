"""Graph helpers of model detection: reading PyTensor graphs and PyMC models.

What :mod:`pymc_sgs.detect`, :mod:`pymc_sgs.detect_nonsmooth` and
:mod:`pymc_sgs.detect_multinomial` share and that knows nothing about the families:
values of data graphs, the free variables a graph depends on, shapes and labels of the
coefficients, the observed data, the (Normal, MvNormal, Flat) priors of the coefficients,
and the checks that nothing else in the model depends on them. The layers of detection:

* this module (graph helpers; imports no other detection module);
* :mod:`pymc_sgs.recognise`: which PyMC likelihoods are read as which family and link;
* :mod:`pymc_sgs.affine`: reading ``A`` and the offset off each linear predictor;
* :mod:`pymc_sgs.detect` (the GLM), :mod:`pymc_sgs.detect_nonsmooth` (kinked terms) and
  :mod:`pymc_sgs.detect_multinomial` (``pm.Categorical``), which put them together.
"""

from __future__ import annotations

import numpy as np
import pytensor
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant, Variable

try:  # pytensor >= 2.31
    from pytensor.graph.traversal import ancestors
except ImportError:  # pragma: no cover
    from pytensor.graph.basic import ancestors
from pymc.distributions.continuous import FlatRV
from pytensor.scalar.basic import Cast as ScalarCast
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.random.basic import MvNormalRV, NormalRV

__all__ = [
    "UnsupportedModelError",
    "NUTS",
    "DETECT_MODE",
    "value_of",
    "find_outermost",
    "observed_data",
    "check_cast_nonfinite",
    "dist_name",
    "op_dist_name",
    "free_rvs_in",
    "gaussian_prior",
    "shape_of",
    "coef_labels",
    "nonfinite_data",
    "user_theta_rvs",
    "dependants",
    "check_no_other_dependants",
    "rebuild_graph",
    "fixed_through",
    "values_at",
]


class UnsupportedModelError(ValueError):
    """The model (or part of it) is not a GLM that SplitGibbs can sample."""


#: what to use for a model SplitGibbs cannot sample
NUTS = "NUTS (pm.sample() without step=, or nutpie)"


#: detection evaluates a few small graphs once: PyTensor's Python linker builds them without
#: C compilation (which would cost more setup than it saves), and their run time is NumPy's
#: either way
DETECT_MODE = "FAST_COMPILE"


def value_of(var):
    """Numeric value of a graph with no random inputs (constants, pm.Data)."""
    if isinstance(var, Constant):
        return np.asarray(var.data)
    return np.asarray(var.eval(mode=DETECT_MODE))


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


def observed_data(value, where="the observed variable"):
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
    data = value_of(value)
    check_cast_nonfinite(data, f"observed data of {where!r}")
    return data.astype(float)


def check_cast_nonfinite(data, what):
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


def dist_name(rv):
    return op_dist_name(rv.owner.op)


def op_dist_name(op):
    name = type(op).__name__.replace("RV", "")
    return {"NegBinomial": "NegativeBinomial"}.get(name, name)


def free_rvs_in(graphs, model):
    """Free random variables of ``model`` that the (RV-space) graphs depend on."""
    free = set(model.free_RVs)
    # free variables are leaves: do not look through them into their own priors
    found = [v for v in ancestors(graphs, blockers=model.free_RVs) if v in free]
    order = {rv: i for i, rv in enumerate(model.free_RVs)}
    return sorted(set(found), key=order.__getitem__)


def _free_covariance_message(rv, hyper, model) -> str:
    """Why an ``MvNormal`` prior with a free covariance was not read (the mixed-model step
    reads it as correlated group effects under the conditions this names)."""
    names = [h.name for h in hyper]
    nested = {h.name: [v.name for v in free_rvs_in(h.owner.inputs[2:], model)] for h in hyper}
    nested = {k: v for k, v in nested.items() if v}
    form = (
        "u ~ MvNormal(mu, chol=chol) with chol from pm.LKJCholeskyCov('chol', n=k, eta=2.0, "
        "sd_dist=pm.HalfNormal.dist(2.5, shape=k))"
    )
    if nested:
        return (
            f"the MvNormal prior of {rv.name!r} has a covariance through {names}, whose own "
            f"prior depends on the free variable(s) {nested} (a hyperprior on the group sds). "
            "SplitGibbs reads correlated group effects only when the covariance's variables "
            f"have priors with fixed parameters, e.g. {form}. Give the sds' prior fixed "
            "scales, or sample this model with NUTS."
        )
    return (
        f"the MvNormal prior of {rv.name!r} has a covariance that depends on the free "
        f"variable(s) {names}. SplitGibbs reads such a prior only as correlated group effects: "
        f"{rv.name!r} an L x k matrix whose rows a grouping factor picks in the linear predictor "
        f"of a single likelihood ({rv.name}[g, 0] + {rv.name}[g, 1] * x), one k x k covariance "
        f"shared by the levels, e.g. {form}. Write it so, or sample this model with NUTS."
    )


def gaussian_prior(rv, model, size):
    """(mean, precision, scale_source) of a coefficient's Normal / MvNormal / Flat prior.

    ``scale_source`` is None for fixed priors, or ``(function, input_names)``
    giving the prior sd from the values of hyperparameters (hierarchical
    Normal priors); the precision returned for those is a placeholder.
    """
    op = rv.owner.op
    name = rv.name
    if model.rvs_to_transforms.get(rv) is not None:
        raise UnsupportedModelError(
            f"coefficient {name!r} has a transformed ({dist_name(rv)}) prior. SplitGibbs needs "
            "Normal, MvNormal, Laplace or Flat priors on the variables of the linear predictor; use one "
            "of those, or sample this model with NUTS."
            + (
                " (Bambi: its group-specific terms are non-centred by default, "
                "u = sigma * offset; build the model with bmb.Model(..., noncentered=False).)"
                if "|" in (name or "")
                else ""
            )
        )
    params = rv.owner.inputs[2:]
    hyper = free_rvs_in(params, model)
    if hyper and isinstance(op, NormalRV) and not free_rvs_in([params[0]], model):
        # hierarchical scale (random effects): the precision follows the hyperparameters,
        # which another step method (NUTS) updates
        mu = np.broadcast_to(value_of(params[0]), shape_of(rv)).ravel().astype(float)
        (sd_val,) = model.replace_rvs_by_values([params[1]])
        inputs = [model.rvs_to_values[h] for h in hyper]
        fn = pytensor.function(inputs, sd_val, on_unused_input="ignore", mode=DETECT_MODE)
        return mu, np.eye(size), (fn, [v.name for v in inputs])
    if hyper and isinstance(op, MvNormalRV):
        raise UnsupportedModelError(_free_covariance_message(rv, hyper, model))
    if hyper:
        raise UnsupportedModelError(
            f"the prior of coefficient {name!r} depends on the free variable(s) "
            f"{[h.name for h in hyper]} through more than its scale (a {dist_name(rv)} prior "
            "or a random mean), which SplitGibbs does not support. Use a Normal prior whose "
            "sigma is the hyperparameter (u ~ Normal(0, tau)), or sample this model with NUTS."
        )
    if isinstance(op, NormalRV):
        mu = np.broadcast_to(value_of(params[0]), shape_of(rv)).ravel().astype(float)
        sd = np.broadcast_to(value_of(params[1]), shape_of(rv)).ravel().astype(float)
        if not (np.all(np.isfinite(mu)) and np.all(np.isfinite(sd)) and np.all(sd > 0)):
            raise ValueError(
                f"coefficient {name!r}: its Normal prior needs a finite mean and a positive, "
                f"finite sigma; received mu={mu[:5]}, sigma={sd[:5]}."
            )
        return mu, np.diag(1.0 / sd**2), None
    if isinstance(op, FlatRV):
        return np.zeros(size), np.zeros((size, size)), None
    if isinstance(op, MvNormalRV):
        mu = value_of(params[0]).astype(float)
        cov = value_of(params[1]).astype(float)
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
        f"coefficient {name!r} has a {dist_name(rv)} prior. SplitGibbs needs Normal, MvNormal, "
        "Laplace or Flat priors on the variables of the linear predictor; use one of those, or "
        "sample this model with NUTS."
    )


def shape_of(rv):
    static = rv.type.shape
    if all(s is not None for s in static):
        return tuple(int(s) for s in static)
    return tuple(int(s) for s in rv.shape.eval(mode=DETECT_MODE))


def coef_labels(theta_rvs, shapes):
    """``'b[0]'``-style labels of the entries of theta (flat order)."""
    labels = []
    for rv, shape in zip(theta_rvs, shapes):
        if shape == ():
            labels.append(rv.name)
        else:
            labels.extend(f"{rv.name}[{', '.join(map(str, ix))}]" for ix in np.ndindex(*shape))
    return labels


def nonfinite_data(graph, model):
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


def user_theta_rvs(vars, model):
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


def dependants(model, targets, skip=()):
    """What else in ``model`` depends on the free variables ``targets``.

    Yields ``(variable, deps, is_potential)``: every basic variable not in ``skip`` whose
    distribution parameters depend on some of ``targets`` (``deps``, a set), then every
    ``pm.Potential`` that does, in the model's order.
    """
    targets = set(targets)
    skip = set(skip)
    for rv in model.basic_RVs:
        if rv in skip:
            continue
        deps = set(free_rvs_in(rv.owner.inputs[2:], model)) & targets
        if deps:
            yield rv, deps, False
    for pot in model.potentials:
        deps = set(free_rvs_in([pot], model)) & targets
        if deps:
            yield pot, deps, True


def check_no_other_dependants(model, theta_rvs, terms):
    """theta | z must only involve the recognised terms and theta's own priors."""
    theta_set = set(theta_rvs)
    recognised = {t.rv for t in terms}
    for var, deps, potential in dependants(model, theta_set, skip=recognised | theta_set):
        if potential:
            raise UnsupportedModelError(
                f"pm.Potential {var.name!r} involves the coefficient(s) "
                f"{[d.name for d in deps]}; SplitGibbs cannot include arbitrary potentials. "
                "Sample this model with NUTS."
            )
        if var in model.free_RVs and (var.name or "").endswith("_unobserved"):
            base = var.name[: -len("_unobserved")]
            raise ValueError(
                f"observed data of {base!r} contains NaN (missing values): PyMC imputes them as "
                f"the free variable {var.name!r}, which depends on the coefficient(s) "
                f"{sorted(d.name for d in deps)} and which SplitGibbs cannot sample. Drop the "
                "rows with missing observations (or impute them) before building the model."
            )
        raise UnsupportedModelError(
            f"variable {var.name!r} depends on the coefficient(s) {[d.name for d in deps]} "
            "outside a supported likelihood (e.g. a coefficient used as a prior parameter), "
            "so theta | z is not Gaussian. Sample this model with NUTS."
        )
    for t in terms:
        extra = [r.name for r in free_rvs_in([t.eta], model) if r not in theta_set]
        if extra:
            raise UnsupportedModelError(
                f"the linear predictor of {t.rv.name!r} depends on {extra}, which SplitGibbs "
                "does not own. Give SplitGibbs every coefficient of the predictor."
            )


def rebuild_graph(var, memo):
    """``var`` with the replacements in ``memo``, rebuilding only the nodes between them and
    ``var``: the model's own random variables stay the same objects (clone_replace would
    copy them). ``memo`` collects the rebuilt variables."""
    if var in memo:
        return memo[var]
    node = var.owner
    out = var
    if node is not None:
        inputs = [rebuild_graph(i, memo) for i in node.inputs]
        if any(a is not b for a, b in zip(inputs, node.inputs)):
            out = node.clone_with_new_inputs(inputs).outputs[node.outputs.index(var)]
    memo[var] = out
    return out


def values_at(rvs, model, point):
    """The values of the random variables ``rvs`` at ``point`` (a point of the model's value
    variables, e.g. ``model.initial_point()``), on their own (constrained) scale.

    Their value graphs are evaluated: compiled as outputs, the random variables themselves
    would be fresh, unseeded draws from their priors, different in every run.
    """
    return model.compile_fn(
        model.replace_rvs_by_values(list(rvs)),
        inputs=model.value_vars,
        on_unused_input="ignore",
        point_fn=True,
    )(point)


def fixed_through(graph, through, deps, model, seed, refuse):
    """``graph`` with the variables ``through`` fixed at the model's start, after checking
    numerically that its value depends on none of them and is one value for all rows.

    For a likelihood parameter whose graph involves the linear predictor though its value
    does not: Bambi's Gamma passes ``sigma = mu / alpha**0.5``, whose shape
    ``mu**2 / sigma**2`` is ``alpha``. ``deps`` are the graph's free variables, ``through``
    those of them to fix; the values are checked at the model's start and at two random
    moves of ``through`` (seeded by ``seed``), and ``refuse`` (an exception) is raised when
    they differ.
    """
    ip = model.initial_point()
    values = [model.rvs_to_values[r] for r in deps]
    (g,) = model.replace_rvs_by_values([graph])
    fn = pytensor.function(values, g, on_unused_input="ignore", mode=DETECT_MODE)
    start = {v.name: np.asarray(ip[v.name]) for v in values}
    rng = np.random.default_rng(seed)
    base = np.ravel(np.asarray(fn(**start), dtype=float))
    if base.size == 0 or not np.allclose(base, base[0], rtol=1e-9, atol=0.0):
        raise refuse
    moving = {model.rvs_to_values[r].name for r in through}
    for _ in range(2):
        moved = {
            k: (v + rng.normal(0.0, 0.5, np.shape(v))).astype(v.dtype) if k in moving else v
            for k, v in start.items()
        }
        with np.errstate(all="ignore"):
            got = np.ravel(np.asarray(fn(**moved), dtype=float))
        if not np.allclose(got, base[0], rtol=1e-9, atol=0.0):
            raise refuse
    if not through:
        return graph
    # fixed at their values at the start: the constant fixed into the graph sets its
    # rounding, hence the draws
    at_start = values_at(through, model, ip)
    memo = {
        r: pytensor.tensor.constant(np.asarray(v, dtype=r.dtype)) for r, v in zip(through, at_start)
    }
    return rebuild_graph(graph, memo)
