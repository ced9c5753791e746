"""Dimension names shared by the PyMC models and every DataTree the package produces.

Keeping them in one place is what lets a type-II fit and an MCMC fit line up in
``az.summary``, ``az.plot_forest`` and ``az.compare``.
"""

from __future__ import annotations

__all__ = [
    "BASIS",
    "CENTRE",
    "CLASS",
    "FEATURE",
    "ITERATION",
    "OBS",
    "OUTPUT",
    "SET",
    "UNCONSTRAINED",
    "variable_dims",
]

#: Observations (rows of the design matrix).
OBS = "obs"
#: Basis functions (columns of the design matrix; the bias is the last one).
BASIS = "basis"
#: Outputs of a multi-output regression (columns of the target matrix).
OUTPUT = "output"
#: Classes of a multiclass classifier.
CLASS = "class"
#: Sets of basis functions whose relevance is summarised together
#: (:mod:`bayes_rvm.posterior.relevance`).
SET = "set"
#: Input features (columns of ``X``), where a model keeps its inputs (a sampled kernel width).
FEATURE = "feature"
#: Kernel centres of a sampled-width model (the basis functions other than the bias).
CENTRE = "centre"
#: Iterations of a variational fit (its loss trace, the ``variational`` group).
ITERATION = "iteration"
#: Coordinates of a variational approximation in the unconstrained space (``variational``).
UNCONSTRAINED = "unconstrained"


def variable_dims(w_extra: str | None = None, y_extra: str | None = None) -> dict[str, list[str]]:
    """Dims of every variable the package writes, for ``arviz_base.from_dict``.

    Parameters
    ----------
    w_extra : {None, "output", "class"}
        The weights' second dim: outputs of a multi-output regression, classes of a softmax.
    y_extra : {None, "output"}
        The targets' second dim (multi-output regression; class labels are one column).
    """
    w = [BASIS] + ([w_extra] if w_extra else [])
    y = [OBS] + ([y_extra] if y_extra else [])
    eta = [OBS] + ([w_extra] if w_extra else [])
    return {
        "w": w,
        "z": w,
        "alpha": [BASIS],
        "log_alpha": [BASIS],
        "alpha_rel": [BASIS],
        "phi_scale": [BASIS],
        "Phi": [OBS, BASIS],
        "y": y,
        "y_obs": y,
        "offset": eta,
        "X": [OBS, FEATURE],
        "centres": [CENTRE, FEATURE],
        "kernel_dist": [OBS, CENTRE],
    }
