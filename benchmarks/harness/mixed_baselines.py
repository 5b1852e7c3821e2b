"""The exact baselines of the GLMM benchmark (``benchmarks/mixed.py``), on Bambi's models.

The simple exact samplers an expert would try on a hierarchical GLM before a new one:

* ``Laplace-MH``: :class:`harness.laplace_mh.LaplaceMH` (independence / over-relaxed pCN
  Metropolis-Hastings with the Laplace approximation of the *joint* posterior of the
  coefficients, the group effects and the log scales as its proposal) through
  ``bmb.Model.fit(step=...)`` on Bambi's default, non-centred model (the fit call of the
  other PyMC samplers, ``harness.mixed_cases._sample``): the joint mode of a
  centred model lies at a zero group sd (the density is unbounded there), so the non-centred
  form is the one a Laplace approximation can use. The mode and Hessian are the generic
  ones (damped Newton, finite-difference Hessian of PyTensor's gradient): setup.
* ``Laplace-PSIS``: ``chains x draws`` independent draws of the same Laplace approximation,
  weighted by exact posterior / proposal and Pareto-smoothed (:func:`harness.baselines.
  run_laplace_psis`); its ESS is the Kish ESS of the smoothed weights (bulk and tail alike),
  with the Pareto k-hat beside it (> 0.7: the estimate is unreliable, Vehtari et al. 2024).
* ``PG``: Pólya-Gamma Gibbs for logistic GLMMs (Bernoulli or binomial, logit link, Bambi's
  ``Normal(0, HalfNormal(s))`` group effects), the textbook data augmentation of Polson,
  Scott and Windle (2013) with the group sds updated given the effects:

  - ``omega_i | eta ~ PG(n_i, eta_i)`` (``polyagamma.random_polyagamma``);
  - ``(b, u) | omega, sigma ~ N(Q^-1 (W^T kappa + P0 m0), Q^-1)``, ``Q = W^T Omega W +
    P0``, ``W = [X, Z]`` sparse (index and value columns, never dense ``n x levels``),
    ``kappa = y - n_i / 2``, ``P0`` the prior precisions (``1 / sigma_t^2`` for the
    effects of term ``t``);
  - ``sigma_t^2 | u_t ~ GIG(p = (1 - L_t) / 2, a = 1 / s_t^2, b = sum(u_t^2))``: the exact
    conditional of a ``HalfNormal(s_t)`` sd given the term's ``L_t`` effects
    (``scipy.stats.geninvgauss``).

  The design is Bambi's own (its centred common predictors included), so the chain samples
  the model ``bmb.Model.fit`` samples; the reported ``Intercept`` is un-centred as Bambi's
  ``fit`` does. The ``centred`` Gibbs step of the scales is exactly the slow case issue 19
  describes: the measurement says how slow, on the same data.

References
----------
Polson, N. G., Scott, J. G. and Windle, J. (2013). Bayesian inference for logistic models
using Pólya-Gamma latent variables. JASA 108(504), 1339-1349.

Vehtari, A., Simpson, D., Gelman, A., Yao, Y. and Gabry, J. (2024). Pareto smoothed
importance sampling. JMLR 25(72).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

#: the samplers of this module, as ``benchmarks/mixed.py`` names them
BASELINES = ("Laplace-MH", "Laplace-PSIS", "PG")


@dataclass(frozen=True)
class GroupBlock:
    """One group-specific term ``values * u[index]``, ``u ~ N(0, sigma^2)``, ``sigma ~
    HalfNormal(prior_sd)``; ``levels`` are the grouping factor's level names."""

    name: str
    index: np.ndarray
    values: np.ndarray
    levels: list
    prior_sd: float


@dataclass(frozen=True)
class LogitGLMM:
    """A logistic GLMM as Bambi's PyMC model writes it.

    ``X`` (n, p): intercept column then the common predictors, centred as Bambi centres them
    (``x_mean`` their means, for un-centring the intercept); ``common`` the (name, column
    slice) of every common term; ``shapes`` every variable's shape in the PyMC model; ``beta_mu``/``beta_sd`` the Normal prior of every column;
    ``y`` successes and ``trials`` per row.
    """

    X: np.ndarray
    x_mean: np.ndarray | None
    common: tuple
    beta_mu: np.ndarray
    beta_sd: np.ndarray
    groups: tuple
    y: np.ndarray
    trials: np.ndarray
    shapes: dict

    @property
    def dim(self) -> int:
        return self.X.shape[1] + sum(len(g.levels) for g in self.groups)

    def design(self):
        """``W = [X, Z_1, ..., Z_T]`` as a CSR matrix (Z_t from index and value columns)."""
        import scipy.sparse as sp

        n = self.y.shape[0]
        blocks = [sp.csr_matrix(self.X)]
        for g in self.groups:
            blocks.append(
                sp.csr_matrix((g.values, (np.arange(n), g.index)), shape=(n, len(g.levels)))
            )
        return sp.hstack(blocks, format="csr")

    def log_posterior(self, coef, sigma) -> float:
        """Unnormalised log density of (coefficients, group effects, log sds): the density
        PyMC evaluates on the centred model's value variables, up to a constant (the tests
        compare differences)."""
        from scipy.special import log_expit

        eta = self.design() @ coef
        ll = np.sum(self.y * log_expit(eta) + (self.trials - self.y) * log_expit(-eta))
        p = self.X.shape[1]
        b = coef[:p]
        lp = -0.5 * np.sum(((b - self.beta_mu) / self.beta_sd) ** 2)
        k = p
        for g, s in zip(self.groups, sigma):
            u = coef[k : k + len(g.levels)]
            k += len(g.levels)
            lp += -0.5 * np.sum(u**2) / s**2 - len(g.levels) * np.log(s)
            lp += -0.5 * (s / g.prior_sd) ** 2 + np.log(s)  # HalfNormal on log scale
        return float(ll + lp)


def _values(x) -> np.ndarray:
    return np.atleast_1d(np.asarray(x, dtype=float))


def read_logit_glmm(bm) -> LogitGLMM:
    """The :class:`LogitGLMM` of a built Bambi model; ``ValueError`` naming the part that
    Pólya-Gamma Gibbs does not cover (another family or link, a prior that is not Normal,
    a group sd whose prior is not HalfNormal, distributional parameters)."""
    fam = bm.family
    parent = fam.likelihood.parent
    if fam.name not in ("bernoulli", "binomial") or fam.link[parent].name != "logit":
        raise ValueError(
            f"PG: family {fam.name!r} with link {fam.link[parent].name!r}; "
            "Pólya-Gamma Gibbs covers Bernoulli and binomial with the logit link"
        )
    comp = bm.components[parent]
    if len(bm.distributional_components) > 1 or comp.hsgp_terms or comp.offset_terms:
        raise ValueError("PG: only a linear predictor of common and group-specific terms")
    point = bm.backend.model.initial_point()
    cols, mus, sds, common = [], [], [], []
    start = 0
    for name, term in comp.common_terms.items():
        prior = term.prior
        if prior.name != "Normal":
            raise ValueError(f"PG: common term {name!r} has a {prior.name} prior, not Normal")
        raw = np.asarray(term.data, dtype=float)
        data = raw.reshape(raw.shape[0], -1)
        k = data.shape[1]
        cols.append(data)
        mus.append(np.broadcast_to(_values(prior.args["mu"]), (k,)))
        sds.append(np.broadcast_to(_values(prior.args["sigma"]), (k,)))
        common.append((name, slice(start + 1, start + 1 + k)))
        start += k
    icpt = comp.intercept_term
    if icpt is None:
        raise ValueError("PG: the model has no intercept (Bambi's un-centring needs one)")
    if icpt.prior.name != "Normal":
        raise ValueError(f"PG: the intercept has a {icpt.prior.name} prior, not Normal")
    resp = np.asarray(bm.response_component.term.data, dtype=float)
    n = resp.shape[0]
    Xc = np.column_stack(cols) if cols else np.empty((n, 0))
    x_mean = None
    if bm.center_predictors and cols:
        x_mean = Xc.mean(0)
        Xc = Xc - x_mean
    X = np.column_stack([np.ones(n), Xc])
    beta_mu = np.concatenate([_values(icpt.prior.args["mu"]), *mus])
    beta_sd = np.concatenate([_values(icpt.prior.args["sigma"]), *sds])
    groups = []
    for name, term in comp.group_specific_terms.items():
        prior, sd = term.prior, term.prior.args.get("sigma")
        ok = (
            prior.name == "Normal"
            and np.all(_values(prior.args.get("mu", 0.0)) == 0.0)
            and getattr(sd, "name", None) == "HalfNormal"
        )
        if not ok:
            raise ValueError(
                f"PG: group term {name!r} has prior {prior}; the Gibbs step of its sd "
                "covers Normal(0, HalfNormal(s))"
            )
        pred = np.asarray(term.predictor, dtype=float).reshape(n, -1)
        if pred.shape[1] != 1:
            raise ValueError(f"PG: group term {name!r} has {pred.shape[1]} value columns")
        groups.append(
            GroupBlock(
                name=name,
                index=np.asarray(term.group_index, dtype=np.int64),
                values=pred[:, 0],
                levels=list(term.groups),
                prior_sd=float(_values(sd.args["sigma"])[0]),
            )
        )
    if fam.name == "binomial":
        y, trials = resp[:, 0], resp[:, 1]
    else:
        y, trials = resp.reshape(-1), np.ones(n)
    shapes = {k.removesuffix("_log__"): np.shape(v) for k, v in point.items()}
    return LogitGLMM(
        X, x_mean, tuple(common), beta_mu, beta_sd, tuple(groups), y.astype(float), trials, shapes
    )


def _gig_sd(rng, L: int, prior_sd: float, ss: float) -> float:
    """``sigma`` with ``sigma^2 ~ GIG((1 - L) / 2, 1 / prior_sd^2, ss)``."""
    from scipy.stats import geninvgauss

    a, b = 1.0 / prior_sd**2, max(ss, 1e-300)
    tau = np.sqrt(b / a) * geninvgauss.rvs((1.0 - L) / 2.0, np.sqrt(a * b), random_state=rng)
    return float(np.sqrt(tau))


def pg_chain(problem: LogitGLMM, tune: int, draws: int, seed, omega_scale: float = 1.0):
    """One chain of Pólya-Gamma Gibbs; ``(coef (draws, dim), sigma (draws, T))``.

    ``omega_scale`` multiplies the tilt of the ``omega`` draws: 1 is the exact sampler; any
    other value draws ``omega`` from the wrong conditional (the tests' negative control).
    """
    from polyagamma import random_polyagamma
    from scipy.linalg import cho_solve, cholesky, solve_triangular

    rng = np.random.default_rng(seed)
    W = problem.design()
    WT = W.T.tocsr()
    p = problem.X.shape[1]
    sizes = [len(g.levels) for g in problem.groups]
    d = problem.dim
    kappa = problem.y - problem.trials / 2.0
    rhs0 = WT @ kappa
    rhs0[:p] += problem.beta_mu / problem.beta_sd**2
    prec_beta = 1.0 / problem.beta_sd**2
    coef = np.concatenate([problem.beta_mu, np.zeros(d - p)]) + rng.uniform(-0.1, 0.1, d)
    sigma = np.array([g.prior_sd / 2.0 for g in problem.groups])
    out_c, out_s = np.empty((draws, d)), np.empty((draws, len(sizes)))
    for it in range(tune + draws):
        eta = W @ coef
        omega = random_polyagamma(problem.trials, omega_scale * eta, random_state=rng)
        Q = (WT @ W.multiply(omega[:, None]).tocsr()).toarray()
        prior = np.concatenate([prec_beta, *(np.full(L, s**-2) for L, s in zip(sizes, sigma))])
        Q[np.diag_indices(d)] += prior
        Lc = cholesky(Q, lower=True, check_finite=False)
        coef = cho_solve((Lc, True), rhs0, check_finite=False) + solve_triangular(
            Lc, rng.standard_normal(d), lower=True, trans="T", check_finite=False
        )
        k = p
        for t, (L, g) in enumerate(zip(sizes, problem.groups)):
            u = coef[k : k + L]
            sigma[t] = _gig_sd(rng, L, g.prior_sd, float(u @ u))
            k += L
        if it >= tune:
            out_c[it - tune], out_s[it - tune] = coef, sigma
    return out_c, out_s


def pg_posterior(problem: LogitGLMM, coef, sigma, model):
    """The chains ``coef`` (chain, draw, dim), ``sigma`` (chain, draw, T) as an ArviZ
    posterior with the variable names, dims and coords of Bambi's PyMC ``model`` (the
    intercept un-centred as ``fit`` does)."""
    import arviz as az

    p = problem.X.shape[1]
    data = {}
    b0 = coef[..., 0].copy()
    if problem.x_mean is not None:
        b0 -= coef[..., 1:p] @ problem.x_mean
    data["Intercept"] = b0
    for name, sl in problem.common:
        data[name] = coef[..., sl]
    k = p
    for t, g in enumerate(problem.groups):
        L = len(g.levels)
        data[g.name] = coef[..., k : k + L]
        data[f"{g.name}_sigma"] = sigma[..., t]
        k += L
    data = {v: a.reshape(a.shape[:2] + problem.shapes[v]) for v, a in data.items()}
    dims = {v: list(model.named_vars_to_dims[v]) for v in data if v in model.named_vars_to_dims}
    coords = {d: list(model.coords[d]) for ds in dims.values() for d in ds}
    return az.from_dict(posterior=data, coords=coords, dims=dims).posterior


def run_pg(problem: LogitGLMM, model, chains: int, tune: int, draws: int, seed: int):
    """PG Gibbs on ``problem`` (:func:`read_logit_glmm` of a Bambi model whose PyMC model is
    ``model``): ``(posterior, sampling time s)``; chains one after the other, seeded from one
    ``SeedSequence``."""
    t0 = time.perf_counter()
    runs = [pg_chain(problem, tune, draws, s) for s in np.random.SeedSequence(seed).spawn(chains)]
    elapsed = time.perf_counter() - t0
    coef = np.stack([r[0] for r in runs])
    sigma = np.stack([r[1] for r in runs])
    return pg_posterior(problem, coef, sigma, model), elapsed


def run_laplace_psis_glmm(bm, n_draws: int, seed: int) -> dict:
    """Laplace + PSIS on the built Bambi model ``bm``: the Kish ESS, k-hat, the time of
    drawing and weighting, and the weighted mean and sd of every log-transformed scale
    (``*_sigma``, ``sigma``, ``alpha``, ``nu``)."""
    from pymc.blocking import DictToArrayBijection

    from .baselines import run_laplace_psis

    bm.build()
    model = bm.backend.model
    out = run_laplace_psis(model, n_draws, seed)
    theta = out["beta"][0]
    w = np.exp(out["log_w"])
    point = model.initial_point()
    info = DictToArrayBijection.map({v.name: point[v.name] for v in model.value_vars})
    scales, k = {}, 0
    for name, shape, size, _ in info.point_map_info:
        block = theta[:, k : k + size]
        k += size
        if name.endswith("_log__") and size == 1:
            x = np.exp(block[:, 0])
            mean = float(w @ x)
            var = name[: -len("_log__")]
            # the label posterior_metrics gives it: ``name[level]`` for a length-1 vector
            dims = model.named_vars_to_dims.get(var, ())
            label = f"{var}[{model.coords[dims[0]][0]}]" if len(shape) == 1 and dims else var
            scales[label] = (mean, float(np.sqrt(w @ (x - mean) ** 2)))
    out["scales"] = scales
    del out["beta"]
    return out
