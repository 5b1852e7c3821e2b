"""Toy Gaussian of the paper (Sections 3.2 and 4.1.2): exact bias and convergence of SGS.

Target ``pi = N(mu, sigma^2)`` on a scalar theta, written as ``b`` equal quadratic potentials
``U_i(theta) = (theta - mu)^2 / (2 b sigma^2)`` with ``A_i = 1`` and a flat V. Every potential
convolved with ``N(0, rho^2)`` is ``N(mu, b sigma^2 + rho^2)``, so

    pi_rho = N(mu, sigma^2 + rho^2 / b)                               (closed form)

and the theta-chain of SGS is the Gaussian AR(1)

    theta' = mu + a (theta - mu) + N(0, s^2 (1 - a^2)),   a = b sigma^2 / (b sigma^2 + rho^2),
    s^2 = sigma^2 + rho^2 / b,

so ``theta_t | theta_0 ~ N(mu + a^t (theta_0 - mu), s^2 (1 - a^(2t)))``. From these we compute
exactly: the bias TV(pi_rho, pi) and W1(pi_rho, pi) against rho, and the distance of the
chain's law at iteration t to pi_rho (TV and W1) against t. Beside them, the *empirical*
counterparts from pymc_sgs's own kernels on the same split model (the Normal likelihood split on
purpose): ``SplitGibbsKernel`` for strategy 1 (b potentials) and ``ShardKernel`` with one shard
for strategy 2 (b = 1, A = I, the paper's single-splitting case), both alpha = 0:

* bias: the variance of a long chain against ``sigma^2 + rho^2 / b`` (the only parameter in
  which pi_rho differs from pi), and the empirical W1 between the chain's draws and pi;
* convergence: ``N`` independent chains started at ``theta_0``; the ensemble's mean and
  variance at iteration t against the exact AR(1) ones, and the empirical W1 to pi_rho.

The paper (Figures 2 and 3) plots these curves against its bounds and reports that the bias
decays at the correct order in rho (TV and W1 both O(rho^2) here, since pi_rho differs from pi
only by a variance inflation rho^2 / b) and that its TV convergence bound has the observed slope
``log a`` per iteration while its W1 bound's slope is about twice the observed one. Its values
of mu, sigma, b and theta_0 were lost from our copy of the text; we use mu = 1, sigma = 1,
b = 10 (strategy 1), theta_0 = mu + 10 sigma.

Writes ``toy_gaussian.md`` and ``toy_gaussian.png`` to ``--outdir``.

Run::

    python examples/paper/toy_gaussian.py            # 20000-sweep chains, 2000 parallel chains
    python examples/paper/toy_gaussian.py --quick
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from _common import markdown_table, parse_args, write_text  # noqa: E402
from scipy import integrate, stats  # noqa: E402

from pymc_sgs.families import FAMILIES  # noqa: E402
from pymc_sgs.kernel import SplitGibbsKernel  # noqa: E402
from pymc_sgs.problem import ParamSlice, SplitProblem, SplitTerm  # noqa: E402
from pymc_sgs.shards import ShardKernel  # noqa: E402

MU, SIGMA, B1 = 1.0, 1.0, 10
THETA0 = MU + 10 * SIGMA
#: rho grid of the exact bias curves; the kernels are run at RHOS_EMP (at smaller rho the chain
#: needs ~2 b sigma^2 / rho^2 sweeps per independent draw, and the bias, a variance inflation of
#: rho^2 / b, is below what a chain of affordable length can resolve)
RHOS = (0.05, 0.1, 0.2, 0.4, 0.5, 1.0, 2.0, 4.0)
RHOS_EMP = (0.5, 1.0, 2.0, 4.0)


def tv_gauss(m1, s1, m2, s2):
    """Total variation between N(m1, s1^2) and N(m2, s2^2) (numerical integral of |p - q| / 2)."""
    lo = min(m1 - 12 * s1, m2 - 12 * s2)
    hi = max(m1 + 12 * s1, m2 + 12 * s2)
    f = lambda x: abs(stats.norm.pdf(x, m1, s1) - stats.norm.pdf(x, m2, s2))  # noqa: E731
    return 0.5 * integrate.quad(f, lo, hi, points=[m1, m2], limit=400)[0]


def tv_same_mean(s1, s2):
    """Closed form for equal means: 2 (Phi(x*/s1) - Phi(x*/s2)), x* where the densities cross."""
    s1, s2 = min(s1, s2), max(s1, s2)
    x = np.sqrt(2 * s1**2 * s2**2 * np.log(s2 / s1) / (s2**2 - s1**2))
    return 2 * (stats.norm.cdf(x / s1) - stats.norm.cdf(x / s2))


def w1_gauss(m1, s1, m2, s2):
    """W1 between two 1-D Gaussians: int_0^1 |F1^-1(u) - F2^-1(u)| du."""
    f = lambda u: abs(m1 - m2 + (s1 - s2) * stats.norm.ppf(u))  # noqa: E731
    return integrate.quad(f, 0, 1, limit=400)[0]


def w1_sample_vs_gauss(x, m, s, n_grid=20001):
    """Empirical W1 between a sample and N(m, s^2): int |F_n(t) - F(t)| dt on a fine grid."""
    xs = np.sort(x)
    lo = min(xs[0], m - 12 * s)
    hi = max(xs[-1], m + 12 * s)
    t = np.linspace(lo, hi, n_grid)
    Fn = np.searchsorted(xs, t, side="right") / xs.size
    return float(np.trapezoid(np.abs(Fn - stats.norm.cdf(t, m, s)), t))


def split_problem(b):
    """The toy model as a split problem: b Normal 'observations' y_i = mu with sd sqrt(b) sigma."""
    term = SplitTerm(
        "y",
        FAMILIES["normal"],
        np.ones((b, 1)),
        np.zeros(b),
        np.full(b, MU),
        np.full(b, np.sqrt(b) * SIGMA),
    )
    return SplitProblem((ParamSlice("theta", (1,), 0, 1),), np.zeros(1), np.zeros((1, 1)), (term,))


def make_kernel(strategy, rho):
    if strategy == 1:
        return SplitGibbsKernel(split_problem(B1), rho, alpha=0.0), B1
    # strategy 2 with a single shard: A = I, U = the whole potential
    return ShardKernel(split_problem(1), rho, 1), 1


def long_chain(strategy, rho, n_iter, rng):
    k, _ = make_kernel(strategy, rho)
    s = k.init(np.array([MU]), rng)
    out = np.empty(n_iter)
    for t in range(n_iter):
        s, _ = k.sweep(s, rng)
        out[t] = s.theta[0]
    return out


def ensemble(strategy, rho, n_chains, n_iter, rng):
    k, _ = make_kernel(strategy, rho)
    out = np.empty((n_iter + 1, n_chains))
    out[0] = THETA0
    states = [k.init(np.array([THETA0]), rng) for _ in range(n_chains)]
    for c in range(n_chains):
        s = states[c]
        for t in range(n_iter):
            s, _ = k.sweep(s, rng)
            out[t + 1, c] = s.theta[0]
    return out


def main(argv=None):
    args = parse_args(__doc__, argv)
    rng = np.random.default_rng(args.seed)
    n_long, n_chains, n_iter = (3000, 200, 30) if args.quick else (20000, 2000, 60)
    rho_conv = 1.0
    t0 = time.perf_counter()

    # ---- bias against rho
    bias_rows, bias = [], {1: [], 2: []}
    for strategy, dist in ((1, "TV"), (2, "W1")):
        b = B1 if strategy == 1 else 1
        for rho in RHOS:
            s_rho = np.sqrt(SIGMA**2 + rho**2 / b)
            exact_tv = tv_same_mean(SIGMA, s_rho)
            exact_w1 = w1_gauss(MU, SIGMA, MU, s_rho)
            if rho in RHOS_EMP:
                x = long_chain(strategy, rho, n_long, rng)
                burn = x[100:]
                var_hat = burn.var()
                # MCSE of the variance of an AR(1) chain: 2 s^4 (1 + a^2) / (1 - a^2) / N
                a = b * SIGMA**2 / (b * SIGMA**2 + rho**2)
                se_var = np.sqrt(2 * s_rho**4 * (1 + a**2) / (1 - a**2) / burn.size)
                w1_emp = w1_sample_vs_gauss(burn, MU, SIGMA)
                emp = (f"{var_hat:.4f} ± {se_var:.4f}", f"{w1_emp:.3g}")
            else:
                var_hat = se_var = w1_emp = np.nan
                emp = ("not run", "not run")
            bias[strategy].append((rho, exact_tv, exact_w1, var_hat, s_rho**2, se_var, w1_emp))
            bias_rows.append(
                [
                    strategy,
                    b,
                    rho,
                    f"{exact_tv:.3g}",
                    f"{exact_w1:.3g}",
                    f"{s_rho**2:.4f}",
                    *emp,
                ]
            )
    print(f"bias part done [{time.perf_counter() - t0:.0f} s]", flush=True)

    def slope(xs, ys):
        return np.polyfit(np.log(xs), np.log(ys), 1)[0]

    small = slice(0, 4)  # rho <= 0.4: the asymptotic regime
    slopes = {
        (s, k): slope([r[0] for r in bias[s]][small], [r[k] for r in bias[s]][small])
        for s in (1, 2)
        for k in (1, 2)
    }

    # ---- convergence against iterations
    conv_rows, conv, rates = [], {}, {}
    for strategy in (1, 2):
        k, b = make_kernel(strategy, rho_conv)
        a = b * SIGMA**2 / (b * SIGMA**2 + rho_conv**2)
        s2 = SIGMA**2 + rho_conv**2 / b
        ens = ensemble(strategy, rho_conv, n_chains, n_iter, rng)
        ts = np.arange(n_iter + 1)
        m_t = MU + a**ts * (THETA0 - MU)
        v_t = s2 * (1 - a ** (2 * ts))
        tv = [tv_gauss(m_t[t], np.sqrt(v_t[t]), MU, np.sqrt(s2)) if t else 1.0 for t in ts]
        w1 = [w1_gauss(m_t[t], np.sqrt(v_t[t]), MU, np.sqrt(s2)) for t in ts]
        w1_emp = [w1_sample_vs_gauss(ens[t], MU, np.sqrt(s2)) for t in ts]
        conv[strategy] = (ts, np.array(tv), np.array(w1), np.array(w1_emp), ens, m_t, v_t, a)
        # observed per-iteration contraction of the ensemble mean's distance to mu
        late = (ts >= 1) & (np.abs(m_t - MU) > 20 * np.sqrt(s2 / n_chains))
        a_hat = np.exp(np.polyfit(ts[late], np.log(np.abs(ens[late].mean(1) - MU)), 1)[0])
        rates[strategy] = (a, a_hat)
        for t in [1, 2, 5, 10, 20, n_iter]:
            se_m = np.sqrt(max(v_t[t], 1e-300) / n_chains)
            conv_rows.append(
                [
                    strategy,
                    t,
                    f"{m_t[t]:.4f}",
                    f"{ens[t].mean():.4f} ± {se_m:.4f}",
                    f"{v_t[t]:.4f}",
                    f"{ens[t].var():.4f}",
                    f"{tv[t]:.3g}",
                    f"{w1[t]:.3g}",
                    f"{w1_emp[t]:.3g}",
                ]
            )
        conv_rows.append(
            [strategy, "rate", f"a = {a:.4f}", f"fitted {a_hat:.4f}", "", "", "", "", ""]
        )
    print(f"convergence part done [{time.perf_counter() - t0:.0f} s]", flush=True)

    text = (
        f"# Toy Gaussian (Sections 3.2, 4.1.2) ({'quick' if args.quick else 'full'} run, seed "
        f"{args.seed})\n\n<!-- body -->\n\n"
        f"mu = {MU}, sigma = {SIGMA}; strategy 1: b = {B1} potentials, bias in TV; strategy 2: "
        "b = 1 (A = I), bias in W1, as in the paper's Figure 2.\n\n"
        "**Bias of pi_rho against rho (exact, and empirical from the kernels)**\n\n"
        + markdown_table(
            [
                "strategy",
                "b",
                "rho",
                "TV(pi_rho, pi) exact",
                "W1(pi_rho, pi) exact",
                "var pi_rho exact",
                f"var of chain ({n_long} sweeps) ± MCSE",
                "W1(chain, pi) empirical",
            ],
            bias_rows,
        )
        + "\n\nLog-log slopes of the exact bias for rho <= 0.4 (paper: O(rho^2) decay here):\n\n"
        + markdown_table(
            ["strategy", "TV slope", "W1 slope"],
            [[s, f"{slopes[(s, 1)]:.3f}", f"{slopes[(s, 2)]:.3f}"] for s in (1, 2)],
        )
        + f"\n\n**Convergence to pi_rho against iterations (rho = {rho_conv}, theta_0 = {THETA0}, "
        f"{n_chains} independent chains)**\n\n"
        + markdown_table(
            [
                "strategy",
                "t",
                "mean exact",
                "mean chains ± MCSE",
                "var exact",
                "var chains",
                "TV(law_t, pi_rho) exact",
                "W1 exact",
                "W1 empirical",
            ],
            conv_rows,
        )
        + "\n\nThe exact TV and W1 decay like a^t (a the AR(1) coefficient); the paper reports that "
        "its TV bound has this slope and its W1 bound about twice it. The empirical W1 has a Monte "
        f"Carlo floor of order 1/sqrt({n_chains}).\n"
    )
    write_text(args.outdir / "toy_gaussian.md", text)
    print(text)

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    ax = axes[0]
    for s, ls in ((1, "-"), (2, "--")):
        r = np.array(bias[s])
        ax.loglog(r[:, 0], r[:, 1], "o" + ls, label=f"TV exact, strategy {s}")
        ax.loglog(r[:, 0], r[:, 2], "s" + ls, label=f"W1 exact, strategy {s}")
        ax.loglog(r[:, 0], r[:, 6], "x:", label=f"W1 empirical, strategy {s}")
    ax.set_xlabel("rho")
    ax.set_ylabel("distance to pi")
    ax.set_title("bias of pi_rho")
    ax.legend(fontsize=7)
    ax = axes[1]
    for s, ls in ((1, "-"), (2, "--")):
        ts, tv, w1, w1e, *_ = conv[s]
        ax.semilogy(ts, tv, ls, label=f"TV exact, strategy {s}")
        ax.semilogy(ts, w1, ls, label=f"W1 exact, strategy {s}")
        ax.semilogy(ts, w1e, ":", label=f"W1 empirical, strategy {s}")
    ax.set_xlabel("iteration t")
    ax.set_ylabel("distance to pi_rho")
    ax.set_title(f"convergence (rho = {rho_conv})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.outdir / "toy_gaussian.png", dpi=120)
    print(f"wrote {args.outdir / 'toy_gaussian.png'}")
    return {"bias": bias, "slopes": slopes, "rates": rates, "n_chains": n_chains}


if __name__ == "__main__":
    main()
