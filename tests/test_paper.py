"""Quick-mode runs of the paper reproductions in examples/paper/, with checks of their numbers.

Each script's ``main(["--quick", "--outdir", tmp])`` runs in-process; the test checks that the
markdown table and the PNG figure were written and that the measured numbers agree with what
the theory of the paper says they must be (not with stored outputs).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

PAPER = Path(__file__).resolve().parents[1] / "examples" / "paper"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _load(name):
    sys.path.insert(0, str(PAPER))
    spec = importlib.util.spec_from_file_location(f"paper_{name}", PAPER / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _outputs_written(outdir, stem):
    md = outdir / f"{stem}.md"
    png = outdir / f"{stem}.png"
    assert md.exists() and "paper" in md.read_text()
    assert png.read_bytes()[:8] == PNG_MAGIC


def test_table6_quick(tmp_path):
    cells = _load("table6_rejection").main(["--quick", "--outdir", str(tmp_path)])
    _outputs_written(tmp_path, "table6_rejection")
    # Proposition 3 with rho_i^2 = 0.1 / (d_i L_i): about (1 + 0.1 / d_i)^(d_i / 2) <= e^0.05
    # proposals per draw (plus the minimiser's residual), i.e. close to 1 and far below 2
    for (strategy, d, n), (mean, mx, rho, steps) in cells.items():
        assert 1.0 <= mean < 1.2, (strategy, d, n, mean)
        assert mx >= mean
    # strategy 1's expected count is computed exactly: sqrt(1 + rho^2 U'') <= sqrt(1.1)
    for (strategy, d, n), (mean, mx, rho, steps) in cells.items():
        if strategy == "SGS 1":
            assert mx <= np.sqrt(1.1) + 1e-9


def test_toy_gaussian_quick(tmp_path):
    out = _load("toy_gaussian").main(["--quick", "--outdir", str(tmp_path)])
    _outputs_written(tmp_path, "toy_gaussian")
    # exact bias decays like rho^2 in TV and W1 (pi_rho is a variance inflation by rho^2 / b)
    for slope in out["slopes"].values():
        assert abs(slope - 2.0) < 0.06
    # the ensemble contracts at the AR(1) coefficient of the chain
    for a, a_hat in out["rates"].values():
        assert abs(a_hat - a) < 0.03, (a, a_hat)
    # the kernels' long-chain variance matches sigma^2 + rho^2 / b within 4 MCSE
    for rows in out["bias"].values():
        for rho, tv, w1, var_hat, var_exact, se, w1_emp in rows:
            if np.isfinite(var_hat):
                assert abs(var_hat - var_exact) < 4 * se, (rho, var_hat, var_exact, se)


def test_gaussian_mixture_quick(tmp_path):
    res = _load("gaussian_mixture").main(["--quick", "--outdir", str(tmp_path)])
    _outputs_written(tmp_path, "gaussian_mixture")
    for d, (sgs, ula, sec_sgs, sec_ula, checks) in res.items():
        assert sgs is not None and ula is not None and sgs[0] >= 1 and ula[0] >= 1
        # the simulated chains agree with the exact law of theta_K (second moments, 4 MCSE)
        for emp, se, exact in checks:
            assert abs(emp - exact) < 4 * se + 0.01, (d, emp, se, exact)


@pytest.mark.slow
def test_strategy_mixing_quick(tmp_path):
    res = _load("strategy_mixing").main(["--quick", "--outdir", str(tmp_path)])
    _outputs_written(tmp_path, "strategy_mixing")
    # the linearised chains: strategy 2's IAT relative to strategy 1's grows with the correlation
    # (the condition-number argument), and on the most correlated design it is the slower one
    rs = sorted({k[1] for k in res})
    ratio = [res[("strategy 2 (b=10)", r)][3] / res[("strategy 1", r)][3] for r in rs]
    assert ratio[-1] > ratio[0] and ratio[-1] > 1
    assert res[("strategy 2 (b=10)", rs[-1])][0] > res[("strategy 1", rs[-1])][0]
