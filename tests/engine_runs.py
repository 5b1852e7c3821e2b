"""Run a kernel with the numpy and the numba engine on the same random numbers, and compare.

Shared by ``test_fused.py`` and ``test_nonsmooth.py``: the compiled pass must reproduce the
pure-numpy reference path draw for draw (same Generator seed, same order of random numbers).
"""

import numpy as np

from pymc_sgs.kernel import SplitGibbsKernel


def run_both_engines(prob, *, rho, alpha, seed, n_steps, exact, exact_sweeps=3):
    """``{engine: [(theta, z, log_weight, z_accept) per step]}`` for "numpy" and "numba"."""
    runs = {}
    for engine in ("numpy", "numba"):
        k = SplitGibbsKernel(prob, rho=rho, alpha=alpha, log_weights=True, engine=engine)
        assert k.engine == engine
        rng = np.random.default_rng(seed)
        state = k.init(np.zeros(prob.d), rng)
        out = []
        for _ in range(n_steps):
            if exact:
                state, info = k.exact_step(state, rng, exact_sweeps)
            else:
                state, info = k.sweep(state, rng)
            out.append((state.theta.copy(), state.z.copy(), info.log_weight, info.z_accept))
        runs[engine] = out
    return runs


def assert_engines_agree(runs):
    """Same random numbers in the same order: the two chains agree up to rounding."""
    for (t0, z0, w0, a0), (t1, z1, w1, a1) in zip(runs["numpy"], runs["numba"]):
        np.testing.assert_allclose(t1, t0, rtol=1e-8, atol=1e-8)
        np.testing.assert_allclose(z1, z0, rtol=1e-8, atol=1e-8)
        np.testing.assert_allclose(w1, w0, rtol=1e-8, atol=1e-6)
        np.testing.assert_allclose(a1, a0, rtol=1e-8, atol=1e-10)
