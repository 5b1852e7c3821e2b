"""The documentation builds without warnings, and its figure script reads the benchmark table.

The Sphinx build is skipped unless the ``docs`` extra is installed
(``pip install -e ".[docs]"``).
"""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MIXING = ROOT / "benchmarks" / "results" / "mixing.md"


def _make_figures():
    sys.path.insert(0, str(DOCS))
    try:
        import make_figures
    finally:
        sys.path.remove(str(DOCS))
    return make_figures


def test_docs_build_with_warnings_as_errors(tmp_path):
    for module in ("sphinx", "pydata_sphinx_theme", "numpydoc", "myst_parser"):
        pytest.importorskip(
            module, reason="docs dependencies not installed (pip install -e '.[docs]')"
        )
    cmd = [
        sys.executable,
        "-m",
        "sphinx",
        "-W",
        "--keep-going",
        "-q",
        "-b",
        "html",
        "-d",
        str(tmp_path / "doctrees"),
        str(DOCS),
        str(tmp_path / "html"),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"sphinx -W failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    html = tmp_path / "html"
    for page in (
        "index",
        "quickstart",
        "how_it_works",
        "rho_and_bias",
        "supported_models",
        "performance",
        "api/index",
        "api/step",
    ):
        assert (html / f"{page}.html").is_file(), page
    assert (html / "_images" / "mixing.png").is_file()
    # the benchmark table is included from benchmarks/results/mixing.md
    assert "IAT (bulk)" in (html / "performance.html").read_text()


def test_make_figures_reads_the_mixing_table(tmp_path):
    mf = _make_figures()
    rows = mf.parse_mixing_table(MIXING)
    alphas = {r["alpha"] for r in rows}
    assert 0.0 in alphas and any(a < 0 for a in alphas)
    assert all(r["iat"] > 0 and r["bias"] >= 0 for r in rows)
    out = mf.draw(rows, tmp_path / "mixing.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (DOCS / "_static" / "mixing.png").is_file(), "run python docs/make_figures.py"


def test_numbers_quoted_in_the_docs_match_the_mixing_table():
    """docs/how_it_works.rst and docs/performance.rst quote these results (so does the
    README); after re-running benchmarks/mixing.py, update the text and this test."""
    rows = {(r["rho"], r["alpha"]): r for r in _make_figures().parse_mixing_table(MIXING)}
    assert rows[(0.3, -0.99)]["iat"] == 7.8
    assert rows[(0.3, 0.0)]["iat"] == 138
    assert rows[(0.1, -0.99)]["iat"] == 24.1
    assert rows[(0.1, -0.99)]["bias"] == pytest.approx(0.065)
    assert rows[(0.1, 0.0)]["iat"] == 2822 and rows[(0.1, 0.0)]["iat_lower_bound"]
    assert rows[(0.3, -0.99)]["bias"] == pytest.approx(0.411)
