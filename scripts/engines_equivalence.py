"""Do two versions of the type-II engines give the same fits? (a refactoring must not change them)

Runs the same battery of problems -- regression (sinc, Friedman; one or two outputs; ARD and
Student-t hyperpriors; free bias) and classification (Bernoulli, softmax, Poisson) -- through the
MacKay and sequential engines of two checkouts of the package, each in its own subprocess, and
compares the relevance sets, the log evidence, the iteration counts and the traces.

    python scripts/engines_equivalence.py /path/to/old/checkout /path/to/new/checkout

prints one line per engine and a summary; exits 1 if any relevance set differs or any log
evidence differs by more than 1e-9 (relative to ``1 + |log evidence|``). The estimators above the
engines (``RVR``, ``RVC``, the CV estimators, saving, MCMC) are compared by its sibling,
``scripts/estimators_equivalence.py``.
"""

from __future__ import annotations

import argparse
import pickle
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

TOL = 1e-9


def _rbf(X, gamma):
    sq = np.sum(X * X, axis=1)
    return np.exp(-gamma * np.maximum(sq[:, None] + sq[None, :] - 2.0 * X @ X.T, 0.0))


def _design(X, gamma, bias=True):
    Phi = _rbf(X, gamma)
    if bias:
        Phi = np.hstack([Phi, np.ones((X.shape[0], 1))])
    return Phi / np.linalg.norm(Phi, axis=0)


def regression_problems():
    """(name, engine, Phi, T, settings): 64 regression problems, both Gaussian engines."""
    out = []
    for seed in range(8):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(30, 70))
        X = np.sort(rng.uniform(-10, 10, n))[:, None]
        y = np.sinc(X[:, 0] / np.pi) + 0.1 * rng.standard_normal(n)
        Y2 = np.c_[y, np.cos(X[:, 0] / 3.0) + 0.1 * rng.standard_normal(n)]
        gamma = float(rng.choice([1 / 4, 1 / 9, 1 / 36]))
        Phi = _design(X, gamma)
        cases = [
            ("sinc", y, {}),
            ("sinc-2out", Y2, {}),
            ("sinc-student", y, {"alpha_prior": (0.5, 0.5)}),
        ]
        for name, T, kw in cases:
            for engine in ("mackay", "sequential"):
                out.append((f"{name}/{seed}", engine, Phi, T, kw))
        out.append((f"sinc-free/{seed}", "sequential", Phi, y, {"free": [n]}))
        out.append((f"sinc-update/{seed}", "sequential", Phi, y, {"beta_warmup": "update"}))
    from sklearn.datasets import make_friedman1

    for seed in range(4):
        X, y = make_friedman1(n_samples=40 + 10 * seed, noise=1.0, random_state=seed)
        X = (X - X.mean(0)) / X.std(0)
        Phi = _design(X, 1.0 / X.shape[1])
        y = (y - y.mean()) / y.std()
        for engine in ("mackay", "sequential"):
            out.append((f"friedman1/{seed}", engine, Phi, y, {}))
    return out


def classification_problems():
    """(name, engine, Phi, T, settings): 50 Laplace problems, both engines."""
    out = []
    for seed in range(12):
        rng = np.random.default_rng(100 + seed)
        n = int(rng.integers(40, 70))
        X = rng.standard_normal((n, 2))
        t = (X[:, 0] + 0.7 * np.sin(2 * X[:, 1]) + 0.5 * rng.standard_normal(n) > 0).astype(float)
        Phi = _design(X, 0.5)
        for engine in ("laplace_mackay", "laplace_sequential"):
            out.append((f"bernoulli/{seed}", engine, Phi, t, {}))
        if seed % 3 == 0:
            out.append(
                (
                    f"bernoulli-student/{seed}",
                    "laplace_mackay",
                    Phi,
                    t,
                    {"alpha_prior": (0.5, 0.5), "threshold_alpha": 1e6},
                )
            )
    for seed in range(6):
        rng = np.random.default_rng(200 + seed)
        n = 60
        centres = np.array([[0.0, 2.0], [-1.7, -1.0], [1.7, -1.0]])
        k = rng.integers(0, 3, n)
        X = centres[k] + 0.9 * rng.standard_normal((n, 2))
        T = np.eye(3)[k]
        Phi = _design(X, 0.5)
        for engine in ("laplace_mackay", "laplace_sequential"):
            out.append((f"softmax/{seed}", engine, Phi, T, {"likelihood": "softmax"}))
    for seed in range(6):
        rng = np.random.default_rng(300 + seed)
        n = 50
        X = np.sort(rng.uniform(-3, 3, n))[:, None]
        counts = rng.poisson(np.exp(1.0 + np.sin(X[:, 0]))).astype(float)
        Phi = _design(X, 0.5)
        for engine in ("laplace_mackay", "laplace_sequential"):
            out.append((f"poisson/{seed}", engine, Phi, counts, {"likelihood": "poisson"}))
    return out


def run_all(dump: str) -> None:
    """Fit every problem with the package on sys.path; pickle the essentials."""
    import bayes_rvm.evidence as ev

    engines = {
        "mackay": ev.fit_mackay,
        "sequential": ev.fit_sequential,
        "laplace_mackay": ev.fit_laplace_mackay,
        "laplace_sequential": ev.fit_laplace_sequential,
    }
    results = []
    for name, engine, Phi, T, kw in regression_problems() + classification_problems():
        if "mackay" in engine:
            kw = {"max_iter": 3000, **kw}  # bounded: a creeping MacKay run is still compared
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = engines[engine](Phi, T, **kw)
        results.append(
            {
                "name": name,
                "engine": engine,
                "active": np.asarray(fit.active),
                "log_evidence": float(fit.log_evidence),
                "n_iter": int(fit.n_iter),
                "trace": np.asarray(fit.trace),
                "alpha": np.asarray(fit.alpha),
            }
        )
    with open(dump, "wb") as fh:
        pickle.dump(results, fh)


def compare(old_root: str, new_root: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for label, root in (("old", old_root), ("new", new_root)):
            path = str(Path(tmp) / f"{label}.pkl")
            env = {"PYTHONPATH": str(Path(root).resolve()), "PATH": "/usr/bin:/bin"}
            cmd = [sys.executable, __file__, "--dump", path]
            procs.append((path, subprocess.Popen(cmd, env=env, cwd=tmp)))
        dumps = []
        for path, proc in procs:
            if proc.wait() != 0:
                raise RuntimeError(f"the run for {path} failed")
            with open(path, "rb") as fh:
                dumps.append(pickle.load(fh))
    old, new = dumps
    rows: dict[str, list] = {}
    bad = 0
    for a, b in zip(old, new, strict=True):
        same_set = np.array_equal(a["active"], b["active"])
        rel = abs(a["log_evidence"] - b["log_evidence"]) / (1.0 + abs(a["log_evidence"]))
        same_trace = a["trace"].shape == b["trace"].shape and np.allclose(
            a["trace"], b["trace"], rtol=0, atol=TOL * (1 + np.abs(a["trace"]).max())
        )
        ok = same_set and rel <= TOL
        bad += not ok
        rows.setdefault(a["engine"], []).append(
            (ok, rel, a["n_iter"] == b["n_iter"], same_trace, same_set)
        )
        if not ok:
            print(f"DIFFERENT {a['engine']} {a['name']}: sets equal {same_set}, rel {rel:.2e}")
    print(
        f"{'engine':<20}{'problems':>9}{'same set':>9}{'max rel dlogev':>16}"
        f"{'same n_iter':>12}{'same trace':>11}"
    )
    for engine, r in rows.items():
        print(
            f"{engine:<20}{len(r):>9}{sum(x[4] for x in r):>9}{max(x[1] for x in r):>16.2e}"
            f"{sum(x[2] for x in r):>12}{sum(x[3] for x in r):>11}"
        )
    total = sum(len(r) for r in rows.values())
    print(f"{total} fits, {total - bad} identical (relevance set and log evidence to {TOL:g})")
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", nargs="?")
    parser.add_argument("new", nargs="?")
    parser.add_argument("--dump", help="(internal) fit everything and pickle to this path")
    args = parser.parse_args()
    if args.dump:
        run_all(args.dump)
        return 0
    return compare(args.old, args.new)


if __name__ == "__main__":
    sys.exit(main())
