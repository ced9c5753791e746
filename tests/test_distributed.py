"""Fits and predictions on Dask arrays (estimators.distributed), 2-worker LocalCluster.

The truths: the statistics of the in-memory pass (:func:`bayes_rvm.basis.statistics.accumulate`) and
the in-memory estimator's predictions on the same data; the bad inputs of issue 29 (unknown chunk
sizes, mismatched row blocks, NaN in a block, a worker that dies mid-pass).
"""

import os
import sys

import numpy as np
import pytest
from sklearn.metrics.pairwise import rbf_kernel

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
cloudpickle = pytest.importorskip("cloudpickle")

from bayes_rvm.basis.kernels import KernelBasis  # noqa: E402
from bayes_rvm.basis.statistics import accumulate  # noqa: E402
from bayes_rvm.estimators.distributed import dask_statistics, dask_training_data  # noqa: E402
from bayes_rvm.estimators.regressor import RVR  # noqa: E402

# The worker processes cannot import this test module: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def local_client(processes: bool):
    """A 2-worker LocalCluster of one thread each (the 2-core machine) and its client."""
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=processes, dashboard_address=None
    )
    return cluster, distributed.Client(cluster)


@pytest.fixture(scope="module")
def client():
    # Workers in this process start in a second, not the ten that worker processes take to
    # import the package on a busy machine; the test of a dying worker runs processes, which
    # also carries the statistics across a pickle, as on a real cluster.
    cluster, c = local_client(processes=False)
    with cluster, c:
        yield c


def smooth_data(n, seed=0, outputs=1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    f = np.sin(X[:, 0]) * np.cos(X[:, 1])
    y = f + 0.1 * rng.normal(size=n)
    return X, (y if outputs == 1 else np.column_stack([y, 2 * f - 0.5]))


@pytest.fixture(scope="module")
def data():
    X, y = smooth_data(6000)
    basis = KernelBasis("rbf", gamma=0.5).fit(X, centres=X[:80])
    return X, y, basis


def test_statistics_of_uneven_blocks_equal_the_in_memory_pass(client, data):
    X, y, basis = data
    # Uneven row blocks, y cut differently (rechunked to X's), X in two column blocks.
    dX = da.from_array(X, chunks=((1000, 2500, 7, 2493), (1, 1)))
    dy = da.from_array(y, chunks=1700)
    got = dask_statistics(basis, dX, dy, split_every=2)
    want = accumulate(basis, X, y)
    assert got.n == 6000
    np.testing.assert_allclose(got.gram, want.gram, rtol=1e-12, atol=1e-12 * want.gram.max())
    np.testing.assert_allclose(got.cross, want.cross, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got.tt, np.sum(y**2), rtol=1e-12)
    np.testing.assert_allclose(got.t_sum, np.sum(y), rtol=1e-10)
    # The same as the dense sums, independently of the statistics module.
    Phi = basis.transform(X)
    np.testing.assert_allclose(got.gram, Phi.T @ Phi, rtol=1e-10, atol=1e-10)


def test_multi_output_statistics_and_an_in_memory_y(client, data):
    X, _, basis = data
    _, Y = smooth_data(6000, outputs=2)
    got = dask_statistics(basis, da.from_array(X, chunks=1500), Y)
    Phi = basis.transform(X)
    np.testing.assert_allclose(got.cross, Phi.T @ Y, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(got.tt, (Y**2).sum(axis=0), rtol=1e-12)


def test_unknown_chunk_sizes_are_refused_with_the_remedy(data):
    X, y, _ = data
    dX, dy = da.from_array(X, chunks=1000), da.from_array(y, chunks=1000)
    keep = dX[:, 0] > 0
    with pytest.raises(ValueError, match=r"X has unknown chunk sizes.*compute_chunk_sizes"):
        dask_training_data(dX[keep], dy[keep])
    with pytest.raises(ValueError, match=r"y has unknown chunk sizes"):
        dask_training_data(dX, dy[dy > -np.inf])


def test_row_counts_that_differ_are_refused(data):
    X, y, _ = data
    with pytest.raises(ValueError, match="X has 6000 rows but y has 5999"):
        dask_training_data(da.from_array(X, chunks=1000), da.from_array(y[:-1], chunks=1000))
    with pytest.raises(TypeError, match="numeric"):
        dask_training_data(da.from_array(X, chunks=1000), da.from_array(y.astype(str)))


def test_nan_in_a_block_names_the_block_and_rows(client, data):
    X, y, basis = data
    X = X.copy()
    X[3217, 1] = np.nan
    with pytest.raises(ValueError, match=r"X has NaN .* row block 3 \(rows 3000 to 3999\).*3217"):
        dask_statistics(basis, da.from_array(X, chunks=1000), da.from_array(y, chunks=1000))
    y = y.copy()
    y[12] = np.inf
    with pytest.raises(ValueError, match=r"y has NaN .* row block 0 \(rows 0 to 999\)"):
        dask_statistics(basis, da.from_array(X[:3000], chunks=1000), y[:3000])


def kill_once_rbf(X, Y, *, marker, gamma):
    """The rbf kernel, except that the first call anywhere kills its worker process."""
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return rbf_kernel(X, Y, gamma=gamma)


@pytest.mark.slow
def test_a_worker_that_dies_mid_pass_gives_the_full_sum(data, tmp_path):
    X, y, _ = data
    marker = str(tmp_path / "killed")
    basis = KernelBasis(kill_once_rbf, kernel_params={"marker": marker, "gamma": 0.5}).fit(
        X, centres=X[:80]
    )
    cluster, client = local_client(processes=True)
    with cluster, client:
        pids = set(client.run(os.getpid).values())
        dX, dy = da.from_array(X, chunks=1000), da.from_array(y, chunks=1000)
        got = dask_statistics(basis, dX, dy)
        client.wait_for_workers(2, timeout=60)
        assert set(client.run(os.getpid).values()) != pids  # a worker did die (and restart)
    assert os.path.exists(marker)
    want = accumulate(KernelBasis("rbf", gamma=0.5).fit(X, centres=X[:80]), X, y)
    assert got.n == want.n
    np.testing.assert_allclose(got.gram, want.gram, rtol=1e-12, atol=1e-12 * want.gram.max())


@pytest.fixture(scope="module")
def fitted(data):
    X, y, _ = data
    return RVR(gamma=0.5, centres=("random", 80), random_state=0).fit(X, y)


def test_predict_on_a_dask_array_is_lazy_chunked_and_exact(client, fitted):
    X, _ = smooth_data(3000, seed=1)
    dX = da.from_array(X, chunks=700)
    mean, std = fitted.predict(dX, return_std=True)
    assert isinstance(mean, da.Array) and isinstance(std, da.Array)
    assert mean.chunks == (dX.chunks[0],) and std.chunks == (dX.chunks[0],)
    want_mean, want_std = fitted.predict(X, return_std=True)
    got_mean, got_std = mean.compute(), std.compute()
    np.testing.assert_allclose(got_mean, want_mean, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got_std, want_std, rtol=1e-12)
    np.testing.assert_allclose(fitted.predict(dX).compute(), want_mean, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="N x N"):
        fitted.predict(dX, return_cov=True)
    with pytest.raises(ValueError, match="3 features"):
        fitted.predict(da.zeros((10, 3), chunks=5))


def test_predict_of_several_outputs_keeps_their_axis():
    X, Y = smooth_data(1500, outputs=2)
    model = RVR(gamma=0.5, centres=("random", 40), random_state=0).fit(X, Y)
    mean, std = model.predict(da.from_array(X, chunks=400), return_std=True)
    assert mean.shape == (1500, 2) and mean.chunks[0] == (400, 400, 400, 300)
    want_mean, want_std = model.predict(X, return_std=True)
    np.testing.assert_allclose(mean.compute(scheduler="sync"), want_mean, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(std.compute(scheduler="sync"), want_std, rtol=1e-12)


@pytest.mark.parametrize("outputs", [1, 2])
def test_predict_on_a_filtered_array_takes_empty_blocks_and_unknown_sizes(outputs):
    # Boolean indexing leaves blocks of unknown size, some empty: their predict failed with
    # "Found array with 0 sample(s)".
    X, Y = smooth_data(300, outputs=outputs)
    model = RVR(gamma=0.5, centres=("random", 30), random_state=0).fit(X, Y)
    keep = np.zeros(300, dtype=bool)
    keep[[3, 4, 160, 299]] = True  # rows in blocks 0, 3 and 5 of six: three blocks empty
    dX = da.from_array(X, chunks=50)
    filtered = dX[da.from_array(keep, chunks=50)]
    assert np.isnan(filtered.chunks[0]).all()
    want_mean, want_std = model.predict(X[keep], return_std=True)
    for rows in (filtered, filtered.compute_chunk_sizes()):
        mean, std = model.predict(rows, return_std=True)
        got_mean, got_std = (a.compute(scheduler="sync") for a in (mean, std))
        np.testing.assert_allclose(got_mean, want_mean, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(got_std, want_std, rtol=1e-12)
        np.testing.assert_allclose(model.predict(rows).compute(scheduler="sync"), want_mean)
    # Nothing left at all: empty predictions of the right shape and dtype.
    none = model.predict(dX[dX[:, 0] > 10], return_std=True)
    for a in none:
        got = a.compute(scheduler="sync")
        assert got.shape == (0, *Y.shape[1:]) and got.dtype == np.float64


@pytest.mark.parametrize("gamma", [0.5, "scale", "evidence_shared"])
def test_fit_on_dask_arrays_equals_the_in_memory_fit(client, gamma):
    X, y = smooth_data(4000, seed=2)
    Xt, _ = smooth_data(500, seed=3)
    params = {"gamma": gamma, "centres": ("random", 60), "random_state": 1}
    memory = RVR(**params, chunk_rows=None).fit(X, y)
    dask_fit = RVR(**params).fit(da.from_array(X, chunks=900), da.from_array(y, chunks=1300))
    assert dask_fit.statistics_.n == 4000
    np.testing.assert_array_equal(dask_fit.basis_.centres_, memory.basis_.centres_)
    np.testing.assert_allclose(dask_fit.gamma_, memory.gamma_, rtol=1e-9)
    np.testing.assert_array_equal(dask_fit.relevance_, memory.relevance_)
    mean, std = dask_fit.predict(Xt, return_std=True)
    want_mean, want_std = memory.predict(Xt, return_std=True)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-6, atol=1e-6 * np.abs(want_mean).max())
    np.testing.assert_allclose(std, want_std, rtol=1e-6)
    np.testing.assert_allclose(dask_fit.noise_variance_, memory.noise_variance_, rtol=1e-6)
    np.testing.assert_allclose(dask_fit.log_evidence_, memory.log_evidence_, rtol=1e-9)
    assert dask_fit.training_.y.shape[0] == 0  # no training rows came to the client
    with pytest.raises(ValueError, match="sufficient statistics"):
        dask_fit.refit_loo()


def test_evidence_ard_from_statistics_and_on_dask_finds_the_in_memory_widths(client):
    # The truth: the in-memory fit on the design. On one input "evidence_ard" refines the
    # width by the gradient, which the default does not: its width differs from the default's.
    rng = np.random.default_rng(1)
    X = rng.uniform(-5, 5, size=(2500, 1))
    y = np.sinc(X[:, 0] / np.pi) + 0.1 * rng.normal(size=2500)
    params = {"gamma": "evidence_ard", "centres": ("random", 80), "random_state": 1}
    memory = RVR(**params, chunk_rows=None).fit(X, y)
    default = RVR(**{**params, "gamma": "evidence_shared"}, chunk_rows=600).fit(X, y)
    assert abs(default.length_scale_ / memory.length_scale_ - 1) > 1e-3
    chunked = RVR(**params, chunk_rows=600).fit(X, y)
    dask_fit = RVR(**params).fit(da.from_array(X, chunks=700), da.from_array(y, chunks=700))
    for fit in (chunked, dask_fit):
        assert fit.statistics_.n == 2500
        np.testing.assert_allclose(fit.gamma_, memory.gamma_, rtol=1e-9)
        np.testing.assert_array_equal(fit.relevance_, memory.relevance_)
        np.testing.assert_allclose(fit.log_evidence_, memory.log_evidence_, rtol=1e-9)
        np.testing.assert_allclose(
            fit.width_path_.log_evidence, memory.width_path_.log_evidence, rtol=1e-9
        )


def test_make_model_after_a_dask_fit_has_the_in_memory_model_density(client):
    # The truth: the model of the in-memory fit on the N x K design (rvm_regression_model on
    # every row), against the Dask fit's model of the statistics (a compressed design).
    X, y = smooth_data(3000, seed=4)
    params = {"gamma": 0.5, "centres": X[::50], "sampler_config": {"mcmc_basis": "relevant"}}
    memory = RVR(**params, chunk_rows=None).fit(X, y)
    dask_fit = RVR(**params).fit(da.from_array(X, chunks=700), da.from_array(y, chunks=700))
    np.testing.assert_array_equal(dask_fit.active_, memory.active_)
    got, want = dask_fit.make_model(), memory.make_model()
    assert got["n_rows"].get_value() == 3000 and "ll_rows" not in got.named_vars
    assert dask_fit.model_.named_vars.keys() == got.named_vars.keys()
    # The Dask fit's hyperparameters on the models' relative scale.
    phi_scale, y_scale = want["phi_scale"].get_value(), want["y_scale"].get_value()
    np.testing.assert_allclose(got["phi_scale"].get_value(), phi_scale, rtol=1e-10)
    from tests.test_models import _with_alpha

    point = {"sigma_rel_log__": np.log(np.sqrt(dask_fit.noise_variance_) / y_scale)}
    point = _with_alpha(want, point, dask_fit.alpha_ * y_scale**2 / phi_scale**2)
    logp = want.compile_logp()(point)
    assert np.isfinite(logp)
    np.testing.assert_allclose(got.compile_logp()(point), logp, rtol=1e-6)
    with pytest.raises(ValueError, match="form='marginal'"):
        dask_fit.make_model(form="joint")


def test_dask_fit_refuses_what_it_cannot_do(client, data):
    X, y, _ = data
    dX, dy = da.from_array(X, chunks=1000), da.from_array(y, chunks=1000)
    keep = dX[:, 0] > 0
    with pytest.raises(ValueError, match=r"unknown chunk sizes.*compute_chunk_sizes"):
        RVR(gamma=0.5, centres=("random", 10)).fit(dX[keep], dy[keep])
    with pytest.raises(ValueError, match=r"'kmeans' is not available on Dask.*'random'"):
        RVR(gamma=0.5, centres=("kmeans", 10)).fit(dX, dy)
    with pytest.raises(ValueError, match=r"needs a subset of centres"):
        RVR(gamma=0.5).fit(dX, dy)
    with pytest.raises(ValueError, match=r"inference='mcmc'"):
        RVR(gamma=0.5, centres=("random", 10), inference="mcmc").fit(dX, dy)
    with pytest.raises(ValueError, match=r"chunk_rows=None.*Dask"):
        RVR(gamma=0.5, centres=("random", 10), chunk_rows=None).fit(dX, dy)
    with pytest.raises(ValueError, match=r"7000 centres; that exceeds the 6000"):
        RVR(gamma=0.5, centres=("random", 7000)).fit(dX, dy)


def threads_of_a_fused_block() -> tuple[int, int]:
    """``(process_threads(), numba threads of a fused kernel block)`` in this process."""
    import numba

    from bayes_rvm.basis import blocks as kernel_blocks
    from bayes_rvm.basis.kernels import FUSED_MIN_ENTRIES
    from bayes_rvm.threads import process_threads

    # A block that would run on every thread of an unbounded process.
    entries = max(FUSED_MIN_ENTRIES, kernel_blocks.PARALLEL_MIN_ENTRIES)
    X = np.random.default_rng(0).uniform(-3, 3, size=(entries // 100 + 1, 2))
    basis = KernelBasis("rbf", gamma=0.5).fit(X, centres=X[:100])
    seen = []
    fill = kernel_blocks._fill
    kernel_blocks._fill = lambda *args: seen.append(numba.get_num_threads())
    try:
        basis.transform(X)
    finally:
        kernel_blocks._fill = fill
    return process_threads(), seen[0]


@pytest.mark.slow
def test_a_worker_process_runs_blas_and_the_fused_kernel_on_one_thread():
    # Dask's nanny starts workers with OMP/OPENBLAS/MKL_NUM_THREADS=1: two one-thread workers on
    # two cores must not run two threads each (numba's own default is every core).
    cluster, client = local_client(processes=True)
    with cluster, client:
        got = client.run(threads_of_a_fused_block)
    assert set(got.values()) == {(1, 1)}


def test_the_statistics_pass_on_a_cluster_reports_its_blocks(client, data, monkeypatch, capsys):
    """With progress on, the blocks run as futures counted as they finish, then the same tree
    of sums: the rows reported rise to N, and the statistics equal the in-memory pass's."""
    import re

    import bayes_rvm.progress as progress

    monkeypatch.setattr(progress, "QUIET_SECONDS", 0.0)
    monkeypatch.setattr(progress, "LOG_SECONDS", 0.0)
    X, y, basis = data
    stats = dask_statistics(
        basis, da.from_array(X, chunks=(1000, 2)), da.from_array(y, chunks=1000), progress=True
    )
    err = capsys.readouterr().err
    done = [int(n.replace(",", "")) for n in re.findall(r"\(([\d,]+) of 6,000 rows", err)]
    assert done == [1000 * k for k in range(1, 7)]
    assert "block 6 of 6" in err
    reference = accumulate(basis, X, y)
    np.testing.assert_allclose(stats.gram, reference.gram, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(stats.cross, reference.cross, rtol=1e-12, atol=1e-12)


def test_rvc_refuses_dask_arrays_instead_of_computing_them():
    # RVC pulled the whole array to the client without a word (and predicted NumPy arrays).
    from bayes_rvm import RVC

    X = da.random.default_rng(0).uniform(-3, 3, size=(400, 2), chunks=(100, 2))
    y = (X[:, 0] > 0).astype(int)
    with pytest.raises(TypeError, match=r"RVC does not fit Dask arrays.*X.compute\(\)"):
        RVC(centres=("random", 20)).fit(X, y)
    with pytest.raises(TypeError, match="RVC does not fit Dask arrays"):
        RVC().fit(X.compute(), y)
