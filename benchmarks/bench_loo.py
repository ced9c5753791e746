"""What LOO says about a type-II fit and an MCMC fit, against brute force and held-out data.

Sinc, inputs uniform on [-10, 10], noise sd 0.1, N training points, 1000 held-out points, the
Gaussian kernel of width ``--width`` (``gamma = 1 / width^2``), replicate data sets. Per replicate,
in nats over the N training points:

- ``t2 psis``: ``az.loo`` on the type-II tree's draws of ``w`` (hyperparameters fixed at the
  full-data optimum: what ``compare`` reported before the refitted leave-one-out);
- ``t2 loo``: what :func:`bayes_rvm.posterior.comparison.compare` reports for the type-II fit now
(exact
  leave-one-out by refits of the engine, ``RVR.refit_loo``);
- ``t2 brute``: brute force by the estimator, ``RVR(...).fit`` on the other N - 1 points
  (their own basis, without the left-out point's kernel column) and its predictive density at
  the left-out point: an independent check of ``t2 loo``;
- ``t2 held``: the held-out mean log predictive density times N;
- ``mc psis``: PSIS-LOO of the MCMC fit on the exact LOO terms of the marginal (what
  ``compare`` reports), with its largest Pareto k;
- ``mc cond``: PSIS-LOO on the terms conditional on one weight draw (what it reported before
  that), with its largest Pareto k;
- ``mc held``: the held-out mean log predictive density of the MCMC mixture, times N;
- ``compare`` / ``held-out``: which engine each ranks first.

    python benchmarks/bench_loo.py                      # 5 replicates, width 2, 2 x 500 draws
    python benchmarks/bench_loo.py --width 1 --reps 2   # the narrow kernel
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
import xarray as xr
from scipy import stats

from bayes_rvm.datasets import make_sinc
from bayes_rvm.estimators.regressor import RVR
from bayes_rvm.inference import pointwise_log_likelihood
from bayes_rvm.posterior.comparison import compare
from bayes_rvm.studies.runner import _regression_nlpd


def _conditional_psis(dt) -> az.ELPDData:
    """PSIS-LOO on ``ln p(t_n | w, sigma)`` for the drawn weights (the earlier terms)."""
    post = dt["posterior"].dataset
    C, S = post.sizes["chain"], post.sizes["draw"]
    Phi = dt["constant_data"]["Phi"].values
    y = dt["observed_data"]["y"].values
    w = post["w"].transpose("chain", "draw", "basis").values.reshape(C * S, -1, 1)
    ll = pointwise_log_likelihood(Phi, y[:, None], w, post["sigma"].values.reshape(-1))
    tree = dt.copy()
    old = dt["log_likelihood"].dataset
    tree["log_likelihood"] = xr.DataTree(old.assign(y=old["y"].copy(data=ll.reshape(C, S, -1))))
    return az.loo(tree, pointwise=True)


def _brute_type2(gamma: float, X, y) -> float:
    out = 0.0
    for n in range(len(y)):
        keep = np.delete(np.arange(len(y)), n)
        est = RVR(gamma=gamma).fit(X[keep], y[keep])
        mean, sd = est.predict(X[n : n + 1], return_std=True)
        out += stats.norm.logpdf(y[n], mean[0], sd[0])
    return float(out)


def replicate(seed: int, n: int, width: float, draws: int, chains: int) -> dict:
    gamma = 1.0 / width**2
    X, y = make_sinc(n, random=True, random_state=seed)
    Xt, yt = make_sinc(1000, random=True, random_state=10_000 + seed)
    t2 = RVR(gamma=gamma).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mc = RVR(
            gamma=gamma,
            inference="mcmc",
            sampler_config={"draws": draws, "chains": chains, "tune": 300},
            random_state=seed,
        ).fit(X, y)
        table = compare({"type-II": t2.idata_, "MCMC": mc.idata_})
        t2_psis = az.loo(t2.idata_).elpd
        mc_psis = az.loo(mc.idata_, pointwise=True)
        cond = _conditional_psis(mc.idata_)
    held_t2 = -_regression_nlpd(t2, t2.idata_, "type2", Xt, yt) * n
    held_mc = -_regression_nlpd(mc, mc.idata_, "mcmc", Xt, yt) * n
    return {
        "t2 psis": t2_psis,
        "t2 loo": table.loc["type-II", "elpd"],
        "t2 brute": _brute_type2(gamma, X, y),
        "t2 held": held_t2,
        "mc psis": mc_psis.elpd,
        "mc k": float(mc_psis.pareto_k.max()),
        "mc k>0.5": int((mc_psis.pareto_k > 0.5).sum()),
        "mc cond": cond.elpd,
        "cond k": float(cond.pareto_k.max()),
        "cond k>0.5": int((cond.pareto_k > 0.5).sum()),
        "mc held": held_mc,
        "compare": table.index[0],
        "held-out": "type-II" if held_t2 > held_mc else "MCMC",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--width", type=float, default=2.0)
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--chains", type=int, default=2)
    args = parser.parse_args()
    start = time.perf_counter()
    rows = [replicate(s, args.n, args.width, args.draws, args.chains) for s in range(args.reps)]
    print(
        f"sinc, N = {args.n}, width {args.width}, {args.chains} x {args.draws} draws, "
        f"{args.reps} replicates ({time.perf_counter() - start:.0f} s); elpd in nats"
    )
    keys = list(rows[0])
    print("rep " + " ".join(f"{k:>10}" for k in keys))
    for i, row in enumerate(rows):
        cells = [f"{v:10.2f}" if isinstance(v, float) else f"{v!s:>10}" for v in row.values()]
        print(f"{i:3d} " + " ".join(cells))
    num = [
        k for k in keys if isinstance(rows[0][k], float | int) and not isinstance(rows[0][k], bool)
    ]
    mean = {k: np.mean([r[k] for r in rows]) for k in num}
    print("avg " + " ".join(f"{mean[k]:10.2f}" if k in mean else f"{'':>10}" for k in keys))
    t2_gap = [r["t2 loo"] - r["t2 brute"] for r in rows]
    print(
        f"type-II: compare - brute force {np.mean(t2_gap):+.2f} on average "
        f"(max |.| {np.max(np.abs(t2_gap)):.2f}); PSIS at fixed hyperparameters - brute force "
        f"{np.mean([r['t2 psis'] - r['t2 brute'] for r in rows]):+.2f}"
    )
    print(
        "LOO - held-out: "
        f"type-II (compare) {np.mean([r['t2 loo'] - r['t2 held'] for r in rows]):+.2f}, "
        f"type-II (PSIS, fixed) {np.mean([r['t2 psis'] - r['t2 held'] for r in rows]):+.2f}, "
        f"MCMC {np.mean([r['mc psis'] - r['mc held'] for r in rows]):+.2f}"
    )
    agree = sum(r["compare"] == r["held-out"] for r in rows)
    print(f"compare ranks the engines as held-out data do on {agree} of {len(rows)} replicates")


if __name__ == "__main__":
    main()
