"""Likelihood families as one-dimensional potentials.

Each family describes the negative log-likelihood of one observation as a
function of its linear predictor ``z`` (the *potential* ``U(z; y)`` of
of the paper, section 1), with its first two derivatives, the support check
for the observed data, and whether it is convex (log-concave likelihood),
which the exact z-sampler relies on.

All functions are vectorised over observations and pure numpy.

A family declares what the rest of the package needs to know about it as class
attributes and methods, and the code around it reads those instead of asking which
family it is (``name`` and ``link`` are for messages and the repr only):

* ``log_concave`` (the exact z-sampler applies), ``piecewise_linear`` (the
  closed forms of :mod:`pymc_sgs.nonsmooth` apply);
* :meth:`Family.curvature_bound` (a global bound on ``U''``: the gradient steps of
  the data-shard z-sampler, :mod:`pymc_sgs.shards`);
* ``canonical_link`` and :meth:`Family.centred_y` (centring at the MAP,
  :mod:`pymc_sgs.centering`);
* ``compiled_code`` and :meth:`Family.compiled_parameter` (the family's branch of the
  compiled pass, :mod:`pymc_sgs.fused`).

Adding a family is one class here (or in its own module) plus its branch of the
compiled pass, if it has one, and its recogniser in :mod:`pymc_sgs.recognise` (which
PyMC distribution and link it reads).

References
----------
.. [1] M. Vono, D. Paulin, A. Doucet (2022). Efficient MCMC sampling with
   dimension-free convergence rate using ADMM-type splitting. JMLR 23.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit, gammaln, log_ndtr

__all__ = [
    "Family",
    "BinomialLogit",
    "BernoulliLogit",
    "PoissonLog",
    "NormalIdentity",
    "NegativeBinomialLog",
    "BernoulliProbit",
    "BinomialProbit",
    "GammaLog",
    "ExponentialLog",
    "StudentTIdentity",
    "FAMILIES",
]


#: codes of the compiled passes (``Family.compiled_code``): the branches of the numba loops
#: of :mod:`pymc_sgs.fused`. A family with one of these codes must have the potential that
#: branch computes.
LOGIT, LOG, IDENTITY, NEGBIN = 0, 1, 2, 3


def _softplus(z):
    # log(1 + e^z) without overflow for large z
    return np.logaddexp(0.0, z)


def _logistic_derivatives(w, t, y):
    """Derivatives 1 to 6 in ``w`` of ``t softplus(w) - y w``.

    With ``p = expit(w)``, ``v = p (1 - p)`` and ``u = 1 - 2 p``: ``t p - y``, ``t v``,
    ``t v u``, ``t v (1 - 6 v)``, ``t v u (1 - 12 v)``, ``t v (1 - 30 v + 120 v^2)``.
    """
    p = expit(w)
    q = expit(-w)
    v = p * q
    u = q - p
    return (
        t * p - y,
        t * v,
        t * v * u,
        t * v * (1.0 - 6.0 * v),
        t * v * u * (1.0 - 12.0 * v),
        (t * v * (1.0 - 30.0 * v + 120.0 * v * v)),
    )


class Family:
    """A likelihood family seen as a potential of the linear predictor.

    Subclasses implement ``potential``, ``grad`` and ``hess`` for arrays
    ``z``, ``y`` and (where the family has them) ``trials``, all of the same
    shape, and ``validate`` for the observed data.
    """

    #: short name used in messages and in the step's repr
    name: str = "family"
    #: link function name (what maps the mean to the linear predictor)
    link: str = "identity"
    #: True when ``potential`` is convex in ``z`` (log-concave likelihood)
    log_concave: bool = True
    #: True for families with a trials parameter (Binomial)
    has_trials: bool = False
    #: names of the likelihood's scalar nuisance parameters (e.g. NegativeBinomial alpha)
    nuisance: tuple = ()
    #: True when the potential is piecewise linear with one kink: ``z | theta`` is then a
    #: two-piece truncated Gaussian with closed forms (:mod:`pymc_sgs.nonsmooth`), which the
    #: kernel uses instead of the smooth-family code (mode search, Laplace proposals)
    piecewise_linear: bool = False
    #: True when ``U(z; y) = (-y z + psi(z)) / s`` (canonical link, ``s`` known): adding a
    #: linear term to the potential then only changes ``y`` (:meth:`centred_y`)
    canonical_link: bool = False
    #: code of the family's branch of the compiled pass (:data:`LOGIT`, :data:`LOG`,
    #: :data:`IDENTITY`, :data:`NEGBIN`), or None: no compiled form, the numpy path runs
    compiled_code: int | None = None

    def __init__(self, **params):
        unknown = set(params) - set(self.nuisance)
        if unknown:
            raise ValueError(
                f"{self.name} has no parameter(s) {sorted(unknown)}; its parameters are "
                f"{list(self.nuisance)}."
            )
        self.params = {}
        for key in self.nuisance:
            self.params[key] = self._check_param(key, params.get(key, self.defaults[key]))

    #: default values of the nuisance parameters
    defaults: dict = {}

    def _check_param(self, key, value) -> float:
        try:
            v = float(np.asarray(value, dtype=float).reshape(()))
        except (TypeError, ValueError):
            raise ValueError(
                f"{self.name} parameter {key} must be a positive scalar; received {value!r}."
            ) from None
        if not (np.isfinite(v) and v > 0):
            raise ValueError(
                f"{self.name} parameter {key} must be positive and finite; received {v!r}."
            )
        return v

    def eta_scale(self, trials=None) -> float:
        """Natural scale of the linear predictor, for bounds on rho.

        1 for the log, logit and probit links, whose linear predictor is dimensionless; an
        identity link's predictor is in the units of ``y``, and its family returns its scale
        (the largest over the rows, from ``trials`` where the rows carry it).
        """
        return 1.0

    def grows(self, y, trials=None) -> tuple:
        """``(up, down)``: boolean arrays, whether ``U(z; y_i) -> inf`` as ``z -> +inf`` / ``-inf``.

        The recession directions of the likelihood: under flat priors the posterior is proper
        only if every direction of the coefficients raises some row's potential without
        bound (:mod:`pymc_sgs.propriety`). The default, both, suits potentials that grow on
        both sides for every ``y`` (Gaussian, Gamma, asymmetric Laplace, Student-t).
        """
        both = np.ones(np.shape(y), dtype=bool)
        return both, both

    def bind(self, **params) -> "Family":
        """A copy of the family with some nuisance parameters changed (validated)."""
        new = type(self)(**{**self.params, **params})
        return new

    def validate(self, y: np.ndarray, trials: np.ndarray | None, where: str) -> None:
        """Raise ``ValueError`` when ``y`` is outside the family's support."""
        _check_finite(y, f"observed data of {where!r}")

    def potential(self, z, y, trials=None):
        """Negative log-likelihood ``U(z; y)`` up to a constant independent of ``z``."""
        raise NotImplementedError

    def grad(self, z, y, trials=None):
        """First derivative of the potential in ``z``."""
        raise NotImplementedError

    def hess(self, z, y, trials=None):
        """Second derivative of the potential in ``z`` (non-negative if convex)."""
        raise NotImplementedError

    def grad_range(self, y, trials=None):
        """``(inf_z U'(z), sup_z U'(z))`` when both are finite, else None.

        The root of ``U'(z) + (z - c) / rho^2`` then lies in
        ``[c - rho^2 sup U', c - rho^2 inf U']``, a bracket for the mode search that costs no
        likelihood evaluation (:func:`pymc_sgs.conditionals.find_z_mode`).
        """
        return None

    def curvature_bound(self, y, trials=None, scale: float = 1.0):
        """``scale * sup_{i, z} U''(z; y_i)`` over the given rows, or None when unbounded.

        A global bound on the curvature of the potential (its smoothness): the data-shard
        z-sampler takes gradient steps ``1 / M`` with ``M`` built from it
        (:func:`pymc_sgs.shards.shard_smoothness`, ``scale = ||X_s||_2^2``); an understated
        bound makes those steps diverge. None (the default) when ``U''`` is unbounded (log
        link) or the family declares no bound; the caller then takes Newton steps.
        """
        return None

    def centred_y(self, eta, y, trials=None):
        """The observations ``y'`` with ``U(z; y') = U(z; y) - U'(eta; y) z + const``.

        Only for ``canonical_link`` families, whose potential is ``(-y z + psi(z)) / s``:
        subtracting the linear term ``U'(eta) z`` moves ``y`` to ``y + s U'(eta)``, the fitted
        mean ``psi'(eta)`` (:func:`pymc_sgs.centering.center_problem`).
        """
        if not self.canonical_link:
            raise NotImplementedError(
                f"{self!r} has no canonical link: its potential is not centred by moving y."
            )
        return np.asarray(y, dtype=float) + self.grad(eta, y, trials)

    def compiled_parameter(self, trials):
        """The per-row parameter ``t`` the compiled pass reads (:func:`pymc_sgs.fused.row_parameter`).

        The trials where the family has them (Binomial; sigma for the Normal family), else 1;
        a family whose compiled branch reads a nuisance parameter returns that instead.
        """
        return 1.0 if trials is None else trials

    def grad_bound(self, y, trials=None):
        """``sup_z |U'(z)|`` (finite for the non-convex families, which need it for their mode search)."""
        raise NotImplementedError(f"{self!r} has no bound on its gradient.")

    def log_likelihood(self, z, y, trials=None):
        """Full log-likelihood ``log p(y | z)``, normalising constants included."""
        raise NotImplementedError

    def nuisance_log_likelihood(self, z, y, trials=None):
        """``f(family) -> sum_i log p(y_i | z_i)`` at fixed ``z``, for families of this type
        that differ in their nuisance parameters only (NaN becomes ``-inf``).

        What the slice sampler of a nuisance parameter evaluates several times per draw.
        This default sums :meth:`log_likelihood`; families override it to compute once what
        does not depend on the nuisance parameters (the values agree to rounding:
        ``tests/test_families_more.py``).
        """

        def f(fam):
            with np.errstate(over="ignore", invalid="ignore"):
                out = float(np.sum(fam.log_likelihood(z, y, trials)))
            return out if not np.isnan(out) else -np.inf

        return f

    def third_fourth(self, z, y, trials=None):
        """Third and fourth derivatives of the potential, or None when not implemented.

        Only used to pick fewer quadrature nodes for the importance weights
        where the integrand is nearly Gaussian (:mod:`pymc_sgs.weights`); a
        family without them always gets the full node count.
        """
        return None

    def taylor_derivatives(self, z, y, trials=None):
        """The derivatives ``U^(1), ..., U^(6)`` at ``z``, or None when not implemented.

        Rows whose ``z_i | theta`` is nearly Gaussian use the Taylor expansion of
        ``U`` at the linear predictor for the z-move's proposal and for the
        importance weight (:mod:`pymc_sgs.series`); a family without these
        derivatives always takes the mode search and quadrature.
        """
        return None

    def higher_bound(self, lo, hi, y, trials=None):
        """Bounds on ``|U^(3)|`` and ``|U^(4)|`` over ``[lo, hi]`` (elementwise), or None."""
        return None

    def bregman(self, z, z0, y, trials=None):
        """Bregman divergence ``U(z) - U(z0) - U'(z0) (z - z0)`` (>= 0 when convex).

        Subclasses override this with a form that stays accurate when ``z`` and
        ``z0`` are close, since it is the log acceptance ratio of the exact
        z-sampler.
        """
        return (
            self.potential(z, y, trials)
            - self.potential(z0, y, trials)
            - self.grad(z0, y, trials) * (z - z0)
        )

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v:.4g}" for k, v in getattr(self, "params", {}).items())
        return f"{self.name}({self.link}{extra})"


def _check_finite(values, what):
    values = np.asarray(values)
    if values.size and not np.all(np.isfinite(values)):
        bad = np.flatnonzero(~np.isfinite(values.ravel()))
        raise ValueError(
            f"{what} must be finite; found {bad.size} NaN/inf value(s), first at flat "
            f"index {bad[0]} (value {float(values.ravel()[bad[0]]):g})."
        )


def _check_integers(values, what):
    values = np.asarray(values, dtype=float)
    frac = values != np.round(values)
    if np.any(frac):
        i = np.flatnonzero(frac.ravel())[0]
        raise ValueError(
            f"{what} must be whole numbers; received {float(values.ravel()[i]):g} at flat index {i}."
        )


def _binomial_grows(y, trials):
    """:meth:`Family.grows` of a binomial potential: failures bound ``z`` above, successes below."""
    y = np.asarray(y, dtype=float)
    trials = np.broadcast_to(np.asarray(trials, dtype=float), y.shape)
    return y < trials, y > 0


class BinomialLogit(Family):
    """Binomial likelihood with logit link: ``y ~ Binomial(trials, expit(z))``.

    ``U(z) = -y z + trials * log(1 + e^z)``.
    """

    name = "binomial"
    link = "logit"
    has_trials = True
    canonical_link = True
    compiled_code = LOGIT

    def grows(self, y, trials=None):
        return _binomial_grows(y, 1.0 if trials is None else trials)

    def curvature_bound(self, y, trials=None, scale: float = 1.0):
        # U'' = trials expit(z) expit(-z) <= trials / 4
        tmax = 1.0 if trials is None else float(np.max(trials))
        return tmax * scale / 4.0

    def validate(self, y, trials, where):
        y = np.asarray(y, dtype=float)
        _check_finite(y, f"observed data of {where!r}")
        if trials is None:
            raise ValueError(f"trials (n) of {where!r} are required for a Binomial likelihood.")
        trials = np.broadcast_to(np.asarray(trials, dtype=float), y.shape)
        _check_finite(trials, f"trials (n) of {where!r}")
        _check_integers(y, f"observed data of {where!r} (Binomial counts)")
        _check_integers(trials, f"trials (n) of {where!r}")
        if np.any(trials < 0):
            raise ValueError(
                f"trials (n) of {where!r} must be >= 0; received min {float(trials.min()):g}."
            )
        bad = ((y < 0) | (y > trials)).ravel()
        if np.any(bad):
            i = np.flatnonzero(bad)[0]
            raise ValueError(
                f"observed data of {where!r} must lie in [0, n] for a Binomial likelihood; "
                f"received y={float(y.ravel()[i]):g} with n={float(trials.ravel()[i]):g} at flat index {i}."
            )

    def potential(self, z, y, trials=None):
        return -y * z + trials * _softplus(z)

    def grad(self, z, y, trials=None):
        return -y + trials * expit(z)

    def grad_range(self, y, trials=None):
        # U' = trials * expit(z) - y
        return -y, trials - y

    def hess(self, z, y, trials=None):
        # expit(z) * expit(-z) rather than p * (1 - p): no cancellation to 0 for z >> 0
        return trials * expit(z) * expit(-z)

    def third_fourth(self, z, y, trials=None):
        # their maxima over z, t / (6 sqrt 3) and t / 8, not the values at z: the logistic
        # potential's higher derivatives change sign near z = 0, so a pointwise value can
        # vanish where the integrand is not Gaussian
        shape = np.shape(z)
        t = np.broadcast_to(np.asarray(trials, dtype=float), shape)
        return t / (6.0 * np.sqrt(3.0)), t / 8.0

    def taylor_derivatives(self, z, y, trials=None):
        return _logistic_derivatives(z, trials, y)

    def higher_bound(self, lo, hi, y, trials=None):
        return self.third_fourth(lo, y, trials)

    def log_likelihood(self, z, y, trials=None):
        logcomb = gammaln(trials + 1) - gammaln(y + 1) - gammaln(trials - y + 1)
        return logcomb + y * z - trials * _softplus(z)

    def bregman(self, z, z0, y, trials=None):
        # the y-terms of U cancel; the clip removes round-off below zero
        d = z - z0
        return trials * np.maximum(_softplus(z) - _softplus(z0) - expit(z0) * d, 0.0)


class BernoulliLogit(BinomialLogit):
    """Bernoulli likelihood with logit link (Binomial with one trial)."""

    name = "bernoulli"
    has_trials = False

    def grows(self, y, trials=None):
        return _binomial_grows(y, 1.0)

    def validate(self, y, trials, where):
        y = np.asarray(y, dtype=float)
        _check_finite(y, f"observed data of {where!r}")
        bad = ((y != 0) & (y != 1)).ravel()
        if np.any(bad):
            i = np.flatnonzero(bad)[0]
            raise ValueError(
                f"observed data of {where!r} must be 0 or 1 for a Bernoulli likelihood; "
                f"received {float(y.ravel()[i]):g} at flat index {i}."
            )

    def potential(self, z, y, trials=None):
        return super().potential(z, y, 1.0)

    def grad(self, z, y, trials=None):
        return super().grad(z, y, 1.0)

    def grad_range(self, y, trials=None):
        return super().grad_range(y, 1.0)

    def curvature_bound(self, y, trials=None, scale: float = 1.0):
        return super().curvature_bound(y, None, scale)

    def hess(self, z, y, trials=None):
        return super().hess(z, y, 1.0)

    def third_fourth(self, z, y, trials=None):
        return super().third_fourth(z, y, 1.0)

    def taylor_derivatives(self, z, y, trials=None):
        return super().taylor_derivatives(z, y, 1.0)

    def higher_bound(self, lo, hi, y, trials=None):
        return super().higher_bound(lo, hi, y, 1.0)

    def log_likelihood(self, z, y, trials=None):
        # y log expit(z) + (1 - y) log expit(-z), with one transcendental per element
        return y * z - _softplus(z)

    def bregman(self, z, z0, y, trials=None):
        return super().bregman(z, z0, y, 1.0)


class PoissonLog(Family):
    """Poisson likelihood with log link: ``y ~ Poisson(exp(z))``.

    ``U(z) = -y z + e^z``.
    """

    name = "poisson"
    link = "log"
    canonical_link = True
    compiled_code = LOG

    def grows(self, y, trials=None):
        # e^z grows upwards for every count; -y z grows downwards only for y > 0
        y = np.asarray(y, dtype=float)
        return np.ones(y.shape, dtype=bool), y > 0

    def validate(self, y, trials, where):
        _check_counts(y, where, "Poisson")

    def potential(self, z, y, trials=None):
        return -y * z + np.exp(z)

    def grad(self, z, y, trials=None):
        return -y + np.exp(z)

    def hess(self, z, y, trials=None):
        return np.exp(z)

    def third_fourth(self, z, y, trials=None):
        e = np.exp(z)
        return e, e

    def taylor_derivatives(self, z, y, trials=None):
        e = np.exp(z)
        return e - y, e, e, e, e, e

    def higher_bound(self, lo, hi, y, trials=None):
        # every derivative is e^z, increasing, so the bound is e^hi; for a half-width r <= 1 it
        # is taken as e^c (1 + r + r^2) >= e^(c + r) at the midpoint c, which the compiled pass
        # (pymc_sgs.fused) has at hand without another exponential
        c = 0.5 * (lo + hi)
        r = 0.5 * (hi - lo)
        with np.errstate(over="ignore"):
            e = np.where(r <= 1.0, np.exp(c) * (1.0 + r + r * r), np.exp(hi))
        return e, e

    def log_likelihood(self, z, y, trials=None):
        return y * z - np.exp(z) - gammaln(y + 1)

    def bregman(self, z, z0, y, trials=None):
        # e^z0 (e^d - 1 - d), with expm1 for accuracy at small d. For d > 1 it is computed as
        # e^z - e^z0 (1 + d) (no cancellation there), so it stays finite while e^z does even
        # when e^d alone overflows (e.g. z = 700, z0 = -700). Past exp's range (z > 709.78)
        # the divergence is +inf, never NaN: an exact z-sampler rejects such a proposal.
        z = np.asarray(z, dtype=float)
        z0 = np.asarray(z0, dtype=float)
        d = z - z0
        with np.errstate(over="ignore", invalid="ignore"):
            small = np.exp(z0) * np.maximum(np.expm1(d) - d, 0.0)
            large = np.maximum(np.exp(z) - np.exp(z0) * (1.0 + d), 0.0)
            out = np.where(d > 1.0, large, small)
            out = np.where(d == 0.0, 0.0, out)
            return np.where(np.isnan(out) & ~np.isnan(d), np.inf, out)


class NormalIdentity(Family):
    """Normal likelihood with identity link and known scale ``sigma``.

    Normal likelihoods are Gaussian potentials and go into the theta-step
    exactly; this family is only used when they are split on purpose (tests
    against the split model's closed form). ``trials`` carries ``sigma``.
    """

    name = "normal"
    link = "identity"
    canonical_link = True
    compiled_code = IDENTITY

    def eta_scale(self, trials=None) -> float:
        return float(np.max(trials))

    def curvature_bound(self, y, trials=None, scale: float = 1.0):
        # U'' = 1 / sigma^2
        return scale / float(np.min(trials)) ** 2

    def centred_y(self, eta, y, trials=None):
        # (z - y)^2 / (2 sigma^2) - U'(eta) z = (z - eta)^2 / (2 sigma^2) + const
        return eta

    def potential(self, z, y, trials=None):
        return 0.5 * ((z - y) / trials) ** 2

    def grad(self, z, y, trials=None):
        return (z - y) / trials**2

    def hess(self, z, y, trials=None):
        return np.broadcast_to(1.0 / np.asarray(trials) ** 2, np.shape(z))

    def log_likelihood(self, z, y, trials=None):
        return -0.5 * ((z - y) / trials) ** 2 - np.log(trials) - 0.5 * np.log(2 * np.pi)

    def bregman(self, z, z0, y, trials=None):
        return 0.5 * ((z - z0) / trials) ** 2

    def third_fourth(self, z, y, trials=None):
        return np.zeros(np.shape(z)), np.zeros(np.shape(z))

    def taylor_derivatives(self, z, y, trials=None):
        zero = np.zeros(np.shape(z))
        return (
            (z - y) / trials**2,
            np.broadcast_to(1.0 / np.asarray(trials) ** 2, np.shape(z)),
            zero,
            zero,
            zero,
            zero,
        )

    def higher_bound(self, lo, hi, y, trials=None):
        return np.zeros(np.shape(lo)), np.zeros(np.shape(lo))


def _check_counts(y, where, family):
    y = np.asarray(y, dtype=float)
    _check_finite(y, f"observed data of {where!r}")
    _check_integers(y, f"observed data of {where!r} ({family} counts)")
    if np.any(y < 0):
        i = np.flatnonzero((y < 0).ravel())[0]
        raise ValueError(
            f"observed data of {where!r} must be non-negative counts for a {family} "
            f"likelihood; received {float(y.ravel()[i]):g} at flat index {i}."
        )


def _logistic_bregman(w, w0):
    """``softplus(w) - softplus(w0) - expit(w0) (w - w0)``, clipped at zero."""
    return np.maximum(_softplus(w) - _softplus(w0) - expit(w0) * (w - w0), 0.0)


class NegativeBinomialLog(Family):
    """Negative binomial likelihood with log link: mean ``mu = e^z``, dispersion ``alpha``.

    ``p(y | z) = C(y + alpha - 1, y) (alpha / (alpha + mu))^alpha (mu / (alpha + mu))^y``
    (PyMC's ``NegativeBinomial(mu=..., alpha=...)``). With ``w = z - log(alpha)``::

        U(z) = -y z + (y + alpha) log(alpha + e^z) = -y z + (y + alpha) softplus(w) + const,

    a logistic potential with ``y + alpha`` "trials": convex, with
    ``U'' = (y + alpha) expit(w) expit(-w)``.

    References
    ----------
    .. [1] A. C. Cameron, P. K. Trivedi (2013). Regression Analysis of Count Data,
       2nd ed., section 3.3. Cambridge University Press.
    """

    name = "negativebinomial"
    link = "log"
    nuisance = ("alpha",)
    defaults = {"alpha": 1.0}
    compiled_code = NEGBIN

    def compiled_parameter(self, trials):
        # the compiled branch reads alpha as its row parameter
        return self.params["alpha"]

    def grows(self, y, trials=None):
        # alpha * z upwards for every count, -y z downwards only for y > 0 (as Poisson)
        return PoissonLog.grows(self, y, trials)

    def validate(self, y, trials, where):
        _check_counts(y, where, "NegativeBinomial")

    def _w(self, z):
        return z - np.log(self.params["alpha"])

    def potential(self, z, y, trials=None):
        return -y * z + (y + self.params["alpha"]) * _softplus(self._w(z))

    def grad(self, z, y, trials=None):
        return -y + (y + self.params["alpha"]) * expit(self._w(z))

    def grad_range(self, y, trials=None):
        # U' = (y + alpha) expit(w) - y
        return -y, self.params["alpha"]

    def hess(self, z, y, trials=None):
        w = self._w(z)
        return (y + self.params["alpha"]) * expit(w) * expit(-w)

    def log_likelihood(self, z, y, trials=None):
        a = self.params["alpha"]
        # a log(a / (a + mu)) + y log(mu / (a + mu)) = y z - (y + a) log(a + mu) + a log a
        log_a_plus_mu = np.log(a) + _softplus(self._w(z))
        return (
            gammaln(y + a)
            - gammaln(a)
            - gammaln(y + 1)
            + a * np.log(a)
            + y * z
            - (y + a) * log_a_plus_mu
        )

    def nuisance_log_likelihood(self, z, y, trials=None):
        # gammaln(y + a) over the distinct counts, the terms without a summed once; per row
        # and evaluation only log(a + mu)
        z = np.asarray(z, dtype=float)
        y = np.broadcast_to(np.asarray(y, dtype=float), z.shape)
        counts, multiplicity = np.unique(y, return_counts=True)
        n = z.size
        fixed = float(np.sum(y * z) - np.sum(gammaln(y + 1.0)))
        with np.errstate(over="ignore"):
            mu = np.exp(z)
        overflow = not np.all(np.isfinite(mu))

        def f(fam):
            a = fam.params["alpha"]
            log_a_plus_mu = np.logaddexp(np.log(a), z) if overflow else np.log(a + mu)
            with np.errstate(over="ignore", invalid="ignore"):
                out = (
                    float(multiplicity @ gammaln(counts + a))
                    - n * gammaln(a)
                    + n * a * np.log(a)
                    + fixed
                    - float(np.sum((y + a) * log_a_plus_mu))
                )
            return out if not np.isnan(out) else -np.inf

        return f

    def bregman(self, z, z0, y, trials=None):
        return (y + self.params["alpha"]) * _logistic_bregman(self._w(z), self._w(z0))

    def third_fourth(self, z, y, trials=None):
        # the logistic bounds (see BinomialLogit.third_fourth) with y + alpha trials
        t = np.broadcast_to(np.asarray(y, dtype=float) + self.params["alpha"], np.shape(z))
        return t / (6.0 * np.sqrt(3.0)), t / 8.0

    def taylor_derivatives(self, z, y, trials=None):
        # U' = (y + alpha) expit(w) - y; the higher ones are the logistic's with y + alpha trials
        return _logistic_derivatives(
            self._w(z), np.asarray(y, dtype=float) + self.params["alpha"], y
        )

    def higher_bound(self, lo, hi, y, trials=None):
        return self.third_fourth(lo, y, trials)


def _mills(z):
    """``phi(z) / Phi(z)`` (inverse Mills ratio), stable in both tails."""
    return np.exp(-0.5 * z * z - 0.5 * np.log(2.0 * np.pi) - log_ndtr(z))


def _neg_log_ndtr_hess(z):
    """Second derivative of ``-log Phi(z)``: ``r (z + r)`` with ``r`` the Mills ratio, in (0, 1)."""
    r = _mills(z)
    return np.clip(r * (z + r), 0.0, 1.0)


class BinomialProbit(Family):
    """Binomial likelihood with probit link: ``y ~ Binomial(trials, Phi(z))``.

    ``U(z) = -y log Phi(z) - (trials - y) log Phi(-z)``, convex (``log Phi`` is
    concave). ``log Phi`` is :func:`scipy.special.log_ndtr` and the gradient
    uses the inverse Mills ratio ``phi(z) / Phi(z) = exp(log phi(z) - log Phi(z))``,
    accurate far into both tails.

    References
    ----------
    .. [1] J. H. Albert, S. Chib (1993). Bayesian analysis of binary and polychotomous
       response data. JASA 88(422), 669–679.
    """

    name = "binomial"
    link = "probit"
    has_trials = True

    def validate(self, y, trials, where):
        BinomialLogit.validate(self, y, trials, where)

    def _t(self, trials):
        return trials

    def potential(self, z, y, trials=None):
        t = self._t(trials)
        return -y * log_ndtr(z) - (t - y) * log_ndtr(-z)

    def grad(self, z, y, trials=None):
        t = self._t(trials)
        return -y * _mills(z) + (t - y) * _mills(-z)

    def hess(self, z, y, trials=None):
        t = self._t(trials)
        return y * _neg_log_ndtr_hess(z) + (t - y) * _neg_log_ndtr_hess(-z)

    def curvature_bound(self, y, trials=None, scale: float = 1.0):
        # -log Phi has curvature in (0, 1), tending to 1 in its growing tail (not the
        # logistic's 1/4), so U'' <= y + (trials - y) = trials
        t = self._t(trials)
        tmax = 1.0 if t is None else float(np.max(t))
        return tmax * scale

    def grows(self, y, trials=None):
        return _binomial_grows(y, self._t(trials))

    def log_likelihood(self, z, y, trials=None):
        t = self._t(trials)
        logcomb = gammaln(t + 1) - gammaln(y + 1) - gammaln(t - y + 1)
        return logcomb - self.potential(z, y, trials)

    def bregman(self, z, z0, y, trials=None):
        return np.maximum(super().bregman(z, z0, y, trials), 0.0)


class BernoulliProbit(BinomialProbit):
    """Bernoulli likelihood with probit link (Binomial with one trial)."""

    name = "bernoulli"
    has_trials = False

    def validate(self, y, trials, where):
        BernoulliLogit.validate(self, y, trials, where)

    def _t(self, trials):
        return 1.0


class GammaLog(Family):
    """Gamma likelihood with log link: mean ``e^z``, fixed shape ``k``.

    ``y ~ Gamma(alpha=k, beta=k e^{-z})`` has ``U(z) = k (z + y e^{-z})``, convex
    with ``U'' = k y e^{-z}``.

    References
    ----------
    .. [1] P. McCullagh, J. A. Nelder (1989). Generalized Linear Models, 2nd ed.,
       chapter 8. Chapman & Hall.
    """

    name = "gamma"
    link = "log"
    nuisance = ("shape",)
    defaults = {"shape": 1.0}

    def validate(self, y, trials, where):
        y = np.asarray(y, dtype=float)
        _check_finite(y, f"observed data of {where!r}")
        if np.any(y <= 0):
            i = np.flatnonzero((y <= 0).ravel())[0]
            raise ValueError(
                f"observed data of {where!r} must be positive for a {self.name.capitalize()} "
                f"likelihood; received {float(y.ravel()[i]):g} at flat index {i}."
            )

    def _k(self):
        return self.params["shape"]

    def potential(self, z, y, trials=None):
        with np.errstate(over="ignore"):
            return self._k() * (z + y * np.exp(-z))

    def grad(self, z, y, trials=None):
        with np.errstate(over="ignore"):
            return self._k() * (1.0 - y * np.exp(-z))

    def hess(self, z, y, trials=None):
        with np.errstate(over="ignore"):
            return self._k() * y * np.exp(-z)

    def log_likelihood(self, z, y, trials=None):
        k = self._k()
        with np.errstate(over="ignore"):
            return k * np.log(k) - gammaln(k) + (k - 1.0) * np.log(y) - k * (z + y * np.exp(-z))

    def nuisance_log_likelihood(self, z, y, trials=None):
        # linear in two sums over the rows, computed once: sum log y and sum (z + y e^-z)
        z = np.asarray(z, dtype=float)
        y = np.broadcast_to(np.asarray(y, dtype=float), z.shape)
        n = z.size
        sum_log_y = float(np.sum(np.log(y)))
        with np.errstate(over="ignore"):
            sum_u = float(np.sum(z + y * np.exp(-z)))

        def f(fam):
            k = fam._k()
            with np.errstate(over="ignore", invalid="ignore"):
                out = n * (k * np.log(k) - gammaln(k)) + (k - 1.0) * sum_log_y - k * sum_u
            return float(out) if not np.isnan(out) else -np.inf

        return f

    def bregman(self, z, z0, y, trials=None):
        # k y e^{-z0} (e^{-d} - 1 + d), d = z - z0: the Poisson form mirrored (see PoissonLog)
        z = np.asarray(z, dtype=float)
        z0 = np.asarray(z0, dtype=float)
        d = z0 - z
        with np.errstate(over="ignore", invalid="ignore"):
            small = y * np.exp(-z0) * np.maximum(np.expm1(d) - d, 0.0)
            large = np.maximum(y * np.exp(-z) - y * np.exp(-z0) * (1.0 + d), 0.0)
            out = np.where(d > 1.0, large, small)
            out = np.where(d == 0.0, 0.0, out)
            out = np.where(np.isnan(out) & ~np.isnan(d), np.inf, out)
        return self._k() * out


class ExponentialLog(GammaLog):
    """Exponential likelihood with log link: mean ``e^z`` (a Gamma with shape 1)."""

    name = "exponential"
    nuisance = ()
    defaults = {}

    def _k(self):
        return 1.0


class StudentTIdentity(Family):
    """Student-t likelihood with identity link (robust regression): ``y ~ StudentT(nu, z, sigma)``.

    ``U(z) = (nu + 1) / 2 * log(1 + (y - z)^2 / (nu sigma^2))`` is *not* convex
    (``U'' < 0`` for ``|y - z| > sqrt(nu) sigma``), so the exact rejection
    sampler does not apply; the kernel moves ``z`` by Metropolis–Hastings
    (:func:`pymc_sgs.conditionals.mh_z_move`).
    """

    name = "studentt"
    link = "identity"
    log_concave = False
    nuisance = ("nu", "sigma")
    defaults = {"nu": 4.0, "sigma": 1.0}

    def _q(self):
        return self.params["nu"] * self.params["sigma"] ** 2

    def eta_scale(self, trials=None) -> float:
        return self.params["sigma"]

    def potential(self, z, y, trials=None):
        nu = self.params["nu"]
        return 0.5 * (nu + 1.0) * np.log1p((y - z) ** 2 / self._q())

    def grad(self, z, y, trials=None):
        r = z - y
        return (self.params["nu"] + 1.0) * r / (self._q() + r * r)

    def hess(self, z, y, trials=None):
        r2 = (z - y) ** 2
        q = self._q()
        return (self.params["nu"] + 1.0) * (q - r2) / (q + r2) ** 2

    def grad_bound(self, y, trials=None):
        # |U'| = (nu + 1) |r| / (nu sigma^2 + r^2), largest at |r| = sqrt(nu) sigma
        return (self.params["nu"] + 1.0) / (2.0 * self.params["sigma"] * np.sqrt(self.params["nu"]))

    def log_likelihood(self, z, y, trials=None):
        nu, sigma = self.params["nu"], self.params["sigma"]
        const = (
            gammaln(0.5 * (nu + 1.0)) - gammaln(0.5 * nu) - 0.5 * np.log(nu * np.pi) - np.log(sigma)
        )
        return const - self.potential(z, y, trials)


#: one instance of every smooth family at its default parameters, by a short key (for tests,
#: scripts and the docs; the package itself reads a family's declared attributes, and
#: :mod:`pymc_sgs.recognise` maps PyMC distributions to family classes)
FAMILIES = {
    "bernoulli": BernoulliLogit(),
    "binomial": BinomialLogit(),
    "poisson": PoissonLog(),
    "normal": NormalIdentity(),
    "negativebinomial": NegativeBinomialLog(),
    "bernoulli_probit": BernoulliProbit(),
    "binomial_probit": BinomialProbit(),
    "gamma": GammaLog(),
    "exponential": ExponentialLog(),
    "studentt": StudentTIdentity(),
}
