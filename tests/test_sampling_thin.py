"""Thinning (``sample_mcmc(thin=...)``) and the two halves of the rank R-hat, against
independent truths: explicit indexing, ArviZ's own estimators, and the known autocorrelation
of NUTS draws on an iid Gaussian."""

from __future__ import annotations

import json
import warnings

import arviz as az
import numpy as np
import pytest
import xarray as xr

from bayes_rvm.inference.diagnostics import ess_folded, rhat_parts, rhat_rank
from bayes_rvm.inference.sampling import STATISTICS_THIN, sample_mcmc, thinned


def _chains(seed=0, K=5, C=3, S=300):
    # iid, shifted chain means (bulk), a chain of twice the spread (folded), heavy tails, ties.
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(K, C, S))
    x[1] += np.arange(C)[:, None] * 0.3
    x[2] *= (1.0 + np.arange(C))[:, None]
    x[3] = rng.standard_cauchy(size=(C, S))
    x[4] = np.round(x[4])
    return x


def _dataset(x):
    return xr.Dataset({"v": xr.DataArray(np.moveaxis(x, 0, -1), dims=("chain", "draw", "k"))})


def test_rhat_parts_and_folded_ess_equal_arvizs_z_scale_and_folded_estimators():
    x = _chains()
    ds = _dataset(x)
    parts = rhat_parts(x)
    np.testing.assert_allclose(parts[:, 0], az.rhat(ds, method="z_scale")["v"].values, rtol=1e-10)
    np.testing.assert_allclose(parts[:, 1], az.rhat(ds, method="folded")["v"].values, rtol=1e-10)
    np.testing.assert_allclose(parts.max(axis=1), rhat_rank(x), rtol=0)
    np.testing.assert_allclose(ess_folded(x), az.ess(ds, method="folded")["v"].values, rtol=1e-9)
    # The shifted means show in the bulk half, the unequal spreads in the folded one.
    assert parts[1, 0] > parts[1, 1] and parts[2, 1] > 1.05 > 1.01 > parts[2, 0]


def _tree(C=2, S=12):
    draws = np.arange(C * S, dtype=float).reshape(C, S)
    diverging = np.zeros((C, S), dtype=bool)
    diverging[0, 1] = diverging[1, 6] = diverging[1, 11] = True
    post = xr.Dataset({"a": (("chain", "draw"), draws)}, coords={"draw": np.arange(S)})
    stats = xr.Dataset(
        {"diverging": (("chain", "draw"), diverging), "n_steps": (("chain", "draw"), draws + 1)},
        coords={"draw": np.arange(S)},
    )
    warm = xr.Dataset({"a": (("chain", "draw"), draws[:, :3])})
    return xr.DataTree.from_dict(
        {"posterior": post, "sample_stats": stats, "warmup_posterior": warm}
    )


def test_thinned_keeps_the_last_draw_of_each_block_and_every_divergence():
    dt = _tree()
    out = thinned(dt, 4)
    np.testing.assert_array_equal(out["posterior"]["a"].values, [[3, 7, 11], [15, 19, 23]])
    np.testing.assert_array_equal(out["posterior"]["draw"].values, [0, 1, 2])
    np.testing.assert_array_equal(out["sample_stats"]["n_steps"].values, [[4, 8, 12], [16, 20, 24]])
    # Divergences at draws 1 (chain 0), 6 and 11 (chain 1): blocks 0; 1 and 2.
    np.testing.assert_array_equal(
        out["sample_stats"]["diverging"].values, [[True, False, False], [False, True, True]]
    )
    assert out["warmup_posterior"]["a"].shape == (2, 3)  # warmup untouched
    # A number of draws that is no multiple of thin: the incomplete last block is dropped.
    np.testing.assert_array_equal(thinned(dt, 5)["posterior"]["a"].values[0], [4, 9])
    np.testing.assert_array_equal(thinned(dt, 1)["posterior"]["a"].values, dt["posterior"]["a"])


@pytest.mark.parametrize("thin", [0, -2, 1.5, True, "four"])
def test_sample_mcmc_refuses_a_bad_thin_naming_it(thin):
    import pymc as pm

    with pm.Model() as model:
        pm.Normal("x")
    with pytest.raises(ValueError, match="thin must be a positive integer"):
        sample_mcmc(model, thin=thin)


def test_thinning_makes_nuts_draws_of_an_iid_gaussian_nearly_independent_in_their_spread():
    # Truth: a standard Gaussian in 45 dimensions, whose chains cannot disagree. NUTS draws are
    # antithetic in x (bulk ESS > 1 per draw) but positively correlated in |x - median|: at
    # 2 x 500 draws the folded R-hat of some parameter exceeds 1.01 in nearly every run
    # (benchmarks/bench_mcmc.py --sections rhat: 40 of 40). Every 4th of 2 x 2000 draws is
    # nearly independent in both.
    import nutpie
    import pymc as pm

    with pm.Model() as model:
        pm.Normal("x", 0.0, 1.0, shape=45)
    compiled = nutpie.compile_pymc_model(model, backend="numba")
    per_draw = {}
    for thin in (1, STATISTICS_THIN):
        runs = []
        for seed in (0, 1):
            dt = nutpie.sample(
                compiled, draws=500 * thin, tune=300, chains=2, seed=seed, progress_bar=False
            )
            x = thinned(dt, thin)["posterior"]["x"].transpose("x_dim_0", "chain", "draw").values
            assert x.shape == (45, 2, 500)
            runs.append(np.median(ess_folded(x)) / 1000)
        per_draw[thin] = np.mean(runs)
    assert per_draw[1] < 0.55  # measured 0.39 (40 runs)
    assert per_draw[STATISTICS_THIN] > 0.75  # measured 0.90


def _sinc2d(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-5, 5, (n, 2))
    return X, np.sinc(X[:, 0] / np.pi) * np.cos(X[:, 1] / 2) + 0.1 * rng.standard_normal(n)


def test_statistics_path_thins_by_default_and_its_draws_keep_the_type2_posterior():
    # A fit from sufficient statistics thins by STATISTICS_THIN ("auto"), an in-memory one not.
    # Truth for the draws: the type-II fit's Laplace posterior of the weights at 4000 rows, to
    # which the MCMC posterior mean of the prediction is close (both are close to the noiseless
    # function; their difference is well inside the posterior sd of 0.1 sqrt(10 / 4000)).
    from bayes_rvm import RVR

    X, y = _sinc2d(4000)
    kw = {"gamma": 0.5, "centres": ("random", 10), "random_state": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stats = RVR(
            inference="mcmc",
            sampler_config={"draws": 200, "tune": 200, "chains": 2},
            chunk_rows=1500,
            **kw,
        )
        stats.fit(X, y, progressbar=False)
        memory = RVR(
            inference="mcmc",
            sampler_config={"draws": 50, "tune": 100, "chains": 2},
            chunk_rows=None,
            **kw,
        )
        memory.fit(X, y, progressbar=False)
        type2 = RVR(chunk_rows=1500, **kw).fit(X, y)
    settings = [json.loads(m.idata_.attrs["settings"]) for m in (stats, memory)]
    assert settings[0]["thin"] == STATISTICS_THIN and settings[1]["thin"] == 1
    assert stats.idata_["posterior"].sizes["draw"] == 200
    # every kept draw is one NUTS transition of 4 (sample_stats thinned alongside)
    assert stats.idata_["sample_stats"].sizes["draw"] == 200
    X_test = np.random.default_rng(1).uniform(-4, 4, (200, 2))
    np.testing.assert_allclose(stats.predict(X_test), type2.predict(X_test), atol=0.01)


def test_diagnose_reports_the_halves_and_says_when_only_the_spreads_differ():
    from bayes_rvm.inference.diagnostics import SamplingDiagnosticsWarning, diagnose

    rng = np.random.default_rng(3)
    z = rng.normal(size=(2, 500, 3))
    spread = z * np.array([1.0, 1.6])[:, None, None]  # same centre, different spreads
    shifted = z + np.array([0.0, 0.5])[:, None, None]
    messages = {}
    for name, la in (("spread", spread), ("shifted", shifted)):
        sigma = np.exp(rng.normal(size=(2, 500)) * 0.1)
        post = xr.Dataset(
            {
                "alpha": (("chain", "draw", "basis"), np.exp(la)),
                "sigma": (("chain", "draw"), sigma),
            }
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            diag = diagnose(xr.DataTree.from_dict({"posterior": post}))
        caught = [w for w in caught if issubclass(w.category, SamplingDiagnosticsWarning)]
        assert any("R-hat" in str(w.message) for w in caught)
        x = np.concatenate([np.moveaxis(np.log(np.exp(la)), 2, 0), sigma[None]])  # as diagnose
        parts = rhat_parts(x)
        assert diag["max_rhat_bulk"] == pytest.approx(parts[:, 0].max(), rel=1e-12)
        assert diag["max_rhat_folded"] == pytest.approx(parts[:, 1].max(), rel=1e-12)
        messages[name] = " ".join(str(w.message) for w in caught)
    assert "in spread only" in messages["spread"]
    assert "in spread only" not in messages["shifted"]
