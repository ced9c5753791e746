"""nutpie through its function-based entry (bayes_rvm._nutpie) and the progress-bar default."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

from bayes_rvm import inference
from bayes_rvm._nutpie import compile_nutpie, with_initial_points


def _conjugate_model(y):
    # Normal mean with known sd: the posterior is N(m, s^2) in closed form.
    with pm.Model() as model:
        data = pm.Data("y_data", y)
        mu = pm.Normal("mu", 0.0, 10.0)
        sd = pm.HalfNormal("sd", 1.0)
        pm.Normal("y", mu, 1.0, observed=data)
        pm.Deterministic("sd_used", sd)
    return model


def _posterior_of_mu(y):
    prec = 1 / 100 + y.size
    return y.sum() / prec, prec**-0.5


def test_function_based_nutpie_samples_a_user_model_exactly():
    import nutpie

    rng = np.random.default_rng(0)
    y = rng.normal(1.5, 1.0, size=25)
    model = _conjugate_model(y)
    compiled = compile_nutpie(model)
    dt = nutpie.sample(compiled, draws=600, tune=300, chains=2, seed=1, progress_bar=False)
    mu = dt["posterior"]["mu"].values.ravel()
    m, s = _posterior_of_mu(y)
    assert abs(mu.mean() - m) < 5 * s / np.sqrt(300)
    assert abs(mu.std() - s) < 0.15 * s
    # new data through with_data, same compiled function
    y2 = y + 3.0
    dt2 = nutpie.sample(
        compiled.with_data(y_data=y2), draws=600, tune=300, chains=2, seed=2, progress_bar=False
    )
    m2, _ = _posterior_of_mu(y2)
    assert abs(dt2["posterior"]["mu"].values.mean() - m2) < 5 * s / np.sqrt(300)


def test_initial_points_are_set_without_recompiling():
    model = _conjugate_model(np.zeros(5))
    compiled = compile_nutpie(model)
    started = with_initial_points(compiled, model, {"mu": 40.0, "sd": 2.0})
    # the flat start nutpie asks for: (mu, log sd), jittered by at most 1 as PyMC does
    start = started._make_initial_points(3)
    assert abs(start[0] - 40.0) <= 1.0 and abs(start[1] - np.log(2.0)) <= 1.0
    assert started._make_logp_func is compiled._make_logp_func
    default = with_initial_points(compiled, model, None)._make_initial_points(3)
    assert abs(default[0]) <= 1.0


def test_progressbar_auto_is_silent_in_non_interactive_output(capfd):
    from bayes_rvm.models import rvm_regression_model

    rng = np.random.default_rng(1)
    Phi = rng.normal(size=(15, 4))
    model = rvm_regression_model(Phi, Phi @ np.array([1.0, 0, 0, -1]) + 0.1 * rng.normal(size=15))
    assert not inference._interactive()  # pytest captures the streams
    inference.sample_mcmc(model, draws=10, tune=10, chains=2, random_seed=0, warn=False)
    out, err = capfd.readouterr()
    assert out == "" and err == ""


@pytest.mark.parametrize("value", [True, False])
def test_progressbar_explicit_values_are_accepted(value):
    from bayes_rvm.models import rvm_regression_model

    rng = np.random.default_rng(2)
    Phi = rng.normal(size=(12, 3))
    model = rvm_regression_model(Phi, rng.normal(size=12))
    dt = inference.sample_mcmc(
        model, draws=5, tune=5, chains=2, random_seed=0, warn=False, progressbar=value
    )
    assert dt["posterior"]["w"].shape == (2, 5, 3)
