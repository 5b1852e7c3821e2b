"""Find the GLM structure in a PyMC model and describe it as a :class:`SplitProblem`.

Detection is numerical where it can be: the linear predictor of each observed
term is evaluated at zero and at unit vectors to read off ``A`` and the offset,
and then checked at random points, so any way of writing an affine predictor
works (``pm.math.dot(X, b)``, ``X @ b + a``, ``b0 + b1 * x1 + ...``, ``pm.Data``,
``Deterministic`` wrappers, Bambi's graphs).

The layers, each importing only those above it:

* :mod:`pymc_sgs.graph`: graph helpers (values, free variables, shapes, priors);
* :mod:`pymc_sgs.detect_nonsmooth` and :mod:`pymc_sgs.detect_multinomial`: the kinked
  terms and ``pm.Categorical``;
* :mod:`pymc_sgs.recognise`: which likelihood is read as which family and link;
* :mod:`pymc_sgs.affine`: ``A`` and the offset of each predictor;
* this module: the GLM as a :class:`SplitProblem` (priors, data, nuisance parameters and
  the checks that the model is one SplitGibbs can sample).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pymc as pm
import pytensor

from .affine import affine_map
from .detect_nonsmooth import asymmetric_laplace_term, is_laplace, laplace_prior_term
from .families import NormalIdentity
from .graph import (
    DETECT_MODE,
    NUTS,
    UnsupportedModelError,
    check_cast_nonfinite,
    check_no_other_dependants,
    coef_labels,
    dependants,
    dist_name,
    fixed_through,
    free_rvs_in,
    gaussian_prior,
    observed_data,
    shape_of,
    user_theta_rvs,
    value_of,
)
from .problem import GaussianTerm, ParamSlice, SplitProblem, SplitTerm
from .recognise import (
    SUPPORTED,
    classify_observed,
    describe_likelihood,
    explain_missing_link,
    raise_known_unsupported,
)

__all__ = ["DetectedModel", "UnsupportedModelError", "detect_split_problem"]


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
        term = classify_observed(rv, model)
        if term is None:
            unsupported.append(rv)
            continue
        terms.append(term)

    eta_rvs = free_rvs_in([t.eta for t in terms], model) if terms else []
    nuisance_candidates = set(free_rvs_in([g for t in terms for g in t.nuisance.values()], model))
    if vars is not None:
        theta_rvs = [
            r for r in user_theta_rvs(vars, model) if r not in nuisance_candidates or r in eta_rvs
        ]
        missing = [rv.name for rv in eta_rvs if rv not in theta_rvs]
        if missing:
            raise UnsupportedModelError(
                f"the linear predictors depend on {missing}, which are not among the variables "
                "given to SplitGibbs (vars). SplitGibbs must own every coefficient of the linear "
                "predictor; add them to vars or leave vars unset."
            )
    else:
        theta_rvs = eta_rvs
    terms = [t for t in terms if set(free_rvs_in([t.eta], model)) & set(theta_rvs)]
    if not terms:
        for rv in unsupported:
            if free_rvs_in(rv.owner.inputs[2:], model):
                raise_known_unsupported(rv, model)
                reason = explain_missing_link(rv, model)
                if reason is not None:
                    raise UnsupportedModelError(reason)
        raise UnsupportedModelError(
            "no observed variable of the model is a GLM term SplitGibbs can sample "
            f"(found: {[(rv.name, describe_likelihood(rv, model)[0]) for rv in model.observed_RVs]}). "
            f"Supported: {SUPPORTED}. Sample this model with {NUTS} instead."
        )
    theta_set = set(theta_rvs)
    for rv in unsupported:
        deps = set(free_rvs_in(rv.owner.inputs[2:], model))
        if deps & theta_set:
            raise_known_unsupported(rv, model)
            reason = explain_missing_link(rv, model)
            if reason is not None:
                raise UnsupportedModelError(reason)
            raise UnsupportedModelError(
                f"observed variable {rv.name!r} has a {dist_name(rv)} likelihood, which "
                f"SplitGibbs does not support. Supported: {SUPPORTED}. Sample this model with "
                "NUTS, or rewrite the likelihood."
            )

    for t in terms:
        _fix_predictor_in_nuisance(t, model, theta_set)
    nuisance_rvs = free_rvs_in([g for t in terms for g in t.nuisance.values()], model)
    _check_nuisance(model, terms, theta_set, nuisance_rvs, vars)
    check_no_other_dependants(model, theta_rvs, terms)

    # priors first: a non-Gaussian (e.g. transformed) prior would otherwise
    # surface as a non-affine predictor
    params, means, precs, prior_sources, laplace_priors = [], [], [], [], []
    start = 0
    for rv in theta_rvs:
        shape = shape_of(rv)
        size = int(np.prod(shape))
        vv = model.rvs_to_values[rv]
        params.append(ParamSlice(vv.name, shape, start, start + size, str(vv.dtype)))
        if is_laplace(rv):
            # Bayesian lasso: the prior is split too (rows e_j^T), built once d is known
            laplace_priors.append((rv, params[-1]))
            mean, prec, scale_source = np.zeros(size), np.zeros((size, size)), None
        else:
            try:
                mean, prec, scale_source = gaussian_prior(rv, model, size)
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
        t.y = observed_data(model.rvs_to_values[t.rv], t.rv.name)
    rng = np.random.default_rng(seed)
    cols, offsets, shared_designs = affine_map(terms, theta_rvs, model, rng, nuisance_rvs)
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
                if free_rvs_in([t.trials], model):
                    raise UnsupportedModelError(
                        f"observed variable {t.rv.name!r}: the number of trials n must be data, "
                        "not a random variable."
                    )
                trials = value_of(t.trials)
                check_cast_nonfinite(trials, f"trials (n) of {t.rv.name!r}")
                trials = np.broadcast_to(trials, t.y.shape).ravel().astype(float)
            fam = t.family()
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
        NormalIdentity().validate(y, None, t.rv.name)
        sigma_rvs = free_rvs_in([t.sigma], model)
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
        sigma = np.broadcast_to(value_of(t.sigma), t.y.shape).ravel().astype(float)
        if not np.all(np.isfinite(sigma)) or np.any(sigma <= 0):
            raise ValueError(
                f"sigma of observed variable {t.rv.name!r} must be positive and finite."
            )
        if split_gaussian:
            split_terms.append(SplitTerm(t.rv.name, NormalIdentity(), A, off, y, sigma))
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
        problem,
        [p.name for p in params],
        sigma_sources,
        prior_sources,
        nuisance_sources,
        nuisance_vars,
        free_rates=free_rates,
        shared_designs=shared_designs,
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
    free = free_rvs_in(etas, model)
    if rv not in free:
        return None
    stand_ins = {r: r.type() for r in free}
    rng = np.random.default_rng(seed)
    try:
        fn = pytensor.function(
            list(stand_ins.values()),
            pytensor.clone_replace(etas, replace=stand_ins),
            on_unused_input="ignore",
            mode=DETECT_MODE,
        )
        point = {r: 1.0 + rng.random(shape_of(r)) for r in free}
        step = {r: 0.5 + 0.5 * rng.random(shape_of(r)) for r in free}

        def evaluate(moved=(), by_rv=0.0):
            values = [
                point[r] + step[r] * (by_rv if r is rv else any(r is m for m in moved))
                for r in free
            ]
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
        instead = (
            "Bambi's group-specific terms are non-centred by default: build the model "
            "with bmb.Model(..., noncentered=False)"
        )
    elif int(np.prod(shape_of(rv))) > 1 and getattr(rv.owner.op, "ndim_supp", 0) > 0:
        # a multivariate scale (an LKJ Cholesky factor): correlated effects
        instead = (
            f"Write the centred form u ~ MvNormal(mu, chol=...) (an L x k matrix) built "
            f"from {rv.name!r} in place of the product"
        )
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
    where = f"the {key} of the {dist_name(t.rv)} likelihood of {t.rv.name!r}"
    deps = free_rvs_in([graph], model)
    if not deps:
        value = np.asarray(value_of(graph), dtype=float)
        fn, names = None, None
    else:
        for r in deps:
            if shape_of(r) != ():
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


class _ValueDependsOnPredictor(Exception):
    pass


def _fix_predictor_in_nuisance(term, model, theta_set) -> None:
    """Replace in ``term.nuisance`` the graphs that involve the coefficients but whose value
    does not (Bambi's Gamma: shape ``mu**2 / sigma**2`` with ``sigma = mu / alpha**0.5``)
    by the same graphs with the coefficients fixed (:func:`~pymc_sgs.graph.fixed_through`).
    A graph whose value does depend on them, or that has no free variable of its own, is
    left as it is, for :func:`_check_nuisance` to refuse."""
    for key, graph in list(term.nuisance.items()):
        deps = free_rvs_in([graph], model)
        through = [r for r in deps if r in theta_set]
        if not through or len(through) == len(deps):
            continue
        try:
            term.nuisance[key] = fixed_through(
                graph, through, deps, model, 0, _ValueDependsOnPredictor()
            )
        except _ValueDependsOnPredictor:
            continue


def _check_nuisance(model, terms, theta_set, nuisance_rvs, vars):
    """Nuisance parameters of split likelihoods: owned by SplitGibbs, used nowhere else."""
    for t in terms:
        for key, graph in t.nuisance.items():
            deps = [r.name for r in free_rvs_in([graph], model) if r in theta_set]
            if deps:
                raise UnsupportedModelError(
                    f"the {key} of the {dist_name(t.rv)} likelihood of {t.rv.name!r} depends "
                    f"on the coefficient(s) {deps} of the linear predictor; SplitGibbs needs "
                    f"{key} to be data or a separate free variable."
                    + t.nuisance_hint
                    + " Otherwise sample this model with NUTS."
                )
    if not nuisance_rvs:
        return
    if vars is not None:
        given = set(user_theta_rvs(vars, model))
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
    for var, deps, potential in dependants(model, nuis, skip=owners | nuis):
        if potential:
            raise UnsupportedModelError(
                f"pm.Potential {var.name!r} involves {sorted(d.name for d in deps)}, which "
                "parametrise(s) a split likelihood; SplitGibbs cannot include arbitrary "
                "potentials. Sample this model with NUTS."
            )
        raise UnsupportedModelError(
            f"variable {var.name!r} depends on {sorted(d.name for d in deps)}, which "
            "parametrise(s) a split likelihood (e.g. NegativeBinomial alpha, StudentT nu "
            "or sigma); SplitGibbs updates such a parameter from that likelihood and its "
            "prior only, so it must not be used elsewhere in the model. Use separate "
            "variables, or sample this model with NUTS."
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
    shapes = [shape_of(rv) for rv in theta_rvs]
    labels = coef_labels(theta_rvs, shapes)
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
