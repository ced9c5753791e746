"""The R2-D2 hyperprior: a prior on the function that does not grow with the number of columns.

Truths: the prior mean square of ``Phi w`` is ``E[R^2]`` on unit-RMS columns, whatever N; the
density of ``alpha`` (and its transform) integrates to one and has the Beta marginals its
construction states, by quadrature; draws of the generator have them too; a fit on sinc
converges and recovers the noise-free function.
"""

import warnings

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from scipy import stats

from bayes_rvm import RVC, RVR
from bayes_rvm.datasets import make_sinc
from bayes_rvm.inference import sample_prior_predictive
from bayes_rvm.models import priors
from bayes_rvm.models.graphs import rvm_regression_model
from bayes_rvm.models.priors import DEFAULT_R2D2, Prior, default_alpha_prior


@pytest.fixture(scope="module")
def sinc_models():
    """The model of ``RVR(inference="mcmc")`` on sinc over every kernel column (M = N + 1), at
    N = 100 and 1000, and the targets."""
    out = {}
    for N in (100, 1000):
        X, y = make_sinc(N, noise=0.1, random_state=0)
        model = RVR(prior_params={"alpha_prior": "r2d2"}).fit(X, y).model_
        assert model["Phi"].get_value().shape == (N, N + 1)
        out[N] = model, y
    return out


def _prior_function_draws(model, y, alpha_prior=None, draws: int = 1000):
    """Prior draws of ``Phi w``, of the targets and of ``omega = sum 1 / alpha_rel``, the first
    two in units of the training targets' RMS; ``alpha_prior`` replaces the model's."""
    if alpha_prior is not None:
        model = rvm_regression_model(
            model["Phi"].get_value(),
            y,
            alpha_prior=alpha_prior,
            phi_scale=model["phi_scale"].get_value(),
            y_scale=model["y_scale"].get_value(),
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        out = sample_prior_predictive(model, draws, random_seed=1)
    Phi = np.asarray(model["Phi"].get_value())
    rms = np.sqrt(np.mean(y**2))
    prior = out["prior"].dataset
    f = np.einsum("nm,dm->dn", Phi, prior["w"].values[0]) / rms
    omega = np.sum(1.0 / prior["alpha_rel"].values[0], axis=1)
    return f, out["prior_predictive"]["y"].values[0] / rms, omega


@pytest.fixture(scope="module")
def function_draws(sinc_models):
    return {N: _prior_function_draws(*sinc_models[N]) for N in (100, 1000)}


def test_prior_predictive_spread_does_not_grow_with_the_columns(function_draws):
    # median |y| / rms(y) at N = 100 and 1000 (M = 101 and 1001 kernel columns): within 1.5x.
    spread = {N: np.median(np.abs(y)) for N, (_, y, _) in function_draws.items()}
    assert 1 / 1.5 < spread[1000] / spread[100] < 1.5, spread


def test_prior_function_has_mean_square_omega_and_omega_is_beta_prime(function_draws):
    # On unit-RMS columns E[mean_n f_n^2 | alpha] = sum_i 1 / alpha_i = omega, whatever M and
    # however the columns correlate; and omega ~ BetaPrime(a, b).
    a, b = DEFAULT_R2D2["r2_a"], DEFAULT_R2D2["r2_b"]
    for N, (f, _, omega) in function_draws.items():
        ratio = np.mean(f**2, axis=1) / omega
        se = ratio.std() / np.sqrt(ratio.size)
        assert abs(ratio.mean() - 1.0) < 4 * se, (N, ratio.mean(), se)
        assert stats.kstest(omega, stats.betaprime(a, b).cdf).pvalue > 1e-3


def test_the_half_cauchy_prior_predictive_grows_with_the_columns(sinc_models):
    # What the R2-D2 prior is for: the per-column half-Cauchy's function spread grows about
    # linearly with M (a sum of M half-Cauchy variances).
    half_cauchy = default_alpha_prior("halfcauchy")
    spread = {
        N: np.median(np.abs(_prior_function_draws(*sinc_models[N], half_cauchy, 400)[1]))
        for N in (100, 1000)
    }
    assert spread[1000] / spread[100] > 5, spread


def _density_on_a_grid(prior: Prior, step: float = 0.1):
    """The density of a two-column prior in ``log alpha`` coordinates on a grid, and its
    alphas."""
    with pm.Model() as model:
        rv = priors.r2d2_precision(
            "alpha_rel", **prior.parameters, shape=(2,), coordinates="log_alpha"
        )
    transform = model.rvs_to_transforms[rv]
    x = pt.matrix("x")
    alpha = transform.backward(x)
    density = pm.logp(rv, alpha) + transform.log_jac_det(x)
    fn = pytensor.function([x], [density, alpha])
    # the model's own density (PyMC adds the transform's Jacobian) at one point is the same
    point = np.array([[0.3, 2.0]])
    value = model.rvs_to_values[rv].name
    assert model.compile_logp()({value: point[0]}) == pytest.approx(fn(point)[0][0], rel=1e-10)
    grid = np.arange(-30.0, 40.0, step)
    xs = np.stack([g.ravel() for g in np.meshgrid(grid, grid, indexing="ij")], axis=1)
    logp, alphas = fn(xs)
    return np.exp(logp) * step**2, alphas


@pytest.mark.parametrize(
    ("r2_a", "r2_b", "concentration"),
    [(2.0, 0.7, [0.5, 1.5]), (1.0, 0.5, [0.5, 0.5])],  # r2_a != and == sum(concentration)
)
def test_density_integrates_to_the_stated_beta_marginals(r2_a, r2_b, concentration):
    prior = Prior("R2D2Precision", r2_a=r2_a, r2_b=r2_b, concentration=concentration)
    mass, alpha = _density_on_a_grid(prior)
    v = 1.0 / alpha
    omega = v.sum(axis=1)
    r2, share = omega / (1.0 + omega), v[:, 0] / omega
    assert mass.sum() == pytest.approx(1.0, abs=2e-3)
    c0, c1 = concentration
    for q in (0.1, 0.5, 0.9, 0.99):
        # R^2 = omega / (1 + omega) ~ Beta(a, b); the first column's share phi_1 ~ Beta(c_1, c_2)
        assert mass[r2 < q].sum() == pytest.approx(stats.beta(r2_a, r2_b).cdf(q), abs=0.01)
        assert mass[share < q].sum() == pytest.approx(stats.beta(c0, c1).cdf(q), abs=0.01)


def test_gaussian_coordinates_give_the_density_of_alpha():
    """The prior NUTS samples at concentration 1/2 (``logit R^2`` and a standard Gaussian ``z``,
    ``alpha_i = ||z||^2 / (omega z_i^2)``) against the density of ``alpha`` itself: the
    probabilities of boxes in ``(log alpha_1, log alpha_2)`` from 10000 draws against those of
    the density on a grid, within four binomial standard errors."""
    params = {"r2_a": 2.0, "r2_b": 0.7, "concentration": 0.5}
    mass, alpha = _density_on_a_grid(Prior("R2D2Precision", **params))
    with pm.Model():
        rv = priors.r2d2_precision("alpha_rel", **params, shape=(2,), coordinates="gaussian")
    drawn = np.log(pm.draw(rv, draws=10000, random_seed=5))
    grid = np.log(alpha)
    n_boxes = 0
    for lo0, hi0 in ((-np.inf, -1.0), (-1.0, 0.5), (0.5, 2.0), (2.0, np.inf)):
        for lo1, hi1 in ((-np.inf, 0.0), (0.0, 1.5), (1.5, np.inf)):
            p = mass[
                (grid[:, 0] > lo0) & (grid[:, 0] <= hi0) & (grid[:, 1] > lo1) & (grid[:, 1] <= hi1)
            ]
            inside = (drawn[:, 0] > lo0) & (drawn[:, 0] <= hi0) & (drawn[:, 1] > lo1)
            freq = np.mean(inside & (drawn[:, 1] <= hi1))
            se = np.sqrt(p.sum() * (1.0 - p.sum()) / drawn.shape[0])
            assert abs(freq - p.sum()) < 4.0 * se + 2e-3, (lo0, lo1, freq, p.sum())
            n_boxes += p.sum() > 0.02
    assert n_boxes >= 8  # the boxes share the mass: the check is not vacuous


def test_gaussian_coordinates_log_density_and_start():
    """The model's density in the Gaussian coordinates is ``Beta(R^2)`` (with its logit's
    Jacobian) times ``N(z; 0, I)``, ``alpha_rel`` is ``||z||^2 / (omega z^2)``, and
    :func:`r2d2_free_values` gives back a start's ``alpha_rel``."""
    with pm.Model(coords={"basis": range(4)}) as model:
        priors.r2d2_precision("alpha_rel", r2_a=0.5, r2_b=0.5, dims="basis")
    assert {v.name for v in model.free_RVs} == {"alpha_rel_r2", "alpha_rel_z"}
    z, x = np.array([0.3, -1.2, 2.0, 0.05]), 0.7  # x = logit(R^2) = log omega
    r2 = 1.0 / (1.0 + np.exp(-x))
    point = {"alpha_rel_r2_logodds__": x, "alpha_rel_z": z}
    ref = stats.beta(0.5, 0.5).logpdf(r2) + np.log(r2 * (1 - r2)) + stats.norm.logpdf(z).sum()
    # (PyMC's Beta log density agrees with scipy's to about 4e-9 relative here)
    assert model.compile_logp()(point) == pytest.approx(ref, rel=1e-8)
    (alpha_rel,) = model.replace_rvs_by_values([model["alpha_rel"]])
    alpha_of = model.compile_fn(alpha_rel, inputs=model.value_vars)
    alpha = alpha_of(point)
    np.testing.assert_allclose(alpha, np.sum(z**2) / (np.exp(x) * z**2), rtol=1e-12)
    start = priors.r2d2_free_values(model, {"alpha_rel": alpha, "sigma_rel": 0.3})
    assert start["sigma_rel"] == 0.3 and np.linalg.norm(start["alpha_rel_z"]) == pytest.approx(2.0)
    back = {"alpha_rel_r2_logodds__": np.log(start["alpha_rel_r2"] / (1 - start["alpha_rel_r2"]))}
    back["alpha_rel_z"] = start["alpha_rel_z"]
    np.testing.assert_allclose(alpha_of(back), alpha, rtol=1e-12)
    with pytest.raises(ValueError, match="needs concentration 1/2"):
        with pm.Model():
            priors.r2d2_precision("a", concentration=1.0, shape=(2,), coordinates="gaussian")


@pytest.mark.parametrize("coordinates", ["gaussian", "log_alpha"])
def test_draws_have_the_stated_marginals(coordinates):
    params = {"r2_a": 2.0, "r2_b": 0.7, "concentration": 0.5}
    with pm.Model(coords={"basis": range(5)}):
        rv = priors.r2d2_precision("alpha_rel", **params, dims="basis", coordinates=coordinates)
    v = 1.0 / pm.draw(rv, draws=4000, random_seed=3)
    omega = v.sum(axis=1)
    assert stats.kstest(omega, stats.betaprime(2.0, 0.7).cdf).pvalue > 1e-3
    # a column's share phi_i ~ Beta(c, (M - 1) c)
    assert stats.kstest(v[:, 2] / omega, stats.beta(0.5, 2.0).cdf).pvalue > 1e-3


def test_named_alpha_priors_and_the_default_switch(monkeypatch):
    X, y = make_sinc(30, noise=0.1, random_state=0)
    est = RVR(prior_params={"alpha_prior": "r2d2"}).fit(X, y)
    assert est.model_.rvm_spec.alpha_prior == Prior("R2D2Precision", **DEFAULT_R2D2)
    assert default_alpha_prior("halfcauchy") == Prior("HalfCauchyPrecision", beta=0.1)
    with pytest.raises(ValueError, match="alpha_prior names one of"):
        priors.as_prior("r2-d2", "alpha_prior")
    # The regression default follows the one constant; the classifiers keep the half-Cauchy.
    for name in ("r2d2", "halfcauchy"):
        monkeypatch.setattr(priors, "DEFAULT_REGRESSION_ALPHA_PRIOR", name)
        assert RVR().fit(X, y).model_.rvm_spec.alpha_prior == default_alpha_prior(name)
        clf = RVC().fit(X, (y > 0.2).astype(int))
        assert clf.model_.rvm_spec.alpha_prior == default_alpha_prior("halfcauchy")
    # serialised and read back
    p = Prior("R2D2Precision", r2_a=2.0, r2_b=0.5, concentration=[0.5, 1.0])
    assert Prior.from_dict(p.to_dict()) == p


def test_coordinates_follow_the_sampled_basis():
    """The estimators sample the full basis in the Gaussian coordinates and a basis of relevance
    vectors, whose precisions the data pin, in log alpha; a choice given is kept."""
    X, y = make_sinc(40, noise=0.1, random_state=0)
    full = RVR().fit(X, y).model_
    assert {"alpha_rel_r2", "alpha_rel_z"} <= {v.name for v in full.free_RVs}
    relevant = RVR(sampler_config={"mcmc_basis": "relevant"}).fit(X, y).model_
    assert "alpha_rel" in {v.name for v in relevant.free_RVs}
    in_logs = Prior("R2D2Precision", **DEFAULT_R2D2, coordinates="log_alpha")
    assert relevant.rvm_spec.alpha_prior == in_logs
    assert priors.in_log_alpha(in_logs) is in_logs
    gaussian = Prior("R2D2Precision", coordinates="gaussian")
    assert priors.in_log_alpha(gaussian) is gaussian
    chosen = RVR(sampler_config={"mcmc_basis": "relevant"}, prior_params={"alpha_prior": gaussian})
    assert "alpha_rel_z" in {v.name for v in chosen.fit(X, y).model_.free_RVs}
    cauchy = default_alpha_prior("halfcauchy")
    assert priors.in_log_alpha(cauchy) is cauchy and priors.in_log_alpha(None) is None
    # an option, not a number: serialised, shown and checked by name
    assert Prior.from_dict(in_logs.to_dict()) == in_logs != default_alpha_prior("r2d2")
    assert "coordinates='log_alpha'" in repr(in_logs)
    with pytest.raises(ValueError, match="coordinates must be one of"):
        Prior("R2D2Precision", coordinates="z")


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"r2_a": -1.0}, "parameter r2_a must be a positive number"),
        ({"concentration": [0.5, 0.0]}, "parameter concentration must be a positive number"),
        ({"r2_b": [1.0, 2.0]}, "parameter r2_b must be a positive number"),
    ],
)
def test_bad_parameters_are_refused_by_name(params, match):
    with pytest.raises(ValueError, match=match):
        Prior("R2D2Precision", **params)


@pytest.mark.slow
def test_r2d2_fit_on_sinc_converges_and_recovers_the_function():
    from bayes_rvm.inference.diagnostics import diagnose

    X, y = make_sinc(100, noise=0.1, random_state=0)
    est = RVR(inference="mcmc", prior_params={"alpha_prior": "r2d2"}, random_state=0)
    est.fit(X, y)
    d = diagnose(est.idata_, warn=False)
    assert d["divergences"] == 0
    assert d["max_rhat"] < 1.01
    X_test = np.linspace(-10, 10, 201)[:, None]
    truth = np.sinc(X_test[:, 0] / np.pi)
    assert np.sqrt(np.mean((est.predict(X_test) - truth) ** 2)) < 0.05
