"""The start every benchmark script shares, imported before anything loads numpy.

One BLAS, OpenMP and numba thread per process (the samplers are compared on equal terms,
each chain in its own process), and the repository and ``benchmarks/`` on ``sys.path`` so that
``pymc_sgs`` and ``harness`` import from this checkout.
"""

import os
import sys
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

#: the repository's root
ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "benchmarks"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))
