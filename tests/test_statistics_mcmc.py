"""MCMC after a fit from sufficient statistics (issue 29, item 3), against independent truths.

The in-memory MCMC over every basis function, and the leave-one-out densities of the Gaussian
marginal computed from its dense N x N covariance.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from bayes_rvm import RVR


def _sinc2d(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-5, 5, (n, 2))
    f = np.sinc(X[:, 0] / np.pi) * np.cos(X[:, 1] / 2)
    return X, f + 0.1 * rng.standard_normal(n), rng.uniform(-5, 5, (500, 2))


def _fit(X, y, **kwargs) -> RVR:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return RVR(inference="mcmc", random_state=0, **kwargs).fit(X, y, progressbar=False)


def test_default_statistics_mcmc_converges_and_predicts_as_the_in_memory_mcmc():
    # Truth: the in-memory MCMC of the same call, over every basis function (mcmc_basis="auto"
    # there); from statistics "auto" samples the type-II relevance vectors.
    X, y, X_test = _sinc2d(5000)
    grid = np.linspace(-4, 4, 4)
    centres = np.array([[a, b] for a in grid for b in grid])  # columns well apart: identified
    # 2 x 500 kept draws, every 4th of 2 x 2000 (the statistics path's thin="auto"): max R-hat
    # over the 17 quantities 1.0036-1.0085 at random_state 0-5; unthinned 1.0058-1.0111, three
    # of six above 1.01, each time the folded half (NUTS draws are antithetic in the values and
    # positively correlated in their spread: tests/test_sampling_thin.py).
    kw = {"gamma": 0.5, "centres": centres, "sampler_config": {"draws": 500, "chains": 2}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stats = RVR(inference="mcmc", random_state=0, chunk_rows=700, **kw)
        stats.fit(X, y, progressbar=False)
    memory = _fit(X, y, chunk_rows=None, **kw)
    assert stats.statistics_ is not None and memory.statistics_ is None
    assert stats._mcmc_basis() == "relevant" and memory._mcmc_basis() == "all"
    post = stats.idata_["posterior"]
    assert post.sizes["basis"] == stats.active_.size < memory.basis_.n_basis_
    d = json.loads(stats.idata_.attrs["diagnostics"])
    assert d["max_rhat"] <= 1.01 and d["divergences"] == 0
    assert not [w for w in caught if "R-hat" in str(w.message)]
    # The posterior sd of a prediction is about 0.1 sqrt(17 / 5000) = 0.006; the Monte Carlo
    # error of the means, a few 1e-4.
    np.testing.assert_allclose(stats.predict(X_test), memory.predict(X_test), atol=0.005)
    sigma = [float(m.idata_["posterior"]["sigma"].mean()) for m in (stats, memory)]
    assert sigma[0] == pytest.approx(sigma[1], rel=0.01)


def _dense_loo_terms(Phi, y, alpha, beta):
    """``ln p(t_n | t_-n, alpha, beta)`` per draw from the dense covariance ``C`` of the
    marginal, ``C = I / beta + Phi A^-1 Phi'``, through its inverse: ``t_n | t_-n`` has
    precision ``P_nn`` and mean ``t_n - (P t)_n / P_nn``."""
    out = np.empty((alpha.shape[0], y.size))
    for s in range(alpha.shape[0]):
        C = np.eye(y.size) / beta[s] + (Phi / alpha[s]) @ Phi.T
        P = np.linalg.inv(C)
        p = np.diag(P)
        e = (P @ y) / p
        out[s] = 0.5 * (np.log(p) - np.log(2 * np.pi)) - 0.5 * p * e**2
    return out


def _conditional_term(Phi, y, alpha, beta, n):
    """The same density by conditioning the Gaussian on the other rows (a solve per row)."""
    C = np.eye(y.size) / beta + (Phi / alpha) @ Phi.T
    rest = np.delete(np.arange(y.size), n)
    k = np.linalg.solve(C[np.ix_(rest, rest)], C[rest, n])
    mean, var = k @ y[rest], C[n, n] - k @ C[rest, n]
    return -0.5 * (np.log(2 * np.pi * var) + (y[n] - mean) ** 2 / var)


def test_statistics_log_likelihood_holds_the_exact_loo_terms_of_its_rows(monkeypatch):
    # The documented meaning of idata_.log_likelihood after a fit from statistics: the exact
    # leave-one-out densities ln p(t_n | t_-n, alpha, sigma) of a subset of rows in the fit to
    # all N; here 60 of 400 rows, against the dense covariance of the marginal.
    import arviz as az

    from bayes_rvm.models import statistics as statistics_model

    full = statistics_model.log_likelihood_rows
    monkeypatch.setattr(statistics_model, "log_likelihood_rows", lambda n: full(n, 60))
    X, y, _ = _sinc2d(400, seed=1)
    kw = {"gamma": 0.5, "centres": ("random", 12), "chunk_rows": 150}
    est = _fit(X, y, sampler_config={"draws": 100, "tune": 150, "chains": 2}, **kw)
    dt = est.idata_
    rows = full(400, 60)
    assert dt.attrs["log_likelihood_rows"] == "subset of 60 of 400 data rows"
    np.testing.assert_array_equal(dt["log_likelihood"]["y"].coords["obs"].values, rows)
    post = dt["posterior"].dataset
    alpha = post["alpha"].values.reshape(200, -1)
    beta = post["sigma"].values.reshape(-1) ** -2.0
    Phi = est.basis_.transform(X, columns=est._mcmc_columns())
    dense = _dense_loo_terms(Phi, y, alpha, beta)
    stored = dt["log_likelihood"]["y"].values.reshape(200, -1)
    np.testing.assert_allclose(stored, dense[:, rows], rtol=1e-7, atol=1e-9)
    for s, j in ((0, 0), (57, 31), (199, 59)):
        assert stored[s, j] == pytest.approx(
            _conditional_term(Phi, y, alpha[s], beta[s], rows[j]), rel=1e-7
        )
    # Its PSIS-LOO elpd per row estimates the whole data's (the subset is a sample of rows).
    per_row = az.loo(dt).elpd / rows.size
    dense_dt = dt.copy()
    dense_dt["log_likelihood"] = az.from_dict({"log_likelihood": {"y": dense.reshape(2, 100, -1)}})[
        "log_likelihood"
    ]
    whole = az.loo(dense_dt)
    sd_rows = np.std(whole.elpd_i.values) / np.sqrt(rows.size)  # sampling sd of the mean
    assert abs(per_row - whole.elpd / 400) < 3 * sd_rows


def test_statistics_mcmc_at_fifty_thousand_rows_has_no_in_out_bimodality():
    # A prior stated for unit-norm columns shrinks a basis function's per-row contribution as
    # 1/sqrt(N): at N = 5e4 a relevance vector needs alpha_rel ~ 1e-4.7 of it, deep in the
    # half-Cauchy's tail, and a weakly supported column's chains split between the likelihood's
    # bump and the prior's mode (measured with that prior, seed 1: chain means of log10 alpha 6.9
    # apart, 7 columns more than 1 apart; seed 0: 4.2, 4 columns). Stated per row (unit RMS,
    # prior_column_scale) the chains agree (0.16-0.43 apart over seeds 0-3).
    X, y, _ = _sinc2d(50_000, seed=1)
    config = {"draws": 300, "tune": 300, "chains": 2}
    est = _fit(X, y, centres=("random", 50), chunk_rows=8192, sampler_config=config)
    assert est._fitted_on_statistics
    log10_alpha = np.log10(est.idata_["posterior"]["alpha"]).mean("draw").values
    assert log10_alpha.shape[1] >= 15  # the relevance vectors, sampled
    assert np.abs(log10_alpha[0] - log10_alpha[1]).max() < 1.0
