"""The whitened two-class and count models' log density and gradient in numba, against PyMC's graph
of the same model (``rvm_classification_model(reference=...)``) at random points."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit

from bayes_rvm.models.graphs import rvm_classification_model
from bayes_rvm.models.priors import DEFAULT_WEIGHT_SCALE
from bayes_rvm.models.whitened_density import whitened_logp


@pytest.mark.parametrize("likelihood", ["bernoulli", "poisson"])
def test_whitened_density_is_pymcs(likelihood):
    rng = np.random.default_rng(1)
    N, M = 40, 12
    Phi = rng.normal(size=(N, M)) * 0.5
    phi = rng.uniform(0.5, 2.0, M)
    eta = 0.3 + Phi @ rng.normal(size=M) * 0.5
    if likelihood == "bernoulli":
        y = (rng.random(N) < expit(eta)).astype(np.int64)
    else:
        y = rng.poisson(np.exp(eta))
    model = rvm_classification_model(
        Phi, y, likelihood=likelihood, reference=rng.normal(size=M) * 0.3, phi_scale=phi
    )
    b, r = model["rate_ref"].get_value(), model["working"].get_value()
    G, c = Phi.T @ (b[:, None] * Phi), Phi.T @ (b * r)
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
            DEFAULT_WEIGHT_SCALE,
            likelihood == "poisson",
            grad,
        )
        point = {names[0]: ell, names[1]: u}
        want = dlogp(point)
        assert got == pytest.approx(logp(point), rel=1e-11, abs=1e-9)
        np.testing.assert_allclose(grad, want, rtol=1e-8, atol=1e-9 * np.abs(want).max())
