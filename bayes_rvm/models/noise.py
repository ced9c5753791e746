"""The pieces of the PyMC graphs shared by the joint forms: the weights and the observed noise.

The joint form samples the weights (centred, or non-centred as ``w = z / sqrt(alpha)``); the
observed node is Gaussian, or Student-t with its degrees of freedom fixed or sampled. The model
builders of :mod:`bayes_rvm.models.graphs` compose them.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.graph.basic import Variable

from bayes_rvm.models.priors import Prior

__all__ = [
    "NOISE_NU_PRIOR",
    "joint_weights",
    "noise_nu_spec",
    "noise_nu_variable",
    "observed_noise",
]


def joint_weights(log_alpha, w_dims: tuple, *, centred: bool = False):
    """The weights ``w ~ N(0, 1/alpha)``: sampled directly (centred) or as ``z / sqrt(alpha)``."""
    scale = pt.exp(-0.5 * log_alpha)
    scale = scale[:, None] if len(w_dims) == 2 else scale
    if centred:
        return pm.Normal("w", 0.0, scale, dims=w_dims)
    z = pm.Normal("z", 0.0, 1.0, dims=w_dims)
    return pm.Deterministic("w", z * scale, dims=w_dims)


def observed_noise(name: str, mu, sigma, y_data, y_dims: tuple, noise_nu=None):
    """The observed targets: ``N(mu, sigma)``, or Student-t with ``noise_nu`` if given (a spec,
    or the variable :func:`noise_nu_variable` made of one)."""
    if noise_nu is None or isinstance(noise_nu, Variable):
        t_noise = {} if noise_nu is None else {"nu": noise_nu}
    else:
        t_noise = {"nu": noise_nu_variable(noise_nu)}
    return (pm.StudentT if t_noise else pm.Normal)(
        name, mu=mu, sigma=sigma, observed=y_data, shape=y_data.shape, dims=y_dims, **t_noise
    )


def noise_nu_variable(noise_nu: float | Prior):
    """The Student-t noise's ``noise_nu``: sampled (a Prior) or fixed (a Deterministic)."""
    if isinstance(noise_nu, Prior):
        return noise_nu.create_variable("noise_nu")
    return pm.Deterministic("noise_nu", pt.as_tensor_variable(noise_nu))


def noise_nu_spec(likelihood: str, form: str, noise_nu) -> float | Prior | None:
    """``noise_nu`` as the spec records it (None: Gaussian); a fixed one enters the graph."""
    t_noise = likelihood == "student_t"
    if likelihood not in ("gaussian", "student_t") or (t_noise and form == "marginal"):
        raise ValueError(
            f"likelihood must be 'gaussian' or 'student_t' (not in the marginal form), got "
            f"{likelihood!r}."
        )
    if likelihood == "gaussian":
        return None
    if isinstance(noise_nu, Prior | None):
        return noise_nu or NOISE_NU_PRIOR
    if not (np.isfinite(noise_nu) and noise_nu > 0):
        raise ValueError(f"noise_nu must be positive, a Prior or None, got {noise_nu!r}.")
    return float(noise_nu)


#: Prior of the Student-t noise's degrees of freedom when it is sampled: Gamma(2, rate 0.1)
#: (Juarez and Steel 2010; the Stan prior-choice recommendations), mean 20 and mode 10, with mass
#: from heavy tails (0.5% below nu = 1) to nearly Gaussian noise (14% above 35). A proper prior is
#: needed: as nu -> inf the likelihood tends to the Gaussian's, a positive constant, so a flat
#: prior on nu would leave the posterior improper.
NOISE_NU_PRIOR = Prior("Gamma", alpha=2.0, beta=0.1)
