"""Honest predictive distributions, in one run: plain RVM, RVM*, MCMC and a Gaussian process.

For each problem: test negative log predictive density (NLPD, nats per point, noisy targets),
RMSE of the predictive mean against the noisy test targets, coverage of the central 90%
predictive interval, and prediction time per 1000 points (median of 5 calls of
``predict(X, return_std=True)``; the GP's is scikit-learn's). Problems:

- sinc with a gap and extrapolation: 100 training inputs on [-10, -3] and [3, 10], noise sd 0.1;
  test inputs on [-15, 15] (the gap and 5 units beyond the data on either side);
- Friedman #2 and #3 (N = 240 training, 1000 test; noise of 1/3 of the signal's sd, as in
  Tipping 2001), inputs standardised;
- scikit-learn's bundled diabetes data (442 patients, 10 features): a random 2/3 to train, the
  rest to test, inputs standardised.

Every model uses the same Gaussian (rbf) kernel: the GP is ``ConstantKernel * RBF +
WhiteKernel`` with its hyperparameters fitted by scikit-learn (``normalize_y=True``, 3 optimiser
restarts), and the RVM's basis functions are that fitted RBF, ``exp(-|x - x'|^2 / (2 l^2))``.
(Choosing the RVM's width by its own evidence over a grid picked widths at which it kept nearly
every training point and drove the noise to zero on Friedman #3 and the diabetes data, with
NLPDs in the thousands: that is the evidence's all-signal optimum, not a property of the
predictive.) The MCMC fit is NUTS over the hyperparameters of the RVM restricted to the type-II
relevance vectors (``mcmc_basis="relevant"``, weight-marginalised; conditional on the type-II
selection, the setting that fits the session's time), its predictive the mixture over the draws.

    python benchmarks/bench_predictive.py            # the table (several minutes: MCMC)
    python benchmarks/bench_predictive.py --quick    # a smoke run without MCMC
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.datasets import load_diabetes
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, WhiteKernel
from sklearn.gaussian_process.kernels import ConstantKernel as C

from bayes_rvm.calibration import (
    gaussian_nlpd,
    interval_coverage,
    mixture_nlpd,
    pit_gaussian,
    pit_mixture,
)
from bayes_rvm.datasets import make_friedman, sinc
from bayes_rvm.estimators import RVR

LEVEL = 0.9


def _standardise(X, Xt):
    mu, sd = X.mean(0), X.std(0)
    return (X - mu) / sd, (Xt - mu) / sd


def problems():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-10, -3, 50), rng.uniform(3, 10, 50)])
    xt = rng.uniform(-15, 15, 1000)
    yield (
        "sinc, gap + extrapolation",
        x[:, None],
        sinc(x) + 0.1 * rng.standard_normal(x.size),
        xt[:, None],
        sinc(xt) + 0.1 * rng.standard_normal(xt.size),
    )
    for k in (2, 3):
        X, f = make_friedman(k, 240, random_state=k)
        Xt, ft = make_friedman(k, 1000, random_state=100 + k)
        noise = np.std(f) / 3
        r = np.random.default_rng(k)
        y = f + noise * r.standard_normal(f.size)
        yt = ft + noise * r.standard_normal(ft.size)
        X, Xt = _standardise(X, Xt)
        yield f"Friedman #{k}, N=240", X, y, Xt, yt
    X, y = load_diabetes(return_X_y=True)
    idx = np.random.default_rng(1).permutation(y.size)
    tr, te = idx[: 2 * y.size // 3], idx[2 * y.size // 3 :]
    Xtr, Xte = _standardise(X[tr], X[te])
    yield "diabetes (sklearn)", Xtr, y[tr], Xte, y[te]


def per_1000(predict, Xt):
    """Median seconds of 5 calls, per 1000 test points."""
    times = []
    for _ in range(5):
        start = time.perf_counter()
        predict(Xt)
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1000.0 / Xt.shape[0]


def gaussian_row(name, model, Xt, yt):
    def predict(Z):
        return model.predict(Z, return_std=True)

    mean, std = predict(Xt)
    pit = pit_gaussian(yt, mean, std)
    return {
        "model": name,
        "nlpd": float(np.mean(gaussian_nlpd(yt, mean, std))),
        "rmse": float(np.sqrt(np.mean((yt - mean) ** 2))),
        "cover": float(interval_coverage(pit, LEVEL)),
        "ms": 1e3 * per_1000(predict, Xt),
    }


def mcmc_row(model, Xt, yt):
    f, sigma = model._mcmc_draws(Xt)
    mean = f.mean(0)
    return {
        "model": "MCMC",
        "nlpd": float(np.mean(mixture_nlpd(yt, f, sigma))),
        "rmse": float(np.sqrt(np.mean((yt - mean) ** 2))),
        "cover": float(interval_coverage(pit_mixture(yt, f, sigma), LEVEL)),
        "ms": 1e3 * per_1000(lambda Z: model.predict(Z, return_std=True), Xt),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="no MCMC, 2 problems (smoke run)")
    parser.add_argument("--draws", type=int, default=500, help="MCMC draws per chain")
    args = parser.parse_args()
    header = f"{'problem':<27} {'model':<6} {'NLPD':>8} {'RMSE':>9} {'90% cover':>9} {'ms/1000':>8}"
    print(header)
    print("-" * len(header))
    for k, (label, X, y, Xt, yt) in enumerate(problems()):
        if args.quick and k >= 2:
            break
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kern = C(1.0) * RBF(1.0) + WhiteKernel(0.1)
            gp = GaussianProcessRegressor(
                kern, normalize_y=True, n_restarts_optimizer=3, random_state=0
            ).fit(X, y)
            length = gp.kernel_.k1.k2.length_scale
            rvm = RVR(gamma=1.0 / (2.0 * length**2)).fit(X, y)
            star = RVR(**{**rvm.get_params(), "predictive": "rvm*"}).fit(X, y)
            rows = [
                gaussian_row("RVM", rvm, Xt, yt),
                gaussian_row("RVM*", star, Xt, yt),
            ]
            if not args.quick:
                mcmc = RVR(
                    **{
                        **rvm.get_params(),
                        "inference": "mcmc",
                        "draws": args.draws,
                        "tune": args.draws,
                        "chains": 2,
                        "mcmc_basis": "relevant",
                        "random_state": 0,
                    }
                ).fit(X, y)
                rows.append(mcmc_row(mcmc, Xt, yt))
            rows.append(gaussian_row("GP", gp, Xt, yt))
        for row in rows:
            print(
                f"{label:<27} {row['model']:<6} {row['nlpd']:8.3f} {row['rmse']:9.4g} "
                f"{100 * row['cover']:8.1f}% {row['ms']:8.2f}"
            )
        gamma = rvm.basis_.gamma_
        print(
            f"{'':<27} RVM: {rvm.n_relevance_vectors_} relevance vectors, width "
            f"{1 / np.sqrt(gamma):.3g}; GP kernel {gp.kernel_}"
        )


if __name__ == "__main__":
    main()
