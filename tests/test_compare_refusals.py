"""What :func:`bayes_rvm.compare` refuses to rank: fits of other rows or other likelihoods.

The fingerprints of the training rows travel with each fit's DataTree (its root attrs), so a
tree passed without its estimator, and a model saved and loaded again, are checked as the fitted
estimator is.
"""

import numpy as np
import pytest

from bayes_rvm import compare, load_model, save_model
from bayes_rvm.datasets import make_sinc
from bayes_rvm.estimators.regressor import RVR
from bayes_rvm.posterior.comparison import FINGERPRINT_ATTRS


@pytest.fixture(scope="module")
def sinc_fits():
    X, y = make_sinc(20, random_state=0)
    a = RVR(gamma=1.0).fit(X, y)
    b = RVR(gamma=0.5).fit(X, y)
    # The same targets on inputs moved by a hundredth: other rows of the same N.
    moved = RVR(gamma=1.0).fit(X + 0.01, y)
    return a, b, moved


def test_trees_of_other_inputs_are_refused_without_their_estimators(sinc_fits):
    # The DataTrees keep the design, not the inputs: ranked by elpd without a word before.
    a, b, moved = sinc_fits
    assert set(FINGERPRINT_ATTRS.values()) <= set(a.idata_.attrs)
    with pytest.raises(ValueError, match=r"training inputs X differ.*'a'.*against 'moved'"):
        compare({"a": a.idata_, "moved": moved.idata_})
    # The same rows at two widths compare, named by position in a tuple.
    table = compare((a.idata_, b.idata_))
    assert sorted(table.index) == ["model_0", "model_1"]
    assert table.loc["model_1", "elpd"] == pytest.approx(float(b.idata_["loo"]["y"].sum()))


@pytest.mark.parametrize("build_tree_first", [True, False])
def test_fingerprints_survive_save_and_load(tmp_path, sinc_fits, build_tree_first):
    a, _, moved = sinc_fits
    X, y = make_sinc(20, random_state=0)
    fresh = RVR(gamma=0.5).fit(X + 0.01, y)
    if build_tree_first:
        fresh.idata_  # built, so saved with the model
    save_model(fresh, tmp_path / "moved.nc")
    loaded = load_model(tmp_path / "moved.nc")
    assert loaded.idata_.attrs[FINGERPRINT_ATTRS["X"]] == moved.idata_.attrs[FINGERPRINT_ATTRS["X"]]
    with pytest.raises(ValueError, match="training inputs X differ"):
        compare([a.idata_, loaded.idata_])
    # The loaded model compares with another fit of its rows.
    assert len(compare([moved.idata_, loaded.idata_])) == 2


def test_other_targets_in_a_tree_are_refused(sinc_fits):
    a, _, _ = sinc_fits
    X, y = make_sinc(20, random_state=0)
    noisier = RVR(gamma=1.0).fit(X, y + 0.05 * np.random.default_rng(1).normal(size=y.size))
    with pytest.raises(ValueError, match=r"targets y differ.*'model_0'.*'model_1'"):
        compare([a.idata_, noisier.idata_])


def test_a_gaussian_and_a_poisson_fit_of_the_same_counts_are_refused():
    x = np.linspace(-3.0, 3.0, 25)[:, None]
    counts = np.random.default_rng(0).poisson(np.exp(1.0 + np.sin(x[:, 0]))).astype(float)
    gaussian = RVR(gamma=0.5).fit(x, counts)
    poisson = RVR(gamma=0.5, likelihood="poisson").fit(x, counts)
    with pytest.raises(
        ValueError,
        match=r"likelihoods differ.*'g' \(gaussian\): densities.*'p' \(poisson\): probabilities",
    ):
        compare({"g": gaussian, "p": poisson})
