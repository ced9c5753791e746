"""The PyMC models of the RVM; the only module of the package that builds PyMC graphs.

Regression model (notation of the reference documents)::

    alpha_i ~ hyperprior                  i = 1..M   (one per basis function, shared by outputs)
    sigma   ~ noise prior                 (beta = 1 / sigma^2)
    w_id | alpha_i ~ N(0, 1 / alpha_i)
    t_nd | w, sigma ~ N(phi_n^T w_d, sigma^2)

Two forms of the same posterior over ``(alpha, sigma)``:

``form="marginal"``
    ``w`` integrated out: ``t_d ~ N(0, C)``, ``C = beta^-1 I + Phi A^-1 Phi^T``. The log density
    is the custom PyTensor Op of :mod:`bayes_rvm.marginal`, with a closed-form gradient and
    NumPy, numba (nutpie) and JAX (numpyro / blackjax) backends. The weights are drawn back from
    ``N(m, Sigma)`` after sampling (:func:`bayes_rvm.inference.sample_mcmc`).

``form="joint"``
    Non-centred ``w = z / sqrt(alpha)``, ``z ~ N(0, 1)``, with an ordinary ``pm.Normal``
    likelihood, so that users can add terms of their own to the model.

Priors on the weights:

``prior="ard"``
    ``w_i | alpha_i ~ N(0, 1/alpha_i)``. The default hyperprior puts a half-Cauchy(``tau``) on the
    prior *scale* ``s_i = alpha_i^(-1/2)`` (Gelman 2006; the horseshoe's local scale). In
    ``log alpha`` its density is a hyperbolic secant with exponential tails ``exp(-|log alpha|/2)``:
    proper, weak enough that an irrelevant ``alpha_i`` runs far above the relevant ones (as
    type-II pruning does) and smooth enough that NUTS meets no walls. A Gamma hyperprior on
    ``alpha`` (Tipping's choice) with small shape and rate puts a double-exponential wall in
    ``log alpha`` and makes NUTS diverge; it is available through ``alpha_prior``.
``prior="student_t"``
    ``alpha_i ~ Gamma(nu/2, nu s^2 / 2)``, which integrates to ``w_i ~ StudentT(nu, 0, s)``
    (reference document 002). ``nu`` is fixed or given a prior.

The default hyperpriors are stated for a design with unit-norm columns and targets of unit RMS,
which is how :class:`bayes_rvm.estimators.RVR` presents the problem; rescale ``tau``, ``s`` and
the noise prior for other scales.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from bayes_rvm.dims import BASIS, CLASS, OBS, OUTPUT
from bayes_rvm.marginal import (
    lowrank_marginal_log_likelihood,
    marginal_log_likelihood,
    thin_svd,
    use_lowrank,
)
from bayes_rvm.priors import DEFAULT_NU

__all__ = [
    "halfcauchy_scale_alpha",
    "rvm_classification_model",
    "rvm_regression_model",
    "set_model_data",
]


# ---------------------------------------------------------------------------------------------
# Hyperpriors
# ---------------------------------------------------------------------------------------------
def _halfcauchy_scale_logp(value, tau):
    # alpha = s^-2 with s ~ HalfCauchy(tau):
    # p(alpha) = 2 / (pi tau (1 + 1/(alpha tau^2))) * alpha^(-3/2) / 2
    return -pt.log(np.pi * tau) - pt.log1p(1.0 / (value * tau**2)) - 1.5 * pt.log(value)


def _halfcauchy_scale_support_point(rv, size, tau):
    # The median of alpha; also the start of NUTS before jitter.
    return pt.full(size, tau**-2.0) if size is not None else tau**-2.0


def _halfcauchy_scale_random(tau, rng=None, size=None):
    s = np.abs(rng.standard_cauchy(size=size)) * tau
    return s**-2.0


def halfcauchy_scale_alpha(
    name: str = "alpha", *, tau: float = 1.0, dims: str | Sequence[str] = BASIS
):
    """ARD hyperprior: half-Cauchy(``tau``) on the weight prior scale ``alpha_i^(-1/2)``.

    Must be called inside a model context. The variable is sampled in ``log alpha`` (log
    transform), where its density is ``1 / (2 pi cosh((log alpha + 2 log tau) / 2))``: a proper
    hyperbolic-secant density with exponential tails on both sides. The upper tail lets irrelevant
    basis functions wander to large ``alpha`` (weights pinned at zero), the lower tail lets relevant
    ones take weights far larger than ``tau``.

    Parameters
    ----------
    name : str, default="alpha"
    tau : float, default=1.0
        Median prior scale of a weight (``alpha`` has median ``tau^-2``).
    dims : str or sequence of str, default="basis"

    Returns
    -------
    TensorVariable
    """
    return pm.CustomDist(
        name,
        float(tau),
        logp=_halfcauchy_scale_logp,
        random=_halfcauchy_scale_random,
        support_point=_halfcauchy_scale_support_point,
        transform=pm.distributions.transforms.log,
        dims=dims,
    )


AlphaPrior = Callable[[str, str], pt.TensorVariable]
NoisePrior = Callable[[str], pt.TensorVariable]
NuPrior = Callable[[str], pt.TensorVariable]


def _default_noise_prior(name: str) -> pt.TensorVariable:
    return pm.HalfNormal(name, sigma=1.0)


# ---------------------------------------------------------------------------------------------
# The regression model
# ---------------------------------------------------------------------------------------------
def _marginal_y_logp(value, log_alpha, log_beta, Phi, gram, *carrier):
    return marginal_log_likelihood(log_alpha, log_beta, Phi, value, gram)


def _lowrank_y_logp(value, log_alpha, log_beta, U, VS, *carrier):
    return lowrank_marginal_log_likelihood(log_alpha, log_beta, U, VS, value)


def _lowrank_y_random(log_alpha, log_beta, U, VS, *carrier, rng=None, size=None):
    return _marginal_y_random(log_alpha, log_beta, U @ VS.T, None, *carrier, rng=rng, size=size)


def _marginal_y_random(log_alpha, log_beta, Phi, gram, *carrier, rng=None, size=None):
    # A prior-predictive draw: w ~ N(0, A^-1), t = Phi w + noise. The optional zero vector
    # `carrier` of length D only tells PyTensor the number of outputs.
    if size is not None and len(size) > 0:
        raise NotImplementedError("batched draws of the marginal RVM likelihood")
    w_shape = log_alpha.shape + carrier[0].shape if carrier else log_alpha.shape
    w = rng.normal(size=w_shape)
    w = w * np.exp(-0.5 * np.asarray(log_alpha)).reshape(log_alpha.shape + (1,) * (w.ndim - 1))
    mu = Phi @ w
    return mu + rng.normal(size=mu.shape) * np.exp(-0.5 * float(log_beta))


def rvm_regression_model(
    Phi: np.ndarray,
    y: np.ndarray,
    *,
    prior: Literal["ard", "student_t"] = "ard",
    form: Literal["marginal", "joint"] = "marginal",
    tau: float = 1.0,
    nu: float | NuPrior = DEFAULT_NU,
    s: float = 1.0,
    alpha_prior: AlphaPrior | None = None,
    noise_prior: NoisePrior | None = None,
    basis: Sequence[int] | np.ndarray | None = None,
    basis_names: Sequence | None = None,
    output_names: Sequence | None = None,
    coords: dict | None = None,
    marginal: Literal["auto", "dense", "lowrank"] = "auto",
) -> pm.Model:
    """Build the RVM regression model on a design matrix.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
        Design matrix (for a kernel machine, the N + 1 columns of
        :meth:`bayes_rvm.kernels.KernelBasis.transform`).
    y : ndarray of shape (N,) or (N, D)
        Targets. With D outputs the weights are ``w[basis, output]`` and ``alpha`` and the noise are
        shared by the outputs.
    prior : {"ard", "student_t"}, default="ard"
        ``"ard"``: ``w_i ~ N(0, 1/alpha_i)`` with ``alpha_i`` from ``alpha_prior`` (default
        :func:`halfcauchy_scale_alpha` with scale ``tau``). ``"student_t"``:
        ``alpha_i ~ Gamma(nu/2, nu s^2/2)``, so that ``w_i ~ StudentT(nu, 0, s)``.
    form : {"marginal", "joint"}, default="marginal"
        ``"marginal"``: ``w`` integrated out (fast, NUTS-friendly; ``w`` is drawn back by
        :func:`bayes_rvm.inference.sample_mcmc`). ``"joint"``: non-centred
        ``w = z / sqrt(alpha)`` with a ``pm.Normal`` likelihood, to be extended by the user.
    tau : float, default=1.0
        Scale of the default ARD hyperprior (ignored when ``alpha_prior`` is given).
    nu : float or callable, default=1e-4 (:data:`bayes_rvm.priors.DEFAULT_NU`)
        Degrees of freedom of the Student-t prior, or ``nu_prior(name) -> TensorVariable``
        creating a random ``nu`` inside the model (for example
        ``lambda name: pm.Gamma(name, 2.0, 0.1)``).
    s : float, default=1.0
        Scale of the Student-t prior.
    alpha_prior : callable, optional
        ``alpha_prior(name, dims) -> TensorVariable`` creating a positive ``alpha`` inside the
        model, for example ``lambda name, dims: pm.Gamma(name, 1e-2, 1e-4, dims=dims)``. Replaces
        the ARD default (``prior="ard"`` only).
    noise_prior : callable, optional
        ``noise_prior(name) -> TensorVariable`` creating the noise standard deviation ``sigma``;
        default ``HalfNormal(1)`` (weak for targets of unit RMS).
    basis : sequence of int, optional
        Columns of ``Phi`` to keep (for example ``fit.active`` of a type-II fit); default all.
    basis_names : sequence, optional
        Coordinates of the ``basis`` dim; default the kept column indices.
    output_names : sequence, optional
        Coordinates of the ``output`` dim (multi-output only).
    coords : dict, optional
        Further coordinates for user extensions.
    marginal : {"auto", "dense", "lowrank"}, default="auto"
        How the marginal form evaluates its density (same density, different cost):
        ``"dense"`` through ``Phi^T Phi`` at ``O(M^3)`` per gradient, ``"lowrank"`` through a thin
        SVD of ``Phi`` (singular values above ``1e-10`` of the largest) at ``O(M r^2)``; ``"auto"``
        takes the low-rank form when the rank r is at most half of M
        (:mod:`bayes_rvm.marginal.lowrank`, which also states the tolerance).

    Returns
    -------
    pymc.Model
        With data ``Phi``, ``gram`` (``Phi^T Phi``, dense marginal form) or ``Phi_U`` and
        ``Phi_VS`` (low-rank marginal form), and ``y_obs``; free variables
        ``alpha`` (and ``nu`` if random), ``sigma`` and, in the joint form, ``z``; deterministics
        ``beta`` and, in the joint form, ``w``; the observed variable ``y``. Attributes
        ``model.rvm_settings`` (a dict) record the choices made.

    Notes
    -----
    Change the data with :func:`set_model_data`, which keeps ``gram`` consistent with ``Phi``.
    """
    Phi = np.asarray(Phi, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if Phi.ndim != 2:
        raise ValueError(f"Phi must be 2-D, got shape {Phi.shape}.")
    if y.ndim not in (1, 2) or y.shape[0] != Phi.shape[0]:
        raise ValueError(
            f"y must have shape ({Phi.shape[0]},) or ({Phi.shape[0]}, D), got {y.shape}."
        )
    if not (np.all(np.isfinite(Phi)) and np.all(np.isfinite(y))):
        raise ValueError("Phi and y must be finite.")
    if prior not in ("ard", "student_t"):
        raise ValueError(f"prior must be 'ard' or 'student_t', got {prior!r}.")
    if form not in ("marginal", "joint"):
        raise ValueError(f"form must be 'marginal' or 'joint', got {form!r}.")
    if alpha_prior is not None and prior != "ard":
        raise ValueError("alpha_prior replaces the ARD hyperprior; use it with prior='ard'.")
    cols = np.arange(Phi.shape[1]) if basis is None else np.asarray(basis, dtype=int)
    Phi = Phi[:, cols]
    N, M = Phi.shape
    names = list(cols) if basis_names is None else list(basis_names)
    if len(names) != M:
        raise ValueError(f"basis_names has {len(names)} entries for {M} basis functions.")
    all_coords = {OBS: np.arange(N), BASIS: names}
    multi = y.ndim == 2
    if multi:
        D = y.shape[1]
        all_coords[OUTPUT] = list(range(D)) if output_names is None else list(output_names)
    all_coords.update(coords or {})
    y_dims = (OBS, OUTPUT) if multi else (OBS,)
    w_dims = (BASIS, OUTPUT) if multi else (BASIS,)

    with pm.Model(coords=all_coords) as model:
        Phi_data = pm.Data("Phi", Phi, dims=(OBS, BASIS))
        y_data = pm.Data("y_obs", y, dims=y_dims)

        if prior == "ard":
            alpha = (alpha_prior or (lambda n, d: halfcauchy_scale_alpha(n, tau=tau, dims=d)))(
                "alpha", BASIS
            )
        else:
            nu_var = nu("nu") if callable(nu) else float(nu)
            if not callable(nu) and not (np.isfinite(nu_var) and nu_var > 0):
                raise ValueError(f"nu must be positive, got {nu!r}.")
            alpha = pm.Gamma("alpha", alpha=nu_var / 2.0, beta=nu_var * s**2 / 2.0, dims=BASIS)
        sigma = (noise_prior or _default_noise_prior)("sigma")
        pm.Deterministic("beta", sigma**-2.0)
        log_alpha = pt.log(alpha)
        log_beta = -2.0 * pt.log(sigma)

        if form == "marginal":
            lowrank, design = _marginal_design(Phi, marginal)
            if lowrank:
                params = [log_alpha, log_beta, *(pm.Data(k, v) for k, v in design.items())]
                signature = "(m),(),(n,r),(m,r)"
            else:
                params = [log_alpha, log_beta, Phi_data, pm.Data("gram", design["gram"])]
                signature = "(m),(),(n,m),(m,m)"
            if multi:
                params.append(pt.zeros(y.shape[1]))
                signature += ",(d)->(n,d)"
            else:
                signature += "->(n)"
            pm.CustomDist(
                "y",
                *params,
                logp=_lowrank_y_logp if lowrank else _marginal_y_logp,
                random=_lowrank_y_random if lowrank else _marginal_y_random,
                signature=signature,
                observed=y_data,
                dims=y_dims,
            )
        else:
            z = pm.Normal("z", 0.0, 1.0, dims=w_dims)
            scale = pt.exp(-0.5 * log_alpha)
            w = pm.Deterministic("w", z * (scale[:, None] if multi else scale), dims=w_dims)
            pm.Normal(
                "y", mu=Phi_data @ w, sigma=sigma, observed=y_data, shape=y_data.shape, dims=y_dims
            )

    model.rvm_settings = {
        "prior": prior,
        "form": form,
        "tau": float(tau) if prior == "ard" and alpha_prior is None else None,
        "nu": float(nu) if prior == "student_t" and not callable(nu) else None,
        "nu_random": bool(prior == "student_t" and callable(nu)),
        "s": float(s) if prior == "student_t" else None,
        "custom_alpha_prior": alpha_prior is not None,
        "custom_noise_prior": noise_prior is not None,
        "basis": [int(c) for c in cols],
        "n_outputs": int(y.shape[1]) if multi else 0,
    }
    if form == "marginal":
        model.rvm_settings["marginal"] = "lowrank" if lowrank else "dense"
    return model


def _marginal_design(Phi: np.ndarray, marginal: str) -> tuple[bool, dict[str, np.ndarray]]:
    """The data of the marginal likelihood: ``Phi^T Phi`` or the thin SVD factors of ``Phi``."""
    if marginal not in ("auto", "dense", "lowrank"):
        raise ValueError(f"marginal must be 'auto', 'dense' or 'lowrank', got {marginal!r}.")
    if marginal != "dense":
        U, VS = thin_svd(Phi)
        if marginal == "lowrank" or use_lowrank(U.shape[1], Phi.shape[1]):
            return True, {"Phi_U": U, "Phi_VS": VS}
    return False, {"gram": Phi.T @ Phi}


def set_model_data(model: pm.Model, Phi: np.ndarray, y: np.ndarray) -> None:
    """Replace the data of a model built by :func:`rvm_regression_model` (same basis size).

    Keeps the ``gram`` (or thin SVD) data of the marginal form consistent with ``Phi``, updates
    the ``obs`` coordinate, and lets compiled samplers be reused (no new graph is built).
    """
    Phi = np.asarray(Phi, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    values = {"Phi": Phi, "y_obs": y}
    if "gram" in model.named_vars:
        values["gram"] = Phi.T @ Phi
    if "Phi_U" in model.named_vars:
        values["Phi_U"], values["Phi_VS"] = thin_svd(Phi)
    with model:
        pm.set_data(values, coords={OBS: np.arange(Phi.shape[0])})


# ---------------------------------------------------------------------------------------------
# Classification: Bernoulli-logit (two classes) and Categorical-softmax. The weights have no
# closed-form marginal under these likelihoods, so the model is the joint one, non-centred; the
# softmax rows share one alpha (one relevance set for all classes), as in the Laplace engines.
# ---------------------------------------------------------------------------------------------
def rvm_classification_model(
    Phi: np.ndarray,
    y: np.ndarray,
    *,
    likelihood: Literal["auto", "bernoulli", "softmax"] = "auto",
    prior: Literal["ard", "student_t"] = "ard",
    tau: float = 1.0,
    nu: float = DEFAULT_NU,
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
        w = pm.Deterministic(
            "w", z * (scale[:, None] if likelihood == "softmax" else scale), dims=w_dims
        )
        eta = Phi_data @ w
        if likelihood == "bernoulli":
            pm.Bernoulli("y", logit_p=eta, observed=y_data, dims=OBS)
        else:
            pm.Categorical("y", logit_p=eta, observed=y_data, dims=OBS)
    model.rvm_settings = {
        "likelihood": likelihood,
        "prior": prior,
        "tau": float(tau),
        "nu": float(nu),
        "s": float(s),
        "n_classes": C,
    }
    return model


def rvm_width_model(
    X: np.ndarray,
    y: np.ndarray,
    centres: np.ndarray,
    *,
    kernel: Literal["rbf", "laplacian"] = "rbf",
    log_width_mu: float | None = None,
    log_width_sigma: float = 1.0,
    bias: bool = True,
    tau: float = 1.0,
    noise_prior: NoisePrior | None = None,
) -> pm.Model:
    """The RVM regression model with the kernel width sampled beside the alphas and the noise.

    The basis functions are ``k(x, c_j; r) / ||k(., c_j; r)||`` (unit-norm columns over the
    training inputs, as the estimators fit) on the given centres, plus a constant bias column, and
    the weights are integrated out: ``y ~ N(0, sigma^2 I + Phi(r) A^-1 Phi(r)^T)``.

    Priors: ``log r ~ Normal(log_width_mu, log_width_sigma)`` (default centre: the log median
    distance between the inputs, and a standard deviation of 1: the width known within a factor of
    about 7 either way at 95%); ``alpha_j`` from :func:`halfcauchy_scale_alpha` with scale ``tau``;
    ``sigma`` from ``noise_prior`` (default ``HalfNormal(1)``, weak for targets of unit RMS).

    Parameters
    ----------
    X : ndarray of shape (N, P)
        Training inputs.
    y : ndarray of shape (N,)
        Targets (best scaled to unit RMS).
    centres : ndarray of shape (K, P)
        Centres of the basis functions: the relevance vectors of a type-II fit (the practical
        choice, see Notes), or all the inputs for small N.
    kernel : {"rbf", "laplacian"}, default="rbf"
        ``exp(-||x - c||^2 / r^2)`` or ``exp(-||x - c||_1 / r)``.
    log_width_mu, log_width_sigma : float
        Normal prior of ``log r``.
    bias : bool, default=True
        Add a constant basis function.
    tau : float, default=1.0
        Scale of the ARD hyperprior.
    noise_prior : callable, optional
        ``noise_prior(name) -> TensorVariable`` for the noise standard deviation ``sigma``.

    Returns
    -------
    pymc.Model
        Free variables ``log_width``, ``alpha[basis]``, ``sigma``; deterministics ``width`` and
        ``beta``; observed ``y``.

    Notes
    -----
    Where it stops being practical, and why: the width moves every column of ``Phi``, so no
    Gram matrix or thin factor of the design can be cached between gradient evaluations (the
    weight-marginalised Op of :func:`rvm_regression_model` keeps ``Phi^T Phi`` fixed). Each
    gradient is then a dense N x N Cholesky factorisation, O(N^3 + N^2 K): about a millisecond at
    N = 100, but at N = 1000 some 0.1 s per leapfrog step, hours for a few thousand draws. And
    with all N inputs as centres the K = N alphas and the width are strongly coupled (a narrower
    width can be traded against more basis functions), which NUTS explores with small steps.
    Sample it for N up to a few hundred, on the relevance vectors of a type-II fit.
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    centres = np.asarray(centres, dtype=np.float64)
    if X.ndim != 2 or centres.ndim != 2 or centres.shape[1] != X.shape[1]:
        raise ValueError(
            f"X and centres must be 2-D with the same number of features, got {X.shape} and "
            f"{centres.shape}."
        )
    if y.shape != (X.shape[0],):
        raise ValueError(f"y must have shape ({X.shape[0]},), got {y.shape}.")
    if kernel not in ("rbf", "laplacian"):
        raise ValueError(f"kernel must be 'rbf' or 'laplacian', got {kernel!r}.")
    if not (np.isfinite(log_width_sigma) and log_width_sigma > 0):
        raise ValueError(f"log_width_sigma must be positive, got {log_width_sigma!r}.")
    diff = X[:, None, :] - centres[None, :, :]
    dist = np.sum(diff**2, axis=-1) if kernel == "rbf" else np.sum(np.abs(diff), axis=-1)
    if log_width_mu is None:
        d2 = np.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1)
        log_width_mu = 0.5 * float(np.log(np.median(d2[np.triu_indices(X.shape[0], 1)])))
    N, K = dist.shape
    names = list(range(K + 1 if bias else K))  # the bias is column K, as in KernelBasis
    with pm.Model(coords={OBS: np.arange(N), BASIS: names}) as model:
        log_width = pm.Normal("log_width", log_width_mu, log_width_sigma)
        width = pm.Deterministic("width", pt.exp(log_width))
        scaled = dist * pt.exp(-2.0 * log_width) if kernel == "rbf" else dist / width
        Kmat = pt.exp(-scaled)
        Phi = Kmat / pt.sqrt(pt.sum(Kmat**2, axis=0))
        if bias:
            Phi = pt.concatenate([Phi, pt.ones((N, 1)) / np.sqrt(N)], axis=1)
        alpha = halfcauchy_scale_alpha("alpha", tau=tau, dims=BASIS)
        sigma = (noise_prior or _default_noise_prior)("sigma")
        pm.Deterministic("beta", sigma**-2.0)
        cov = (Phi / alpha) @ Phi.T + sigma**2 * pt.eye(N)
        pm.MvNormal("y", mu=pt.zeros(N), cov=cov, observed=y, dims=OBS)
    model.rvm_settings = {
        "kernel": kernel,
        "log_width_mu": float(log_width_mu),
        "log_width_sigma": float(log_width_sigma),
        "bias": bool(bias),
        "tau": float(tau),
    }
    return model
