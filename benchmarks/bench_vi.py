"""VI against MCMC on Tipping's sinc problem (N = 100, width 2, ``gamma = 1/4``).

Prints one table: for ``RVR(inference="vi")`` and ``RVR(inference="mcmc")`` (the estimator's
defaults otherwise), each in **fresh Python processes** run one after the other, alternating
(VI, MCMC, VI, MCMC, ...): the import, the first fit (type-II fit, model, compilation or cache
load, the engine and the DataTree), the held-out NLPD on 1000 fresh points (the mixture over the
draws), and the posterior sd of ``log alpha_rel`` (median over the basis functions). The
targets are a first VI fit under 15 s and an NLPD within 0.05 nat/point of MCMC's; on a shared
machine the ratio VI / MCMC of the same round is the figure to read, beside the load average.

Usage::

    .venv/bin/python benchmarks/bench_vi.py [--rounds 2] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
from bayes_rvm.posterior.calibration import mixture_nlpd
from bayes_rvm.datasets import make_sinc
from bayes_rvm.estimators.regressor import RVR
t_import = time.perf_counter() - t0
inference, quick = sys.argv[1], sys.argv[2] == "1"
X, y = make_sinc(100, random_state=0)
X_test, y_test = make_sinc(1000, random_state=1)
extra = dict(sampler_config=dict(draws=200, chains=2)) if quick and inference == "mcmc" else {}
t1 = time.perf_counter()
est = RVR(gamma=0.25, inference=inference, random_state=0, **extra).fit(X, y)
t_fit = time.perf_counter() - t1
post = est.idata_["posterior"]
cols = post["basis"].values
f = post["w"].values.reshape(-1, cols.size) @ est.basis_.transform(X_test, columns=cols).T
nlpd = float(mixture_nlpd(y_test, f, post["sigma"].values.reshape(-1)).mean())
la = np.log(post["alpha_rel"].values.reshape(-1, cols.size))
print(json.dumps({
    "import_s": t_import, "first_fit_s": t_fit, "total_s": time.perf_counter() - t0,
    "engine_s": float(est.idata_.attrs["wall_time"]), "nlpd": nlpd,
    "sd_log_alpha": float(np.median(la.std(0))),
    "n_iter": int(est.idata_.attrs.get("n_iter", 0)),
}))
"""


def run_child(inference: str, quick: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", CHILD, inference, "1" if quick else "0"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=ROOT,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="fewer MCMC draws (a smoke run)")
    args = parser.parse_args(argv)
    head = (
        f"{'round':>5} {'engine':>6} {'load':>5} {'import_s':>8} {'first_fit_s':>11} "
        f"{'engine_s':>8} {'nlpd':>8} {'sd_log_a':>8} {'n_iter':>6}"
    )
    print(head)
    for r in range(args.rounds):
        rows = {}
        for inference in ("vi", "mcmc"):
            load = os.getloadavg()[0]
            rows[inference] = row = run_child(inference, args.quick)
            print(
                f"{r:>5} {inference:>6} {load:>5.1f} {row['import_s']:>8.1f} "
                f"{row['first_fit_s']:>11.1f} {row['engine_s']:>8.1f} {row['nlpd']:>8.4f} "
                f"{row['sd_log_alpha']:>8.3f} {row['n_iter']:>6}",
                flush=True,
            )
        vi, mc = rows["vi"], rows["mcmc"]
        print(
            f"      VI / MCMC first fit {vi['first_fit_s'] / mc['first_fit_s']:.2f}, "
            f"VI - MCMC NLPD {vi['nlpd'] - mc['nlpd']:+.4f} nat/point (target |.| < 0.05), "
            f"sd(log alpha) VI / MCMC {vi['sd_log_alpha'] / mc['sd_log_alpha']:.2f}; "
            f"VI first fit target < 15 s: {vi['first_fit_s']:.1f} s"
        )


if __name__ == "__main__":
    main()
