"""Warnings that point at the user's line, however deep in the package the problem was found."""

from __future__ import annotations

import os
import warnings

__all__ = ["warn_at_user"]


def _package_frames() -> tuple[str, ...]:
    import sklearn

    # This package's frames and scikit-learn's fit wrappers (_fit_context, clone, ...).
    return (os.path.dirname(__file__), os.path.dirname(sklearn.__file__))


def warn_at_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` attributed to the first frame outside bayes_rvm and scikit-learn.

    A fixed ``stacklevel`` breaks whenever a decorator or a wrapper is added between the user's
    call and the check; skipping by file prefix does not.
    """
    warnings.warn(message, category, skip_file_prefixes=_package_frames())
