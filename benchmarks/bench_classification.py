"""Classification benchmark: bayes_rvm's RVC against fastrvm's RVC and scikit-learn's SVC.

Prints one table per problem (test error, number of relevance / support vectors, fit time), all
measured in one run on the same machine:

* Ripley's synthetic data (Tipping 2001: 9.3% error, 4 relevance vectors, 100 training points) and
  Pima (19.6%), when ``../shared/data`` is present;
* Ripley-like data at N = 1000, 2000, 4000: the same two-Gaussians-per-class mixture as Ripley's
  generator (means (-0.7, 0.3), (0.3, 0.3) for class 0 and (-0.3, 0.7), (0.4, 0.7) for class 1,
  variance 0.03), tested on Ripley's 1000-point test set when present, else on fresh draws;
* multiclass handwritten digits (scikit-learn's 8x8 digits): multinomial RVC, one-vs-rest RVC,
  fastrvm (one-vs-rest) and SVC;
* a rare class: 2-D standard Gaussians, 1% positives shifted by +3 in each
  coordinate, 1000 training / 5000 test points, three seeds: test log loss of RVC (default rbf,
  importance-sampled predictive; the same fit with the probit; the linear kernel), scikit-learn's
  LogisticRegression and fastrvm.

Run ``python benchmarks/bench_classification.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from bayes_rvm.datasets import load_pima, load_ripley
from bayes_rvm.estimators.classifier import RVC

try:
    import fastrvm
except ImportError:  # pragma: no cover - optional benchmark dependency
    fastrvm = None


def ripley_like(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``n`` points from Ripley's generating mixture."""
    rng = np.random.default_rng(seed)
    means = {0: np.array([[-0.7, 0.3], [0.3, 0.3]]), 1: np.array([[-0.3, 0.7], [0.4, 0.7]])}
    y = rng.integers(0, 2, n)
    comp = rng.integers(0, 2, n)
    mu = np.where(y[:, None] == 0, means[0][comp], means[1][comp])
    return mu + np.sqrt(0.03) * rng.standard_normal((n, 2)), y


def _timed(make, X, y, Xte, yte, n_vectors):
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = make().fit(X, y)
    dt = time.perf_counter() - t
    return 1.0 - model.score(Xte, yte), n_vectors(model), dt, model


def _models(gamma: float, multiclass: bool):
    out = [("bayes_rvm RVC", lambda: RVC(gamma=gamma), lambda m: m.n_relevance_vectors_)]
    if multiclass:
        out.append(
            (
                "bayes_rvm RVC ovr",
                lambda: RVC(gamma=gamma, multi_class="ovr"),
                lambda m: m.n_relevance_vectors_,
            )
        )
    if fastrvm is not None:
        out.append(
            (
                "fastrvm RVC",
                lambda: fastrvm.RVC(gamma=gamma, fit_intercept=True),
                lambda m: (
                    int(np.unique(m.relevance_).size) if multiclass else int(np.sum(m.n_relevance_))
                ),
            )
        )
    out.append(("sklearn SVC", lambda: SVC(gamma=gamma), lambda m: int(m.n_support_.sum())))
    return out


def _table(title, rows):
    print(f"\n{title}")
    print(f"  {'model':<20} {'error %':>8} {'vectors':>8} {'fit s':>8}")
    for name, err, nv, dt in rows:
        print(f"  {name:<20} {100 * err:8.2f} {nv:8d} {dt:8.3f}")


def bench(problem, X, y, Xte, yte, gamma, multiclass=False):
    rows = []
    for name, make, nv in _models(gamma, multiclass):
        err, n, dt, _ = _timed(make, X, y, Xte, yte, nv)
        rows.append((name, err, n, dt))
    _table(problem, rows)
    return rows


def rare_class(seed: int, n_train: int = 1000, n_test: int = 5000, rate: float = 0.01):
    """Positives (``rate``) shifted by +3 in each coordinate of 2-D standard Gaussians."""
    rng = np.random.default_rng(seed)

    def draw(m):
        y = (rng.random(m) < rate).astype(int)
        return rng.normal(size=(m, 2)) + 3.0 * y[:, None], y

    return (*draw(n_train), *draw(n_test))


def bench_rare_class(seeds=(0, 1, 2)) -> None:
    """Test log loss on the rare-class problem (lower is better; ratio to logistic regression)."""
    print("\nRare class: 1% positives, 2-D Gaussians shifted by +3, 1000 train / 5000 test")
    print("  test log loss (ratio to LogisticRegression)")
    names = ["LogReg", "RVC", "RVC probit", "RVC linear", "linear, free bias", "fastrvm"]
    print("  " + f"{'seed':>4} " + " ".join(f"{n:>17}" for n in names))
    for seed in seeds:
        X, y, Xt, yt = rare_class(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p = {"LogReg": LogisticRegression().fit(X, y).predict_proba(Xt)[:, 1]}
            rvc = RVC().fit(X, y)
            p["RVC"] = rvc.predict_proba(Xt)[:, 1]
            p["RVC probit"] = rvc.set_params(moderated="probit").predict_proba(Xt)[:, 1]
            p["RVC linear"] = RVC(kernel="linear").fit(X, y).predict_proba(Xt)[:, 1]
            free = RVC(kernel="linear", bias="free").fit(X, y)
            p["linear, free bias"] = free.predict_proba(Xt)[:, 1]
            if fastrvm is not None:
                p["fastrvm"] = fastrvm.RVC().fit(X, y).predict_proba(Xt)[:, 1]
        loss = {k: log_loss(yt, v) for k, v in p.items()}
        cells = [
            f"{loss[n]:.5f} ({loss[n] / loss['LogReg']:.2f})" if n in loss else "-" for n in names
        ]
        print("  " + f"{seed:>4} " + " ".join(f"{c:>17}" for c in cells))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    args = parser.parse_args(argv)

    try:
        Xr, yr, Xrte, yrte = load_ripley()
    except FileNotFoundError:
        Xr = None
    if Xr is not None:
        idx = np.random.default_rng(0).permutation(len(yr))[:100]
        bench(
            "Ripley, 100 training points (Tipping 2001: 9.3%, 4 RVs)",
            Xr[idx],
            yr[idx],
            Xrte,
            yrte,
            4.0,
        )
        if not args.quick:
            bench("Ripley, all 250 training points", Xr, yr, Xrte, yrte, 4.0)
            Xp, yp, Xpte, ypte = load_pima()
            sc = StandardScaler().fit(Xp)
            bench(
                "Pima, 200/332 (Tipping 2001: 19.6%, 4 RVs); gamma from 5-fold CV",
                sc.transform(Xp),
                yp,
                sc.transform(Xpte),
                ypte,
                0.03,
            )

    sizes = (1000,) if args.quick else (1000, 2000, 4000)
    for n in sizes:
        X, y = ripley_like(n, seed=n)
        Xte, yte = (Xrte, yrte) if Xr is not None else ripley_like(2000, seed=1)
        rows = bench(f"Ripley-like mixture, N = {n}, rbf gamma = 4", X, y, Xte, yte, 4.0)
        ours = next(r for r in rows if r[0] == "bayes_rvm RVC")
        fast = next((r for r in rows if r[0] == "fastrvm RVC"), None)
        if fast is not None:
            print(f"  fit time bayes_rvm / fastrvm = {ours[3] / fast[3]:.2f}x")

    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    n_train = 200 if args.quick else 500
    Xtr, Xte, ytr, yte = train_test_split(X, y, train_size=n_train, random_state=0, stratify=y)
    rows = []
    for name, make, nv in _models(0.05, True):
        err, n, dt, model = _timed(make, Xtr, ytr, Xte, yte, nv)
        rows.append((name, err, n, dt))
        if hasattr(model, "predict_proba") and name.startswith("bayes_rvm"):
            dev = np.abs(model.predict_proba(Xte).sum(axis=1) - 1).max()
            print(f"  [{name}] max |sum of probabilities - 1| = {dev:.1e}")
    _table(f"Digits (10 classes), {n_train} training / {len(yte)} test, rbf gamma = 0.05", rows)
    bench_rare_class((0,) if args.quick else (0, 1, 2))


if __name__ == "__main__":
    main()
