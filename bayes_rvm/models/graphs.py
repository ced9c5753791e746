"""The PyMC models of the RVM; the only module of the package that builds PyMC graphs.

Regression model (notation of Tipping 2001 and Bishop 2006, section 7.2)::

    alpha_rel_i ~ hyperprior (a Prior)    i = 1..M   (one per basis function, shared by outputs)
    sigma_rel   ~ noise prior (a Prior)
    alpha_i = alpha_rel_i phi_scale_i^2 / y_scale^2,  sigma = sigma_rel y_scale,  beta = sigma^-2
    w_id | alpha_i ~ N(0, 1 / alpha_i)
    t_nd | w, sigma ~ N(phi_n^T w_d + offset_nd, sigma^2)

The hyperpriors are stated for the normalised problem (columns ``Phi / phi_scale`` of unit
root-mean-square, targets ``y / y_scale`` of unit RMS, as the estimators pass them:
:func:`bayes_rvm.evidence.problem.prior_column_scale`) and the model writes that normalisation into
its
graph, so the posterior is in the units of ``Phi`` and ``y`` while one set of default hyperpriors
(:mod:`bayes_rvm.models.priors`) suits any scale and any number of rows. Without ``phi_scale`` the
hyperpriors apply to ``Phi``'s columns as they are.

Two forms of the same posterior over ``(alpha, sigma)``:

``form="marginal"``
    ``w`` integrated out: ``t_d - offset_d ~ N(0, C)``, ``C = beta^-1 I + Phi A^-1 Phi^T``. The log
    density is the custom PyTensor Op of :mod:`bayes_rvm.models.marginal`, with a closed-form
    gradient
    and NumPy, numba (nutpie) and JAX (numpyro / blackjax) backends. The weights are drawn back
    from ``N(m, Sigma)`` after sampling (:func:`bayes_rvm.inference.complete_posterior`).

``form="joint"``
    The weights sampled, with an ordinary ``pm.Normal`` likelihood: the form to extend with terms
    of one's own. Under Gaussian noise ``w ~ N(0, 1/alpha)`` is sampled through the value
    transform ``w = m + Sigma^(1/2) u`` by its Gaussian posterior given the hyperparameters and
    the offset (:mod:`bayes_rvm.models.whitening`), in which the joint posterior is the marginal
    one times ``N(u | 0, I)``: NUTS samples it as it samples the marginal form (sinc N = 60 on
    the full basis, 4 x 1000 draws: no divergence, where the non-centred ``z = w sqrt(alpha)``
    had 903 and R-hat 1.48). Under Student-t noise the same transform, at the noise precision
    of the t's Fisher information, ``beta (nu + 1) / (nu + 3)``. ``centred`` samples ``w`` as it is.

Priors on the weights:

``prior="ard"``
    ``w_i | alpha_i ~ N(0, 1/alpha_i)``. The default hyperprior is the R2-D2 prior
    (``alpha_prior="r2d2"``, :func:`bayes_rvm.models.priors.r2d2_precision`), which states the
    prior for the function, so that it does not grow with the number of columns;
    :data:`bayes_rvm.models.priors.DEFAULT_REGRESSION_ALPHA_PRIOR` names it. The half-Cauchy
    (``alpha_prior="halfcauchy"``, the classifiers' default) puts a half-Cauchy(0.1) on the
    relative prior *scale* ``alpha_rel_i^(-1/2)`` (Gelman 2006; the horseshoe's local scale). In
    ``log alpha`` its density is a hyperbolic secant with exponential tails
    ``exp(-|log alpha|/2)``, smooth enough that NUTS meets no walls. It does not determine
    relevance: with a redundant basis each alpha's posterior stays near its prior (see
    :mod:`bayes_rvm.models.priors`, which also offers
    :func:`bayes_rvm.models.priors.sparse_alpha_prior`, and
    what it costs). Per column, it makes the prior on the function grow with the number of
    columns. A Gamma hyperprior on ``alpha`` (Tipping's choice) with small
    shape and rate is available through ``alpha_prior``; NUTS wanders over its flat ``log alpha``.
``prior="student_t"``
    ``alpha_rel_i ~ Gamma(nu/2, nu s^2 / 2)``, which integrates to relative weights
    ``StudentT(nu, 0, s)`` (Tipping 2001; Prince 2012, chapter 8). ``nu`` is fixed or a
    :class:`Prior`. A ``nu`` whose Gamma lies below float64 warns.

Terms of the user's own join the mean through ``offset`` (a fixed array, or a callable that creates
variables with priors of their own), in both forms; see :func:`rvm_regression_model`.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from scipy.special import expit

from bayes_rvm._warnings import PACKAGE_FRAMES
from bayes_rvm.basis.kernels import stationary_distances, stationary_kernel
from bayes_rvm.dims import BASIS, CENTRE, CLASS, FEATURE, OBS, OUTPUT
from bayes_rvm.families import ETA_MAX, LOG_2PI
from bayes_rvm.models.marginal import (
    lowrank_marginal_log_likelihood,
    marginal_log_likelihood,
    statistics_log_density_offset,
    thin_svd,
    use_lowrank,
)
from bayes_rvm.models.noise import (
    NOISE_NU_PRIOR,
    joint_weights,
    noise_nu_spec,
    noise_nu_variable,
    observed_noise,
)
from bayes_rvm.models.priors import (
    DEFAULT_GAMMA_PRIOR,
    DEFAULT_MCMC_NU,
    DEFAULT_NOISE_PRIOR,
    DEFAULT_NU,
    DEFAULT_WEIGHT_SCALE,
    Prior,
    as_prior,
    default_alpha_prior,
)
from bayes_rvm.models.spec import (
    MARGINAL_NORMAL,
    RVMSpec,
    model_cache_key,
    model_spec,
    record_spec,
)
from bayes_rvm.models.whitening import whitened_gaussian_weights

__all__ = [
    "NOISE_NU_PRIOR",
    "RVMSpec",
    "class_contrasts",
    "model_cache_key",
    "model_spec",
    "prior_draw",
    "quiet_marginal_draw",
    "rvm_classification_model",
    "rvm_poisson_model",
    "rvm_regression_model",
    "rvm_width_model",
    "set_model_data",
]


# ---------------------------------------------------------------------------------------------
# The pieces both models share
# ---------------------------------------------------------------------------------------------
def _check_design(Phi, phi_scale, basis, basis_names):
    Phi = np.asarray(Phi, dtype=np.float64)
    if Phi.ndim != 2:
        raise ValueError(f"Phi must be 2-D, got shape {Phi.shape}.")
    if not np.all(np.isfinite(Phi)):
        raise ValueError("Phi must be finite.")
    cols = np.arange(Phi.shape[1]) if basis is None else np.asarray(basis, dtype=int)
    Phi = Phi[:, cols]
    M = Phi.shape[1]
    if phi_scale is None:
        scale = np.ones(M)
    else:
        scale = np.asarray(phi_scale, dtype=np.float64)
        n_all = cols.size if basis is None else None
        if scale.ndim != 1 or (n_all is not None and scale.size != n_all):
            raise ValueError(f"phi_scale must have one entry per column of Phi, got {scale.shape}.")
        scale = scale[cols]
        if not (np.all(np.isfinite(scale)) and np.all(scale > 0)):
            raise ValueError("phi_scale must hold positive finite numbers.")
    names = list(cols) if basis_names is None else list(basis_names)
    if len(names) != M:
        raise ValueError(f"basis_names has {len(names)} entries for {M} basis functions.")
    return Phi, scale, cols, names


def _weight_precision(prior, alpha_prior, nu, s, phi_scale, y_scale):
    """``alpha_rel`` from its hyperprior, and ``alpha`` and ``log_alpha`` in the units of the
    design and targets (``log_alpha`` is named so that posterior plots of the precisions, which
    span decades, can be read on its scale).

    ``alpha_prior`` and ``s`` are resolved (:func:`_resolve_priors`).
    """
    if prior == "ard":
        alpha_rel = alpha_prior.create_variable("alpha_rel", dims=BASIS)
    else:
        nu_var = nu.create_variable("nu") if isinstance(nu, Prior) else float(nu)
        alpha_rel = pm.Gamma("alpha_rel", alpha=nu_var / 2.0, beta=nu_var * s**2 / 2.0, dims=BASIS)
    # w_rel = w * phi_scale / y_scale has prior precision alpha_rel, hence (phi_scale the column
    # RMS as the estimators pass it, so that alpha_rel means the same per row at every N)
    # alpha = alpha_rel * phi_scale^2 / y_scale^2.
    alpha = pm.Deterministic("alpha", alpha_rel * phi_scale**2 / y_scale**2, dims=BASIS)
    return alpha, pm.Deterministic("log_alpha", pt.log(alpha), dims=BASIS)


def _resolve_priors(prior, alpha_prior, nu, s, default="ard"):
    """The ARD hyperprior (None under Student-t) and the Student-t scale (None under ARD) that a
    model is built with; warns where a fixed ``nu`` makes ``Gamma(nu/2, nu s^2/2)`` a prior NUTS
    cannot sample: with a shape of ``nu / 2`` the probability of ``alpha_rel < x`` is about
    ``x^(nu/2)``, so at the type-II default ``nu = 1e-4`` most of the mass lies below 1e-300,
    beyond float64. ``default`` names the ARD hyperprior used when none is given."""
    if prior == "ard":
        return alpha_prior or default_alpha_prior(default), None
    if not isinstance(nu, Prior):
        from scipy.special import gammainc

        tiny = float(gammainc(nu / 2.0, 1e-300 * nu * s**2 / 2.0))
        if tiny > 0.01:
            warnings.warn(
                f"the Student-t hyperprior Gamma(nu/2, nu s^2/2) at nu={nu:g} puts {tiny:.0%} of "
                f"its mass below alpha = 1e-300, outside float64: NUTS will wander over hundreds "
                f"of decades of log alpha and diverge. Sample with nu of 0.1 or more (the "
                f"estimators' nu='auto' samples nu={DEFAULT_MCMC_NU:g}); nu=1e-4 suits type-II.",
                RuntimeWarning,
                skip_file_prefixes=PACKAGE_FRAMES,
            )
    return None, float(s)


def _check_priors(prior, form, alpha_prior, nu, s, forms=("marginal", "joint")):
    if prior not in ("ard", "student_t"):
        raise ValueError(f"prior must be 'ard' or 'student_t', got {prior!r}.")
    if form not in forms:
        raise ValueError(f"form must be one of {forms}, got {form!r}.")
    alpha_prior = as_prior(alpha_prior, "alpha_prior", positive=True)
    if alpha_prior is not None and prior != "ard":
        raise ValueError(
            "alpha_prior replaces the ARD hyperprior; use it with prior='ard' (the Student-t "
            "prior is set by nu and s)."
        )
    if isinstance(nu, Prior):
        as_prior(nu, "nu", positive=True)
    elif not (np.isfinite(nu) and nu > 0):
        raise ValueError(f"nu must be positive or a Prior, got {nu!r}.")
    if not (np.isfinite(s) and s > 0):
        raise ValueError(f"s must be positive, got {s!r}.")
    return alpha_prior


def _check_offset_shape(got: tuple, shape: tuple, what: str) -> None:
    """Raise unless an offset of shape ``got`` broadcasts onto the mean's ``shape`` unambiguously.

    A scalar, or the mean's own number of dimensions with each size either the mean's or 1 (a
    row-wise ``(N, 1)`` or output-wise ``(1, D)`` term of several outputs). NumPy would also align
    a 1-D ``(D,)`` with the outputs of ``(N, D)``: a per-row offset of that length (``N == D``)
    would be added along the wrong axis without a word, so 1-D offsets of several outputs are
    refused. Unknown sizes (None) pass.
    """
    ok = len(got) == 0 or (
        len(got) == len(shape)
        and all(g is None or g in (1, n) for g, n in zip(got, shape, strict=True))
    )
    if not ok:
        rows = "(N,)" if len(shape) == 1 else "(N, D), (N, 1) or (1, D)"
        raise ValueError(
            f"offset: {what} has shape {tuple(got)}, but the mean it joins has shape {shape}; "
            f"give a scalar or an array of shape {rows} with N = {shape[0]} training rows"
            + (f" and D = {shape[1]} outputs or classes." if len(shape) == 2 else ".")
        )


def _offset_term(offset, y_dims, shape):
    """The user's terms of the mean: None, a fixed array (``pm.Data``) or a callable's tensor.

    Checked before it joins the graph: a number array (or a tensor) of a shape that broadcasts
    onto the mean's (:func:`_check_offset_shape`), finite values, a callable that returns one.
    """
    shape = tuple(int(n) for n in shape)
    # Sized by the model's dimensions (shared lengths, read at run time), not by numbers: the
    # data's sizes as constants would enter the compiled graph's on-disk cache key, and every
    # new data shape would compile again (bayes_rvm.inference.nutpie_backend).
    sizes = [pm.modelcontext(None).dim_lengths[d] for d in y_dims]
    if offset is None:
        return pt.zeros(sizes), None
    if callable(offset):
        value = offset(pm.modelcontext(None))
        if value is None:
            raise ValueError(
                f"offset: the callable returned None; it must return the term of the mean, a "
                f"tensor (or array) of shape {shape} or one that broadcasts onto it."
            )
        try:
            term = pt.as_tensor_variable(value)
        except (TypeError, ValueError, NotImplementedError) as err:
            raise ValueError(
                f"offset: the callable returned {type(value).__name__}, which is not a tensor "
                f"({err})."
            ) from err
        if term.dtype.startswith("complex"):
            raise ValueError(f"offset: the callable returned a tensor of dtype {term.dtype}.")
        _check_offset_shape(term.type.shape, shape, "the callable's tensor")
        if any(n is None for n in term.type.shape):
            # Sizes unknown to the graph's types (a variable of symbolic size): ask the graph.
            try:
                actual = tuple(int(n) for n in term.shape.eval())
            except Exception:  # shapes that need values: broadcast_to checks them at run time
                actual = None
            if actual is not None:
                _check_offset_shape(actual, shape, "the callable's tensor")
        return pm.Deterministic("offset", pt.broadcast_to(term, sizes), dims=y_dims), "custom"
    try:
        value = np.asarray(offset, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"offset must be numbers (an array, or a callable returning a tensor); got "
            f"{type(offset).__name__} ({err})."
        ) from err
    _check_offset_shape(value.shape, shape, "the array")
    value = np.broadcast_to(value, shape)
    if not np.all(np.isfinite(value)):
        raise ValueError("offset must be finite.")
    return pm.Data("offset", value.copy(), dims=y_dims), "data"


# ---------------------------------------------------------------------------------------------
# The regression model
# ---------------------------------------------------------------------------------------------
def _refuse_elementwise_logp() -> None:
    """Stop ``pm.compute_log_likelihood`` on a weight-marginalised ``y``, with the way out.

    Its log density is one joint term per draw, not one per observation: PyMC would store a
    single-observation ``log_likelihood`` group over the pointwise one, after which ``az.loo``
    sees one observation. PyMC builds that graph through ``compute_log_density``; the sampler's
    graph never passes there.
    """
    if _pymc_on_stack("compute_log_density"):
        raise ValueError(
            "pm.compute_log_likelihood cannot give pointwise terms for the weight-"
            "marginalised RVM likelihood: with w integrated out the observations are "
            "dependent and its log density is one joint term per draw. The fits of "
            "bayes_rvm already hold the right pointwise terms (the exact leave-one-out "
            "densities ln p(t_n | t_-n, alpha, sigma)) in log_likelihood; for a pm.sample "
            "result, add them with bayes_rvm.inference.complete_posterior(idata, model)."
        )


def _marginal_y_logp(value, log_alpha, log_beta, Phi, gram, offset):
    _refuse_elementwise_logp()
    return marginal_log_likelihood(log_alpha, log_beta, Phi, value - offset, gram)


def _lowrank_y_logp(value, log_alpha, log_beta, Phi, U, VS, offset):
    _refuse_elementwise_logp()
    return lowrank_marginal_log_likelihood(log_alpha, log_beta, U, VS, value - offset)


def _marginal_design(Phi: np.ndarray, marginal: str) -> tuple[bool, dict[str, np.ndarray]]:
    """The data of the marginal likelihood: ``Phi^T Phi`` or the thin SVD factors of ``Phi``."""
    if marginal not in ("auto", "dense", "lowrank"):
        raise ValueError(f"marginal must be 'auto', 'dense' or 'lowrank', got {marginal!r}.")
    if marginal != "dense":
        U, VS = thin_svd(Phi)
        if marginal == "lowrank" or use_lowrank(U.shape[1], Phi.shape[1]):
            return True, {"Phi_U": U, "Phi_VS": VS}
    return False, {"gram": Phi.T @ Phi}


def _pymc_on_stack(function: str) -> bool:
    """Whether PyMC's ``function`` is on the call stack.

    PyMC offers no hook to tell a log density built for sampling from one built for
    ``compute_log_likelihood``, nor a draw for a model graph from one for the posterior
    predictive; the caller's name does.
    """
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == function and "pymc" in code.co_filename:
            return True
        frame = frame.f_back
    return False


def quiet_marginal_draw() -> None:
    """Leave out numba's notice that it runs the marginal ``y``'s draw in object mode.

    That draw stays a Python function (:func:`_y_draw`): it alone can tell a prior predictive
    from a posterior predictive, which it must refuse. Running in object mode is all the notice
    says, and it would come with every ``pm.sample_prior_predictive`` of these models. Applied
    when this module is imported, and again by the estimators around their own calls.
    """
    warnings.filterwarnings(
        "ignore",
        message=f"Numba will use object mode to run {MARGINAL_NORMAL}_rv",
        category=UserWarning,
    )


quiet_marginal_draw()


def _y_draw(Phi, log_alpha, log_beta, offset, rng, size) -> np.ndarray:
    """A draw of ``y`` given the hyperparameters, with ``w`` drawn from its prior.

    That is what the weight-marginalised model says (as ``pm.gp.Marginal`` does), and what
    ``pm.sample_prior_predictive`` wants; PyMC's model graphs also draw ``y`` to learn its shape.
    """
    # PyMC's posterior predictive would draw w from that prior too, not from its posterior: a
    # silently wrong answer, so it is refused by name (no other PyMC call draws y's posterior).
    if _pymc_on_stack("sample_posterior_predictive"):
        raise NotImplementedError(
            "the weight-marginalised RVM likelihood has no posterior draw: "
            "pm.sample_posterior_predictive would integrate w over its prior, not its posterior. "
            "Use est.sample_posterior_predictive(X) on a fitted RVR, or "
            "bayes_rvm.inference.sample_posterior_predictive(idata, model), which draw w from "
            "its posterior; pm.sample_prior_predictive draws y with w from its prior."
        )
    offset = np.asarray(offset)
    # A vectorised draw (PyMC's change_dist_size, vectorize_graph) hands the parameters with
    # batch dimensions, at least of length one, in front of their core ones: log_alpha's is (m).
    core = offset.shape[np.ndim(log_alpha) - 1 :]  # (n,) or (n, d)
    batch = () if size is None else tuple(size)
    if batch[len(batch) - len(core) :] == core:
        batch = batch[: len(batch) - len(core)]
    return prior_draw(Phi, log_alpha, log_beta, offset, rng, batch, core=core)[1]


def prior_draw(
    Phi, log_alpha, log_beta, offset, rng, batch=(), *, core=None
) -> tuple[np.ndarray, np.ndarray]:
    """Weights from their prior ``N(0, 1 / alpha)`` and targets ``Phi w + offset + noise``.

    Parameters
    ----------
    Phi : ndarray of shape (n, m) or (..., n, m)
    log_alpha : ndarray of shape (m,) or (..., m)
    log_beta : float or ndarray of shape batch
        The noise precision's logarithm.
    offset : ndarray of shape (n,) or (n, d), or with leading dimensions that broadcast to batch
        The rest of the mean.
    rng : numpy.random.Generator
    batch : tuple of int
        The draws' leading shape (the ``...`` of the shapes here).
    core : tuple of int, optional
        The shape of one draw of the targets, ``(n,)`` or ``(n, d)``; default ``offset.shape``.

    Returns
    -------
    w : ndarray of shape (..., m) or (..., m, d)
    y : ndarray of shape (..., n) or (..., n, d)
    """
    core = offset.shape if core is None else tuple(core)
    multi = len(core) > 1
    scale = np.exp(-0.5 * np.asarray(log_alpha))
    w = rng.standard_normal((*batch, scale.shape[-1], *core[1:]))
    w *= scale[..., None] if multi else scale
    mean = np.einsum("...nm,...md->...nd" if multi else "...nm,...m->...n", Phi, w)
    noise_sd = np.exp(-0.5 * np.asarray(log_beta, dtype=np.float64))
    noise_sd = noise_sd.reshape(noise_sd.shape + (1,) * len(core))
    return w, offset + mean + noise_sd * rng.standard_normal((*batch, *core))


def _marginal_y_random(log_alpha, log_beta, Phi, gram, offset, rng=None, size=None):
    return _y_draw(Phi, log_alpha, log_beta, offset, rng, size)


def _lowrank_y_random(log_alpha, log_beta, Phi, U, VS, offset, rng=None, size=None):
    return _y_draw(Phi, log_alpha, log_beta, offset, rng, size)


def _width_y_random(log_alpha, log_beta, Phi, mean, rng=None, size=None):
    return _y_draw(Phi, log_alpha, log_beta, mean, rng, size)


def _noise_sd(noise_prior: Prior | None, noise_sd: float | None, y_scale_data):
    """The Deterministics ``sigma`` (sampled as ``sigma_rel * y_scale``, or fixed) and ``beta``."""
    if noise_sd is None:
        sigma_rel = (noise_prior or DEFAULT_NOISE_PRIOR).create_variable("sigma_rel")
        sigma = pm.Deterministic("sigma", sigma_rel * y_scale_data)
    else:
        sigma = pm.Deterministic("sigma", pt.as_tensor_variable(float(noise_sd)))
    pm.Deterministic("beta", sigma**-2.0)
    return sigma


def _with_row_count(logp: Callable, random: Callable) -> tuple[Callable, Callable]:
    """The marginal ``y``'s density and draw on a compressed design of ``n_rows`` data rows.

    The compressed design (:func:`bayes_rvm.models.marginal.compressed_design`) has the data's
    sufficient statistics over ``k`` rows; the density misses only its ``N``-dependent constant
    and ``log beta`` terms, added here (the last parameter is ``n_rows``).
    """

    def counted_logp(value, *params):
        *params, n_rows = params
        n_outputs = 1 if value.ndim == 1 else value.shape[1]
        log_beta = params[1]
        missing = statistics_log_density_offset(log_beta, n_rows, value.shape[0], n_outputs)
        return logp(value, *params) + missing

    def counted_random(*params, rng=None, size=None):
        return random(*params[:-1], rng=rng, size=size)

    return counted_logp, counted_random


def _marginal_y(Phi: np.ndarray, marginal: str, terms: tuple, y_data, y_dims, n_rows=None) -> bool:
    """The observed ``y`` of the marginal form, dense or low-rank; whether it is low-rank.

    ``terms`` are ``(log_alpha, log_beta, Phi_data, offset)`` of the model being built;
    ``n_rows`` (a data variable) makes ``Phi`` and ``y`` a compressed design of that many rows.
    """
    log_alpha, log_beta, Phi_data, off = terms
    lowrank, design = _marginal_design(Phi, marginal)
    if lowrank:
        # Phi is a parameter the density does not read: the prior draw uses it, and the
        # model's graph shows what y depends on.
        params = [log_alpha, log_beta, Phi_data, *(pm.Data(k, v) for k, v in design.items())]
        signature = "(m),(),(n,m),(n,r),(m,r)"
    else:
        params = [log_alpha, log_beta, Phi_data, pm.Data("gram", design["gram"])]
        signature = "(m),(),(n,m),(m,m)"
    signature += ",(n,d)" if len(y_dims) == 2 else ",(n)"
    logp = _lowrank_y_logp if lowrank else _marginal_y_logp
    random = _lowrank_y_random if lowrank else _marginal_y_random
    extra = []
    if n_rows is not None:
        logp, random = _with_row_count(logp, random)
        extra, signature = [n_rows], signature + ",()"
    signature += "->(n,d)" if len(y_dims) == 2 else "->(n)"
    pm.CustomDist(
        "y",
        *params,
        off,
        *extra,
        logp=logp,
        random=random,
        signature=signature,
        observed=y_data,
        dims=y_dims,
        class_name=MARGINAL_NORMAL,
    )
    return lowrank


def _gaussian_spec(y: np.ndarray, noise_prior, noise_sd, **fields) -> RVMSpec:
    """The spec of a model with a noise scale: the noise and output count from its arguments."""
    return RVMSpec(
        likelihood=fields.pop("likelihood", "gaussian"),
        noise_prior=(noise_prior or DEFAULT_NOISE_PRIOR) if noise_sd is None else None,
        noise_sd=None if noise_sd is None else float(noise_sd),
        n_outputs=int(y.shape[1]) if y.ndim == 2 else 0,
        **fields,
    )


def _check_targets(y, n: int, y_scale) -> tuple[np.ndarray, float]:
    """Regression targets of ``n`` rows and their scale, checked."""
    y = np.asarray(y, dtype=np.float64)
    if y.ndim not in (1, 2) or y.shape[0] != n:
        raise ValueError(f"y must have shape ({n},) or ({n}, D), got {y.shape}.")
    if not np.all(np.isfinite(y)):
        raise ValueError("y must be finite.")
    y_scale = 1.0 if y_scale is None else float(y_scale)
    if not (np.isfinite(y_scale) and y_scale > 0):
        raise ValueError(f"y_scale must be positive, got {y_scale!r}.")
    return y, y_scale


def rvm_regression_model(
    Phi: np.ndarray,
    y: np.ndarray,
    *,
    prior: Literal["ard", "student_t"] = "ard",
    form: Literal["marginal", "joint"] = "marginal",
    alpha_prior: Prior | None = None,
    nu: float | Prior = DEFAULT_NU,
    s: float = DEFAULT_WEIGHT_SCALE,
    noise_prior: Prior | None = None,
    noise_sd: float | None = None,
    phi_scale: np.ndarray | None = None,
    y_scale: float | None = None,
    offset: np.ndarray | Callable[[pm.Model], pt.TensorVariable] | None = None,
    basis: Sequence[int] | np.ndarray | None = None,
    basis_names: Sequence | None = None,
    output_names: Sequence | None = None,
    coords: dict | None = None,
    marginal: Literal["auto", "dense", "lowrank"] = "auto",
    centred: bool = False,
    likelihood: Literal["gaussian", "student_t"] = "gaussian",
    noise_nu: float | Prior | None = None,
    n_rows: int | None = None,
) -> pm.Model:
    """Build the RVM regression model on a design matrix.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
        Design matrix (for a kernel machine, the N + 1 columns of
        :meth:`bayes_rvm.basis.kernels.KernelBasis.transform`), in the user's units.
    y : ndarray of shape (N,) or (N, D)
        Targets. With D outputs the weights are ``w[basis, output]`` and ``alpha`` and the noise are
        shared by the outputs.
    prior : {"ard", "student_t"}, default="ard"
        ``"ard"``: ``w_i ~ N(0, 1/alpha_i)`` with ``alpha_rel`` from ``alpha_prior``.
        ``"student_t"``: ``alpha_rel_i ~ Gamma(nu/2, nu s^2/2)``, so that the relative weights are
        ``StudentT(nu, 0, s)``.
    form : {"marginal", "joint"}, default="marginal"
        ``"marginal"``: ``w`` integrated out (fast, NUTS-friendly; ``w`` is drawn back by
        :func:`bayes_rvm.inference.complete_posterior`). ``"joint"``: ``w`` sampled, with a
        ``pm.Normal`` likelihood; under Gaussian noise through its whitening by the conditional
        posterior (:mod:`bayes_rvm.models.whitening`; the value variable ``w_whitened__``),
        under Student-t noise by the same transform at the t's Fisher information (or
        ``centred``).
    alpha_prior : Prior or {"halfcauchy", "r2d2"}, optional
        Hyperprior of ``alpha_rel`` under ``prior="ard"``, or its name; default
        :func:`bayes_rvm.models.priors.default_alpha_prior` ``("ard")``, the one
        :data:`~bayes_rvm.models.priors.DEFAULT_REGRESSION_ALPHA_PRIOR` names (``"r2d2"``, the
        R2-D2 prior on the function; ``"halfcauchy"`` is a half-Cauchy on ``alpha_rel^-1/2`` per
        column).
    nu : float or Prior, default=1e-4
        Degrees of freedom of the Student-t prior, fixed or sampled (a :class:`Prior`, created as
        the variable ``nu``).
    s : float, default=1.0
        Scale of the Student-t prior on the relative weights. Sample with ``nu`` of 0.1 or more:
        at ``nu = 1e-4`` the Gamma hyperprior lies mostly below float64's range (a warning says
        so).
    noise_prior : Prior, optional
        Prior of ``sigma_rel = sigma / y_scale``; default
        :data:`bayes_rvm.models.priors.DEFAULT_NOISE_PRIOR` (``HalfNormal(1)``).
    noise_sd : float, optional
        Hold the noise sd fixed at this value (units of ``y``) instead of sampling it.
    phi_scale : ndarray of shape (M,), optional
        Scale of each column of ``Phi`` (before ``basis`` selects); the estimators pass the
        columns' root-mean-square (:func:`bayes_rvm.evidence.problem.prior_column_scale`). Default
        ones.
    y_scale : float, optional
        Scale of the targets (the estimators pass their root-mean-square); default 1.
    offset : ndarray or callable, optional
        Terms of your own added to the mean ``Phi w``: a fixed array broadcastable to ``y``
        (stored as ``pm.Data("offset")``), or ``offset(model) -> tensor``, called inside the
        model after its data exist, which may create variables with priors of their own (stored
        as ``pm.Deterministic("offset")``). Both forms take it: the marginal one integrates ``w``
        out of ``y - offset``.
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
        SVD of ``Phi``. ``"auto"`` takes the low-rank form when the rank r is at most half of M
        (:mod:`bayes_rvm.models.marginal.lowrank`, which also states the tolerance).
    centred : bool, default=False
        Joint form: ``w ~ N(0, 1/alpha)`` sampled directly instead of whitened. Where the data
        leave a weight loose it makes a funnel (on outlier sinc under Student-t noise, over the
        relevance vectors, 4 x 1000 draws: 107 divergences where the whitened weights had
        none). Recorded as the form ``"centred"``.
    likelihood : {"gaussian", "student_t"}, default="gaussian"
        The noise. ``"student_t"``: ``t_nd ~ StudentT(nu, phi_n^T w_d + offset_nd, sigma)``,
        robust to outliers; the weights have no closed-form marginal under it, so it takes
        ``form="joint"`` only, and ``pm.sample_posterior_predictive`` draws t noise.
    noise_nu : float, Prior or None, default=None
        Student-t degrees of freedom: a number fixes it, a :class:`Prior` samples it; None
        samples it under :data:`NOISE_NU_PRIOR`. It is ``noise_nu`` in the posterior either way
        (a Deterministic when fixed).
    n_rows : int, optional
        ``Phi`` and ``y`` are a compressed design of this many data rows
        (:func:`bayes_rvm.models.marginal.compressed_design`; built by
        :func:`bayes_rvm.models.statistics.rvm_statistics_model`): the marginal form only, no
        ``offset``.

    Returns
    -------
    pymc.Model
        Data ``Phi``, ``y_obs``, ``phi_scale``, ``y_scale`` and, in the marginal form, ``gram``
        (``Phi^T Phi``) or ``Phi_U`` and ``Phi_VS`` (its thin SVD); free variables ``alpha_rel``
        (under the default R2-D2 prior the deterministic of ``alpha_rel_r2`` and ``alpha_rel_z``,
        :func:`~bayes_rvm.models.priors.r2d2_precision`; and ``nu`` if random), ``sigma_rel``
        and, in the joint form, ``w``; deterministics
        ``alpha = alpha_rel phi_scale^2 / y_scale^2``, ``sigma = sigma_rel y_scale``,
        ``beta = sigma^-2``; the
        observed ``y``. ``model.rvm_spec`` (:class:`RVMSpec`) records the choices.

    Notes
    -----
    The hyperpriors are stated on the normalised problem (``Phi / phi_scale``, ``y / y_scale``)
    and the model maps them into the user's units, so one set of defaults suits any scale and the
    posterior of ``alpha``, ``sigma`` and ``w`` is in the units of ``Phi`` and ``y``.

    In the marginal form ``y`` has no random draw (``pm.sample_posterior_predictive`` raises and
    names :func:`bayes_rvm.inference.sample_posterior_predictive`). Change the data with
    :func:`set_model_data`, which keeps ``gram`` consistent with ``Phi``.
    """
    Phi, phi_scale, cols, names = _check_design(Phi, phi_scale, basis, basis_names)
    y, y_scale = _check_targets(y, Phi.shape[0], y_scale)
    alpha_prior = _check_priors(prior, form, alpha_prior, nu, s)
    t_spec = noise_nu_spec(likelihood, form, noise_nu)
    alpha_prior, s = _resolve_priors(prior, alpha_prior, nu, s)
    noise_prior = as_prior(noise_prior, "noise_prior", positive=True)
    if n_rows is not None and (form != "marginal" or offset is not None or not n_rows >= 1):
        raise ValueError(
            "n_rows (a compressed design of sufficient statistics) needs form='marginal', no "
            f"offset and a positive count; got form={form!r}, offset "
            f"{'given' if offset is not None else 'None'}, n_rows={n_rows!r}."
        )
    if noise_sd is not None and not (np.isfinite(noise_sd) and noise_sd > 0):
        raise ValueError(f"noise_sd must be positive, got {noise_sd!r}.")
    N = Phi.shape[0]
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
        scale_data = pm.Data("phi_scale", phi_scale, dims=BASIS)
        y_scale_data = pm.Data("y_scale", y_scale)
        _, log_alpha = _weight_precision(prior, alpha_prior, nu, s, scale_data, y_scale_data)
        sigma = _noise_sd(noise_prior, noise_sd, y_scale_data)
        log_beta = -2.0 * pt.log(sigma)
        off, off_kind = _offset_term(offset, y_dims, y.shape)

        if form == "marginal":
            count = None if n_rows is None else pm.Data("n_rows", float(n_rows))
            lowrank = _marginal_y(
                Phi, marginal, (log_alpha, log_beta, Phi_data, off), y_data, y_dims, count
            )
        else:
            t_nu = None if t_spec is None else noise_nu_variable(t_spec)
            if centred:
                w = joint_weights(log_alpha, w_dims, centred=True)
            else:
                # Whitened by the Gaussian posterior of w; under t noise with the noise
                # precision of its Fisher information per row, beta (nu + 1) / (nu + 3).
                info = log_beta if t_nu is None else log_beta + pt.log((t_nu + 1) / (t_nu + 3))
                w = whitened_gaussian_weights(log_alpha, info, Phi_data, y_data - off, w_dims)
            observed_noise("y", Phi_data @ w + off, sigma, y_data, y_dims, t_nu)

    spec = _gaussian_spec(
        y,
        noise_prior,
        noise_sd,
        prior=prior,
        form="centred" if centred and form == "joint" else form,
        alpha_prior=alpha_prior,
        nu=(nu if isinstance(nu, Prior) else float(nu)) if prior == "student_t" else None,
        s=s,
        basis=tuple(int(c) for c in cols),
        offset=off_kind,
        marginal=("lowrank" if lowrank else "dense") if form == "marginal" else None,
        likelihood=likelihood,
        noise_nu=t_spec,
    )
    return record_spec(model, spec)


def set_model_data(model: pm.Model, Phi: np.ndarray, y: np.ndarray) -> None:
    """Replace the data of a model built by :func:`rvm_regression_model` (same basis size).

    Keeps the ``gram`` data of the marginal form equal to ``Phi^T Phi``, updates the ``obs``
    coordinate, and lets compiled samplers be reused (no new graph is built). A fixed offset is
    reset to zero unless it is set again with ``pm.set_data``.
    """
    if "n_rows" in model.named_vars:
        raise ValueError(
            "a model of sufficient statistics: build a new one (bayes_rvm.models.statistics)."
        )
    Phi = np.asarray(Phi, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    values = {"Phi": Phi, "y_obs": y}
    if "gram" in model.named_vars:
        values["gram"] = Phi.T @ Phi
    if "Phi_U" in model.named_vars:
        values["Phi_U"], values["Phi_VS"] = thin_svd(Phi)
    if "offset" in model.named_vars and hasattr(model["offset"], "get_value"):
        values["offset"] = np.zeros_like(y)
    with model:
        pm.set_data(values, coords={OBS: np.arange(Phi.shape[0])})


# ---------------------------------------------------------------------------------------------
# Classification: Bernoulli-logit (two classes) and Categorical-softmax. The weights have no
# closed-form marginal under these likelihoods, so the model is the joint one, non-centred; the
# softmax rows share one alpha (one relevance set for all classes), as in the Laplace engines.
# The softmax keeps C weight columns, as the Laplace engines do: the likelihood sees only their
# differences, and the prior alone holds their mean, but removing it does not help NUTS. On the
# three-class Ripley problem of the tests a zero-sum (pm.ZeroSumNormal, the exact marginal of
# this prior) or reference-class parametrisation mixed no better (max R-hat of log alpha at
# 4 x 500 draws, no slab: zero-sum 1.13-1.15, reference class 1.36, C columns 1.04 non-centred
# and 1.26 centred): what broke the chains was the weights' heavy tail (|w| up to 600), which
# the slab removes, and the relevance of nearly collinear basis functions switching on and off.
# ---------------------------------------------------------------------------------------------
def class_contrasts(n_classes: int) -> np.ndarray:
    """An orthonormal basis of ``n_classes`` dimensions whose first vector is the classes'
    common direction ``1 / sqrt(C)`` (the one the softmax likelihood does not see), the others
    Helmert contrasts: column ``k`` holds ``1`` on classes ``0 .. k-1``, ``-k`` on class ``k``,
    normalised."""
    Q = np.zeros((n_classes, n_classes))
    Q[:, 0] = 1.0 / np.sqrt(n_classes)
    for k in range(1, n_classes):
        Q[:k, k] = 1.0
        Q[k, k] = -float(k)
        Q[:, k] /= np.sqrt(k * (k + 1.0))
    return Q


def _check_information(information, centred: bool, shape: tuple, likelihood: str):
    """``information`` of :func:`rvm_classification_model` as a float array, checked."""
    if information is None:
        return None
    if centred:
        raise ValueError("information scales the non-centred weights; it is not for centred=True.")
    value = np.asarray(information, dtype=np.float64)
    want = shape if likelihood == "softmax" else shape[:1]
    if value.shape != want:
        raise ValueError(f"information must have shape {want} (the weights'), got {value.shape}.")
    if not (np.all(np.isfinite(value)) and np.all(value >= 0)):
        raise ValueError("information must hold finite numbers >= 0.")
    return value


def _latent_weights(alpha, w_dims: tuple, n_classes: int, centred, information):
    """The weights ``w ~ N(0, 1 / alpha)`` of a latent-function model, in the parametrisation
    asked for: ``centred`` True (``w`` itself), False (``z = w sqrt(alpha)``), or an array of
    ``c`` in [0, 1] per column (``v ~ N(0, sd^c)``, ``w = sd^(1 - c) v``, partly centred);
    ``information`` (non-centred only) scales each ``z`` by its conditional sd."""
    softmax = len(w_dims) == 2
    alpha = alpha[:, None] if softmax else alpha
    scale = pt.exp(-0.5 * pt.log(alpha))
    if not isinstance(centred, bool | np.bool_):
        c = centred[:, None] if softmax else centred
        v = pm.Normal("v", 0.0, scale**c, dims=w_dims)
        return pm.Deterministic("w", v * scale ** (1.0 - c), dims=w_dims)
    if centred:
        return pm.Normal("w", 0.0, scale, dims=w_dims)
    if information is None:
        z = pm.Normal("z", 0.0, 1.0, dims=w_dims)
        return pm.Deterministic("w", z * scale, dims=w_dims)
    # w = z / sqrt(alpha + h), z ~ N(0, 1 + h / alpha): w ~ N(0, 1 / alpha) as before, scaled
    # by its conditional sd under a diagonal Laplace approximation.
    h = pm.Data("information", information, dims=w_dims)
    z = pm.Normal("z", 0.0, pt.sqrt(1.0 + h / alpha), dims=w_dims)
    w = z * pt.exp(-0.5 * pt.log(alpha + h))
    if softmax:
        # z's columns are the classes' orthonormal contrasts (class_contrasts): a rotation,
        # under which the prior N(0, I / alpha_i) of each row is the same.
        w = w @ pt.as_tensor_variable(class_contrasts(n_classes)).T
    return pm.Deterministic("w", w, dims=w_dims)


def _check_reference(reference, other: bool, m: int, likelihood: str):
    """``reference`` of :func:`rvm_classification_model` as a float array, checked."""
    if reference is None:
        return None
    if likelihood not in ("poisson", "bernoulli"):
        raise ValueError(
            f"reference whitens count and two-class models only, not likelihood={likelihood!r}."
        )
    if other:
        raise ValueError("reference is not for centred=... or information=...; give one of them.")
    value = np.asarray(reference, dtype=np.float64)
    if value.shape != (m,) or not np.all(np.isfinite(value)):
        raise ValueError(
            f"reference must hold {m} finite weights, one per column; got {value.shape}."
        )
    return value


def _laplace_whitened_weights(alpha, Phi, Phi_data, y, reference, off, offset, likelihood):
    """Weights ``w ~ N(0, 1 / alpha)`` whitened by the Gaussian posterior, given ``alpha``, of the
    log-likelihood expanded at the weights ``reference`` (the working Gaussian of iteratively
    reweighted least squares: rows of precision ``b``, the latent's Fisher information there, and
    targets ``r = eta_ref + (y - E[y]) / b``), through :func:`whitened_gaussian_weights` at unit
    noise precision with each row scaled by ``sqrt(b)``: ``b = exp(eta_ref)`` for counts,
    ``p (1 - p)`` for two classes (at least 1e-12). ``off`` is the offset's term (a tensor where
    it is random); a fixed ``offset`` array joins the expansion point. ``b`` and ``r`` enter as
    data (``rate_ref``, ``working``), so that a new data set reuses the compiled sampler; where
    the offset is fixed, so do the expansion's statistics ``Phi^T B Phi`` and ``Phi^T B (r -
    offset)`` (``gram_ref``, ``target_ref``), which then need no product with ``Phi`` per
    gradient."""
    eta_ref = Phi @ reference
    fixed = not callable(offset)
    if fixed and offset is not None:
        offset = np.broadcast_to(np.asarray(offset, dtype=np.float64), eta_ref.shape)
        eta_ref = eta_ref + offset
    if likelihood == "poisson":
        b = np.exp(np.minimum(eta_ref, ETA_MAX))
        surprise = y - b
    else:
        # y - p without cancellation where the reference predicts the label all but certainly.
        surprise = np.where(y == 1, expit(-eta_ref), -expit(eta_ref))
        # Past |eta| of about 28, p (1 - p) is below the floor; there a row carries next to no
        # curvature, and the floor keeps its working target within reach of the others' (and b
        # above 0 where p (1 - p) underflows). The expansion shapes the parametrisation only,
        # never the posterior.
        b = np.maximum(expit(eta_ref) * expit(-eta_ref), 1e-12)
    root = pt.sqrt(pm.Data("rate_ref", b, dims=OBS))
    working = pm.Data("working", eta_ref + surprise / b, dims=OBS)
    if fixed:
        resid = b * (eta_ref + surprise / b - (0.0 if offset is None else offset))
        return whitened_gaussian_weights(
            pt.log(alpha),
            pt.as_tensor_variable(np.float64(0.0)),
            pm.Data("gram_ref", Phi.T @ (b[:, None] * Phi)),
            pm.Data("target_ref", Phi.T @ resid),
            (BASIS,),
            statistics=True,
        )
    return whitened_gaussian_weights(
        pt.log(alpha),
        pt.as_tensor_variable(np.float64(0.0)),
        root[:, None] * Phi_data,
        root * (working - off),
        (BASIS,),
    )


def _check_parametrisation(centred, information, reference, shape: tuple, likelihood: str):
    """The weights' parametrisation of :func:`rvm_classification_model`, checked: ``centred``
    (a bool, or one value in [0, 1] per column as an array), ``information``, ``reference`` and
    the spec's name of the form. ``shape`` is (columns, classes)."""
    partly = not isinstance(centred, bool | np.bool_)
    if partly:
        centred = np.asarray(centred, dtype=np.float64)
        if centred.shape != shape[:1] or not np.all((centred >= 0) & (centred <= 1)):
            raise ValueError(
                f"centred must be True, False or one value in [0, 1] per column ({shape[0]}); "
                f"got an array of shape {centred.shape}."
            )
    some_centring = partly or bool(centred)
    information = _check_information(information, some_centring, shape, likelihood)
    reference = _check_reference(
        reference, some_centring or information is not None, shape[0], likelihood
    )
    if partly:
        form = "partly centred"
    elif centred:
        form = "centred"
    else:
        form = "joint" if reference is None else "whitened"
    return centred, information, reference, form


def rvm_classification_model(
    Phi: np.ndarray,
    y: np.ndarray,
    *,
    likelihood: Literal["auto", "bernoulli", "softmax", "poisson"] = "auto",
    prior: Literal["ard", "student_t"] = "ard",
    alpha_prior: Prior | None = None,
    nu: float | Prior = DEFAULT_NU,
    s: float = DEFAULT_WEIGHT_SCALE,
    phi_scale: np.ndarray | None = None,
    offset: np.ndarray | Callable[[pm.Model], pt.TensorVariable] | None = None,
    centred: bool | np.ndarray = False,
    slab: float | None = None,
    intercept_sd: float | None = None,
    information: np.ndarray | None = None,
    reference: np.ndarray | None = None,
    basis: Sequence[int] | np.ndarray | None = None,
    basis_names: Sequence | None = None,
    class_names: Sequence | None = None,
    coords: dict | None = None,
) -> pm.Model:
    """Build the PyMC model of an RVM classifier (or of counts: :func:`rvm_poisson_model`).

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
        Design matrix (for instance the columns of the relevance vectors and the bias).
    y : array-like of shape (N,)
        Class indices ``0 .. C-1`` (0/1 for two classes); counts for ``"poisson"``.
    likelihood : {"auto", "bernoulli", "softmax", "poisson"}, default="auto"
        ``"auto"``: Bernoulli-logit for two classes, softmax for more. ``"poisson"``: counts
        with a log link, ``y_n ~ Poisson(exp(eta_n))``.
    prior : {"ard", "student_t"}, default="ard"
        As in :func:`rvm_regression_model` (``alpha_rel`` on the columns scaled by ``phi_scale``).
    alpha_prior, nu, s
        Hyperpriors, as in :func:`rvm_regression_model`.
    phi_scale : ndarray of shape (M,), optional
        Scale of each column (the estimator passes the columns' root-mean-square); default ones.
    offset : ndarray or callable, optional
        Terms of your own added to the latent function(s) ``Phi w``, as in
        :func:`rvm_regression_model`: shape (N,) for two classes, (N, C) for the softmax.
    centred : bool or ndarray of shape (M,), default=False
        ``w ~ N(0, 1/alpha)`` sampled directly instead of ``w = z / sqrt(alpha)``. The centred
        form suits weights the likelihood pins; a weight it leaves loose (a bias the labels
        barely need) makes a funnel of it, where NUTS diverges, so :class:`~bayes_rvm.RVC`
        samples the non-centred form. An array ``c`` of values in [0, 1], one per column of
        the basis, centres each weight partly (Papaspiliopoulos, Roberts and Skold 2007):
        ``v ~ N(0, sd^c)``, ``w = sd^(1 - c) v`` with ``sd = 1 / sqrt(alpha)``; 1 is the centred
        form, 0 the non-centred one (:func:`bayes_rvm.inference.type2_centring`: a type-II
        fit's).
    slab : float, optional
        Slab scale ``c`` of the regularised ARD prior (Piironen & Vehtari 2017):
        ``w_i | alpha_i ~ N(0, 1 / (alpha_i + r_i^2 / c^2))`` with ``r_i`` the root-mean-square
        of column ``i`` over the training inputs, so that no basis function's contribution to a
        latent function has a prior standard deviation above about ``c`` (logits per unit RMS),
        however small ``alpha_i`` is. ``alpha_i`` keeps its ARD hyperprior and its role (small:
        relevant; large: pruned). Without a slab (``None``) the half-Cauchy's tail lets weights
        that the labels leave undetermined (nearly collinear relevance vectors, separable class
        pairs) run to hundreds, where NUTS diverges. A slab is a different model from the one
        the Laplace fit approximates (with ``c = 2`` it shrank a weight the labels determine from
        -21.8 +- 5.4 to -14.3 +- 3.5), so :class:`~bayes_rvm.RVC` passes
        none; default
        no slab.
    intercept_sd : float, optional
        A free intercept outside the ARD columns: ``intercept ~ N(0, intercept_sd^2)`` in
        logits, one per class for the softmax (``RVC(bias="free")`` passes
        :data:`bayes_rvm.evidence.options.FREE_LATENT_SD` and leaves the bias column out of
        ``Phi``). Default none.
    information : ndarray of shape (M,) or (M, C), optional
        The likelihood's curvature along each weight at a reference fit, ``h_i = sum_n b_n
        Phi_ni^2`` with ``b_n`` the latent's Fisher information there (``p_n (1 - p_n)`` for
        Bernoulli-logit, ``p_nc (1 - p_nc)`` per class for the softmax, the rate for Poisson),
        over the kept columns. It changes the parametrisation only, never the posterior: the
        non-centred weights become ``w_i = z_i / sqrt(alpha_i + h_i)`` with ``z_i ~ N(0, 1 +
        h_i / alpha_i)``, so that ``z_i`` is scaled by the weight's conditional posterior sd
        under a diagonal Laplace approximation. Where the prior dominates (``h_i << alpha_i``)
        this is the non-centred form; where the data do (a heavy-tailed ``alpha_i`` small
        against ``h_i``) it is the centred one, with no funnel either way. For the softmax,
        ``z``'s columns (and ``information``'s) are the classes' orthonormal contrasts of
        :func:`class_contrasts`, ``w_i = Q (z_i / sqrt(alpha_i + h_i))``: the first is the
        direction every class shares, which the likelihood does not see (its ``h`` is 0), so
        that it stays non-centred. Default none (plain ``z ~ N(0, 1)``); not with ``centred``.
        :class:`~bayes_rvm.RVC` passes it where it does not whiten (``reference``).
    reference : ndarray of shape (M,), optional
        ``"poisson"`` and ``"bernoulli"``: weights, one per column kept (``basis``), such as a
        type-II fit's mode (zero where it pruned), at which the log-likelihood is expanded to
        second order, ``-sum_n b_n (r_n - eta_n)^2 / 2`` with ``b_n`` the latent's Fisher
        information there (the rate; ``p_n (1 - p_n)``, at least 1e-12, for two classes; the
        model's data ``rate_ref`` either way) and ``r_n`` the working
        response of iteratively reweighted least squares (``working``); with no offset or a
        fixed one, the expansion enters the graph as its statistics ``Phi^T B Phi`` and
        ``Phi^T B (r - offset)`` (data ``gram_ref`` and ``target_ref``, fixed when the model is
        built: setting other data later leaves the whitening as it was, which changes its
        efficiency only). The weights are then sampled whitened
        by the Gaussian posterior of that expansion given the current ``alpha``
        (:mod:`bayes_rvm.models.whitening`), ``w = m(alpha) + Sigma(alpha)^(1/2) u``: non-centred
        where the prior dominates a weight, centred (and decorrelated) where the data do, at
        every ``alpha`` the sampler visits. It changes the parametrisation only, never the
        posterior. Not with ``centred`` or ``information``. For two classes it mixes where
        nearly collinear basis functions trade their relevance, at the cost of a factorisation
        per gradient (measured, 173 points in 2-D, all 174 columns, 4 x 1000 draws thinned by
        2: max R-hat 1.004 and bulk ESS 2200 against 1.023 and 193 with ``information``, 31
        leapfrog steps a draw against 127). With no offset, slab or intercept, and the
        half-Cauchy hyperprior or the R2-D2 prior in its Gaussian coordinates, nutpie samples
        it on a density written in numba
        (:mod:`bayes_rvm.models.whitened_density`, about 0.2 ms a gradient at 174 columns,
        a third of PyTensor's), and :class:`~bayes_rvm.RVC` samples two classes in this
        form.
    basis : sequence of int, optional
        Columns of ``Phi`` to keep; default all.
    basis_names, class_names : sequence, optional
        Coordinates of the ``basis`` and ``class`` dimensions.
    coords : dict, optional
        Further coordinates for user extensions.

    Returns
    -------
    pymc.Model
        Data ``Phi``, ``y_obs``, ``phi_scale``; free ``alpha_rel[basis]``, ``z``; deterministics
        ``alpha`` and ``w[basis]`` (``w[basis, class]`` for the softmax); the observed ``y[obs]``.
    """
    y = np.asarray(y)
    Phi, phi_scale, cols, names = _check_design(Phi, phi_scale, basis, basis_names)
    if y.shape != (Phi.shape[0],):
        raise ValueError(f"Phi must be (N, M) and y (N,); got {Phi.shape} and {y.shape}.")
    if not np.issubdtype(y.dtype, np.integer) or y.min() < 0:
        what = "counts (integers >= 0)" if likelihood == "poisson" else "class indices 0 .. C-1"
        raise ValueError(f"y must hold {what}.")
    N = Phi.shape[0]
    C = int(y.max()) + 1 if class_names is None else len(class_names)
    if likelihood == "auto":
        likelihood = "bernoulli" if C <= 2 else "softmax"
    if likelihood not in ("bernoulli", "softmax", "poisson"):
        raise ValueError(
            f"likelihood must be 'auto', 'bernoulli', 'softmax' or 'poisson', got {likelihood!r}."
        )
    if likelihood == "bernoulli" and y.max() > 1:
        raise ValueError(f"likelihood='bernoulli' takes labels 0 and 1; y holds {y.max()}.")
    alpha_prior = _check_priors(prior, "joint", alpha_prior, nu, s, forms=("joint",))
    # R-squared has no meaning for a latent without noise: the per-column half-Cauchy.
    alpha_prior, s = _resolve_priors(prior, alpha_prior, nu, s, default="halfcauchy")
    for name, value in (("slab", slab), ("intercept_sd", intercept_sd)):
        if value is not None and not (np.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a positive number or None, got {value!r}.")
    centred, information, reference, form = _check_parametrisation(
        centred, information, reference, (len(names), C), likelihood
    )
    all_coords = {OBS: np.arange(N), BASIS: names}
    if likelihood == "softmax":
        all_coords[CLASS] = list(range(C)) if class_names is None else list(class_names)
    all_coords.update(coords or {})
    w_dims = (BASIS, CLASS) if likelihood == "softmax" else (BASIS,)
    eta_dims = (OBS, CLASS) if likelihood == "softmax" else (OBS,)
    eta_shape = (N, C) if likelihood == "softmax" else (N,)

    with pm.Model(coords=all_coords) as model:
        Phi_data = pm.Data("Phi", Phi, dims=(OBS, BASIS))
        y_data = pm.Data("y_obs", y, dims=OBS)
        scale_data = pm.Data("phi_scale", phi_scale, dims=BASIS)
        alpha, _ = _weight_precision(prior, alpha_prior, nu, s, scale_data, 1.0)
        if slab is not None:
            alpha = alpha + pt.mean(Phi_data**2, axis=0) / slab**2  # r_i^2 / c^2
        off, off_kind = _offset_term(offset, eta_dims, eta_shape)
        if reference is None:
            w = _latent_weights(alpha, w_dims, C, centred, information)
        else:
            w = _laplace_whitened_weights(
                alpha, Phi, Phi_data, y, reference, off, offset, likelihood
            )
        eta = Phi_data @ w + off
        if intercept_sd is not None:
            eta = eta + pm.Normal("intercept", 0.0, intercept_sd, dims=w_dims[1:] or None)
        if likelihood == "bernoulli":
            pm.Bernoulli("y", logit_p=eta, observed=y_data, dims=OBS)
        elif likelihood == "poisson":
            # exp of the clipped latent, as the Laplace engines form it (families.ETA_MAX).
            pm.Poisson("y", mu=pt.exp(pt.minimum(eta, ETA_MAX)), observed=y_data, dims=OBS)
        else:
            pm.Categorical("y", logit_p=eta, observed=y_data, dims=OBS)
    spec = RVMSpec(
        likelihood=likelihood,
        prior=prior,
        form=form,
        alpha_prior=alpha_prior,
        nu=(nu if isinstance(nu, Prior) else float(nu)) if prior == "student_t" else None,
        s=s,
        noise_prior=None,
        noise_sd=None,
        basis=tuple(int(c) for c in cols),
        n_outputs=C if likelihood == "softmax" else 0,
        offset=off_kind,
        slab=None if slab is None else float(slab),
        intercept_sd=None if intercept_sd is None else float(intercept_sd),
    )
    return record_spec(model, spec)


def rvm_poisson_model(Phi: np.ndarray, y: np.ndarray, **options) -> pm.Model:
    """Build the PyMC model of an RVM for counts: ``y_n ~ Poisson(exp(phi_n^T w + offset_n))``.

    The RVM prior of :func:`rvm_classification_model` (``w_i ~ N(0, 1 / alpha_i)``, ``alpha_i``
    from its hyperprior on the columns scaled by ``phi_scale``) with a Poisson likelihood and a
    log link. The weights have no closed-form marginal under it, so they are sampled jointly with
    the hyperparameters: non-centred by default, whitened around ``reference`` (a type-II fit's
    mode; what :class:`~bayes_rvm.RVR` samples) when it is given. The log rate has no target
    scale: the hyperpriors are stated on unit-RMS columns and the latent in its own units.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
    y : array-like of int, shape (N,)
        Counts.
    **options
        ``prior``, ``alpha_prior``, ``nu``, ``s``, ``phi_scale``, ``offset`` (the log of an
        exposure, for example), ``centred``, ``slab``, ``intercept_sd`` (a free log-rate level
        outside the ARD columns), ``reference``, ``basis``, ``basis_names``, ``coords``: as in
        :func:`rvm_classification_model`.

    Returns
    -------
    pymc.Model
        Data ``Phi``, ``y_obs``, ``phi_scale`` (with ``reference``: ``rate_ref``, ``working``);
        free ``alpha_rel[basis]`` and ``z`` (with ``reference``: ``w``, whose value the sampler
        sees whitened, ``w_whitened__``); deterministics ``alpha``, ``w[basis]``; the observed
        ``y[obs]`` (its ``RVMSpec`` likelihood ``"poisson"``).
    """
    return rvm_classification_model(Phi, y, likelihood="poisson", **options)


# ---------------------------------------------------------------------------------------------
# Regression with the kernel width sampled: the design is a function of a random variable
# ---------------------------------------------------------------------------------------------
def woodbury_log_likelihood(Y, log_alpha, log_beta, Phi) -> pt.TensorVariable:
    """Symbolic ``sum_d ln N(t_d | 0, beta^-1 I + Phi A^-1 Phi^T)`` for a symbolic ``Phi``.

    The density of :func:`bayes_rvm.models.marginal.marginal_log_likelihood`, written in plain
    PyTensor
    so that its gradient reaches ``Phi`` (and whatever ``Phi`` is a function of) by automatic
    differentiation: Woodbury and the determinant lemma on ``H = A + beta Phi^T Phi``, equilibrated
    by its diagonal before the Cholesky factorisation (as the engines do), O(N M^2 + M^3).

    Parameters
    ----------
    Y : tensor of shape (N,) or (N, D)
    log_alpha : tensor of shape (M,)
    log_beta : scalar tensor
    Phi : tensor of shape (N, M)
    """
    Y = pt.as_tensor_variable(Y)
    Y = Y[:, None] if Y.ndim == 1 else Y
    N, D = Y.shape[0], Y.shape[1]
    beta = pt.exp(log_beta)
    H = beta * (Phi.T @ Phi) + pt.diag(pt.exp(log_alpha))
    d = pt.sqrt(pt.diag(H))
    L = pt.linalg.cholesky(H / pt.outer(d, d), lower=True)
    u = pt.linalg.solve_triangular(L, (Phi.T @ Y) / d[:, None], lower=True)
    log_det = (
        2.0 * pt.sum(pt.log(pt.diag(L)))
        + 2.0 * pt.sum(pt.log(d))
        - pt.sum(log_alpha)
        - N * log_beta
    )
    # The quadratic form T^T C^-1 T as beta ||T - Phi m||^2 + m^T A m with the posterior mean
    # m = beta H^-1 Phi^T T: a sum of two positive terms, where beta T^T T - beta^2 u^T u loses
    # digits to cancellation when beta is large or an alpha is huge (1e-4 nats at alpha ~ 5e7).
    m = beta * pt.linalg.solve_triangular(L.T, u, lower=False) / d[:, None]
    quad = beta * pt.sum((Y - Phi @ m) ** 2) + pt.sum(pt.exp(log_alpha)[:, None] * m**2)
    return -0.5 * (D * (N * LOG_2PI + log_det) + quad)


def _width_y_logp(value, log_alpha, log_beta, Phi, mean):
    _refuse_elementwise_logp()
    return woodbury_log_likelihood(value - mean, log_alpha, log_beta, Phi)


def _check_width_data(X, y, centres, bias: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The inputs, targets and centres of :func:`rvm_width_model` as float arrays, checked."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    centres = np.asarray(centres, dtype=np.float64)
    if X.ndim != 2 or centres.ndim != 2 or centres.shape[1] != X.shape[1]:
        raise ValueError(
            f"X and centres must be 2-D with the same number of features, got {X.shape} and "
            f"{centres.shape}."
        )
    if y.ndim not in (1, 2) or y.shape[0] != X.shape[0]:
        raise ValueError(f"y must have {X.shape[0]} rows (one per row of X), got {y.shape}.")
    if not (np.all(np.isfinite(X)) and np.all(np.isfinite(y)) and np.all(np.isfinite(centres))):
        raise ValueError("X, y and centres must be finite.")
    if centres.shape[0] == 0 and not bias:
        raise ValueError("the model needs at least one basis function (a centre or the bias).")
    return X, y, centres


def rvm_width_model(
    X: np.ndarray,
    y: np.ndarray,
    centres: np.ndarray,
    *,
    kernel: Literal["rbf", "laplacian"] = "rbf",
    gamma_prior: Prior | None = None,
    gamma_ref: float | None = None,
    alpha_prior: Prior | None = None,
    noise_prior: Prior | None = None,
    noise_sd: float | None = None,
    bias: bool = True,
    y_scale: float | None = None,
    basis_names: Sequence | None = None,
    output_names: Sequence | None = None,
) -> pm.Model:
    """The RVM regression model with the kernel width sampled beside the alphas and the noise.

    ::

        gamma_rel   ~ gamma_prior                  gamma = gamma_rel * gamma_ref
        Phi(gamma)  = [exp(-gamma d(x_n, c_j)), 1]  (rbf: d = ||x - c||^2; laplacian: ||x - c||_1)
        alpha_rel_j ~ alpha_prior,  alpha_j = alpha_rel_j rms(Phi_j(gamma))^2 / y_scale^2
        sigma_rel   ~ noise_prior,  sigma = sigma_rel * y_scale
        t_d ~ N(0, sigma^2 I + Phi(gamma) A^-1 Phi(gamma)^T)      (w integrated out)

    The hyperpriors are those of :func:`rvm_regression_model`, stated on the normalised problem
    (unit-RMS columns, unit-RMS targets). Since ``alpha_rel`` is a precision *relative to the
    column's root-mean-square at the current width*, a change of width does not by itself change
    how strongly each weight is shrunk: this is the parametrisation in which ``log gamma`` and the
    ``log alpha_rel`` are least correlated, and in which a type-II fit at another width is a
    sound start. The weights are drawn back per draw, on the design at that draw's width
    (:func:`bayes_rvm.inference.complete_posterior`).

    Parameters
    ----------
    X : ndarray of shape (N, P)
        Training inputs.
    y : ndarray of shape (N,) or (N, D)
        Targets (several outputs share the width, the alphas and the noise).
    centres : ndarray of shape (K, P)
        Centres of the kernel basis functions: the relevance vectors of a type-II fit (what
        ``RVR(inference="mcmc", gamma=Prior(...))`` uses), or all the inputs for small N.
    kernel : {"rbf", "laplacian"}, default="rbf"
        ``exp(-gamma ||x - c||^2)`` or ``exp(-gamma ||x - c||_1)``.
    gamma_prior : Prior, optional
        Prior of ``gamma_rel = gamma / gamma_ref``, a distribution on the positive reals (NUTS
        samples ``log gamma_rel``); default :data:`bayes_rvm.models.priors.DEFAULT_GAMMA_PRIOR`.
    gamma_ref : float, optional
        The reference coefficient; default :func:`bayes_rvm.basis.kernels.reference_gamma` of ``X``.
    alpha_prior : Prior or {"halfcauchy", "r2d2"}, optional
        Hyperprior of ``alpha_rel``; default that of :func:`rvm_regression_model`.
    noise_prior : Prior, optional
        Prior of ``sigma_rel``; default ``HalfNormal(1)``.
    noise_sd : float, optional
        Hold the noise sd fixed (units of ``y``).
    bias : bool, default=True
        Add a constant basis function (the last one).
    y_scale : float, optional
        Scale of the targets (the estimators pass their RMS); default 1.
    basis_names : sequence, optional
        Coordinates of ``basis`` (K centres, then the bias); default ``0 .. K``.
    output_names : sequence, optional
        Coordinates of ``output`` (several outputs).

    Returns
    -------
    pymc.Model
        Data ``X``, ``centres``, ``kernel_dist`` (the distances the kernel exponentiates),
        ``y_obs``, ``y_scale``, ``gamma_ref``; free ``gamma_rel``, ``alpha_rel[basis]``,
        ``sigma_rel``; deterministics ``gamma``, ``length_scale`` (``gamma^-1/2`` for rbf,
        ``1/gamma`` for laplacian), ``alpha[basis]`` (units of ``y`` and of the raw kernel
        columns), ``sigma``, ``beta``; observed ``y``, whose ``logp`` is
        :func:`woodbury_log_likelihood` and which has no random draw (as in the marginal form of
        :func:`rvm_regression_model`).

    Notes
    -----
    Where it stops being practical, and why. The width moves every column of ``Phi``, so nothing
    of the design can be cached between gradient evaluations (the fixed-width model keeps
    ``Phi^T Phi`` or a thin SVD of ``Phi``): each log density and gradient rebuilds the N x K
    kernel block, its column norms and ``Phi^T Phi`` (O(N K P + N M^2)) and factors an M x M
    matrix (O(M^3)), with M = K + 1. On the relevance vectors of a type-II fit (K of 5 to 30)
    that is a fraction of a millisecond per gradient and grows at most linearly with N (notebook
    07, one BLAS thread, a shared machine: 0.1-0.2 ms at N = 100 and 0.9 ms at N = 1600 with
    K = 10): thousands of points are fine. With all N inputs as centres it is O(N^3) per gradient
    (about 1 ms at N = 100, 30-60 ms at N = 400, by the cube law half a second or more at
    N = 1000: hours for a few thousand draws), and worse,
    the N alphas and the width trade off against one another (a narrower width can be
    compensated by more basis functions), a ridged posterior that NUTS crosses with small steps
    and long trees: keep the full basis to N of a hundred or so.
    """
    X, y, centres = _check_width_data(X, y, centres, bias)
    dist = stationary_distances(X, centres, kernel)
    gamma_prior = as_prior(gamma_prior, "gamma_prior", positive=True) or DEFAULT_GAMMA_PRIOR
    alpha_prior = as_prior(alpha_prior, "alpha_prior", positive=True) or default_alpha_prior("ard")
    noise_prior = as_prior(noise_prior, "noise_prior", positive=True)
    if gamma_ref is None:
        from bayes_rvm.basis.kernels import reference_gamma

        gamma_ref = reference_gamma(X, kernel)
    for name, value in (("gamma_ref", gamma_ref), ("y_scale", 1.0 if y_scale is None else y_scale)):
        if not (np.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be positive, got {value!r}.")
    if noise_sd is not None and not (np.isfinite(noise_sd) and noise_sd > 0):
        raise ValueError(f"noise_sd must be positive, got {noise_sd!r}.")
    y_scale = 1.0 if y_scale is None else float(y_scale)
    N, K = dist.shape
    M = K + int(bool(bias))
    names = list(range(M)) if basis_names is None else list(basis_names)
    if len(names) != M:
        raise ValueError(f"basis_names has {len(names)} entries for {M} basis functions.")
    multi = y.ndim == 2
    coords = {OBS: np.arange(N), BASIS: names, CENTRE: names[:K], FEATURE: np.arange(X.shape[1])}
    if multi:
        coords[OUTPUT] = list(range(y.shape[1])) if output_names is None else list(output_names)
    y_dims = (OBS, OUTPUT) if multi else (OBS,)

    with pm.Model(coords=coords) as model:
        pm.Data("X", X, dims=(OBS, FEATURE))
        pm.Data("centres", centres, dims=(CENTRE, FEATURE))
        dist_data = pm.Data("kernel_dist", dist, dims=(OBS, CENTRE))
        y_data = pm.Data("y_obs", y, dims=y_dims)
        y_scale_data = pm.Data("y_scale", y_scale)
        ref = pm.Data("gamma_ref", float(gamma_ref))
        gamma_rel = gamma_prior.create_variable("gamma_rel")
        gamma = pm.Deterministic("gamma", gamma_rel * ref)
        pm.Deterministic("length_scale", stationary_kernel(kernel).length_scale(gamma))
        log_k = -gamma * dist_data
        # The number of rows as the model's dimension (read at run time), not a constant: the
        # compiled graph serves every data shape (see _offset_term).
        n_obs = model.dim_lengths[OBS]
        # Column norms in logs (logsumexp): a narrow width leaves a centre far from the inputs
        # with kernel values that underflow when squared.
        # Root-mean-square rather than norm: the hyperpriors are stated per row
        # (bayes_rvm.evidence.problem.prior_column_scale).
        log_rms = 0.5 * pt.logsumexp(2.0 * log_k, axis=0) - 0.5 * pt.log(n_obs)
        Phi = pt.exp(log_k)
        if bias:
            Phi = pt.concatenate([Phi, pt.ones((n_obs, 1))], axis=1)
            log_rms = pt.concatenate([log_rms, pt.zeros(1)])
        alpha_rel = alpha_prior.create_variable("alpha_rel", dims=BASIS)
        log_alpha = pt.log(alpha_rel) + 2.0 * log_rms - 2.0 * pt.log(y_scale_data)
        pm.Deterministic("alpha", pt.exp(log_alpha), dims=BASIS)
        log_alpha = pm.Deterministic("log_alpha", log_alpha, dims=BASIS)
        sigma = _noise_sd(noise_prior, noise_sd, y_scale_data)
        pm.CustomDist(
            "y",
            log_alpha,
            -2.0 * pt.log(sigma),
            Phi,
            # the mean, which also gives the signature the outputs' count
            pt.zeros([model.dim_lengths[d] for d in y_dims]),
            logp=_width_y_logp,
            random=_width_y_random,
            class_name=MARGINAL_NORMAL,
            signature="(m),(),(n,m),(n,d)->(n,d)" if multi else "(m),(),(n,m),(n)->(n)",
            observed=y_data,
            dims=y_dims,
        )
    spec = _gaussian_spec(
        y,
        noise_prior,
        noise_sd,
        prior="ard",
        form="marginal",
        alpha_prior=alpha_prior,
        nu=None,
        s=None,
        basis=tuple(range(M)),
        offset=None,
        marginal="width",
        kernel=kernel,
        gamma_prior=gamma_prior,
        bias=bool(bias),
    )
    return record_spec(model, spec)
