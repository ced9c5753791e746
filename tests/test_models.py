"""The PyMC models: the marginal model's log density against priors plus a dense MvNormal, the
joint form, dims and data, and the priors against scipy."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
import xarray as xr
from pymc.distributions.shape_utils import change_dist_size
from scipy import stats
from threadpoolctl import threadpool_limits

from bayes_rvm.dims import BASIS, OBS, OUTPUT
from bayes_rvm.models.graphs import model_cache_key, rvm_regression_model, set_model_data
from bayes_rvm.models.priors import Prior, r2d2_free_values
from bayes_rvm.models.priors import _halfcauchy_precision_logp as _halfcauchy_scale_logp
from tests.test_marginal import _dense_logp, _problem


@pytest.fixture(autouse=True, scope="module")
def _single_threaded_blas():
    # Small matrices on two shared cores: BLAS threads only spin against the sampler's chains.
    with threadpool_limits(limits=1):
        yield


def test_halfcauchy_scale_hyperprior_is_the_documented_density():
    tau = 0.7
    u = np.linspace(-60, 60, 200_001)
    dens = np.exp(_halfcauchy_scale_logp(pt.as_tensor(np.exp(u)), tau).eval() + u)
    assert abs(np.trapezoid(dens, u) - 1.0) < 1e-6  # proper
    # P(alpha < a) = P(s > a^-1/2) for s ~ HalfCauchy(tau)
    a = 3.0
    cdf = np.trapezoid(dens[u < np.log(a)], u[u < np.log(a)])
    assert abs(cdf - stats.halfcauchy(scale=tau).sf(a**-0.5)) < 1e-4


def test_halfcauchy_scale_hyperprior_random_draws():
    Phi, Y, _, _ = _problem(N=10, M=5)
    model = rvm_regression_model(Phi, Y[:, 0], alpha_prior=Prior("HalfCauchyPrecision", beta=2.0))
    draws = pm.draw(model["alpha"], draws=4000, random_seed=1).ravel()
    s = draws**-0.5
    assert stats.kstest(s, stats.halfcauchy(scale=2.0).cdf).pvalue > 1e-3


@pytest.mark.parametrize(("nu", "s"), [(1.0, 1.0), (4.0, 0.5)])
def test_student_t_prior_integrates_to_student_t(nu, s):
    Phi, Y, _, _ = _problem(N=10, M=5)
    model = rvm_regression_model(Phi, Y[:, 0], prior="student_t", nu=nu, s=s)
    alpha = pm.draw(model["alpha"], draws=4000, random_seed=2).ravel()
    w = np.random.default_rng(3).standard_normal(alpha.size) / np.sqrt(alpha)
    assert stats.kstest(w, stats.t(df=nu, scale=s).cdf).pvalue > 1e-3


#: The free variables of ``alpha_rel`` under the default R2-D2 prior (its Gaussian coordinates).
_ALPHA_FREE = {"alpha_rel_r2", "alpha_rel_z"}


def _with_alpha(model, point: dict, alpha_rel: np.ndarray) -> dict:
    """``point`` with the sampled coordinates that give ``alpha_rel``."""
    point = dict(point)
    for name, value in r2d2_free_values(model, {"alpha_rel": alpha_rel}).items():
        rv = model[name]
        transform = model.rvs_to_transforms.get(rv)
        value = np.asarray(value, dtype=np.float64)
        point[model.rvs_to_values[rv].name] = (
            transform.forward(pt.as_tensor(value)).eval() if transform is not None else value
        )
    return point


def _log_alpha_rel(model, point: dict) -> np.ndarray:
    """``log alpha_rel`` at a point of the sampled coordinates."""
    (alpha_rel,) = model.replace_rvs_by_values([model["alpha_rel"]])
    fn = model.compile_fn(alpha_rel, inputs=model.value_vars, on_unused_input="ignore")
    return np.log(fn(point))


def test_marginal_model_logp_is_priors_plus_dense_mvnormal():
    Phi, Y, _, _ = _problem(N=20, M=21)
    y = Y[:, 0]
    model = rvm_regression_model(Phi, y)
    point = _with_alpha(model, model.initial_point(), np.exp(np.linspace(-2, 8, 21)))
    point["sigma_rel_log__"] = np.array(-0.4)
    logps = model.point_logps(point, round_vals=12)
    alpha, sigma = np.exp(_log_alpha_rel(model, point)), np.exp(point["sigma_rel_log__"])
    np.testing.assert_allclose(np.log(alpha), np.linspace(-2, 8, 21), atol=1e-12)
    dense = _dense_logp(np.log(alpha), -2 * np.log(sigma), Phi, Y)
    assert abs(logps["y"] - dense) < 1e-8
    expected_sigma = stats.halfnorm(scale=1.0).logpdf(sigma) + np.log(sigma)  # + log-Jacobian
    assert abs(logps["sigma_rel"] - expected_sigma) < 1e-8


def test_joint_model_logp_is_gaussian_likelihood():
    Phi, Y, _, _ = _problem(N=20, M=21)
    y = Y[:, 0]
    model = rvm_regression_model(Phi, y, form="joint", prior="student_t", nu=3.0, centred=True)
    rng = np.random.default_rng(4)
    point = model.initial_point()
    point["alpha_rel_log__"] = rng.normal(size=21)
    point["sigma_rel_log__"] = np.array(-1.0)
    w = point["w"] = rng.normal(size=21) * np.exp(-0.5 * point["alpha_rel_log__"])
    sigma = np.exp(-1.0)
    logps = model.point_logps(point, round_vals=12)
    assert abs(logps["y"] - stats.norm(Phi @ w, sigma).logpdf(y).sum()) < 1e-8
    la = point["alpha_rel_log__"]
    # Gamma(nu/2, nu s^2/2) at the default s = DEFAULT_WEIGHT_SCALE = 0.1 (unit-RMS columns)
    rate = 3.0 * 0.1**2 / 2.0
    expected_alpha = (stats.gamma(a=1.5, scale=1 / rate).logpdf(np.exp(la)) + la).sum()
    # PyTensor's gammaln and scipy's differ by ~1e-8 per element
    assert abs(logps["alpha_rel"] - expected_alpha) < 1e-6


def test_model_structure_dims_and_subset_basis():
    Phi, Y, _, _ = _problem(N=15, M=16, D=2)
    model = rvm_regression_model(Phi, Y, basis=[2, 5, 15], form="joint")
    assert list(model.coords[BASIS]) == [2, 5, 15]
    assert model.named_vars_to_dims["w"] == (BASIS, OUTPUT)
    assert model.named_vars_to_dims["y"] == (OBS, OUTPUT)
    assert model["Phi"].get_value().shape == (15, 3)
    assert {v.name for v in model.free_RVs} == _ALPHA_FREE | {"sigma_rel", "w"}
    marg = rvm_regression_model(Phi, Y, basis=[2, 5, 15])
    assert {v.name for v in marg.free_RVs} == _ALPHA_FREE | {"sigma_rel"}
    assert marg.rvm_spec.basis == (2, 5, 15)
    assert marg.named_vars_to_dims["y"] == (OBS, OUTPUT)


def test_multi_output_marginal_model_and_prior_predictive():
    Phi, Y, _, _ = _problem(N=15, M=16, D=2)
    model = rvm_regression_model(Phi, Y)
    point = model.initial_point()
    la = _log_alpha_rel(model, point)
    dense = _dense_logp(la, -2 * point["sigma_rel_log__"], Phi, Y)
    assert abs(model.point_logps(point, round_vals=12)["y"] - dense) < 1e-8
    joint = rvm_regression_model(Phi, Y, form="joint")
    prior = pm.sample_prior_predictive(draws=5, model=joint, random_seed=0)
    assert prior["prior_predictive"]["y"].shape == (1, 5, 15, 2)


def test_marginal_model_refuses_predictive_draws_that_would_use_the_prior_of_w():
    # The old path: y's random draw in the marginal form integrated w over its PRIOR, so
    # pm.sample_posterior_predictive gave a predictive sd of about 10 on sinc (noise 0.1).
    Phi, Y, _, _ = _problem(N=15, M=16)
    model = rvm_regression_model(Phi, Y[:, 0])
    with model:
        trace = pm.sample_prior_predictive(draws=4, var_names=["alpha_rel", "sigma_rel"])
    idata = trace.copy()
    idata["posterior"] = trace["prior"]
    with pytest.raises(NotImplementedError, match="sample_posterior_predictive"):
        pm.sample_posterior_predictive(idata, model=model, progressbar=False)


@pytest.mark.parametrize("marginal", ["dense", "lowrank"])
@pytest.mark.parametrize("D", [1, 2])
def test_marginal_prior_predictive_has_the_closed_form_covariance(marginal, D):
    # y | alpha, sigma ~ N(0, Phi A^-1 Phi^T + sigma^2 I) per output: the marginal model's own
    # draws (what pm.sample_prior_predictive and PyMC's model graphs take) against that form.
    Phi, Y, _, _ = _problem(N=6, M=8, D=D)
    alpha_rel = np.linspace(0.5, 4.0, 8)
    model = rvm_regression_model(Phi, Y if D > 1 else Y[:, 0], marginal=marginal)
    fixed = pm.do(model, {"alpha_rel": alpha_rel, "sigma_rel": 0.3})
    # y's draw is a Python function (numba runs it in object mode): the 20,000 draws as one
    # vectorised draw (change_dist_size, as PyMC vectorises a distribution) in one call, compiled
    # without numba, not 20,000 calls of a compiled loop. The single draw PyMC's own samplers take
    # (default mode) is the first of a batch of one of the same random stream, bit for bit: the
    # same function of the same numbers, so the batch's covariance is that of the single draws.
    single = pm.draw(fixed["y"], random_seed=4)
    batch_of_one = pm.draw(change_dist_size(fixed["y"], (1,)), random_seed=4, mode="FAST_COMPILE")
    np.testing.assert_array_equal(batch_of_one, single[None])
    draws, alpha, sigma = pm.draw(
        [change_dist_size(fixed["y"], (20_000,)), fixed["alpha"], fixed["sigma"]],
        random_seed=4,
        mode="FAST_COMPILE",
    )
    draws = draws.reshape(20_000, 6, D)
    want = Phi @ np.diag(1 / alpha) @ Phi.T + sigma**2 * np.eye(6)
    for d in range(D):
        got = np.cov(draws[:, :, d], rowvar=False)
        assert np.abs(got - want).max() < 0.05 * np.abs(want).max()
        assert np.abs(draws[:, :, d].mean(axis=0)).max() < 0.05 * np.sqrt(want.diagonal().max())


def test_model_graphs_draw_without_sampling():
    from pymc.model_graph import ModelGraph

    from bayes_rvm import RVC
    from bayes_rvm.datasets import make_sinc
    from bayes_rvm.models.graphs import rvm_width_model

    Phi, Y, _, _ = _problem(N=15, M=16, D=2)
    X, y = make_sinc(20, noise=0.1, random_state=0, shuffle=False)
    models = {
        "marginal": rvm_regression_model(Phi, Y[:, 0]),
        "lowrank": rvm_regression_model(Phi, Y[:, 0], marginal="lowrank"),
        "multi-output": rvm_regression_model(Phi, Y),
        "joint": rvm_regression_model(Phi, Y[:, 0], form="joint"),
        "width": rvm_width_model(X, y, X[::4], kernel="rbf", bias=True),
        "binary": RVC().fit(X, y > 0.2).model_,
        "softmax": RVC().fit(X, np.digitize(y, [0.0, 0.5])).model_,
    }
    for name, model in models.items():
        plates = ModelGraph(model).get_plates()  # what graphviz, networkx and mermaid share
        y_plate = next(p for p in plates if any(v.var.name == "y" for v in p.variables))
        assert y_plate.dim_info.lengths[0] == model["y_obs"].get_value().shape[0], name
        assert "y ~" in pm.model_to_mermaid(model), name


def test_set_model_data_keeps_gram_consistent():
    Phi, Y, _, _ = _problem(N=15, M=16)
    model = rvm_regression_model(Phi, Y[:, 0])
    Phi2, Y2, _, _ = _problem(N=15, M=16, seed=5)
    set_model_data(model, Phi2, Y2[:, 0])
    np.testing.assert_allclose(model["gram"].get_value(), Phi2.T @ Phi2)
    point = model.initial_point()
    # The default R2-D2 prior's start: each of the 16 columns holds 1/16 of omega = a / b = 1, so
    # alpha_rel = 16 (no phi_scale, so alpha = alpha_rel)
    la = _log_alpha_rel(model, point)
    assert np.allclose(la, np.log(16.0))
    assert (
        abs(
            model.point_logps(point, round_vals=12)["y"]
            - _dense_logp(la, -2 * point["sigma_rel_log__"], Phi2, Y2)
        )
        < 1e-8
    )


def test_custom_priors_are_used():
    Phi, Y, _, _ = _problem(N=10, M=11)
    model = rvm_regression_model(
        Phi,
        Y[:, 0],
        alpha_prior=Prior("Gamma", alpha=1e-2, beta=1e-4),
        noise_prior=Prior("HalfCauchy", beta=0.5),
    )
    assert type(model["alpha_rel"].owner.op).__name__.startswith("Gamma")
    assert "HalfCauchy" in type(model["sigma_rel"].owner.op).__name__
    nu_model = rvm_regression_model(
        Phi, Y[:, 0], prior="student_t", nu=Prior("Gamma", alpha=2.0, beta=0.1)
    )
    assert {v.name for v in nu_model.free_RVs} == {"alpha_rel", "sigma_rel", "nu"}
    # A Prior given in its dict form (as it comes back from a file) builds the same model.
    again = rvm_regression_model(
        Phi,
        Y[:, 0],
        alpha_prior=Prior("Gamma", alpha=1e-2, beta=1e-4).to_dict(),
        noise_prior=Prior("HalfCauchy", beta=0.5),
    )
    assert model_cache_key(again) == model_cache_key(model) is not None
    assert model_cache_key(nu_model) != model_cache_key(model)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"prior": "laplace"}, "prior"),
        ({"form": "centred"}, "form"),
        ({"prior": "student_t", "alpha_prior": Prior("Gamma", alpha=1.0, beta=1.0)}, "alpha_"),
        ({"prior": "student_t", "nu": -1.0}, "nu"),
        ({"basis_names": ["a"]}, "basis_names"),
    ],
)
def test_invalid_arguments(kwargs, match):
    Phi, Y, _, _ = _problem(N=10, M=4)
    with pytest.raises(ValueError, match=match):
        rvm_regression_model(Phi, Y[:, 0], **kwargs)


def test_priors_must_be_prior_objects():
    Phi, Y, _, _ = _problem(N=10, M=4)
    with pytest.raises(TypeError, match=r"alpha_prior must be a bayes_rvm\.Prior"):
        rvm_regression_model(Phi, Y[:, 0], alpha_prior=lambda n, d: None)


def test_invalid_data():
    Phi, Y, _, _ = _problem(N=10, M=4)
    with pytest.raises(ValueError, match="y must"):
        rvm_regression_model(Phi, Y[:5, 0])
    bad = Phi.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="finite"):
        rvm_regression_model(bad, Y[:, 0])


# -- a model records what it is in its graph (issue 28 item 6) -------------------------------------
def _posterior(coords, **draws) -> xr.DataTree:
    """A posterior of 1 chain and 2 draws with the given values, as pm.sample would store it."""
    ds = xr.Dataset(
        {k: (("chain", "draw", *dims), v) for k, (dims, v) in draws.items()},
        coords={"chain": [0], "draw": [0, 1], **coords},
    )
    return xr.DataTree.from_dict({"/posterior": ds})


def _transforms(model, fixed: str, value):
    from pymc.model.fgraph import clone_model

    return {"clone_model": clone_model(model), "pm.do": pm.do(model, {fixed: value})}


def test_cloned_and_intervened_classifiers_complete_with_the_bernoulli_likelihood():
    from scipy.special import expit

    from bayes_rvm.inference import complete_posterior
    from bayes_rvm.models.graphs import rvm_classification_model

    rng = np.random.default_rng(3)
    Phi = rng.normal(size=(12, 4))
    t = (rng.normal(size=12) > 0).astype(int)
    model = rvm_classification_model(Phi, t)
    w = rng.normal(size=(1, 2, 4))
    # Independent truth: sum over nothing, just scipy's Bernoulli pmf at expit(Phi w).
    truth = stats.bernoulli.logpmf(t, expit(np.einsum("nm,sm->sn", Phi, w[0])))
    for how, changed in _transforms(model, "alpha_rel", np.ones(4)).items():
        assert not hasattr(changed, "rvm_spec")  # the attribute is gone: the graph must tell
        post = _posterior({BASIS: np.arange(4)}, w=((BASIS,), w))
        dt = complete_posterior(post, changed)
        ll = dt["log_likelihood"]["y"].values[0]
        np.testing.assert_allclose(ll, truth, rtol=1e-12, err_msg=how)
        assert dt.attrs["likelihood"] == "bernoulli"


def test_cloned_and_intervened_regressions_complete_with_the_gaussian_likelihood():
    from bayes_rvm.inference import complete_posterior

    rng = np.random.default_rng(4)
    N, M = 9, 3
    Phi = rng.normal(size=(N, M))
    t = rng.normal(size=N)
    model = rvm_regression_model(Phi, t)
    alpha = np.exp(rng.normal(size=(1, 2, M)))
    sigma = np.array([[0.5, 0.8]])
    truth = np.empty((2, N))
    for s in range(2):
        # Independent truth: ln p(t_n | t_-n) of the marginal N(0, sigma^2 I + Phi A^-1 Phi^T).
        Cov = sigma[0, s] ** 2 * np.eye(N) + Phi @ np.diag(1 / alpha[0, s]) @ Phi.T
        for n in range(N):
            o = np.delete(np.arange(N), n)
            k = np.linalg.solve(Cov[np.ix_(o, o)], Cov[o, n])
            var = Cov[n, n] - Cov[n, o] @ k
            truth[s, n] = stats.norm.logpdf(t[n], k @ t[o], np.sqrt(var))
    for how, changed in _transforms(model, "sigma_rel", 0.5).items():
        post = _posterior({BASIS: np.arange(M)}, alpha=((BASIS,), alpha), sigma=((), sigma))
        dt = complete_posterior(post, changed, random_seed=0)
        np.testing.assert_allclose(dt["log_likelihood"]["y"].values[0], truth, rtol=1e-10)
        assert dt.attrs["likelihood"] == "gaussian", how


def test_a_model_without_a_recorded_likelihood_is_refused():
    import dataclasses

    from bayes_rvm.inference import complete_posterior
    from bayes_rvm.models.graphs import model_spec, rvm_classification_model

    rng = np.random.default_rng(5)
    Phi = rng.normal(size=(8, 3))
    with pm.Model() as handmade:  # the data names of ours, but built elsewhere
        pm.Data("Phi", Phi)
        pm.Data("y_obs", np.ones(8))
        pm.Normal("y", 0.0, 1.0, observed=np.ones(8))
    post = _posterior({BASIS: np.arange(3)}, w=((BASIS,), np.zeros((1, 2, 3))))
    with pytest.raises(ValueError, match=r"not built by bayes_rvm\.models"):
        complete_posterior(post, handmade)
    # A spec that contradicts the observed distribution is refused, not trusted.
    model = rvm_classification_model(Phi, np.array([0, 1] * 4))
    model["y"].tag.rvm_spec = dataclasses.replace(model_spec(model), likelihood="gaussian")
    with pytest.raises(ValueError, match="BernoulliRV, not the 'gaussian' likelihood"):
        complete_posterior(post, model)
