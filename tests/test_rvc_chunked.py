"""The chunked Laplace path (issue 29, item 4): designs built in row blocks, RVC(chunk_rows=...).

Truths: the in-memory engines on the dense design (the same algorithm, so the same fit up to the
order of the row sums), the dense norms of :func:`bayes_rvm.problem.normalise_columns`, and the
dense products each pass replaces.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from bayes_rvm.classifier import RVC
from bayes_rvm.evidence import fit_evidence, fit_laplace_sequential
from bayes_rvm.evidence.chunked import chunked_design, subset_rows
from bayes_rvm.evidence.design import DenseDesign
from bayes_rvm.kernels import KernelBasis
from bayes_rvm.problem import normalise_columns


def _boundary(n: int, seed: int):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, size=(n, 2))
    y = (np.sin(2.0 * X[:, 0]) + X[:, 1] ** 2 > 1.5).astype(int)
    return X, np.where(rng.random(n) < 0.1, 1 - y, y)


@pytest.fixture(scope="module")
def problem():
    X, y = _boundary(3000, 0)
    basis = KernelBasis("rbf", gamma=1.0, bias=True).fit(X, centres=X[:60])
    Phi = basis.transform(X)
    norms = normalise_columns(Phi)

    def block(rows, cols):
        return basis.transform(X[rows], columns=cols)

    return X, y.astype(float), basis, Phi, norms, block


@pytest.mark.parametrize("cache_bytes", [0.0, 1e9])
def test_chunked_design_gives_the_dense_products(problem, cache_bytes):
    _, _, basis, Phi, norms, block = problem
    D = chunked_design(block, Phi.shape[0], basis.n_basis_, chunk_rows=700, cache_bytes=cache_bytes)
    np.testing.assert_allclose(D.norms, norms, rtol=1e-13)
    rng = np.random.default_rng(0)
    act = np.array([3, 17, 60])
    B = rng.random((Phi.shape[0], 1))
    R = rng.normal(size=(Phi.shape[0], 1))
    for got, want in zip(
        D.statistics(act, B, R), DenseDesign(Phi).statistics(act, B, R), strict=True
    ):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)
    W = rng.normal(size=(3, 1))
    sub = D.take(act)
    np.testing.assert_allclose(sub.dot(W), Phi[:, act] @ W, rtol=1e-12, atol=1e-14)
    from bayes_rvm.families import family

    Y = rng.random((Phi.shape[0], 1))
    g, H = sub.curvature(R, Y, family("bernoulli"))
    np.testing.assert_allclose(g, Phi[:, act].T @ R, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(H, (Phi[:, act] * Y * (1 - Y)).T @ Phi[:, act], rtol=1e-11)
    # Kept blocks (a budget that holds the design) spare the kernel after the norms pass.
    assert D.counter.full == (1 if cache_bytes else 2)


def test_chunked_engine_equals_the_in_memory_engine(problem):
    """The sequential Laplace engine on row blocks takes the dense engine's path: the same
    relevance vectors, alphas, mode and evidence up to the order of the sums."""
    _, y, basis, Phi, _, block = problem
    dense = fit_laplace_sequential(Phi, y)
    D = chunked_design(block, Phi.shape[0], basis.n_basis_, chunk_rows=500, cache_bytes=0.0)
    chunked = fit_laplace_sequential(D, y)
    np.testing.assert_array_equal(chunked.active, dense.active)
    np.testing.assert_allclose(chunked.alpha[chunked.active], dense.alpha[dense.active], rtol=1e-6)
    np.testing.assert_allclose(chunked.posterior.mean, dense.posterior.mean, rtol=1e-7, atol=1e-9)
    assert chunked.log_evidence == pytest.approx(dense.log_evidence, rel=1e-10)
    assert chunked.actions == dense.actions
    # Without kept blocks each sequential step is a kernel pass.
    assert D.counter.full > 10


def test_fit_evidence_on_a_chunked_design_starts_from_a_subset(problem):
    """The chunked fit starts from the in-memory fit on a quarter of the rows and refines on all
    of them: a converged optimum of the full Laplace evidence, within a few nats of the cold
    fit's (another local optimum of many overlapping rbf columns), with probabilities a few
    hundredths apart on average."""
    _, y, basis, Phi, _, block = problem
    dense = fit_laplace_sequential(Phi, y)
    D = chunked_design(block, Phi.shape[0], basis.n_basis_, chunk_rows=500, cache_bytes=1e9)
    fit = fit_evidence(D, y, solver="sequential", likelihood="bernoulli")
    assert fit.converged
    assert subset_rows(3000).size == 750
    assert fit.log_evidence > dense.log_evidence - 3.0
    eta_c = Phi[:, fit.active] @ fit.posterior.mean[:, 0]
    eta_d = Phi[:, dense.active] @ dense.posterior.mean[:, 0]
    p_c, p_d = 1 / (1 + np.exp(-eta_c)), 1 / (1 + np.exp(-eta_d))
    assert np.max(np.abs(p_c - p_d)) < 0.2  # measured 0.16, where few rows lie
    assert np.mean(np.abs(p_c - p_d)) < 0.03  # measured 0.022
    assert np.mean((p_c > 0.5) != (p_d > 0.5)) < 0.02
    # The rows' products are kept: one kernel pass (the norms), the rest read from memory.
    assert D.counter.full == 1


def test_rvc_chunk_rows_fits_and_predicts(problem, tmp_path):
    X, y, *_ = problem
    Xt, yt = _boundary(4000, 1)
    kw = dict(gamma=1.0, centres="random", n_centres=60, random_state=0, moderated="probit")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mem = RVC(chunk_rows=None, **kw).fit(X, y)
        chunked = RVC(chunk_rows=400, **kw).fit(X, y)
    assert mem.chunked_passes_ is None
    assert chunked.chunked_passes_["full"] == 1
    assert chunked.training_.phi_active is None
    # Nearly the same classifier as in memory; Bayes error 0.10.
    err_mem = np.mean(mem.predict(Xt) != yt)
    err_chunked = np.mean(chunked.predict(Xt) != yt)
    assert err_chunked < err_mem + 0.01
    assert err_chunked < 0.13
    p = chunked.predict_proba(Xt)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    assert chunked.moderation_ == "probit"
    with pytest.raises(AttributeError, match="chunked path"):
        chunked.idata_
    # Saved without a training design, loaded to the same predictions.
    from bayes_rvm import load_model, save_model

    save_model(chunked, tmp_path / "chunked.nc")
    np.testing.assert_array_equal(load_model(tmp_path / "chunked.nc").predict_proba(Xt), p)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"centres": None}, "centres=None"),
        ({"inference": "mcmc"}, "inference='mcmc'"),
        ({"predictive": "rvm*"}, "predictive='rvm\\*'"),
        ({"moderated": "importance"}, "moderated='importance'"),
        ({"gamma": "evidence"}, "gamma='evidence'"),
    ],
)
def test_rvc_chunk_rows_refuses_what_needs_the_design(params, match):
    X, y = _boundary(200, 2)
    kw = {"gamma": 1.0, "centres": "random", "n_centres": 20, "chunk_rows": 50, **params}
    with pytest.raises(ValueError, match=match):
        RVC(**kw).fit(X, y)


def test_rvc_auto_takes_the_chunked_path_above_the_limit(monkeypatch):
    """``chunk_rows="auto"``: a design above the memory limit is fitted in row blocks instead of
    the MemoryError of ``chunk_rows=None``."""
    X, y = _boundary(2000, 3)
    monkeypatch.setenv("BAYES_RVM_MAX_MEMORY", "200kB")
    kw = dict(gamma=1.0, centres="random", n_centres=30, random_state=0)
    with pytest.raises(MemoryError):
        RVC(chunk_rows=None, **kw).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = RVC(**kw).fit(X, y)
    assert clf.chunked_passes_ is not None
    # The kept-blocks budget is capped by the limit: every pass rebuilds its blocks.
    assert clf.chunked_passes_["cached"] == 0


def test_active_leave_one_out_factors_match_their_definition(problem):
    # Truth: s_m of an active column by its definition, the curvature phi_m' B phi_m left after
    # the other active columns' posterior (H without column m), solved directly. Strongly
    # determined weights (small alpha) are where alpha S / (alpha - S) cancelled.
    from bayes_rvm.evidence.design import DenseDesign
    from bayes_rvm.evidence.laplace import _linearised_factors
    from bayes_rvm.evidence.mode import posterior_mode
    from bayes_rvm.families import family

    _, y, _, Phi, _, _ = problem
    act = np.array([0, 7, 19, 33, 60])
    alpha = np.full(Phi.shape[1], np.inf)
    alpha[act] = [1e-6, 1e-3, 0.5, 3.0, 1e-8]
    T = y[:, None]
    post = posterior_mode(Phi[:, act], T, alpha[act])
    s, _, is_act, _ = _linearised_factors(DenseDesign(Phi), post, act, alpha, (T, "bernoulli"))
    assert np.array_equal(np.flatnonzero(is_act), act)
    B = family("bernoulli").curvature(post.mu)[:, 0]
    for p, m in enumerate(act):
        rest = np.delete(act, p)
        Pr = Phi[:, rest]
        H = (Pr * B[:, None]).T @ Pr + np.diag(alpha[rest])
        u = Pr.T @ (B * Phi[:, m])
        direct = Phi[:, m] @ (B * Phi[:, m]) - u @ np.linalg.solve(H, u)
        assert s[m, 0] == pytest.approx(direct, rel=1e-8)
        assert s[m, 0] > 0


def test_a_nan_gain_does_not_end_the_fit(problem, monkeypatch):
    # Truth: the same fit with the factors intact. Before the active factors came from
    # diag(H^-1), cancellation gave NaN gains; np.argmax picked the NaN and the run read it as
    # "no step has a positive gain", ending the fit while steps still paid. Here the first three
    # passes with two or more active columns spoil the last active column's s.
    import bayes_rvm.evidence.laplace as lap

    _, y, _, Phi, _, _ = problem
    want = fit_laplace_sequential(Phi, y, probe_deletions=False)
    real, spoiled = lap._linearised_factors, []

    def factors(*args):
        s, q, is_act, fits = real(*args)
        act = args[2]
        if act.size > 1 and len(spoiled) < 3:
            s[act[-1]] = np.nan
            spoiled.append(int(act[-1]))
        return s, q, is_act, fits

    monkeypatch.setattr(lap, "_linearised_factors", factors)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got = fit_laplace_sequential(Phi, y, probe_deletions=False)
    assert len(spoiled) == 3
    assert got.converged and got.reason == want.reason
    assert got.log_evidence == pytest.approx(want.log_evidence, rel=1e-9)
