"""Does the MCMC posterior determine relevance? Candidate ARD hyperpriors compared.

Every candidate is a :class:`bayes_rvm.models.priors.Prior` on the relative precisions ``alpha_rel``
(unit-RMS columns, unit-RMS targets, as the estimators state them), sampled by NUTS (nutpie)
at the package's defaults otherwise, 2 chains x 500 draws after 300 tuning steps. The table has
three parts:

``ard``
    A design whose relevance the data determine: 20 independent standard-normal features, 3 of
    them informative (weights 2, -1, 0.5; noise sd 1), N = 100, the linear ARD problem of
    scikit-learn's ``ARDRegression`` example. Columns are nearly orthogonal, so each column's
    relevance is a well-posed question. ``gap`` is the median over the 17 irrelevant columns of
    their posterior median log10 ``alpha_rel`` minus the same over the 3 informative ones (the
    criterion asks for at least 1); ``P_inf`` / ``P_irr`` the posterior probability of
    ``alpha_rel < 10`` (``relevance_summary``'s threshold) averaged over each group, ``P_prior``
    the prior's.
``noise``
    Tipping's sinc (x uniform on [-10, 10], N = 100, noise sd 0.1, width 2: ``gamma = 0.25``)
    with its 100 kernel columns and a bias, plus 30 kernel columns of an independent input
    uniform on [-10, 10] (same width), which the targets do not depend on: ``P_noise`` against
    ``P_prior``, the posterior median log10 ``alpha_rel`` of the noise columns against that of
    type-II's relevance vectors, and the effective number of parameters (below) of the sinc
    columns and of the noise columns as groups (``peff_sinc``, ``peff_noise``).
``sinc``
    ``RVR(gamma=0.25, inference="mcmc", prior_params={"alpha_prior": ...})`` on sinc itself.
    ``crit`` is the criterion: median log10 ``alpha_rel`` of the basis functions type-II
    prunes minus that of its relevance vectors. Region level: the effective number of
    parameters of each draw, ``gamma_i = 1 - alpha_i Sigma_ii`` (how much of column i's weight
    the data determine rather than the prior, MacKay 1992) summed over all columns (``p_eff``,
    type-II's in ``p_eff_t2``) and averaged per column within half a length scale (1) of a
    type-II relevance vector (``g_near``) and beyond 1.5 of every one (``g_far``). ``elpd`` is
    :func:`bayes_rvm.posterior.comparison.elpd`, what ``compare`` ranks by: PSIS-LOO over the exact
    leave-one-out terms.

Every problem has N = 100 rows, where a prior on unit-RMS columns equals the same prior with its
scale multiplied by 10 on unit-norm ones; the tables give ``alpha_rel`` on unit-norm columns
(``alpha_rel / N``, ``relevance_summary``'s scale), so they read as before the change.

Each part prints divergences, max R-hat of ``log alpha_rel`` and ``sigma_rel``, and wall time.
Timings on a shared machine measure the neighbours too. ``--quick`` runs 2 x 150 draws.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import arviz as az
import numpy as np

from bayes_rvm import RVR, compare
from bayes_rvm.basis.kernels import KernelBasis
from bayes_rvm.datasets import make_sinc
from bayes_rvm.evidence.problem import prior_column_scale
from bayes_rvm.inference import sample_mcmc
from bayes_rvm.models.graphs import rvm_regression_model
from bayes_rvm.models.priors import Prior, default_alpha_prior, sparse_alpha_prior
from bayes_rvm.posterior.comparison import elpd as elpd_of

THRESHOLD = 10.0  # relevance_summary's: alpha < 10 on unit-norm columns counts as relevant
N_ROWS = 100  # every problem's


def candidates(n_basis: int) -> dict[str, Prior]:
    """The hyperpriors compared (on unit-RMS columns), for a design of ``n_basis`` columns."""
    tau0 = 1.0 / (max(n_basis - 1, 1) * np.sqrt(N_ROWS))
    return {
        "half-Cauchy(0.1)": default_alpha_prior("halfcauchy"),
        "sparse_alpha_prior(M, N)": sparse_alpha_prior(n_basis, N_ROWS),
        # Piironen & Vehtari (2017): global scale ~ HalfCauchy(tau0), slab c = 2 on
        # standardised (unit-RMS) columns.
        "reg. horseshoe": Prior(
            "RegularisedHorseshoePrecision", beta=Prior("HalfCauchy", beta=tau0), c=2.0
        ),
        # Tipping's Gamma(a, b) with a small shape and rate, made proper: flat in log alpha
        # from far below 1 up to b^-1 = 1e6 (1e4 on unit-norm columns), where it falls off.
        "Gamma(0.01, 1e-6)": Prior("Gamma", alpha=0.01, beta=1e-6),
    }


def prior_probability(prior: Prior, n: int = 200_000, seed: int = 0) -> float:
    """Prior probability of ``alpha_rel < THRESHOLD``, by simulation."""
    import pymc as pm

    with pm.Model():
        var = prior.create_variable("a", shape=n)
        draws = pm.draw(var, random_seed=seed)
    return float(np.mean(draws / N_ROWS < THRESHOLD))


def _stats(dt) -> tuple[int, float]:
    post = dt["posterior"].dataset
    div = int(dt["sample_stats"]["diverging"].sum())
    rhat = az.rhat(np.log(post[["alpha_rel"]])).to_array().max()
    rhat_s = az.rhat(post[["sigma_rel"]]).to_array().max()
    return div, float(max(rhat, rhat_s))


def _alpha_rel(dt) -> np.ndarray:
    """``alpha_rel`` on unit-norm columns (draws x columns): the model's over ``N_ROWS``."""
    a = dt["posterior"].dataset["alpha_rel"] / N_ROWS
    return a.transpose("chain", "draw", ...).values.reshape(-1, a.sizes["basis"])


def effective_parameters(dt, model) -> np.ndarray:
    """``gamma_i = 1 - alpha_rel_i Sigma_ii`` per draw (draws x columns), normalised problem."""
    Phi = model["Phi"].get_value() / model["phi_scale"].get_value() / np.sqrt(N_ROWS)
    gram = Phi.T @ Phi  # unit-norm columns; the targets' scale enters through sigma_rel
    alpha = _alpha_rel(dt)
    sig = dt["posterior"].dataset["sigma_rel"].transpose("chain", "draw").values.ravel()
    out = np.empty_like(alpha)
    for k, (a, s) in enumerate(zip(alpha, sig, strict=True)):
        sigma = np.linalg.inv(np.diag(a) + gram / s**2)
        out[k] = 1.0 - a * np.diag(sigma)
    return out


def _sample(model, draws, seed, initvals=None):
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dt = sample_mcmc(
            model,
            draws=draws,
            tune=300,
            chains=2,
            random_seed=seed,
            progressbar=False,
            initvals=initvals,
            warn=False,
        )
    return dt, time.perf_counter() - t0


def ard_problem(seed: int = 0):
    """20 independent features, the first 3 informative; N = 100."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((100, 20))
    w = np.zeros(20)
    w[:3] = [2.0, -1.0, 0.5]
    return X, X @ w + rng.standard_normal(100), np.arange(3)


def _model(Phi, y, prior):
    """The marginal model of a design, normalised as the estimators normalise it."""
    norms = np.linalg.norm(Phi, axis=0)
    scale = float(np.sqrt(np.mean(y**2)))
    return rvm_regression_model(
        Phi, y, alpha_prior=prior, phi_scale=prior_column_scale(norms, len(y)), y_scale=scale
    )


def run_ard(name, prior, draws, seed=0):
    X, y, informative = ard_problem(seed)
    model = _model(X, y, prior)
    dt, wall = _sample(model, draws, seed)
    la = np.log10(_alpha_rel(dt))
    med = np.median(la, axis=0)
    irr = np.setdiff1d(np.arange(X.shape[1]), informative)
    p = (la < np.log10(THRESHOLD)).mean(0)
    div, rhat = _stats(dt)
    return {
        "prior": name,
        "med_inf": np.median(med[informative]),
        "med_irr": np.median(med[irr]),
        "gap": np.median(med[irr]) - np.median(med[informative]),
        "P_inf": p[informative].mean(),
        "P_irr": p[irr].mean(),
        "P_prior": prior_probability(prior),
        "div": div,
        "rhat": rhat,
        "time_s": wall,
    }


def noise_problem(seed: int = 0):
    """Sinc's kernel design (100 columns and a bias) plus 30 columns of an unrelated input."""
    X, y = make_sinc(100, noise=0.1, random=True, random_state=seed)
    z = np.random.default_rng(seed + 1).uniform(-10, 10, size=(100, 1))
    K = KernelBasis(kernel="rbf", gamma=0.25).fit(X).transform(X)
    Kz = KernelBasis(kernel="rbf", gamma=0.25).fit(z[:30]).transform(z)[:, :30]
    return X, y, np.hstack([K, Kz]), K.shape[1]


def run_noise(name, prior_of, draws, seed=0):
    X, y, Phi, n_sinc = noise_problem(seed)
    prior = prior_of(Phi.shape[1])
    type2 = RVR(gamma=0.25).fit(X, y)
    model = _model(Phi, y, prior)
    dt, wall = _sample(model, draws, seed)
    la = np.log10(_alpha_rel(dt))
    med = np.median(la, axis=0)
    p = (la < np.log10(THRESHOLD)).mean(0)
    g = effective_parameters(dt, model)
    div, rhat = _stats(dt)
    return {
        "prior": name,
        "peff_sinc": float(np.median(g[:, :n_sinc].sum(1))),
        "peff_noise": float(np.median(g[:, n_sinc:].sum(1))),
        "med_rv": np.median(med[type2.relevance_]),
        "med_noise": np.median(med[n_sinc:]),
        "P_rv": p[type2.relevance_].mean(),
        "P_noise": p[n_sinc:].mean(),
        "P_prior": prior_probability(prior),
        "div": div,
        "rhat": rhat,
        "time_s": wall,
    }


def run_sinc(name, prior_of, draws, seed=0):
    """The table's row for one prior, and the MCMC estimator (for ``compare``)."""
    X, y = make_sinc(100, noise=0.1, random=True, random_state=seed)
    type2 = RVR(gamma=0.25).fit(X, y)
    est = RVR(
        gamma=0.25,
        inference="mcmc",
        sampler_config={"draws": draws, "tune": 300, "chains": 2},
        random_state=seed + 1,
        prior_params={"alpha_prior": prior_of(X.shape[0] + 1)},
    )
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y, progressbar=False)
    wall = time.perf_counter() - t0
    dt = est.idata_
    la = np.log10(_alpha_rel(dt))
    med = np.median(la, axis=0)
    rv = type2.relevance_
    pruned = np.setdiff1d(np.arange(X.shape[0]), rv)
    g = effective_parameters(dt, est.model_)
    x = X[:, 0]
    dist = np.abs(x[:, None] - x[rv][None, :]).min(1)
    near, far = dist <= 1.0, dist > 1.5
    fit = type2.fit_
    t2_gamma = np.sum(1.0 - fit.alpha[fit.active] * np.diag(fit.covariance))
    div, rhat = _stats(dt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        elpd = float(elpd_of(est)[0].elpd)
    return {
        "prior": name,
        "med_rv": np.median(med[rv]),
        "med_pruned": np.median(med[pruned]),
        "crit": np.median(med[pruned]) - np.median(med[rv]),
        "p_eff": float(np.median(g.sum(1))),
        "p_eff_t2": float(t2_gamma),
        "g_near": float(g[:, :100][:, near].mean()),
        "g_far": float(g[:, :100][:, far].mean()),
        "n_near": int(near.sum()),
        "n_far": int(far.sum()),
        "div": div,
        "rhat": rhat,
        "elpd": elpd,
        "time_s": wall,
    }, est


def describe_sinc_design(seed: int = 0) -> str:
    """How redundant the sinc kernel design is: neighbour correlation and numerical rank."""
    X, _ = make_sinc(100, noise=0.1, random=True, random_state=seed)
    K = KernelBasis(kernel="rbf", gamma=0.25).fit(X).transform(X)[:, :100]
    order = np.argsort(X[:, 0])
    Z = K[:, order] / np.linalg.norm(K[:, order], axis=0)
    neighbour = np.sum(Z[:, 1:] * Z[:, :-1], axis=0)
    sv = np.linalg.svd(Z, compute_uv=False)
    return (
        f"sinc design: neighbouring centres {np.median(np.diff(X[order, 0])):.2f} apart (median) "
        f"correlate at {np.median(neighbour):.4f} (median; min {neighbour.min():.3f}); singular "
        f"values above 1e-3 of the largest: {int(np.sum(sv > 1e-3 * sv[0]))} of 100, above 1e-2: "
        f"{int(np.sum(sv > 1e-2 * sv[0]))}"
    )


def _print(rows, title):
    import pandas as pd

    print(f"\n## {title}\n")
    print(pd.DataFrame(rows).set_index("prior").round(3).to_string())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 x 150 draws")
    parser.add_argument("--parts", default="ard,noise,sinc")
    parser.add_argument("--priors", default=None, help="comma-separated subset of names")
    args = parser.parse_args(argv)
    draws = 150 if args.quick else 500
    names = list(candidates(2))
    if args.priors:
        names = [n for n in names if any(p.strip() in n for p in args.priors.split(","))]
    parts = args.parts.split(",")
    print(f"2 chains x {draws} draws, 300 tuning steps; load average {os.getloadavg()[0]:.2f}")

    def prior_of(name):
        return lambda m: candidates(m)[name]

    if "ard" in parts:
        _print([run_ard(n, candidates(20)[n], draws) for n in names], "ard: 3 of 20 features")
    if "noise" in parts:
        _print([run_noise(n, prior_of(n), draws) for n in names], "noise: sinc + 30 columns")
    if "sinc" in parts:
        print("\n" + describe_sinc_design())
        rows, fits = zip(*(run_sinc(n, prior_of(n), draws) for n in names), strict=True)
        _print(list(rows), "sinc, width 2")
        if len(fits) > 1:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                table = compare(dict(zip(names, fits, strict=True)))
            cols = ["elpd", "p", "elpd_diff", "dse", "weight", "method"]
            print("\nbayes_rvm.compare on sinc:\n" + table[cols].round(2).to_string())


if __name__ == "__main__":
    main()
