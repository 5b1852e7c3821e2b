"""The package's layering: detection without import cycles, families found by what they declare.

- The detection modules import each other in one direction only (graph helpers, then the
  kinked and categorical readers, then the recognisers, the affine reading and the GLM), both
  at module level and inside functions, and each imports on its own in a fresh interpreter;
  no module of the package imports one that imports it back.
- Every recogniser maps an op and a link to a family class that declares that link, and the
  family registry is consistent with the compiled pass.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pymc_sgs import families, fused
from pymc_sgs.families import FAMILIES, Family

PACKAGE = Path(__file__).resolve().parents[1] / "pymc_sgs"
#: the detection modules, each allowed to import only those before it
DETECTION = ["graph", "detect_nonsmooth", "detect_multinomial", "recognise", "affine", "detect"]


def _package_imports(module: str) -> set:
    """Modules of the package that ``module`` imports anywhere (module level or in functions)."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(alias.name for alias in node.names)
    return out


def test_detection_modules_import_in_one_direction():
    for i, module in enumerate(DETECTION):
        later = set(DETECTION[i + 1 :]) | {module}
        back = _package_imports(module) & later - {module}
        assert not back, f"pymc_sgs.{module} imports {sorted(back)}, which import it"


def test_no_import_cycle_among_the_package_modules():
    modules = [p.stem for p in PACKAGE.glob("*.py")]
    graph = {m: _package_imports(m) & set(modules) for m in modules}
    state = {}

    def visit(m, path):
        state[m] = "open"
        for d in graph[m]:
            if state.get(d) == "open":
                pytest.fail(" -> ".join(path[path.index(d) :] + [d]))
            elif d not in state:
                visit(d, path + [d])
        state[m] = "done"

    for m in modules:
        if m not in state:
            visit(m, [m])


@pytest.mark.parametrize("first", ["detect", "detect_nonsmooth", "detect_multinomial"])
def test_detection_modules_import_in_either_order(first):
    # a fresh interpreter each: the module first, then the rest (a cycle fails on one order)
    rest = [m for m in DETECTION if m != first]
    code = "; ".join(f"import pymc_sgs.{m}" for m in [first, *rest])
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]


def test_recognisers_map_to_families_with_their_link():
    from pymc_sgs.recognise import LINKS, RECOGNISERS

    for rec in RECOGNISERS:
        for link, cls in rec.families.items():
            assert issubclass(cls, Family)
            assert cls().link == link == LINKS[link].name
    # the probit and logit families share names (for messages) but not their class
    assert FAMILIES["bernoulli_probit"].name == FAMILIES["bernoulli"].name
    assert type(FAMILIES["bernoulli_probit"]) is not type(FAMILIES["bernoulli"])


@pytest.mark.parametrize("key", list(FAMILIES))
def test_declared_capabilities_are_consistent(key):
    fam = FAMILIES[key]
    code = fam.compiled_code
    assert code in (None, families.LOGIT, families.LOG, families.IDENTITY, families.NEGBIN)
    assert fused.family_code(fam) == code
    # the compiled branches assume these links
    expected_link = {
        families.LOGIT: "logit",
        families.LOG: "log",
        families.IDENTITY: "identity",
        families.NEGBIN: "log",
    }
    if code is not None:
        assert fam.link == expected_link[code]
    # canonical links (centring by moving y) are exactly logit, Poisson-log and Normal
    assert fam.canonical_link == (key in ("bernoulli", "binomial", "poisson", "normal"))
    # a declared curvature bound is finite and positive, and scales linearly
    trials = np.array([2.0, 5.0]) if fam.has_trials or key == "normal" else None
    y = np.array([1.0, 2.0])
    bound = fam.curvature_bound(y, trials)
    if bound is not None:
        assert np.isfinite(bound) and bound > 0
        assert fam.curvature_bound(y, trials, 4.0) == pytest.approx(4.0 * bound)
    assert not fam.piecewise_linear
