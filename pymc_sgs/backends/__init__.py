"""Where the split Gibbs kernel runs: in this process (default) or on a Dask cluster.

``SplitGibbs(backend=...)`` takes a :class:`Backend`:

- :class:`LocalBackend` (default): the single-machine kernel; with
  ``n_shards`` the rows are cut into in-process shards laid out as on a
  cluster (same draws as :class:`DaskBackend` for the same seed).
- :class:`DaskBackend`: one Dask actor per row shard keeps that shard's
  ``z``; per sweep only theta goes out and d-vectors come back. A shard lost
  with its worker is rebuilt elsewhere (:class:`ShardLostWarning`); when it
  cannot be, sampling stops and ``pm.sample`` keeps the draws made so far
  (:class:`SamplingStopped`), or :class:`ShardLostError` before the first draw.
"""

from .base import Backend
from .dask import DaskBackend
from .local import LocalBackend
from .shard import ShardWorker
from .sharded import (
    SamplingStopped,
    ShardedKernel,
    ShardLostError,
    ShardLostWarning,
    ShardsUnreachable,
)

__all__ = [
    "Backend",
    "LocalBackend",
    "DaskBackend",
    "ShardLostError",
    "ShardLostWarning",
    "SamplingStopped",
    "ShardsUnreachable",
    "ShardedKernel",
    "ShardWorker",
]
