"""Type-II RVM regression beside its peers, in one run: fit time, relevance vectors, error, evidence

Fit times are medians of 5 runs (one run for fits over a second). Every method gets the same
kernel design (rbf plus a bias column) on the same data. The log
evidence of each fit is evaluated by one function, ``ln p(t | alpha, beta)`` of the basis functions
and hyperparameters that method kept, so the figures are comparable (for ARDRegression this is the
plain marginal likelihood, without its tiny Gamma hyperprior terms).

    python benchmarks/bench_regression.py            # the full table (a few minutes)
    python benchmarks/bench_regression.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.linear_model import ARDRegression
from sklearn.metrics.pairwise import rbf_kernel

from bayes_rvm.datasets import make_friedman, make_sinc, sinc
from bayes_rvm.estimators.regressor import RVR
from bayes_rvm.evidence.gaussian import gaussian_posterior


def log_evidence(Phi, y, cols, alpha, beta) -> float:
    """``ln N(y | 0, I / beta + Phi_c A^-1 Phi_c^T)`` for the kept columns ``cols``."""
    P = Phi[:, cols]
    return gaussian_posterior(
        P.T @ P, (P.T @ y)[:, None], float(y @ y), len(y), np.asarray(alpha, float), float(beta)
    ).log_evidence


def problems(sizes, quick):
    for n in sizes:
        X, y = make_sinc(n, noise=0.1, random=n != 100, random_state=n, shuffle=False)
        Xt = np.linspace(-10, 10, 1000)[:, None]
        yield f"sinc N={n}", X, y, Xt, sinc(Xt[:, 0]), 1.0 / 3.0**2
    if not quick:
        for k in (2, 3):
            X, y = make_friedman(k, 240, noise=0.0, random_state=k)
            Xt, yt = make_friedman(k, 1000, noise=0.0, random_state=100 + k)
            # Tipping (2001) adds noise of 1/3 of the signal's sd to the training targets.
            y = y + np.std(y) / 3 * np.random.default_rng(k).standard_normal(len(y))
            mu, sd = X.mean(0), X.std(0)
            yield f"Friedman #{k} N=240", (X - mu) / sd, y, (Xt - mu) / sd, yt, "scale"


def run(name, fit, Phi, y, Xt, yt):
    """Fit time: the median of 5 runs when one takes under a second, else the single run."""
    times = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        while len(times) < 5 and (not times or times[0] < 1.0):
            start = time.perf_counter()
            out = fit()
            times.append(time.perf_counter() - start)
    pred, n_rv, cols, alpha, beta = out
    rmse = float(np.sqrt(np.mean((pred(Xt) - yt) ** 2)))
    lev = log_evidence(Phi, y, cols, alpha, beta)
    return name, float(np.median(times)), n_rv, rmse, lev


def _predictor(X, gamma, Phi, y, cols, alpha, beta):
    """Posterior-mean predictor of a fit given by its kept columns and hyperparameters."""
    P = Phi[:, cols]
    mean = gaussian_posterior(P.T @ P, (P.T @ y)[:, None], float(y @ y), len(y), alpha, beta).mean

    def predict(Xt):
        Pt = np.c_[rbf_kernel(Xt, X, gamma=gamma), np.ones(len(Xt))]
        return Pt[:, cols] @ mean[:, 0]

    return predict


def methods(X, y, gamma, Phi, max_slow):
    n = len(y)
    gamma_ = gamma if gamma != "scale" else 1.0 / (X.shape[1] * X.var())

    def ours(solver):
        def fit():
            m = RVR(gamma=gamma_, solver=solver).fit(X, y)
            return m.predict, m.n_relevance_vectors_, m.active_, m.alpha_, 1 / m.noise_variance_

        return fit

    yield "bayes_rvm sequential", ours("sequential")
    yield "bayes_rvm MacKay", ours("mackay")

    def fast():
        from fastrvm import _sparsebayes_bindings as sb

        # fastrvm's core on the very same design (bias column included, so use_bias=False).
        core = sb.SparseBayes(
            sb.Likelihood.Gaussian, 10_000, False, False, False, True, False, None
        )
        r = core.inference(Phi, y)
        cols = np.asarray(r["relevant_idx"]).ravel()
        # It works on unit-norm columns and returns alpha on that scale: the prior precision of
        # the weights of the original columns is alpha * norm^4 (its trace confirms this).
        alpha = np.asarray(r["alpha"]).ravel() * np.linalg.norm(Phi[:, cols], axis=0) ** 4
        return (
            _predictor(X, gamma_, Phi, y, cols, alpha, r["beta"]),
            int(np.sum(cols < n)),
            cols,
            alpha,
            r["beta"],
        )

    yield "fastrvm 0.1.5", fast

    def ard():
        m = ARDRegression(fit_intercept=False, max_iter=3000).fit(Phi, y)
        keep = np.flatnonzero(m.lambda_ < m.threshold_lambda)
        pred = _predictor(X, gamma_, Phi, y, keep, m.lambda_[keep], m.alpha_)
        return pred, int(np.sum(keep < n)), keep, m.lambda_[keep], m.alpha_

    if n <= max_slow:
        yield "ARDRegression", ard

    if n <= max_slow:

        def em():
            from sklearn_rvm import EMRVR

            m = EMRVR(kernel="rbf", gamma=gamma_, max_iter=5000)
            m.fit(X, y)  # this release's fit returns None
            cols = np.r_[n, m.relevance_] if m.bias_used else m.relevance_
            return m.predict, len(m.relevance_), cols, m.alpha_, m.beta_

        yield "sklearn-rvm EMRVR", em


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only (smoke run)")
    parser.add_argument(
        "--max-slow",
        type=int,
        default=500,
        help="largest N to run the O(N^3)-per-iteration ARDRegression and EMRVR on",
    )
    args = parser.parse_args(argv)
    sizes = [100, 300] if args.quick else [100, 500, 1000, 2000]
    header = (
        f"{'problem':<20} {'method':<20} {'fit s':>8} {'RVs':>5} {'test RMSE':>10} "
        f"{'log evidence':>13}"
    )
    print(header)
    print("-" * len(header))
    ratios = {}
    for label, X, y, Xt, yt, gamma in problems(sizes, args.quick):
        gamma_ = gamma if gamma != "scale" else 1.0 / (X.shape[1] * X.var())
        Phi = np.c_[rbf_kernel(X, X, gamma=gamma_), np.ones(len(X))]
        rows = [
            run(name, fit, Phi, y, Xt, yt) for name, fit in methods(X, y, gamma, Phi, args.max_slow)
        ]
        for name, t, n_rv, rmse, lev in rows:
            print(f"{label:<20} {name:<20} {t:8.3f} {n_rv:5d} {rmse:10.4f} {lev:13.3f}")
        ours = rows[0][1]
        ratios[label] = {r[0]: r[1] / ours for r in rows[1:]}
    print()
    print("fit time of each method / fit time of bayes_rvm sequential (>1: sequential is faster)")
    for label, r in ratios.items():
        print(f"  {label:<20} " + "  ".join(f"{k}: {v:.2f}x" for k, v in r.items()))
    print()
    print("EMRVR fit time / bayes_rvm MacKay fit time (>1: the MacKay engine is faster)")
    for label, r in ratios.items():
        if "sklearn-rvm EMRVR" in r:
            print(f"  {label:<20} {r['sklearn-rvm EMRVR'] / r['bayes_rvm MacKay']:.2f}x")


if __name__ == "__main__":
    main()
