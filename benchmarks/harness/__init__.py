"""Shared benchmark harness (issue 21, item 5).

Modules:

* :mod:`harness.cases`      the synthetic GLM data sets, the posteriordb dogs data (read from
                            ``tests/data/`` by path) and their PyMC models / split problems;
* :mod:`harness.runner`     one sampler on one case in a fresh worker process: memory
                            monitor, CPU and wall timing (with and without setup), timeout;
* :mod:`harness.baselines`  the non-PyMC samplers: Polya-Gamma Gibbs and Laplace + PSIS
                            importance sampling;
* :mod:`harness.laplace_mh` ``LaplaceMH``, a PyMC step method: independence / over-relaxed
                            pCN Metropolis-Hastings on the exact posterior with a Laplace
                            proposal (the exact baseline of issue 23);
* :mod:`harness.metrics`    min bulk and tail ESS over every coefficient, R-hat, bias against
                            a reference posterior, importance-sampling summaries;
* :mod:`harness.report`     versions and git commit, the markdown table and the plot.

``benchmarks/compare.py`` is the command line on top of it; the other scripts import the
pieces they share with it.
"""

from pathlib import Path

#: repository root (``benchmarks/..``)
ROOT = Path(__file__).resolve().parents[2]
#: ``benchmarks/results``
RESULTS_DIR = ROOT / "benchmarks" / "results"
