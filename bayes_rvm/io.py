"""Save and load fitted estimators as xarray DataTrees (netCDF or zarr), checksummed.

A saved model is one DataTree: its root attrs name the estimator class and hold every constructor
parameter as sorted JSON, the feature names seen in ``fit`` and a SHA-256 checksum of everything
else in the tree; ``/basis`` holds the kernel centres; ``/fit`` holds the engine's result (alphas,
noise, posterior mean and precision Cholesky, trace, ...); ``/width_selection`` the width
search's diagnostics (``width_selection_`` without its design), if the fit searched; the
groups of the estimator's own DataTree (``idata_``: ``posterior``, ``log_likelihood``, ...) sit
beside them, so the file opens in ArviZ as it is. Arrays are stored in float64 and come back
bit for bit.

What a saved model guarantees:

- :func:`save_model` never destroys anything but an earlier saved model: it refuses to write over
  any other existing path, writes to a temporary path beside the destination, checks that what it
  wrote reads back with the same checksum, and only then renames it into place.
- :func:`load_model` either returns a model whose predictions equal the saved one's bit for bit, or
  raises :class:`ModelFileError` naming the path and what is wrong: unreadable or truncated file,
  checksum mismatch (flipped bytes, a missing zarr chunk that zarr would silently fill, edited
  attributes), missing group or attribute, invalid JSON, or stored state that contradicts itself
  (shapes, counts of centres, outputs and classes, the kernel coefficient).
- A file written while the MCMC hyperpriors were stated on unit-norm columns (no root attribute
  ``prior_column_scale``) loads with its ``alpha_rel`` restated for the unit-RMS columns of
  today's model graphs (:func:`_restate_alpha_rel`); its ``alpha`` and predictions are as stored.

This module knows the file: the tree, the checksum, the atomic write, the lock and the generic
conversion of a frozen result dataclass to a Dataset and back. What an estimator stores and which
invariants its stored state keeps belong to the estimator, through the saving protocol of
:mod:`bayes_rvm.estimators.persistence`: :func:`to_datatree` calls ``model._saved_state()`` (the
``/basis``
group, the fits, the extras, the training arrays and the DataTree), and :func:`load_model` calls
``cls._from_saved_state(params, state, path)``, which rebuilds the estimator and checks it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import json
import os
import shutil
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import xarray as xr
from sklearn.utils.validation import check_is_fitted

from bayes_rvm.dims import OBS
from bayes_rvm.models.priors import decode_params, encode_params

__all__ = [
    "ModelFileError",
    "atomic_write",
    "json_attr",
    "json_checksum",
    "json_default",
    "load_model",
    "read_tree",
    "save_model",
    "to_datatree",
    "write_json",
    "write_tree",
]

_FORMAT = "bayes_rvm-model/2"
#: Root attribute: the column scale the stored ``alpha_rel`` is relative to. Files written before
#: it (bff6a04 and earlier) stated the hyperpriors on columns of unit Euclidean norm;
#: :func:`_restate_alpha_rel` converts them on load.
_PRIOR_COLUMN_SCALE = ("prior_column_scale", "rms")
#: Group of the width search's diagnostics (``width_selection_``, without its design), the
#: search's fits in its groups ``fit_0``, ``fit_1``, ...; absent from files written before it.
_WIDTH_SELECTION = "width_selection"
#: Files of the first format carry no checksum; they still load, with a warning.
_LEGACY_FORMATS = ("bayes_rvm-model/1",)


class ModelFileError(ValueError):
    """A file or directory that is not a readable, intact bayes_rvm model.

    The message names the path and what is wrong with it.
    """


#: The estimators a model file may hold, by class name (each has the saving protocol above).
_SAVED_ESTIMATORS = ("RVR", "RVC", "RVRCV", "RVCCV")


def _estimator_class(name) -> type | None:
    """The estimator class a file names, or None if it names no estimator of this package."""
    if name not in _SAVED_ESTIMATORS:
        return None
    import bayes_rvm  # its public names resolve on first use: io imports no estimator module

    try:
        return getattr(bayes_rvm, name)
    except ImportError:  # pragma: no cover - classification not installed
        return None


def _params_json(model) -> str:
    params = encode_params(model.get_params(deep=False))
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


# -- content checksum ----------------------------------------------------------------------------
def json_default(value):
    """``json.dumps``'s ``default`` for NumPy arrays and scalars (as lists and numbers)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot canonicalise {type(value).__name__}")


def _canonical_attrs(attrs) -> bytes:
    return json.dumps(dict(attrs), sort_keys=True, default=json_default).encode()


def _feed(h, *parts: bytes | str) -> None:
    # Length-prefixed parts: no two different contents give the same byte stream.
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)


def _checksum(tree: xr.DataTree) -> str:
    """SHA-256 of every group's attrs and every variable's name, dims, dtype, shape and values.

    Computed on the in-memory tree, so that the same model gives the same digest whether it was
    read from netCDF or zarr (the root's own ``checksum`` attr is left out).
    """
    h = hashlib.sha256()
    for node in sorted(tree.subtree, key=lambda n: n.path):
        attrs = dict(node.attrs)
        if node.is_root:
            attrs.pop("checksum", None)
        _feed(h, "group", node.path, _canonical_attrs(attrs))
        ds = node.to_dataset(inherit=False)
        for name in sorted(ds.variables, key=str):
            var = ds.variables[name]
            values = np.asarray(var.values)
            head = {
                "name": str(name),
                "coord": name in ds.coords,
                "dims": list(map(str, var.dims)),
                "shape": list(values.shape),
                "attrs": dict(var.attrs),
            }
            if values.dtype.kind in "OUST":
                # Text comes back as str, bytes or object arrays depending on the format.
                head["dtype"] = "text"
                data = json.dumps([str(v) for v in values.ravel()]).encode()
            else:
                head["dtype"] = values.dtype.str
                data = np.ascontiguousarray(values).tobytes()
            _feed(h, "var", json.dumps(head, sort_keys=True, default=json_default), data)
    return "sha256:" + h.hexdigest()


# -- dataclass <-> Dataset -----------------------------------------------------------------------
def _dataclass_to_dataset(obj, class_key: str = "class") -> xr.Dataset:
    """Arrays and numbers of a frozen result dataclass as variables; the rest as JSON attrs.

    The fields of a field holding a dataclass (the fit's ``posterior``) are stored beside the
    others (their names do not clash), its class under the attribute ``"<field>.class"``.
    """
    data = {}
    attrs = {class_key: f"{type(obj).__module__}:{type(obj).__qualname__}"}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            inner = _dataclass_to_dataset(value, f"{f.name}.class")
            data.update(inner.data_vars)
            attrs.update(inner.attrs)
        elif isinstance(value, np.ndarray):
            data[f.name] = _array_variable(f.name, value)
        elif isinstance(value, bool | np.bool_):
            attrs[f.name] = json.dumps(bool(value))
        elif isinstance(value, int | float | np.integer | np.floating):
            data[f.name] = ((), np.asarray(value))
        else:
            attrs[f.name] = json.dumps(value)
    return xr.Dataset(data, attrs=attrs)


def _array_variable(name: str, value: np.ndarray) -> xr.Variable:
    """An array as a variable that remembers a Fortran memory order.

    netCDF and zarr hand arrays back in C order, but BLAS sums a product in another order for a
    Fortran-ordered operand (a Cholesky factor from LAPACK, a design sliced by columns): without
    the order, a loaded model could predict one ulp away from the fitted one.
    """
    fortran = value.ndim > 1 and value.flags.f_contiguous and not value.flags.c_contiguous
    return xr.Variable(
        [f"{name}_{k}" for k in range(value.ndim)], value, attrs={"order": "F"} if fortran else {}
    )


def _array_values(var: xr.DataArray | xr.Variable) -> np.ndarray:
    """The values of a variable written by :func:`_array_variable`, in their memory order."""
    values = var.values
    return np.asfortranarray(values) if var.attrs.get("order") == "F" else values


def _dataset_to_dataclass(ds: xr.Dataset, where: str, class_key: str = "class"):
    name = ds.attrs.get(class_key)
    module, _, qualname = str(name).partition(":")
    if not module.startswith("bayes_rvm."):
        raise ModelFileError(f"{where}: refusing to rebuild a result of class {name!r}")
    try:
        cls = getattr(importlib.import_module(module), qualname)
    except (ImportError, AttributeError):
        raise ModelFileError(f"{where}: unknown result class {name!r}") from None
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f"{f.name}.class" in ds.attrs:
            kwargs[f.name] = _dataset_to_dataclass(ds, where, f"{f.name}.class")
        elif f.name in ds.data_vars:
            value = _array_values(ds[f.name])
            kwargs[f.name] = value.item() if value.ndim == 0 else value
        elif f.name in ds.attrs:
            value = json_attr(ds.attrs, f.name, where)
            kwargs[f.name] = tuple(value) if isinstance(value, list) else value
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ModelFileError(f"{where}: the stored {qualname} lacks its field {f.name!r}")
    return cls(**kwargs)


def json_attr(attrs, key: str, where: str):
    """The JSON attribute ``key`` decoded, or a ModelFileError naming ``where`` and the fault."""
    if key not in attrs:
        raise ModelFileError(f"{where}: missing attribute {key!r}")
    try:
        return json.loads(attrs[key])
    except (TypeError, ValueError) as exc:
        raise ModelFileError(f"{where}: attribute {key!r} is not valid JSON ({exc})") from None


# -- writing -------------------------------------------------------------------------------------
def to_datatree(model) -> xr.DataTree:
    """The DataTree that :func:`save_model` writes (see the module docstring), with its checksum."""
    check_is_fitted(model, "fit_")
    params = _params_json(model)  # first: it says how to save what JSON cannot hold
    state = model._saved_state()
    names = getattr(model, "feature_names_in_", None)
    root = xr.Dataset(
        attrs={
            "format": _FORMAT,
            "estimator": type(model).__name__,
            "params": params,
            "extras": json.dumps(state.get("extras", {}), sort_keys=True),
            "feature_names": json.dumps(None if names is None else [str(n) for n in names]),
            _PRIOR_COLUMN_SCALE[0]: _PRIOR_COLUMN_SCALE[1],
        }
    )
    groups = {"/": root, "/basis": state["basis"]}
    fits = state["fit"] if isinstance(state["fit"], list | tuple) else [state["fit"]]
    for k, fit in enumerate(fits):
        groups[f"/fit_{k}" if len(fits) > 1 else "/fit"] = _dataclass_to_dataset(fit)
    root.attrs["n_fits"] = len(fits)
    arrays = state.get("arrays") or {}
    groups["/arrays"] = xr.Dataset({k: _array_variable(k, v) for k, v in arrays.items()})
    search = state.get("width_selection")
    if search is not None:  # the width search's diagnostics, its fits below
        extras = json.dumps(search["extras"], sort_keys=True)
        groups[f"/{_WIDTH_SELECTION}"] = xr.Dataset(attrs={"extras": extras})
        for k, fit in enumerate(search["fit"]):
            groups[f"/{_WIDTH_SELECTION}/fit_{k}"] = _dataclass_to_dataset(fit)
    idata = state.get("idata")
    if idata is not None:
        for node in idata.children.values():
            groups[f"/{node.name}"] = _text_as_str(node.to_dataset())
        # The fit's own attrs (method, settings, diagnostics) sit on its root.
        root.attrs["idata_attrs"] = json.dumps(
            dict(idata.attrs), sort_keys=True, default=json_default
        )
    tree = xr.DataTree.from_dict(groups)
    tree.attrs["checksum"] = _checksum(tree)
    return tree


def _text_as_str(ds: xr.Dataset) -> xr.Dataset:
    """Object arrays (a sampler's messages: text or None) as text, None as "".

    netCDF and zarr would turn an all-None array into NaN floats, and a mixed one into text: the
    file would not read back as it was written.
    """
    objects = {
        name: var.copy(
            data=np.array(["" if v is None else str(v) for v in var.values.ravel()]).reshape(
                var.shape
            )
        )
        for name, var in ds.variables.items()
        if var.dtype == object
    }
    return ds.assign(objects) if objects else ds


def _engine(path: Path) -> str:
    return "h5netcdf" if path.suffix in (".nc", ".nc4", ".h5") else "zarr"


def _read_tree(path: Path, what: str = "a bayes_rvm model") -> xr.DataTree:
    try:
        engine = _engine(path)
        kwargs = {"consolidated": False} if engine == "zarr" else {}
        tree = xr.load_datatree(path, engine=engine, **kwargs)  # read whole, file closed
    except Exception as exc:  # any reader failure means a damaged or foreign file
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise ModelFileError(f"could not read {what} from {path}: {detail}") from exc
    return tree


def _is_saved_model(path: Path) -> bool:
    """Whether ``path`` holds something :func:`save_model` wrote (and so may be replaced)."""
    try:
        engine = _engine(path)
        kwargs = {"consolidated": False} if engine == "zarr" else {}
        with xr.open_datatree(path, engine=engine, **kwargs) as tree:
            fmt = tree.attrs.get("format")
    except Exception:  # unreadable: not ours
        return False
    return fmt == _FORMAT or fmt in _LEGACY_FORMATS


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def _path_lock(path: Path):
    """Hold an exclusive lock for replacing ``path``: on its folder (POSIX), else a lock file.

    Writers of one path take turns at the moment they replace it, so that none of them sees
    another's half-done swap (the critical section is a check and two renames). The operating
    system releases the lock of a process that dies. Locking the folder leaves no lock file
    beside the user's files; Windows cannot lock a folder and uses ``.<name>.lock``.
    """
    if os.name == "nt":  # pragma: no cover - Windows
        import msvcrt

        with open(path.parent / f".{path.name}.lock", "a+b") as handle:
            while True:
                try:  # LK_LOCK gives up after 10 s while the other writer is still busy
                    msvcrt.locking(handle.fileno(), msvcrt.LK_LOCK, 1)
                    break
                except OSError:
                    continue
            try:
                yield
            finally:
                msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)
        return
    import fcntl

    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def atomic_write(
    path: str | Path,
    write: Callable[[Path], None],
    *,
    check: Callable[[Path], None] | None = None,
    guard: Callable[[], None] | None = None,
) -> Path:
    """Write ``path`` through a temporary path beside it and a rename: never half a file.

    Parameters
    ----------
    path : str or Path
        Destination: a file, or a folder (zarr). An existing one is replaced.
    write : callable
        ``write(tmp)`` writes the content to the temporary path ``tmp`` (same suffix as ``path``).
    check : callable, optional
        ``check(tmp)`` runs after ``write``: raise to abandon the write (``path`` untouched).
    guard : callable, optional
        Runs under the lock just before the rename: raise to keep what is at ``path``.

    Returns
    -------
    Path

    Notes
    -----
    Concurrent writers of one path (threads or processes) all succeed and the last one's content
    wins: the renames take turns under a lock on the path (:func:`_path_lock`). A file is
    replaced in one rename; a folder is not, so its readers take the lock too (as
    :func:`load_model` does) to see one complete content or the other: the old folder is moved
    aside first, and back if the second rename fails.
    """
    path = Path(path)
    parent = path.parent
    if not parent.is_dir():
        raise FileNotFoundError(f"cannot write {path}: folder {parent} does not exist.")
    # Same suffix, hence the same format; a dot name keeps it out of listings.
    tmp = parent / f".{path.stem}.tmp-{uuid.uuid4().hex[:12]}{path.suffix}"
    try:
        write(tmp)
        if check is not None:
            check(tmp)
        with _path_lock(path):
            if guard is not None:
                guard()
            if tmp.is_dir() and path.exists():
                old = parent / f".{path.name}.old-{uuid.uuid4().hex[:12]}"
                os.replace(path, old)
                try:
                    os.replace(tmp, path)
                except BaseException:
                    os.replace(old, path)
                    raise
                _remove(old)
            else:
                if path.is_dir() and not path.is_symlink():
                    _remove(path)  # an earlier zarr model saved under a netCDF name
                os.replace(tmp, path)
    finally:
        _remove(tmp)
    return path


def json_checksum(obj) -> str:
    """SHA-256 of a JSON-able object in canonical form (sorted keys): what a stored row carries."""
    return "sha256:" + hashlib.sha256(_canonical_attrs(obj)).hexdigest()


def write_json(path: str | Path, data: dict) -> Path:
    """Write ``data`` as JSON with its :func:`json_checksum` under ``"checksum"``, atomically.

    A reader pops ``"checksum"`` and compares it with :func:`json_checksum` of the rest (a study's
    settings and rows are written so).
    """
    text = json.dumps({**data, "checksum": json_checksum(data)}, indent=1, sort_keys=True)
    return atomic_write(path, lambda tmp: tmp.write_text(text))


def write_tree(tree: xr.DataTree, path: str | Path) -> str:
    """Write a DataTree with its checksum (netCDF for ``.nc``, else zarr), atomically.

    The tree is written with a ``checksum`` root attribute (:func:`_checksum`), read back and
    compared before it is renamed into place (:func:`atomic_write`). ``tree`` is not modified.

    Returns
    -------
    str
        The checksum, which :func:`read_tree` checks.
    """
    path = Path(path)
    groups = {node.path: _text_as_str(node.to_dataset(inherit=False)) for node in tree.subtree}
    out = xr.DataTree.from_dict(groups)
    out.attrs = {k: v for k, v in tree.attrs.items() if k != "checksum"}
    out.attrs["checksum"] = checksum = _checksum(out)

    def write(tmp: Path) -> None:
        if _engine(path) == "zarr":
            out.to_zarr(tmp, mode="w-", consolidated=False)
        else:
            out.to_netcdf(tmp, engine="h5netcdf")

    def check(tmp: Path) -> None:
        if _checksum(_read_tree(tmp)) != checksum:  # pragma: no cover - a bug of ours
            raise RuntimeError(f"the DataTree written to {tmp} does not read back identically")

    atomic_write(path, write, check=check)
    return checksum


def read_tree(path: str | Path, checksum: str | None = None) -> xr.DataTree:
    """Read a DataTree written by :func:`write_tree`, checked against its checksum.

    Parameters
    ----------
    path : str or Path
    checksum : str, optional
        The checksum the tree must have (recorded elsewhere, e.g. in a study's row); by default
        the one in its own ``checksum`` attribute.

    Returns
    -------
    xarray.DataTree
        Without the ``checksum`` attribute.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ModelFileError
        Naming ``path``: unreadable, truncated, or its content does not match the checksum.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no stored DataTree at {path}")
    tree = _read_tree(path, "a stored DataTree")
    stored = tree.attrs.pop("checksum", None)
    if stored is None:
        raise ModelFileError(f"{path}: the checksum attribute is missing")
    actual = _checksum(tree)
    if actual != stored or (checksum is not None and actual != checksum):
        raise ModelFileError(
            f"{path} is damaged: its content does not match its checksum (changed or missing "
            "data, e.g. a flipped byte or an edited attribute)"
        )
    return tree


def _check_destination(path: Path, overwrite: bool) -> None:
    if path.exists() or path.is_symlink():
        if not _is_saved_model(path):
            raise FileExistsError(
                f"{path} exists and is not a bayes_rvm model; refusing to write over it. "
                "Choose a new path (a name ending in .nc for netCDF, any other for zarr)."
            )
        if not overwrite:
            raise FileExistsError(f"{path} already holds a saved model and overwrite=False.")


def save_model(model, path: str | Path, *, overwrite: bool = True) -> Path:
    """Write a fitted estimator to ``path``: netCDF for ``.nc``, otherwise a zarr store.

    The model is written to a temporary path beside ``path``, read back and checked against its
    checksum, and only then renamed to ``path``; an interrupted save leaves the old file whole.
    Concurrent saves to one path (from threads or processes) all succeed and the last one wins;
    none leaves a broken model (:func:`atomic_write`).

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
        If a constructor parameter (a callable kernel, say) cannot be stored.
    """
    path = Path(path)
    if path.parent.is_dir():
        with _path_lock(path):  # not while another save swaps it: its folder may be mid-move
            _check_destination(path, overwrite)
    tree = to_datatree(model)

    def write(tmp: Path) -> None:
        if _engine(path) == "zarr":
            tree.to_zarr(tmp, mode="w-", consolidated=False)
        else:
            tree.to_netcdf(tmp, engine="h5netcdf")

    def check(tmp: Path) -> None:
        if _checksum(_read_tree(tmp)) != tree.attrs["checksum"]:  # pragma: no cover - a bug
            raise RuntimeError(f"the model written to {tmp} does not read back identically")

    return atomic_write(path, write, check=check, guard=lambda: _check_destination(path, overwrite))


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
        damaged (checksum mismatch), incomplete, inconsistent, or written with other constructor
        parameters (by another version).
    """
    path = Path(path)
    # Not while a save swaps a zarr folder (it is briefly elsewhere). A folder one may only read
    # can still be locked; Windows cannot lock one, and reads without.
    with _path_lock(path) if os.name != "nt" and path.parent.is_dir() else contextlib.nullcontext():
        if not path.exists():
            raise FileNotFoundError(f"no saved model at {path}")
        tree = _read_tree(path)
    attrs = tree.attrs
    fmt = attrs.get("format")
    if fmt != _FORMAT and fmt not in _LEGACY_FORMATS:
        raise ModelFileError(f"{path} is not a bayes_rvm model file (format {fmt!r}).")
    if fmt == _FORMAT:
        stored = attrs.get("checksum")
        if stored is None:
            raise ModelFileError(f"{path}: the checksum attribute is missing")
        if _checksum(tree) != stored:
            raise ModelFileError(
                f"{path} is damaged: its content does not match its checksum (changed or "
                "missing data, e.g. a flipped byte, a lost zarr chunk or an edited attribute)"
            )
    else:
        warnings.warn(
            f"{path} was written in the older format {fmt!r} without a checksum: its integrity "
            "cannot be verified. Save it again to add one.",
            UserWarning,
            stacklevel=2,
        )
    cls = _estimator_class(attrs.get("estimator"))
    if cls is None:
        raise ModelFileError(f"{path} holds an unknown estimator {attrs.get('estimator')!r}.")
    params = json_attr(attrs, "params", str(path))
    if not isinstance(params, dict):
        raise ModelFileError(f"{path}: the stored parameters are not a JSON object")
    # A parameter added after the file was written takes the value that behaves as before.
    params = {**getattr(cls, "added_parameters", {}), **decode_params(params)}
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
    basis_ds = _group(tree, "basis", path)
    n_fits = tree.attrs.get("n_fits")
    if not isinstance(n_fits, int | np.integer) or n_fits < 1:
        raise ModelFileError(
            f"{path}: attribute 'n_fits' must be a positive integer, got {n_fits!r}"
        )
    names = ["fit"] if n_fits == 1 else [f"fit_{k}" for k in range(n_fits)]
    fits = [_dataset_to_dataclass(_group(tree, n, path), f"{path}:/{n}") for n in names]
    feature_names = (
        json_attr(tree.attrs, "feature_names", root) if "feature_names" in tree.attrs else None
    )
    state = {
        "basis": basis_ds,
        "fit": fits[0] if n_fits == 1 else fits,
        "extras": json_attr(tree.attrs, "extras", root),
        "arrays": {k: _array_values(v) for k, v in _group(tree, "arrays", path).data_vars.items()},
        "feature_names": feature_names,
    }
    state["width_selection"] = _read_width_selection(tree, path)
    reserved = {"basis", "arrays", _WIDTH_SELECTION, *names}
    groups = {
        f"/{k}": v.to_dataset(inherit=False) for k, v in tree.children.items() if k not in reserved
    }
    state["idata"] = xr.DataTree.from_dict(groups) if groups else None
    if state["idata"] is not None and "idata_attrs" in tree.attrs:
        state["idata"].attrs.update(json_attr(tree.attrs, "idata_attrs", root))
    scale = tree.attrs.get(_PRIOR_COLUMN_SCALE[0])
    if scale is None and state["idata"] is not None:
        state["idata"] = _restate_alpha_rel(state["idata"], state["arrays"], path)
    elif scale is not None and scale != _PRIOR_COLUMN_SCALE[1]:
        raise ModelFileError(f"{path}: unknown prior_column_scale {scale!r}")
    return state


def _read_width_selection(tree: xr.DataTree, path: Path) -> dict | None:
    """The ``/width_selection`` group as :func:`to_datatree` wrote it; None if absent (files
    written before it was saved, or fits that searched no width)."""
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
            _dataset_to_dataclass(node[f"fit_{k}"].to_dataset(inherit=False), f"{where}/fit_{k}")
            for k in range(n)
        ],
    }


def _restate_alpha_rel(idata: xr.DataTree, arrays: dict, path: Path) -> xr.DataTree:
    """The DataTree of a file whose ``alpha_rel`` is on unit-norm columns, on unit-RMS ones.

    Such files were written while the hyperpriors were stated on columns of unit Euclidean norm:
    ``alpha = alpha_rel ||phi||^2 / y_scale^2 = (N alpha_rel) rms(phi)^2 / y_scale^2``
    (:func:`bayes_rvm.evidence.problem.prior_column_scale`), N the training rows. Every group's
    ``alpha_rel`` (posterior, prior, warmup, a type-II tree) is multiplied by N and the
    ``constant_data`` column scale divided by sqrt(N), so that the loaded estimator's graphs give
    the stored ``alpha`` at the stored draws; ``alpha`` itself, hence every prediction, is as
    stored. Densities recorded by the sampler (``sample_stats``' ``logp``, a variational loss)
    stay those of the old hyperprior.
    """
    groups = {node.path: node.to_dataset(inherit=False) for node in idata.subtree}
    if not any("alpha_rel" in ds for ds in groups.values()):
        return idata
    n = _training_rows(arrays, groups)
    if n is None:
        raise ModelFileError(
            f"{path}: alpha_rel is stored on unit-norm columns (a file of an earlier version) "
            "and the file holds no training rows to restate it by; re-fit and save it again."
        )
    for name, ds in groups.items():
        if "alpha_rel" in ds:
            ds = ds.assign(alpha_rel=ds["alpha_rel"] * n)
        if name == "/constant_data" and "phi_scale" in ds:
            ds = ds.assign(phi_scale=ds["phi_scale"] / np.sqrt(n))
        groups[name] = ds
    out = xr.DataTree.from_dict(groups)
    out.attrs.update(idata.attrs)
    return out


def _training_rows(arrays: dict, groups: dict) -> int | None:
    """The number of training rows of a stored model, or None if it stores no trace of them."""
    for name in ("x_train", "kernel_matrix"):
        if name in arrays:
            return int(arrays[name].shape[0])
    if "statistics_n" in arrays:
        return int(arrays["statistics_n"])
    observed = groups.get("/observed_data")
    if observed is not None and "y" in observed and OBS in observed["y"].dims:
        return int(observed["y"].sizes[OBS])
    return None
