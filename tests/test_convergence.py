"""The vectorised R-hat and ESS against ArviZ's own, scalar by scalar."""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pytest
import xarray as xr

from bayes_rvm.inference.diagnostics import (
    _z_scale,
    ess_bulk,
    ess_tail,
    rhat_rank,
)


def _chains(seed=0, K=7, C=4, S=301):
    # iid, strongly autocorrelated AR(1), chains with shifted means, heavy tails, ties, a
    # constant scalar and one with a NaN draw.
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(K, C, S))
    for t in range(1, S):
        x[1, :, t] = 0.95 * x[1, :, t - 1] + rng.normal(size=C)
    x[2] += np.arange(C)[:, None] * 0.5
    x[3] = rng.standard_cauchy(size=(C, S))
    x[4] = np.round(x[4])
    x[5] = 2.5
    x[6, -1, 7] = np.nan
    return x


def _arviz(x):
    da = xr.DataArray(np.moveaxis(x, 0, -1), dims=("chain", "draw", "k"))
    return da


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("shape", [(4, 301), (2, 1000), (1, 40)])
def test_rhat_and_ess_equal_arviz(shape):
    x = _chains(K=7, C=shape[0], S=shape[1])
    ds = xr.Dataset({"v": _arviz(x)})
    np.testing.assert_allclose(rhat_rank(x), az.rhat(ds)["v"].values, rtol=1e-10, equal_nan=True)
    np.testing.assert_allclose(
        ess_bulk(x), az.ess(ds, method="bulk")["v"].values, rtol=1e-9, equal_nan=True
    )
    np.testing.assert_allclose(
        ess_tail(x), az.ess(ds, method="tail")["v"].values, rtol=1e-9, equal_nan=True
    )


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_threaded_diagnostics_equal_arviz_on_every_chunk(monkeypatch):
    # 200 scalars: split between threads (at least 64 each) where the process has 2+ CPUs; forced
    # to 3 chunks here so that the split runs on any machine. The special scalars of _chains sit
    # in the first chunk; copies at the end check the last one.
    from bayes_rvm.inference import diagnostics

    monkeypatch.setattr(diagnostics, "_usable_cpus", lambda: 3)
    x = _chains(K=200, C=4, S=301)
    x[-7:] = x[:7]
    ds = xr.Dataset({"v": _arviz(x)})
    np.testing.assert_allclose(rhat_rank(x), az.rhat(ds)["v"].values, rtol=1e-10, equal_nan=True)
    np.testing.assert_allclose(
        ess_bulk(x), az.ess(ds, method="bulk")["v"].values, rtol=1e-9, equal_nan=True
    )
    np.testing.assert_allclose(
        ess_tail(x), az.ess(ds, method="tail")["v"].values, rtol=1e-9, equal_nan=True
    )


def test_diagnose_reports_arvizs_figures_on_log_alpha_sigma_and_w():
    from bayes_rvm.inference import diagnose

    rng = np.random.default_rng(5)
    C, S, M = 3, 200, 4
    post = xr.Dataset(
        {
            "alpha": (("chain", "draw", "basis"), np.exp(rng.normal(size=(C, S, M)))),
            "sigma": (("chain", "draw"), np.abs(rng.normal(size=(C, S))) + 0.1),
            "w": (
                ("chain", "draw", "basis"),
                rng.normal(size=(C, S, M)) + np.arange(C)[:, None, None],
            ),
        }
    )
    diag = diagnose(xr.DataTree.from_dict({"posterior": post}), warn=False)
    hyper = post[["alpha", "sigma"]].assign(alpha=np.log(post["alpha"]))
    ref_rhat = max(float(v.max()) for v in az.rhat(hyper).data_vars.values())
    ref_bulk = min(float(v.min()) for v in az.ess(hyper, method="bulk").data_vars.values())
    ref_tail = min(float(v.min()) for v in az.ess(hyper, method="tail").data_vars.values())
    assert diag["max_rhat"] == pytest.approx(ref_rhat, rel=1e-10)
    assert diag["min_ess_bulk"] == pytest.approx(ref_bulk, rel=1e-9)
    assert diag["min_ess_tail"] == pytest.approx(ref_tail, rel=1e-9)
    assert diag["max_rhat_w"] == pytest.approx(float(az.rhat(post[["w"]])["w"].max()), rel=1e-10)
    assert diag["max_rhat_w"] > 1.2  # the chains of w have different means


def test_diagnose_of_one_chain_has_no_rhat_as_arviz_and_no_numpy_warning():
    # R-hat needs two chains (ArviZ's is NaN too); the reductions over those NaNs printed four
    # "All-NaN slice" RuntimeWarnings from this package at sampler_config={"chains": 1}.
    from bayes_rvm.inference import diagnose

    rng = np.random.default_rng(0)
    post = xr.Dataset(
        {
            "alpha": (("chain", "draw", "basis"), np.exp(rng.normal(size=(1, 200, 3)))),
            "sigma": (("chain", "draw"), np.abs(rng.normal(size=(1, 200))) + 0.1),
            "w": (("chain", "draw", "basis"), rng.normal(size=(1, 200, 3))),
        }
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        diag = diagnose(xr.DataTree.from_dict({"posterior": post}), warn=False)
    assert np.isnan(float(az.rhat(post[["sigma"]])["sigma"]))
    assert np.isnan(diag["max_rhat"]) and np.isnan(diag["max_rhat_w"])
    ref_bulk = float(az.ess(post[["sigma"]], method="bulk")["sigma"])
    assert diag["min_ess_bulk"] <= ref_bulk + 1e-6 and diag["min_ess_bulk"] > 50


def test_z_scale_is_the_normal_quantile_of_the_average_ranks():
    # The quantiles of ranks 1..n are computed once and placed by each row's order, ndtri only
    # at tied ranks: the same numbers as ndtri of every rank (Blom's offset), ties included
    # (rounded draws, a constant row, the folded distances |x - median| that pair up).
    from scipy import special, stats

    rng = np.random.default_rng(3)
    x = rng.normal(size=(5, 4, 250))
    x[1] = np.round(x[1])
    x[2] = 1.0
    x[3] = np.abs(x[3] - np.median(x[3]))
    x[4, :, :10] = x[4, 0, 10]  # one run of ties among distinct values
    n = 4 * 250
    ranks = stats.rankdata(x.reshape(5, n), axis=1, method="average")
    want = special.ndtri((ranks - 0.375) / (n + 0.25)).reshape(x.shape)
    np.testing.assert_array_equal(_z_scale(x), want)


@pytest.mark.parametrize(
    "prior, form, names_nu, names_accept",
    [
        ("ard", "marginal", False, False),
        ("student_t", "marginal", True, False),
        ("ard", "joint", False, True),
    ],
)
def test_divergence_warning_names_the_remedy_of_the_sampled_model(
    prior, form, names_nu, names_accept
):
    import dataclasses

    from bayes_rvm.inference import SamplingDiagnosticsWarning, diagnose
    from bayes_rvm.models.graphs import rvm_regression_model
    from bayes_rvm.models.spec import model_spec

    rng = np.random.default_rng(0)
    spec = model_spec(rvm_regression_model(rng.normal(size=(6, 3)), rng.normal(size=6)))
    spec = dataclasses.replace(spec, prior=prior, form=form)
    C, S = 2, 100
    dt = xr.DataTree.from_dict(
        {
            "posterior": xr.Dataset(
                {"alpha": (("chain", "draw", "basis"), np.exp(rng.normal(size=(C, S, 3))))}
            ),
            "sample_stats": xr.Dataset(
                {"diverging": (("chain", "draw"), np.arange(C * S).reshape(C, S) < 7)}
            ),
        }
    )
    with pytest.warns(SamplingDiagnosticsWarning, match="7 of 200 draws diverged") as said:
        diag = diagnose(dt, advice="estimator", spec=spec)
    assert diag["divergences"] == 7
    text = " ".join(str(w.message) for w in said if "diverged" in str(w.message))
    assert ("prior_params={'nu'" in text) is names_nu
    assert ("target_accept" in text) is names_accept
    assert "mcmc_basis" in text


def test_count_divergences_advise_a_higher_acceptance_not_the_basis_already_sampled():
    # A count fit samples the type-II relevance vectors, partly centred, at target_accept 0.99:
    # the advice names 0.995 and a longer warm-up, never mcmc_basis='relevant' again.
    import dataclasses

    from bayes_rvm.inference import SamplingDiagnosticsWarning, diagnose
    from bayes_rvm.models.graphs import rvm_regression_model
    from bayes_rvm.models.spec import model_spec

    rng = np.random.default_rng(1)
    spec = model_spec(rvm_regression_model(rng.normal(size=(6, 3)), rng.normal(size=6)))
    spec = dataclasses.replace(spec, likelihood="poisson", form="partly centred")
    dt = xr.DataTree.from_dict(
        {
            "posterior": xr.Dataset(
                {"alpha": (("chain", "draw", "basis"), np.exp(rng.normal(size=(2, 100, 3))))}
            ),
            "sample_stats": xr.Dataset({"diverging": (("chain", "draw"), np.eye(2, 100) > 0)}),
        }
    )
    with pytest.warns(SamplingDiagnosticsWarning, match="2 of 200 draws diverged") as said:
        diagnose(dt, advice="estimator_relevant", spec=spec)
    text = " ".join(str(w.message) for w in said if "diverged" in str(w.message))
    assert "'target_accept': 0.995" in text and "tune" in text
    assert "mcmc_basis" not in text


def test_whitened_count_divergences_name_the_expansion_and_a_higher_acceptance():
    # The estimator's count model (weights whitened around the type-II mode, target_accept
    # 0.9): the advice says where its divergences come from and names 0.99.
    import dataclasses

    from bayes_rvm.inference.diagnostics import divergence_advice
    from bayes_rvm.models.graphs import rvm_poisson_model
    from bayes_rvm.models.spec import model_spec

    rng = np.random.default_rng(2)
    Phi = rng.normal(size=(8, 3))
    spec = model_spec(rvm_poisson_model(Phi, rng.poisson(2.0, size=8), reference=np.zeros(3)))
    assert spec.form == "whitened"
    text = divergence_advice("estimator", spec)
    assert "expanded at the type-II mode" in text and "'target_accept': 0.99" in text
    other = divergence_advice("estimator", dataclasses.replace(spec, form="joint"))
    assert "expanded" not in other and "0.995" in other
    labels = divergence_advice("estimator", dataclasses.replace(spec, likelihood="bernoulli"))
    assert "expanded at the type-II mode" in labels and "labels the expansion" in labels
    # A model of one's own (RVC does not sample this form): the remedy for sample_mcmc.
    own = divergence_advice("model", dataclasses.replace(spec, likelihood="bernoulli"))
    assert "the reference weights" in own and "sample_mcmc(..., nuts=" in own
    assert "fit(X, y" not in own


def test_rhat_warning_names_the_basis_functions_the_chains_keep_in_different_modes():
    # Column 2's log alpha: one chain keeps it relevant (around -7.5) and three prune it
    # (around 4), as iris's chains each kept another of nearly collinear basis functions; its
    # chain medians lie 11.5 apart at a within-chain sd of 1, so the warning names it and
    # advises the basis or the kernel, not more draws. Column 1's chains disagree only a
    # little (0.5 sd, R-hat above 1.01 still): no modes named, the usual advice.
    from bayes_rvm.inference import SamplingDiagnosticsWarning, diagnose
    from bayes_rvm.inference.diagnostics import _relevance_modes

    rng = np.random.default_rng(4)
    la = rng.normal(size=(4, 500, 3))
    shift = {
        "modes": (2, np.array([0.0, 0.0, 0.0, -11.5])),
        "slow": (1, np.array([0, 0, 0, 0.5])),
        "apart": (1, np.array([0, 0, 0, 1.5])),  # R-hat far above 1.01, no separate modes
    }
    texts, apart, posts = {}, {}, {}
    for case, (column, by_chain) in shift.items():
        x = la.copy()
        x[:, :, column] += by_chain[:, None]
        post = xr.Dataset(
            {"alpha": (("chain", "draw", "basis"), np.exp(x))}, coords={"basis": [10, 11, 12]}
        )
        posts[case] = post
        with pytest.warns(SamplingDiagnosticsWarning, match="R-hat") as said:
            diagnose(xr.DataTree.from_dict({"posterior": post}), advice="estimator")
        texts[case] = " ".join(str(w.message) for w in said)
        # The separation the message quotes, computed here: chain medians over pooled sd.
        medians = np.median(x[:, :, column], axis=1)
        apart[case] = np.ptp(medians) / np.sqrt(np.mean(np.var(x[:, :, column], axis=1)))
    assert apart["modes"] > 10.0 and apart["slow"] < 1.0
    assert (
        f"(12: log alpha's chain medians up to {apart['modes']:.0f} within-chain" in texts["modes"]
    )
    assert "mcmc_basis': 'relevant'" in texts["modes"] and "Raise tune" not in texts["modes"]
    assert "different basis functions" not in texts["slow"] and "Raise tune" in texts["slow"]
    # Just above 1.01 the largest of many R-hats can be the draws' noise; far above, not.
    assert "Just above 1.01" in texts["slow"] and "Just above 1.01" not in texts["apart"]
    assert "'mcmc_basis': 'relevant', 'draws': 4000" in texts["apart"]
    # The ESS warning (the modes' ESS is tiny) points at the modes, not at more draws.
    assert "sit in different modes" in texts["modes"] and "Raise draws" not in texts["modes"]
    # Separable classes are a classifier's cause only (no spec here: not said).
    assert "classes separate" not in texts["modes"]
    assert "classes separate" in _relevance_modes(posts["modes"], classes=True)
