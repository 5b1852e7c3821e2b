"""What a back end is: the object that builds the kernel a :class:`SplitGibbs` step drives."""

from __future__ import annotations

__all__ = ["Backend"]


class Backend:
    """Base class of the back ends accepted by ``SplitGibbs(backend=...)``.

    A back end turns the detected :class:`~pymc_sgs.problem.SplitProblem` into
    a kernel with the interface of :class:`~pymc_sgs.kernel.SplitGibbsKernel`
    (``init``, ``sweep``, ``exact_step``, ``set_rho``,
    ``set_prior_precision``, ``set_sigmas`` and a ``rho`` attribute).
    """

    #: whether the back end supports one rho per row
    per_row_rho = True

    def build_kernel(self, problem, rho, alpha, log_weights):  # pragma: no cover - interface
        """The kernel for ``problem``; raises ``ValueError`` for what it cannot run."""
        raise NotImplementedError

    def describe(self) -> str:
        """Short description for ``repr(SplitGibbs(...))``."""
        return type(self).__name__
