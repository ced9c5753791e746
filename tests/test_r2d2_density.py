"""The default regression model's density in numba (models.marginal.r2d2_density), which
nutpie_backend hands to nutpie instead of PyTensor's graph: held to PyMC's graph."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

from bayes_rvm import Prior
from bayes_rvm.inference import nutpie_backend as _nutpie
from bayes_rvm.inference.nutpie_backend import compile_nutpie, log_density
from bayes_rvm.models.graphs import rvm_regression_model, set_model_data

#: Non-default hyperparameters, so that each enters where PyMC's graph has it.
PRIORS = {
    "alpha_prior": Prior("R2D2Precision", r2_a=0.7, r2_b=1.3, concentration=0.5),
    "noise_prior": Prior("HalfNormal", sigma=2.0),
}


def _design(n: int, m: int, seed: int):
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(-5, 5, n))
    centres = np.linspace(-5, 5, m - 1)
    Phi = np.c_[np.ones(n), np.exp(-0.5 * (x[:, None] - centres[None, :]) ** 2)]
    return Phi, 3.0 * np.sin(x) + 0.2 * rng.normal(size=n), rng


def _pymc_at(model, x: np.ndarray):
    """PyMC's log density, gradient and trace at the flat point ``x`` (its own C backend)."""
    start = model.initial_point()
    names = [model.rvs_to_values[rv].name for rv in model.free_RVs]
    parts = np.split(x, np.cumsum([start[n].size for n in names])[:-1])
    point = {n: p.reshape(start[n].shape) for n, p in zip(names, parts, strict=True)}
    traced = [v for v in model.unobserved_value_vars if v.name not in point]
    trace = model.compile_fn(traced, point_fn=True)(point)
    names = [v.name for v in traced]
    return (
        model.compile_logp()(point),
        model.compile_dlogp()(point),
        dict(zip(names, trace, strict=True)),
    )


def _targets(y: np.ndarray, outputs: int) -> np.ndarray:
    return y if outputs == 1 else np.c_[y, -0.5 * y + 1.0]


@pytest.mark.parametrize(
    "marginal, outputs, n_rows, coordinates",
    [
        ("lowrank", 1, None, "gaussian"),
        ("dense", 1, None, "gaussian"),
        ("lowrank", 2, None, "gaussian"),
        ("dense", 2, 600, "gaussian"),
        ("lowrank", 1, None, "log_alpha"),
        ("dense", 1, 600, "log_alpha"),
    ],
)
def test_the_native_density_is_pymcs_graph(marginal, outputs, n_rows, coordinates):
    # At random points, before and after new data of another size, with phi_scale and y_scale
    # away from 1: the density, every gradient entry and the trace PyMC's graph gives (also as
    # a compressed design of n_rows data rows, and in log alpha coordinates).
    Phi, y, rng = _design(60, 25, seed=1)
    scale = rng.uniform(0.5, 2.0, Phi.shape[1])
    priors = dict(PRIORS)
    if coordinates == "log_alpha":
        priors["alpha_prior"] = Prior(
            "R2D2Precision", r2_a=0.7, r2_b=1.3, concentration=0.8, coordinates="log_alpha"
        )
    model = rvm_regression_model(
        Phi,
        _targets(y, outputs),
        phi_scale=scale,
        y_scale=2.5,
        marginal=marginal,
        n_rows=n_rows,
        **priors,
    )
    assert model.rvm_spec.marginal == marginal
    compiled = compile_nutpie(model)
    assert compiled.logp_func is None  # the native density: no PyTensor function compiled
    # (set_model_data refuses a compressed design: its statistics make a new model)
    for new in (None, _design(45, 25, seed=2)[:2]) if n_rows is None else (None,):
        if new is not None:
            set_model_data(model, new[0], _targets(new[1], outputs))
        density = log_density(compiled, model)
        for _ in range(3):
            x = rng.normal(size=density.n_dim)
            x[-1] -= 1.0
            grad = np.empty_like(x)
            logp = density.logp(x, grad)
            ref, ref_grad, trace = _pymc_at(model, x)
            # PyMC 6.4's Beta log density lies 3.3e-8 from scipy's (its normaliser): atol.
            np.testing.assert_allclose(logp, ref, rtol=1e-10, atol=1e-7)
            np.testing.assert_allclose(grad, ref_grad, rtol=1e-9, atol=1e-10)
            expanded = density.expand(x)
            for name, value in trace.items():
                np.testing.assert_allclose(expanded[name], value, rtol=1e-12, err_msg=name)


def test_the_native_density_departs_from_pymcs_by_its_beta_log_density_only():
    # The 1e-7 above: at the default Beta(1/2, 1/2) PyMC 6.4's log density lies 3.3e-8 from
    # scipy's, and that is the whole gap (the low-rank form, whose graph runs the same kernel;
    # the dense one's graph runs the NumPy reference, 2e-9 away).
    from scipy.stats import beta

    Phi, y, rng = _design(30, 8, seed=3)
    a, b = 0.5, 0.5
    model = rvm_regression_model(Phi, y, marginal="lowrank")
    density = log_density(compile_nutpie(model), model)
    for _ in range(3):
        x = rng.normal(size=density.n_dim)
        ref, _, _ = _pymc_at(model, x)
        r2 = 1.0 / (1.0 + np.exp(-x[0]))
        gap = beta(a, b).logpdf(r2) - pm.logp(pm.Beta.dist(a, b), r2).eval()
        assert density.logp(x, np.empty_like(x)) - ref == pytest.approx(gap, abs=1e-10)


def _models() -> dict:
    Phi, y, _ = _design(30, 8, seed=4)
    build = {
        "default": lambda: rvm_regression_model(Phi, y),
        "dense": lambda: rvm_regression_model(Phi, y, marginal="dense"),
        "priors": lambda: rvm_regression_model(Phi, y, **PRIORS),
        "outputs": lambda: rvm_regression_model(Phi, np.c_[y, -y]),
        "offset": lambda: rvm_regression_model(Phi, y, offset=np.ones(30)),
        "statistics": lambda: rvm_regression_model(Phi, y, n_rows=300),
        "joint": lambda: rvm_regression_model(Phi, y, form="joint"),
        "student_t": lambda: rvm_regression_model(Phi, y, prior="student_t", nu=3.0),
        "halfcauchy": lambda: rvm_regression_model(Phi, y, alpha_prior="halfcauchy"),
        "log_alpha": lambda: rvm_regression_model(
            Phi,
            y,
            alpha_prior=Prior(
                "R2D2Precision", r2_a=0.5, r2_b=0.5, concentration=0.5, coordinates="log_alpha"
            ),
        ),
        "shares": lambda: rvm_regression_model(
            Phi,
            y,
            alpha_prior=Prior("R2D2Precision", concentration=np.linspace(0.5, 1.0, 8).tolist()),
        ),
        "noise": lambda: rvm_regression_model(Phi, y, noise_prior=Prior("Exponential", lam=1.0)),
        "fixed noise": lambda: rvm_regression_model(Phi, y, noise_sd=0.1),
    }
    models = {name: make() for name, make in build.items()}
    for name, extend in {
        "extended": lambda: pm.Normal("extra", 0.0, 1.0),
        "potential": lambda: pm.Potential("penalty", -(models["potential"]["sigma"] ** 2)),
    }.items():
        models[name] = rvm_regression_model(Phi, y)
        with models[name]:
            extend()
    return models


def test_only_the_default_model_takes_the_native_density():
    native = {
        name
        for name, model in _models().items()
        if _nutpie._native_density(model, _nutpie._layout(model)) is not None
    }
    assert native == {"default", "dense", "priors", "outputs", "statistics", "log_alpha"}
