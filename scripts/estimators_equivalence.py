"""Do two checkouts give the same estimators? (a change of architecture must not change them)

The estimator-level successor of ``scripts/engines_equivalence.py`` (which compares the type-II
engines alone): a battery of small fits through the public estimators, covering every capability
a user reaches, run by each checkout in its own subprocess (``PYTHONPATH`` set to that checkout,
one BLAS thread, old first, then new, so that the timings do not share a core):

- ``RVR``: the sequential and MacKay solvers; fixed ``gamma``, ``"scale"``, ``"evidence"`` and the
  default width rule; two outputs; ``prior="student_t"`` (with ``nu`` and ``threshold_alpha``);
  a fixed ``noise_variance``; a polynomial kernel of given ``degree`` and ``coef0``;
  ``kernel="precomputed"``; ``predict`` with ``return_std`` / ``return_cov``, ``sample_y``, the
  RVM* predictive (``predictive="rvm*"``); ``refit_loo``, ``compare``; ``idata_`` (posterior
  means, ``log_likelihood``); ``relevance_summary``;
- ``RVC``: binary (probit and importance moderation, RVM*), 3-class softmax and one-vs-rest;
  ``predict_proba``, ``decision_function``, ``predict``, ``idata_``;
- ``RVRCV``, ``RVCCV``; a save / load round trip of each estimator (predicting after the load),
  and the files saved by the old checkout loaded by both;
- MCMC (nutpie, 2 chains x 100 draws, fixed seed) of an ``RVR`` and an ``RVC``: the posterior
  draws themselves.

Usage::

    python scripts/estimators_equivalence.py /path/to/old/checkout /path/to/new/checkout
    python scripts/estimators_equivalence.py OLD NEW --only rvc   # items whose name has "rvc"
    python scripts/estimators_equivalence.py OLD NEW --rounds 2   # both orders, fastest times
    python scripts/estimators_equivalence.py --list               # the battery's items

prints one row per item -- the largest relative difference over everything the item records
(``|a - b| / (1 + |a|)``, elementwise), the wall time in each checkout and their ratio -- and
exits 1 if any difference exceeds 1e-10 (1e-8 for MCMC items), if an item records different
fields or shapes, or if an item fails in one checkout only (an item failing in both is reported,
and is not a difference). Compare a checkout with itself first: every difference must be 0 (that
also shows nutpie is deterministic for a fixed seed; each MCMC fit is also repeated in-process,
and ``--rounds 2`` makes each checkout reproduce its own records across processes). The times are
wall times of one process; on a shared machine they move by 2-3x between runs, and the checkout
run second benefits from warm caches, so read ratios from ``--rounds 2`` or more (old first, then
new first; the fastest round is shown). The first MCMC fit of a process includes
compiling its model (from PyTensor's on-disk cache when the graph was compiled before, by either
checkout); the "again" rows are the cached fit. The battery takes about a minute of CPU per
checkout (32 items, small N).

The items are written in the grouped parameters (``kernel_params``, ``prior_params``,
``likelihood_params``, ``sampler_config``, ``centres=(method, n)``); a checkout whose estimators
take the flat ones of before (``degree``, ``nu``, ``noise_variance``, ``draws``, ``n_centres``,
...) gets them translated (:func:`_flat`), so that one battery compares the two APIs.
"""

from __future__ import annotations

import argparse
import inspect
import math
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

TOL = 1e-10
TOL_MCMC = 1e-8
MCMC = {"chains": 2, "draws": 100, "tune": 100}  # seeded by the estimators' random_state=0
GROUPS = ("kernel_params", "prior_params", "likelihood_params", "sampler_config")

# -- the data (the same arrays in both checkouts: built here, not by the package) ---------------


def _data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    n = 50
    X = np.sort(rng.uniform(-10, 10, n))[:, None]
    y = np.sinc(X[:, 0] / np.pi) + 0.1 * rng.standard_normal(n)
    Y2 = np.c_[y, np.cos(X[:, 0] / 3.0) + 0.1 * rng.standard_normal(n)]
    Xt = np.linspace(-14, 14, 9)[:, None]  # beyond the training inputs too (RVM* differs there)
    Z = rng.standard_normal((60, 2))
    t = (Z[:, 0] + 0.7 * np.sin(2 * Z[:, 1]) + 0.5 * rng.standard_normal(60) > 0).astype(int)
    centres = np.array([[0.0, 2.0], [-1.7, -1.0], [1.7, -1.0]])
    k = rng.integers(0, 3, 60)
    Z3 = centres[k] + 0.9 * rng.standard_normal((60, 2))
    Zt = rng.standard_normal((8, 2)) * 1.5
    return {"X": X, "y": y, "Y2": Y2, "Xt": Xt, "Z": Z, "t": t, "Z3": Z3, "k": k, "Zt": Zt}


D = _data()

# -- what an item records -----------------------------------------------------------------------


def _record(out: dict, key: str, value) -> None:
    """Store ``value`` under ``key`` as float arrays (non-numeric values as tuples of str)."""
    import pandas as pd

    if value is None:
        out[key] = "None"
    elif isinstance(value, pd.DataFrame):
        out[f"{key}.index"] = tuple(map(str, value.index))
        for col in value.columns:
            _record(out, f"{key}[{col}]", value[col].to_numpy())
    elif isinstance(value, str):
        out[key] = value
    elif isinstance(value, tuple | list) and value and not np.isscalar(value[0]):
        for i, v in enumerate(value):
            _record(out, f"{key}[{i}]", v)
    else:
        arr = np.asarray(value)
        if arr.dtype.kind in "biuf":
            out[key] = arr.astype(float)
        else:
            out[key] = tuple(map(str, arr.ravel()))


def _tree(out: dict, key: str, dt, groups=("posterior", "log_likelihood"), means=True) -> None:
    """Record a DataTree's variables: posterior means (or all draws), log-likelihood values."""
    for group in groups:
        if group not in dt.children:
            out[f"{key}.{group}"] = "absent"
            continue
        ds = dt[group].dataset
        for var in sorted(ds.data_vars):
            values = ds[var].values
            if means and group == "posterior":
                values = values.mean(axis=(0, 1))
            _record(out, f"{key}.{group}.{var}", values)


FITTED = (
    "coef_",
    "intercept_",
    "active_",
    "relevance_",
    "alpha_",
    "sigma_",
    "noise_variance_",
    "log_evidence_",
    "scores_",
    "n_iter_",
    "converged_",
    "gamma_",
    "length_scale_",
    "classes_",
)


def _fitted(out: dict, model) -> None:
    for name in FITTED:
        if hasattr(model, name):
            _record(out, name, getattr(model, name))
    path = getattr(model, "width_path_", None)
    if path is not None:
        for field in ("log_evidence", "n_relevant", "noise_variance"):
            if hasattr(path, field):
                _record(out, f"width_path_.{field}", getattr(path, field))


def _regression(out: dict, model, *, cov: bool = True) -> None:
    Xt = D["Xt"]
    _fitted(out, model)
    _record(out, "predict", model.predict(Xt))
    _record(out, "predict(std)", model.predict(Xt, return_std=True))
    if cov:
        _record(out, "predict(cov)", model.predict(Xt, return_cov=True))
    _record(out, "sample_y", model.sample_y(Xt, n_samples=3, random_state=0))


def _classification(out: dict, model, Zt) -> None:
    _fitted(out, model)
    _record(out, "predict", model.predict(Zt))
    _record(out, "predict_proba", model.predict_proba(Zt))
    _record(out, "decision_function", model.decision_function(Zt))


# -- the battery ---------------------------------------------------------------------------------


def _flat(cls, kw: dict) -> dict:
    """``kw`` in the grouped parameters, or as the flat ones where ``cls`` takes those (the
    checkout of before): the groups' keys become keyword arguments (a callable kernel's own keys
    stay in ``kernel_params``) and ``centres=(method, n)`` becomes ``centres``, ``n_centres``."""
    if "sampler_config" in inspect.signature(cls).parameters:
        return kw
    out = {k: v for k, v in kw.items() if k not in GROUPS}
    for group in GROUPS:
        values = dict(kw.get(group) or {})
        if group == "kernel_params":
            out |= {k: values.pop(k) for k in ("degree", "coef0") if k in values}
            if values:
                out["kernel_params"] = values
        else:
            out |= values
    centres = kw.get("centres")
    if isinstance(centres, tuple | list) and centres and isinstance(centres[0], str):
        out["centres"], out["n_centres"] = centres
    return out


def _rvr(**kw):
    from bayes_rvm import RVR

    return RVR(random_state=0, **_flat(RVR, kw)).fit(D["X"], D["y"])


def _rvc(Z, t, **kw):
    from bayes_rvm import RVC

    return RVC(random_state=0, **_flat(RVC, kw)).fit(Z, t)


def rvr_item(**kw) -> Callable[[dict], None]:
    def item(out):
        _regression(out, _rvr(**kw))

    return item


def rvr_two_outputs(out):
    from bayes_rvm import RVR

    _regression(out, RVR(gamma=0.25, random_state=0).fit(D["X"], D["Y2"]))


def rvr_precomputed(out):
    from bayes_rvm import RVR

    X, Xt = D["X"], D["Xt"]
    K = np.exp(-0.25 * (X - X.T) ** 2)
    Kt = np.exp(-0.25 * (Xt - X.T) ** 2)
    model = RVR(kernel="precomputed", random_state=0).fit(K, D["y"])
    _fitted(out, model)
    _record(out, "predict(std)", model.predict(Kt, return_std=True))
    _record(out, "predict(cov)", model.predict(Kt, return_cov=True))
    _record(out, "sample_y", model.sample_y(Kt, n_samples=3, random_state=0))


def rvr_star(out):
    _regression(out, _rvr(gamma=0.25, predictive="rvm*"), cov=False)


def rvr_loo_compare(out):
    from bayes_rvm import compare

    a = _rvr(gamma=0.25)
    b = _rvr(gamma=0.25, solver="mackay")
    _record(out, "refit_loo(5 folds).elpd_i", a.refit_loo(n_folds=5, random_state=0).elpd_i)
    # an RVR's idata_ carries its exact leave-one-out refits (N of them): compare reads them
    _record(out, "compare", compare({"sequential": a, "mackay": b}))


def rvr_idata(out):
    try:  # the layout of either checkout
        from bayes_rvm.posterior.comparison import relevance_summary
    except ImportError:
        from bayes_rvm.comparison import relevance_summary

    model = _rvr(gamma=0.25)
    _tree(out, "idata_", model.idata_)
    with warnings.catch_warnings():  # deprecated, kept to compare with earlier checkouts
        warnings.simplefilter("ignore", FutureWarning)
        _record(out, "relevance_summary", relevance_summary(model.idata_))


def rvc_binary(**kw) -> Callable[[dict], None]:
    def item(out):
        model = _rvc(D["Z"], D["t"], **kw)
        _classification(out, model, D["Zt"])
        _tree(out, "idata_", model.idata_)

    return item


def rvc_three(**kw) -> Callable[[dict], None]:
    def item(out):
        model = _rvc(D["Z3"], D["k"], **kw)
        _classification(out, model, D["Zt"])
        if kw.get("multi_class") != "ovr":  # one-vs-rest has no single DataTree (it says so)
            _tree(out, "idata_", model.idata_)

    return item


def rvc_compare(out):
    from bayes_rvm import compare

    a = _rvc(D["Z"], D["t"], gamma=0.5)
    b = _rvc(D["Z"], D["t"], gamma=0.5, solver="mackay")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PSIS at fixed hyperparameters: it says so
        _record(out, "compare", compare({"sequential": a, "mackay": b}))


def _record_search(out, model):
    """The search's widths and scores (split scores as one array in either layout of
    ``cv_results_``: ``split_test_scores``, or scikit-learn's ``split<k>_test_score``)."""
    results = model.cv_results_
    for key in ("length_scale", "mean_test_score", "std_test_score"):
        _record(out, f"cv_results_.{key}", results[key])
    splits = results.get("split_test_scores")
    if splits is None:
        n = sum(1 for k in results if re.fullmatch(r"split\d+_test_score", k))
        splits = np.column_stack([results[f"split{k}_test_score"] for k in range(n)])
    _record(out, "cv_results_.split_test_scores", splits)


def rvr_cv(out):
    from bayes_rvm import RVRCV

    model = RVRCV(cv=3, random_state=0).fit(D["X"], D["y"])
    _regression(out, model)
    _record_search(out, model)
    _record(out, "best_score_", model.best_score_)


def rvc_cv(out):
    from bayes_rvm import RVCCV

    model = RVCCV(widths=[0.5, 1.0, 2.0], cv=3, random_state=0).fit(D["Z"], D["t"])
    _classification(out, model, D["Zt"])
    _record_search(out, model)


SAVED = {  # file name -> (what to fit, how to predict)
    "rvr.nc": (lambda: _rvr(gamma=0.25), "regression"),
    "rvr-star.nc": (lambda: _rvr(gamma=0.25, predictive="rvm*"), "regression"),
    "rvc.nc": (lambda: _rvc(D["Z"], D["t"], gamma=0.5), "classification"),
    "rvc-ovr.nc": (lambda: _rvc(D["Z3"], D["k"], gamma=0.5, multi_class="ovr"), "classification"),
    "rvccv.nc": (
        lambda: (
            __import__("bayes_rvm")
            .RVCCV(widths=[0.5, 1.0], cv=3, random_state=0)
            .fit(D["Z"], D["t"])
        ),
        "classification",
    ),
    "rvrcv.nc": (
        lambda: __import__("bayes_rvm").RVRCV(cv=3, random_state=0).fit(D["X"], D["y"]),
        "regression",
    ),
}


def _predictions(out: dict, model, kind: str) -> None:
    if kind == "regression":
        _record(out, "predict(std)", model.predict(D["Xt"], return_std=True))
    else:
        Zt = D["Zt"]
        _record(out, "predict_proba", model.predict_proba(Zt))
        _record(out, "decision_function", model.decision_function(Zt))


def save_load(out, share: Path, label: str):
    """Fit, save into ``share/label``, load, predict (and check the load predicts as the fit)."""
    from bayes_rvm import load_model, save_model

    folder = share / label
    folder.mkdir(parents=True, exist_ok=True)
    for name, (fit, kind) in SAVED.items():
        model = fit()
        before: dict = {}
        _predictions(before, model, kind)
        save_model(model, folder / name)
        after: dict = {}
        _predictions(after, load_model(folder / name), kind)
        for key, value in after.items():
            _record(out, f"{name}:{key}", value)
            if not np.array_equal(value, before[key]):
                raise AssertionError(f"{name}: {key} after load differs from before the save")


def load_old_files(out, share: Path, label: str):
    """Load the files the *old* checkout saved (the new one must read them) and predict."""
    from bayes_rvm import load_model

    for name, (_, kind) in SAVED.items():
        got: dict = {}
        _predictions(got, load_model(share / "old" / name), kind)
        for key, value in got.items():
            _record(out, f"{name}:{key}", value)


_FIRST_DRAWS: dict[str, dict] = {}


def mcmc(kind: str, again: bool) -> Callable[[dict], None]:
    """An MCMC fit; ``again``: the same fit repeated in this process (its compiled model cached),
    which must give the first fit's draws exactly (nutpie is deterministic for a fixed seed)."""

    def item(out):
        if kind == "rvr":
            model = _rvr(gamma=0.25, inference="mcmc", sampler_config=MCMC)
            _record(out, "predict(std)", model.predict(D["Xt"], return_std=True))
        else:
            model = _rvc(D["Z"], D["t"], gamma=0.5, inference="mcmc", sampler_config=MCMC)
            _record(out, "predict_proba", model.predict_proba(D["Zt"]))
        _tree(out, "idata_", model.idata_, groups=("posterior",), means=False)
        if not again:
            _FIRST_DRAWS[kind] = out
        elif kind in _FIRST_DRAWS and difference(_FIRST_DRAWS[kind], out)[0] != 0:
            raise AssertionError("a repeated MCMC fit with the same seed gave other draws")

    return item


BATTERY: dict[str, Callable] = {
    "rvr sequential gamma=0.25": rvr_item(gamma=0.25, solver="sequential"),
    "rvr mackay gamma=0.25": rvr_item(gamma=0.25, solver="mackay"),
    "rvr gamma=scale": rvr_item(gamma="scale"),
    "rvr gamma=evidence": rvr_item(gamma="evidence"),
    "rvr default width": rvr_item(),
    "rvr mackay default width": rvr_item(solver="mackay"),
    "rvr two outputs": rvr_two_outputs,
    "rvr student_t": rvr_item(gamma=0.25, prior="student_t"),
    "rvr student_t nu threshold": rvr_item(
        gamma=0.25, prior="student_t", prior_params={"nu": 0.01, "threshold_alpha": 100.0}
    ),
    "rvr noise_variance=0.01": rvr_item(gamma=0.25, likelihood_params={"noise_variance": 0.01}),
    "rvr poly degree coef0": rvr_item(
        kernel="poly", gamma=0.1, kernel_params={"degree": 2, "coef0": 0.5}
    ),
    "rvr precomputed": rvr_precomputed,
    "rvr rvm*": rvr_star,
    "rvr kmeans centres": rvr_item(gamma=0.25, centres=("kmeans", 15)),
    "rvr laplacian random centres": rvr_item(
        gamma=0.5, kernel="laplacian", centres=("random", 20), bias=False
    ),
    "rvr refit_loo compare": rvr_loo_compare,
    "rvr idata relevance_summary": rvr_idata,
    "rvc binary gamma=0.5": rvc_binary(gamma=0.5),
    "rvc binary mackay probit": rvc_binary(gamma=0.5, solver="mackay", moderated="probit"),
    "rvc binary default width": rvc_binary(),
    "rvc binary rvm*": rvc_binary(gamma=0.5, predictive="rvm*"),
    "rvc softmax 3 classes": rvc_three(gamma=0.5),
    "rvc ovr 3 classes": rvc_three(gamma=0.5, multi_class="ovr"),
    "rvc compare": rvc_compare,
    "rvrcv": rvr_cv,
    "rvccv": rvc_cv,
    "save load": save_load,
    "load old files": load_old_files,
    "mcmc rvr": mcmc("rvr", again=False),
    "mcmc rvr again": mcmc("rvr", again=True),
    "mcmc rvc": mcmc("rvc", again=False),
    "mcmc rvc again": mcmc("rvc", again=True),
}
NEEDS_SHARE = {"save load", "load old files"}


def run_all(dump: str, share: str, label: str, only: str | None) -> None:
    """Run the battery with the package on sys.path; pickle what each item records."""
    import bayes_rvm

    # Import everything before the clock starts: each item's time is its own work.
    for name in ("RVR", "RVC", "RVRCV", "RVCCV", "compare", "save_model"):
        getattr(bayes_rvm, name)
    import pymc  # noqa: F401

    results = {"__file__": bayes_rvm.__file__}
    for name, item in BATTERY.items():
        if only and only not in name:
            continue
        out: dict = {}
        error = None
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if name in NEEDS_SHARE:
                    item(out, Path(share), label)
                else:
                    item(out)
        except Exception as exc:  # a failing capability is a result to report
            error = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            traceback.print_exc()
        seconds = time.perf_counter() - start
        results[name] = {"values": out, "error": error, "seconds": seconds}
        print(
            f"  [{label}] {name}: {seconds:.1f} s{'  FAILED: ' + error if error else ''}",
            file=sys.stderr,
            flush=True,
        )
    with open(dump, "wb") as fh:
        pickle.dump(results, fh)


# -- comparing two runs --------------------------------------------------------------------------


def difference(a: dict, b: dict) -> tuple[float, str]:
    """The largest relative difference between two items' records, and where it is."""
    if a.keys() != b.keys():
        return math.inf, f"fields differ: {sorted(a.keys() ^ b.keys())[:4]}"
    worst, where = 0.0, ""
    for key, x in a.items():
        y = b[key]
        if isinstance(x, np.ndarray) and isinstance(y, np.ndarray):
            if x.shape != y.shape:
                return math.inf, f"{key}: shapes {x.shape} and {y.shape}"
            if x.size == 0:
                continue
            same = (x == y) | (np.isnan(x) & np.isnan(y))  # equal infinities too
            with np.errstate(invalid="ignore"):
                rel = np.where(same, 0.0, np.abs(x - y) / (1.0 + np.abs(x)))
            d = float(np.nan_to_num(rel, nan=math.inf).max())
        else:
            d = 0.0 if (type(x) is type(y) and x == y) else math.inf
        if d > worst:
            worst, where = d, key
    return worst, where


def _run(root: str, label: str, tmp: str, share: str, only: str | None) -> dict:
    path = str(Path(tmp) / f"{label}.pkl")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        PYTHONPATH=str(Path(root).resolve()),
        OMP_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
    )
    cmd = [sys.executable, str(Path(__file__).resolve()), "--dump", path, "--share", share]
    cmd += ["--label", label] + (["--only", only] if only else [])
    if subprocess.run(cmd, env=env, cwd=tmp, check=False).returncode != 0:
        raise RuntimeError(f"the run of {root} failed")
    with open(path, "rb") as fh:
        return pickle.load(fh)


def _reproducible(runs: list[dict], label: str) -> int:
    """Items whose records changed between two runs of one checkout (each should be 0)."""
    bad = 0
    for later in runs[1:]:
        for name, item in runs[0].items():
            if name == "__file__" or item["error"] or later[name]["error"]:
                continue
            d, where = difference(item["values"], later[name]["values"])
            if d != 0:
                print(f"NOT REPRODUCIBLE in {label}: {name} ({d:.2e} at {where})")
                bad += 1
    return bad


def compare(old_root: str, new_root: str, only: str | None = None, rounds: int = 1) -> int:
    """Run both checkouts ``rounds`` times; print the table; return 1 on any difference."""
    olds, news = [], []
    with tempfile.TemporaryDirectory() as tmp:
        share = str(Path(tmp) / "saved")
        # Old first in even rounds, new first in odd ones: the first process of a round warms
        # disk and compile caches for the second. Round 0 runs old first so that its saved
        # files exist for "load old files".
        for r in range(rounds):
            runs = [(olds, old_root, "old"), (news, new_root, "new")]
            for store, root, label in runs[:: 1 if r % 2 == 0 else -1]:
                store.append(_run(root, label, tmp, share, only))
    unstable = _reproducible(olds, "old") + _reproducible(news, "new")
    old, new = olds[0], news[0]
    for name in old:  # the fastest of the rounds: the least disturbed by other processes
        if name != "__file__":
            old[name]["seconds"] = min(run[name]["seconds"] for run in olds)
            new[name]["seconds"] = min(run[name]["seconds"] for run in news)
    print(f"old: {old.pop('__file__')}\nnew: {new.pop('__file__')}")
    print(f"{'item':<30}{'max rel diff':>14}{'old s':>8}{'new s':>8}{'ratio':>7}  note")
    bad = 0
    for name in old:
        a, b = old[name], new[name]
        tol = TOL_MCMC if name.startswith("mcmc") else TOL
        if a["error"] or b["error"]:
            failed = bool(a["error"]) != bool(b["error"])
            d = math.nan
            note = f"{'FAILS IN ONE' if failed else 'fails in both'}: old: {a['error'] or 'ok'}"
            note += f" | new: {b['error'] or 'ok'}"
        else:
            d, note = difference(a["values"], b["values"])
            failed = d > tol
            note = f"DIFFERENT at {note}" if failed else ""
        bad += failed
        ratio = b["seconds"] / a["seconds"] if a["seconds"] > 0 else math.nan
        print(f"{name:<30}{d:>14.2e}{a['seconds']:>8.2f}{b['seconds']:>8.2f}{ratio:>7.2f}  {note}")
    t_old = sum(r["seconds"] for r in old.values())
    t_new = sum(r["seconds"] for r in new.values())
    print(f"{'total':<30}{'':>14}{t_old:>8.1f}{t_new:>8.1f}{t_new / t_old:>7.2f}")
    print(
        f"{len(old)} items, {len(old) - bad} the same (to {TOL:g}, MCMC {TOL_MCMC:g}; "
        "a capability failing in both counts as the same)"
    )
    return 1 if bad or unstable else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", nargs="?", help="checkout run first (the reference)")
    parser.add_argument("new", nargs="?", help="checkout compared with it")
    parser.add_argument("--only", help="run only the items whose name contains this")
    parser.add_argument("--list", action="store_true", help="list the battery's items")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run each checkout this many times, alternately: the times are the fastest "
        "round's, and each checkout must reproduce its own records exactly",
    )
    parser.add_argument("--dump", help=argparse.SUPPRESS)  # internal: run and pickle here
    parser.add_argument("--share", help=argparse.SUPPRESS)  # internal: saved models
    parser.add_argument("--label", help=argparse.SUPPRESS)  # internal: "old" or "new"
    args = parser.parse_args()
    if args.list:
        print("\n".join(BATTERY))
        return 0
    if args.dump:
        run_all(args.dump, args.share, args.label, args.only)
        return 0
    if not (args.old and args.new):
        parser.error("give two checkouts (or --list)")
    return compare(args.old, args.new, args.only, args.rounds)


if __name__ == "__main__":
    sys.exit(main())
