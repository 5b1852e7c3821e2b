"""Exact mode: which Pi_rho-reversible proposal keeps the over-relaxation speed-up?

The MH correction to pi accepts a proposal (theta', z') with probability
min(1, w(theta') / w(theta)); that is exact whenever the proposal kernel is
reversible for Pi_rho. Compared here, on logistic regression (n = 10^4, d = 10):

* ``palindrome``: K sweeps of Z T Z (z-move, theta-move, z-move): reversible,
  but two over-relaxed z-moves in a row nearly cancel;
* ``random-order`` (what ``SplitGibbs(exact=True)`` does): K sweeps all in the
  order Z T or all in the order T Z, chosen at random; the mixture of a kernel
  and its adjoint is reversible, and inside the K sweeps the blocks alternate
  as in the uncorrected sampler;
* ``uncorrected``: the over-relaxed sampler itself (targets pi_rho), for scale.

IAT is counted in sweeps (one MH step = K sweeps). Run::

    python benchmarks/exact_mode.py [--quick]
"""

from __future__ import annotations

import argparse
import time

import arviz as az
import numpy as np
from harness.cases import split_problem

from pymc_sgs.kernel import SGSState, SplitGibbsKernel

az.Numba.disable_numba()


def _problem(n=10_000, d=10, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) / np.sqrt(d)
    y = rng.binomial(1, 1 / (1 + np.exp(-X @ rng.normal(size=d)))).astype(float)
    return split_problem(X, y, 5.0, name="b")


def palindrome_step(k: SplitGibbsKernel, state: SGSState, rng, n_sweeps):
    """MH step with a Z T Z palindromic proposal (the variant that loses the speed-up)."""
    log_w0 = state.log_weight
    if not np.isfinite(log_w0):
        log_w0, _ = k.log_weight(state.theta, state.z_mode)
    theta, z, mode = state.theta, state.z, state.z_mode
    for _ in range(n_sweeps):
        z, mode, _, _, atz = k._z_update(theta, z, mode, rng)
        theta = k.theta_conditional.sample_from_rhs(atz, rng, theta=theta, alpha=k.alpha)
        z, mode, _, _, atz = k._z_update(theta, z, mode, rng)
    log_w1, mode1 = k.log_weight(theta, mode)
    acc = float(np.exp(min(0.0, log_w1 - log_w0)))
    if rng.random() < acc:
        return SGSState(theta, z, mode1, log_w1, atz), acc
    return state._replace(log_weight=log_w0), acc


def run(kind, k, n_sweeps, steps, seed):
    rng = np.random.default_rng(seed)
    state = k.init(np.zeros(k.A.shape[1]), rng)
    for _ in range(200):  # burn in on pi_rho
        state, _ = k.sweep(state, rng)
    out = np.empty((steps, k.A.shape[1]))
    accs = []
    t = time.perf_counter()
    for i in range(steps):
        if kind == "uncorrected":
            state, _ = k.sweep(state, rng)
            acc = 1.0
        elif kind == "palindrome":
            state, acc = palindrome_step(k, state, rng, n_sweeps)
        else:
            state, info = k.exact_step(state, rng, n_sweeps)
            acc = info.exact_accept
        out[i] = state.theta
        accs.append(acc)
    elapsed = time.perf_counter() - t
    ess = min(float(az.ess(out[None, :, j])) for j in range(out.shape[1]))
    sweeps_per_step = 1 if kind == "uncorrected" else n_sweeps
    return {
        "acc": float(np.mean(accs)),
        "iat_sweeps": steps / ess * sweeps_per_step,
        "ess_s": ess / elapsed,
        "mean0": float(out[:, 0].mean()),
    }


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true")
    p.add_argument("--rho", type=float, default=0.3)
    p.add_argument("--alpha", type=float, default=-0.98)
    args = p.parse_args(argv)
    prob = _problem()
    k = SplitGibbsKernel(prob, rho=args.rho, alpha=args.alpha, log_weights=True)
    steps = 300 if args.quick else 3000
    rows = [("uncorrected", 1)]
    for K in (1, 5) if args.quick else (1, 5, 20):
        rows += [("palindrome", K), ("random-order", K)]
    print(f"logistic n=10^4 d=10, rho={args.rho}, alpha={args.alpha}, {steps} MH steps per row")
    print("| proposal | K sweeps | MH acceptance | IAT (sweeps) | ESS/s |")
    print("|---|---:|---:|---:|---:|")
    for kind, K in rows:
        r = run(kind, k, K, steps, seed=1)
        print(f"| {kind} | {K} | {r['acc']:.2f} | {r['iat_sweeps']:.1f} | {r['ess_s']:.1f} |")


if __name__ == "__main__":
    main()
