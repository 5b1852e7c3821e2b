"""pymc_sgs: the split Gibbs sampler (Vono, Paulin & Doucet, JMLR 2022) for PyMC GLMs.

The PyMC-facing parts (the step, model detection, the ArviZ diagnostics) are
imported on first use, so a Dask worker that only runs the kernel on its shard
(:mod:`pymc_sgs.backends`) does not import PyMC.
"""

from importlib import import_module

from .backends import (
    Backend,
    DaskBackend,
    LocalBackend,
    SamplingStopped,
    ShardLostError,
    ShardLostWarning,
)
from .families import FAMILIES, Family
from .kernel import SGSInfo, SGSState, SplitGibbsKernel
from .problem import GaussianTerm, SplitProblem, SplitTerm

__version__ = "0.1.0"

#: public names imported on first access, and the module that defines them
_LAZY = {
    "SplitGibbs": "step",
    "BlockSplitGibbs": "step",
    "ExactOptions": "options",
    "ShiftOptions": "options",
    "SamplerFeedbackWarning": "step",
    "psis_summary": "diagnostics",
    "psis_weights": "diagnostics",
    "RhoBiasWarning": "diagnostics",
    "DetectedModel": "detect",
    "UnsupportedModelError": "detect",
    "detect_split_problem": "detect",
}


#: submodules that import PyMC or ArviZ, loaded on first attribute access
_LAZY_MODULES = ("step", "detect", "diagnostics", "rho")


def __getattr__(name):
    if name in _LAZY_MODULES:
        return import_module(f".{name}", __name__)
    if name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "SplitGibbs",
    "BlockSplitGibbs",
    "ExactOptions",
    "ShiftOptions",
    "Backend",
    "LocalBackend",
    "DaskBackend",
    "ShardLostError",
    "ShardLostWarning",
    "SamplingStopped",
    "psis_summary",
    "psis_weights",
    "RhoBiasWarning",
    "SamplerFeedbackWarning",
    "SplitGibbsKernel",
    "SGSState",
    "SGSInfo",
    "SplitProblem",
    "SplitTerm",
    "GaussianTerm",
    "Family",
    "FAMILIES",
    "DetectedModel",
    "UnsupportedModelError",
    "detect_split_problem",
]
