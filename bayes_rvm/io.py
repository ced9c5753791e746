"""Save and load fitted estimators as xarray DataTrees (netCDF or zarr), checksummed.

A saved model is one DataTree: its root attrs name the estimator class and hold every constructor
parameter as sorted JSON, the feature names seen in ``fit`` and a SHA-256 checksum of everything
else in the tree; ``/basis`` holds the kernel centres; ``/fit`` holds the engine's result (alphas,
noise, posterior mean and precision Cholesky, trace, ...); the groups of the estimator's own
DataTree (``idata_``: ``posterior``, ``log_likelihood``, ...) sit beside them, so the file opens in
ArviZ as it is. Arrays are stored in float64 and come back bit for bit.

What a saved model guarantees:

- :func:`save_model` never destroys anything but an earlier saved model: it refuses to write over
  any other existing path, writes to a temporary path beside the destination, checks that what it
  wrote reads back with the same checksum, and only then renames it into place.
- :func:`load_model` either returns a model whose predictions equal the saved one's bit for bit, or
  raises :class:`ModelFileError` naming the path and what is wrong: unreadable or truncated file,
  checksum mismatch (flipped bytes, a missing zarr chunk that zarr would silently fill, edited
  attributes), missing group or attribute, invalid JSON, or stored state that contradicts itself
  (shapes, counts of centres, outputs and classes, the kernel coefficient).
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

from bayes_rvm.kernels import KernelBasis, resolve_gamma
from bayes_rvm.priors import Prior, decode_params, encode_params

__all__ = [
    "ModelFileError",
    "atomic_write",
    "json_checksum",
    "load_model",
    "read_tree",
    "save_model",
    "to_datatree",
    "write_tree",
]

_FORMAT = "bayes_rvm-model/2"
#: Files of the first format carry no checksum; they still load, with a warning.
_LEGACY_FORMATS = ("bayes_rvm-model/1",)
_BASIS_FITTED = ("gamma_", "n_features_in_", "n_centres_", "n_basis_")
_BASIS_PARAMS = ("kernel", "gamma", "degree", "coef0", "kernel_params", "bias")


class ModelFileError(ValueError):
    """A file or directory that is not a readable, intact bayes_rvm model.

    The message names the path and what is wrong with it.
    """


def _estimators() -> dict:
    from bayes_rvm import estimators

    found = {"RVR": estimators.RVR}
    try:
        from bayes_rvm import classifier
    except ImportError:  # pragma: no cover - classification not installed
        return found
    found["RVC"] = classifier.RVC
    from bayes_rvm import cv

    found.update(RVRCV=cv.RVRCV, RVCCV=cv.RVCCV)
    return found


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
def _json_default(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot canonicalise {type(value).__name__}")


def _canonical_attrs(attrs) -> bytes:
    return json.dumps(dict(attrs), sort_keys=True, default=_json_default).encode()


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
            _feed(h, "var", json.dumps(head, sort_keys=True, default=_json_default), data)
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
            value = _json_attr(ds.attrs, f.name, where)
            kwargs[f.name] = tuple(value) if isinstance(value, list) else value
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ModelFileError(f"{where}: the stored {qualname} lacks its field {f.name!r}")
    return cls(**kwargs)


def _json_attr(attrs, key: str, where: str):
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
    state = model._persisted_state()
    basis: KernelBasis = state["basis"]
    basis_vars = {}
    if basis.centres_ is not None:
        basis_vars["centres"] = (("centre", "feature"), basis.centres_)
    basis_attrs = {k: json.dumps(getattr(basis, k)) for k in _BASIS_FITTED}
    # The basis's own parameters: a width chosen by the evidence is its gamma, not the model's.
    basis_attrs["params"] = json.dumps(
        encode_params({k: getattr(basis, k) for k in _BASIS_PARAMS}),
        sort_keys=True,
        default=_json_default,
    )
    names = getattr(model, "feature_names_in_", None)
    root = xr.Dataset(
        attrs={
            "format": _FORMAT,
            "estimator": type(model).__name__,
            "params": params,
            "extras": json.dumps(state.get("extras", {}), sort_keys=True),
            "feature_names": json.dumps(None if names is None else [str(n) for n in names]),
        }
    )
    groups = {"/": root, "/basis": xr.Dataset(basis_vars, attrs=basis_attrs)}
    fits = state["fit"] if isinstance(state["fit"], list | tuple) else [state["fit"]]
    for k, fit in enumerate(fits):
        groups[f"/fit_{k}" if len(fits) > 1 else "/fit"] = _dataclass_to_dataset(fit)
    root.attrs["n_fits"] = len(fits)
    arrays = state.get("arrays") or {}
    groups["/arrays"] = xr.Dataset({k: _array_variable(k, v) for k, v in arrays.items()})
    idata = state.get("idata")
    if idata is not None:
        for node in idata.children.values():
            groups[f"/{node.name}"] = _text_as_str(node.to_dataset())
        # The fit's own attrs (method, settings, diagnostics) sit on its root.
        root.attrs["idata_attrs"] = json.dumps(
            dict(idata.attrs), sort_keys=True, default=_json_default
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
    classes = _estimators()
    if attrs.get("estimator") not in classes:
        raise ModelFileError(f"{path} holds an unknown estimator {attrs.get('estimator')!r}.")
    cls = classes[attrs["estimator"]]
    params = _json_attr(attrs, "params", str(path))
    if not isinstance(params, dict):
        raise ModelFileError(f"{path}: the stored parameters are not a JSON object")
    params = decode_params(params)
    expected = set(cls().get_params(deep=False))
    if set(params) != expected:
        missing = sorted(expected - set(params))
        unknown = sorted(set(params) - expected)
        raise ModelFileError(
            f"{path} was written with other constructor parameters of {cls.__name__}: "
            f"missing {missing}, unknown {unknown}. Re-fit and save it with this version."
        )
    try:
        model = cls(**params)
        state = _rebuild_state(tree, params, path)
        # A cross-validated twin holds the state of the estimator it refitted.
        _check_state(state, params, getattr(cls, "_template", cls).__name__, path)
        model._restore_state(state)
    except ModelFileError:
        raise
    except Exception as exc:  # whatever else the stored state breaks is a damaged file
        raise ModelFileError(f"{path}: the stored model is inconsistent ({exc})") from exc
    names = state["feature_names"]
    if names is not None:
        model.feature_names_in_ = np.asarray(names, dtype=object)
    return model


def _rebuild_state(tree: xr.DataTree, params: dict, path: Path) -> dict:
    """The estimator state of ``_persisted_state`` from the groups of a saved tree."""
    root = str(path)
    basis_ds = _group(tree, "basis", path)
    # The model's parameters build the basis; only gamma may differ (a width the fit chose).
    from bayes_rvm._base import WIDTH_RULES

    own = {k: params.get(k) for k in _BASIS_PARAMS}
    if "params" in basis_ds.attrs:
        stored = decode_params(_json_attr(basis_ds.attrs, "params", f"{path}:/basis"))
        if not isinstance(stored, dict) or set(stored) != set(_BASIS_PARAMS):
            raise ModelFileError(f"{path}:/basis: the stored parameters are not {_BASIS_PARAMS}")
        # A width rule, a sampled width or a cross-validated twin (no gamma of its own).
        chosen = (
            "gamma" not in params
            or isinstance(params["gamma"], Prior)
            or (isinstance(params["gamma"], str) and params["gamma"] in WIDTH_RULES)
        )
        if not chosen and json.dumps(stored["gamma"], default=_json_default) != json.dumps(
            params["gamma"], default=_json_default
        ):
            raise ModelFileError(
                f"{path}: inconsistent stored model: the basis's gamma {stored['gamma']!r} is "
                f"not the model's {params['gamma']!r}"
            )
        gamma = stored["gamma"]
        # Per-feature coefficients are an array when fitted.
        own["gamma"] = np.asarray(gamma, dtype=np.float64) if isinstance(gamma, list) else gamma
    basis = KernelBasis(**own)
    for key in _BASIS_FITTED:
        setattr(basis, key, _json_attr(basis_ds.attrs, key, f"{path}:/basis"))
    basis.centres_ = basis_ds["centres"].values if "centres" in basis_ds else None
    n_fits = tree.attrs.get("n_fits")
    if not isinstance(n_fits, int | np.integer) or n_fits < 1:
        raise ModelFileError(
            f"{path}: attribute 'n_fits' must be a positive integer, got {n_fits!r}"
        )
    names = ["fit"] if n_fits == 1 else [f"fit_{k}" for k in range(n_fits)]
    fits = [_dataset_to_dataclass(_group(tree, n, path), f"{path}:/{n}") for n in names]
    feature_names = (
        _json_attr(tree.attrs, "feature_names", root) if "feature_names" in tree.attrs else None
    )
    state = {
        "basis": basis,
        "fit": fits[0] if n_fits == 1 else fits,
        "extras": _json_attr(tree.attrs, "extras", root),
        "arrays": {k: _array_values(v) for k, v in _group(tree, "arrays", path).data_vars.items()},
        "feature_names": feature_names,
    }
    reserved = {"basis", "arrays", *names}
    groups = {
        f"/{k}": v.to_dataset(inherit=False) for k, v in tree.children.items() if k not in reserved
    }
    state["idata"] = xr.DataTree.from_dict(groups) if groups else None
    if state["idata"] is not None and "idata_attrs" in tree.attrs:
        state["idata"].attrs.update(_json_attr(tree.attrs, "idata_attrs", root))
    return state


def _check_state(state: dict, params: dict, estimator: str, path: Path) -> None:
    """Check the stored state against itself; raise ModelFileError on the first contradiction."""

    def fail(what: str):
        raise ModelFileError(f"{path}: inconsistent stored model: {what}")

    basis: KernelBasis = state["basis"]
    for key in ("n_features_in_", "n_centres_", "n_basis_"):
        value = getattr(basis, key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            fail(f"basis {key} = {value!r} is not a count")
    if basis.n_basis_ != basis.n_centres_ + int(bool(basis.bias)):
        fail(f"n_basis_ = {basis.n_basis_} but n_centres_ = {basis.n_centres_}, bias={basis.bias}")
    precomputed = basis.kernel == "precomputed"
    if (basis.centres_ is None) != precomputed:
        fail("the kernel centres are missing" if not precomputed else "centres with 'precomputed'")
    if basis.centres_ is not None:
        if basis.centres_.shape != (basis.n_centres_, basis.n_features_in_):
            fail(
                f"centres of shape {basis.centres_.shape} but n_centres_ = {basis.n_centres_}, "
                f"n_features_in_ = {basis.n_features_in_}"
            )
        if not np.all(np.isfinite(basis.centres_)):
            fail("non-finite kernel centres")
    _check_gamma(basis, params, fail)

    fits = state["fit"] if isinstance(state["fit"], list) else [state["fit"]]
    n_out = set()
    for fit in fits:
        _check_fit(fit, basis.n_basis_, fail)
        n_out.add(fit.mean.shape[1])
    extras = state["extras"]
    if not isinstance(extras, dict):
        fail("the extras attribute is not a JSON object")
    if estimator == "RVR":
        _check_regression(state, fits, extras, params, fail)
    elif estimator == "RVC":
        classes = extras.get("classes")
        if not isinstance(classes, list) or len(classes) < 2:
            fail(f"RVC classes {classes!r} are not a list of at least two labels")
        if classes != np.unique(np.asarray(classes)).tolist():
            fail(f"RVC classes {classes!r} are not distinct and sorted")
        C = len(classes)
        if extras.get("ovr"):
            if len(fits) != C or n_out != {1}:
                fail(f"{len(fits)} one-vs-rest fits for {C} classes")
        elif len(fits) != 1 or fits[0].mean.shape[1] != (1 if C == 2 else C):
            fail(f"a fit with {fits[0].mean.shape[1]} outputs for {C} classes")
    names = state["feature_names"]
    if names is not None and (
        not isinstance(names, list)
        or len(names) != basis.n_features_in_
        or not all(isinstance(n, str) for n in names)
    ):
        fail(f"{names!r} are not the names of {basis.n_features_in_} features")


def _check_gamma(basis: KernelBasis, params: dict, fail) -> None:
    from bayes_rvm.kernels import WIDTH_RULES, uses_gamma

    uses = uses_gamma(basis.kernel)
    gamma_ = basis.gamma_
    if not uses:
        if gamma_ is not None:
            fail(f"gamma_ = {gamma_!r} for kernel {basis.kernel!r}, which has no gamma")
        return
    if isinstance(gamma_, list):
        # One coefficient per input feature (rbf / laplacian).
        g = np.asarray(gamma_, dtype=np.float64)
        if g.shape != (basis.n_features_in_,) or not np.all(np.isfinite(g) & (g > 0)):
            fail(f"gamma_ = {gamma_!r} is not one positive number per input feature")
    elif not isinstance(gamma_, float) or not np.isfinite(gamma_) or gamma_ <= 0:
        fail(f"gamma_ = {gamma_!r} is not a positive number")
    if isinstance(basis.gamma, Prior) or (
        isinstance(basis.gamma, str) and basis.gamma in WIDTH_RULES
    ):
        return  # learned by the evidence (also where it seeds a sampled width): nothing to resolve
    # gamma_ is resolved from the training inputs; they are the centres unless a subset was chosen.
    on_inputs = params.get("centres") is None
    if not isinstance(basis.gamma, str) or basis.gamma == "auto" or on_inputs:
        expected = resolve_gamma(basis.gamma, basis.centres_)
        if gamma_ != expected:
            fail(f"gamma_ = {gamma_!r} but gamma={basis.gamma!r} resolves to {expected!r}")


def _check_fit(fit, n_basis: int, fail) -> None:
    alpha, active, mean, chol = fit.alpha, fit.active, fit.mean, fit.chol
    if alpha.shape != (n_basis,):
        fail(f"alphas of shape {alpha.shape} for {n_basis} basis functions")
    if active.ndim != 1 or active.dtype.kind not in "iu":
        fail("the active set is not a vector of indices")
    if active.size and (active.min() < 0 or active.max() >= n_basis):
        fail(f"active indices outside [0, {n_basis})")
    if np.unique(active).size != active.size:
        fail("repeated active indices")
    K = active.size
    if mean.ndim != 2 or mean.shape[0] != K:
        fail(f"posterior mean of shape {mean.shape} for {K} active basis functions")
    # Regression outputs share one posterior precision; a Laplace fit's couples the classes.
    KC = K * mean.shape[1] if fit.likelihood != "gaussian" else K
    if chol.shape != (KC, KC):
        fail(f"precision factor of shape {chol.shape}, expected {(KC, KC)}")
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(chol))):
        fail("non-finite posterior mean or precision factor")
    if np.any(np.diag(chol) <= 0):
        fail("the precision factor is not a Cholesky factor (non-positive diagonal)")
    a = alpha[active]
    # inf or 0 are possible: alphas in the user's units can leave float64's range (unscale_alpha).
    if np.any(np.isnan(a)) or np.any(a < 0):
        fail("active basis functions with alpha that is NaN or negative")
    if fit.likelihood == "gaussian":
        beta = fit.beta
        if not (np.isfinite(beta) and beta > 0):
            fail(f"noise precision beta = {beta!r}")


def _check_regression(state: dict, fits: list, extras: dict, params: dict, fail) -> None:
    if len(fits) != 1:
        fail(f"{len(fits)} fits for a regression model")
    fit = fits[0]
    single = extras.get("single")
    if not isinstance(single, bool):
        fail(f"extras 'single' = {single!r} is not a boolean")
    D = fit.mean.shape[1]
    if single and D != 1:
        fail(f"a single-output model with {D} outputs")
    arrays = state["arrays"]
    phi, y = arrays.get("phi_active"), arrays.get("y")
    if phi is None or y is None:
        fail("the training arrays phi_active and y are missing")
    if (y.ndim == 1) != single or (y.ndim == 2 and y.shape[1] != D):
        fail(f"training targets of shape {y.shape} for {D} output(s) (single={single})")
    if phi.shape != (y.shape[0], fit.active.size):
        fail(
            f"training design of shape {phi.shape} for {y.shape[0]} samples and "
            f"{fit.active.size} active basis functions"
        )
    basis: KernelBasis = state["basis"]
    if params.get("centres") is None and basis.centres_ is not None and phi.size:
        # Without a subset of centres the training inputs are the centres: the stored training
        # design must be the kernel at them, which checks the kernel, its coefficient and the
        # active set against each other.
        expected = basis.transform(basis.centres_, columns=fit.active)
        if not np.allclose(phi, expected, rtol=1e-9, atol=1e-12 * np.abs(expected).max()):
            fail("the stored training design does not match the kernel at the stored centres")
    idata = state["idata"]
    if idata is not None and "posterior" in idata.children:
        from bayes_rvm.dims import BASIS, OUTPUT

        post = idata["posterior"].to_dataset()
        if "w" in post and BASIS in post["w"].dims:
            cols = post[BASIS].values
            if cols.size and (cols.min() < 0 or cols.max() >= basis.n_basis_):
                fail("posterior weights on basis functions that do not exist")
            if post["w"].sizes.get(OUTPUT, 1) != D:
                fail(f"posterior weights for {post['w'].sizes.get(OUTPUT, 1)} outputs, not {D}")
