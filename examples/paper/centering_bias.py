"""Centering the potentials at the MAP: its measured effect on the bias of pi_rho.

The paper (Section 3.1) assumes centred potentials, ``grad U_i(A_i theta*) = 0`` at the MAP
``theta*``, obtained by a linear shift that leaves ``pi`` unchanged, and argues that without it
the bias of ``pi_rho`` can depend strongly on how far apart the potentials' minimisers are.
It gives no numbers for a GLM. Here we measure it: a logistic regression (Rademacher
covariates, rows normalised, n = 500, d = 5, prior N(0, 2^2 I), an intercept-like offset 1)
sampled by SGS with and without ``pymc_sgs.centering.center_problem``, for both strategies
and several rho, against a PyMC NUTS reference:

* mean bias: ``max_j |mean_j - mean_NUTS_j| / sd_NUTS_j`` (with its Monte Carlo error);
* sd bias: ``max_j |sd_j / sd_NUTS_j - 1|``.

Strategy 1 runs the over-relaxed kernel (alpha = -0.99, same pi_rho, faster mixing);
strategy 2 the exact z-draws of Proposition 3 (b = 5 shards).

Writes ``centering_bias.md`` and ``centering_bias.png`` to ``--outdir``.

Run::

    python examples/paper/centering_bias.py            # 20000 / 8000 sweeps per run
    python examples/paper/centering_bias.py --quick
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import arviz as az  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402
from _common import markdown_table, parse_args, rademacher_logistic, write_text  # noqa: E402

from pymc_sgs.centering import center_problem  # noqa: E402
from pymc_sgs.families import FAMILIES  # noqa: E402
from pymc_sgs.kernel import SplitGibbsKernel  # noqa: E402
from pymc_sgs.problem import ParamSlice, SplitProblem, SplitTerm  # noqa: E402
from pymc_sgs.shards import ShardKernel  # noqa: E402

warnings.filterwarnings("ignore", message=".*BLAS.*")
N, D, PRIOR_SD, OFFSET, B = 500, 5, 2.0, 1.0, 5
RHO1 = (0.25, 0.5, 1.0)
RHO2 = (0.1, 0.2, 0.4)


def nuts_reference(X, y, draws, seed):
    with pm.Model():
        beta = pm.Normal("beta", 0, PRIOR_SD, shape=D)
        pm.Bernoulli("y", logit_p=OFFSET + pm.math.dot(X, beta), observed=y)
        idata = pm.sample(
            draws=draws,
            tune=1000,
            chains=4,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )
    x = idata.posterior["beta"].values.reshape(-1, D)
    return x.mean(0), x.std(0)


def run(kernel, theta0, T, rng):
    s = kernel.init(theta0, rng)
    out = np.empty((T, D))
    for t in range(T // 10 + T):
        s, _ = kernel.sweep(s, rng)
        if t >= T // 10:
            out[t - T // 10] = s.theta
    return out


def main(argv=None):
    args = parse_args(__doc__, argv)
    rng = np.random.default_rng(args.seed)
    T1, T2, nuts_draws = (1500, 800, 300) if args.quick else (20000, 8000, 2500)
    X, y = rademacher_logistic(N, D, rng)
    term = SplitTerm("y", FAMILIES["bernoulli"], X, np.full(N, OFFSET), y)
    prob = SplitProblem(
        (ParamSlice("beta", (D,), 0, D),), np.zeros(D), np.eye(D) / PRIOR_SD**2, (term,)
    )
    cen, theta_star = center_problem(prob)
    m_ref, sd_ref = nuts_reference(X, y, nuts_draws, args.seed)
    rows, res = [], {}
    for strategy, rhos, T in ((1, RHO1, T1), (2, RHO2, T2)):
        for rho in rhos:
            for label, problem in (("plain", prob), ("centred", cen)):
                if strategy == 1:
                    k = SplitGibbsKernel(problem, rho, alpha=-0.99)
                else:
                    k = ShardKernel(problem, rho, B)
                x = run(k, theta_star, T, rng)
                mcse = az.mcse(az.convert_to_dataset(x[None]))["x"].values / sd_ref
                dm = np.abs(x.mean(0) - m_ref) / sd_ref
                j = int(np.argmax(dm))
                sd_bias = float(np.max(np.abs(x.std(0) / sd_ref - 1)))
                res[(strategy, rho, label)] = (dm[j], mcse[j], sd_bias)
                rows.append(
                    [strategy, rho, label, f"{dm[j]:.3f} ± {mcse[j]:.3f}", f"{sd_bias:.3f}"]
                )
                print(" | ".join(map(str, rows[-1])), flush=True)
    text = (
        f"# Centering at the MAP: bias of pi_rho ({'quick' if args.quick else 'full'} run, seed "
        f"{args.seed})\n\n<!-- body -->\n\n"
        f"Logistic regression, n = {N}, d = {D}, offset {OFFSET}, prior N(0, {PRIOR_SD}^2 I); "
        f"NUTS reference 4 x {nuts_draws} draws; strategy 1: {T1} sweeps, alpha = -0.99; "
        f"strategy 2: b = {B}, {T2} sweeps, exact z-draws. Bias in posterior sd units "
        "(± MCSE of the SGS mean; the NUTS reference adds about "
        f"{1 / np.sqrt(4 * nuts_draws / 3):.3f} more).\n\n"
        + markdown_table(
            ["strategy", "rho", "potentials", "mean bias (max over j)", "sd bias (max over j)"],
            rows,
        )
        + "\n\nThe paper states that centering reduces the bias when the potentials' minimisers are "
        "far apart and that, with rejection sampling, it does not increase the cost of SGS; it "
        "reports no GLM numbers. The prototype notes of this project measured 24 -> 19 sd at "
        "rho = 2 on a larger logistic regression.\n"
    )
    write_text(args.outdir / "centering_bias.md", text)
    print(text)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (strategy, rhos) in zip(axes, ((1, RHO1), (2, RHO2))):
        for label, mk in (("plain", "o-"), ("centred", "s--")):
            ax.errorbar(
                rhos,
                [res[(strategy, r, label)][0] for r in rhos],
                yerr=[res[(strategy, r, label)][1] for r in rhos],
                fmt=mk,
                label=f"mean bias, {label}",
            )
            ax.plot(
                rhos,
                [res[(strategy, r, label)][2] for r in rhos],
                mk[0] + ":",
                label=f"sd bias, {label}",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("rho")
        ax.set_ylabel("bias (posterior sd units)")
        ax.set_title(f"strategy {strategy}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.outdir / "centering_bias.png", dpi=120)
    print(f"wrote {args.outdir / 'centering_bias.png'}")
    return res


if __name__ == "__main__":
    main()
