"""Save and load fitted estimators as xarray DataTrees (netCDF or zarr), checksummed.

A saved model is one DataTree: its root attrs name the estimator by its short name in
:data:`MODEL_TYPES` and hold every constructor parameter as sorted JSON, the feature names seen
in ``fit`` and a SHA-256 checksum of everything else in the tree; ``/basis`` holds the kernel
centres; ``/fit`` holds the engine's result (alphas, noise, posterior mean and precision
Cholesky, trace, ...); ``/width_selection`` the width search's diagnostics (``width_selection_``
without its design), if the fit searched; the groups of the estimator's own DataTree
(``idata_``: ``posterior``, ``log_likelihood``, ...) sit beside them, so the file opens in ArviZ
as it is. Arrays are stored in float64 and come back bit for bit. No attribute holds a module
path: estimators and results are named by short names, so that moving a class breaks no file.

:func:`load_model` either returns a model whose predictions equal the saved one's bit for bit, or
raises :class:`~bayes_rvm.io.ModelFileError` naming the path and what is wrong: what
:func:`bayes_rvm.io.read_model_tree` refuses (unreadable or truncated file, a file of another
format, a checksum mismatch), a missing group or attribute, invalid JSON, or stored state that
contradicts itself (shapes, counts of centres, outputs and classes, the kernel coefficient).

:mod:`bayes_rvm.io` knows the file; this module knows which estimators a file may hold and puts
their state into the tree and back through the saving protocol of
:mod:`bayes_rvm.estimators.persistence`: :func:`to_datatree` calls ``model._saved_state()`` (the
``/basis`` group, the fits, the extras, the training arrays and the DataTree), and
:func:`load_model` calls ``cls._from_saved_state(params, state, path)``, which rebuilds the
estimator and checks it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import xarray as xr
from sklearn.utils.validation import check_is_fitted

from bayes_rvm.estimators.classifier import RVC
from bayes_rvm.estimators.cv import RVCCV, RVRCV
from bayes_rvm.estimators.regressor import RVR
from bayes_rvm.io import (
    FORMAT,
    ModelFileError,
    array_values,
    array_variable,
    dataclass_to_dataset,
    dataset_to_dataclass,
    json_attr,
    json_default,
    read_model_tree,
    text_as_str,
    tree_checksum,
    write_model_tree,
)
from bayes_rvm.models.priors import decode_params, encode_params

__all__ = ["MODEL_TYPES", "load_model", "model_type", "save_model", "to_datatree"]

#: The estimators a model file may hold, by the short name its root attribute ``estimator``
#: stores (pymc-marketing's ``_model_type``). A name is changed only with a bump of the format.
MODEL_TYPES: dict[str, type] = {"RVR": RVR, "RVC": RVC, "RVRCV": RVRCV, "RVCCV": RVCCV}
_TYPE_NAMES = {cls: name for name, cls in MODEL_TYPES.items()}

#: Group of the width search's diagnostics (``width_selection_``, without its design), the
#: search's fits in its groups ``fit_0``, ``fit_1``, ...; absent where the fit searched no width.
_WIDTH_SELECTION = "width_selection"


def model_type(cls: type) -> str | None:
    """The short name a file stores for estimator class ``cls``; None if no file may hold it.

    A subclass is not its parent: a file of it would load as the parent.
    """
    return _TYPE_NAMES.get(cls)


def _params_json(model) -> str:
    params = type(model)._params_to_file(encode_params(model.get_params(deep=False)))
    for name, value in params.items():
        try:
            json.dumps(value)
        except TypeError:
            raise TypeError(
                f"parameter {name}={value!r} of {type(model).__name__} cannot be written to a "
                "netCDF/zarr file (only strings, numbers, None, lists and dicts can); save the "
                "model with pickle instead."
            ) from None
    return json.dumps(params, sort_keys=True)


# -- writing -------------------------------------------------------------------------------------
def to_datatree(model) -> xr.DataTree:
    """The DataTree that :func:`save_model` writes (see the module docstring), with its checksum.

    Raises
    ------
    TypeError
        If ``model`` is not of a class in :data:`MODEL_TYPES`, or a constructor parameter (a
        callable kernel, say) cannot be stored.
    """
    kind = model_type(type(model))
    if kind is None:
        raise TypeError(
            f"cannot save a {type(model).__name__}: a model file holds one of "
            f"{sorted(MODEL_TYPES)}; save it with pickle instead."
        )
    check_is_fitted(model, "fit_")
    params = _params_json(model)  # first: it says how to save what JSON cannot hold
    state = model._saved_state()
    names = getattr(model, "feature_names_in_", None)
    root = xr.Dataset(
        attrs={
            "format": FORMAT,
            "estimator": kind,
            "params": params,
            "extras": json.dumps(state.get("extras", {}), sort_keys=True),
            "feature_names": json.dumps(None if names is None else [str(n) for n in names]),
        }
    )
    groups = {"/": root, "/basis": state["basis"]}
    fits = state["fit"] if isinstance(state["fit"], list | tuple) else [state["fit"]]
    for k, fit in enumerate(fits):
        groups[f"/fit_{k}" if len(fits) > 1 else "/fit"] = dataclass_to_dataset(fit)
    root.attrs["n_fits"] = len(fits)
    arrays = state.get("arrays") or {}
    groups["/arrays"] = xr.Dataset({k: array_variable(k, v) for k, v in arrays.items()})
    search = state.get("width_selection")
    if search is not None:  # the width search's diagnostics, its fits below
        extras = json.dumps(search["extras"], sort_keys=True)
        groups[f"/{_WIDTH_SELECTION}"] = xr.Dataset(attrs={"extras": extras})
        for k, fit in enumerate(search["fit"]):
            groups[f"/{_WIDTH_SELECTION}/fit_{k}"] = dataclass_to_dataset(fit)
    idata = state.get("idata")
    if idata is not None:
        for node in idata.children.values():
            groups[f"/{node.name}"] = text_as_str(node.to_dataset())
        # The fit's own attrs (method, settings, diagnostics) sit on its root.
        root.attrs["idata_attrs"] = json.dumps(
            dict(idata.attrs), sort_keys=True, default=json_default
        )
    tree = xr.DataTree.from_dict(groups)
    tree.attrs["checksum"] = tree_checksum(tree)
    return tree


def save_model(model, path: str | Path, *, overwrite: bool = True) -> Path:
    """Write a fitted estimator to ``path``: netCDF for ``.nc``, otherwise a zarr store.

    The model is written to a temporary path beside ``path`` and only then renamed to ``path``;
    an interrupted save leaves the old file whole, and :func:`load_model` checks the checksum.
    Concurrent saves to one path (from threads or processes) all succeed and the last one wins;
    none leaves a broken model (:func:`bayes_rvm.io.atomic_write`).

    Parameters
    ----------
    model : RVR, RVC, RVRCV or RVCCV
        A fitted estimator whose parameters are JSON-serialisable (named kernels, numbers).
    path : str or Path
        Destination. An existing path is replaced only if it holds a model written by
        :func:`save_model` (and ``overwrite`` is True); anything else there is left untouched.
    overwrite : bool, default=True
        Replace an earlier saved model at ``path``.

    Returns
    -------
    Path

    Raises
    ------
    FileExistsError
        If ``path`` exists and is not a saved model, or is one and ``overwrite`` is False.
    TypeError
        If ``model`` is of another class, or a constructor parameter (a callable kernel, say)
        cannot be stored.
    """
    return write_model_tree(to_datatree(model), path, overwrite=overwrite)


# -- reading -------------------------------------------------------------------------------------
def _group(tree: xr.DataTree, name: str, path: Path) -> xr.Dataset:
    if name not in tree.children:
        raise ModelFileError(f"{path}: the group '/{name}' is missing")
    return tree[name].to_dataset(inherit=False)


def load_model(path: str | Path):
    """Read an estimator written by :func:`save_model`; predictions equal the original's exactly.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ModelFileError
        A :class:`ValueError` naming the path and the fault: not a readable bayes_rvm model,
        written by another version of bayes_rvm (in another format: re-fit and save it again),
        damaged (checksum mismatch), incomplete, inconsistent, or written with other
        constructor parameters.
    """
    path = Path(path)
    tree = read_model_tree(path)
    attrs = tree.attrs
    name = attrs.get("estimator")
    cls = MODEL_TYPES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ModelFileError(
            f"{path} holds an unknown estimator {name!r} (this version reads {sorted(MODEL_TYPES)})"
        )
    params = json_attr(attrs, "params", str(path))
    if not isinstance(params, dict):
        raise ModelFileError(f"{path}: the stored parameters are not a JSON object")
    try:
        params = cls._params_from_file(decode_params(params))
    except (TypeError, ValueError) as exc:
        raise ModelFileError(f"{path}: the stored parameters are inconsistent ({exc})") from exc
    centres = params.get("centres")
    if isinstance(centres, list) and len(centres) == 2 and isinstance(centres[0], str):
        params["centres"] = tuple(centres)  # ("random", n) or ("kmeans", n), as JSON keeps it
    expected = set(cls().get_params(deep=False))
    if set(params) != expected:
        missing = sorted(expected - set(params))
        unknown = sorted(set(params) - expected)
        raise ModelFileError(
            f"{path} was written with other constructor parameters of {cls.__name__}: "
            f"missing {missing}, unknown {unknown}. Re-fit and save it with this version."
        )
    try:
        state = _read_state(tree, path)
        model = cls._from_saved_state(params, state, path)
    except ModelFileError:
        raise
    except Exception as exc:  # whatever else the stored state breaks is a damaged file
        raise ModelFileError(f"{path}: the stored model is inconsistent ({exc})") from exc
    names = state["feature_names"]
    if names is not None:
        model.feature_names_in_ = np.asarray(names, dtype=object)
    return model


def _read_state(tree: xr.DataTree, path: Path) -> dict:
    """The groups of a saved tree as the state :meth:`_from_saved_state` rebuilds a model from.

    ``basis`` is the ``/basis`` group as it is; the fits are rebuilt as their dataclasses.
    """
    root = str(path)
    n_fits = tree.attrs.get("n_fits")
    if not isinstance(n_fits, int | np.integer) or n_fits < 1:
        raise ModelFileError(
            f"{path}: attribute 'n_fits' must be a positive integer, got {n_fits!r}"
        )
    names = ["fit"] if n_fits == 1 else [f"fit_{k}" for k in range(n_fits)]
    fits = [dataset_to_dataclass(_group(tree, n, path), f"{path}:/{n}") for n in names]
    state = {
        "basis": _group(tree, "basis", path),
        "fit": fits[0] if n_fits == 1 else fits,
        "extras": json_attr(tree.attrs, "extras", root),
        "arrays": {k: array_values(v) for k, v in _group(tree, "arrays", path).data_vars.items()},
        "feature_names": json_attr(tree.attrs, "feature_names", root),
        "width_selection": _read_width_selection(tree, path),
    }
    reserved = {"basis", "arrays", _WIDTH_SELECTION, *names}
    groups = {
        f"/{k}": v.to_dataset(inherit=False) for k, v in tree.children.items() if k not in reserved
    }
    state["idata"] = xr.DataTree.from_dict(groups) if groups else None
    if state["idata"] is not None and "idata_attrs" in tree.attrs:
        state["idata"].attrs.update(json_attr(tree.attrs, "idata_attrs", root))
    return state


def _read_width_selection(tree: xr.DataTree, path: Path) -> dict | None:
    """The ``/width_selection`` group as :func:`to_datatree` wrote it; None if the fit searched
    no width (no such group)."""
    if _WIDTH_SELECTION not in tree.children:
        return None
    node = tree[_WIDTH_SELECTION]
    where = f"{path}:/{_WIDTH_SELECTION}"
    n = len(node.children)
    if set(node.children) != {f"fit_{k}" for k in range(n)}:
        raise ModelFileError(f"{where}: groups {sorted(node.children)} are not fit_0, fit_1, ...")
    return {
        "extras": json_attr(node.attrs, "extras", where),
        "fit": [
            dataset_to_dataclass(node[f"fit_{k}"].to_dataset(inherit=False), f"{where}/fit_{k}")
            for k in range(n)
        ],
    }
