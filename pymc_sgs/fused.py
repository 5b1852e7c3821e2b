"""One fused pass over the data per sweep, compiled with numba.

For every row ``i`` this computes, in one loop that reads the row ``a_i`` of
the design once:

* the linear predictor ``c_i = a_i^T theta + o_i``;
* the mode ``m_i`` and Laplace scale ``s_i`` of ``z_i | theta`` (safeguarded
  Newton, warm-started), or, for nearly Gaussian rows, the Gaussian of one
  Newton step at ``c_i`` (:mod:`pymc_sgs.series`: no mode search, no
  quadrature, and an acceptance test that needs the likelihood only when the
  uniform falls within a bound on the remainder of 1);
* the over-relaxed MH move of ``z_i`` (:func:`pymc_sgs.conditionals.overrelaxed_z_move`);
* the row's log importance weight (adaptive Gauss–Hermite at ``m_i, s_i``,
  :mod:`pymc_sgs.weights`);
* its contribution ``a_i (z_i - o_i) / rho_i^2`` to the linear term of
  ``theta | z``.

Random numbers are drawn *outside* (``eps`` and ``u`` arrays from the step's
:class:`numpy.random.Generator`) in the same order as the numpy reference
path, so both paths produce the same chain up to floating-point rounding; the
test suite checks this. No PyMC inside.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

# the codes of the compiled branches are declared with the families (Family.compiled_code)
from .families import LOG, LOGIT, NEGBIN, Family

__all__ = [
    "csr_potential_sum",
    "family_code",
    "fused_z_pass",
    "row_parameter",
    "shifted_potential_change",
]


def family_code(family: Family):
    """Integer code of a family for the compiled loop (its ``compiled_code``), or None if it has none."""
    return family.compiled_code


def row_parameter(family: Family, trials, n: int) -> np.ndarray:
    """The per-row parameter ``t`` of the compiled loop (:meth:`Family.compiled_parameter`).

    Trials, sigma (Normal), NegativeBinomial alpha or 1, as an ``(n,)`` array.
    """
    value = np.asarray(family.compiled_parameter(trials), dtype=float)
    if value.ndim == 0:
        # a stride-0 view: a common value costs no n-vector (the compiled loops index it)
        return np.broadcast_to(value, (n,))
    return np.ascontiguousarray(np.broadcast_to(value, (n,)))


@njit(cache=True, fastmath={"reassoc", "contract"})
def _row_dot(A, i, theta, init):
    # reassociation lets LLVM vectorise the reduction (the sum order differs from BLAS's anyway)
    c = init
    for j in range(A.shape[1]):
        c += A[i, j] * theta[j]
    return c


@njit(cache=True, fastmath={"reassoc", "contract"})
def _row_axpy(A, i, w, out):
    for j in range(A.shape[1]):
        out[j] += A[i, j] * w


@njit(cache=True)
def _expit(z):
    if z >= 0.0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


@njit(cache=True)
def _softplus(z):
    if z > 0.0:
        return z + math.log1p(math.exp(-z))
    return math.log1p(math.exp(z))


@njit(cache=True)
def _grad_hess(code, z, y, t):
    """``U'(z)``, ``U''(z)`` and, for the logit link, ``e = exp(-|z|)`` (reused by softplus)."""
    if code == NEGBIN:
        # t = alpha: U = -y z + (y + alpha) softplus(w), a logistic potential in
        # w = z - log(alpha) with y + alpha trials
        w = z - math.log(t)
        if w >= 0.0:
            e = math.exp(-w)
            p = 1.0 / (1.0 + e)
            q = e * p
        else:
            e = math.exp(w)
            q = 1.0 / (1.0 + e)
            p = e * q
        return (y + t) * p - y, (y + t) * p * q, e
    if code == LOGIT:
        # one exp gives p = expit(z) and q = 1 - p, both to full relative precision
        if z >= 0.0:
            e = math.exp(-z)
            p = 1.0 / (1.0 + e)
            q = e * p
            return (t - y) - t * q, t * p * q, e
        e = math.exp(z)
        q = 1.0 / (1.0 + e)
        p = e * q
        return t * p - y, t * p * q, e
    if code == LOG:
        e = math.exp(z)
        return e - y, e, e
    return (z - y) / (t * t), 1.0 / (t * t), 0.0


@njit(cache=True)
def _non_gaussianity(code, z, h, e, y, t, s):
    """``|U'''(z)| s^3 + |U''''(z)| s^4`` from ``U''(z) = h`` and ``e`` of :func:`_grad_hess`."""
    s3 = s * s * s
    if code == NEGBIN:
        # the logistic bounds with y + alpha trials
        return (y + t) * s3 * (0.09622504486493763 + 0.125 * s)
    if code == LOGIT:
        # global bounds |U'''| <= t / (6 sqrt 3), |U''''| <= t / 8 (see BinomialLogit.third_fourth)
        return t * s3 * (0.09622504486493763 + 0.125 * s)
    if code == LOG:
        return e * s3 * (1.0 + s)
    return 0.0


@njit(cache=True)
def _loglik(code, z, y, t):
    # log p(y | z) without z-free constants (they cancel in the weights)
    if code == NEGBIN:
        return y * z - (y + t) * _softplus(z - math.log(t))
    if code == LOGIT:
        return y * z - t * _softplus(z)
    if code == LOG:
        return y * z - math.exp(z)
    return -0.5 * ((z - y) / t) ** 2


@njit(cache=True)
def _bregman(code, z, z0, y, t):
    d = z - z0
    if d == 0.0:
        return 0.0
    if code == NEGBIN:
        w0 = z0 - math.log(t)
        return (y + t) * max(_softplus(w0 + d) - _softplus(w0) - _expit(w0) * d, 0.0)
    if code == LOGIT:
        return t * max(_softplus(z) - _softplus(z0) - _expit(z0) * d, 0.0)
    if code == LOG:
        if d > 1.0:
            v = math.exp(z) - math.exp(z0) * (1.0 + d) if z < 709.78 else math.inf
        else:
            v = math.exp(z0) * (math.expm1(d) - d)
        return max(v, 0.0)
    return 0.5 * (d / t) ** 2


@njit(cache=True)
def _mode(code, y, t, c, rho, z0, tol, max_iter):
    """Mode of ``U(z) + (z - c)^2 / (2 rho^2)`` and ``U'``, ``U''``, ``e`` there (see find_z_mode)."""
    inv_r2 = 1.0 / (rho * rho)
    r2 = rho * rho
    if code == LOGIT:
        # U' lies in (-y, t - y), so the root of U'(z) + (z - c) / rho^2 does too, scaled:
        # a bracket without evaluating the likelihood
        lo = c - r2 * (t - y)
        hi = c + r2 * y
    elif code == NEGBIN:
        lo = c - r2 * t
        hi = c + r2 * y
    else:
        # keep the far end of the bracket finite (Poisson far above its mode overflows)
        other = min(max(c - r2 * _grad_hess(code, c, y, t)[0], -1e300), 1e300)
        lo = min(c, other)
        hi = max(c, other)
    z = min(max(z0, lo), hi)
    # the first Newton step only has to stay inside the bracket (see find_z_mode)
    prev_step = math.inf
    g, h, e = _grad_hess(code, z, y, t)
    for _ in range(max_iter):
        gp = g + (z - c) * inv_r2
        if abs(gp) * rho < tol:
            break
        if gp > 0.0:
            hi = z
        else:
            lo = z
        newton = z - gp / (h + inv_r2)
        if newton > lo and newton < hi and abs(newton - z) <= 0.5 * prev_step:
            new = newton
        else:
            new = 0.5 * (lo + hi)
        prev_step = abs(new - z)
        z = new
        g, h, e = _grad_hess(code, z, y, t)
    return z, g, h, e


@njit(cache=True)
def _remainder_diff(code, zi, prop, m, g, h, e, gm, y, t):
    """``r(zi) - r(prop)``: the log MH ratio of the over-relaxed move (see overrelaxed_z_move).

    ``r(v) = D_U(v, m) + g'(m)(v - m) - U''(m)(v - m)^2 / 2``; for the logit link
    ``U(m)`` cancels between the two Bregman terms, so only the softplus of the
    two points is needed (``g, h, e`` come from the mode search).
    """
    dz = zi - m
    dp = prop - m
    quad = gm * (dz - dp) - 0.5 * h * (dz * dz - dp * dp)
    if code == LOGIT:
        # D_U(v, m) = t softplus(v) - t softplus(m) - (g + y)(v - m)
        b_cur = t * _softplus(zi) - (g + y) * dz
        b_prop = t * _softplus(prop) - (g + y) * dp
        return (b_cur - b_prop) + quad
    return _bregman(code, zi, m, y, t) - _bregman(code, prop, m, y, t) + quad


@njit(cache=True)
def _taylor(code, c, y, t):
    """``U'(c), ..., U^(6)(c)`` (see :meth:`pymc_sgs.families.Family.taylor_derivatives`)."""
    if code == LOGIT or code == NEGBIN:
        if code == LOGIT:
            w, tt = c, t
        else:
            w, tt = c - math.log(t), y + t
        # selects, not branches: the sign of w is random from row to row
        e = math.exp(-abs(w))
        big = 1.0 / (1.0 + e)
        small = e * big
        p = big if w >= 0.0 else small
        q = small if w >= 0.0 else big
        v = p * q
        u = q - p
        tv = tt * v
        return (
            tt * p - y,
            tv,
            tv * u,
            tv * (1.0 - 6.0 * v),
            tv * u * (1.0 - 12.0 * v),
            tv * (1.0 - 30.0 * v + 120.0 * v * v),
        )
    if code == LOG:
        e = math.exp(c)
        return e - y, e, e, e, e, e
    return (c - y) / (t * t), 1.0 / (t * t), 0.0, 0.0, 0.0, 0.0


@njit(cache=True)
def _higher_bound(code, c, reach, y, t, e_c):
    """Bounds on ``|U^(3)|`` and ``|U^(4)|`` within ``reach`` of ``c`` (Family.higher_bound).

    ``e_c = U''(c)``, which for the log link is ``e^c``.
    """
    if code == LOGIT:
        return 0.09622504486493763 * t, 0.125 * t
    if code == NEGBIN:
        return 0.09622504486493763 * (y + t), 0.125 * (y + t)
    if code == LOG:
        e = e_c * (1.0 + reach + reach * reach) if reach <= 1.0 else math.exp(c + reach)
        return e, e
    return 0.0, 0.0


@njit(cache=True)
def _series_log_weight(g, h, u3, u4, u5, u6, s2):
    """The closed-form log weight of a nearly Gaussian row, without ``log(1 + h rho^2) / 2``.

    See :func:`pymc_sgs.series.series_log_weight`; the moments of ``N(mu, s2)`` are written
    out (independent short chains rather than the recursion) and the caller accumulates the
    logarithm as a product.
    """
    mu = -g * s2
    a3 = u3 / 6.0
    a4 = u4 / 24.0
    q = mu * mu
    v2 = s2 * s2
    v3 = v2 * s2
    m3 = mu * (q + 3.0 * s2)
    m4 = q * (q + 6.0 * s2) + 3.0 * v2
    m5 = mu * (q * (q + 10.0 * s2) + 15.0 * v2)
    m6 = q * (q * (q + 15.0 * s2) + 45.0 * v2) + 15.0 * v3
    m7 = mu * (q * (q * (q + 21.0 * s2) + 105.0 * v2) + 105.0 * v3)
    m8 = q * (q * (q * (q + 28.0 * s2) + 210.0 * v2) + 420.0 * v3) + 105.0 * v2 * v2
    mean_r = a3 * m3 + a4 * m4 + u5 / 120.0 * m5 + u6 / 720.0 * m6
    var_r = a3 * a3 * (m6 - m3 * m3) + 2.0 * a3 * a4 * (m7 - m3 * m4) + a4 * a4 * (m8 - m4 * m4)
    return -0.5 * g * g * s2 + mean_r - 0.5 * var_r


@njit(cache=True)
def fused_z_pass(
    A,
    offset,
    y,
    trials,
    rho,
    code,
    theta,
    z,
    z_mode,
    alpha,
    eps,
    u,
    nodes,
    log_wx,
    weights,
    z_out,
    mode_out,
    nodes_lo,
    log_wx_lo,
    near_gaussian,
    nodes_q,
    log_wx_q,
    very_near_gaussian,
    series_gaussian,
):
    """Over-relaxed MH move of every z_i at ``theta``, fused with the weights and ``A^T w (z - o)``.

    Parameters
    ----------
    A : (n, d) C-contiguous float64
    offset, y, trials, rho, z, z_mode, eps, u : (n,) float64
        ``trials`` holds 1 for Bernoulli, sigma for the (test-only) Normal family
        and alpha for NegativeBinomial (:func:`row_parameter`). ``trials`` and ``rho``
        may be stride-0 views of one value (no n-vector for a common value).
    code : int
        Family code (:func:`family_code`).
    theta : (d,) float64
    alpha : float
    nodes, log_wx : (K,) float64
        Gauss–Hermite nodes and ``log(weight) + x^2/2``.
    nodes_lo, log_wx_lo : float64 arrays
        The smaller rule for nearly Gaussian rows (``|U'''(m)| s^3 +
        |U''''(m)| s^4 <= near_gaussian``, see :mod:`pymc_sgs.weights`).
    nodes_q, log_wx_q : float64 arrays
        The smallest rule, for rows with that bound ``<= very_near_gaussian``.
    series_gaussian : float
        Rows with the ``kappa`` of :mod:`pymc_sgs.series` at most this take the
        Taylor expansion at the linear predictor for both the move and the weight.
    weights : bool
        Whether to compute the log importance weight.
    z_out, mode_out : (n,) float64
        Outputs: the new z and the modes at theta.

    Returns
    -------
    atz : (d,) float64
        ``sum_i a_i (z_i - o_i) / rho_i^2``.
    accept_sum : float
        Number of accepted z-moves.
    log_weight : float
        ``sum_i [log p(y_i | c_i) - log E_{N(c_i, rho_i^2)} p(y_i | z)]``.
    """
    n, d = A.shape
    atz = np.zeros(d)
    accept_sum = 0.0
    log_weight = 0.0
    sq = math.sqrt(1.0 - alpha * alpha)
    half_log_2pi = 0.5 * math.log(2.0 * math.pi)
    det_prod = 1.0
    for i in range(n):
        c = _row_dot(A, i, theta, offset[i])
        yi, ti, ri = y[i], trials[i], rho[i]
        inv_r2 = 1.0 / (ri * ri)
        # nearly Gaussian rows (pymc_sgs.series): the Gaussian of one Newton step at c
        g, h, u3, u4, u5, u6 = _taylor(code, c, yi, ti)
        s2 = 1.0 / (h + inv_r2)
        s = math.sqrt(s2)
        mu = -g * s2
        reach = abs(mu) + 6.0 * s
        m3b, m4b = _higher_bound(code, c, reach, yi, ti, h)
        w = s + abs(mu)
        if m3b * w * w * w + m4b * w * w * w * w <= series_gaussian:
            m = c + mu
            zi = z[i]
            prop = m + alpha * (zi - m) + sq * s * eps[i]
            dz = abs(zi - c)
            dp = abs(prop - c)
            if code == LOG and (dz > reach or dp > reach):
                bound = math.inf
            else:
                bound = m3b * (dz * dz * dz + dp * dp * dp) / 6.0
            # |log ratio| <= bound: accept without the likelihood unless u is above 1 - bound
            accepted = u[i] < 1.0 - bound
            if not accepted:
                log_ratio = (_bregman(code, zi, c, yi, ti) - 0.5 * h * (zi - c) ** 2) - (
                    _bregman(code, prop, c, yi, ti) - 0.5 * h * (prop - c) ** 2
                )
                accepted = u[i] < (math.exp(log_ratio) if log_ratio < 0.0 else 1.0)
            znew = prop if accepted else zi
            accept_sum += 1.0 if accepted else 0.0
            z_out[i] = znew
            mode_out[i] = m
            if weights:
                log_weight += _series_log_weight(g, h, u3, u4, u5, u6, s2)
                # the rows' log(1 + h rho^2) / 2 as one running product (each factor >= 1)
                det_prod *= 1.0 + h * ri * ri
                if det_prod > 1e250:
                    log_weight += 0.5 * math.log(det_prod)
                    det_prod = 1.0
            _row_axpy(A, i, (znew - offset[i]) * inv_r2, atz)
            continue
        # converged rows stop early; the cap only matters for astronomically wide brackets
        m, g, curv, e = _mode(code, yi, ti, c, ri, z_mode[i], 1e-6, 4000)
        s = 1.0 / math.sqrt(curv + inv_r2)
        gm = g + (m - c) * inv_r2
        zi = z[i]
        prop = m + alpha * (zi - m) + sq * s * eps[i]
        log_ratio = _remainder_diff(code, zi, prop, m, g, curv, e, gm, yi, ti)
        acc = math.exp(log_ratio) if log_ratio < 0.0 else 1.0
        znew = prop if u[i] < acc else zi
        accept_sum += 1.0 if u[i] < acc else 0.0
        z_out[i] = znew
        mode_out[i] = m
        if weights:
            # integrand relative to its value at the mode: every term is <= exp(x_k^2 / 2)
            # for a log-concave likelihood, so one pass needs no max-shift
            f_m = _loglik(code, m, yi, ti) - 0.5 * ((m - c) * (m - c)) * inv_r2
            kappa = _non_gaussianity(code, m, curv, e, yi, ti, s)
            if kappa <= very_near_gaussian:
                xs, lws = nodes_q, log_wx_q
            elif kappa <= near_gaussian:
                xs, lws = nodes_lo, log_wx_lo
            else:
                xs, lws = nodes, log_wx
            total = 0.0
            if code == LOGIT and ti == 1.0 and f_m > -500.0:
                # Bernoulli: p(y | z) = expit(+-z) costs one exp, not exp + log1p + exp; the
                # remaining factor exp(-(z-c)^2/(2 rho^2) - f_m) cannot overflow when f_m > -500
                sgn = 1.0 if yi == 1.0 else -1.0
                for k in range(xs.shape[0]):
                    zk = m + s * xs[k]
                    dk = zk - c
                    total += _expit(sgn * zk) * math.exp(lws[k] - 0.5 * dk * dk * inv_r2 - f_m)
            else:
                for k in range(xs.shape[0]):
                    zk = m + s * xs[k]
                    dk = zk - c
                    total += math.exp(
                        _loglik(code, zk, yi, ti) - 0.5 * dk * dk * inv_r2 - f_m + lws[k]
                    )
            log_weight += _loglik(code, c, yi, ti) - (
                math.log(s) + f_m - math.log(ri) - half_log_2pi + math.log(total)
            )
        _row_axpy(A, i, (znew - offset[i]) * inv_r2, atz)
    return atz, accept_sum, log_weight + 0.5 * math.log(det_prod)


@njit(cache=True)
def shifted_potential_change(code, A, delta, z, y, trials, z_out, shift_out):
    """``sum_i [U(z_i + a_i^T delta) - U(z_i)]`` of a compiled family, in one pass.

    Writes ``z_i + a_i^T delta`` to ``z_out`` and ``a_i^T delta`` to ``shift_out`` (what the
    shift move of :mod:`pymc_sgs.shift` needs on acceptance). For the logit links the
    ``log(1 + e^{-|w|})`` parts of the two softplus terms enter as a running product of their
    ratios (each in [1/2, 2], logged every 256 rows): two exponentials per row and no logarithm.
    """
    n = A.shape[0]
    total = 0.0
    prod = 1.0
    for i in range(n):
        x = _row_dot(A, i, delta, 0.0)
        v0 = z[i]
        v1 = v0 + x
        shift_out[i] = x
        z_out[i] = v1
        yi, ti = y[i], trials[i]
        if code == LOGIT or code == NEGBIN:
            if code == LOGIT:
                w0, w1, tt = v0, v1, ti
            else:
                lt = math.log(ti)
                w0, w1, tt = v0 - lt, v1 - lt, yi + ti
            total += tt * (max(w1, 0.0) - max(w0, 0.0)) - yi * x
            ratio = (1.0 + math.exp(-abs(w1))) / (1.0 + math.exp(-abs(w0)))
            if tt == 1.0:
                prod *= ratio
            else:
                total += tt * math.log(ratio)
            if (i & 255) == 255:
                total += math.log(prod)
                prod = 1.0
        elif code == LOG:
            total += math.exp(v0) * math.expm1(x) - yi * x
        else:
            total += 0.5 * x * (v1 + v0 - 2.0 * yi) / (ti * ti)
    return total + math.log(prod)


@njit(cache=True)
def csr_potential_sum(code, indptr, indices, data, coef, offset, y, t):
    """``sum_i U_i(a_i^T coef + o_i)`` for a CSR design, in one pass without an n-vector.

    The potential of a compiled family without its ``z``-free constants (as
    :func:`_loglik`; they cancel in Metropolis-Hastings ratios). The mixed-model kernel
    evaluates it for every proposal; numpy's path (a sparse product, then the family's
    ``potential`` and a sum) makes three passes and two temporaries. For the logit links
    the ``log(1 + e^{-|w|})`` part of the softplus of single-trial rows enters as a running
    product (each factor in (1, 2], logged every 256 rows), as in
    :func:`shifted_potential_change`: one exponential per row and no logarithm, which
    halves the pass on a Bernoulli GLMM.
    """
    total = 0.0
    prod = 1.0
    for i in range(y.shape[0]):
        z = offset[i]
        for k in range(indptr[i], indptr[i + 1]):
            z += data[k] * coef[indices[k]]
        yi, ti = y[i], t[i]
        if code == LOGIT or code == NEGBIN:
            if code == LOGIT:
                w, tt = z, ti
            else:
                w, tt = z - math.log(ti), yi + ti
            total += tt * max(w, 0.0) - yi * z
            r = 1.0 + math.exp(-abs(w))
            if tt == 1.0:
                prod *= r
            else:
                total += tt * math.log(r)
            if (i & 255) == 255:
                total += math.log(prod)
                prod = 1.0
        else:
            total -= _loglik(code, z, yi, ti)
    return total + math.log(prod)
