"""Relevance on the scale of the function (:mod:`bayes_rvm.posterior.relevance`).

The truths are independent of the summaries' code: counting by hand on a small array of draws;
the prior probability of the effect-size event by quadrature over the half-Cauchy scale; each
feature's posterior probability from its one-dimensional posterior given its least-squares
weight, on a grid; and on a kernel basis the known regions where the function is flat.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import xarray as xr
from scipy import integrate, stats

from bayes_rvm.dims import BASIS, SET
from bayes_rvm.evidence.problem import prior_column_scale
from bayes_rvm.models.priors import Prior
from bayes_rvm.posterior.relevance import (
    column_relevance,
    correlated_sets,
    neighbourhood_sets,
    relative_effects,
    set_counts,
    set_relevance,
)

DELTA = 0.1
N_FEATURES, INFORMATIVE = 20, 3
HALF_CAUCHY = Prior("HalfCauchyPrecision", beta=0.1)  # alpha_rel^-1/2 ~ HalfCauchy(0.1)


def _tree(w, alpha, alpha_rel, basis=None):
    """A posterior of weight draws ``w[chain, draw, basis]`` and their precisions."""
    basis = np.arange(w.shape[-1]) if basis is None else np.asarray(basis)
    dims = ("chain", "draw", BASIS)
    coords = {"chain": np.arange(w.shape[0]), "draw": np.arange(w.shape[1]), BASIS: basis}
    post = xr.Dataset(
        {
            "w": (dims, w),
            "alpha": (dims, np.broadcast_to(alpha, w.shape)),
            "alpha_rel": (dims, np.broadcast_to(alpha_rel, w.shape)),
        },
        coords=coords,
    )
    return xr.DataTree.from_dict({"posterior": post})


# ---------------------------------------------------------------------------------------------
# the array and xarray layers against counting by hand
# ---------------------------------------------------------------------------------------------
def test_set_probability_is_the_count_of_draws_where_some_member_passes():
    # 2 chains x 3 draws of 4 columns; column scales rms(phi)/rms(y) = sqrt(alpha / alpha_rel)
    # of 1, 2, 0.5 and 1, so the relative effects are |w| times those.
    w = np.array(
        [
            [[0.05, 0.00, 0.30, 0.00], [0.20, 0.06, 0.00, 0.00], [0.00, 0.00, 0.00, 0.15]],
            [[0.00, -0.04, 0.10, 0.00], [-0.02, 0.01, -0.19, 0.09], [0.11, 0.07, 0.25, -0.2]],
        ]
    )
    scale = np.array([1.0, 2.0, 0.5, 1.0])
    alpha_rel = np.array([3.0, 1.0, 8.0, 2.0])
    dt = _tree(w, alpha_rel * scale**2, alpha_rel)
    effect = relative_effects(dt)
    np.testing.assert_allclose(effect.values, np.abs(w) * scale, rtol=1e-12)
    # which (chain, draw) pass, column by column (effect > 0.1), written out:
    #            col 0  col 1  col 2  col 3
    # (0, 0)       -      -     0.15    -
    # (0, 1)      0.2   0.12     -      -
    # (0, 2)       -      -      -     0.15
    # (1, 0)       -      -      -      -
    # (1, 1)       -      -      -      -
    # (1, 2)     0.11   0.14   0.125   0.2
    sets = {"a": [0, 1], "b": [2], "c": [1, 3], "d": [0, 1, 2, 3]}
    table = set_relevance(dt, sets, delta=DELTA)
    np.testing.assert_allclose(table["p_any"].sel({SET: "a"}), 2 / 6)
    np.testing.assert_allclose(table["p_any"].sel({SET: "b"}), 2 / 6)
    np.testing.assert_allclose(table["p_any"].sel({SET: "c"}), 3 / 6)
    np.testing.assert_allclose(table["p_any"].sel({SET: "d"}), 4 / 6)
    np.testing.assert_allclose(table["expected_count"].values, [4 / 6, 2 / 6, 4 / 6, 8 / 6])
    np.testing.assert_array_equal(table["size"].values, [2, 1, 2, 4])
    # the members' own probabilities (2/6, 2/6, 2/6, 2/6): the set's p_any exceeds the largest
    np.testing.assert_allclose(table["p_column_max"].values, [2 / 6] * 4)
    np.testing.assert_allclose(column_relevance(dt, delta=DELTA)["p_effect"].values, [2 / 6] * 4)
    # the same sets as a boolean (set, basis) array, and the bare array layer
    members = xr.DataArray(
        np.array([[1, 1, 0, 0], [0, 0, 1, 0], [0, 1, 0, 1], [1, 1, 1, 1]], dtype=bool),
        dims=(SET, BASIS),
        coords={SET: list("abcd"), BASIS: np.arange(4)},
    )
    xr.testing.assert_equal(set_relevance(dt, members, delta=DELTA)["p_any"], table["p_any"])
    counts = set_counts((np.abs(w) * scale).reshape(6, 4) > DELTA, members.values)
    np.testing.assert_array_equal(counts[:, 3], [1, 2, 1, 0, 0, 4])


def test_several_outputs_take_the_largest_effect():
    # two outputs: the column passes in a draw where either output's term is large enough
    w = np.array([[[0.05, 0.3], [0.2, 0.0]], [[0.0, 0.0], [0.0, 0.09]]])[None]  # (1, 2, 2, 2)
    post = xr.Dataset(
        {
            "w": (("chain", "draw", BASIS, "output"), w),
            "alpha": (("chain", "draw", BASIS), np.broadcast_to([1.0, 4.0], (1, 2, 2))),
            "alpha_rel": (("chain", "draw", BASIS), np.ones((1, 2, 2))),
        },
        coords={BASIS: [0, 1]},
    )
    dt = xr.DataTree.from_dict({"posterior": post})
    # scales sqrt(alpha / alpha_rel) = 1, 2: effects max(|w|) x scale per draw and column
    np.testing.assert_allclose(relative_effects(dt).values[0], [[0.3, 0.4], [0.0, 0.18]])
    np.testing.assert_allclose(column_relevance(dt)["p_effect"].values, [0.5, 1.0])


def test_columns_the_fit_does_not_hold_never_count():
    # a type-II tree keeps its relevance vectors only: a set of pruned columns has p_any 0
    w = np.full((1, 4, 2), 1.0)
    dt = _tree(w, np.ones(2), np.ones(2), basis=[3, 7])
    table = set_relevance(dt, neighbourhood_sets(np.arange(10.0), 1.0))
    expected = np.zeros(10)
    expected[[2, 3, 4, 6, 7, 8]] = 1.0
    np.testing.assert_array_equal(table["p_any"].values, expected)
    np.testing.assert_array_equal(table["size"].values, [2] + [3] * 8 + [2])
    np.testing.assert_array_equal(table["size_in_fit"].values, [0, 0, 1, 1, 1, 0, 1, 1, 1, 0])
    # named sets likewise: a pruned column counts in the size, never in p_any
    named = set_relevance(dt, {"pruned": [0, 1], "kept": [1, 3]})
    np.testing.assert_array_equal(named["p_any"].values, [0.0, 1.0])
    np.testing.assert_array_equal(named["size"].values, [2, 2])


def test_sets_from_centres_and_from_correlations():
    got = neighbourhood_sets([0.0, 0.9, 1.8, 5.0], 1.0, basis=[10, 11, 12, 13])
    np.testing.assert_array_equal(
        got.values,
        [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 0], [0, 0, 0, 1]],
    )
    assert list(got[SET].values) == list(got[BASIS].values) == [10, 11, 12, 13]
    # columns 0 and 1 at 45 degrees (cosine 0.71), column 2 orthogonal to both, 3 = -2 x col 0
    Phi = np.array([[1.0, 1.0, 0.0, -2.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 3.0, 0.0]])
    const = xr.Dataset({"Phi": (("obs", BASIS), Phi)}, coords={BASIS: [0, 1, 2, 3]})
    dt = xr.DataTree.from_dict({"constant_data": const})
    expected = [[1, 1, 0, 1], [1, 1, 0, 1], [0, 0, 1, 0], [1, 1, 0, 1]]
    np.testing.assert_array_equal(correlated_sets(dt, min_correlation=0.7).values, expected)
    np.testing.assert_array_equal(correlated_sets(dt, min_correlation=0.72).values[0], [1, 0, 0, 1])


def test_effects_without_alpha_rel_use_the_design_and_the_targets():
    # a tree with its design and targets and no alpha_rel (type2_datatree's): the same effects as
    # sqrt(alpha / alpha_rel) with alpha_rel = alpha rms(y)^2 / rms(phi)^2
    rng = np.random.default_rng(1)
    Phi = rng.normal(size=(30, 3)) * [1.0, 5.0, 0.1]
    y = rng.normal(size=30) * 7.0
    w = rng.normal(size=(1, 50, 3))
    rms_phi, rms_y = np.sqrt(np.mean(Phi**2, 0)), np.sqrt(np.mean(y**2))
    with_rel = _tree(w, np.ones(3), rms_y**2 / rms_phi**2)
    bare = _tree(w, np.ones(3), np.ones(3))
    del bare["posterior"]["alpha_rel"]
    bare["constant_data"] = xr.Dataset({"Phi": (("obs", BASIS), Phi)}, coords={BASIS: [0, 1, 2]})
    bare["observed_data"] = xr.Dataset({"y": ("obs", y)})
    np.testing.assert_allclose(
        relative_effects(bare).values, np.abs(w) * rms_phi / rms_y, rtol=1e-12
    )
    xr.testing.assert_allclose(relative_effects(bare), relative_effects(with_rel))


def test_column_relevance_is_free_of_the_units_of_x_and_y():
    from bayes_rvm import RVR
    from bayes_rvm.datasets import make_sinc

    X, y = make_sinc(40, random=True, random_state=6, shuffle=False)
    a = RVR(gamma=0.25, random_state=0).fit(X, y)
    b = RVR(gamma=0.25 / 9.0, random_state=0).fit(3.0 * X, 1000.0 * y)
    ta, tb = column_relevance(a.idata_), column_relevance(b.idata_)
    np.testing.assert_allclose(tb["effect_median"], ta["effect_median"], rtol=1e-5)
    # independent of the tree's alpha_rel: |mean w| rms(phi) / rms(y) from the design itself
    Phi = a.basis_.transform(X)[:, a.active_]
    rel = np.sqrt(np.mean(Phi**2, 0)) / np.sqrt(np.mean(y**2))
    w = a.idata_["posterior"]["w"].transpose("chain", "draw", BASIS).values.reshape(-1, rel.size)
    truth = np.median(np.abs(w) * rel, axis=0)
    np.testing.assert_allclose(ta["effect_median"].values, truth, rtol=1e-9)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda dt: column_relevance(dt, delta=0.0), "delta"),
        (lambda dt: column_relevance(dt, group="prior"), "no 'prior' group"),
        (
            lambda dt: set_relevance(dt, {"a": [0], "b": []}),
            r"at least one basis label; empty: \['b'\]",
        ),
        (lambda dt: set_relevance(dt, [[0, 1]]), "mapping of set names"),
        (lambda dt: correlated_sets(dt), "Phi in constant_data"),
        (lambda dt: neighbourhood_sets([0.0, 1.0], -1.0), "radius"),
        (lambda dt: neighbourhood_sets([0.0, 1.0], 1.0, basis=[0]), "one label per centre"),
    ],
)
def test_bad_input_is_named(call, match):
    dt = _tree(np.ones((1, 2, 3)), np.ones(3), np.ones(3))
    with pytest.raises((ValueError, TypeError), match=match):
        call(dt)


def test_a_tree_without_weights_is_refused():
    dt = _tree(np.ones((1, 2, 3)), np.ones(3), np.ones(3))
    del dt["posterior"]["w"]
    with pytest.raises(ValueError, match="no weights"):
        column_relevance(dt)


# ---------------------------------------------------------------------------------------------
# the prior of the event, at two N
# ---------------------------------------------------------------------------------------------
def _features(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, N_FEATURES))
    w = np.zeros(N_FEATURES)
    w[:INFORMATIVE] = [2.0, -1.0, 0.5]
    return X, X @ w + rng.standard_normal(n)


def _features_model(X, y):
    from bayes_rvm.models.graphs import rvm_regression_model

    n = len(y)
    return rvm_regression_model(
        X,
        y,
        phi_scale=prior_column_scale(np.linalg.norm(X, axis=0), n),
        y_scale=float(np.sqrt(np.mean(y**2))),
        alpha_prior=HALF_CAUCHY,
    )


def test_prior_probability_of_an_effect_does_not_drift_with_n():
    from bayes_rvm.inference import sample_prior_predictive

    # P(|z| s > delta), s ~ HalfCauchy(0.1), z ~ N(0, 1): by quadrature over s
    truth, _ = integrate.quad(
        lambda s: 2 * stats.norm.sf(DELTA / s) * stats.halfcauchy(scale=0.1).pdf(s),
        0,
        np.inf,
        limit=200,
    )
    assert truth == pytest.approx(0.3725, abs=1e-4)
    got, alpha_below = {}, {}
    for n, seed in ((100, 1), (1000, 2)):
        X, y = _features(n, seed)
        prior = sample_prior_predictive(_features_model(X, y), draws=2000, random_seed=seed)
        got[n] = float(column_relevance(prior, group="prior")["p_effect"].mean())
        # the threshold on alpha of unit-norm columns (alpha_rel / N < 10) the effect size replaces
        alpha_below[n] = float((prior["prior"]["alpha_rel"] / n < 10.0).mean())
    # 40,000 draws each: Monte Carlo sd 0.0024
    assert got[100] == pytest.approx(truth, abs=0.01)
    assert got[1000] == pytest.approx(truth, abs=0.01)
    # P(alpha < 10) on unit-norm columns: 0.805 at N = 100, 0.936 at N = 1000 (closed form)
    assert alpha_below[100] == pytest.approx(0.805, abs=0.01)
    assert alpha_below[1000] == pytest.approx(0.936, abs=0.01)


# ---------------------------------------------------------------------------------------------
# posteriors: independent features, and regions of a kernel basis
# ---------------------------------------------------------------------------------------------
def _one_dimensional_p_effect(X, y, delta=DELTA, beta=0.1):
    """P(|w_rel| > delta) of each feature given its least-squares relative weight, on a grid."""
    n = len(y)
    rel = np.linalg.norm(X, axis=0) / np.sqrt(n) / np.sqrt(np.mean(y**2))
    w_hat, *_ = np.linalg.lstsq(X, y, rcond=None)
    resid = y - X @ w_hat
    se = np.sqrt(resid @ resid / (n - X.shape[1]) * np.diag(np.linalg.inv(X.T @ X)))
    w_hat, se = w_hat * rel, se * rel
    w = np.linspace(-2.0, 2.0, 4001)
    s = np.exp(np.linspace(np.log(1e-6), np.log(1e2), 1500))
    # the prior of w_rel: N(0, s^2) mixed over s ~ HalfCauchy(beta), on a grid of log s
    prior_w = (stats.norm.pdf(w[:, None] / s) / s * stats.halfcauchy(scale=beta).pdf(s) * s).sum(1)
    post = prior_w * stats.norm.pdf((w_hat[:, None] - w) / se[:, None])
    post /= post.sum(1, keepdims=True)
    return post[:, np.abs(w) > delta].sum(1)


@pytest.fixture(scope="module")
def features_posterior():
    from bayes_rvm.inference import sample_mcmc

    X, y = _features(100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dt = sample_mcmc(
            _features_model(X, y),
            draws=300,
            tune=300,
            chains=2,
            random_seed=1,
            progressbar=False,
            warn=False,
        )
    return X, y, dt


def test_effect_sizes_tell_informative_features_from_irrelevant_ones(features_posterior):
    X, y, dt = features_posterior
    p = column_relevance(dt)["p_effect"].values
    truth = _one_dimensional_p_effect(X, y)
    # the two strong features (relative weights 0.81 and -0.44) certainly matter, the third
    # (0.12 +- 0.05 by least squares) perhaps; the irrelevant ones rarely
    assert p[:2].min() > 0.99
    assert p[INFORMATIVE:].mean() < 0.08 and p[INFORMATIVE:].max() < 0.25
    # every column against its one-dimensional posterior (Monte Carlo error of 600 draws and the
    # columns' small correlations: within 0.1)
    np.testing.assert_allclose(p, truth, atol=0.1)


def test_column_relevance_sets_type2_beside_the_sampled_fit(mcmc_ard_sinc):
    from bayes_rvm.inference import type2_datatree

    d, dt = mcmc_ard_sinc
    t2 = type2_datatree(d["fit"], d["Phi"], d["t"], n_draws=4000, random_seed=0)
    table = column_relevance(dt, type2=t2)
    fit = d["fit"]
    assert int(table["type2_relevant"].sum()) == fit.active.size
    assert table["type2_relevant"].sel({BASIS: fit.active}).all()
    se = np.sqrt(np.diag(fit.covariance) / 4000)
    assert np.all(np.abs(table["type2_w"].sel({BASIS: fit.active}) - fit.mean[:, 0]) < 5 * se)
    # the columns type-II pruned: alpha = inf, weight 0
    pruned = np.setdiff1d(np.arange(d["Phi"].shape[1]), fit.active)
    np.testing.assert_array_equal(table["type2_w"].sel({BASIS: pruned}).values, 0.0)


def test_column_relevance_refuses_a_type2_fit_of_other_data(mcmc_ard_sinc):
    # Columns are matched by their labels alone: a type-II tree of other rows (or of another
    # likelihood) was taken without a word, its relevance set beside unrelated columns.
    from bayes_rvm.inference import type2_datatree

    d, dt = mcmc_ard_sinc
    t2 = type2_datatree(d["fit"], d["Phi"], d["t"], n_draws=100, random_seed=0)
    mine, other = dt.copy(), t2.copy()
    mine.attrs.update(likelihood="gaussian", fingerprint_y="a" * 12)
    other.attrs.update(likelihood="gaussian", fingerprint_y="b" * 12)
    with pytest.raises(ValueError, match="type2 is a fit of other targets y than dt's"):
        column_relevance(mine, type2=other)
    other.attrs.update(likelihood="bernoulli", fingerprint_y="a" * 12)
    with pytest.raises(ValueError, match="type2 is a fit of other likelihood"):
        column_relevance(mine, type2=other)
    other.attrs["likelihood"] = "gaussian"
    assert column_relevance(mine, type2=other)["type2_relevant"].any()


@pytest.fixture(scope="module")
def mcmc_ard_sinc():
    from bayes_rvm.basis.kernels import KernelBasis
    from bayes_rvm.datasets import make_sinc
    from bayes_rvm.evidence import fit_mackay
    from bayes_rvm.inference import sample_mcmc
    from bayes_rvm.models.graphs import rvm_regression_model

    X, y = make_sinc(40, random_state=0, shuffle=False)
    Phi = KernelBasis("rbf", gamma=1.0 / 9.0).fit(X).transform(X)
    Phi = Phi / np.linalg.norm(Phi, axis=0)
    t = y / np.sqrt(np.mean(y**2))
    d = {"Phi": Phi, "t": t, "fit": fit_mackay(Phi, t)}
    model = rvm_regression_model(
        Phi, t, phi_scale=prior_column_scale(np.ones(Phi.shape[1]), len(t)), alpha_prior=HALF_CAUCHY
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dt = sample_mcmc(
            model, draws=200, tune=200, chains=2, random_seed=3, progressbar=False, warn=False
        )
    return d, dt


def _flat_sinc(x):
    """sin(x) / x on |x| <= pi, zero beyond (continuous: sin(pi) = 0)."""
    return np.where(np.abs(x) <= np.pi, np.sinc(x / np.pi), 0.0)


def test_region_probabilities_find_the_signal_and_not_the_flat_part():
    from bayes_rvm import RVR
    from bayes_rvm.inference import sample_prior_predictive
    from bayes_rvm.models.priors import sparse_alpha_prior

    n = 60
    rng = np.random.default_rng(3)
    X = np.sort(rng.uniform(-10, 10, n))[:, None]
    y = _flat_sinc(X[:, 0]) + 0.1 * rng.standard_normal(n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        model = RVR(
            gamma=0.25,
            inference="mcmc",
            random_state=1,
            prior_params={"alpha_prior": sparse_alpha_prior(n + 1, n)},
            sampler_config={"draws": 300, "tune": 300, "chains": 2, "mcmc_basis": "all"},
        ).fit(X, y, progressbar=False)
    prior = sample_prior_predictive(model.model_, draws=1000, random_seed=0)
    x = model.basis_.centres_[:, 0]
    # sets: the centres within one length (gamma^-1/2 = 2) of each centre
    table = set_relevance(model.idata_, neighbourhood_sets(x, 2.0), prior=prior)
    signal = np.flatnonzero(np.abs(x) < 1.5)  # every neighbour within the hump
    null = np.flatnonzero(np.abs(x) > 6.0)  # every neighbour more than 2.8 from it
    assert table["p_any"].sel({SET: signal}).min() > 0.95
    assert table["p_any"].sel({SET: null}).max() < 0.3
    # no single column in the hump is certain: the neighbours share the signal
    p_column = column_relevance(model.idata_)["p_effect"].sel({BASIS: signal})
    assert p_column.max() < 0.9
    # the null regions' prior is above their posterior: the data switched them off
    null_sets = table.sel({SET: null})
    assert (null_sets["p_any"] < null_sets["p_any_prior"]).mean() > 0.8


def test_plot_relevance_draws_the_tables():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bayes_rvm.plots import plot_relevance

    w = np.random.default_rng(0).normal(scale=0.1, size=(1, 20, 6))
    dt = _tree(w, np.ones(6), np.ones(6), basis=[0, 1, 2, 3, 4, 5])
    centres = np.array([0.0, 1.0, 2.0, 3.0, 4.0])  # label 5 (a bias) has none
    sets = set_relevance(dt, neighbourhood_sets(centres, 1.0))
    ax = plot_relevance(
        sets, centres, columns=column_relevance(dt), relevance_vectors=np.array([1.0, 3.0])
    )
    line = ax.get_lines()[0]
    np.testing.assert_array_equal(line.get_xdata(), centres)
    np.testing.assert_allclose(line.get_ydata(), sets["p_any"].values)
    # columns: the five with a centre, not the bias
    assert ax.get_lines()[1].get_xdata().size == 5
    # The legend beside the axes, not over a curve; the x label inside the figure.
    ax.figure.canvas.draw()
    renderer = ax.figure.canvas.get_renderer()
    assert ax.get_legend().get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1
    assert ax.xaxis.label.get_window_extent(renderer).y0 >= 0
    # On the caller's axes it stays inside them, off their neighbours.
    fig, axs = plt.subplots(1, 2)
    plot_relevance(sets, centres, ax=axs[0])
    fig.canvas.draw()
    inside = axs[0].get_legend().get_window_extent(fig.canvas.get_renderer())
    assert inside.x1 <= axs[0].get_window_extent(fig.canvas.get_renderer()).x1
    with pytest.raises(ValueError, match="1-D centres"):
        plot_relevance(sets, np.zeros((5, 2)))
    plt.close("all")
