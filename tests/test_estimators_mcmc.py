"""RVR with inference="mcmc" and the DataTree of a type-II fit, in the units of the data."""

import pickle

import numpy as np
import pytest

from bayes_rvm.comparison import compare
from bayes_rvm.datasets import make_sinc
from bayes_rvm.estimators import RVR
from bayes_rvm.io import load_model, save_model

GAMMA = 1.0 / 9.0
X_GRID = np.linspace(-10, 10, 101)[:, None]


@pytest.fixture(scope="module")
def data():
    X, y = make_sinc(50, random_state=11)
    return X, 250.0 * y  # targets far from unit scale: the DataTree must come back in these units


@pytest.fixture(scope="module")
def fits(data):
    X, y = data
    type2 = RVR(gamma=GAMMA).fit(X, y)
    mcmc = RVR(gamma=GAMMA, inference="mcmc", draws=500, tune=500, chains=2, random_state=3)
    return type2, mcmc.fit(X, y)


def test_type2_datatree_matches_the_fit(fits, data):
    type2, _ = fits
    dt = type2.idata_
    post = dt["posterior"].dataset
    np.testing.assert_array_equal(post["basis"].values, type2.active_)
    w = post["w"].values.reshape(-1, type2.active_.size)
    # Draws of w ~ N(m, Sigma): their mean is m within Monte Carlo error.
    se = np.sqrt(np.diag(type2.sigma_) / w.shape[0])
    assert np.all(np.abs(w.mean(0) - type2.fit_.mean[:, 0]) < 5 * se)
    assert float(post["sigma"].values.ravel()[0]) == pytest.approx(np.sqrt(type2.noise_variance_))
    assert dt["log_likelihood"]["y"].shape == (1, 1000, len(data[0]))
    np.testing.assert_allclose(dt["observed_data"]["y"].values, data[1])


def test_mcmc_agrees_with_type2_in_data_units(fits):
    type2, mcmc = fits
    sigma = mcmc.idata_["posterior"]["sigma"].values
    assert np.median(sigma) == pytest.approx(np.sqrt(type2.noise_variance_), rel=0.3)
    m_mean, m_std = mcmc.predict(X_GRID, return_std=True)
    t_mean, t_std = type2.predict(X_GRID, return_std=True)
    assert np.all(np.abs(m_mean - t_mean) < t_std)
    assert np.all((m_std > 0.7 * t_std) & (m_std < 1.6 * t_std))
    assert mcmc.idata_.attrs["method"] == "mcmc"
    assert "sample_stats" in mcmc.idata_.children


def test_compare_takes_both(fits):
    table = compare({"type-II": fits[0].idata_, "MCMC": fits[1].idata_})
    assert set(table.index) == {"type-II", "MCMC"}
    assert np.isfinite(table["elpd"]).all()


def test_mcmc_fit_survives_pickle_and_files(fits, tmp_path):
    _, mcmc = fits
    want = mcmc.predict(X_GRID, return_std=True)
    for again in (
        pickle.loads(pickle.dumps(mcmc)),
        load_model(save_model(mcmc, tmp_path / "m.nc")),
    ):
        got = again.predict(X_GRID, return_std=True)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"inference": "vi"}, "inference"),
        ({"inference": "mcmc", "draws": 0}, "draws"),
        ({"inference": "mcmc", "sampler": "emcee"}, "sampler"),
        ({"inference": "mcmc", "mcmc_basis": "some"}, "mcmc_basis"),
    ],
)
def test_bad_mcmc_parameters(params, match, data):
    with pytest.raises(ValueError, match=match):
        RVR(**params).fit(*data)


def test_warmup_is_kept_only_when_asked(fits, data, tmp_path):
    _, mcmc = fits
    assert not any(name.startswith("warmup") for name in mcmc.idata_.children)
    small = RVR(gamma=GAMMA, inference="mcmc", draws=50, tune=60, chains=2, random_state=3)
    small.fit(*data, keep_warmup=True)
    warm = small.idata_["warmup_posterior"].dataset
    assert (warm.sizes["chain"], warm.sizes["draw"]) == (2, 60)
    loaded = load_model(save_model(small, tmp_path / "w.nc"))
    assert "warmup_posterior" in loaded.idata_.children
    np.testing.assert_array_equal(
        loaded.idata_["warmup_posterior"]["sigma"].values, warm["sigma"].values
    )


@pytest.mark.parametrize(
    ("params", "kwargs", "match"),
    [
        ({}, {"keep_warmup": True}, "only inference='mcmc'"),
        ({"inference": "mcmc"}, {"draws": 10}, r"set them on the estimator"),
    ],
)
def test_fit_sampler_arguments_are_checked(params, kwargs, match, data):
    with pytest.raises(TypeError, match=match):
        RVR(**params).fit(*data, **kwargs)
