"""SplitGibbs on a Dask cluster: one actor per row shard, theta on the client.

Each shard of rows is held by a Dask actor (:class:`~pymc_sgs.backends.shard.ShardWorker`)
placed on the worker that holds the shard's data; it keeps its z between
sweeps. Per sweep the client sends theta (d floats) to every shard and gets
back ``A_s^T ((z_s - o_s) / rho^2)`` (d floats) and two scalars (acceptance
sum, log-weight sum), the communication pattern of global-consensus Monte
Carlo (Rendell, Johansen, Lee & Whiteley 2021) with the exact split Gibbs
coupling of Vono, Paulin & Doucet (2022).
"""

from __future__ import annotations

import asyncio
import concurrent.futures

import numpy as np

from .base import Backend, check_sharded_options
from .local import check_n_shards
from .shard import ShardWorker, shard_problem_from_arrays, split_rows
from .sharded import ShardedKernel, ShardLostError

__all__ = ["DaskBackend", "DaskShards"]


def _is_dask_array(x) -> bool:
    try:
        import dask.array as da
    except ImportError:  # pragma: no cover - dask is required to construct DaskBackend
        return False
    return isinstance(x, da.Array)


def _check_data_arg(value, name, ndim):
    """A dask array with ``ndim`` dimensions or a non-empty list of array-likes."""
    if value is None:
        return None
    if _is_dask_array(value):
        if value.ndim != ndim:
            raise ValueError(f"{name} must be {ndim}-D; received a dask array of shape {value.shape}.")
        if any(np.isnan(c) for c in value.chunks[0]):
            raise ValueError(
                f"{name} has unknown chunk sizes (e.g. from dask.dataframe); convert it with "
                "to_dask_array(lengths=True)."
            )
        return value
    if isinstance(value, (list, tuple)) and len(value) > 0:
        shards = [np.asarray(v, dtype=float) for v in value]
        for v in shards:
            if v.ndim != ndim and not (ndim == 1 and v.ndim == 2 and v.shape[1] == 1):
                raise ValueError(
                    f"every shard of {name} must be {ndim}-D; received a shard of shape {v.shape}."
                )
        return shards
    raise ValueError(
        f"{name} must be a dask array or a non-empty list of array shards; received "
        f"{type(value).__name__}."
    )


class DaskBackend(Backend):
    """Run the z-block of SplitGibbs on a Dask cluster.

    Parameters
    ----------
    client : distributed.Client
        Client of the cluster (``LocalCluster``, dask-jobqueue, dask-kubernetes, ...).
    X, y : dask array or list of arrays, optional
        The full data of the model's one split likelihood term, replacing the
        data the model was defined with (typically a small head, see the docs
        page "Distributed sampling"). ``X`` holds the rows of the term's design
        in the coefficient layout of the step: its columns are the entries of
        ``theta`` in the order of ``detect_split_problem(model).problem.params``
        (e.g. ``[X, 1]`` for ``beta`` then ``alpha`` in ``alpha + X @ beta``).
        A dask array is used chunk by chunk along its rows (each row chunk is
        one shard); a list gives the shards directly. Without ``X``/``y`` the
        model's own data are cut into ``n_shards`` shards and scattered.
    offset, trials : dask array or list of arrays, optional
        Offset of the linear predictor and Binomial trials, laid out as ``y``.
    n_shards : int, optional
        Number of shards when the model's own data are used (default: one
        per worker).
    timeout : float, optional
        Seconds to wait for a shard before declaring it lost.

    Notes
    -----
    Sample with ``pm.sample(..., cores=1)``: the chains run one after the
    other in the calling process and every sweep is spread over the workers.
    A worker that dies takes its shards' z-state with it; the next sweep then
    raises :class:`~pymc_sgs.backends.ShardLostError` rather than continue
    with part of the data.
    """

    per_row_rho = False

    def __init__(self, client, X=None, y=None, offset=None, trials=None, n_shards=None,
                 timeout=None):
        try:
            from distributed import Client
        except ImportError as err:  # pragma: no cover - optional dependency
            raise ImportError(
                "DaskBackend needs dask.distributed: pip install 'pymc_sgs[dask]'."
            ) from err
        if not isinstance(client, Client):
            raise ValueError(
                f"client must be a distributed.Client; received {type(client).__name__}."
            )
        if (X is None) != (y is None):
            raise ValueError("X and y must be given together (the full data of the split term).")
        if X is None and (offset is not None or trials is not None):
            raise ValueError("offset and trials can only be given together with X and y.")
        if X is not None and n_shards is not None:
            raise ValueError(
                "n_shards applies to the model's own data; with X and y the row chunks of X "
                f"are the shards. Received n_shards={n_shards!r}."
            )
        if n_shards is not None and (
            isinstance(n_shards, bool) or not isinstance(n_shards, int) or n_shards < 1
        ):
            raise ValueError(f"n_shards must be a positive integer; received {n_shards!r}.")
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds; received {timeout!r}.")
        self.client = client
        self.X = _check_data_arg(X, "X", 2)
        self.y = _check_data_arg(y, "y", 1)
        self.offset = _check_data_arg(offset, "offset", 1)
        self.trials = _check_data_arg(trials, "trials", 1)
        if self.X is not None:
            self._check_layout()
        self.n_shards = n_shards
        self.timeout = timeout

    def _check_layout(self):
        X_is_dask = _is_dask_array(self.X)
        for name in ("y", "offset", "trials"):
            v = getattr(self, name)
            if v is None:
                continue
            if _is_dask_array(v) != X_is_dask:
                raise ValueError(f"{name} must be of the same kind as X (dask array or list).")
            rows_v = v.shape[0] if X_is_dask else sum(s.shape[0] for s in v)
            rows_x = self.X.shape[0] if X_is_dask else sum(s.shape[0] for s in self.X)
            if rows_v != rows_x:
                raise ValueError(
                    f"{name} must have one value per row of X ({rows_x}); received {rows_v}."
                )
            if not X_is_dask and [s.shape[0] for s in v] != [s.shape[0] for s in self.X]:
                raise ValueError(f"the shards of {name} must have the same lengths as those of X.")

    def __reduce__(self):
        _refuse_pickling()

    def describe(self) -> str:
        return f"DaskBackend({len(self.client.scheduler_info()['workers'])} workers)"

    # ------------------------------------------------------------------ build
    def _workers(self):
        workers = sorted(self.client.scheduler_info()["workers"])
        if not workers:
            raise ValueError("the Dask cluster of client has no workers.")
        return workers

    def _model_data_shards(self, problem):
        workers = self._workers()
        n_shards = check_n_shards(self.n_shards or len(workers), problem)
        out = []
        for k, shard in enumerate(split_rows(problem, n_shards)):
            w = workers[k % len(workers)]
            out.append((self.client.scatter(shard, workers=[w]), w))
        return out

    def _chunk_futures(self, value):
        """Futures of the row chunks of a dask array (persisted) or of list shards (scattered)."""
        from distributed import wait

        if _is_dask_array(value):
            if value.ndim == 2:
                value = value.rechunk({1: -1})
            value = value.rechunk({0: self._row_chunks})
            value = self.client.persist(value)
            wait(value)
            futs = self.client.futures_of(value)
            return sorted(futs, key=lambda f: f.key[1])
        workers = self._workers()
        return [
            self.client.scatter(v, workers=[workers[k % len(workers)]])
            for k, v in enumerate(value)
        ]

    def _user_data_shards(self, problem):
        if len(problem.split_terms) != 1:
            raise ValueError(
                "X and y replace the data of one split likelihood term; this model has "
                f"{len(problem.split_terms)} ({', '.join(t.name for t in problem.split_terms)}). "
                "Pass the data through the model instead (DaskBackend without X and y)."
            )
        term = problem.split_terms[0]
        if self.trials is None and term.family.name == "binomial":
            raise ValueError("trials must be given with X and y for a Binomial likelihood.")
        self._row_chunks = self.X.chunks[0] if _is_dask_array(self.X) else None
        X_f = self._chunk_futures(self.X)
        others = {
            name: self._chunk_futures(getattr(self, name))
            for name in ("y", "offset", "trials") if getattr(self, name) is not None
        }
        who = self.client.who_has(X_f)
        workers = self._workers()
        out = []
        for k, xf in enumerate(X_f):
            holders = sorted(who.get(xf.key, ()))
            w = holders[0] if holders else workers[k % len(workers)]
            kwargs = {name: futs[k] for name, futs in others.items()}
            prob = self.client.submit(
                shard_problem_from_arrays, term.name, term.family, problem.d, xf,
                kwargs.pop("y"), workers=[w], pure=False, **kwargs,
            )
            out.append((prob, w))
        return out

    def build_kernel(self, problem, rho, alpha, log_weights, theta_solver="auto",
                     dtype="float64"):
        check_sharded_options(theta_solver, dtype, "DaskBackend")
        if self.X is None:
            shards = self._model_data_shards(problem)
        else:
            if not problem.split_terms:
                check_n_shards(1, problem)  # raises: nothing to shard
            shards = self._user_data_shards(problem)
        actors = [
            self.client.submit(ShardWorker, prob, alpha, actor=True, workers=[w], pure=False)
            for prob, w in shards
        ]
        transport = DaskShards(self.client, actors, [w for _, w in shards], self.timeout)
        return ShardedKernel(problem, transport, rho, alpha, log_weights)


class DaskShards:
    """Shards held by Dask actors; a call goes to all of them at once."""

    #: what a call to an actor on a dead (or unreachable) worker raises
    LOST = (OSError, TimeoutError, asyncio.TimeoutError, concurrent.futures.CancelledError)

    def __init__(self, client, actor_futures, workers, timeout=None):
        self.client = client
        self.actor_futures = actor_futures
        self.workers = list(workers)
        self.timeout = timeout
        self.actors = [f.result() for f in actor_futures]  # raises the shards' data errors

    def summaries(self):
        return self.call("summary", [()] * len(self.actors))

    def call(self, name, args_per_shard):
        try:
            pending = [getattr(a, name)(*args) for a, args in zip(self.actors, args_per_shard)]
        except self.LOST as err:
            raise self._lost(None, err) from err
        out = []
        for k, fut in enumerate(pending):
            try:
                out.append(fut.result(timeout=self.timeout))
            except self.LOST as err:
                raise self._lost(k, err) from err
        return out

    def _lost(self, k, err) -> ShardLostError:
        which = "a shard" if k is None else f"shard {k} (on worker {self.workers[k]})"
        return ShardLostError(
            f"{which} of the split Gibbs z-block cannot be reached ({type(err).__name__}: "
            f"{err}); its worker probably died, taking the shard's z-state with it. The chain "
            "cannot continue without those rows. Construct a new SplitGibbs with a new "
            "DaskBackend and sample again."
        )

    def __reduce__(self):
        _refuse_pickling()


def _refuse_pickling():
    # pm.sample(cores > 1) pickles the step into worker processes, where the client's
    # sockets and the actor handles mean nothing
    raise TypeError(
        "SplitGibbs with a DaskBackend cannot be sent to another process: run "
        "pm.sample(..., cores=1) (the chains run one after the other here, and every sweep "
        "is spread over the Dask workers)."
    )
