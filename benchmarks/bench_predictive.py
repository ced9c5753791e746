"""Honest predictive distributions, in one run: plain RVM, RVM*, MCMC and a Gaussian process.

For each problem: test negative log predictive density (NLPD, nats per point, noisy targets),
RMSE of the predictive mean against the noisy test targets, coverage of the central 90%
predictive interval, prediction time per 1000 points (the fastest of 30 calls of
``predict(X, return_std=True)``, the models' calls interleaved; the GP's is scikit-learn's) and
that time over the plain RVM's of the same fit (``x RVM``). Problems:

- sinc with a gap and extrapolation: 100 training inputs on [-10, -3] and [3, 10], noise sd 0.1;
  test inputs on [-15, 15] (the gap and 5 units beyond the data on either side);
- Friedman #2 and #3 (N = 240 training, 1000 test; noise of 1/3 of the signal's sd, as in
  Tipping 2001), inputs standardised;
- scikit-learn's bundled diabetes data (442 patients, 10 features): a random 2/3 to train, the
  rest to test, inputs standardised.

Every model of the main rows uses the same Gaussian (rbf) kernel: the GP is ``ConstantKernel *
RBF + WhiteKernel`` with its hyperparameters fitted by scikit-learn (``normalize_y=True``, 3
optimiser restarts), and the RVM's basis functions are that fitted RBF,
``exp(-|x - x'|^2 / (2 l^2))``. The RVM is the type-II fit of higher log evidence of the two
engines (``solver="sequential"`` and ``"mackay"``): the evidence is multimodal, and on these
problems the re-estimation engine reaches the higher optimum, with a better predictive (on
Friedman #3: 8 nats more evidence, test RMSE 0.140 against 0.157). RVM and RVM* rows are one
fit with either predictive; so are MCMC and MCMC* (RVM* per draw, mixed over the draws). The
MCMC fit is NUTS over the hyperparameters of the RVM restricted to the type-II relevance vectors
(``mcmc_basis="relevant"``, weight-marginalised; conditional on the type-II selection, the
setting that fits the session's time). The ``defaults`` rows are ``RVR()`` as shipped (its own
width rule and engine), with either predictive.

Timings use one BLAS thread (``--threads``): at these sizes threads only add synchronisation,
and on a shared machine they would measure the contention. The load average is printed.

    python benchmarks/bench_predictive.py            # the table (several minutes: MCMC)
    python benchmarks/bench_predictive.py --quick    # a smoke run without MCMC
"""

from __future__ import annotations

import argparse
import copy
import os
import time
import warnings
from contextlib import nullcontext

import numpy as np
from sklearn.datasets import load_diabetes
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, WhiteKernel
from sklearn.gaussian_process.kernels import ConstantKernel as C
from threadpoolctl import threadpool_limits

from bayes_rvm.datasets import make_friedman, sinc
from bayes_rvm.estimators.regressor import RVR
from bayes_rvm.posterior.calibration import (
    gaussian_nlpd,
    interval_coverage,
    mixture_nlpd,
    pit_gaussian,
    pit_mixture,
)
from bayes_rvm.posterior.predictors import Rows

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


def time_rows(rows, Xt, rounds):
    """Fastest of ``rounds`` calls of each row's ``predict``, ms per 1000 test points.

    The rows' calls are interleaved round by round, so that every model meets the same load on
    a shared machine; the fastest call is the least disturbed one. MCMC rows get a third of the
    rounds (each call is long).
    """
    best = [np.inf] * len(rows)
    for k in range(rounds):
        for i, row in enumerate(rows):
            if row["model"].startswith("MCMC") and k % 3:
                continue
            start = time.perf_counter()
            row["predict"](Xt)
            best[i] = min(best[i], time.perf_counter() - start)
    for row, seconds in zip(rows, best, strict=True):
        row["ms"] = 1e3 * seconds * 1000.0 / Xt.shape[0]


def with_predictive(model, predictive):
    """The same fit with the other predictive (a shallow copy: the arrays are shared)."""
    out = copy.copy(model)
    out.predictive = predictive
    return out


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
        "predict": predict,
    }


def mcmc_row(name, model, Xt, yt):
    rows = Rows(Xt, model.basis_, model.training_.x_train)
    if model.predictive == "rvm*":
        f, sigma = model.predictor_.draw_moments(rows)
    else:
        f, sigma = model.predictor_.function(rows)
    mean = f.mean(0)
    return {
        "model": name,
        "nlpd": float(np.mean(mixture_nlpd(yt, f, sigma))),
        "rmse": float(np.sqrt(np.mean((yt - mean) ** 2))),
        "cover": float(interval_coverage(pit_mixture(yt, f, sigma), LEVEL)),
        "predict": lambda Z: model.predict(Z, return_std=True),
    }


def evidence_best(X, y, **params):
    """The type-II fit of higher log evidence of the two engines."""
    fits = [RVR(solver=solver, **params).fit(X, y) for solver in ("sequential", "mackay")]
    return max(fits, key=lambda m: m.log_evidence_)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="no MCMC, 2 problems (smoke run)")
    parser.add_argument("--draws", type=int, default=500, help="MCMC draws per chain")
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads (0: the default)")
    parser.add_argument("--rounds", type=int, default=30, help="timing rounds (fastest kept)")
    args = parser.parse_args()
    limits = threadpool_limits(args.threads) if args.threads > 0 else nullcontext()
    print("load average at start: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    header = (
        f"{'problem':<27} {'model':<15} {'NLPD':>8} {'RMSE':>9} {'90% cover':>9} "
        f"{'ms/1000':>8} {'x RVM':>6}"
    )
    print(header)
    print("-" * len(header))
    with limits:
        for k, problem in enumerate(problems()):
            if args.quick and k >= 2:
                break
            run_problem(problem, args)
    print("load average at end: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


def run_problem(problem, args):
    label, X, y, Xt, yt = problem
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kern = C(1.0) * RBF(1.0) + WhiteKernel(0.1)
        gp = GaussianProcessRegressor(
            kern, normalize_y=True, n_restarts_optimizer=3, random_state=0
        ).fit(X, y)
        length = gp.kernel_.k1.k2.length_scale
        rvm = evidence_best(X, y, gamma=1.0 / (2.0 * length**2))
        rows = [
            gaussian_row("RVM", rvm, Xt, yt),
            gaussian_row("RVM*", with_predictive(rvm, "rvm*"), Xt, yt),
        ]
        if not args.quick:
            mcmc = RVR(
                **{
                    **rvm.get_params(),
                    "inference": "mcmc",
                    "sampler_config": {
                        "draws": args.draws,
                        "tune": args.draws,
                        "chains": 2,
                        "mcmc_basis": "relevant",
                    },
                    "random_state": 0,
                }
            ).fit(X, y)
            rows.append(mcmc_row("MCMC", mcmc, Xt, yt))
            rows.append(mcmc_row("MCMC*", with_predictive(mcmc, "rvm*"), Xt, yt))
        rows.append(gaussian_row("GP", gp, Xt, yt))
        own = RVR().fit(X, y)
        rows.append(gaussian_row("RVM, defaults", own, Xt, yt))
        rows.append(gaussian_row("RVM*, defaults", with_predictive(own, "rvm*"), Xt, yt))
    time_rows(rows, Xt, args.rounds)
    base = {"": rows[0]["ms"], "defaults": rows[-2]["ms"]}
    for row in rows:
        ratio = row["ms"] / base["defaults" if "defaults" in row["model"] else ""]
        print(
            f"{label:<27} {row['model']:<15} {row['nlpd']:8.4f} {row['rmse']:9.4g} "
            f"{100 * row['cover']:8.1f}% {row['ms']:8.2f} {ratio:6.1f}"
        )
    print(
        f"{'':<27} RVM: {rvm.solver} engine, {rvm.n_relevance_vectors_} relevance vectors, "
        f"noise sd {np.sqrt(rvm.noise_variance_):.3g}; GP kernel {gp.kernel_}"
    )
    print(
        f"{'':<27} defaults: width {own.length_scale_:.3g}, {own.n_relevance_vectors_} "
        f"relevance vectors, noise sd {np.sqrt(own.noise_variance_):.3g}"
    )


if __name__ == "__main__":
    main()
