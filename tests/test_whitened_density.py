"""The whitened two-class and count models' log density and gradient in numba, against PyMC's graph
of the same model (``rvm_classification_model(reference=...)``) at random points, and as nutpie's
callbacks for the models the backend recognises."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
from scipy.special import expit

from bayes_rvm.inference import nutpie_backend as _nutpie
from bayes_rvm.inference.nutpie_backend import compile_nutpie, log_density
from bayes_rvm.models.graphs import rvm_classification_model
from bayes_rvm.models.priors import DEFAULT_WEIGHT_SCALE, Prior
from bayes_rvm.models.whitened_density import whitened_logp
from tests.test_r2d2_density import _pymc_at


def _problem(likelihood: str, N: int = 40, M: int = 12, seed: int = 1):
    rng = np.random.default_rng(seed)
    Phi = rng.normal(size=(N, M)) * 0.5
    phi = rng.uniform(0.5, 2.0, M)
    eta = 0.3 + Phi @ rng.normal(size=M) * 0.5
    if likelihood == "bernoulli":
        y = (rng.random(N) < expit(eta)).astype(np.int64)
    else:
        y = rng.poisson(np.exp(eta))
    return Phi, y, phi, rng


@pytest.mark.parametrize("likelihood", ["bernoulli", "poisson"])
def test_whitened_density_is_pymcs(likelihood):
    Phi, y, phi, rng = _problem(likelihood)
    M = Phi.shape[1]
    model = rvm_classification_model(
        Phi, y, likelihood=likelihood, reference=rng.normal(size=M) * 0.3, phi_scale=phi
    )
    b, r = model["rate_ref"].get_value(), model["working"].get_value()
    G, c = Phi.T @ (b[:, None] * Phi), Phi.T @ (b * r)
    # The model's statistics are the expansion's, computed here from its rows.
    np.testing.assert_allclose(model["gram_ref"].get_value(), G, rtol=1e-12)
    np.testing.assert_allclose(model["target_ref"].get_value(), c, rtol=1e-12)
    names = [v.name for v in model.value_vars]
    assert names == ["alpha_rel_log__", "w_whitened__"]
    logp, dlogp = model.compile_logp(), model.compile_dlogp()
    for scale in (0.5, 2.0, 6.0):  # alphas within a decade, and spread over ten
        ell, u = rng.normal(size=M) * scale, rng.normal(size=M)
        grad = np.empty(2 * M)
        got = whitened_logp(
            np.concatenate([ell, u]),
            Phi,
            G,
            c,
            y.astype(np.float64),
            phi**2,
            (DEFAULT_WEIGHT_SCALE, float(likelihood == "poisson")),
            grad,
        )
        point = {names[0]: ell, names[1]: u}
        want = dlogp(point)
        assert got == pytest.approx(logp(point), rel=1e-11, abs=1e-9)
        np.testing.assert_allclose(grad, want, rtol=1e-8, atol=1e-9 * np.abs(want).max())


@pytest.mark.parametrize(
    ("likelihood", "prior"), [("bernoulli", "halfcauchy"), ("poisson", "r2d2")]
)
def test_nutpie_samples_the_native_whitened_density(likelihood, prior):
    # The callbacks nutpie calls: PyMC's density, gradient and trace, on data of two sizes
    # (the callbacks of one machine serve both), at hyperprior parameters away from the
    # defaults: the half-Cauchy's scale, R2-D2's Beta (in its Gaussian coordinates). Each
    # setting compiles its own callbacks (20 s on a cold machine): the two fronts, the two
    # likelihoods (the likelihood's own code is held to PyMC for both fronts' core above).
    Phi, y, phi, rng = _problem(likelihood, seed=2)
    M = Phi.shape[1]
    alpha_prior = {
        "halfcauchy": Prior("HalfCauchyPrecision", beta=0.3),
        "r2d2": Prior("R2D2Precision", r2_a=0.7, r2_b=1.3, concentration=0.5),
    }[prior]
    model = rvm_classification_model(
        Phi,
        y,
        likelihood=likelihood,
        alpha_prior=alpha_prior,
        reference=rng.normal(size=M) * 0.3,
        phi_scale=phi,
    )
    compiled = compile_nutpie(model)
    assert compiled.logp_func is None  # the native density: no PyTensor function compiled
    Phi2, y2, phi2, _ = _problem(likelihood, N=55, M=7, seed=3)
    other = rvm_classification_model(
        Phi2,
        y2,
        likelihood=likelihood,
        alpha_prior=alpha_prior,
        reference=rng.normal(size=7) * 0.3,
        phi_scale=phi2,
    )
    for m, c in ((model, compiled), (other, compile_nutpie(other))):
        density = log_density(c, m)
        for scale in (0.5, 4.0):
            x = rng.normal(size=density.n_dim) * scale
            grad = np.empty_like(x)
            ref, ref_grad, trace = _pymc_at(m, x)
            assert density.logp(x, grad) == pytest.approx(ref, rel=1e-11, abs=1e-9)
            np.testing.assert_allclose(grad, ref_grad, rtol=1e-8, atol=1e-9)
            expanded = density.expand(x)
            for name, value in trace.items():
                np.testing.assert_allclose(expanded[name], value, rtol=1e-11, err_msg=name)


def test_only_the_plain_whitened_models_take_the_native_density():
    Phi, y, _, rng = _problem("bernoulli", seed=4)
    ref = rng.normal(size=Phi.shape[1]) * 0.3
    build = {
        "bernoulli": lambda: rvm_classification_model(Phi, y, reference=ref),
        "poisson": lambda: rvm_classification_model(Phi, y, likelihood="poisson", reference=ref),
        "r2d2": lambda: rvm_classification_model(
            Phi, y, reference=ref, alpha_prior=Prior("R2D2Precision")
        ),
        "r2d2 log alpha": lambda: rvm_classification_model(
            Phi, y, reference=ref, alpha_prior=Prior("R2D2Precision", coordinates="log_alpha")
        ),
        "hierarchical": lambda: rvm_classification_model(
            Phi,
            y,
            reference=ref,
            alpha_prior=Prior("HalfCauchyPrecision", beta=Prior("HalfNormal", sigma=0.1)),
        ),
        "information": lambda: rvm_classification_model(Phi, y, information=np.ones(12)),
        "offset": lambda: rvm_classification_model(Phi, y, reference=ref, offset=np.ones(40)),
        "intercept": lambda: rvm_classification_model(Phi, y, reference=ref, intercept_sd=2.0),
        "slab": lambda: rvm_classification_model(Phi, y, reference=ref, slab=2.0),
        "student_t": lambda: rvm_classification_model(
            Phi, y, reference=ref, prior="student_t", nu=3.0
        ),
    }
    models = {name: make() for name, make in build.items()}
    models["extended"] = rvm_classification_model(Phi, y, reference=ref)
    with models["extended"]:
        pm.Normal("extra", 0.0, 1.0)
    native = {
        name
        for name, model in models.items()
        if _nutpie._native_density(model, _nutpie._layout(model)) is not None
    }
    assert native == {"bernoulli", "poisson", "r2d2"}


def test_where_the_precision_matrix_is_singular_the_density_is_minus_inf_with_a_finite_gradient():
    # More columns than rows: G = Phi^T B Phi is singular, and precisions that underflow to 0
    # leave H singular too. nutpie then rejects the point; the gradient must not be garbage.
    from bayes_rvm import families
    from bayes_rvm.models import whitened_density

    assert whitened_density._ETA_MAX == families.ETA_MAX  # the count model's clip, both ways
    Phi, y, phi, rng = _problem("poisson", N=5, M=9, seed=5)
    G = Phi.T @ Phi
    c = Phi.T @ rng.normal(size=5)
    x = np.r_[np.full(9, -800.0), rng.normal(size=9)]
    for fn, hyper, point in (
        (whitened_density.whitened_logp_and_grad, (0.1, 1.0), x),
        (whitened_density.whitened_r2d2_logp_and_grad, (0.5, 0.5, 1.0), np.r_[800.0, x[9:], x[9:]]),
    ):
        logp, grad = fn(point, Phi, G, c, y.astype(np.float64), phi, hyper)
        assert logp == -np.inf
        assert np.all(np.isfinite(grad))
