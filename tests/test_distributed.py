"""SplitGibbs with the z-block on row shards: in-process shards and Dask actors.

The Dask runs must give exactly the draws of the in-process sharded kernel
(same code per shard, same Generator layout), which in turn must sample the
same distribution as the single-machine kernel (checked against it, scaled by
Monte Carlo standard errors, with a negative control that silently drops one
shard's data).
"""

import os
import shutil
import signal
import time

import arviz as az
import numpy as np
import pymc as pm
import pytest

import pymc_sgs
from pymc_sgs.backends import LocalBackend, ShardedKernel, ShardLostError, ShardLostWarning
from pymc_sgs.backends.local import InProcessShards
from pymc_sgs.backends.shard import ShardWorker, split_rows

distributed = pytest.importorskip("distributed")
# short tuning runs: the rho="auto" certificate warning is expected here
pytestmark = pytest.mark.filterwarnings("ignore::pymc_sgs.SamplerFeedbackWarning")
da = pytest.importorskip("dask.array")

N, P = 300, 3


def _data(n=N, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, P))
    y = rng.binomial(1, 1 / (1 + np.exp(-(X @ np.array([1.0, -0.5, 0.25]) + 0.3))))
    return X, y


def _model(X, y):
    with pm.Model() as model:
        X_data = pm.Data("X", X)
        b = pm.Normal("b", 0, 2, shape=P)
        a = pm.Normal("a", 0, 2)
        pm.Bernoulli("y", logit_p=a + X_data @ b, observed=y, shape=X_data.shape[0])
    return model


def _sample(model, step, draws=150, tune=150, chains=1, seed=1, **kw):
    with model:
        return pm.sample(
            draws=draws,
            tune=tune,
            chains=chains,
            cores=1,
            step=step,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
            **kw,
        )


def _same_draws(a, b):
    for name in ("b", "a"):
        np.testing.assert_array_equal(a.posterior[name].values, b.posterior[name].values)
    for stat in ("log_weight", "z_accept", "rho", "exact_accept"):
        np.testing.assert_array_equal(a.sample_stats[stat].values, b.sample_stats[stat].values)


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2,
        processes=True,
        threads_per_worker=1,
        dashboard_address=None,
    )
    cl = distributed.Client(cluster)
    yield cl
    cl.close()
    cluster.close()


# ----------------------------------------------------------------- same draws
@pytest.mark.parametrize(
    "settings, chains",
    [
        (dict(), 2),  # rho="auto", over-relaxed, weights: the default
        # rho=1: acceptance about 0.5, so the shards often restore a rejected proposal
        (dict(rho=1.0, alpha=-0.9, exact=True, exact_sweeps=3), 1),
        (dict(rho=0.3, alpha=0.0, draws=40, tune=20), 1),  # exact z-draws by rejection
    ],
    ids=["auto-rho", "exact", "alpha0"],
)
def test_dask_draws_equal_in_process_shards(client, settings, chains):
    model = _model(*_data())
    settings = dict(settings)
    length = dict(draws=settings.pop("draws", 50), tune=settings.pop("tune", 70), chains=chains)
    local = _sample(
        model,
        pymc_sgs.SplitGibbs(model=model, backend=LocalBackend(n_shards=3), **settings),
        **length,
    )
    step = pymc_sgs.SplitGibbs(
        model=model, backend=pymc_sgs.DaskBackend(client, n_shards=3), **settings
    )
    dask = _sample(model, step, **length)
    _same_draws(local, dask)
    if settings.get("exact"):
        # some proposals were rejected, so the shards' restore path was exercised
        b = dask.posterior["b"].values[0]
        assert np.any(np.all(np.diff(b, axis=0) == 0, axis=1))


@pytest.mark.slow  # compiles NUTS for sigma
def test_gaussian_term_and_free_sigma_stay_on_the_client(client):
    """A Normal likelihood (kept unsplit, sigma by NUTS) next to a sharded Bernoulli term."""
    X, y = _data()
    rng = np.random.default_rng(5)
    Xg = rng.normal(size=(40, P))
    yg = Xg @ np.array([1.0, -0.5, 0.25]) + rng.normal(size=40)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 2, shape=P)
        a = pm.Normal("a", 0, 2)
        sigma = pm.HalfNormal("sigma", 2)
        pm.Bernoulli("y", logit_p=a + X @ b, observed=y)
        pm.Normal("yg", mu=Xg @ b, sigma=sigma, observed=yg)
    runs = []
    for backend in (LocalBackend(n_shards=2), pymc_sgs.DaskBackend(client, n_shards=2)):
        step = pymc_sgs.SplitGibbs([b, a], model=model, rho=0.3, backend=backend)
        runs.append(_sample(model, [step], draws=30, tune=30))
    _same_draws(*runs)
    np.testing.assert_array_equal(
        runs[0].posterior["sigma"].values, runs[1].posterior["sigma"].values
    )


def test_dask_same_seed_same_draws(client):
    model = _model(*_data())
    step = pymc_sgs.SplitGibbs(model=model, rho=0.3, backend=pymc_sgs.DaskBackend(client))
    first = _sample(model, step, draws=40, tune=20)
    again = _sample(model, step, draws=40, tune=20)
    _same_draws(first, again)
    other = _sample(model, step, draws=40, tune=20, seed=2)
    assert not np.array_equal(first.posterior["b"].values, other.posterior["b"].values)
    # the shards run the kernel only: the workers never imported PyMC
    assert not any(client.run(lambda: __import__("sys").modules.get("pymc") is not None).values())


def _shard_bounds(n, k):
    b = np.linspace(0, n, k + 1).round().astype(int)
    return tuple(np.diff(b))


def test_full_data_as_dask_array_on_a_model_of_the_head(client):
    """The model is defined on a head of the data; the backend gets all rows, chunked."""
    X, y = _data()
    full_model = _model(X, y)
    local = _sample(
        full_model,
        pymc_sgs.SplitGibbs(model=full_model, backend=LocalBackend(n_shards=3)),
        draws=30,
        tune=30,
    )
    head_model = _model(X[:20], y[:20])
    chunks = _shard_bounds(N, 3)
    A = np.column_stack([X, np.ones(N)])  # coefficient layout: b (3), then a
    backend = pymc_sgs.DaskBackend(
        client,
        X=da.from_array(A, chunks=(chunks, 2)),
        y=da.from_array(y.astype(float), chunks=chunks),
    )
    step = pymc_sgs.SplitGibbs(model=head_model, backend=backend)
    assert step.kernel.n == N
    assert f"n_split={N}," in repr(step) and "DaskBackend" in repr(step)
    _same_draws(local, _sample(head_model, step, draws=30, tune=30))


def test_full_data_as_a_list_of_shards(client):
    X, y = _data()
    full_model = _model(X, y)
    local = _sample(
        full_model,
        pymc_sgs.SplitGibbs(model=full_model, rho=0.3, backend=LocalBackend(n_shards=3)),
        draws=30,
        tune=10,
    )
    A = np.column_stack([X, np.ones(N)])
    cuts = np.cumsum(_shard_bounds(N, 3))[:-1]
    backend = pymc_sgs.DaskBackend(client, X=np.split(A, cuts), y=np.split(y, cuts))
    head_model = _model(X[:20], y[:20])
    step = pymc_sgs.SplitGibbs(model=head_model, rho=0.3, backend=backend)
    _same_draws(local, _sample(head_model, step, draws=30, tune=10))


def test_full_data_from_parquet_files(client, tmp_path):
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    pytest.importorskip("pyarrow")
    X, y = _data()
    frame = pd.DataFrame(X, columns=["x0", "x1", "x2"]).assign(one=1.0, y=y.astype(float))
    cut = _shard_bounds(N, 2)[0]
    frame.iloc[:cut].to_parquet(tmp_path / "part0.parquet")
    frame.iloc[cut:].to_parquet(tmp_path / "part1.parquet")
    ddf = dd.read_parquet(str(tmp_path / "*.parquet"))
    # one conversion for all columns keeps X and y chunked alike
    arr = ddf[["x0", "x1", "x2", "one", "y"]].to_dask_array(lengths=True)
    assert arr.chunks[0] == (cut, N - cut)
    backend = pymc_sgs.DaskBackend(client, X=arr[:, :4], y=arr[:, 4])
    head_model = _model(X[:10], y[:10])
    step = pymc_sgs.SplitGibbs(model=head_model, rho=0.3, backend=backend)
    full_model = _model(X, y)
    local = pymc_sgs.SplitGibbs(model=full_model, rho=0.3, backend=LocalBackend(n_shards=2))
    _same_draws(
        _sample(full_model, local, draws=40, tune=20), _sample(head_model, step, draws=40, tune=20)
    )


# ---------------------------------------------------------- same distribution
def _posterior_mean_check(idata_a, idata_b):
    """max over coefficients of |mean_a - mean_b| / sqrt(mcse_a^2 + mcse_b^2)."""
    z = []
    for name in ("b", "a"):
        ma, mb = (i.posterior[name].mean(("chain", "draw")).values for i in (idata_a, idata_b))
        sa = az.mcse(idata_a, var_names=[name])[name].values
        sb = az.mcse(idata_b, var_names=[name])[name].values
        z.append(np.atleast_1d(np.abs(ma - mb) / np.sqrt(sa**2 + sb**2 + 1e-6)))
    return float(np.max(np.concatenate(z)))


class _DropLastShard(InProcessShards):
    """Negative control: a transport that silently loses the last shard's data."""

    def call(self, name, args_per_shard):
        out = super().call(name, args_per_shard)
        if name == "batch":  # deferred calls, then the one whose result is returned
            name = args_per_shard[0][0][-1][0]
        if name in ("start", "split_rhs", "sample_z", "z_pass"):
            last = out[-1]
            out[-1] = (
                np.zeros_like(last)
                if name in ("start", "split_rhs")
                else ((np.zeros_like(last[0]),) + tuple(last[1:]))
            )
        return out


class _BrokenBackend(LocalBackend):
    def build_kernel(self, problem, rho, alpha, log_weights, **options):
        workers = [ShardWorker(p, alpha) for p in split_rows(problem, self.n_shards)]
        return ShardedKernel(problem, _DropLastShard(workers), rho, alpha, log_weights)


def test_sharded_kernel_samples_the_single_machine_distribution():
    model = _model(*_data())
    kw = dict(draws=1000, tune=200, chains=2, seed=3)
    # a sweep every draw: the sweeps are what the shards compute (the shift move's passes
    # are checked against one process in test_sharded_laplace_start_and_shift_move_...)
    opts = dict(model=model, rho=0.3, sweep_every=1)
    single = _sample(model, pymc_sgs.SplitGibbs(**opts), **kw)
    sharded = _sample(model, pymc_sgs.SplitGibbs(**opts, backend=LocalBackend(n_shards=3)), **kw)
    assert _posterior_mean_check(single, sharded) < 4.0
    broken = _sample(model, pymc_sgs.SplitGibbs(**opts, backend=_BrokenBackend(n_shards=3)), **kw)
    assert _posterior_mean_check(single, broken) > 4.0


# ------------------------------------------------------------------ bad input
def test_backend_argument_is_validated():
    model = _model(*_data())
    with pytest.raises(ValueError, match="backend must be a pymc_sgs back end.*received str"):
        pymc_sgs.SplitGibbs(model=model, backend="dask")
    with pytest.raises(ValueError, match="n_shards must be"):
        LocalBackend(n_shards=0)
    with pytest.raises(ValueError, match="n_shards must be at most"):
        pymc_sgs.SplitGibbs(model=model, backend=LocalBackend(n_shards=N + 1))


def test_dask_backend_input_errors(client):
    X, y = _data()
    model = _model(X[:20], y[:20])
    A = np.column_stack([X, np.ones(N)])
    with pytest.raises(ValueError, match="client must be a distributed.Client"):
        pymc_sgs.DaskBackend("tcp://127.0.0.1:8786")
    with pytest.raises(ValueError, match="X and y must be given together"):
        pymc_sgs.DaskBackend(client, X=da.from_array(A))
    with pytest.raises(ValueError, match="timeout must be a positive number.*received -1"):
        pymc_sgs.DaskBackend(client, timeout=-1)
    with pytest.raises(ValueError, match="n_shards applies to the model's own data"):
        pymc_sgs.DaskBackend(client, X=da.from_array(A), y=da.from_array(y), n_shards=2)
    with pytest.raises(ValueError, match="rho must be 'auto' or a scalar"):
        pymc_sgs.SplitGibbs(model=model, rho=np.full(20, 0.3), backend=pymc_sgs.DaskBackend(client))
    with pytest.raises(ValueError, match="X must have d=4 columns.*received a chunk of shape"):
        pymc_sgs.SplitGibbs(
            model=model,
            backend=pymc_sgs.DaskBackend(client, X=da.from_array(X), y=da.from_array(y)),
        )
    bad_y = y.astype(float).copy()
    bad_y[7] = 2.0
    with pytest.raises(ValueError, match="y"):
        pymc_sgs.SplitGibbs(
            model=model,
            backend=pymc_sgs.DaskBackend(client, X=da.from_array(A), y=da.from_array(bad_y)),
        )
    bad_A = A.copy()
    bad_A[3, 1] = np.nan
    with pytest.raises(ValueError, match="X must be finite"):
        pymc_sgs.SplitGibbs(
            model=model,
            backend=pymc_sgs.DaskBackend(client, X=da.from_array(bad_A), y=da.from_array(y)),
        )
    with pytest.raises(ValueError, match="y must have one value per row of X"):
        pymc_sgs.DaskBackend(client, X=da.from_array(A), y=da.from_array(y[:-1]))
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    ddf = dd.from_pandas(pd.DataFrame(A), npartitions=2)
    with pytest.raises(ValueError, match="lengths=True"):
        pymc_sgs.DaskBackend(client, X=ddf.to_dask_array(), y=da.from_array(y))


def test_dask_step_is_not_sent_to_other_processes(client):
    model = _model(*_data())
    step = pymc_sgs.SplitGibbs(model=model, rho=0.3, backend=pymc_sgs.DaskBackend(client))
    cloudpickle = pytest.importorskip("cloudpickle")  # what pm.sample(cores>1) uses
    with pytest.raises(TypeError, match="cores=1"):
        cloudpickle.dumps(step)
    cloudpickle.dumps(pymc_sgs.SplitGibbs(model=model, rho=0.3, backend=LocalBackend(n_shards=2)))


# ----------------------------------------------------- Laplace start and shift move on shards
def test_sharded_laplace_start_and_shift_move_match_one_process():
    """The Newton passes, the pilot rho, the shift move's constants and its potential change,
    summed over the shards, equal the single-machine kernel's; a committed move shifts every
    shard's z."""
    from pymc_sgs.rho import pilot_rho
    from pymc_sgs.shift import ShiftMove
    from pymc_sgs.start import laplace_start

    model = _model(*_data())
    one = pymc_sgs.SplitGibbs(model=model, rho=0.3).kernel
    sharded = pymc_sgs.SplitGibbs(model=model, rho=0.3, backend=LocalBackend(n_shards=3)).kernel
    d = one.problem.d
    s1 = laplace_start(one, np.zeros(d), np.random.default_rng(0))
    s2 = laplace_start(sharded, np.zeros(d), np.random.default_rng(0))
    for a, b in ((s1.mode, s2.mode), (s1.chol, s2.chol), (s1.theta, s2.theta)):
        np.testing.assert_allclose(b, a, rtol=1e-8, atol=1e-10)
    # the pilot rho of rho="auto" (secant steps on a variance summed over the rows)
    pilot = pilot_rho(one, s1.mode, s1.chol, 0.1)
    np.testing.assert_allclose(pilot_rho(sharded, s1.mode, s1.chol, 0.1), pilot, rtol=1e-8)
    assert pilot != 0.5  # it moved from its starting value
    m1 = ShiftMove(one, s1.mode, s1.chol)
    m2 = ShiftMove(sharded, s1.mode, s1.chol)
    np.testing.assert_allclose(m2.mean_curvature(), m1.mean_curvature(), rtol=1e-10)
    offset = m1._compute_mean_offset()
    assert np.linalg.norm(offset) > 1e-3
    np.testing.assert_allclose(m2._compute_mean_offset(), offset, rtol=1e-8, atol=1e-12)
    state = sharded.init(s1.theta, np.random.default_rng(1))
    z = np.concatenate([w.z for w in sharded.transport.workers])  # shards hold rows in order
    delta = np.linspace(-0.2, 0.3, d)
    change = m2._split_change(state.z, delta)[0]
    np.testing.assert_allclose(change, one.rows.shift_propose(z, delta)[0], rtol=1e-10)
    calls = []
    call = sharded.transport.call
    sharded.transport.call = lambda name, args: calls.append(name) or call(name, args)
    m2._accepted(state, s1.theta + delta, delta, None, None)
    # the commit waits for the next call to the shards and rides on it: no round trip of
    # its own
    assert calls == []
    np.testing.assert_array_equal(np.concatenate([w.z for w in sharded.transport.workers]), z)
    atz = np.sum(sharded.rows._broadcast("split_rhs", 0.3), axis=0)
    assert calls == ["batch"]
    np.testing.assert_allclose(
        np.concatenate([w.z for w in sharded.transport.workers]), z + one.rows.A @ delta, rtol=1e-12
    )
    np.testing.assert_allclose(
        atz, one.rows.A.T @ (z + one.rows.A @ delta - one.rows.offset) / 0.09, rtol=1e-10
    )
    sharded.rows._broadcast("split_rhs", 0.3)
    assert calls == ["batch", "split_rhs"]


def test_shift_move_runs_on_shards():
    # correlated features: without the shift move the sharded chain crawls at rho = 0.1
    rng = np.random.default_rng(4)
    X = np.sqrt(0.95) * rng.normal(size=(2000, 1)) + np.sqrt(0.05) * rng.normal(size=(2000, 8))
    y = rng.binomial(1, 1 / (1 + np.exp(-X @ rng.normal(size=8) / np.sqrt(8))))
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=8)
        pm.Bernoulli("y", logit_p=X @ b, observed=y)
    ess = {}
    for shift in (True, False):
        idata = _sample(
            model,
            pymc_sgs.SplitGibbs(
                model=model, rho=0.1, shift=shift, backend=LocalBackend(n_shards=2)
            ),
            draws=300,
            tune=300,
        )
        ess[shift] = float(az.ess(idata.posterior)["b"].min())
        acc = idata.sample_stats["shift_accept"].values
        if shift:
            assert np.all(np.isfinite(acc)) and np.mean(acc) > 0.5, np.mean(acc)
        else:
            assert np.all(np.isnan(acc))
    assert ess[True] > 5 * ess[False], ess


# ------------------------------------------------------------------ worker loss
# Kept last in this file: these tests kill workers of the module's cluster (each nanny starts
# an empty worker again; the fixture waits for it, so the cluster has two workers afterwards).
@pytest.fixture
def kill(client):
    """``kill(worker)``: SIGKILL the worker's process, which dies without a word, as a lost
    machine does."""
    killed = []

    def kill_worker(worker):
        killed.append(worker)
        os.kill(client.run(os.getpid, workers=[worker])[worker], signal.SIGKILL)

    yield kill_worker
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        workers = set(client.scheduler_info()["workers"])
        if len(workers) == 2 and not workers & set(killed):
            break
        time.sleep(0.1)


def _reference(model, draws, chains=1):
    """The in-process run that the Dask run equals until a shard is lost."""
    step = pymc_sgs.SplitGibbs(model=model, rho=0.3, backend=LocalBackend(n_shards=2))
    return _sample(model, step, draws=draws, tune=0, chains=chains)


@pytest.mark.parametrize("data", ["model", "list", "dask-array"])
def test_lost_worker_is_rebuilt_and_the_chain_continues(client, kill, data):
    """The lost shard is rebuilt on a live worker from its data (the model's rows cut again,
    a list shard sent again, a dask chunk recomputed from its graph), its z redrawn from
    z | theta, and every draw is kept."""
    X, y = _data()
    model = _model(X, y)
    if data == "model":
        backend = pymc_sgs.DaskBackend(client)
    else:
        A = np.column_stack([X, np.ones(N)])  # coefficient layout: b (3), then a
        cut = _shard_bounds(N, 2)[0]
        if data == "list":
            backend = pymc_sgs.DaskBackend(client, X=[A[:cut], A[cut:]], y=[y[:cut], y[cut:]])
        else:
            chunks = (cut, N - cut)
            backend = pymc_sgs.DaskBackend(
                client,
                X=da.from_array(A, chunks=(chunks, 2)),
                y=da.from_array(y.astype(float), chunks=chunks),
            )
    head = model if data == "model" else _model(X[:20], y[:20])
    step = pymc_sgs.SplitGibbs(model=head, rho=0.3, backend=backend)
    victim = step.kernel.transport.workers[0]

    def kill_at_draw_20(trace, draw):
        if draw.draw_idx == 20:
            kill(victim)

    with pytest.warns(
        ShardLostWarning, match=r"shard 0 \(on worker .*rebuilt on worker .*z redrawn"
    ):
        idata = _sample(head, step, draws=60, tune=0, callback=kill_at_draw_20)
    b = idata.posterior["b"].values[0]
    ref = _reference(model, 60).posterior["b"].values[0]
    assert b.shape == ref.shape and np.all(np.isfinite(b))
    np.testing.assert_array_equal(b[:21], ref[:21])  # the same chain until the loss
    assert not np.array_equal(b[21:], ref[21:])  # the rebuilt shard has a new Generator
    assert step.kernel.transport.workers[0] != victim
    assert step.kernel.n == N


def test_worker_lost_before_the_first_draw_is_rebuilt(client, kill):
    """Nothing was sampled yet, so the rebuilt shard restarts from its own seed and the
    draws are those of a run without the loss."""
    model = _model(*_data())
    step = pymc_sgs.SplitGibbs(model=model, rho=0.3, backend=pymc_sgs.DaskBackend(client))
    kill(step.kernel.transport.workers[0])
    with pytest.warns(ShardLostWarning, match=r"shard 0 .*rebuilt on worker"):
        idata = _sample(model, step, draws=30, tune=0)
    _same_draws(_reference(model, 30), idata)


def test_closed_client_before_the_first_draw_raises_shard_lost_error(client):
    """Without recovery and nothing to keep: a ShardLostError that names the cause."""
    other = distributed.Client(client.scheduler.address)
    model = _model(*_data())
    step = pymc_sgs.SplitGibbs(model=model, rho=0.3, backend=pymc_sgs.DaskBackend(other))
    other.close()
    with pytest.raises(ShardLostError, match=r"client was closed.*Nothing had been sampled"):
        _sample(model, step, draws=10, tune=0)


def test_closed_client_stops_promptly_and_keeps_the_draws(client):
    """client.close() mid-run is named as such, at once; the draws made so far come back
    from pm.sample (chain 0 up to the close; chain 1 stops before its first draw)."""
    other = distributed.Client(client.scheduler.address)
    model = _model(*_data())
    step = pymc_sgs.SplitGibbs(model=model, rho=0.3, backend=pymc_sgs.DaskBackend(other))
    closed = []

    def close_at_draw_20(trace, draw):
        if draw.chain == 0 and draw.draw_idx == 20:
            other.close()
            closed.append(time.monotonic())

    with pytest.warns(ShardLostWarning, match=r"client was closed.*21 draws of this chain") as rec:
        idata = _sample(model, step, draws=200, tune=0, chains=2, callback=close_at_draw_20)
    assert time.monotonic() - closed[0] < 10
    assert not any("died" in str(w.message) for w in rec)
    assert dict(idata.posterior.sizes) == {"chain": 1, "draw": 21, "b_dim_0": P}
    ref = _reference(model, 21, chains=2)
    np.testing.assert_array_equal(idata.posterior["b"].values[0], ref.posterior["b"].values[0])


def test_lost_shard_whose_data_are_gone_stops_and_keeps_the_draws(client, kill, tmp_path):
    """The shard's rows were read from files that no longer exist: sampling stops with the
    draws made so far."""
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    pytest.importorskip("pyarrow")
    X, y = _data()
    frame = pd.DataFrame(X, columns=["x0", "x1", "x2"]).assign(one=1.0, y=y.astype(float))
    cut = _shard_bounds(N, 2)[0]
    (tmp_path / "data").mkdir()
    frame.iloc[:cut].to_parquet(tmp_path / "data" / "part0.parquet")
    frame.iloc[cut:].to_parquet(tmp_path / "data" / "part1.parquet")
    arr = dd.read_parquet(str(tmp_path / "data" / "*.parquet"))[
        ["x0", "x1", "x2", "one", "y"]
    ].to_dask_array(lengths=True)
    backend = pymc_sgs.DaskBackend(client, X=arr[:, :4], y=arr[:, 4])
    head = _model(X[:10], y[:10])
    step = pymc_sgs.SplitGibbs(model=head, rho=0.3, backend=backend)
    shutil.rmtree(tmp_path / "data")  # the rows now exist only in the shards
    victim = step.kernel.transport.workers[0]

    def kill_at_draw_20(trace, draw):
        if draw.draw_idx == 20:
            kill(victim)

    with pytest.warns(
        ShardLostWarning,
        match=r"shard 0 \(on worker .*cannot be rebuilt.*"
        r"21 draws of this chain",
    ):
        idata = _sample(head, step, draws=200, tune=0, callback=kill_at_draw_20)
    _same_draws(_reference(_model(X, y), 21), idata)


def test_no_worker_left_stops_and_keeps_the_draws():
    """Every worker is gone (a cluster of its own, scaled down to none)."""
    cluster = distributed.LocalCluster(
        n_workers=1, processes=False, threads_per_worker=1, dashboard_address=None
    )
    with cluster, distributed.Client(cluster) as own:
        model = _model(*_data())
        step = pymc_sgs.SplitGibbs(
            model=model, rho=0.3, backend=pymc_sgs.DaskBackend(own, n_shards=2)
        )

        def remove_all_workers_at_draw_20(trace, draw):
            if draw.draw_idx == 20:
                cluster.scale(0)
                while own.scheduler_info()["workers"]:
                    time.sleep(0.02)

        with pytest.warns(
            ShardLostWarning,
            match=r"shard 0 .*shard 1 .*they cannot be rebuilt: "
            r"no live worker is left.*21 draws of this chain",
        ):
            idata = _sample(model, step, draws=100, tune=0, callback=remove_all_workers_at_draw_20)
    _same_draws(_reference(model, 21), idata)
