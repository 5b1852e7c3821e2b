"""pymc_sgs: the split Gibbs sampler (Vono, Paulin & Doucet, JMLR 2022) for PyMC GLMs."""

from .diagnostics import RhoBiasWarning, psis_summary, psis_weights
from .detect import DetectedModel, UnsupportedModelError, detect_split_problem
from .families import FAMILIES, Family
from .kernel import SGSInfo, SGSState, SplitGibbsKernel
from .problem import GaussianTerm, SplitProblem, SplitTerm
from .step import SamplerFeedbackWarning, SplitGibbs

__version__ = "0.1.0"

__all__ = [
    "SplitGibbs",
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
