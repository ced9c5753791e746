"""Optional dependencies: imported when an option needs them, with the extra that installs them.

``pip install bayes-rvm`` runs the default paths (type-II fits, MCMC with nutpie, model files);
the JAX samplers and the Dask engine are extras. Asking for one without it raises
:class:`MissingExtraError`, an ``ImportError`` whose message names the option and the command.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingExtraError", "require"]


class MissingExtraError(ImportError):
    """An option needs a package that is not installed; the message says which extra adds it."""


def require(module: str, extra: str, purpose: str, *, also: str = "") -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` naming ``extra``.

    Parameters
    ----------
    module : str
        The module to import (e.g. ``"numpyro"``, ``"dask.array"``).
    extra : str
        The bayes-rvm extra that installs it (e.g. ``"jax"``, ``"dask"``).
    purpose : str
        What the user asked for, as the message's subject (e.g. ``'sampler="numpyro"'``).
    also : str, optional
        Further packages for the install command, outside the extra (e.g. ``"blackjax"``).

    Returns
    -------
    module
        The imported module.

    Raises
    ------
    MissingExtraError
        ``module`` (or a package it imports) is not installed.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing = getattr(exc, "name", None) or module
        command = f'pip install "bayes-rvm[{extra}]"' + (f" {also}" if also else "")
        raise MissingExtraError(
            f"{purpose} needs {missing.split('.')[0]}, which is not installed: {command}"
        ) from exc
