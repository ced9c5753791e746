"""PyMC models of the RVM classifier: Bernoulli-logit (two classes) and Categorical-softmax.

The weights have no closed-form marginal under these likelihoods, so the model is the joint one in
a non-centred form, ``w = z / sqrt(alpha)`` with ``z ~ N(0, 1)``; the softmax weights are a
``basis x class`` matrix whose rows share one ``alpha`` (one relevance set for all classes), as
in :func:`bayes_rvm.evidence.laplace.fit_laplace_sequential`. The hyperpriors are those of
:func:`bayes_rvm.models.rvm_regression_model`: half-Cauchy on ``alpha^-1/2`` (ARD) or
``alpha ~ Gamma(nu/2, nu s^2/2)`` (Student-t weights). Meant for small problems (a few hundred
points, tens of basis functions, e.g. the relevance vectors of a type-II fit).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from bayes_rvm.dims import BASIS, CLASS, OBS
from bayes_rvm.models import halfcauchy_scale_alpha

__all__ = ["rvm_classification_model"]


def rvm_classification_model(
    Phi: np.ndarray,
    y: np.ndarray,
    *,
    likelihood: Literal["auto", "bernoulli", "softmax"] = "auto",
    prior: Literal["ard", "student_t"] = "ard",
    tau: float = 1.0,
    nu: float = 4.0,
    s: float = 1.0,
    basis_names: Sequence | None = None,
    class_names: Sequence | None = None,
) -> pm.Model:
    """Build the PyMC model of an RVM classifier.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
        Design matrix (for instance the columns of the relevance vectors and the bias).
    y : array-like of shape (N,)
        Class indices ``0 .. C-1`` (0/1 for two classes).
    likelihood : {"auto", "bernoulli", "softmax"}, default="auto"
        ``"auto"``: Bernoulli-logit for two classes, softmax for more.
    prior : {"ard", "student_t"}, default="ard"
        ARD: half-Cauchy(``tau``) on ``alpha_i^-1/2``; Student-t: ``alpha_i ~ Gamma(nu/2,
        nu s^2/2)``, whose marginal is ``w ~ t_nu(0, s)``.
    tau, nu, s : float
        Hyperprior settings (see ``prior``).
    basis_names, class_names : sequence, optional
        Coordinates of the ``basis`` and ``class`` dimensions.

    Returns
    -------
    pymc.Model
        Variables ``alpha[basis]``, ``z``, ``w[basis]`` (``w[basis, class]`` for the softmax) and
        the observed ``y[obs]``; ``pm.compute_log_likelihood`` finds its pointwise terms.
    """
    Phi = np.asarray(Phi, dtype=np.float64)
    y = np.asarray(y)
    if Phi.ndim != 2 or y.shape != (Phi.shape[0],):
        raise ValueError(f"Phi must be (N, M) and y (N,); got {Phi.shape} and {y.shape}.")
    if not np.issubdtype(y.dtype, np.integer) or y.min() < 0:
        raise ValueError("y must hold class indices 0 .. C-1.")
    N, M = Phi.shape
    C = int(y.max()) + 1 if class_names is None else len(class_names)
    if likelihood == "auto":
        likelihood = "bernoulli" if C <= 2 else "softmax"
    if likelihood not in ("bernoulli", "softmax"):
        raise ValueError(
            f"likelihood must be 'auto', 'bernoulli' or 'softmax', got {likelihood!r}."
        )
    if prior not in ("ard", "student_t"):
        raise ValueError(f"prior must be 'ard' or 'student_t', got {prior!r}.")
    names = list(range(M)) if basis_names is None else list(basis_names)
    coords = {OBS: np.arange(N), BASIS: names}
    if likelihood == "softmax":
        coords[CLASS] = list(range(C)) if class_names is None else list(class_names)
    w_dims = (BASIS, CLASS) if likelihood == "softmax" else BASIS

    with pm.Model(coords=coords) as model:
        Phi_data = pm.Data("Phi", Phi, dims=(OBS, BASIS))
        y_data = pm.Data("y_obs", y, dims=OBS)
        if prior == "ard":
            alpha = halfcauchy_scale_alpha("alpha", tau=tau, dims=BASIS)
        else:
            alpha = pm.Gamma("alpha", alpha=nu / 2.0, beta=nu * s**2 / 2.0, dims=BASIS)
        z = pm.Normal("z", 0.0, 1.0, dims=w_dims)
        scale = pt.exp(-0.5 * pt.log(alpha))
        w = pm.Deterministic("w", z * (scale[:, None] if likelihood == "softmax" else scale),
                             dims=w_dims)
        eta = Phi_data @ w
        if likelihood == "bernoulli":
            pm.Bernoulli("y", logit_p=eta, observed=y_data, dims=OBS)
        else:
            pm.Categorical("y", logit_p=eta, observed=y_data, dims=OBS)
    model.rvm_settings = {"likelihood": likelihood, "prior": prior, "tau": float(tau),
                          "nu": float(nu), "s": float(s), "n_classes": C}
    return model
