"""Dimension names shared by the PyMC models and every DataTree the package produces.

Keeping them in one place is what lets a type-II fit and an MCMC fit line up in
``az.summary``, ``az.plot_forest`` and ``az.compare``.
"""

from __future__ import annotations

__all__ = ["BASIS", "CLASS", "OBS", "OUTPUT"]

#: Observations (rows of the design matrix).
OBS = "obs"
#: Basis functions (columns of the design matrix; the bias is the last one).
BASIS = "basis"
#: Outputs of a multi-output regression (columns of the target matrix).
OUTPUT = "output"
#: Classes of a multiclass classifier.
CLASS = "class"
