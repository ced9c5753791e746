"""The posterior as arrays (PosteriorDraws) against direct computation, the DataTree built from
it read back unchanged, and the one-vs-rest fit against the binary fits it is made of."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from bayes_rvm.dims import BASIS, OUTPUT
from bayes_rvm.estimators.classifier import RVC, OneVsRestFit
from bayes_rvm.evidence import fit_evidence
from bayes_rvm.inference import type2_datatree
from bayes_rvm.posterior.datatree import make_datatree, posterior_group
from bayes_rvm.posterior.draws import PosteriorDraws


def _problem(seed: int = 0):
    rng = np.random.default_rng(seed)
    Phi = rng.normal(size=(30, 6))
    t = Phi[:, :2] @ np.array([1.5, -2.0]) + 0.3 * rng.normal(size=30)
    return Phi, t


def test_type2_draws_have_the_gaussian_posterior_of_the_weights():
    Phi, t = _problem()
    fit = fit_evidence(Phi, t[:, None])
    draws = PosteriorDraws.at_optimum(fit, np.arange(6), 40_000, np.random.default_rng(1))
    # The truth, formed densely: Sigma = (A + beta Phi'Phi)^-1, m = beta Sigma Phi't.
    act = fit.active
    P = Phi[:, act]
    Sigma = np.linalg.inv(np.diag(fit.alpha[act]) + fit.beta * P.T @ P)
    m = fit.beta * Sigma @ P.T @ t
    w = draws.weights[:, :, 0]
    assert draws.w.shape == (1, 40_000, 6, 1)
    pruned = np.setdiff1d(np.arange(6), act)
    assert np.all(w[:, pruned] == 0.0)
    sd = np.sqrt(np.diag(Sigma))
    assert np.all(np.abs(w[:, act].mean(axis=0) - m) < 5 * sd / np.sqrt(40_000))
    np.testing.assert_allclose(np.cov(w[:, act].T), Sigma, rtol=0.05, atol=0.05 * sd.max() ** 2)
    np.testing.assert_allclose(draws.flat("sigma"), fit.beta**-0.5)
    assert np.all(draws.flat("alpha") == fit.alpha)


def test_draws_round_trip_through_their_datatree_and_predict_like_a_loop():
    rng = np.random.default_rng(2)
    C, S, M, D, n = 2, 5, 4, 3, 7
    draws = PosteriorDraws(
        w=rng.normal(size=(C, S, M, D)),
        basis=np.array([0, 2, 5, 9]),
        extra_dim=OUTPUT,
        alpha=rng.gamma(2.0, size=(C, S, M)),
        sigma=rng.gamma(2.0, size=(C, S)),
        intercept=rng.normal(size=(C, S, D)),
    )
    coords = {"chain": np.arange(C), "draw": np.arange(S), BASIS: draws.basis, OUTPUT: np.arange(D)}
    tree = make_datatree(
        {"posterior": posterior_group(draws)}, coords=coords, w_extra=OUTPUT, y_extra=OUTPUT
    )
    back = PosteriorDraws.from_posterior(tree["posterior"].dataset)
    for name in ("w", "basis", "alpha", "sigma", "intercept"):
        np.testing.assert_array_equal(getattr(back, name), getattr(draws, name))
    assert back.extra_dim == OUTPUT and back.gamma is None
    np.testing.assert_allclose(tree["posterior"]["beta"].values, draws.sigma**-2.0)
    # Flat draws run chain-major, and the latent function is Phi w + intercept per draw.
    Phi = rng.normal(size=(n, M))
    f = back.function(Phi, back.intercept_at(n))
    for c in range(C):
        for s in range(S):
            k = c * S + s
            assert back.flat("sigma")[k] == draws.sigma[c, s]
            expected = Phi @ draws.w[c, s] + draws.intercept[c, s]
            np.testing.assert_allclose(f[k], expected, rtol=1e-12, atol=1e-12)


def test_draws_refuse_a_posterior_without_weights_and_misshapen_weights():
    Phi, t = _problem()
    tree = type2_datatree(fit_evidence(Phi, t[:, None]), Phi, t, n_draws=5, random_seed=0)
    with pytest.raises(ValueError, match="complete_posterior"):
        PosteriorDraws.from_posterior(tree["posterior"].dataset.drop_vars("w"))
    with pytest.raises(ValueError, match=r"\(chain, draw, basis, D\)"):
        PosteriorDraws(w=np.zeros((1, 5, 6)), basis=np.arange(6))


def test_one_vs_rest_fit_is_the_binary_fits_of_each_class():
    X, y = make_blobs(90, centers=3, cluster_std=2.0, random_state=1)
    ovr = RVC(gamma=0.2, multi_class="ovr").fit(X, y)
    fit = ovr.fit_
    assert isinstance(fit, OneVsRestFit)
    assert len(fit) == 3 and fit[1] is fit.fits[1]  # as the tuple of fits it once was
    for c, (part, pos) in enumerate(fit.parts()):
        # Each part is the binary RVC of its class against the rest, on the same basis.
        binary = RVC(gamma=0.2).fit(X, (y == c).astype(int))
        np.testing.assert_array_equal(np.sort(part.active), np.sort(binary.fit_.active))
        np.testing.assert_allclose(part.log_evidence, binary.log_evidence_, rtol=1e-10)
        np.testing.assert_array_equal(fit.active[pos], part.active)
        np.testing.assert_array_equal(fit.mean[pos, c], part.mean[:, 0])
        others = np.setdiff1d(np.arange(fit.active.size), pos)
        assert np.all(fit.mean[others, c] == 0.0) and np.all(fit.class_alpha[others, c] == np.inf)
    assert ovr.log_evidence_ == pytest.approx(sum(p.log_evidence for p, _ in fit.parts()))
    np.testing.assert_array_equal(
        ovr.active_, np.unique(np.concatenate([p.active for p in fit.fits]))
    )
