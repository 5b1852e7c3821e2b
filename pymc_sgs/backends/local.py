"""The single-machine back end (the default), optionally split into in-process shards."""

from __future__ import annotations

from ..kernel import SplitGibbsKernel, validate_theta_solver
from .base import Backend, check_sharded_options
from .shard import ShardWorker, split_rows
from .sharded import ShardedKernel

__all__ = ["LocalBackend", "InProcessShards"]


def check_n_shards(n_shards, problem) -> int:
    """``n_shards`` must be a positive integer no larger than any split term's row count."""
    if isinstance(n_shards, bool) or not isinstance(n_shards, int) or n_shards < 1:
        raise ValueError(f"n_shards must be a positive integer; received {n_shards!r}.")
    if not problem.split_terms:
        raise ValueError(
            "a sharded back end needs at least one split likelihood term (Bernoulli, Binomial "
            "or Poisson); this model has none, so there is nothing to shard. Use the default "
            "back end."
        )
    smallest = min(t.n for t in problem.split_terms)
    if n_shards > smallest:
        raise ValueError(
            f"n_shards must be at most the number of rows of the smallest split term "
            f"({smallest}); received {n_shards}."
        )
    return n_shards


class InProcessShards:
    """Shards held in this process; calls run one after the other."""

    def __init__(self, workers):
        self.workers = list(workers)

    def summaries(self):
        return [w.summary() for w in self.workers]

    def call(self, name, args_per_shard):
        return [getattr(w, name)(*args) for w, args in zip(self.workers, args_per_shard)]


class LocalBackend(Backend):
    """Run SplitGibbs in this process.

    Parameters
    ----------
    n_shards : int, optional
        ``None`` (default): the single-machine kernel
        :class:`~pymc_sgs.kernel.SplitGibbsKernel`. An integer: the rows are
        cut into that many shards, each with its own Generator, exactly as
        :class:`~pymc_sgs.backends.DaskBackend` cuts them, so the draws equal
        those of a Dask run with the same seed and number of shards (a
        reference for testing and debugging the distributed path).
    theta_solver : {"auto", "cholesky", "cg"}
        How ``theta | z`` is drawn: one Cholesky factor of the d x d precision
        (``"cholesky"``), or a conjugate-gradient solve per sweep that never
        forms it (``"cg"``, for many coefficients; needs a proper prior on
        every coefficient). ``"auto"``: ``"cg"`` when ``d > 2000``. Sharded
        kernels factor the reduced d x d Gram matrix.
    dtype : {"float64", "float32"}
        Storage of the design for the compiled pass over the data;
        ``"float32"`` halves the bytes read per sweep (arithmetic stays
        float64). Sharded kernels use float64.
    """

    def __init__(self, n_shards=None, *, theta_solver: str = "auto", dtype: str = "float64"):
        if n_shards is not None and (
            isinstance(n_shards, bool) or not isinstance(n_shards, int) or n_shards < 1
        ):
            raise ValueError(f"n_shards must be None or a positive integer; received {n_shards!r}.")
        validate_theta_solver(theta_solver)
        if dtype not in ("float64", "float32"):
            raise ValueError(
                f"dtype must be 'float64' or 'float32' (storage of the design for the compiled "
                f"pass); received {dtype!r}."
            )
        if n_shards is not None:
            check_sharded_options(theta_solver, dtype, f"LocalBackend(n_shards={n_shards})")
        self.n_shards = n_shards
        self.theta_solver = theta_solver
        self.dtype = dtype
        self.per_row_rho = n_shards is None

    def build_kernel(self, problem, rho, alpha, log_weights, theta_solver="auto", dtype="float64"):
        if self.n_shards is None:
            return SplitGibbsKernel(
                problem, rho, alpha, log_weights=log_weights, theta_solver=theta_solver, dtype=dtype
            )
        check_sharded_options(theta_solver, dtype, self.describe())
        check_n_shards(self.n_shards, problem)
        workers = [ShardWorker(p, alpha) for p in split_rows(problem, self.n_shards)]
        return ShardedKernel(problem, InProcessShards(workers), rho, alpha, log_weights)

    def describe(self) -> str:
        args = [f"n_shards={self.n_shards}"] if self.n_shards is not None else []
        args += [f"theta_solver={self.theta_solver!r}"] if self.theta_solver != "auto" else []
        args += [f"dtype={self.dtype!r}"] if self.dtype != "float64" else []
        return f"LocalBackend({', '.join(args)})"
