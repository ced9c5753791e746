"""Sufficient statistics from a chunked pass, against the dense design they replace."""

from __future__ import annotations

import numpy as np
import pytest

from bayes_rvm.kernels import KernelBasis
from bayes_rvm.statistics import (
    SufficientStatistics,
    accumulate,
    chunk_rows_for,
    design_chunks,
)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2503, 2))
    T = np.column_stack([np.sin(X[:, 0]) + 0.1 * rng.normal(size=2503), X[:, 1] ** 2])
    basis = KernelBasis("rbf", gamma=0.7).fit(X, centres=X[rng.choice(2503, 150, replace=False)])
    return X, T, basis, basis.transform(X)


def _rel(a, b):
    return np.max(np.abs(a - b)) / np.max(np.abs(b))


@pytest.mark.parametrize("chunk_rows", [None, 1, 97, 2503, 10_000])
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
    # The default block is about 64 MiB of float64.
    assert chunk_rows_for(2001) == 64 * 2**20 // (8 * 2001)


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
