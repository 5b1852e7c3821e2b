"""Non-smooth potentials: asymmetric Laplace likelihoods and Laplace priors.

Quantile regression (an asymmetric Laplace likelihood with identity link) and
the Bayesian lasso (Laplace priors on coefficients) have piecewise-linear
potentials with one kink::

    U(z) = s_lo * (k - z)   for z < k,        U(z) = s_hi * (z - k)   for z >= k,

with ``k`` the kink (the observation, or the prior's location) and positive
slopes ``s_lo``, ``s_hi``. Gradient-based samplers see a discontinuous gradient
at the kink; the split Gibbs
sampler only needs the conditional of ``z`` given the linear predictor
``c = a^T theta + o``::

    p(z | c) ∝ exp(-U(z)) N(z; c, rho^2),

which is a two-piece mixture of truncated Gaussians: below the kink
``N(m_lo, rho^2)`` with ``m_lo = c + s_lo rho^2`` truncated to ``z < k``, above
it ``N(m_hi, rho^2)`` with ``m_hi = c - s_hi rho^2`` truncated to ``z >= k``,
with masses (times the common ``1 / (rho sqrt(2 pi))``)::

    log M_lo = s_lo (c - k) + s_lo^2 rho^2 / 2 + log Phi((k - m_lo) / rho),
    log M_hi = s_hi (k - c) + s_hi^2 rho^2 / 2 + log Phi((m_hi - k) / rho).

Its CDF ``F`` and quantile function are closed forms in ``Phi`` (computed on
the log scale with :func:`scipy.special.log_ndtr` and
:func:`scipy.special.ndtri_exp`, accurate in both tails). So:

* exact draws are ``F^{-1}(Phi(eps))``, ``eps ~ N(0, 1)`` (no rejection);
* the over-relaxed z-move is Adler's update in the Gaussian copula of ``F``,
  ``z' = F^{-1}(Phi(alpha Phi^{-1}(F(z)) + sqrt(1 - alpha^2) eps))``, which is
  reversible for ``p(z | c)`` because ``Phi^{-1} o F`` maps it to ``N(0, 1)``
  (no Metropolis correction, so nothing is rejected);
* the smoothed likelihood ``∫ exp(-U(z)) N(z; c, rho^2) dz = M_lo + M_hi``
  gives the exact importance weight of every row (no quadrature).

A Laplace prior ``beta_j ~ Laplace(mu, b)`` is split like a likelihood row
with design row ``e_j^T``: the potential is ``|z - mu| / b``, the coefficient's
Gaussian prior precision is zero, and ``theta | z`` stays Gaussian.

References
----------
.. [1] M. Vono, D. Paulin, A. Doucet (2022). Efficient MCMC sampling with
   dimension-free convergence rate using ADMM-type splitting. JMLR 23.
.. [2] K. Yu, R. A. Moyeed (2001). Bayesian quantile regression. Statistics &
   Probability Letters 54(4), 437–447.
.. [3] T. Park, G. Casella (2008). The Bayesian lasso. JASA 103(482), 681–686.
.. [4] S. L. Adler (1981). Over-relaxation method for the Monte Carlo evaluation
   of the partition function for multiquadratic actions. Phys. Rev. D 23, 2901.
"""

from __future__ import annotations

import numpy as np
from scipy.special import log_ndtr, ndtri_exp

from .conditionals import ZDraw, ZMove
from .families import Family, _check_finite

__all__ = [
    "AsymmetricLaplaceIdentity",
    "LaplacePrior",
    "PiecewiseLinearFamily",
    "two_piece_parts",
    "two_piece_log_cdf",
    "two_piece_quantile",
    "sample_z_piecewise",
    "move_z_piecewise",
    "log_weight_rows_piecewise",
]

_LOG_HALF = np.log(0.5)


def _log1mexp(x):
    """``log(1 - e^x)`` for ``x <= 0`` (Mächler's two-branch form)."""
    x = np.asarray(x, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x < -np.log(2.0), np.log1p(-np.exp(x)), np.log(-np.expm1(x)))


class PiecewiseLinearFamily(Family):
    """Potential ``U(z) = rate * (kappa (k - z)_+ + (z - k)_+ / kappa)`` of one row.

    ``y`` holds the kink ``k`` and ``trials`` the per-row ``rate`` (> 0);
    ``kappa`` (> 0, one value per term) sets the asymmetry, so the slopes are
    ``s_lo = rate * kappa`` below the kink and ``s_hi = rate / kappa`` above.
    The potential is convex but not differentiable at the kink: the kernel
    samples these rows with :func:`sample_z_piecewise` and
    :func:`move_z_piecewise` and weights them with
    :func:`log_weight_rows_piecewise` instead of the smooth-family code.

    Parameters
    ----------
    kappa : float
        Asymmetry, ``sqrt(q / (1 - q))`` for the ``q``-th quantile.
    """

    name = "piecewise_linear"
    link = "identity"
    log_concave = True
    has_trials = True
    piecewise_linear = True

    def __init__(self, kappa: float = 1.0):
        try:
            kappa = float(kappa)
        except (TypeError, ValueError):
            raise ValueError(f"kappa must be a positive number; received {kappa!r}.") from None
        if not (np.isfinite(kappa) and kappa > 0):
            raise ValueError(f"kappa must be a positive finite number; received {kappa!r}.")
        self.kappa = kappa

    def slopes(self, trials):
        """``(s_lo, s_hi)``: slopes of the potential below and above the kink."""
        rate = np.asarray(trials, dtype=float)
        return rate * self.kappa, rate / self.kappa

    def validate(self, y, trials, where):
        _check_finite(y, f"observed data of {where!r}")
        if trials is None:
            raise ValueError(f"the rate (1 / scale) of {where!r} is required.")
        rate = np.asarray(trials, dtype=float)
        _check_finite(rate, f"the rate (1 / scale) of {where!r}")
        if np.any(rate <= 0):
            raise ValueError(
                f"the scale of {where!r} must be positive; received a rate (1 / scale) of "
                f"{float(rate.min()):g}."
            )

    def potential(self, z, y, trials=None):
        s_lo, s_hi = self.slopes(trials)
        d = np.asarray(z, dtype=float) - y
        return np.where(d < 0, -s_lo * d, s_hi * d)

    def grad(self, z, y, trials=None):
        # a subgradient (the right derivative at the kink)
        s_lo, s_hi = self.slopes(trials)
        return np.where(np.asarray(z, dtype=float) - y < 0, -s_lo, s_hi)

    def hess(self, z, y, trials=None):
        return np.zeros(np.broadcast_shapes(np.shape(z), np.shape(y)))

    def eta_scale(self, trials=None) -> float:
        # the potential's scale: 1 / the smaller slope, over the rows
        s_lo, s_hi = self.slopes(trials)
        return float(1.0 / np.min(np.minimum(s_lo, s_hi)))

    def log_normaliser(self, trials):
        """``log ∫ exp(-U(z)) dz`` (the same for every kink): ``-log(1/s_lo + 1/s_hi)``."""
        s_lo, s_hi = self.slopes(trials)
        return -np.log(1.0 / s_lo + 1.0 / s_hi)

    def log_likelihood(self, z, y, trials=None):
        return self.log_normaliser(trials) - self.potential(z, y, trials)

    def __repr__(self) -> str:
        return f"{self.name}(kappa={self.kappa:.4g})"


class AsymmetricLaplaceIdentity(PiecewiseLinearFamily):
    """``y ~ AsymmetricLaplace(b, kappa, mu=z)`` (PyMC's parametrisation; ``b`` is a rate).

    PyMC's density is ``b / (kappa + 1/kappa) exp(-(y - mu) b s kappa^s)``,
    ``s = sign(y - mu)``, so as a potential of ``z = mu`` the slopes are
    ``b kappa`` below ``y`` and ``b / kappa`` above it, and ``mu`` is the
    ``q``-quantile of ``y`` for ``kappa = sqrt(q / (1 - q))`` (quantile
    regression). ``trials`` carries ``b``.
    """

    name = "asymmetric_laplace"


class LaplacePrior(PiecewiseLinearFamily):
    """A Laplace prior ``beta_j ~ Laplace(mu, b)`` split as a row: ``U(z) = |z - mu| / b``.

    ``y`` carries ``mu`` and ``trials`` carries ``1 / b``.
    """

    name = "laplace_prior"

    def __init__(self):
        super().__init__(1.0)

    def __repr__(self) -> str:
        return self.name


def two_piece_parts(family: PiecewiseLinearFamily, y, trials, centre, rho):
    """Pieces of ``p(z | c) ∝ exp(-U(z)) N(z; c, rho^2)``.

    Returns ``(m_lo, m_hi, b_lo, b_hi, log_p_lo, log_p_hi, log_z)``: the means
    of the two Gaussian pieces, their standardised truncation bounds
    ``b_lo = (k - m_lo) / rho`` and ``b_hi = (m_hi - k) / rho``, the log
    probabilities of the pieces and ``log ∫ exp(-U(z)) N(z; c, rho^2) dz``.
    """
    c = np.asarray(centre, dtype=float)
    rho = np.asarray(rho, dtype=float)
    s_lo, s_hi = family.slopes(trials)
    m_lo = c + s_lo * rho**2
    m_hi = c - s_hi * rho**2
    b_lo = (y - m_lo) / rho
    b_hi = (m_hi - y) / rho
    log_m_lo = s_lo * (c - y) + 0.5 * (s_lo * rho) ** 2 + log_ndtr(b_lo)
    log_m_hi = s_hi * (y - c) + 0.5 * (s_hi * rho) ** 2 + log_ndtr(b_hi)
    log_z = np.logaddexp(log_m_lo, log_m_hi)
    return m_lo, m_hi, b_lo, b_hi, log_m_lo - log_z, log_m_hi - log_z, log_z


def _log_ndtr_diff(x, b):
    """``log(Phi(b) - Phi(x))`` for ``x <= b``, without cancellation in either tail."""
    x = np.asarray(x, dtype=float)
    b = np.broadcast_to(np.asarray(b, dtype=float), x.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        left = log_ndtr(b) + _log1mexp(log_ndtr(x) - log_ndtr(b))  # both below the median
        right = log_ndtr(-x) + _log1mexp(log_ndtr(-b) - log_ndtr(-x))  # both above it
        mid = np.log1p(-(np.exp(log_ndtr(x)) + np.exp(log_ndtr(-b))))
    return np.where(b <= 0, left, np.where(x >= 0, right, mid))


def two_piece_log_cdf(family, y, trials, centre, rho, z):
    """``(log F(z), log (1 - F(z)))`` of ``p(z | c)``, both accurate in the tails."""
    m_lo, m_hi, b_lo, b_hi, lp_lo, lp_hi, _ = two_piece_parts(family, y, trials, centre, rho)
    z = np.asarray(z, dtype=float)
    rho = np.asarray(rho, dtype=float)
    below = z < y
    # within-piece fractions u (from the piece's outer end) and 1 - u (from the kink)
    x = np.where(below, (z - m_lo) / rho, (m_hi - z) / rho)
    bnd = np.where(below, b_lo, b_hi)
    lp_own = np.where(below, lp_lo, lp_hi)
    lp_other = np.where(below, lp_hi, lp_lo)
    x = np.minimum(x, bnd)
    log_u = log_ndtr(x) - log_ndtr(bnd)
    log_1mu = _log_ndtr_diff(x, bnd) - log_ndtr(bnd)
    outer = lp_own + log_u  # mass between the piece's outer end and z
    inner = np.logaddexp(lp_other, lp_own + log_1mu)  # mass on the other side of z
    return np.where(below, outer, inner), np.where(below, inner, outer)


def two_piece_quantile(family, y, trials, centre, rho, log_f, log_s):
    """``F^{-1}`` given ``log F`` and ``log (1 - F)`` (both, for accuracy in the tails)."""
    m_lo, m_hi, b_lo, b_hi, lp_lo, lp_hi, _ = two_piece_parts(family, y, trials, centre, rho)
    rho = np.asarray(rho, dtype=float)
    below = log_f < lp_lo
    lp_own = np.where(below, lp_lo, lp_hi)
    lp_other = np.where(below, lp_hi, lp_lo)
    own = np.where(below, log_f, log_s)  # the tail that ends in this piece
    rest = np.where(below, log_s, log_f)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_u = np.minimum(own - lp_own, 0.0)
        # 1 - u from whichever of F, 1 - F is smaller (less cancellation)
        via_own = _log1mexp(log_u)
        via_rest = rest + _log1mexp(np.minimum(lp_other - rest, 0.0)) - lp_own
        log_1mu = np.where(own <= rest, via_own, via_rest)
    bnd = np.where(below, b_lo, b_hi)
    log_phi_b = log_ndtr(bnd)
    lower_half = log_u + log_phi_b <= _LOG_HALF
    with np.errstate(divide="ignore", invalid="ignore"):
        x_low = ndtri_exp(np.minimum(log_u + log_phi_b, 0.0))
        x_high = -ndtri_exp(np.minimum(np.logaddexp(log_ndtr(-bnd), log_1mu + log_phi_b), 0.0))
    x = np.minimum(np.where(lower_half, x_low, x_high), bnd)
    return np.where(below, m_lo + rho * x, m_hi - rho * x)


def _rows(y, trials, centre, rho):
    centre = np.asarray(centre, dtype=float)
    n = centre.shape[0]
    return (
        np.broadcast_to(np.asarray(y, dtype=float), (n,)),
        np.broadcast_to(np.asarray(trials, dtype=float), (n,)),
        centre,
        np.broadcast_to(np.asarray(rho, dtype=float), (n,)),
    )


def sample_z_piecewise(family, y, trials, centre, rho, rng: np.random.Generator) -> ZDraw:
    """Exact draw of every ``z_i | theta`` by inversion of the two-piece CDF.

    Uses one standard normal per row (``z = F^{-1}(Phi(eps))``); the reported
    mode is the centre (there is no Newton solve) and one proposal per row.
    """
    y, trials, centre, rho = _rows(y, trials, centre, rho)
    eps = rng.standard_normal(centre.shape[0])
    z = two_piece_quantile(family, y, trials, centre, rho, log_ndtr(eps), log_ndtr(-eps))
    return ZDraw(z=z, mode=centre.copy(), n_proposals=centre.shape[0])


def move_z_piecewise(family, y, trials, centre, rho, z, alpha: float, rng) -> ZMove:
    """Over-relaxed move of every ``z_i``, exact for ``z_i | theta`` (always accepted).

    Adler's update in the Gaussian copula: ``g = Phi^{-1}(F(z))``,
    ``g' = alpha g + sqrt(1 - alpha^2) eps``, ``z' = F^{-1}(Phi(g'))``.
    """
    y, trials, centre, rho = _rows(y, trials, centre, rho)
    eps = rng.standard_normal(centre.shape[0])
    log_f, log_s = two_piece_log_cdf(family, y, trials, centre, rho, z)
    g = np.where(log_f <= log_s, ndtri_exp(log_f), -ndtri_exp(log_s))
    g_new = alpha * g + np.sqrt(1.0 - alpha**2) * eps
    z_new = two_piece_quantile(family, y, trials, centre, rho, log_ndtr(g_new), log_ndtr(-g_new))
    return ZMove(z=z_new, mode=centre.copy(), accept_prob=1.0)


def log_weight_rows_piecewise(family, y, trials, centre, rho):
    """Exact per-row ``log p(y_i | c_i) - log E_{z ~ N(c_i, rho_i^2)} p(y_i | z)``; and the centres.

    The normalising constant of the likelihood cancels, leaving
    ``-U(c) - log(M_lo + M_hi)`` (see the module docstring).
    """
    y, trials, centre, rho = _rows(y, trials, centre, rho)
    log_z = two_piece_parts(family, y, trials, centre, rho)[-1]
    return -family.potential(centre, y, trials) - log_z, centre.copy()
