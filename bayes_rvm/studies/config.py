"""A study's inputs: checked, or read from a TOML file (``bayes-rvm study``); the CSV reader.

:func:`read_config` turns a TOML file into the arguments of
:func:`bayes_rvm.studies.runner.run_study`
(a :class:`StudyConfig`); :func:`check_models` and :func:`check_datasets` check those arguments
however they come; :func:`read_table` reads a CSV table of features and a target for it
and for the ``bayes-rvm fit`` command, with one error per fault naming the file, column and line.
"""

from __future__ import annotations

import csv
import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

__all__ = [
    "StudyConfig",
    "StudyData",
    "check_datasets",
    "check_models",
    "read_config",
    "read_features",
    "read_table",
]


@dataclasses.dataclass(frozen=True)
class StudyData:
    """One data set of a study: training inputs and targets, and optionally a test set."""

    X: object
    y: object
    X_test: object = None
    y_test: object = None


def check_models(models) -> dict:
    """The named estimators of a study, checked: a non-empty mapping of names to estimators."""
    if not isinstance(models, Mapping) or not models:
        raise TypeError("models must be a non-empty mapping of names to unfitted estimators.")
    for name, est in models.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"model names must be non-empty strings, got {name!r}.")
        if not (hasattr(est, "fit") and hasattr(est, "get_params")):
            raise TypeError(
                f"models[{name!r}] must be a scikit-learn estimator (with fit and get_params), "
                f"got {type(est).__name__}."
            )
    return dict(models)


def check_datasets(datasets) -> dict[str, StudyData]:
    """The named data sets of a study as :class:`StudyData`, checked (types and lengths)."""
    if not isinstance(datasets, Mapping) or not datasets:
        raise TypeError(
            "datasets must be a non-empty mapping of names to (X, y) or (X, y, X_test, y_test)."
        )
    out = {}
    for name, value in datasets.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"data set names must be non-empty strings, got {name!r}.")
        if not isinstance(value, tuple | list) or len(value) not in (2, 4):
            raise ValueError(
                f"datasets[{name!r}] must be (X, y) or (X, y, X_test, y_test), got "
                f"{type(value).__name__}"
                + (f" of length {len(value)}" if isinstance(value, tuple | list) else "")
                + "."
            )
        data = StudyData(*value)
        for x, t, what in ((data.X, data.y, ""), (data.X_test, data.y_test, "test ")):
            if x is None and t is None and what:
                continue
            for a, label in ((x, f"{what}X"), (t, f"{what}y")):
                if a is None or isinstance(a, str | bytes) or not hasattr(a, "__len__"):
                    raise TypeError(
                        f"datasets[{name!r}]: {label} must be an array-like of samples, got "
                        f"{type(a).__name__}."
                    )
            if len(x) != len(t):
                raise ValueError(
                    f"datasets[{name!r}]: {what}X has {len(x)} rows but {what}y has {len(t)}."
                )
            _finite_targets(name, t, what)
        widths = [getattr(x, "shape", ())[1:2] for x in (data.X, data.X_test)]
        if data.X_test is not None and all(widths) and widths[0] != widths[1]:
            raise ValueError(
                f"datasets[{name!r}]: test X has {widths[1][0]} features but X has {widths[0][0]}."
            )
        out[name] = data
    return out


def _finite_targets(name: str, t, what: str) -> None:
    """Numeric targets finite, before any fit: a study fails at once on such a data set, naming
    it, not in its fits (the others' lost). Inputs are the estimators' to judge: a pipeline may
    impute NaN, or take texts."""
    values = np.asarray(t)
    if values.dtype.kind in "fc" and not np.all(np.isfinite(values)):
        raise ValueError(f"datasets[{name!r}]: {what}y holds NaN or infinite values.")


def _delimiter(path: Path) -> str:
    """The table's delimiter among , ; tab | (a comma where the file has one column).

    pandas' own sniffing (``sep=None``) accepts any character, and splits a one-column file of
    decimals on the ``.``.
    """
    try:
        with open(path, newline="") as f:
            sample = f.read(65536)
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"could not read {path} as CSV text: {exc}") from None
    try:
        return csv.Sniffer().sniff(sample, delimiters=",;\t|").delimiter
    except csv.Error:
        return ","


def read_table(
    path: str | os.PathLike,
    target: str | None = None,
    *,
    features: Sequence[str] | None = None,
    numeric: bool = True,
    target_flag: str = "target",
    features_flag: str = "features",
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Features, target and feature names from a CSV file with a header row.

    Parameters
    ----------
    path : path
        The file; its delimiter (``,``, ``;``, tab or ``|``) is sniffed.
    target : str, optional
        The target's column; by default the last one.
    features : sequence of str, optional
        The feature columns, in this order; by default every column but the target. Others (an
        identifier, a text column) are then left out.
    numeric : bool, default=True
        Whether the target must be numbers too (returned as float); class labels need not be.
    target_flag, features_flag : str, default="target", "features"
        How an error names the two options (``"--target"``, ``"--features"`` for the command
        line).

    Returns
    -------
    X : ndarray of shape (n_samples, n_features), float
    y : ndarray of shape (n_samples,)
    names : list of str
        The feature columns, in order.

    Raises
    ------
    ValueError
        Naming the file and the fault: missing or unreadable, fewer than two columns or data
        rows, an unknown target, or a non-numeric, empty or infinite cell (with its line).
    """
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path} does not exist")
    sep = _delimiter(path)
    try:
        frame = pd.read_csv(path, sep=sep)
    except Exception as exc:  # any parser error is a bad file for the user
        detail = " ".join(str(exc).split())
        raise ValueError(f"could not read {path} as CSV: {detail}") from None
    if frame.shape[1] < 2:
        raise ValueError(
            f"{path} has {frame.shape[1]} column(s) {list(frame.columns)}; it needs at least one "
            "feature and the target (a header row, then one row per sample)"
        )
    if len(frame) < 2:
        raise ValueError(
            f"{path} has {len(frame)} data row(s) below its header; a fit needs at least 2"
        )
    target = target or frame.columns[-1]
    if target not in frame.columns:
        raise ValueError(
            f"{target_flag} {target!r} is not a column of {path}: {list(frame.columns)}"
        )
    if features is not None:
        features = [features] if isinstance(features, str) else list(features)
        unknown = [c for c in features if c not in frame.columns]
        if unknown or target in features or not features or len(set(features)) < len(features):
            raise ValueError(
                f"{features_flag} {features!r} must name distinct feature columns of {path} "
                f"other than the target {target!r}: {list(frame.columns)}"
            )
        frame = frame[[*features, target]]
    hint = "" if features is not None else f"; {features_flag} chooses the feature columns"
    _check_cells(frame, frame.columns.drop(target), path, hint)
    if numeric:
        _check_cells(frame, [target], path)
    if not numeric and frame[target].isna().any():
        row = int(np.flatnonzero(frame[target].isna())[0])
        raise ValueError(
            f"column {target!r} of {path} has an empty cell at line {row + 2}; "
            "remove or fill the row"
        )
    if not numeric and pd.api.types.is_numeric_dtype(frame[target]):
        _check_cells(frame, [target], path)  # a numeric target: its infinite cells too
    features = frame.drop(columns=[target])
    y = frame[target].to_numpy(float) if numeric else frame[target].to_numpy()
    return features.to_numpy(float), y, list(features.columns)


def _check_cells(frame, columns, path: Path, hint: str = "") -> None:
    """Raise ValueError naming the first non-numeric, empty or infinite cell of ``columns`` and
    its line (``hint`` ends the message of a non-numeric one)."""
    import pandas as pd

    for column in columns:
        # The line of the file: the header is line 1, data row 0 is line 2.
        values = frame[column]
        if not pd.api.types.is_numeric_dtype(values):
            numbers = pd.to_numeric(values, errors="coerce")
            row = int(np.flatnonzero(numbers.isna() & values.notna())[0])
            raise ValueError(
                f"column {column!r} of {path} is not numeric: {values.iloc[row]!r} "
                f"at line {row + 2}{hint}"
            )
        if values.isna().any():
            row = int(np.flatnonzero(values.isna())[0])
            raise ValueError(
                f"column {column!r} of {path} has an empty or NaN cell at line {row + 2}; "
                "remove or fill the row"
            )
        infinite = np.isinf(values.to_numpy(float))
        if infinite.any():
            row = int(np.flatnonzero(infinite)[0])
            raise ValueError(
                f"column {column!r} of {path} has an infinite value ({values.iloc[row]}) at "
                f"line {row + 2}; remove or fix the row"
            )


def read_features(path: str | os.PathLike, names: Sequence[str] | None, n_features: int):
    """The feature columns of a CSV file with a header row, for a fitted model's ``predict``.

    Parameters
    ----------
    path : path
        The file; its delimiter (``,``, ``;``, tab or ``|``) is sniffed.
    names : sequence of str or None
        The model's feature names (``feature_names_in_``): these columns are taken, in this
        order, and any other (the target, an identifier) is left out. None: every column, which
        must then number ``n_features``.
    n_features : int
        The model's ``n_features_in_``.

    Returns
    -------
    pandas.DataFrame
        The features as float, with their names.

    Raises
    ------
    ValueError
        Naming the file and the fault: missing or unreadable, a feature column absent, the
        wrong number of columns, or a non-numeric, empty or infinite cell (with its line).
    """
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path} does not exist")
    try:
        frame = pd.read_csv(path, sep=_delimiter(path))
    except Exception as exc:  # any parser error is a bad file for the user
        detail = " ".join(str(exc).split())
        raise ValueError(f"could not read {path} as CSV: {detail}") from None
    if names is not None:
        missing = [n for n in names if n not in frame.columns]
        if missing:
            raise ValueError(
                f"{path} lacks the model's feature column(s) {missing}; it has "
                f"{list(frame.columns)}"
            )
        frame = frame[list(names)]
    elif frame.shape[1] != n_features:
        raise ValueError(
            f"{path} has {frame.shape[1]} column(s) {list(frame.columns)}; the model was fitted "
            f"on {n_features} unnamed feature(s): give exactly those columns"
        )
    if len(frame) == 0:
        raise ValueError(f"{path} has no data rows below its header")
    _check_cells(frame, frame.columns, path)
    return frame.astype(float)


@dataclasses.dataclass(frozen=True)
class StudyConfig:
    """A study read from a TOML file by :func:`read_config`: the arguments of :func:`run_study`.

    Attributes
    ----------
    models : dict of str to estimator
    datasets : dict of str to tuple
    store : Path or None
    output : Path
        Folder for the table (``study.csv``) and the comparison plot (``study.png``).
    n_jobs : int or None
    random_state : int or None
    """

    models: dict
    datasets: dict
    store: Path | None
    output: Path
    n_jobs: int | None
    random_state: int | None


_STUDY_KEYS = {"random_state", "store", "output", "n_jobs"}
_STUDY_TYPES = (
    ("random_state", int, "an int >= 0"),
    ("store", str, "a folder name (a string)"),
    ("output", str, "a folder name (a string)"),
    ("n_jobs", int, "a nonzero int"),
)
_ESTIMATORS = ("RVR", "RVC")


def _config_error(path: Path, where: str, message: str) -> ValueError:
    return ValueError(f"{path}: [{where}] {message}")


def _config_dataset(path: Path, name: str, spec: dict) -> tuple:
    """``(X, y)`` or ``(X, y, X_test, y_test)`` from one ``[datasets.NAME]`` table."""
    from bayes_rvm import datasets as gen

    where = f"datasets.{name}"
    spec = dict(spec)
    source = spec.pop("source", None)
    n_test = spec.pop("n_test", 0)
    if not isinstance(n_test, int) or n_test < 0:
        raise _config_error(path, where, f"n_test must be an int >= 0, got {n_test!r}")
    if n_test and source == "csv":
        raise _config_error(
            path, where, "n_test draws test points of generated data; a csv source takes test_path"
        )
    if source != "csv":
        # Generated data sets are reproducible by default: the file describes the data.
        spec.setdefault("random_state", 0)
    try:
        if source == "sinc":
            seed = spec["random_state"]
            X, y = gen.make_sinc(**spec)
            if not n_test:
                return X, y
            test = {k: v for k, v in spec.items() if k not in ("n_samples", "random_state")}
            # Fresh inputs drawn over the same interval, from a seed of their own.
            Xt, yt = gen.make_sinc(n_test, **{**test, "random": True}, random_state=seed + 1)
            return X, y, Xt, yt
        if source in ("friedman1", "friedman2", "friedman3"):
            n = spec.pop("n_samples", 240)
            X, y = gen.make_friedman(int(source[-1]), n + n_test, **spec)
            return (X, y) if not n_test else (X[:n], y[:n], X[n:], y[n:])
        if source == "csv":
            return _config_csv(path, where, spec)
    except TypeError as exc:
        raise _config_error(path, where, f"bad settings for source {source!r}: {exc}") from None
    raise _config_error(
        path, where, f"source must be 'sinc', 'friedman1/2/3' or 'csv', got {source!r}"
    )


def _config_csv(path: Path, where: str, spec: dict) -> tuple:
    unknown = set(spec) - {"path", "target", "features", "test_path"}
    if unknown or "path" not in spec:
        raise _config_error(
            path,
            where,
            f"a csv source takes path, target, features, test_path; got {sorted(spec)}",
        )

    def read(file):
        try:
            # Class labels may be text: only the features must be numbers.
            X, y, _ = read_table(
                (path.parent / file).resolve(),
                spec.get("target"),
                features=spec.get("features"),
                numeric=False,
            )
        except ValueError as exc:
            raise _config_error(path, where, str(exc)) from None
        return X, y

    X, y = read(spec["path"])
    return (X, y) if "test_path" not in spec else (X, y, *read(spec["test_path"]))


def _config_model(path: Path, name: str, spec: dict):
    from bayes_rvm.basis.kernels import check_kernel
    from bayes_rvm.estimators.classifier import RVC
    from bayes_rvm.estimators.regressor import RVR

    spec = dict(spec)
    kind = spec.pop("estimator", "RVR")
    if kind not in _ESTIMATORS:
        raise _config_error(path, f"models.{name}", f"estimator must be RVR or RVC, got {kind!r}")
    cls = {"RVR": RVR, "RVC": RVC}[kind]
    unknown = sorted(set(spec) - set(cls().get_params(deep=False)))
    if unknown:
        raise _config_error(path, f"models.{name}", f"{kind} has no parameters {unknown}")
    model = cls(**spec)
    try:
        # The parameters' values, as fit checks them first: before the study's first fit.
        model._validate_params()
        model._resolve_settings()
        check_kernel(model.kernel)
    except (TypeError, ValueError) as exc:
        raise _config_error(path, f"models.{name}", str(exc)) from None
    return model


def _check_targets(path: Path, models: dict, datasets: dict) -> None:
    """Every model fits every data set: a regressor needs numeric targets and a classifier
    class labels (training and test targets), checked before the first fit."""
    from sklearn.utils.multiclass import type_of_target

    from bayes_rvm.estimators.classifier import RVC

    for dname, data in datasets.items():
        for y in map(np.asarray, data[1::2]):  # the training targets, and the test ones
            kind = type_of_target(y) if y.dtype.kind in "biuf" else "labels"
            first = np.asarray(y.flat[0]).tolist()  # as the file has it, not np.float64(...)
            for mname, model in models.items():
                if isinstance(model, RVC) and kind.startswith("continuous"):
                    message = (
                        f"an RVC fits class labels, and the target of datasets.{dname} is "
                        f'continuous (first value {first!r}); estimator = "RVR" fits it'
                    )
                elif not isinstance(model, RVC) and kind == "labels":
                    message = (
                        f"an RVR fits numeric targets, and the target of datasets.{dname} is "
                        f'text (first value {first!r}); estimator = "RVC" fits class labels'
                    )
                else:
                    continue
                raise _config_error(path, f"models.{mname}", message)


def read_config(path: str | os.PathLike) -> StudyConfig:
    """Read a study from a TOML file.

    The file has a ``[study]`` table (``random_state``, ``store``, ``output``, ``n_jobs``; paths
    relative to the file), one ``[datasets.NAME]`` table per data set and one ``[models.NAME]``
    table per model::

        [study]
        random_state = 0
        store = "sinc_study"          # resumable results
        output = "sinc_study_output"  # study.csv and study.png

        [datasets.sinc]
        source = "sinc"               # or friedman1/2/3, or csv (path, target, features, test_path)
        n_samples = 50
        noise = 0.1
        random_state = 0              # the default for generated data
        n_test = 500                  # held-out points, drawn afresh (sinc: seed random_state + 1)

        [models."ARD w=3"]
        estimator = "RVR"             # the default; RVC for classification
        gamma = 0.111

        [models."MCMC w=3"]
        gamma = 0.111
        inference = "mcmc"
        sampler_config = {draws = 500}

    Every other key of a model table is a constructor parameter of its estimator (a dict
    parameter as an inline table; ``centres = ["random", 100]``).

    Raises
    ------
    ValueError
        Naming the file and the table of any unknown key or bad value.
    """
    import tomllib

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no study configuration at {path}")
    try:
        config = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path} is not valid TOML: {exc}") from None
    unknown = sorted(set(config) - {"study", "datasets", "models"})
    if unknown:
        raise ValueError(f"{path}: unknown tables {unknown} (expected study, datasets, models)")
    study = config.get("study", {})
    if not isinstance(study, dict):
        raise ValueError(f"{path}: study must be a table ([study]), got {study!r}")
    bad = sorted(set(study) - _STUDY_KEYS)
    if bad:
        raise _config_error(path, "study", f"unknown keys {bad}; expected {sorted(_STUDY_KEYS)}")
    for key, kind, what in _STUDY_TYPES:
        if key in study and (not isinstance(study[key], kind) or isinstance(study[key], bool)):
            raise _config_error(path, "study", f"{key} must be {what}, got {study[key]!r}")
    for table in ("datasets", "models"):
        entries = config.get(table)
        if not entries:
            raise ValueError(f"{path}: no [{table}.NAME] tables")
        if not isinstance(entries, dict):
            raise ValueError(f"{path}: {table} must be [{table}.NAME] tables, got {entries!r}")
        for name, spec in entries.items():
            if not isinstance(spec, dict):
                raise _config_error(path, f"{table}.{name}", f"must be a table, got {spec!r}")
    base = path.parent
    output = base / study.get("output", f"{path.stem}_output")
    store = base / study["store"] if "store" in study else None
    # Checked now, not after the fits: a study without a place for its results is lost.
    for key, folder in (("output", output), ("store", store)):
        if folder is not None and folder.exists() and not folder.is_dir():
            raise _config_error(path, "study", f"{key} {folder} is a file, not a folder")
    models = {k: _config_model(path, k, v) for k, v in config["models"].items()}
    datasets = {k: _config_dataset(path, k, v) for k, v in config["datasets"].items()}
    _check_targets(path, models, datasets)
    return StudyConfig(
        models=models,
        datasets=datasets,
        store=store,
        output=output,
        n_jobs=study.get("n_jobs"),
        random_state=study.get("random_state"),
    )
