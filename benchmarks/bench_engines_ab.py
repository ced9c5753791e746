"""Before/after timing of the type-II engines: two checkouts, interleaved, medians.

Times the four engines (and the two estimators on top of them) of two checkouts of the package on
the problems of ``bench_sequential.py`` and ``bench_classification.py``: sinc with an rbf basis
(N = 500, 1000, 2000 on the full basis; N = 5000 on 200 random centres), MacKay on sinc N = 300,
Ripley-like classification (N = 1000 and 2000 through the sequential Laplace engine, N = 200
through Laplace MacKay), the multinomial digits RVC. Each checkout runs in its own subprocess; the
runs alternate between the two (ABBA...) ``--repeats`` times so that a machine shared with other
work slows both alike, and the table shows per-problem medians and their ratio.

    python benchmarks/bench_engines_ab.py OLD_CHECKOUT NEW_CHECKOUT [--repeats 5] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np


def _sinc(n, seed=0):
    rng = np.random.default_rng(seed)
    X = np.linspace(-10, 10, n)[:, None]
    return X, np.sinc(X[:, 0] / np.pi) + 0.1 * rng.standard_normal(n)


def _rbf_design(X, centres, gamma):
    from sklearn.metrics.pairwise import rbf_kernel

    return np.hstack([rbf_kernel(X, centres, gamma=gamma), np.ones((X.shape[0], 1))])


def _ripley_like(n, seed=0):
    from bench_classification import ripley_like  # the same generator as that benchmark

    return ripley_like(n, seed)


def problems(quick: bool):
    """name -> zero-argument callable running one fit (data built outside the timing)."""
    import bayes_rvm.evidence as ev
    from bayes_rvm.estimators.classifier import RVC

    out = {}
    for n in (500,) if quick else (500, 1000, 2000):
        X, y = _sinc(n)
        Phi = _rbf_design(X, X, 1 / 9)
        out[f"sequential sinc N={n}"] = lambda Phi=Phi, y=y: ev.fit_sequential(
            Phi, y, beta_init=100.0
        )
    X, y = _sinc(2000 if quick else 5000)
    centres = np.random.default_rng(1).uniform(-10, 10, (200, 1))
    Phi_c = _rbf_design(X, centres, 1 / 9)
    out["sequential sinc 200 centres"] = lambda y=y: ev.fit_sequential(Phi_c, y, beta_init=100.0)
    X, y = _sinc(300)
    Phi_m = _rbf_design(X, X, 1 / 9)
    out["mackay sinc N=300"] = lambda y=y: ev.fit_mackay(
        Phi_m, y, beta_init=100.0, max_iter=100_000
    )
    for n in (1000,) if quick else (1000, 2000):
        X, t = _ripley_like(n)
        Phi_r = _rbf_design(X, X, 2.0)
        Phi_r /= np.linalg.norm(Phi_r, axis=0)
        t = t.astype(float)
        out[f"laplace_sequential ripley N={n}"] = lambda P=Phi_r, t=t: ev.fit_laplace_sequential(
            P, t
        )
    X, t = _ripley_like(200)
    Phi_s = _rbf_design(X, X, 2.0)
    Phi_s /= np.linalg.norm(Phi_s, axis=0)
    t_s = t.astype(float)
    out["laplace_mackay ripley N=200"] = lambda: ev.fit_laplace_mackay(Phi_s, t_s)
    X, t = _ripley_like(1000)
    out["RVC ripley N=1000"] = lambda X=X, t=t: RVC(gamma=2.0).fit(X, t)
    if not quick:
        from sklearn.datasets import load_digits

        Xd, yd = load_digits(return_X_y=True)
        Xd = (Xd[:600] - Xd[:600].mean(0)) / (Xd[:600].std(0) + 1e-9)
        out["RVC digits multinomial"] = lambda: RVC(gamma=0.05).fit(Xd, yd[:600])
    return out


def worker(quick: bool, only: str) -> None:
    timings = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, run in problems(quick).items():
            if only not in name:
                continue
            t0 = time.perf_counter()
            fit = run()
            timings[name] = (
                time.perf_counter() - t0,
                float(fit.log_evidence_ if hasattr(fit, "log_evidence_") else fit.log_evidence),
            )
    print(json.dumps(timings))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", nargs="?")
    ap.add_argument("new", nargs="?")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="", help="run only the problems whose name contains this")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.quick, args.only)
        return 0
    runs = {"old": [], "new": []}
    for rep in range(args.repeats):
        order = ("old", "new") if rep % 2 == 0 else ("new", "old")
        for label in order:
            root = os.path.abspath(getattr(args, label))
            env = {**os.environ, "PYTHONPATH": root}
            cmd = [sys.executable, os.path.abspath(__file__), "--worker"]
            cmd += (["--quick"] if args.quick else []) + ["--only", args.only]
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            runs[label].append(json.loads(res.stdout.strip().splitlines()[-1]))
            print(f"repeat {rep + 1} {label} done", file=sys.stderr, flush=True)
    print(f"{'problem':<34}{'old s':>9}{'new s':>9}{'new/old':>9}{'same log ev':>13}")
    for name in runs["old"][0]:
        t_old = float(np.median([r[name][0] for r in runs["old"]]))
        t_new = float(np.median([r[name][0] for r in runs["new"]]))
        same = abs(runs["old"][0][name][1] - runs["new"][0][name][1]) <= 1e-9 * (
            1 + abs(runs["old"][0][name][1])
        )
        print(f"{name:<34}{t_old:9.3f}{t_new:9.3f}{t_new / t_old:9.3f}{same!s:>13}")
    print(f"medians of {args.repeats} interleaved runs per checkout")
    return 0


if __name__ == "__main__":
    sys.exit(main())
