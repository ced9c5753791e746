"""The estimators' side of saving: each one turns its state into groups and rebuilds from them.

:mod:`bayes_rvm.io` knows the file: the tree format, the checksum, the atomic write and the lock,
and how a frozen result dataclass becomes a Dataset; :mod:`bayes_rvm.estimators.saving` puts an
estimator's state into a tree and back. What a model stores, and which invariants its stored
state must keep, belongs to the estimator; this module holds that side of the saving protocol
(in the spirit of pymc-marketing's build-from-idata):

- ``_persisted_state()`` (each estimator): its state as a dict: ``basis`` (the fitted
  :class:`~bayes_rvm.KernelBasis`), ``fit`` (a frozen result, or a list of them),
  ``extras`` (a JSON object), ``arrays`` (name to ndarray) and ``idata`` (a DataTree or None);
- ``_restore_state(state)`` (each estimator): the inverse, on an unfitted estimator;
- ``_check_persisted(state, params, fail)`` (a classmethod of each estimator): the invariants of
  its own stored state (a regressor's training arrays, a classifier's classes);
- :func:`statistics_arrays` and :func:`statistics_from_arrays`: a fit's sufficient statistics
  (M x M, small) among the stored arrays, so that a model fitted from them (``chunk_rows``)
  loads able to rebuild its MCMC model;
- :func:`width_selection_state` and :func:`width_selection_from_state`: the width search's
  diagnostics (``width_selection_``) without the N x M design they were computed on;
- :meth:`SavedStateMixin._saved_state` and :meth:`SavedStateMixin._from_saved_state`, which
  :func:`bayes_rvm.save_model` and :func:`bayes_rvm.load_model` call: the basis as the
  ``/basis`` group and back, the checks every estimator shares, then the estimator's own.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import xarray as xr

from bayes_rvm.basis.kernels import WIDTH_RULES, KernelBasis, resolve_gamma, uses_gamma
from bayes_rvm.basis.statistics import SufficientStatistics
from bayes_rvm.estimators.base import KERNEL_PARAMS, path_from_json, path_to_json
from bayes_rvm.evidence import OneVsRestFit, WidthFit
from bayes_rvm.io import ModelFileError, json_attr, json_default
from bayes_rvm.models.priors import Prior, decode_params, encode_params

__all__ = [
    "SavedStateMixin",
    "basis_from_group",
    "basis_group",
    "basis_params",
    "check_feature_names",
    "check_fit",
    "check_state",
    "statistics_arrays",
    "statistics_from_arrays",
    "width_selection_from_state",
    "width_selection_state",
]

#: Fitted attributes and parameters of the basis stored in ``/basis`` (JSON attributes).
BASIS_FITTED = ("gamma_", "n_features_in_", "n_centres_", "n_basis_")
BASIS_PARAMS = ("kernel", "gamma", "degree", "coef0", "kernel_params", "bias")

#: Prefix of the stored arrays of a fit's sufficient statistics (absent for a fit on the design).
STATISTICS_PREFIX = "statistics_"
_STATISTICS_FIELDS = ("gram", "cross", "tt", "n", "t_sum")

#: ``fail(what)`` raises the error of an inconsistent stored model, naming its file.
Fail = Callable[[str], None]


class SavedStateMixin:
    """The saving protocol that :mod:`bayes_rvm.estimators.saving` calls (see the module
    docstring)."""

    def _saved_state(self) -> dict:
        """The estimator's ``_persisted_state`` with the basis as the ``/basis`` group, and the
        width search's diagnostics (:func:`width_selection_state`) where the fit made one."""
        state = self._persisted_state()
        search = width_selection_state(getattr(self, "width_selection_", None))
        return {**state, "basis": basis_group(state["basis"]), "width_selection": search}

    @classmethod
    def _check_persisted(cls, state: dict, params: dict, fail: Fail) -> None:
        """The estimator's own invariants of its stored state; none beyond the shared ones."""

    @classmethod
    def _params_to_file(cls, params: dict) -> dict:
        """The constructor parameters as a file stores them (JSON values): as they are."""
        return params

    @classmethod
    def _params_from_file(cls, params: dict) -> dict:
        """The constructor parameters from a file's (the inverse of :meth:`_params_to_file`)."""
        return params

    @classmethod
    def _from_saved_state(cls, params: dict, state: dict, path: Path):
        """A fitted estimator of ``params`` rebuilt from the groups of a saved model file.

        Raises
        ------
        ModelFileError
            Naming ``path`` and the first contradiction in the stored state.
        """

        def fail(what: str):
            raise ModelFileError(f"{path}: inconsistent stored model: {what}")

        model = cls(**params)
        state = {**state, "basis": basis_from_group(state["basis"], params, path)}
        check_state(state, params, fail)
        cls._check_persisted(state, params, fail)
        check_feature_names(state, fail)
        search = width_selection_from_state(
            state.get("width_selection"), state["basis"].n_basis_, fail
        )
        model._restore_state(state)
        if search is not None:  # none where the fit searched no width
            model.width_selection_ = search
        return model


def basis_params(params: dict) -> dict:
    """The :class:`~bayes_rvm.KernelBasis` parameters of an estimator's ``params``: ``degree``
    and ``coef0`` split out of ``kernel_params`` (their defaults where absent), the rest of it
    the callable kernel's keyword arguments, as the estimator builds its basis."""
    kernel = dict(params.get("kernel_params") or {})
    own = {k: params.get(k) for k in ("kernel", "gamma", "bias")}
    for key, default in KERNEL_PARAMS.defaults.items():
        own[key] = kernel.pop(key, default)
    return {**own, "kernel_params": kernel or None}


def basis_group(basis: KernelBasis) -> xr.Dataset:
    """The ``/basis`` group of a fitted basis: its centres, and its parameters as JSON."""
    basis_vars = {}
    if basis.centres_ is not None:
        basis_vars["centres"] = (("centre", "feature"), basis.centres_)
    basis_attrs = {k: json.dumps(getattr(basis, k)) for k in BASIS_FITTED}
    # The basis's own parameters: a width chosen by the evidence is its gamma, not the model's.
    basis_attrs["params"] = json.dumps(
        encode_params({k: getattr(basis, k) for k in BASIS_PARAMS}),
        sort_keys=True,
        default=json_default,
    )
    return xr.Dataset(basis_vars, attrs=basis_attrs)


def _chosen_width(gamma) -> bool:
    """Whether ``gamma`` leaves the width to the fit: a width rule or a sampled width."""
    return isinstance(gamma, Prior) or (isinstance(gamma, str) and gamma in WIDTH_RULES)


def basis_from_group(basis_ds: xr.Dataset, params: dict, path: Path) -> KernelBasis:
    """The fitted basis of a ``/basis`` group, built from the model's parameters ``params``."""
    # The model's parameters build the basis; only gamma may differ (a width the fit chose).
    own = basis_params(params)
    stored = decode_params(json_attr(basis_ds.attrs, "params", f"{path}:/basis"))
    if not isinstance(stored, dict) or set(stored) != set(BASIS_PARAMS):
        raise ModelFileError(f"{path}:/basis: the stored parameters are not {BASIS_PARAMS}")
    # A width rule, a sampled width or a cross-validated twin (no gamma of its own).
    chosen = "gamma" not in params or _chosen_width(params["gamma"])
    if not chosen and json.dumps(stored["gamma"], default=json_default) != json.dumps(
        params["gamma"], default=json_default
    ):
        raise ModelFileError(
            f"{path}: inconsistent stored model: the basis's gamma {stored['gamma']!r} is "
            f"not the model's {params['gamma']!r}"
        )
    gamma = stored["gamma"]
    # Per-feature coefficients are an array when fitted.
    own["gamma"] = np.asarray(gamma, dtype=np.float64) if isinstance(gamma, list) else gamma
    basis = KernelBasis(**own)
    for key in BASIS_FITTED:
        setattr(basis, key, json_attr(basis_ds.attrs, key, f"{path}:/basis"))
    basis.centres_ = basis_ds["centres"].values if "centres" in basis_ds else None
    return basis


def check_state(state: dict, params: dict, fail: Fail) -> None:
    """Check what every estimator stores against itself: the basis, the fits, the extras."""
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
    for fit in state["fit"] if isinstance(state["fit"], list) else [state["fit"]]:
        check_fit(fit, basis.n_basis_, fail)
    if not isinstance(state["extras"], dict):
        fail("the extras attribute is not a JSON object")


def check_feature_names(state: dict, fail: Fail) -> None:
    """Check the stored feature names against the basis's count of input features."""
    basis: KernelBasis = state["basis"]
    names = state["feature_names"]
    if names is not None and (
        not isinstance(names, list)
        or len(names) != basis.n_features_in_
        or not all(isinstance(n, str) for n in names)
    ):
        fail(f"{names!r} are not the names of {basis.n_features_in_} features")


def _check_gamma(basis: KernelBasis, params: dict, fail: Fail) -> None:
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
    if _chosen_width(basis.gamma):
        return  # learned by the evidence (also where it seeds a sampled width): nothing to resolve
    # gamma_ is resolved from the training inputs; they are the centres unless a subset was chosen.
    on_inputs = params.get("centres") is None
    if not isinstance(basis.gamma, str) or basis.gamma == "auto" or on_inputs:
        expected = resolve_gamma(basis.gamma, basis.centres_)
        if gamma_ != expected:
            fail(f"gamma_ = {gamma_!r} but gamma={basis.gamma!r} resolves to {expected!r}")


def check_fit(fit, n_basis: int, fail: Fail) -> None:
    """Check a stored engine result against itself and the basis size."""
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


def statistics_arrays(stats: SufficientStatistics | None) -> dict[str, np.ndarray]:
    """The stored arrays of a fit's sufficient statistics (none for a fit on the design)."""
    if stats is None:
        return {}
    return {
        STATISTICS_PREFIX + name: np.asarray(getattr(stats, name)) for name in _STATISTICS_FIELDS
    }


def _invalid(what: str) -> None:
    raise ValueError(f"inconsistent stored model: {what}")


def statistics_from_arrays(
    arrays: dict, n_basis: int, fail: Fail = _invalid
) -> SufficientStatistics | None:
    """The statistics :func:`statistics_arrays` stored, checked against the basis; None if absent.

    ``fail`` reports a partial or inconsistent set (shapes, a non-count ``n``, non-finite sums).
    """
    stored = {
        name: arrays[STATISTICS_PREFIX + name]
        for name in _STATISTICS_FIELDS
        if STATISTICS_PREFIX + name in arrays
    }
    if not stored:
        return None
    if len(stored) != len(_STATISTICS_FIELDS):
        fail(f"sufficient statistics without {sorted(set(_STATISTICS_FIELDS) - set(stored))}")
    n = stored["n"]
    if n.ndim != 0 or n.dtype.kind not in "iu" or n < 0:
        fail(f"the statistics' row count {n!r} is not a count")
    if stored["gram"].shape != (n_basis, n_basis):
        fail(f"a Gram matrix of shape {stored['gram'].shape} for {n_basis} basis functions")
    if not all(np.all(np.isfinite(stored[k])) for k in ("gram", "cross", "tt", "t_sum")):
        fail("non-finite sufficient statistics")
    try:
        return SufficientStatistics(**{**stored, "n": int(n)})
    except ValueError as exc:
        fail(f"sufficient statistics of inconsistent shapes ({exc})")


def width_selection_state(search: WidthFit | None) -> dict | None:
    """``width_selection_`` as stored: ``{"fit": [EvidenceFit, ...], "extras": {...}}``.

    Everything but ``Phi``, the N x M design at the chosen width, which would make the file as
    large as the design (a loaded model's ``Phi`` is None, as after a fit from statistics). A
    one-vs-rest fit is stored as its binary fits. None if the fit searched no width.
    """
    if search is None:
        return None
    ovr = isinstance(search.fit, OneVsRestFit)
    return {
        "fit": list(search.fit.fits) if ovr else [search.fit],
        "extras": {
            "length_scale": np.asarray(search.length_scale, dtype=np.float64).tolist(),
            "path": path_to_json(search.path),
            "starts": [float(s) for s in search.starts],
            "n_fits": int(search.n_fits),
            "seconds": float(search.seconds),
            "ovr": ovr,
        },
    }


def width_selection_from_state(stored: dict | None, n_basis: int, fail: Fail) -> WidthFit | None:
    """The :class:`~bayes_rvm.evidence.width.WidthFit` that :func:`width_selection_state` stored.

    ``fail`` reports fits that do not fit the basis, or a count of fits that is not the kind's.
    None when nothing was stored (the fit searched no width).
    """
    if stored is None:
        return None
    extras, fits = stored["extras"], stored["fit"]
    if not isinstance(extras, dict) or not fits or (len(fits) > 1 and not extras.get("ovr")):
        fail(f"a width search of {len(fits)} fits with extras {extras!r}")
    for fit in fits:
        check_fit(fit, n_basis, fail)
    ls = np.asarray(extras["length_scale"], dtype=np.float64)
    if ls.ndim != 1 or not ls.size or not np.all(np.isfinite(ls) & (ls > 0)):
        fail(f"the width search's length scale {extras['length_scale']!r} is not positive")
    return WidthFit(
        ls,
        OneVsRestFit(tuple(fits)) if extras["ovr"] else fits[0],
        None,
        path_from_json(extras["path"]),
        starts=tuple(extras["starts"]),
        n_fits=int(extras["n_fits"]),
        seconds=float(extras["seconds"]),
    )
