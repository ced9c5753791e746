"""The log evidence of the sparse Bayesian model, from a Cholesky factor of the posterior precision.

One place for the formula that every engine evaluates (and that the PyMC marginal Op's NumPy
reference path can call):

* Gaussian likelihood (Tipping 2001; Bishop 2006, section 7.2.1; summed over D outputs that
  share the hyperparameters)::

      ln p(T | alpha, beta) = D/2 [N ln beta - N ln 2 pi + sum_i ln alpha_i - ln |H|]
                              - 1/2 (beta ||T - Phi M||^2 + sum_i alpha_i |m_i|^2)

  with ``H = A + beta Phi^T Phi``; the last bracket, the *quadratic term*, also equals
  ``beta ||T||^2 - beta^2 |L^-1 Phi^T T|^2``;
* Laplace approximation (C classes sharing ``alpha``)::

      ln p(T | alpha) ~ Psi(W*) + C/2 sum_i ln alpha_i - 1/2 ln |H|

  with ``Psi`` the log posterior (log likelihood minus ``1/2 sum alpha |w|^2``) at the mode and
  ``H`` its negative Hessian there.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import linalg
from scipy.linalg import lapack

from bayes_rvm._warnings import PACKAGE_FRAMES
from bayes_rvm.families import LOG_2PI

#: Warnings of the engines point at the first caller outside bayes_rvm and scikit-learn.
WARN_SKIP = PACKAGE_FRAMES

__all__ = ["cholesky", "gaussian_log_evidence", "laplace_log_evidence", "log_det", "solve_lower"]


def cholesky(H: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor of an SPD matrix, equilibrated by its diagonal for accuracy.

    Falls back to a small diagonal jitter, with a warning, when rounding makes ``H`` indefinite.
    """
    d = np.sqrt(H.diagonal())
    Hs = H / d[:, None] / d
    # LAPACK directly: this runs once per iteration of every engine, mostly on small matrices.
    Ls, info = lapack.dpotrf(Hs, lower=1)
    jitter = 0.0
    while info != 0:
        jitter = 100.0 * jitter if jitter else 1e-12
        if jitter > 1e-2:
            raise linalg.LinAlgError("posterior precision is not positive definite")
        Ls, info = lapack.dpotrf(Hs + jitter * np.eye(H.shape[0]), lower=1)
    if jitter:
        warnings.warn(
            f"posterior precision was numerically indefinite; added relative jitter {jitter:.0e}. "
            "The basis is nearly collinear: consider a narrower kernel (a larger gamma) or fewer "
            "centres.",
            RuntimeWarning,
            skip_file_prefixes=WARN_SKIP,
        )
    return Ls * d[:, None]


def solve_lower(L: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``L^-1 B`` for a lower-triangular ``L`` (from :func:`cholesky`, finite by construction).

    LAPACK's ``trtrs`` directly, as ``scipy.linalg.solve_triangular`` calls it: the engines
    solve small systems at every step, where scipy's argument handling costs more than the solve.
    """
    X, info = lapack.dtrtrs(L, B, lower=1)
    if info != 0:
        raise linalg.LinAlgError(f"singular triangular factor (trtrs info={info})")
    return X


def log_det(chol: np.ndarray) -> float:
    """``ln |H|`` from the lower Cholesky factor of ``H``."""
    return 2.0 * float(np.log(chol.diagonal()).sum())


def gaussian_log_evidence(
    chol: np.ndarray,
    alpha: np.ndarray,
    beta: float,
    n_samples: int,
    quad: float,
    n_outputs: int = 1,
) -> float:
    """Gaussian log evidence from ``chol`` (of ``H``) and the quadratic term ``quad``."""
    return (
        n_outputs
        * (
            0.5 * n_samples * (math.log(beta) - LOG_2PI)
            + 0.5 * float(np.log(alpha).sum())
            - 0.5 * log_det(chol)
        )
        - 0.5 * quad
    )


def laplace_log_evidence(
    chol: np.ndarray, alpha: np.ndarray, log_posterior: float, n_classes: int = 1
) -> float:
    """Laplace log evidence from ``chol`` (of the negative Hessian) and ``Psi`` at the mode."""
    return log_posterior + 0.5 * n_classes * float(np.log(alpha).sum()) - 0.5 * log_det(chol)
