"""Model comparison studies: every model on every data set, through joblib, stored, resumable.

A study is a grid of independent fits. :func:`run_study` sends them to joblib: local processes
by default, any joblib backend the caller has configured (Ray's included), or a Dask cluster
through joblib's ``"dask"`` backend when a :class:`dask.distributed.Client` is given. Each fit
gets its own seed, derived from the study's ``random_state`` and the names of its data set and
model (a :class:`numpy.random.SeedSequence`), and runs with one BLAS thread, so that its numbers
do not depend on which process, machine or order it ran in.

Results come back to the calling process, which writes each one into the ``store`` folder as it
arrives (the fit's DataTree as netCDF, then its row as JSON), so workers need no shared file
system and an interrupted study loses only the fits that were still running::

    store/
      study.json          settings: seed entropy, every task's estimator and data digest
      fits/<key>.nc       the fit's DataTree (ArviZ groups), written atomically
      rows/<key>.json     the fit's row of the table, written last: its presence marks the fit done

Every file carries a SHA-256 checksum (:func:`bayes_rvm.io.json_checksum`,
:func:`bayes_rvm.io.write_tree`), and a row also the checksum of its fit's DataTree: an edited,
truncated or damaged file is never read as a result. :func:`load_study` and :func:`load_fit`
raise :class:`StudyStoreError` naming the file; a resumed :func:`run_study` warns and fits that
task again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import re
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from bayes_rvm._warnings import PACKAGE_FRAMES

# The study's inputs and TOML configuration live in their own module; read_config and
# StudyConfig are imported here, where users find them.
from bayes_rvm.studies.config import (
    StudyConfig,
    StudyData,
    check_datasets,
    check_models,
    read_config,
)

__all__ = [
    "COLUMNS",
    "StudyConfig",
    "StudyStoreError",
    "load_fit",
    "load_study",
    "loo_columns",
    "read_config",
    "run_study",
    "task_seed",
]

#: The ``format`` of a store's settings. A store of another one (another version of bayes_rvm)
#: is refused, naming it: its settings fingerprint the estimators otherwise.
_FORMAT = "bayes_rvm-study/4"
_FORMAT_FAMILY = "bayes_rvm-study/"

#: Columns of a study table, in order. ``fit_time``, ``worker`` and ``warnings`` describe the run;
#: every other column depends only on the estimator, the data and the study's seed. ``converged``
#: is False where the fit failed a convergence check (MCMC diagnostics, the type-II iteration cap).
COLUMNS = (
    "dataset",
    "model",
    "estimator",
    "method",
    "n_train",
    "n_test",
    "elpd_loo",
    "elpd_loo_se",
    "elpd_method",
    "p_loo",
    "n_pareto_k_high",
    "max_pareto_k",
    "test_rmse",
    "test_nlpd",
    "test_error_rate",
    "test_log_loss",
    "n_relevance_vectors",
    "noise_sd",
    "log_evidence",
    "max_rhat",
    "min_ess_bulk",
    "divergences",
    "converged",
    "seed",
    "fit_time",
    "worker",
    "warnings",
)


# ---------------------------------------------------------------------------------------------
# Seeds and fingerprints
# ---------------------------------------------------------------------------------------------
def _entropy(random_state) -> int:
    if random_state is None:
        return int(np.random.SeedSequence().entropy)
    if isinstance(random_state, np.random.SeedSequence):
        return int(random_state.entropy)
    if isinstance(random_state, int | np.integer) and not isinstance(random_state, bool):
        if random_state < 0:
            raise ValueError(f"random_state must be >= 0, got {random_state}.")
        return int(random_state)
    raise TypeError(
        f"random_state must be None, a non-negative int or a numpy SeedSequence, got "
        f"{type(random_state).__name__}."
    )


def task_seed(random_state: int, dataset: str, model: str) -> int:
    """The seed of one fit: a function of the study's seed and the two names only.

    Parameters
    ----------
    random_state : int
        The study's seed (its ``SeedSequence`` entropy).
    dataset, model : str
        Names of the data set and of the model in the study.

    Returns
    -------
    int
        A seed in ``[0, 2**32)``, the range every NumPy and scikit-learn ``random_state`` takes.
    """
    digest = hashlib.sha256(f"{dataset}\0{model}".encode()).digest()
    words = np.frombuffer(digest, dtype=np.uint32)
    seq = np.random.SeedSequence(_entropy(random_state), spawn_key=tuple(int(w) for w in words))
    return int(seq.generate_state(1, dtype=np.uint32)[0])


def _describe(value):
    # JSON stand-in for parameters that are not JSON: stable across processes (no addresses).
    if isinstance(value, np.ndarray):
        return {"ndarray": _digest([value])}
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{getattr(value, '__module__', '?')}.{value.__qualname__}"
    return repr(value)


def _estimator_spec(estimator) -> str:
    from bayes_rvm.estimators.saving import model_type

    params = estimator.get_params(deep=False)
    params.pop("random_state", None)  # replaced by the task's seed
    cls = type(estimator)
    # Ours by their short names, so that moving a class keeps a store resumable; others by path.
    name = model_type(cls) or f"{cls.__module__}.{cls.__qualname__}"
    return json.dumps(
        {"class": name, "params": params},
        sort_keys=True,
        default=_describe,
    )


def _digest(arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a))
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes() if a.dtype != object else repr(a.tolist()).encode())
    return h.hexdigest()


def _key(dataset: str, model: str) -> str:
    """A file name for a (dataset, model) pair: readable, and unique through a hash."""
    slug = re.sub(r"[^A-Za-z0-9_.=-]+", "-", f"{dataset}__{model}").strip("-.")[:80]
    return f"{slug}__{hashlib.sha256(f'{dataset}\0{model}'.encode()).hexdigest()[:12]}"


# ---------------------------------------------------------------------------------------------
# Input checking
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Task:
    dataset: str
    model: str
    key: str
    seed: int
    spec: str
    data_digest: str


# ---------------------------------------------------------------------------------------------
# One fit (runs in a worker)
# ---------------------------------------------------------------------------------------------
def loo_columns(dt) -> dict:
    """The LOO columns of a study's row for one fit's DataTree (empty without log-likelihood).

    Parameters
    ----------
    dt : xarray.DataTree or None
        An estimator's ``idata_``.

    Returns
    -------
    dict
        ``elpd_loo``, ``elpd_loo_se``, ``elpd_method`` (how the elpd was estimated: "PSIS-LOO",
        "exact LOO (N refits)", ...), ``p_loo``, ``n_pareto_k_high`` (Pareto k above ArviZ's
        threshold for the draws, :func:`~bayes_rvm.posterior.comparison.pareto_k_high`) and
        ``max_pareto_k`` (NaN for leave-one-out by refits, which has no Pareto k); ``{}`` when
        ``dt`` has no ``log_likelihood`` group.
    """
    from bayes_rvm.posterior.comparison import elpd, pareto_k_high

    if dt is None or "log_likelihood" not in dt.children:
        return {}
    # The honest elpd of each engine (a type-II regression fit's by refits, with no Pareto k).
    loo, method = elpd(dt)
    k = None if loo.pareto_k is None else np.asarray(loo.pareto_k).ravel()
    return {
        "elpd_loo": float(loo.elpd),
        "elpd_loo_se": float(loo.se),
        "elpd_method": method,
        "p_loo": float(loo.p),
        "n_pareto_k_high": math.nan
        if k is None
        else float(np.sum(k > pareto_k_high(loo.n_samples))),
        "max_pareto_k": math.nan if k is None else float(np.max(k)),
    }


def _regression_nlpd(est, dt, method: str, X_test, y_test) -> float:
    """Mean negative log predictive density of the test targets (summed over outputs), under
    the fit's own likelihood.

    A Gaussian type-II fit: its Gaussian predictive, exact. Otherwise a mixture over the draws
    of the tree (MCMC, VI, or a type-II fit's weights drawn from their Gaussian or Laplace
    posterior), averaged in probability (log-sum-exp): of ``N(t | f, sigma)``, of Student's t
    (``noise_nu``) or of ``Poisson(t | exp(f))``. NaN for an estimator of another package
    without such a predictive.
    """
    from scipy.special import logsumexp
    from scipy.stats import norm, poisson, t

    Y = np.asarray(y_test, dtype=np.float64)
    likelihood = getattr(est, "likelihood", "gaussian")
    if likelihood == "gaussian" and (method not in ("mcmc", "vi") or dt is None):
        try:
            mean, std = est.predict(X_test, return_std=True)
        except TypeError:  # an estimator without a predictive sd (scikit-learn's Ridge)
            return math.nan
        lp = norm.logpdf(Y, mean, std)
        return float(-np.mean(lp if lp.ndim == 1 else lp.sum(axis=1)))
    if dt is None:
        return math.nan
    from bayes_rvm.dims import BASIS
    from bayes_rvm.inference import predict_draws

    post = dt["posterior"].dataset
    Phi = est.basis_.transform(np.asarray(X_test, dtype=np.float64), columns=post[BASIS].values)
    _, f = predict_draws(dt, Phi, include_noise=False)
    f = f.values.reshape(-1, *f.shape[2:])  # (draws, n) or (draws, n, outputs)

    def per_draw(name):
        return post[name].values.reshape(-1, *([1] * (f.ndim - 1)))

    if likelihood == "poisson":
        lp = poisson.logpmf(Y[None], np.exp(f))
    elif likelihood == "student_t":
        lp = t.logpdf(Y[None], per_draw("noise_nu"), f, per_draw("sigma"))
    else:
        lp = norm.logpdf(Y[None], f, per_draw("sigma"))
    if lp.ndim == 3:
        lp = lp.sum(axis=2)
    return float(-np.mean(logsumexp(lp, axis=0) - np.log(lp.shape[0])))


def _test_columns(est, dt, method: str, data: StudyData) -> dict:
    from sklearn.base import is_classifier

    if data.X_test is None:
        return {}
    if is_classifier(est):
        from sklearn.metrics import log_loss

        proba = est.predict_proba(data.X_test)
        return {
            "test_error_rate": float(np.mean(est.predict(data.X_test) != np.asarray(data.y_test))),
            "test_log_loss": float(log_loss(data.y_test, proba, labels=est.classes_)),
        }
    pred = np.asarray(est.predict(data.X_test), dtype=np.float64)
    return {
        "test_rmse": float(np.sqrt(np.mean((pred - np.asarray(data.y_test)) ** 2))),
        "test_nlpd": _regression_nlpd(est, dt, method, data.X_test, data.y_test),
    }


def _fitted_columns(est, dt, method: str) -> dict:
    out = {}
    n_rv = getattr(est, "n_relevance_vectors_", None)
    if n_rv is not None:
        out["n_relevance_vectors"] = float(n_rv)
    if dt is not None and "sigma" in dt["posterior"].dataset:
        # The posterior mean (for a type-II fit the constant estimate itself).
        out["noise_sd"] = float(dt["posterior"]["sigma"].mean())
    elif getattr(est, "noise_variance_", None) is not None:
        out["noise_sd"] = float(np.sqrt(est.noise_variance_))
    if method == "type2" and getattr(est, "log_evidence_", None) is not None:
        out["log_evidence"] = float(est.log_evidence_)
    if method == "mcmc" and dt is not None:
        from bayes_rvm.inference import diagnose

        diag = diagnose(dt, warn=False)
        out.update(
            max_rhat=diag["max_rhat"],
            min_ess_bulk=diag["min_ess_bulk"],
            divergences=float(diag["divergences"]),
        )
    return out


def _method(est, dt) -> str:
    """How the fit was made: its DataTree's ``method``, else the estimator's ``inference``, else
    ``"other"`` (an estimator of another package, which has neither)."""
    if dt is not None and "method" in dt.attrs:
        return str(dt.attrs["method"])
    return str(getattr(est, "inference", "other"))


#: One fit at a time per process. A worker that runs tasks in threads (a Dask worker with
#: ``nthreads > 1``) would otherwise interleave them, and the BLAS thread limit and the warnings
#: filters are process-wide: one fit leaving ``threadpool_limits`` gave BLAS its threads back in the
#: middle of another (whose sums then came out in another order), and caught the other's warnings.
_FIT_LOCK = threading.Lock()


def _fit_task(task: _Task, estimator, data: StudyData) -> tuple[dict, object]:
    """Fit one model on one data set; return its row and DataTree (None without ``idata_``)."""
    from sklearn.base import clone
    from sklearn.exceptions import ConvergenceWarning
    from threadpoolctl import threadpool_limits

    from bayes_rvm.inference import SamplingDiagnosticsWarning

    est = clone(estimator)
    if "random_state" in est.get_params(deep=False):
        est.set_params(random_state=task.seed)
    # One BLAS thread wherever the fit runs: the parallelism is across fits, and the sums come
    # out in the same order in every process.
    with (
        _FIT_LOCK,
        threadpool_limits(1),
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        try:
            start = time.perf_counter()
            est.fit(data.X, data.y)
            fit_time = time.perf_counter() - start
            dt = getattr(est, "idata_", None)
            method = _method(est, dt)
            row = {
                "dataset": task.dataset,
                "model": task.model,
                "estimator": type(est).__name__,
                "method": method,
                "n_train": len(data.y),
                "n_test": 0 if data.y_test is None else len(data.y_test),
                **loo_columns(dt),
                **_test_columns(est, dt, method, data),
                **_fitted_columns(est, dt, method),
            }
        except Exception as exc:
            exc.add_note(f"(study fit of model {task.model!r} on data set {task.dataset!r})")
            raise
    messages = dict.fromkeys(f"{w.category.__name__}: {str(w.message)[:300]}" for w in caught)
    failed = (ConvergenceWarning, SamplingDiagnosticsWarning)
    row.update(
        converged=getattr(est, "converged_", True) is not False
        and not any(issubclass(w.category, failed) for w in caught),
        seed=task.seed,
        fit_time=fit_time,
        worker=f"{socket.gethostname()}:{os.getpid()}",
        warnings="; ".join(messages),
    )
    return _complete_row(row), dt


def _complete_row(row: Mapping) -> dict:
    return {c: row.get(c, "" if c == "warnings" else math.nan) for c in COLUMNS}


# ---------------------------------------------------------------------------------------------
# The store
# ---------------------------------------------------------------------------------------------
class StudyStoreError(ValueError):
    """A file of a study store that is not what :func:`run_study` wrote: unreadable, truncated,
    edited or damaged. The message names the file."""


def _read_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StudyStoreError(f"cannot read the {what} {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise StudyStoreError(f"{path}: the {what} is not a JSON object")
    return data


def _check_sum(path: Path, what: str, data: dict, checksum) -> None:
    from bayes_rvm.io import json_checksum

    if checksum != json_checksum(data):
        raise StudyStoreError(
            f"{path}: the {what} does not match its checksum (edited or damaged); delete it to "
            "fit that task again"
        )


_TASK_FIELDS = {"dataset": str, "model": str, "seed": int, "spec": str, "data_digest": str}


class _Store:
    """The study folder (see the module docstring)."""

    def __init__(self, path):
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"store must be a path (str or os.PathLike), got {path!r}.")
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise ValueError(f"store={str(self.path)!r} is a file, not a study folder.")
        self.settings_path = self.path / "study.json"

    # settings -----------------------------------------------------------------------------
    def read_settings(self) -> dict | None:
        if not self.settings_path.exists():
            if self.path.exists() and any(self.path.iterdir()):
                raise ValueError(
                    f"{self.path} is a non-empty folder without study.json: not a study store. "
                    "Give a new or empty folder."
                )
            return None
        path = self.settings_path
        settings = _read_json(path, "study settings")
        fmt = settings.get("format")
        if fmt != _FORMAT:
            if not (isinstance(fmt, str) and fmt.startswith(_FORMAT_FAMILY)):
                raise StudyStoreError(f"{path} is not a bayes_rvm study (format {fmt!r}).")
            raise StudyStoreError(
                f"{path} was written by bayes_rvm {settings.get('bayes_rvm_version', '(unknown)')} "
                f"in format {fmt!r}; this version reads {_FORMAT!r}: run the study into a new "
                "store."
            )
        _check_sum(path, "study settings", settings, settings.pop("checksum", None))
        tasks, order = settings.get("tasks"), settings.get("order")
        entropy = settings.get("entropy")
        if not isinstance(tasks, dict) or not isinstance(order, list):
            raise StudyStoreError(f"{path}: the study settings lack their tasks and order")
        if entropy is not None and (not isinstance(entropy, int) or entropy < 0):
            raise StudyStoreError(f"{path}: the seed entropy {entropy!r} is not an int >= 0")
        for key in order:
            task = tasks.get(key)
            if not isinstance(task, dict) or any(
                not isinstance(task.get(f), t) for f, t in _TASK_FIELDS.items()
            ):
                raise StudyStoreError(f"{path}: task {key!r} is missing or incomplete")
            if key != _key(task["dataset"], task["model"]):
                raise StudyStoreError(f"{path}: task {key!r} does not match its names")
        return settings

    def write_settings(self, settings: dict) -> None:
        (self.path / "fits").mkdir(parents=True, exist_ok=True)
        (self.path / "rows").mkdir(exist_ok=True)
        from bayes_rvm.io import write_json

        write_json(self.settings_path, {**settings, "format": _FORMAT})

    # fits -------------------------------------------------------------------------------------
    def fit_path(self, key: str) -> Path:
        return self.path / "fits" / f"{key}.nc"

    def row_path(self, key: str) -> Path:
        return self.path / "rows" / f"{key}.json"

    def is_done(self, key: str) -> bool:
        return self.row_path(key).exists()

    def write(self, key: str, row: dict, dt) -> None:
        from bayes_rvm.io import write_json, write_tree

        fit_checksum = None if dt is None else write_tree(dt, self.fit_path(key))
        # Written last: its presence marks the fit done, its checksum vouches for both files.
        write_json(self.row_path(key), {"row": row, "fit_checksum": fit_checksum})

    def read_entry(self, key: str) -> dict:
        """The stored ``{"row", "fit_checksum"}`` of a finished fit, checked."""
        path = self.row_path(key)
        data = _read_json(path, "study row")
        _check_sum(path, "study row", data, data.pop("checksum", None))
        row = data.get("row")
        if not isinstance(row, dict) or not set(row) <= set(COLUMNS):
            raise StudyStoreError(f"{path}: not a row of a study table")
        if key != _key(str(row.get("dataset")), str(row.get("model"))):
            raise StudyStoreError(f"{path}: the row is of another task")
        if data.get("fit_checksum") is not None and not self.fit_path(key).exists():
            raise StudyStoreError(f"{path}: its fit's DataTree {self.fit_path(key)} is missing")
        return {"row": _complete_row(row), "fit_checksum": data.get("fit_checksum")}

    def read_row(self, key: str) -> dict:
        return self.read_entry(key)["row"]

    def read_fit(self, key: str):
        from bayes_rvm.io import ModelFileError, read_tree

        path = self.fit_path(key)
        checksum = self.read_entry(key)["fit_checksum"]
        if not path.exists():
            raise FileNotFoundError(f"no stored DataTree at {path}")
        try:
            return read_tree(path, checksum)
        except ModelFileError as exc:
            raise StudyStoreError(f"{exc}; delete {self.row_path(key)} to fit it again") from exc


def _merge_settings(store: _Store, entropy: int | None) -> tuple[int | None, dict]:
    """Check the grid against a stored study; return the seed entropy and the merged settings."""
    settings = store.read_settings()
    if settings is None:
        settings = {"format": _FORMAT, "entropy": None, "tasks": {}, "order": []}
    stored = settings["entropy"]
    if stored is not None and entropy is not None and int(stored) != entropy:
        raise ValueError(
            f"the store {store.path} was made with random_state={stored}, not {entropy}: "
            "pass random_state=None (or the same value) to resume it, or use another store."
        )
    return (int(stored) if stored is not None else entropy), settings


def _check_against_store(settings: dict, tasks: list[_Task], store: _Store) -> None:
    for task in tasks:
        old = settings["tasks"].get(task.key)
        if old is None:
            continue
        for field, what in (("spec", "estimator settings"), ("data_digest", "data")):
            if old[field] != getattr(task, field) and store.is_done(task.key):
                raise ValueError(
                    f"the store {store.path} holds a fit of model {task.model!r} on data set "
                    f"{task.dataset!r} with other {what}; use another store, or delete "
                    f"{store.row_path(task.key)} to refit it."
                )


# ---------------------------------------------------------------------------------------------
# Execution
# ---------------------------------------------------------------------------------------------
def _read_stored_row(store: _Store, key: str) -> dict | None:
    """A finished fit's row, or None (with a warning) where its files are damaged: fit it again."""
    try:
        return store.read_row(key)
    except StudyStoreError as exc:
        warnings.warn(
            f"{exc}. Fitting that task again.", UserWarning, skip_file_prefixes=PACKAGE_FRAMES
        )
        return None


def _check_client(client) -> None:
    if client is None:
        return
    from bayes_rvm._optional import require

    Client = require("distributed", "dask", "client= (a study on Dask)").Client
    if not isinstance(client, Client):
        raise TypeError(
            f"client must be a dask.distributed.Client, got {type(client).__name__}; for local "
            "processes leave it None (and set n_jobs)."
        )
    threads = client.nthreads()
    if any(n > 1 for n in threads.values()):
        warnings.warn(
            f"the Dask workers run {max(threads.values())} threads each, but a process fits one "
            "model at a time (the BLAS thread limit and warnings are process-wide, and results "
            "must not depend on the neighbours): start single-threaded workers "
            "(LocalCluster(threads_per_worker=1), dask worker --nthreads 1) and more of them.",
            UserWarning,
            skip_file_prefixes=PACKAGE_FRAMES,
        )


def _backend(client):
    """The joblib configuration: the Dask backend on ``client``, or whatever is configured."""
    if client is None:
        return contextlib.nullcontext()
    from joblib import parallel_config

    return parallel_config(backend="dask", client=client)


def _convergence_note(row: Mapping) -> str:
    """``", NOT CONVERGED (R-hat 1.5960, bulk ESS 7, 0 divergences)"`` for a failed check (four
    decimals: an R-hat of 1.0099 passes, and 1.010 would read as failing)."""
    if row.get("converged") is not False:
        return ""
    if row.get("method") == "mcmc" and np.isfinite(row.get("max_rhat", math.nan)):
        return (
            f", NOT CONVERGED (R-hat {row['max_rhat']:.4f}, bulk ESS {row['min_ess_bulk']:.0f}, "
            f"{row['divergences']:.0f} divergences; see the warnings column)"
        )
    return ", NOT CONVERGED (see the warnings column)"


def _progress_printer(stream=None) -> Callable[[int, int, dict], None]:
    def report(done: int, total: int, row: dict) -> None:
        elpd = row["elpd_loo"]
        elpd = f"elpd {elpd:.2f} ± {row['elpd_loo_se']:.2f}" if np.isfinite(elpd) else "no LOO"
        print(
            f"[{done}/{total}] {row['dataset']} / {row['model']}: {elpd}"
            f"{_convergence_note(row)} ({row['fit_time']:.1f} s on {row['worker']})",
            file=stream or sys.stderr,
            flush=True,
        )

    return report


def _record_tasks(db: _Store, settings: dict, tasks: list[_Task], entropy: int) -> dict:
    """Check the tasks against the store, record them in its settings; the rows already done."""
    stored = {t.key: _read_stored_row(db, t.key) for t in tasks if db.is_done(t.key)}
    _check_against_store(settings, tasks, db)
    settings["entropy"] = entropy
    for t in tasks:
        if t.key not in settings["tasks"]:
            settings["order"].append(t.key)
        settings["tasks"][t.key] = {
            "dataset": t.dataset,
            "model": t.model,
            "seed": t.seed,
            "spec": t.spec,
            "data_digest": t.data_digest,
        }
    try:
        from importlib.metadata import version

        settings["bayes_rvm_version"] = version("bayes-rvm")
    except Exception:  # pragma: no cover - running from a source tree
        settings["bayes_rvm_version"] = "unknown"
    db.write_settings(settings)
    return {key: row for key, row in stored.items() if row is not None}


def _run_pending(
    pending: list[_Task],
    models: dict,
    datasets: dict,
    rows: dict,
    *,
    total: int,
    client,
    n_jobs: int | None,
    db: _Store | None,
    report: Callable[[int, int, dict], None] | None,
) -> None:
    """Fit the pending tasks through joblib; store and add each row to ``rows`` as it comes."""
    from joblib import Parallel, delayed

    done = len(rows)
    with _backend(client):
        jobs = -1 if n_jobs is None and client is not None else n_jobs
        if jobs is None:
            from joblib.parallel import get_active_backend

            # No n_jobs anywhere: every core (a configured n_jobs or backend wins).
            _, configured = get_active_backend()
            jobs = -1 if configured in (None, 1) else configured
        parallel = Parallel(n_jobs=jobs, return_as="generator_unordered", batch_size=1)
        results = parallel(
            delayed(_fit_task)(t, models[t.model], datasets[t.dataset]) for t in pending
        )
        try:
            for row, dt in results:
                key = _key(row["dataset"], row["model"])
                if db is not None:
                    db.write(key, row, dt)
                rows[key] = row
                done += 1
                if report is not None:
                    report(done, total, row)
        except BaseException as exc:
            if db is not None:
                exc.add_note(
                    f"{done} of {total} fits are stored in {db.path}; run the study again "
                    "to fit the others."
                )
            raise


def run_study(
    models: Mapping[str, object],
    datasets: Mapping[str, tuple],
    *,
    client=None,
    store: str | os.PathLike | None = None,
    n_jobs: int | None = None,
    random_state=None,
    progress: bool | Callable[[int, int, dict], None] = False,
) -> pd.DataFrame:
    """Fit every model on every data set and tabulate LOO, held-out scores and diagnostics.

    Parameters
    ----------
    models : mapping of str to estimator
        Named unfitted estimators (:class:`~bayes_rvm.RVR`,
        :class:`~bayes_rvm.RVC` or any scikit-learn estimator); each is
        cloned per fit.
        An estimator with a ``random_state`` parameter gets the task's seed in it (its own value
        is replaced).
    datasets : mapping of str to tuple
        Named ``(X, y)`` or ``(X, y, X_test, y_test)``; the held-out scores need the test set.
    client : dask.distributed.Client, optional
        Run the fits on this Dask cluster (joblib's ``"dask"`` backend). Without it, the fits
        run on joblib's configured backend: local processes (loky) unless the caller chose
        another one with :func:`joblib.parallel_config` (for example Ray's, after
        ``ray.util.joblib.register_ray()``).
    store : path, optional
        A folder for the results (created if needed). Each fit's DataTree and row are written
        there as the fit finishes; fits already there are not redone, so an interrupted study
        resumes where it stopped and a finished one reloads at once (see :func:`load_study`).
    n_jobs : int, optional
        Number of parallel fits. Default: every core locally, every worker of ``client``, or
        what :func:`joblib.parallel_config` sets. ``1`` fits serially in this process.
    random_state : int or numpy.random.SeedSequence, optional
        The study's seed. Each fit's seed is :func:`task_seed` of it and the two names, so a fit's
        result depends neither on where nor in which order it ran. ``None`` draws fresh entropy
        (recorded in ``table.attrs["random_state"]`` and in the store, where a resumed run takes
        it from).
    progress : bool or callable, default=False
        ``True`` prints a line per finished fit to stderr; a callable is called as
        ``progress(n_done, n_total, row)``.

    Returns
    -------
    pandas.DataFrame
        One row per (data set, model) in the order given, with the columns of :data:`COLUMNS`:
        ``elpd_loo``, ``elpd_loo_se``, ``elpd_method``, ``p_loo``, ``n_pareto_k_high``
        (Pareto k above ArviZ's threshold for the draws) and
        ``max_pareto_k`` from :func:`bayes_rvm.posterior.comparison.elpd` on the fit's ``idata_``
        (PSIS-LOO, or for a type-II regression fit leave-one-out by refits, which has no
        Pareto k: NaN there); with a test set
        ``test_rmse`` and ``test_nlpd`` (mean negative log predictive density under the fit's
        likelihood; of the mixture over the draws for MCMC and VI fits and for type-II fits of
        counts or t noise) for regressors, ``test_error_rate`` and
        ``test_log_loss`` for classifiers; ``n_relevance_vectors`` (for an MCMC fit: of the
        type-II fit that seeded it), ``noise_sd`` (posterior mean), ``log_evidence`` (type-II);
        ``max_rhat`` (of log alpha and the noise), ``min_ess_bulk`` and ``divergences`` (MCMC);
        ``seed``, ``fit_time`` (seconds), ``worker`` (host:pid) and the ``warnings`` raised
        during the fit. Not applicable entries are NaN.

    Raises
    ------
    ValueError
        For malformed inputs, or a store that holds a fit of the same names with other settings
        or data. An error inside a fit is raised with a note naming the fit; the fits finished
        before it stay in the store.

    Notes
    -----
    Compiled MCMC models are cached in each worker process
    (:func:`bayes_rvm.inference.sample_mcmc`), and joblib's and Dask's workers live across
    tasks, so the fits of one model configuration on data of one shape compile once per worker.
    """
    models = check_models(models)
    datasets = check_datasets(datasets)
    entropy = _entropy(random_state) if random_state is not None else None
    if n_jobs is not None and (
        not isinstance(n_jobs, int | np.integer) or isinstance(n_jobs, bool) or n_jobs == 0
    ):
        raise ValueError(f"n_jobs must be a nonzero int or None, got {n_jobs!r}.")
    if not (progress is None or isinstance(progress, bool) or callable(progress)):
        raise TypeError(
            "progress must be True, False or a callable progress(n_done, n_total, row), got "
            f"{type(progress).__name__}."
        )
    report = _progress_printer() if progress is True else (progress or None)
    _check_client(client)

    pairs = [(d, m) for d in datasets for m in models]
    data_digest = {
        name: _digest([a for a in dataclasses.astuple(data) if a is not None])
        for name, data in datasets.items()
    }
    spec = {name: _estimator_spec(est) for name, est in models.items()}
    db = _Store(store) if store is not None else None
    settings = None
    if db is not None:
        entropy, settings = _merge_settings(db, entropy)
    if entropy is None:
        entropy = _entropy(None)
    tasks = [
        _Task(d, m, _key(d, m), task_seed(entropy, d, m), spec[m], data_digest[d]) for d, m in pairs
    ]
    rows = {} if db is None else _record_tasks(db, settings, tasks, entropy)
    pending = [t for t in tasks if t.key not in rows]
    if pending:
        _run_pending(
            pending,
            models,
            datasets,
            rows,
            total=len(tasks),
            client=client,
            n_jobs=n_jobs,
            db=db,
            report=report,
        )
    table = pd.DataFrame([rows[t.key] for t in tasks], columns=list(COLUMNS))
    table.attrs.update(random_state=entropy, store=None if db is None else str(db.path))
    return table


def load_study(store: str | os.PathLike) -> pd.DataFrame:
    """The table of every finished fit in a study store, without fitting anything.

    Parameters
    ----------
    store : path
        A folder written by :func:`run_study`.

    Returns
    -------
    pandas.DataFrame
        The columns of :func:`run_study`, one row per stored fit, in the order the fits were
        first requested; ``attrs["random_state"]`` is the study's seed and ``attrs["missing"]``
        lists the (data set, model) pairs that were requested but have not finished.
    """
    db = _Store(store)
    if not db.settings_path.exists():
        raise FileNotFoundError(f"no study at {db.path} (no study.json)")
    settings = db.read_settings()
    keys = settings["order"]
    rows = [db.read_row(k) for k in keys if db.is_done(k)]
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    table.attrs.update(
        random_state=settings["entropy"],
        store=str(db.path),
        missing=[
            (settings["tasks"][k]["dataset"], settings["tasks"][k]["model"])
            for k in keys
            if not db.is_done(k)
        ],
    )
    return table


def load_fit(store: str | os.PathLike, dataset: str, model: str):
    """The stored DataTree of one fit of a study (the estimator's ``idata_``).

    Raises
    ------
    FileNotFoundError
        If that fit has not finished, or its estimator had no ``idata_``.
    """
    db = _Store(store)
    if db.read_settings() is None:
        raise FileNotFoundError(f"no study at {db.path} (no study.json)")
    key = _key(dataset, model)
    if not db.is_done(key):
        raise FileNotFoundError(
            f"the study at {db.path} has no finished fit of {model!r} on {dataset!r}"
        )
    return db.read_fit(key)
