"""Shared helpers of the paper reproductions: argument parsing, output files, data."""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def parse_args(doc: str, argv=None, extra=None):
    """``--quick``, ``--outdir`` and ``--seed``, plus ``extra(parser)`` additions."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small settings (smoke test, seconds)")
    p.add_argument("--outdir", type=Path, default=RESULTS, help="where the table and figure go")
    p.add_argument("--seed", type=int, default=0)
    if extra is not None:
        extra(p)
    args = p.parse_args(argv)
    args.outdir.mkdir(parents=True, exist_ok=True)
    return args


def markdown_table(header, rows) -> str:
    """A GitHub-flavoured markdown table from a header and rows of cells."""
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return "\n".join(lines)


def write_text(path: Path, text: str) -> None:
    path.write_text(text.rstrip() + "\n")
    print(f"wrote {path}")


def rademacher_logistic(n: int, d: int, rng: np.random.Generator, theta_true=None):
    """The paper's synthetic logistic regression (Section 5.3.2, after Dalalyan 2017).

    Rademacher covariates, each row normalised to unit Euclidean norm, and labels
    ``y_i ~ Bernoulli(sigmoid(x_i^T theta_true))`` (``theta_true = 1_d`` by default:
    the paper's value was lost from the text we have).
    """
    X = rng.choice([-1.0, 1.0], size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    theta_true = np.ones(d) if theta_true is None else theta_true
    p = 1.0 / (1.0 + np.exp(-X @ theta_true))
    y = (rng.random(n) < p).astype(float)
    return X, y
