"""The ceiling on the shared-precision evidence, and the sequential engine's use of it.

At convergence the sequential engine compares its fit with the evidence of one prior precision
shared by its columns (and restarts from there if that is higher: the make_regression collapse).
:func:`~bayes_rvm.evidence.shared_ceiling.shared_evidence_ceiling` bounds that evidence from
above for a fraction of its cost, so that the exact value is computed only where the ceiling does
not settle the comparison. The truths here: the exact evidence
(:func:`~bayes_rvm.evidence.width.shared_evidence`) and the engine with the ceiling switched off.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_regression
from sklearn.metrics.pairwise import rbf_kernel

from bayes_rvm.datasets import make_sinc
from bayes_rvm.evidence import fit_sequential
from bayes_rvm.evidence import sequential as seq_module
from bayes_rvm.evidence import shared as shared_module
from bayes_rvm.evidence.shared_ceiling import shared_evidence_ceiling
from bayes_rvm.evidence.width import shared_evidence


def _design(X, gamma):
    """rbf columns on the inputs and a bias, unit norm (what the estimators hand the engine)."""
    Phi = np.hstack([rbf_kernel(X, X, gamma=gamma), np.ones((X.shape[0], 1))])
    return Phi / np.linalg.norm(Phi, axis=0)


def _sinc(n, gamma, seed=0):
    X, y = make_sinc(n, noise=0.1, random=True, random_state=seed, shuffle=False)
    return _design(X, gamma), y / np.std(y)


def _regression(n, gamma, seed=0):
    X, y = make_regression(n, 5, n_informative=3, noise=0.1, random_state=seed)
    return _design(X, gamma), y / np.sqrt(np.mean(y**2))


def _cases():
    rng = np.random.default_rng(1)
    X2 = rng.uniform(-3, 3, (250, 2))
    y2 = np.sin(X2[:, 0]) + 0.5 * X2[:, 1] + 0.05 * rng.standard_normal(250)
    Xs, ys = make_sinc(200, noise=0.1, random=True, random_state=4, shuffle=False)
    two = np.c_[ys, np.cos(Xs[:, 0]) + 0.1 * rng.standard_normal(200)]
    return {
        "sinc width 3": (*_sinc(300, 1 / 9), None),
        "sinc width 1 (retry)": (*_sinc(300, 1.0), None),
        "sinc wide": (*_sinc(300, 0.0294), None),
        "sinc fixed noise": (*_sinc(300, 1 / 9), 100.0),
        "make_regression wide": (*_regression(200, 1e-4), None),
        "make_regression 0.0042": (*_regression(200, 0.0042), None),
        "two inputs": (_design(X2, 0.5), y2 / np.std(y2), None),
        "pure noise": (_design(Xs, 0.3), rng.standard_normal(200), None),
        "two outputs": (_design(Xs, 1 / 9), two / two.std(axis=0), None),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_ceiling_is_above_the_shared_evidence(name):
    Phi, T, beta = _cases()[name]
    T2 = T[:, None] if T.ndim == 1 else T
    exact = shared_evidence(Phi, T2, beta=beta).log_evidence
    ceiling = shared_evidence_ceiling(Phi, T2, float(np.sum(T2 * T2)), beta=beta).value
    assert ceiling >= exact - 1e-9 * (1.0 + abs(exact))


@pytest.mark.parametrize(("gamma", "beta"), [(1 / 9, None), (1.0, None), (1 / 9, 100.0)])
def test_ceiling_is_tight_where_its_range_holds_the_spectrum(gamma, beta):
    # A smooth kernel on one input: a few dozen eigenvalues above the rank cut, which the range
    # finder holds (at width 1, after its second, larger try).
    Phi, T = _sinc(300, gamma)
    exact = shared_evidence(Phi, T, beta=beta).log_evidence
    ceiling = shared_evidence_ceiling(Phi, T, float(T @ T), beta=beta).value
    assert exact <= ceiling + 1e-9 * (1.0 + abs(exact))
    assert ceiling < exact + 0.05


def _fit_both(monkeypatch, Phi, T, **settings):
    """The fit with the ceiling, how often the exact bound ran, and the fit without the ceiling."""
    calls = []
    for name in ("shared_evidence", "shared_evidence_gram"):
        exact = getattr(seq_module, name)
        monkeypatch.setattr(
            seq_module, name, lambda *a, _f=exact, **k: calls.append(1) or _f(*a, **k)
        )
    fit = fit_sequential(Phi, T, **settings)
    n_exact = len(calls)
    monkeypatch.setattr(seq_module._Sequential, "clears_ceiling", lambda self, *a: False)
    return fit, n_exact, fit_sequential(Phi, T, **settings)


def _assert_same(a, b):
    assert np.array_equal(a.active, b.active)
    assert np.array_equal(a.alpha, b.alpha)
    assert np.array_equal(a.mean, b.mean)
    assert a.beta == b.beta and a.log_evidence == b.log_evidence
    assert a.actions == b.actions and a.reason == b.reason


@pytest.mark.parametrize("settings", [{}, {"fixed_beta": True, "beta_init": 100.0}])
def test_an_ordinary_fit_skips_the_exact_bound_and_is_unchanged(monkeypatch, settings):
    Phi, T = _sinc(300, 1 / 9)
    fit, n_exact, without = _fit_both(monkeypatch, Phi, T, **settings)
    assert n_exact == 0  # the ceiling settled it
    _assert_same(fit, without)


def test_a_large_whole_design_goes_to_the_exact_bound(monkeypatch):
    # The ceiling overwrites a copy of its columns; a whole design (every column in the bound)
    # is copied only where that is small, and the bound is computed directly otherwise.
    Phi, T = _sinc(300, 1 / 9)
    monkeypatch.setattr(seq_module, "_CEILING_COPY_MOST", Phi.size - 1)
    fit, n_exact, without = _fit_both(monkeypatch, Phi, T)
    assert n_exact == 1
    _assert_same(fit, without)


def test_the_default_benchmark_fit_is_settled_by_the_ceiling_and_unchanged(monkeypatch):
    # The estimators' default regression at N = 1000 (500 bound columns of 1001): the ceiling
    # settles the check, and the fit is the one the exact bound gives.
    Phi, T = _sinc(1000, 1 / 9, seed=1000)
    fit, n_exact, without = _fit_both(monkeypatch, Phi, T)
    assert n_exact == 0
    assert "restart shared" not in fit.actions
    _assert_same(fit, without)


def test_residual_in_row_blocks_is_the_dense_residual(monkeypatch):
    # Blocks that do not divide the rows, and one block: both the dense ||Phi - Q B||_F^2.
    rng = np.random.default_rng(3)
    Phi = rng.standard_normal((50, 12))
    Q = np.linalg.qr(rng.standard_normal((50, 4)))[0]
    B = Q.T @ Phi
    dense = float(np.sum((Phi - Q @ B) ** 2))
    for rows in (7, 50, 128):
        monkeypatch.setattr(shared_module, "_BLOCK_ROWS", rows)
        assert shared_module._residual(Phi, Q, B) == pytest.approx(dense, rel=1e-13)


def test_a_grown_range_is_the_dense_one():
    """``grow_range`` in blocks (24 columns, then 12 more): orthonormal columns, ``B = Q^T Phi``,
    and the residual left in ``R`` and its sum of squares are those of a dense computation; a
    design with more rows than one block of the residual pass."""
    from bayes_rvm.evidence.shared import grow_range

    Phi, _ = _sinc(300, 1.0)
    R = np.array(Phi, order="C")
    Q, B, delta = grow_range(R, np.empty((300, 0)), np.empty((0, Phi.shape[1])), 24)
    Q, B, delta = grow_range(R, Q, B, 12)
    assert Q.shape == (300, 36) and B.shape == (36, Phi.shape[1])
    np.testing.assert_allclose(Q.T @ Q, np.eye(36), rtol=0, atol=1e-14)
    np.testing.assert_allclose(B, Q.T @ Phi, rtol=0, atol=1e-13)
    dense = Phi - Q @ B
    np.testing.assert_allclose(R, dense, rtol=0, atol=1e-13)
    assert delta == pytest.approx(float(np.sum(dense**2)), rel=1e-12)
    with pytest.raises(ValueError, match="C-contiguous"):
        grow_range(np.asfortranarray(Phi), Q[:, :0], B[:0], 4)


def test_the_ceiling_grows_its_range_and_leaves_the_design_alone():
    """At gamma = 0.25 on sinc (N = 1000) the spectrum above the rank cut needs more than the 24
    columns of the first range: it is grown, and the ceiling is within 0.05 nats of the exact
    evidence (from the first range alone it is 1e5 nats above). The design is not touched unless
    the caller lets it be overwritten."""
    from bayes_rvm.evidence import shared_ceiling

    Phi, T = _sinc(1000, 0.25)
    Phi = np.ascontiguousarray(Phi[:, ::2])
    exact = shared_evidence(Phi, T).log_evidence
    first = shared_ceiling._Sketch(Phi.copy(), shared_ceiling.CEILING_RANK)
    assert not first.captured()
    assert first.ceiling(T[:, None], float(T @ T), None, exact) > exact + 1e4
    before = Phi.copy()
    ceiling = shared_evidence_ceiling(Phi, T, float(T @ T))
    assert ceiling.captured and exact <= ceiling.value < exact + 0.05
    np.testing.assert_array_equal(Phi, before)
    again = shared_evidence_ceiling(Phi, T, float(T @ T), overwrite_phi=True)
    assert again == ceiling and not np.array_equal(Phi, before)


def test_the_collapse_still_restarts_from_the_exact_bound(monkeypatch):
    # At a wide width on make_regression the engine stops far below one shared precision (the
    # case the bound exists for): the ceiling is above the fit, the exact bound is computed and
    # the engine goes on from it, as without the ceiling.
    Phi, T = _regression(200, 1e-4, seed=1)
    fit, n_exact, without = _fit_both(monkeypatch, Phi, T)
    assert n_exact == 1
    assert "restart shared" in fit.actions and fit.active.size > 3
    assert fit.log_evidence >= shared_evidence(Phi, T).log_evidence - 1e-6
    _assert_same(fit, without)


@pytest.mark.parametrize("all_axes", [False, True])
def test_principal_axes_are_the_full_decompositions_above_the_rank_cut(all_axes):
    """Only the eigenpairs above the cut are computed (or all, by divide and conquer, and those
    kept); they are those of a full decomposition by NumPy, wide and narrow kernels, a
    rank-deficient and an all-zero Gram matrix."""
    from bayes_rvm.evidence.shared import RANK_TOL, principal_axes

    x = np.linspace(-10.0, 10.0, 300)[:, None]
    low_rank = np.random.default_rng(0).normal(size=(300, 4))
    for G in (
        rbf_kernel(x, gamma=0.1) @ rbf_kernel(x, gamma=0.1),
        rbf_kernel(x, gamma=4.0),
        low_rank @ low_rank.T,
    ):
        s_all, U_all = np.linalg.eigh(G)
        keep = s_all > RANK_TOL * s_all[-1]
        s, U = principal_axes(G, all_axes=all_axes)
        assert s.size == keep.sum() >= 4
        np.testing.assert_allclose(s, s_all[keep], rtol=0, atol=1e-13 * s_all[-1])
        # the same axes (up to sign) where the eigenvalues are well separated from the rest
        top = slice(-4, None)
        np.testing.assert_allclose(
            np.abs(U[:, top].T @ U_all[:, keep][:, top]), np.eye(4), atol=1e-8
        )
    s, U = principal_axes(np.zeros((5, 5)), all_axes=all_axes)
    assert s.shape == (0,) and U.shape == (5, 0)


@pytest.mark.parametrize(("gamma", "sketched"), [(0.01, True), (1.0 / 9.0, True), (25.0, False)])
def test_principal_coordinates_of_a_large_design_are_the_svds(gamma, sketched, monkeypatch):
    """From 256 rows and columns the coordinates come from a sketched range where it holds the
    spectrum (wide and medium rbf widths on sinc), else from the Gram matrix (a narrow width,
    whose rank is beyond the sketch); an SVD of the design is the truth: the same eigenvalues,
    and the same shared evidence to far below what the Gram matrix's rounding moves it."""
    from scipy import linalg

    from bayes_rvm.evidence import shared
    from bayes_rvm.evidence.shared import RANK_TOL, principal_coordinates

    X, y = make_sinc(600, noise=0.1, random_state=0)
    Phi = rbf_kernel(X, X, gamma=gamma)
    Phi /= np.linalg.norm(Phi, axis=0)
    U, s, _ = linalg.svd(Phi, full_matrices=False)
    keep = s * s > RANK_TOL * s[0] ** 2
    used = []
    sketch = shared.sketched_svd
    monkeypatch.setattr(shared, "sketched_svd", lambda *a: used.append(sketch(*a)) or used[-1])
    Z = principal_coordinates(Phi)
    assert (used[0] is not None) == sketched
    np.testing.assert_allclose(
        np.sort(np.einsum("ij,ij->j", Z, Z))[::-1], s[keep] ** 2, rtol=0, atol=1e-14 * s[0] ** 2
    )
    truth = shared._shared_on_spectrum(
        s[keep] ** 2, ((U[:, keep].T @ y) ** 2), float(y @ y), (600, 1), None, 1000, 1e-10
    )
    assert shared.shared_evidence(Phi, y).log_evidence == pytest.approx(
        truth.log_evidence, abs=1e-8 if sketched else 1e-2
    )


def test_the_ceiling_says_whether_its_range_held_the_spectrum():
    """A smooth 1-D kernel's spectrum falls below the rank cut within the range's 32 axes; a 4-D
    one keeps hundreds of eigenvalues above it (counted by NumPy), which the range cannot hold."""
    from bayes_rvm.evidence.shared import RANK_TOL

    rng = np.random.default_rng(0)
    x = np.sort(rng.uniform(-10, 10, 400))[:, None]
    X4 = rng.normal(size=(400, 4))
    for X, held in ((x, True), (X4, False)):
        Phi = rbf_kernel(X, X[::2], gamma=0.1)
        Phi /= np.linalg.norm(Phi, axis=0)
        T = np.sin(X[:, 0])
        s = np.linalg.eigvalsh(Phi.T @ Phi)
        kept = int(np.sum(s > RANK_TOL * s[-1]))
        assert (kept <= 32) == held
        assert shared_evidence_ceiling(Phi, T, float(T @ T)).captured == held
