"""Warnings attributed to the user's line, not to PyMC's sampling loop."""

from __future__ import annotations

import sys
import warnings

__all__ = ["warn_user"]

#: packages whose frames stand between the user's code and a warning raised while sampling
_LIBRARIES = ("pymc_sgs", "pymc", "pytensor", "bambi", "arviz")


def warn_user(message: str, category: type[Warning]) -> None:
    """``warnings.warn`` attributed to the first frame outside pymc_sgs, PyMC and PyTensor.

    A fixed ``stacklevel`` points into ``pymc/sampling/mcmc.py``, at a depth that depends on
    how the chain runs; the user's own line (their ``pm.sample`` call, or the constructor
    call) is what a reader needs. Where no such frame exists (a worker process), the
    caller's caller.
    """
    frame, level = sys._getframe(1), 1
    while frame is not None:
        if frame.f_globals.get("__name__", "").split(".")[0] not in _LIBRARIES:
            break
        frame, level = frame.f_back, level + 1
    if frame is None:
        level = 2
    warnings.warn(message, category, stacklevel=level + 1)
