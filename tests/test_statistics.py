"""Sufficient statistics from a chunked pass, against the dense design they replace."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from bayes_rvm.basis.kernels import KernelBasis
from bayes_rvm.basis.statistics import (
    SufficientStatistics,
    accumulate,
    chunk_rows_for,
    design_chunks,
)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2503, 2))
    noise = 0.1 * rng.normal(size=(2503, 2))
    T = np.column_stack([np.sin(X[:, 0]), np.cos(2 * X[:, 1])]) + noise
    basis = KernelBasis("rbf", gamma=0.7).fit(X, centres=X[rng.choice(2503, 150, replace=False)])
    return X, T, basis, basis.transform(X)


def _rel(a, b):
    return np.max(np.abs(a - b)) / np.max(np.abs(b))


@pytest.mark.parametrize("chunk_rows", [None, 7, 97, 2503, 10_000])
def test_accumulate_equals_dense_sums(data, chunk_rows):
    X, T, basis, Phi = data
    s = accumulate(basis, X, T, chunk_rows=chunk_rows)
    assert s.n == X.shape[0]
    assert _rel(s.gram, Phi.T @ Phi) < 1e-12
    assert np.array_equal(s.gram, s.gram.T)
    assert _rel(s.cross, Phi.T @ T) < 1e-12
    np.testing.assert_allclose(s.tt, np.sum(T**2, axis=0), rtol=1e-12)
    np.testing.assert_allclose(s.t_sum, T.sum(axis=0), rtol=1e-12)
    # The bias column (last): its Gram entry counts the rows, its cross entry sums the targets.
    assert s.gram[-1, -1] == pytest.approx(X.shape[0], rel=1e-14)
    np.testing.assert_allclose(s.cross[-1], T.sum(axis=0), rtol=1e-12)


def test_fused_blocks_in_one_reused_buffer_equal_scikit_learns_design():
    # Blocks above FUSED_MIN_ENTRIES take the numba kernel, written into one buffer that every
    # block reuses; the last, short block takes scikit-learn's. The truth: scikit-learn's design.
    from sklearn.metrics.pairwise import rbf_kernel

    from bayes_rvm.basis.kernels import FUSED_MIN_ENTRIES

    rng = np.random.default_rng(3)
    X = rng.uniform(-3, 3, size=(17_500, 2))
    t = np.sin(X[:, 0]) + 0.1 * rng.normal(size=X.shape[0])
    C = X[rng.choice(X.shape[0], 500, replace=False)]
    basis = KernelBasis("rbf", gamma=0.5).fit(X, centres=C)
    step = 8400
    assert step * basis.n_basis_ >= FUSED_MIN_ENTRIES > (X.shape[0] - 2 * step) * basis.n_basis_
    Phi = np.column_stack([rbf_kernel(X, C, gamma=0.5), np.ones(X.shape[0])])
    s = accumulate(basis, X, t, chunk_rows=step)
    assert _rel(s.gram, Phi.T @ Phi) < 1e-12
    assert _rel(s.cross[:, 0], Phi.T @ t) < 1e-12


def test_sum_of_blocks_is_the_whole(data):
    _X, T, _basis, Phi = data
    parts = [
        SufficientStatistics.from_design(Phi[r], T[r]) for r in np.array_split(np.arange(2503), 4)
    ]
    total = sum(parts)
    whole = SufficientStatistics.from_design(Phi, T)
    assert total.n == whole.n == 2503
    assert _rel(total.gram, whole.gram) < 1e-12
    assert _rel(total.cross, whole.cross) < 1e-12
    np.testing.assert_allclose(total.tt, whole.tt, rtol=1e-12)
    assert (parts[0] + SufficientStatistics.zeros(151, 2)).n == parts[0].n


def test_single_output_and_scales(data):
    X, T, basis, Phi = data
    s = accumulate(basis, X, T[:, 0])
    assert s.cross.shape == (151, 1) and s.tt.shape == (1,)
    np.testing.assert_allclose(s.column_norms(), np.linalg.norm(Phi, axis=0), rtol=1e-12)
    assert s.target_scale() == pytest.approx(np.sqrt(np.mean(T[:, 0] ** 2)), rel=1e-12)
    assert s.target_variance() == pytest.approx(np.var(T[:, 0]), rel=1e-10)


def test_design_chunks_cover_the_rows(data):
    X, _T, basis, Phi = data
    seen = []
    for rows, block in design_chunks(basis, X, chunk_rows=1000, dtype=np.float32):
        assert block.dtype == np.float32 and block.flags.c_contiguous
        np.testing.assert_allclose(block, Phi[rows], rtol=1e-6, atol=1e-7)
        seen.append((rows.start, rows.stop))
    assert seen == [(0, 1000), (1000, 2000), (2000, 2503)]
    # The default block is about 256 MiB of float64: 16,768 rows of 2001 columns.
    assert chunk_rows_for(2001) == 16_768


def test_bad_input_is_named(data):
    X, T, basis, _Phi = data
    with pytest.raises(ValueError, match="rows"):
        accumulate(basis, X, T[:-1])
    bad = T.copy()
    bad[5, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        accumulate(basis, X, bad)
    with pytest.raises(ValueError, match="chunk_rows"):
        next(design_chunks(basis, X, chunk_rows=0))
    with pytest.raises(ValueError, match="different bases"):
        _ = SufficientStatistics.zeros(3) + SufficientStatistics.zeros(4)


# -- engines and the estimator on the statistics ------------------------------------------------


@pytest.fixture(scope="module")
def sinc2d():
    rng = np.random.default_rng(0)
    n = 20_000
    X = rng.uniform(-5, 5, size=(n, 2))
    y = np.sinc(X[:, 0]) * np.cos(X[:, 1]) + 0.1 * rng.normal(size=n)
    return X, y, rng.uniform(-5, 5, size=(400, 2))


@pytest.mark.parametrize("solver", ["sequential", "mackay"])
def test_engines_on_statistics_equal_the_design(data, solver):
    from bayes_rvm.evidence import fit_evidence
    from bayes_rvm.evidence.problem import Problem

    X, T, basis, Phi = data
    # Both outputs at once (the engines' tt, Phi'T and N D count every value), on the
    # normalised problem the estimators fit.
    dense_problem = Problem.regression(Phi.copy(), T)
    stats_problem = Problem.from_statistics(accumulate(basis, X, T, chunk_rows=300))
    dense = fit_evidence(dense_problem.design, dense_problem.targets, solver=solver, tol=1e-3)
    stats = fit_evidence(stats_problem.statistics, None, solver=solver, tol=1e-3)
    assert dense.converged and stats.converged
    np.testing.assert_array_equal(dense.active, stats.active)
    scale = np.abs(dense.mean).max()
    np.testing.assert_allclose(stats.mean, dense.mean, rtol=1e-6, atol=1e-7 * scale)
    assert stats.beta == pytest.approx(dense.beta, rel=1e-6)
    assert stats.log_evidence == pytest.approx(dense.log_evidence, rel=1e-9)


def test_laplace_engine_refuses_statistics(data):
    from bayes_rvm.evidence import fit_evidence

    X, T, basis, _Phi = data
    with pytest.raises(ValueError, match="design matrix itself"):
        fit_evidence(accumulate(basis, X, T[:, :1] > 0), None, likelihood="bernoulli")


def test_problem_from_statistics_matches_regression(data):
    from bayes_rvm.evidence.problem import Problem

    X, T, basis, Phi = data
    dense = Problem.regression(Phi.copy(), T)
    stats = Problem.from_statistics(accumulate(basis, X, T))
    np.testing.assert_allclose(stats.norms, dense.norms, rtol=1e-12)
    assert stats.scale == pytest.approx(dense.scale, rel=1e-12)
    assert stats.noise_start == pytest.approx(dense.noise_start, rel=1e-9)
    assert stats.n_values == dense.targets.size
    G = dense.design.T @ dense.design
    assert _rel(stats.statistics.gram, G) < 1e-12
    assert _rel(stats.statistics.cross, dense.design.T @ dense.targets) < 1e-12
    with pytest.raises(ValueError, match="no design matrix"):
        stats.active_design(np.arange(3))


@pytest.mark.parametrize("gamma", [0.5, pytest.param("evidence_shared", marks=pytest.mark.slow)])
def test_rvr_from_statistics_equals_in_memory(sinc2d, gamma):
    """N = 20,000 rows, 300 centres: seven blocks summed, the same model as the design's."""
    from bayes_rvm import RVR

    X, y, X_test = sinc2d
    kw = {"gamma": gamma, "centres": ("random", 300), "random_state": 0}
    dense = RVR(chunk_rows=None, **kw).fit(X, y)
    chunked = RVR(chunk_rows=3000, **kw).fit(X, y)
    assert dense.statistics_ is None and chunked.statistics_.n == X.shape[0]
    assert chunked.training_.phi_active is None
    np.testing.assert_array_equal(chunked.active_, dense.active_)
    np.testing.assert_array_equal(chunked.gamma_, dense.gamma_)  # per feature on 2-D inputs
    m_d, s_d = dense.predict(X_test, return_std=True)
    m_c, s_c = chunked.predict(X_test, return_std=True)
    np.testing.assert_allclose(m_c, m_d, rtol=1e-6, atol=1e-6 * np.abs(m_d).max())
    np.testing.assert_allclose(s_c, s_d, rtol=1e-6)
    assert chunked.noise_variance_ == pytest.approx(dense.noise_variance_, rel=1e-6)
    assert chunked.log_evidence_ == pytest.approx(dense.log_evidence_, rel=1e-9)
    if gamma != 0.5:
        np.testing.assert_allclose(
            chunked.width_path_.log_evidence, dense.width_path_.log_evidence, rtol=1e-12
        )
    for call in (lambda: chunked.idata_, chunked.refit_loo):
        with pytest.raises(ValueError, match="sufficient statistics"):
            call()
    # The model MCMC samples is the statistics' (the same density, no N x M design).
    assert "n_rows" in chunked.make_model().named_vars


def test_rvr_chunk_rows_rules(sinc2d, monkeypatch):
    from bayes_rvm import RVR
    from bayes_rvm.estimators import large_data
    from bayes_rvm.models.priors import DEFAULT_GAMMA_PRIOR

    X, y, _ = sinc2d
    X, y = X[:3000], y[:3000]
    # "auto" keeps the design below the threshold and switches above it.
    assert RVR(centres=("random", 50))._on_statistics(X) is False
    monkeypatch.setattr(large_data, "LARGE_DESIGN_BYTES", 8 * 3000 * 51 - 1)
    assert RVR(centres=("random", 50))._on_statistics(X) is True
    assert RVR(centres=None)._on_statistics(X) is False
    assert RVR(centres=("random", 50), chunk_rows=None)._on_statistics(X) is False
    # A forced statistics fit that cannot run on statistics says why.
    for bad, match in [
        ({"centres": None}, "subset of centres"),
        ({"inference": "mcmc", "gamma": DEFAULT_GAMMA_PRIOR}, "sampled width"),
        ({"predictive": "rvm*"}, "rvm\\*"),
        ({"gamma": "evidence"}, "gamma='evidence'"),
    ]:
        kw = {"centres": ("random", 50), "chunk_rows": 500} | bad
        with pytest.raises(ValueError, match=match):
            RVR(**kw).fit(X, y)


def test_rvr_from_statistics_saves_and_loads(sinc2d, tmp_path):
    import pickle

    from bayes_rvm import RVR, load_model, save_model

    X, y, X_test = sinc2d
    model = RVR(gamma=0.5, centres=("random", 60), chunk_rows=700, random_state=0)
    model.fit(X[:3000], y[:3000])
    expected = model.predict(X_test, return_std=True)
    save_model(model, tmp_path / "m.nc")
    for loaded in (load_model(tmp_path / "m.nc"), pickle.loads(pickle.dumps(model))):
        for got, want in zip(loaded.predict(X_test, return_std=True), expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12)
        with pytest.raises(ValueError, match="sufficient statistics"):
            loaded.refit_loo()


def test_auto_takes_the_statistics_where_the_design_would_not_fit(sinc2d, monkeypatch):
    """Above the memory limit the design path stops; ``"auto"`` fits from the statistics."""
    from bayes_rvm import RVR

    X, y, X_test = sinc2d
    X, y = X[:3000], y[:3000]
    kw = {"gamma": 0.5, "centres": ("random", 100), "random_state": 0}
    reference = RVR(chunk_rows=None, **kw).fit(X, y).predict(X_test[:20])
    monkeypatch.setenv("BAYES_RVM_MAX_MEMORY", "2MB")  # the 3000 x 101 design needs 2.4 MB
    with pytest.raises(MemoryError, match="design matrix"):
        RVR(chunk_rows=None, **kw).fit(X, y)
    model = RVR(**kw).fit(X, y)
    assert model.statistics_ is not None
    np.testing.assert_allclose(model.predict(X_test[:20]), reference, rtol=1e-6, atol=1e-7)


def test_rvr_mcmc_from_statistics_samples_the_same_posterior_as_the_design(sinc2d):
    # Truth: the same estimator sampled on the in-memory design (its density equals the
    # statistics form's to rounding, so at a fixed seed the chains agree to MC error at most).
    from bayes_rvm import RVR

    X, y, X_test = sinc2d
    X, y = X[:2500], y[:2500]
    kw = dict(
        inference="mcmc",
        gamma=0.5,
        centres=("random", 15),
        random_state=0,
        sampler_config={"draws": 150, "tune": 150, "chains": 2},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stats = RVR(chunk_rows=400, **kw).fit(X, y, progressbar=False)
        design = RVR(chunk_rows=None, **kw).fit(X, y, progressbar=False)
    dt = stats.idata_
    assert dt.attrs["log_likelihood_rows"] == "subset of 2000 of 2500 data rows"
    assert dt["log_likelihood"]["y"].sizes["obs"] == 2000
    s = [float(m.idata_["posterior"]["sigma"].mean()) for m in (stats, design)]
    assert s[0] == pytest.approx(s[1], rel=0.02)
    np.testing.assert_allclose(stats.predict(X_test), design.predict(X_test), atol=0.02)


def test_rvr_auto_chunk_rows_counts_the_mcmc_log_likelihood(sinc2d, monkeypatch):
    # Under MCMC the design path holds an N x draws pointwise log likelihood: "auto" counts it.
    from bayes_rvm import RVR
    from bayes_rvm.estimators import large_data

    X = sinc2d[0][:3000]
    monkeypatch.setattr(large_data, "LARGE_DESIGN_BYTES", 8 * 3000 * 51 * 10)
    kw = {"centres": ("random", 50)}
    assert RVR(**kw)._on_statistics(X) is False
    assert (
        RVR(inference="mcmc", sampler_config={"draws": 500, "chains": 2}, **kw)._on_statistics(X)
        is True
    )
    assert (
        RVR(inference="mcmc", sampler_config={"draws": 100, "chains": 2}, **kw)._on_statistics(X)
        is False
    )
