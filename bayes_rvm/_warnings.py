"""Warnings that point at the user's line, however deep in the package the problem was found;
library log lines kept out where the package says the same."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import warnings

__all__ = ["PACKAGE_FRAMES", "quiet_logger", "warn_at_user"]


def _module_folder(name: str) -> str:
    # Found without importing the package (the engines stay free of scikit-learn's import).
    return importlib.util.find_spec(name).submodule_search_locations[0]


#: The frames a warning skips to reach the user's line: this package's and scikit-learn's fit
#: wrappers (``_fit_context``, ``clone``, ...).
PACKAGE_FRAMES: tuple[str, ...] = (
    os.path.join(os.path.dirname(__file__), ""),  # the separator: not bayes_rvm_experiments/
    os.path.join(_module_folder("sklearn"), ""),
)


def warn_at_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` attributed to the first frame outside bayes_rvm and scikit-learn.

    A fixed ``stacklevel`` breaks whenever a decorator or a wrapper is added between the user's
    call and the check; skipping by file prefix does not.
    """
    warnings.warn(message, category, skip_file_prefixes=PACKAGE_FRAMES)


@contextlib.contextmanager
def quiet_logger(name: str):
    """Keep a logger's INFO messages out for the duration."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)
