"""compare() on fits from sufficient statistics: the elpd of all N rows from the rows kept.

Truth: PSIS-LOO on every row, from the exact leave-one-out terms of all N rows at the same
posterior draws (computable at N = 20000), and the sampling spread of the subset's mean
computed from those all-row terms.
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import arviz as az
import numpy as np
import pytest

from bayes_rvm.evidence.problem import prior_column_scale
from bayes_rvm.inference import sample_mcmc
from bayes_rvm.models.statistics import log_likelihood_rows, rvm_statistics_model
from bayes_rvm.posterior.comparison import compare, elpd
from bayes_rvm.posterior.draws import gaussian_loo_terms

N = 20_000


def _fit(Phi, y, rows, seed=0, draws=150):
    """MCMC on the statistics model of ``Phi``, ``y`` keeping the terms of ``rows``."""
    n = y.size
    st = SimpleNamespace(gram=Phi.T @ Phi, cross=Phi.T @ y[:, None], tt=np.array([y @ y]), n=n)
    kw = {
        "phi_scale": prior_column_scale(np.linalg.norm(Phi, axis=0), n),
        "y_scale": float(np.sqrt(np.mean(y**2))),
    }
    model = rvm_statistics_model(st, rows=(rows, Phi[rows], y[rows]), **kw)
    return sample_mcmc(
        model, draws=draws, tune=150, chains=2, random_seed=seed, progressbar=False, warn=False
    )


def _all_rows(dt, Phi, y):
    """The same fit's PSIS-LOO over all N rows: the exact terms of every row at its draws."""
    post = dt["posterior"].dataset
    alpha = post["alpha"].values.reshape(300, -1)
    beta = post["beta"].values.reshape(-1)
    full = dt.copy()
    ll = gaussian_loo_terms(Phi, y[:, None], alpha, beta)
    full["log_likelihood"] = az.from_dict({"log_likelihood": {"y": ll.reshape(2, 150, -1)}})[
        "log_likelihood"
    ]
    full.attrs.pop("n_data_rows")
    full.attrs.pop("log_likelihood_rows")
    return az.loo(full, pointwise=True)


def _problem(n: int):
    rng = np.random.default_rng(0)
    x = rng.uniform(-3.0, 3.0, n)
    y = np.sin(x) + 0.1 * rng.standard_normal(n)
    centres = np.linspace(-3, 3, 7)
    return np.column_stack([np.ones(n), np.exp(-0.5 * (x[:, None] - centres) ** 2)]), y


@pytest.mark.slow
def test_statistics_elpd_is_on_the_scale_of_all_rows_against_all_row_loo():
    # About two minutes on a busy 2-core machine, most of it PSIS over all 20000 rows.
    Phi, y = _problem(N)
    rows = log_likelihood_rows(N)
    wide = _fit(Phi, y, rows)
    Phi_narrow = np.delete(Phi, 4, axis=1)  # the bump at the centre left out: a worse model
    narrow = _fit(Phi_narrow, y, rows, seed=1)
    res, method = elpd(wide)
    truth = _all_rows(wide, Phi, y)
    assert method == f"PSIS-LOO, {rows.size} of {N} rows"
    assert res.n_data_points == N and res.subsample_size == rows.size == 2000
    # The subsampling sd, from the all-row terms (simple random sampling without replacement).
    e = truth.elpd_i.values
    sd = N * np.std(e, ddof=1) * np.sqrt((1 - rows.size / N) / rows.size)
    assert res.subsampling_se == pytest.approx(sd, rel=0.15)
    assert abs(res.elpd - truth.elpd) < 3 * sd
    assert res.se == pytest.approx(truth.se, rel=0.15)
    # The subset's terms are the all-row terms of its rows.
    np.testing.assert_allclose(res.elpd_i.values, e[rows], rtol=1e-6)
    # compare(): the difference on the scale of N, within its subsampling error of the
    # all-row difference.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = compare({"wide": wide, "narrow": narrow})
    truth_narrow = _all_rows(narrow, Phi_narrow, y)
    exact_diff = truth_narrow.elpd - truth.elpd  # arviz's sign: below the best
    assert table.index[0] == "wide"
    assert set(table["method"]) == {f"PSIS-LOO, 2000 of {N} rows"}
    diff, dse = table.loc["narrow", "elpd_diff"], table.loc["narrow", "subsampling_dse"]
    d = truth.elpd_i.values - truth_narrow.elpd_i.values
    dse_true = N * np.std(d, ddof=1) * np.sqrt((1 - rows.size / N) / rows.size)
    assert dse == pytest.approx(dse_true, rel=0.2)
    assert abs(diff - exact_diff) < 3 * dse_true
    assert table.loc["narrow", "dse"] == pytest.approx(np.sqrt(N) * np.std(d), rel=0.2)


def test_srs_estimate_of_a_statistics_fit():
    # The estimator itself on a known subset: N times the mean, the finite-population variance.
    n = 3000
    Phi, y = _problem(n)
    rows = log_likelihood_rows(n, 200)
    dt = _fit(Phi, y, rows, draws=100)
    res, method = elpd(dt)
    assert method == f"PSIS-LOO, 200 of {n} rows"
    e = res.elpd_i.values
    m = e.size
    assert res.elpd == pytest.approx(n * e.mean(), rel=1e-12)
    var = n**2 * (1 - m / n) * np.var(e, ddof=1) / m
    assert res.subsampling_se == pytest.approx(np.sqrt(var), rel=1e-10)
    plain = az.loo(dt)
    assert res.p == pytest.approx(plain.p * n / m, rel=1e-10)
    # Two fits of the same rows compare; a fingerprint of other rows (same N) is refused.
    other = dt.copy()
    other.attrs["fingerprint_y"] = "0123456789ab"
    dt.attrs["fingerprint_y"] = "ba9876543210"
    with pytest.raises(ValueError, match="different data"):
        compare({"a": dt, "b": other})


def test_an_estimator_fit_from_statistics_fingerprints_all_its_rows(monkeypatch):
    # Its log likelihood keeps 60 of 400 rows; the fingerprint is of all 400: a data set that
    # differs in one row outside the 60 has another, so compare() tells the two apart.
    from bayes_rvm import RVR
    from bayes_rvm.models import statistics as statistics_model
    from bayes_rvm.posterior.comparison import data_fingerprints

    full = statistics_model.log_likelihood_rows
    monkeypatch.setattr(statistics_model, "log_likelihood_rows", lambda n: full(n, 60))
    rng = np.random.default_rng(2)
    X = rng.uniform(-3, 3, (400, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(400)
    kw = {"gamma": 0.5, "centres": ("random", 8), "chunk_rows": 150, "random_state": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = RVR(inference="mcmc", sampler_config={"draws": 50, "tune": 100, "chains": 2}, **kw)
        dt = est.fit(X, y, progressbar=False).idata_
    assert dt["log_likelihood"]["y"].sizes["obs"] == 60 and dt.attrs["n_data_rows"] == 400
    assert dt.attrs["fingerprint_y"] == data_fingerprints(y=y)["fingerprint_y"]
    assert dt.attrs["fingerprint_X"] == data_fingerprints(X=X)["fingerprint_X"]
    outside = np.setdiff1d(np.arange(400), full(400, 60))[0]
    other = y.copy()
    other[outside] += 1.0
    assert data_fingerprints(y=other)["fingerprint_y"] != dt.attrs["fingerprint_y"]
    assert elpd(dt)[1] == "PSIS-LOO, 60 of 400 rows"


def test_a_vi_fit_from_statistics_is_corrected_and_scaled():
    from bayes_rvm.inference.variational import fit_vi
    from bayes_rvm.posterior.comparison import PSIS_APPROX

    n = 3000
    Phi, y = _problem(n)
    rows = log_likelihood_rows(n, 200)
    st = SimpleNamespace(gram=Phi.T @ Phi, cross=Phi.T @ y[:, None], tt=np.array([y @ y]), n=n)
    model = rvm_statistics_model(st, rows=(rows, Phi[rows], y[rows]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dt = fit_vi(model, draws=100, random_seed=0, n=300)
        res, method = elpd(dt)
    assert method == f"{PSIS_APPROX}, 200 of {n} rows"
    assert res.approx_posterior and res.n_data_points == n
    assert res.elpd == pytest.approx(n * res.elpd_i.values.mean(), rel=1e-12)
