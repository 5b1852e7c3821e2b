"""Smoke tests of the example scripts in examples/.

Every example runs in quick mode as a subprocess (``python examples/X.py --quick --outdir
TMP``; ``quickstart.py`` takes no flags and runs as is); a test checks the exit code and
that the expected figures were written and are non-empty PNGs.

The scripts are independent processes, so the selected ones are started together, at most
``cpu_count`` at a time, when the first of these tests runs; each test then waits for its own
script. This keeps the whole file within a few minutes on two cores.

The examples need scikit-learn and statsmodels (data sets), which the ``test`` extra installs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TIMEOUT = 600  # seconds per script (a generous bound: a quick run takes well under a minute)

#: script -> PNG files it writes to --outdir (quickstart.py writes none and takes no flags)
CASES = {
    "quickstart.py": [],
    "breast_cancer_logistic.py": [
        "breast_cancer_trace.png",
        "breast_cancer_rank.png",
        "breast_cancer_forest.png",
    ],
    "bias_vs_rho.py": ["bias_vs_rho.png"],
    "ess_per_second.py": ["ess_per_second.png"],
    "poisson_regression.py": ["poisson_posterior.png", "poisson_fit.png"],
    "bambi_glms.py": ["bambi_glms.png"],
    "quantile_regression.py": [
        "quantile_regression_fit.png",
        "quantile_regression_posterior.png",
    ],
    "multinomial_logit.py": ["multinomial_logit_forest.png"],
    "mixed_models.py": ["mixed_models.png"],
}
#: examples whose quick run takes over a minute of CPU (six models, each also under NUTS)
SLOW = {"bambi_glms.py"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class _Runner:
    """Starts the example subprocesses, at most ``max_jobs`` at a time, and collects results."""

    def __init__(self, names, tmp_root: Path, max_jobs: int):
        self.queue = list(names)
        self.tmp_root = tmp_root
        self.max_jobs = max_jobs
        self.running: dict[str, tuple] = {}
        self.done: dict[str, dict] = {}
        self.env = dict(os.environ)
        # the package from this checkout, whether or not it is pip-installed
        self.env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT)] + ([self.env["PYTHONPATH"]] if self.env.get("PYTHONPATH") else [])
        )
        self.env["MPLBACKEND"] = "Agg"
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            self.env.setdefault(var, "1")
        self._fill()

    def _start(self, name):
        outdir = self.tmp_root / name.removesuffix(".py")
        outdir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, str(EXAMPLES / name)]
        if name != "quickstart.py":
            cmd += ["--quick", "--outdir", str(outdir)]
        log = open(outdir / "output.log", "w+b")
        proc = subprocess.Popen(cmd, cwd=outdir, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.running[name] = (proc, log, outdir, time.monotonic())

    def _fill(self):
        while self.queue and len(self.running) < self.max_jobs:
            self._start(self.queue.pop(0))

    def _reap(self, name, timeout=None):
        proc, log, outdir, t0 = self.running[name]
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.seek(0)
        output = log.read().decode(errors="replace")
        log.close()
        del self.running[name]
        self.done[name] = {
            "returncode": proc.returncode,
            "output": output,
            "outdir": outdir,
            "seconds": time.monotonic() - t0,
        }

    def result(self, name) -> dict:
        if name not in self.done and name not in self.running:
            if name in self.queue:
                self.queue.remove(name)
            self._start(name)
        while name not in self.done:
            finished = [n for n, (p, *_) in self.running.items() if p.poll() is not None]
            for n in finished:
                self._reap(n)
            if name in self.running and time.monotonic() - self.running[name][3] > TIMEOUT:
                self._reap(name, timeout=0)
            self._fill()
            if name not in self.done:
                time.sleep(0.2)
        return self.done[name]

    def close(self):
        for name in list(self.running):
            self.running[name][0].kill()
            self._reap(name)


@pytest.fixture(scope="module")
def runner(request, tmp_path_factory):
    # start every selected, runnable example of this module up front
    selected = [
        item.callspec.params["script"]
        for item in request.session.items
        if item.module is request.module and hasattr(item, "callspec")
    ]
    names = [n for n in CASES if n in selected]
    r = _Runner(names, tmp_path_factory.mktemp("examples"), max_jobs=max(2, os.cpu_count() or 1))
    yield r
    r.close()


@pytest.mark.parametrize(
    "script", [pytest.param(s, marks=pytest.mark.slow) if s in SLOW else s for s in CASES]
)
def test_example(script, runner):
    res = runner.result(script)
    tail = "\n".join(res["output"].splitlines()[-40:])
    assert res["returncode"] == 0, (
        f"{script} exited with {res['returncode']} after {res['seconds']:.0f} s:\n{tail}"
    )
    for png in CASES[script]:
        path = res["outdir"] / png
        assert path.is_file(), f"{script} did not write {png}:\n{tail}"
        data = path.read_bytes()
        assert len(data) > 1000 and data.startswith(PNG_MAGIC), f"{png} is not a valid PNG"
    if script != "quickstart.py":
        # every example prints an ArviZ summary
        assert "ess_bulk" in res["output"], f"{script} printed no ArviZ summary:\n{tail}"
