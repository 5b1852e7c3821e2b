"""Sphinx configuration of the pymc_sgs documentation.

Build (warnings are errors, as in the test suite's ``tests/test_docs.py``)::

    python -m pip install -e ".[docs]"
    python -m sphinx -W -b html docs docs/_build/html
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
# document the package of this checkout, installed or not
sys.path.insert(0, str(ROOT))

import pymc_sgs  # noqa: E402

# -- Project -------------------------------------------------------------------------------
project = "pymc_sgs"
author = "pymc_sgs developers"
copyright = "pymc_sgs developers"
version = pymc_sgs.__version__
release = pymc_sgs.__version__

# -- General -------------------------------------------------------------------------------
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_parser",  # only to include the Markdown benchmark tables into the reST pages
]
source_suffix = {".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path: list[str] = []
default_role = "code"  # `x` in the pages means literal code, as in the package's docstrings

# The API pages write their autodoc directives out, so nothing is generated into the
# source tree at build time; autosummary only draws the summary tables.
autosummary_generate = False
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "none"  # the numpydoc "Parameters" sections carry the types
autodoc_mock_imports: list[str] = []

numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

myst_heading_anchors = 0
suppress_warnings = [
    # the included benchmark fragments start below their document's title
    "myst.header",
    # numpydoc turns a module docstring's "References" section into citations; the package
    # lists its references there without citing them in the text, which is valid numpydoc
    "ref.citation",
]

# -- HTML ----------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"pymc_sgs {release}"
html_static_path = ["_static"]
html_show_sourcelink = False
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version", "theme-version"],
}
html_context = {"default_mode": "light"}
# Offline, reproducible builds: no intersphinx (it would fetch inventories at build time).


def _init_signature(app, what, name, obj, options, signature, return_annotation):
    """Show ``__init__``'s signature for PyMC step methods.

    PyMC's ``BlockedStep`` defines ``__new__(cls, *args, **kwargs)``, which autodoc would
    otherwise show as the signature of ``SplitGibbs``.
    """
    if what == "class" and isinstance(obj, type) and issubclass(obj, pymc_sgs.SplitGibbs):
        sig = inspect.signature(obj.__init__)
        params = list(sig.parameters.values())[1:]  # drop self
        sig = sig.replace(parameters=params, return_annotation=inspect.Signature.empty)
        plain = [p.replace(annotation=inspect.Parameter.empty) for p in sig.parameters.values()]
        return str(sig.replace(parameters=plain)), None
    return None


def setup(app):
    app.connect("autodoc-process-signature", _init_signature)
