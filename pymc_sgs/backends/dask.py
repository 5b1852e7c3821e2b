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
import functools
import time
from typing import Any

import numpy as np

from .base import Backend, check_sharded_options
from .local import check_n_shards
from .shard import ShardWorker, row_shard, shard_problem_from_arrays, split_rows
from .sharded import ShardedKernel, ShardsUnreachable

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
            raise ValueError(
                f"{name} must be {ndim}-D; received a dask array of shape {value.shape}."
            )
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
        Seconds to wait for a shard before declaring it lost, and for a lost
        shard to be rebuilt (default: no limit for a call,
        :attr:`DaskShards.REBUILD_TIMEOUT` for a rebuild).

    Notes
    -----
    Sample with ``pm.sample(..., cores=1)``: the chains run one after the
    other in the calling process and every sweep is spread over the workers.

    A worker that dies takes its shards' z-state with it. Each lost shard is
    rebuilt on a live worker from its data (the model's rows or list shards sent
    again from here, dask-array chunks recomputed from their graph) and its z
    drawn afresh from ``z_shard | theta``, a Gibbs update of that block that
    keeps the target; a :class:`~pymc_sgs.backends.ShardLostWarning` says so and
    sampling goes on. When that is impossible (the client was closed, no worker
    is left, the rows cannot be loaded again), sampling stops with a
    :class:`~pymc_sgs.backends.ShardLostWarning` and ``pm.sample`` returns the
    draws made so far; before the first draw it raises
    :class:`~pymc_sgs.backends.ShardLostError` instead.
    """

    per_row_rho = False

    def __init__(
        self,
        client: Any,
        X: Any = None,
        y: Any = None,
        offset: Any = None,
        trials: Any = None,
        n_shards: int | None = None,
        timeout: float | None = None,
    ) -> None:
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
        # a lost shard's rows are cut from the model's data again and sent
        return out, functools.partial(self._model_data_shard, problem, n_shards)

    def _model_data_shard(self, problem, n_shards, k, worker):
        return self.client.scatter(row_shard(problem, n_shards, k), workers=[worker])

    def _row_chunked(self, value):
        """A dask array in the row chunks of the shards, all its columns in each."""
        if value.ndim == 2:
            value = value.rechunk({1: -1})
        return value.rechunk({0: self._row_chunks})

    def _chunk_futures(self, value):
        """Futures of the row chunks of a dask array (persisted) or of list shards (scattered)."""
        from distributed import wait

        if _is_dask_array(value):
            value = self.client.persist(self._row_chunked(value))
            wait(value)
            futs = self.client.futures_of(value)
            return sorted(futs, key=lambda f: f.key[1])
        workers = self._workers()
        return [
            self.client.scatter(v, workers=[workers[k % len(workers)]]) for k, v in enumerate(value)
        ]

    def _chunk_future(self, value, k, worker):
        """Row chunk ``k`` again on ``worker``: recomputed from the dask graph (the chunks
        persisted at the start are not kept, which would hold the data twice) or sent."""
        if _is_dask_array(value):
            return self.client.compute(self._row_chunked(value).blocks[k], workers=[worker])
        return self.client.scatter(value[k], workers=[worker])

    def _user_data_shards(self, problem):
        if len(problem.split_terms) != 1:
            raise ValueError(
                "X and y replace the data of one split likelihood term; this model has "
                f"{len(problem.split_terms)} ({', '.join(t.name for t in problem.split_terms)}). "
                "Pass the data through the model instead (DaskBackend without X and y)."
            )
        term = problem.split_terms[0]
        # Binomial rows carry trials (an asymmetric Laplace's "trials" are its rates, in the model)
        if self.trials is None and term.family.has_trials and not term.family.piecewise_linear:
            raise ValueError("trials must be given with X and y for a Binomial likelihood.")
        self._row_chunks = self.X.chunks[0] if _is_dask_array(self.X) else None
        X_f = self._chunk_futures(self.X)
        others = {
            name: self._chunk_futures(getattr(self, name))
            for name in ("y", "offset", "trials")
            if getattr(self, name) is not None
        }
        who = self.client.who_has(X_f)
        workers = self._workers()
        out = []
        for k, xf in enumerate(X_f):
            holders = sorted(who.get(xf.key, ()))
            w = holders[0] if holders else workers[k % len(workers)]
            kwargs = {name: futs[k] for name, futs in others.items()}
            prob = self.client.submit(
                shard_problem_from_arrays,
                term.name,
                term.family,
                problem.d,
                xf,
                kwargs.pop("y"),
                workers=[w],
                pure=False,
                **kwargs,
            )
            out.append((prob, w))
        return out, functools.partial(self._user_data_shard, term, problem.d)

    def _user_data_shard(self, term, d, k, worker):
        arrays = {
            name: self._chunk_future(getattr(self, name), k, worker)
            for name in ("X", "y", "offset", "trials")
            if getattr(self, name) is not None
        }
        return self.client.submit(
            shard_problem_from_arrays,
            term.name,
            term.family,
            d,
            arrays.pop("X"),
            arrays.pop("y"),
            workers=[worker],
            pure=False,
            **arrays,
        )

    def build_kernel(self, problem, rho, alpha, log_weights, theta_solver="auto", dtype="float64"):
        check_sharded_options(theta_solver, dtype, "DaskBackend")
        if self.X is None:
            shards, shard_data = self._model_data_shards(problem)
        else:
            if not problem.split_terms:
                check_n_shards(1, problem)  # raises: nothing to shard
            shards, shard_data = self._user_data_shards(problem)
        actors = [
            self.client.submit(ShardWorker, prob, alpha, actor=True, workers=[w], pure=False)
            for prob, w in shards
        ]
        transport = DaskShards(
            self.client,
            actors,
            [w for _, w in shards],
            self.timeout,
            rebuild=functools.partial(self._new_actor, shard_data, alpha),
        )
        return ShardedKernel(problem, transport, rho, alpha, log_weights)

    def _new_actor(self, shard_data, alpha, k, worker):
        """Future of a fresh actor for shard ``k`` on ``worker``, its rows sent again."""
        prob = shard_data(k, worker)
        return self.client.submit(
            ShardWorker, prob, alpha, actor=True, workers=[worker], pure=False
        )


class DaskShards:
    """Shards held by Dask actors; a call goes to all of them at once.

    Parameters
    ----------
    client : distributed.Client
    actor_futures : list of distributed.Future
        One :class:`~pymc_sgs.backends.shard.ShardWorker` actor per shard.
    workers : list of str
        The worker holding each actor.
    timeout : float, optional
        Seconds to wait for a shard's answer before declaring it lost (None: no
        limit), and for a rebuild (None: :attr:`REBUILD_TIMEOUT`).
    rebuild : callable, optional
        ``rebuild(k, worker)``: future of a new actor for shard ``k`` on ``worker``
        with the shard's rows; None if shards cannot be rebuilt.
    """

    #: what a call to an actor on a dead (or unreachable) worker raises
    LOST = (OSError, TimeoutError, asyncio.TimeoutError, concurrent.futures.CancelledError)
    #: seconds between checks that the client is still open, while waiting for a shard
    POLL = 1.0
    #: default limit in seconds for rebuilding a lost shard (its rows sent or recomputed)
    REBUILD_TIMEOUT = 600.0

    def __init__(self, client, actor_futures, workers, timeout=None, rebuild=None):
        self.client = client
        self.actor_futures = list(actor_futures)
        self.workers = list(workers)
        self.timeout = timeout
        self.rebuild = rebuild
        # workers that lost a shard: not chosen for a rebuilt one
        self._dead = set()
        self.actors = [f.result() for f in self.actor_futures]  # raises the shards' data errors

    def summaries(self):
        return self.call("summary", [()] * len(self.actors))

    def _client_gone(self) -> str | None:
        """Why no shard can be reached through the client, or None when it is usable."""
        status = getattr(self.client, "status", "running")
        if status in ("closing", "closed"):
            return (
                "the Dask client was closed (client.close()), and without a client no shard "
                "can be reached or rebuilt"
            )
        if status != "running":
            return (
                f"the Dask client is not connected to its scheduler (status {status!r}), so "
                "no shard can be reached or rebuilt"
            )
        return None

    def _wait(self, future, timeout):
        """The result of ``future``, checking every :attr:`POLL` s that the client is open
        (a closed client's calls may never answer)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            step = self.POLL if deadline is None else min(self.POLL, deadline - time.monotonic())
            try:
                return future.result(timeout=max(step, 0.0))
            except (TimeoutError, asyncio.TimeoutError):
                if self._client_gone():
                    raise OSError("the client was closed") from None
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"no answer within timeout={timeout} s") from None

    def _lost(self, k, err) -> str:
        return f"on worker {self.workers[k]}: {type(err).__name__}: {err}"

    def call(self, name, args_per_shard, shards=None):
        """``name(*args)`` on the given shards (default all): their results, in order.

        Raises :class:`~pymc_sgs.backends.sharded.ShardsUnreachable` when some did not
        answer, with the others' results (every shard has been waited for, so none is
        still running the call).
        """
        index = range(len(self.actors)) if shards is None else list(shards)
        gone = self._client_gone()
        if gone:
            raise ShardsUnreachable(
                gone, [None] * len(index), {k: f"on worker {self.workers[k]}" for k in index}, gone
            )
        pending, lost = [], {}
        for k, args in zip(index, args_per_shard):
            try:
                pending.append(getattr(self.actors[k], name)(*args))
            except RuntimeError as err:
                # the actor handle refuses calls once the scheduler has lost its task
                if self.actor_futures[k].status in ("finished", "pending"):
                    raise
                pending.append(None)
                lost[k] = self._lost(k, err)
            except self.LOST as err:
                pending.append(None)
                lost[k] = self._lost(k, err)
        out = []
        for k, fut in zip(index, pending):
            result = None
            if fut is not None:
                try:
                    result = self._wait(fut, self.timeout)
                except self.LOST as err:
                    lost[k] = self._lost(k, err)
                except RuntimeError as err:  # the client's event loop is closed
                    if not self._client_gone():
                        raise
                    lost[k] = self._lost(k, err)
            out.append(result)
        if lost:
            gone = self._client_gone()
            raise ShardsUnreachable(
                gone or f"shards {sorted(lost)} did not answer", out, lost, gone
            )
        return out

    def replace(self, k) -> str:
        """Rebuild shard ``k`` on a live worker (its rows sent again); where it went.

        Raises :class:`~pymc_sgs.backends.sharded.ShardsUnreachable` with ``fatal`` set
        when no worker is left or the rows cannot be loaded again.
        """
        if self.rebuild is None:
            raise ShardsUnreachable("no rebuild", fatal="this transport cannot rebuild shards")
        self._dead.add(self.workers[k])
        # the scheduler would otherwise keep the dead actor's task, and may try to run it
        self.actor_futures[k].release()
        timeout = self.REBUILD_TIMEOUT if self.timeout is None else self.timeout
        while True:
            gone = self._client_gone()
            if gone:
                raise ShardsUnreachable(gone, fatal=gone)
            alive = [w for w in self.client.scheduler_info()["workers"] if w not in self._dead]
            if not alive:
                raise ShardsUnreachable(
                    "no worker", fatal="no live worker is left in the cluster to take its rows"
                )
            # the least loaded live worker
            worker = min(alive, key=lambda w: (self.workers.count(w), w))
            try:
                future = self.rebuild(k, worker)
                actor = self._wait(future, timeout)
            except Exception as err:  # noqa: BLE001 - any failure: tell why, or try elsewhere
                if self._client_gone():
                    continue
                if worker not in self.client.scheduler_info()["workers"]:
                    self._dead.add(worker)  # died meanwhile
                    continue
                raise ShardsUnreachable(
                    "cannot rebuild",
                    fatal=(
                        f"its rows could not be loaded again on worker {worker} "
                        f"({type(err).__name__}: {err})"
                    ),
                ) from err
            self.actor_futures[k], self.actors[k], self.workers[k] = future, actor, worker
            return f"worker {worker}"

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
