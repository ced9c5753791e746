"""Save and load fitted estimators as xarray DataTrees (netCDF or zarr).

A saved model is one DataTree: its root attrs name the estimator class and hold every constructor
parameter as sorted JSON; ``/basis`` holds the kernel centres; ``/fit`` holds the engine's result
(alphas, noise, posterior mean and precision Cholesky, trace, ...); the groups of the estimator's
own DataTree (``idata_``: ``posterior``, ``log_likelihood``, ...) sit beside them, so the file
opens in ArviZ as it is. Arrays are stored in float64 and come back bit for bit.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from pathlib import Path

import numpy as np
import xarray as xr
from sklearn.utils.validation import check_is_fitted

from bayes_rvm.kernels import KernelBasis

__all__ = ["load_model", "save_model", "to_datatree"]

_FORMAT = "bayes_rvm-model/1"
_BASIS_FITTED = ("gamma_", "n_features_in_", "n_centres_", "n_basis_")


def _estimators() -> dict:
    from bayes_rvm import estimators

    found = {"RVR": estimators.RVR}
    try:
        from bayes_rvm import classifier
    except ImportError:  # pragma: no cover - classification not installed
        return found
    found["RVC"] = classifier.RVC
    return found


def _params_json(model) -> str:
    params = model.get_params(deep=False)
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


def _dataclass_to_dataset(obj) -> xr.Dataset:
    """Arrays and numbers of a frozen result dataclass as variables; the rest as JSON attrs."""
    data, attrs = {}, {"class": f"{type(obj).__module__}:{type(obj).__qualname__}"}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, np.ndarray):
            data[f.name] = ([f"{f.name}_{k}" for k in range(value.ndim)], value)
        elif isinstance(value, bool | np.bool_):
            attrs[f.name] = json.dumps(bool(value))
        elif isinstance(value, int | float | np.integer | np.floating):
            data[f.name] = ((), np.asarray(value))
        else:
            attrs[f.name] = json.dumps(value)
    return xr.Dataset(data, attrs=attrs)


def _dataset_to_dataclass(ds: xr.Dataset):
    module, _, qualname = ds.attrs["class"].partition(":")
    if not module.startswith("bayes_rvm."):
        raise ValueError(f"refusing to rebuild a result of class {ds.attrs['class']!r}")
    cls = getattr(importlib.import_module(module), qualname)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in ds.data_vars:
            value = ds[f.name].values
            kwargs[f.name] = value.item() if value.ndim == 0 else value
        elif f.name in ds.attrs:
            value = json.loads(ds.attrs[f.name])
            kwargs[f.name] = tuple(value) if isinstance(value, list) else value
    return cls(**kwargs)


def to_datatree(model) -> xr.DataTree:
    """The DataTree that :func:`save_model` writes (see the module docstring)."""
    check_is_fitted(model, "fit_")
    state = model._persisted_state()
    basis: KernelBasis = state["basis"]
    basis_vars = {}
    if basis.centres_ is not None:
        basis_vars["centres"] = (("centre", "feature"), basis.centres_)
    basis_attrs = {k: json.dumps(getattr(basis, k)) for k in _BASIS_FITTED}
    root = xr.Dataset(
        attrs={
            "format": _FORMAT,
            "estimator": type(model).__name__,
            "params": _params_json(model),
            "extras": json.dumps(state.get("extras", {}), sort_keys=True),
        }
    )
    groups = {"/": root, "/basis": xr.Dataset(basis_vars, attrs=basis_attrs)}
    fits = state["fit"] if isinstance(state["fit"], list | tuple) else [state["fit"]]
    for k, fit in enumerate(fits):
        groups[f"/fit_{k}" if len(fits) > 1 else "/fit"] = _dataclass_to_dataset(fit)
    root.attrs["n_fits"] = len(fits)
    arrays = state.get("arrays") or {}
    groups["/arrays"] = xr.Dataset(
        {k: ([f"{k}_{i}" for i in range(v.ndim)], v) for k, v in arrays.items()}
    )
    idata = state.get("idata")
    if idata is not None:
        for node in idata.children.values():
            groups[f"/{node.name}"] = node.to_dataset()
    return xr.DataTree.from_dict(groups)


def _engine(path: Path) -> str:
    return "h5netcdf" if path.suffix in (".nc", ".nc4", ".h5") else "zarr"


def save_model(model, path: str | Path) -> Path:
    """Write a fitted estimator to ``path``: netCDF for ``.nc``, otherwise a zarr store.

    Parameters
    ----------
    model : RVR or RVC
        A fitted estimator whose parameters are JSON-serialisable (named kernels, numbers).
    path : str or Path
        Destination (overwritten).

    Returns
    -------
    Path
    """
    path = Path(path)
    tree = to_datatree(model)
    if _engine(path) == "zarr":
        tree.to_zarr(path, mode="w", consolidated=False)
    else:
        tree.to_netcdf(path, engine="h5netcdf")
    return path


def load_model(path: str | Path):
    """Read an estimator written by :func:`save_model`; predictions equal the original's exactly.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If the file is not a readable bayes_rvm model, or its stored parameters do not match the
        estimator's constructor (written by another version).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no saved model at {path}")
    try:
        engine = _engine(path)
        kwargs = {"consolidated": False} if engine == "zarr" else {}
        tree = xr.open_datatree(path, engine=engine, **kwargs)
        tree.load()
    except Exception as exc:
        raise ValueError(f"could not read a bayes_rvm model from {path}: {exc}") from exc
    attrs = tree.attrs
    if attrs.get("format") != _FORMAT:
        raise ValueError(f"{path} is not a bayes_rvm model file (format {attrs.get('format')!r}).")
    classes = _estimators()
    if attrs.get("estimator") not in classes:
        raise ValueError(f"{path} holds an unknown estimator {attrs.get('estimator')!r}.")
    cls = classes[attrs["estimator"]]
    params = json.loads(attrs["params"])
    expected = set(cls().get_params(deep=False))
    if set(params) != expected:
        missing = sorted(expected - set(params))
        unknown = sorted(set(params) - expected)
        raise ValueError(
            f"{path} was written with other constructor parameters of {cls.__name__}: "
            f"missing {missing}, unknown {unknown}. Re-fit and save it with this version."
        )
    model = cls(**params)
    basis = KernelBasis(
        **{k: params[k] for k in ("kernel", "gamma", "degree", "coef0", "kernel_params", "bias")}
    )
    for key in _BASIS_FITTED:
        setattr(basis, key, json.loads(tree["basis"].attrs[key]))
    basis.centres_ = tree["basis"]["centres"].values if "centres" in tree["basis"] else None
    n_fits = int(attrs["n_fits"])
    names = ["fit"] if n_fits == 1 else [f"fit_{k}" for k in range(n_fits)]
    fits = [_dataset_to_dataclass(tree[name].to_dataset()) for name in names]
    state = {
        "basis": basis,
        "fit": fits[0] if n_fits == 1 else fits,
        "extras": json.loads(attrs["extras"]),
    }
    state["arrays"] = {k: v.values for k, v in tree["arrays"].to_dataset().data_vars.items()}
    reserved = {"basis", "arrays", *names}
    groups = {f"/{k}": v.to_dataset() for k, v in tree.children.items() if k not in reserved}
    state["idata"] = xr.DataTree.from_dict(groups) if groups else None
    model._restore_state(state)
    return model
