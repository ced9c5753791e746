"""The model file format: checksummed xarray DataTrees (netCDF or zarr), written atomically.

This module knows the file and nothing of estimators: the tree's checksum, the atomic write and
the lock, the format tag, JSON helpers, and the conversion of a frozen result dataclass to a
Dataset and back through a registry of result kinds by short name (:data:`RESULT_KINDS`). A
file names its classes only by those short names, never by a module path, so that moving a class
breaks no file. What an estimator stores, and the estimators a file may hold, belong to
:mod:`bayes_rvm.estimators.saving` (``save_model``, ``load_model``, ``to_datatree``).

What a model file guarantees (:func:`write_model_tree`, :func:`read_model_tree`):

- it never destroys anything but an earlier saved model: the writer refuses to write over any
  other existing path, writes to a temporary path beside the destination, and only then renames
  it into place;
- a reader gets the tree whole and as written, or a :class:`ModelFileError` naming the path and
  the fault: unreadable or truncated file, another format (a file of another version of
  bayes_rvm is refused, naming its format and this version's: re-fit and save it again), or a
  checksum mismatch (flipped bytes, a missing zarr chunk that zarr would silently fill, edited
  attributes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import xarray as xr

from bayes_rvm.evidence.result import EvidenceFit, GaussianWeights, LaplaceWeights
from bayes_rvm.evidence.student_t import StudentTWeights

__all__ = [
    "FORMAT",
    "RESULT_KINDS",
    "ModelFileError",
    "array_values",
    "array_variable",
    "atomic_write",
    "dataclass_to_dataset",
    "dataset_to_dataclass",
    "json_attr",
    "json_checksum",
    "json_default",
    "read_model_tree",
    "read_tree",
    "text_as_str",
    "tree_checksum",
    "write_json",
    "write_model_tree",
    "write_tree",
]

#: The root attribute ``format`` of a model file. Bumped when a file of the previous format would
#: not read back as it was written; files of any other format are refused, not converted.
FORMAT = "bayes_rvm-model/4"
_FORMAT_FAMILY = "bayes_rvm-model/"

#: The result dataclasses a model file may hold, by the short name it stores as their ``kind``
#: (never a module path). A kind is renamed only with a bump of :data:`FORMAT`.
RESULT_KINDS: dict[str, type] = {
    "EvidenceFit": EvidenceFit,
    "GaussianWeights": GaussianWeights,
    "LaplaceWeights": LaplaceWeights,
    "StudentTWeights": StudentTWeights,
}
_KIND_NAMES = {cls: name for name, cls in RESULT_KINDS.items()}


class ModelFileError(ValueError):
    """A file or directory that is not a readable, intact bayes_rvm model.

    The message names the path and what is wrong with it.
    """


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


def tree_checksum(tree: xr.DataTree) -> str:
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
def dataclass_to_dataset(obj, kind_key: str = "kind") -> xr.Dataset:
    """Arrays and numbers of a frozen result dataclass as variables; the rest as JSON attrs.

    The attribute ``kind_key`` holds the result's short name in :data:`RESULT_KINDS`. The fields
    of a field holding a dataclass (the fit's ``posterior``) are stored beside the others (their
    names do not clash), its kind under the attribute ``"<field>.kind"``.

    Raises
    ------
    TypeError
        If ``obj`` is not of a kind in :data:`RESULT_KINDS`.
    """
    kind = _KIND_NAMES.get(type(obj))
    if kind is None:  # a result class of ours that nobody registered
        raise TypeError(
            f"{type(obj).__name__} is not a result kind a model file holds ({sorted(RESULT_KINDS)})"
        )
    data = {}
    attrs = {kind_key: kind}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            inner = dataclass_to_dataset(value, f"{f.name}.kind")
            data.update(inner.data_vars)
            attrs.update(inner.attrs)
        elif isinstance(value, np.ndarray):
            data[f.name] = array_variable(f.name, value)
        elif isinstance(value, bool | np.bool_):
            attrs[f.name] = json.dumps(bool(value))
        elif isinstance(value, int | float | np.integer | np.floating):
            data[f.name] = ((), np.asarray(value))
        else:
            attrs[f.name] = json.dumps(value)
    return xr.Dataset(data, attrs=attrs)


def array_variable(name: str, value: np.ndarray) -> xr.Variable:
    """An array as a variable that remembers a Fortran memory order.

    netCDF and zarr hand arrays back in C order, but BLAS sums a product in another order for a
    Fortran-ordered operand (a Cholesky factor from LAPACK, a design sliced by columns): without
    the order, a loaded model could predict one ulp away from the fitted one.
    """
    fortran = value.ndim > 1 and value.flags.f_contiguous and not value.flags.c_contiguous
    return xr.Variable(
        [f"{name}_{k}" for k in range(value.ndim)], value, attrs={"order": "F"} if fortran else {}
    )


def array_values(var: xr.DataArray | xr.Variable) -> np.ndarray:
    """The values of a variable written by :func:`array_variable`, in their memory order."""
    values = var.values
    return np.asfortranarray(values) if var.attrs.get("order") == "F" else values


def dataset_to_dataclass(ds: xr.Dataset, where: str, kind_key: str = "kind"):
    """The result :func:`dataclass_to_dataset` stored; a ModelFileError naming ``where`` if the
    kind is unknown or a field without a default is missing."""
    name = ds.attrs.get(kind_key)
    cls = RESULT_KINDS.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ModelFileError(
            f"{where}: unknown result kind {name!r} (this version reads {sorted(RESULT_KINDS)})"
        )
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f"{f.name}.kind" in ds.attrs:
            kwargs[f.name] = dataset_to_dataclass(ds, where, f"{f.name}.kind")
        elif f.name in ds.data_vars:
            value = array_values(ds[f.name])
            kwargs[f.name] = value.item() if value.ndim == 0 else value
        elif f.name in ds.attrs:
            value = json_attr(ds.attrs, f.name, where)
            kwargs[f.name] = tuple(value) if isinstance(value, list) else value
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ModelFileError(f"{where}: the stored {name} lacks its field {f.name!r}")
    return cls(**kwargs)


def json_attr(attrs, key: str, where: str):
    """The JSON attribute ``key`` decoded, or a ModelFileError naming ``where`` and the fault."""
    if key not in attrs:
        raise ModelFileError(f"{where}: missing attribute {key!r}")
    try:
        return json.loads(attrs[key])
    except (TypeError, ValueError) as exc:
        raise ModelFileError(f"{where}: attribute {key!r} is not valid JSON ({exc})") from None


# -- files ---------------------------------------------------------------------------------------
def text_as_str(ds: xr.Dataset) -> xr.Dataset:
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
    """Whether ``path`` holds a model file of any version (and so may be replaced)."""
    try:
        engine = _engine(path)
        kwargs = {"consolidated": False} if engine == "zarr" else {}
        # The root group alone holds the attribute: opening every group cost 0.2 s a save.
        with xr.open_dataset(path, engine=engine, **kwargs) as root:
            fmt = root.attrs.get("format")
    except Exception:  # unreadable: not ours
        return False
    return isinstance(fmt, str) and fmt.startswith(_FORMAT_FAMILY)


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
    guard: Callable[[], None] | None = None,
) -> Path:
    """Write ``path`` through a temporary path beside it and a rename: never half a file.

    Parameters
    ----------
    path : str or Path
        Destination: a file, or a folder (zarr). An existing one is replaced.
    write : callable
        ``write(tmp)`` writes the content to the temporary path ``tmp`` (same suffix as ``path``).
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
    :func:`read_model_tree` does) to see one complete content or the other: the old folder is moved
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


def write_tree(
    tree: xr.DataTree, path: str | Path, *, guard: Callable[[], None] | None = None
) -> str:
    """Write a DataTree with its checksum (netCDF for ``.nc``, ``.nc4`` and ``.h5``, else zarr),
    atomically.

    The tree is written with a ``checksum`` root attribute (:func:`tree_checksum`) and renamed
    into place (:func:`atomic_write`, which runs ``guard``); a reader compares the checksum.
    ``tree`` is not modified.

    Returns
    -------
    str
        The checksum, which :func:`read_tree` checks.
    """
    path = Path(path)
    groups = {node.path: text_as_str(node.to_dataset(inherit=False)) for node in tree.subtree}
    out = xr.DataTree.from_dict(groups)
    out.attrs = {k: v for k, v in tree.attrs.items() if k != "checksum"}
    out.attrs["checksum"] = checksum = tree_checksum(out)

    def write(tmp: Path) -> None:
        if _engine(path) == "zarr":
            out.to_zarr(tmp, mode="w-", consolidated=False)
        else:
            out.to_netcdf(tmp, engine="h5netcdf")

    atomic_write(path, write, guard=guard)
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
    _verify(tree, path, tree.attrs.pop("checksum", None), checksum)
    return tree


def _check_destination(path: Path, overwrite: bool) -> None:
    if path.exists() or path.is_symlink():
        if not _is_saved_model(path):
            raise FileExistsError(
                f"{path} exists and is not a bayes_rvm model; refusing to write over it. "
                "Choose a new path (a name ending in .nc, .nc4 or .h5 for netCDF, any other for "
                "zarr)."
            )
        if not overwrite:
            raise FileExistsError(f"{path} already holds a saved model and overwrite=False.")


def write_model_tree(tree: xr.DataTree, path: str | Path, *, overwrite: bool = True) -> Path:
    """Write a model's DataTree (root attribute ``format`` = :data:`FORMAT`) to ``path``.

    netCDF for ``.nc``, ``.nc4`` and ``.h5``, otherwise a zarr store, through
    :func:`write_tree`: an interrupted write leaves the old file whole, concurrent writes to one
    path all succeed and the last one wins.

    Parameters
    ----------
    tree : xarray.DataTree
    path : str or Path
        Destination. An existing path is replaced only if it holds a model file (of any
        version) and ``overwrite`` is True; anything else there is left untouched.
    overwrite : bool, default=True

    Returns
    -------
    Path

    Raises
    ------
    FileExistsError
        If ``path`` exists and is not a model file, or is one and ``overwrite`` is False.
    """
    path = Path(path)
    if tree.attrs.get("format") != FORMAT:  # pragma: no cover - a bug of ours
        raise ValueError(f"a model tree of format {tree.attrs.get('format')!r}, not {FORMAT!r}")
    if path.parent.is_dir():
        with _path_lock(path):  # not while another save swaps it: its folder may be mid-move
            _check_destination(path, overwrite)
    write_tree(tree, path, guard=lambda: _check_destination(path, overwrite))
    return path


def read_model_tree(path: str | Path) -> xr.DataTree:
    """Read the DataTree that :func:`write_model_tree` wrote, its format and checksum checked.

    Returns
    -------
    xarray.DataTree
        As written, its ``checksum`` attribute included.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ModelFileError
        Naming ``path``: unreadable or truncated, not a model file, a model file of another
        format (naming it and :data:`FORMAT`), or its content does not match its checksum.
    """
    path = Path(path)
    # Not while a save swaps a zarr folder (it is briefly elsewhere). A folder one may only read
    # can still be locked; Windows cannot lock one, and reads without.
    with _path_lock(path) if os.name != "nt" and path.parent.is_dir() else contextlib.nullcontext():
        if not path.exists():
            raise FileNotFoundError(f"no saved model at {path}")
        tree = _read_tree(path)
    fmt = tree.attrs.get("format")
    if not isinstance(fmt, str) or fmt != FORMAT:  # an edited attr may be an array
        if isinstance(fmt, str) and fmt.startswith(_FORMAT_FAMILY):
            raise ModelFileError(
                f"{path} was written by another version of bayes_rvm in format {fmt!r}; this "
                f"version reads {FORMAT!r}: re-fit the model and save it again."
            )
        raise ModelFileError(
            f"{path} is not a bayes_rvm model file (format {fmt!r}; this version reads {FORMAT!r})."
        )
    _verify(tree, path, tree.attrs.get("checksum"))
    return tree


def _verify(tree: xr.DataTree, path: Path, stored, checksum: str | None = None) -> None:
    """Raise a ModelFileError naming ``path`` unless ``tree`` has the checksum ``stored`` (and
    ``checksum``, if given)."""
    if stored is None:
        raise ModelFileError(f"{path}: the checksum attribute is missing")
    actual = tree_checksum(tree)
    if actual != stored or (checksum is not None and actual != checksum):
        raise ModelFileError(
            f"{path} is damaged: its content does not match its checksum (changed or missing "
            "data, e.g. a flipped byte, a lost zarr chunk or an edited attribute)"
        )
