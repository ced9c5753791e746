"""Kernel width selection: the default, the evidence, cross-validation, the best fixed width, SVMs.

For each problem, one run on one machine, prints the test error, the number of relevance (or
support) vectors and the time of each way to choose the width of the rbf kernel:

* ``default``: ``RVR()`` / ``RVC()`` (``gamma="scale"``, scikit-learn's SVR convention);
* ``evidence``: ``gamma="evidence"`` (type-II over the width; RVC through the Laplace evidence);
* ``CV``: ``RVRCV`` / ``RVCCV`` over the default 7-width grid, 5 shuffled folds;
* ``GridSearchCV RV*``: scikit-learn's ``GridSearchCV`` over the same grid and folds (the baseline
  the CV option must beat on time);
* ``best fixed``: the width of that grid (and the paper's width) with the lowest *test* error,
  an oracle that no selection rule can beat on average;
* ``SVR`` / ``SVC`` tuned by ``GridSearchCV`` over the same widths and ``C`` in {0.1, 1, 10, 100}.

Problems: sinc (Tipping 2001: 100 points on [-10, 10], noise sd 0.1, error on 1000 noise-free
points), Friedman #2 and #3 (N = 240, noise sd a third of the signal's, inputs standardised, error
on 1000 noise-free points), Ripley (100 training points, as Tipping; 1000 test points), Pima
(200 / 332, standardised) and the first ``--splits`` Banana splits (400 / 4900). Regression error
is the RMSE; classification error the misclassification rate. The evidence's time is also given
as a multiple of one fit at the chosen width. Reads the data from ``../shared/data`` relative to
the project root.

Run ``python benchmarks/bench_width.py`` (``--quick``: sinc and Ripley only).
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.model_selection import GridSearchCV, KFold, StratifiedKFold
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC, SVR

from bayes_rvm.classifier import RVC
from bayes_rvm.cv import RVCCV, RVRCV
from bayes_rvm.datasets import load_pima, load_ripley, make_friedman, make_sinc, sinc
from bayes_rvm.estimators import RVR
from bayes_rvm.evidence.width import default_width_grid

_ROOT = Path(__file__).resolve().parents[1]
# ../shared/data beside the project (a git worktree sits one level deeper).
DATA = next(
    (
        p
        for p in (_ROOT.parent / "shared" / "data", _ROOT.parents[1] / "shared" / "data")
        if p.is_dir()
    ),
    _ROOT.parent / "shared" / "data",
)
C_GRID = [0.1, 1.0, 10.0, 100.0]


def _fit(make, X, y):
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = make().fit(X, y)
    return model, time.perf_counter() - t


def _n_vectors(model) -> int:
    est = getattr(model, "best_estimator_", model)
    if hasattr(est, "support_"):
        return int(est.support_.size)
    return int(est.n_relevance_vectors_)


def bench(name, X, y, Xte, yte, *, classify: bool, paper_width: float | None):
    """One problem: rows (method, error, vectors, seconds, note)."""
    if classify:
        err = lambda m: float(np.mean(m.predict(Xte) != yte))  # noqa: E731
        Est, EstCV, SV, folds = RVC, RVCCV, SVC, StratifiedKFold(5, shuffle=True, random_state=0)
        scoring = "accuracy"
    else:
        err = lambda m: float(np.sqrt(np.mean((m.predict(Xte) - yte) ** 2)))  # noqa: E731
        Est, EstCV, SV, folds = RVR, RVRCV, SVR, KFold(5, shuffle=True, random_state=0)
        scoring = "neg_mean_squared_error"
    grid = default_width_grid(X)
    rows = []

    m, dt = _fit(Est, X, y)
    rows.append(("default (gamma='scale')", err(m), _n_vectors(m), dt, f"r={m.length_scale_:.3g}"))

    m, dt = _fit(lambda: Est(gamma="evidence"), X, y)
    one = _fit(lambda: Est(gamma=m.gamma_), X, y)[1]
    rows.append(
        (
            "gamma='evidence'",
            err(m),
            _n_vectors(m),
            dt,
            f"r={m.length_scale_:.3g}, {dt / one:.1f}x one fit",
        )
    )

    m, dt = _fit(lambda: EstCV(random_state=0), X, y)
    rows.append(
        (f"{EstCV.__name__} (7 widths)", err(m), _n_vectors(m), dt, f"r={m.length_scale_:.3g}")
    )
    t_cv = dt
    gammas = [float(1 / r**2) for r in grid]
    m, dt = _fit(lambda: GridSearchCV(Est(), {"gamma": gammas}, cv=folds, scoring=scoring), X, y)
    r = 1 / np.sqrt(m.best_params_["gamma"])
    rows.append(
        (
            f"GridSearchCV {Est.__name__}",
            err(m),
            _n_vectors(m),
            dt,
            f"r={r:.3g}, CV {dt / t_cv:.1f}x faster",
        )
    )

    widths = list(grid) + ([paper_width] if paper_width else [])
    fixed = []
    for w in widths:
        fm, fdt = _fit(lambda w=w: Est(gamma=1 / w**2), X, y)
        fixed.append((err(fm), _n_vectors(fm), fdt, w))
    e, nv, fdt, w = min(fixed)
    rows.append(("best fixed width (test oracle)", e, nv, sum(f[2] for f in fixed), f"r={w:.3g}"))

    m, dt = _fit(
        lambda: GridSearchCV(SV(), {"gamma": gammas, "C": C_GRID}, cv=folds, scoring=scoring),
        X,
        y,
    )
    bp = m.best_params_
    rows.append(
        (
            f"{SV.__name__} GridSearchCV",
            err(m),
            _n_vectors(m),
            dt,
            f"r={1 / np.sqrt(bp['gamma']):.3g}, C={bp['C']:g}",
        )
    )
    print(f"\n{name}")
    print(f"  {'method':32s} {'error':>8s} {'vectors':>8s} {'time (s)':>9s}  note")
    for meth, e, nv, dt, note in rows:
        print(f"  {meth:32s} {e:8.4f} {nv:8d} {dt:9.2f}  {note}")
    return rows


def friedman(number: int, seed: int):
    X, f = make_friedman(number, 240, noise=0.0, random_state=seed)
    rng = np.random.default_rng(seed)
    y = f + rng.normal(scale=np.std(f) / 3.0, size=f.size)
    Xt, yt = make_friedman(number, 1000, noise=0.0, random_state=100 + seed)
    sc = StandardScaler().fit(X)
    return sc.transform(X), y, sc.transform(Xt), yt


def banana(split: int):
    folder = DATA / "ratsch_benchmarks" / "banana"

    def read(kind, what):
        return np.loadtxt(folder / f"banana_{kind}_{what}_{split}.asc.gz")

    return (
        read("train", "data"),
        read("train", "labels").astype(int),
        read("test", "data"),
        read("test", "labels").astype(int),
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sinc and Ripley only")
    parser.add_argument("--splits", type=int, default=3, help="Banana splits (default 3)")
    parser.add_argument(
        "--classification-only", action="store_true", help="skip the regression problems"
    )
    args = parser.parse_args(argv)
    print("Times measured on a shared, contended 2-core machine: compare ratios within a run.")

    if not args.classification_only:
        regression(args.quick)
    classification(args.quick, args.splits)


def regression(quick: bool) -> None:
    X, y = make_sinc(100, noise=0.1, random_state=0)
    Xt = np.linspace(-10, 10, 1000)[:, None]
    bench(
        "sinc (Tipping: N=100, noise sd 0.1, width 3)",
        X,
        y,
        Xt,
        sinc(Xt[:, 0]),
        classify=False,
        paper_width=3.0,
    )
    if not quick:
        for k in (2, 3):
            bench(
                f"Friedman #{k} (N=240, standardised)",
                *friedman(k, k),
                classify=False,
                paper_width=None,
            )


def classification(quick: bool, splits: int) -> None:
    Xr, yr, Xrte, yrte = load_ripley(DATA / "ripley")
    idx = np.random.default_rng(0).permutation(len(yr))[:100]
    bench(
        "Ripley (100 training points; Tipping: 9.3%, 4 RVs, width 0.5)",
        Xr[idx],
        yr[idx],
        Xrte,
        yrte,
        classify=True,
        paper_width=0.5,
    )
    if quick:
        return
    Xp, yp, Xpte, ypte = load_pima(DATA / "pima")
    sc = StandardScaler().fit(Xp)
    bench(
        "Pima (200/332, standardised; Tipping: 19.6%, 4 RVs)",
        sc.transform(Xp),
        yp,
        sc.transform(Xpte),
        ypte,
        classify=True,
        paper_width=None,
    )
    for s in range(1, splits + 1):
        bench(
            f"Banana split {s} (400/4900; Tipping: 10.8% over splits, 11.4 RVs)",
            *banana(s),
            classify=True,
            paper_width=0.5,
        )


if __name__ == "__main__":
    main()
