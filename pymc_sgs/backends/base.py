"""What a back end is: the object that builds the kernel a :class:`SplitGibbs` step drives."""

from __future__ import annotations

__all__ = ["Backend", "check_sharded_options"]


class Backend:
    """Base class of the back ends accepted by ``SplitGibbs(backend=...)``.

    A back end turns the detected :class:`~pymc_sgs.problem.SplitProblem` into
    a :class:`~pymc_sgs.kernel.SplitGibbsKernel` whose split rows it holds: in
    this process (:class:`~pymc_sgs.rows.LocalRows`) or on shards reached
    through a transport
    (:class:`~pymc_sgs.backends.sharded.ShardedKernel`). What the kernel asks
    of the rows is the protocol :class:`~pymc_sgs.rows.RowBlock`
    (``docs/architecture.rst``).
    """

    #: whether the back end supports one rho per row
    per_row_rho = True

    def build_kernel(
        self, problem, rho, alpha, log_weights, theta_solver="auto", dtype="float64"
    ):  # pragma: no cover - interface
        """The kernel for ``problem``; raises ``ValueError`` for what it cannot run."""
        raise NotImplementedError

    def describe(self) -> str:
        """Short description for ``repr(SplitGibbs(...))``."""
        return type(self).__name__


def check_sharded_options(theta_solver, dtype, where: str) -> None:
    """Sharded kernels factor the reduced Gram matrix and run the float64 shard kernel."""
    if theta_solver == "cg":
        raise ValueError(
            f"theta_solver='cg' is not available with {where}: the sharded theta-step uses the "
            "d x d Gram matrix reduced from the shards; use theta_solver='auto' or 'cholesky'."
        )
    if dtype != "float64":
        raise ValueError(f"dtype={dtype!r} is not available with {where}; use dtype='float64'.")
