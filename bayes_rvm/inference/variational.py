"""Variational inference: ADVI over the free variables of a model of :mod:`bayes_rvm.models.graphs`.

:func:`fit_vi` fits automatic differentiation variational inference (ADVI, PyMC's ``pm.fit``
algorithm) to a model of :mod:`bayes_rvm.models.graphs` and returns a DataTree of the same groups
as :func:`bayes_rvm.inference.sampling.sample_mcmc`: draws from the approximation in
``posterior``, completed by :func:`bayes_rvm.inference.sampling.complete_posterior` as MCMC's
draws are, ``observed_data`` and ``constant_data``, and a ``variational`` group with the loss
(the negative ELBO) per iteration, the fitted Gaussian and, at each draw, its log density and the
model's (what :func:`bayes_rvm.compare` needs to correct the leave-one-out of approximate draws).

What the approximation covers is what the sampler would sample:

- the weight-marginalised Gaussian regression models: the hyperparameters only; the weights
  are drawn back exactly from their Gaussian conditional given each draw of ``(alpha, sigma)``,
  and ``log_likelihood`` holds the exact leave-one-out terms;
- the joint models, where the weights are variables of the graph (counts,
  :func:`bayes_rvm.models.graphs.rvm_poisson_model`; Student-t noise, the ``likelihood="student_t"``
  branch of :func:`bayes_rvm.models.graphs.rvm_regression_model`; also the ``form="joint"`` Gaussian
  model): the weights too, with the hyperparameters (and ``sigma``, ``noise_nu``) in one
  mean-field Gaussian over the unconstrained space. The weights in ``posterior`` are then the
  approximation's own draws (a Deterministic of the non-centred ``z`` where the model is
  non-centred), never a Gaussian conditional, and ``log_likelihood`` holds
  ``ln p(t_n | w, ...)`` per draw, as under MCMC. Measured on the problems of the tests (300 counts
  of log rate ``1 + sin x``; sinc, N = 100, with 10% gross outliers), over the type-II relevance
  vectors the estimators use: the counts stop at the rule's first check (1000 iterations), the
  Student-t model after 4600; a log-rate RMSE of 0.11 (type-II 0.11) and a test RMSE 0.23 of the
  Gaussian RVR's. Against NUTS (4 x 1000 draws) in the same run: the rates within 3.7% of MCMC's
  (relative RMS), the Student-t locations within 0.004; the posterior sds of the Student-t weights
  0.92-1.43 of MCMC's, but those of the three strongly correlated count weights (two basis
  functions and the bias) 0.52-1.05 of MCMC's, the price of a factorised Gaussian: there the rate's
  posterior sd is 0.46-1.04 times MCMC's (median 0.62). Full-rank ADVI at the default settings did
  not help (12000 iterations; rates 5% off MCMC's, weight sds 1.1-2.3 times MCMC's).

**On the sampler's compiled log density.** ``pm.fit`` builds a PyTensor graph of the whole ADVI
step and rewrites and compiles it for every fit (on the counts of the tests 10-13 s a fit, the
second in a process as long as the first; load average about 4 on 2 cores). The sampler's log
density and gradient in the unconstrained space (:mod:`bayes_rvm.inference.nutpie_backend`) are
compiled once per machine and loaded from the disk cache in a fraction of a second, for any data
shape; here ADVI runs on them, its few vector operations per iteration in NumPy, and the draws are
mapped to the model's variables by the sampler's trace expansion: no PyTensor graph is rewritten or
compiled for the optimisation. The algorithm is ``pm.fit``'s: the Gaussian family, its
parametrisation and start (mean-field: the mean at the start point and ``sd = softplus(rho)`` with
``rho = 0``; full rank: PyMC's packed lower-triangular factor, started at the identity's entries,
its diagonal through ``softplus``), reparametrised gradients of ``obj_n_mc`` draws per step, Adam
with PyMC's constants (beta1 0.9, beta2 0.999, epsilon 1e-8) and the loss recorded as PyMC records
it (the negative ELBO estimated at the parameters before each step); on a Gaussian posterior both
reach its closed-form optimum (``tests/test_variational.py``).

**Why mean-field ADVI on the marginal model.** The regression model's free variables are only the
hyperparameters (the precisions, one per basis function, and ``sigma_rel``): the weights are
integrated out exactly in the graph, and drawn back exactly afterwards. The approximation only has
to describe the precisions and the noise in the coordinates NUTS samples: ``log alpha_rel`` and
``log sigma_rel`` (M + 1 numbers), or under the default R2-D2 hyperprior on the full basis
``logit R^2``, its Gaussian vector ``z`` and ``log sigma_rel`` (M + 2,
:func:`bayes_rvm.models.priors.r2d2_precision`). Measured on sinc (N = 100, width 2, 101 basis
functions; NLPD on 1000 held-out points), against NUTS (4 x 1000 draws) in the same run
(``benchmarks/bench_vi.py``, notebook 10):

- mean-field ADVI, Adam at a learning rate of 0.01, stopped by the rule below: 2100 iterations of
  0.26 ms (load average about 2); held-out NLPD 0.0012 nat/point *below* MCMC's (-0.8191 against
  -0.8179); first fit in a fresh process 0.59-0.68 of MCMC's (4.2-4.8 s against 7.0-7.2 s, load
  average about 4 on 2 cores; ``pm.fit`` took 6.6 s there), a second fit in the process 0.8 s; the
  posterior sds of ``log alpha_rel`` a median 1.00 of MCMC's. In the R2-D2 prior's Gaussian
  coordinates each column's skewed ``log alpha`` is a transform of Gaussians, so the approximation
  keeps its width and skew (notebook 10: sd ratio median 0.99, quartiles 0.97-1.02; median skewness
  1.41 against MCMC's 1.43; largest Pareto k of the draws 0.48). Measured earlier in ``log alpha``
  (the half-Cauchy's coordinates): sds 0.93 of MCMC's (0.83-1.06), as the Gaussians cut the skewed
  marginals' long upper tails;
- full-rank ADVI: no better predictions (NLPD 0.0015 above MCMC's after 11900 iterations at the
  largest stable learning rate, 0.003; at 0.03 it diverged), about 1.6 times the time per iteration
  (0.41-0.45 ms against 0.26) and six times the iterations for its 5000 covariance parameters;
- PyMC's default optimiser (``adagrad_window``): 10000 iterations still 4 nats short of the ELBO
  that Adam reaches in 2000; starting from the type-II fit (as MCMC does) did not converge sooner.

Pathfinder is not in PyMC 6.4 itself (it lives in pymc-extras, which is not a dependency); the
closed-form variational RVM of Bishop & Tipping (2000) needs Gamma hyperpriors on ``alpha`` and
``beta``, not the package's default hyperpriors (the R2-D2 prior, the half-Cauchy), so ADVI on
the model itself is the one method that fits every regression model
:mod:`bayes_rvm.models.graphs` builds.

**Convergence.** Every 100 iterations the mean loss over the last ``window`` iterations is
compared with the mean over the ``window`` before: the fit stops once their relative change,
``|mean_last - mean_before| / max(|mean_last|, 1)``, falls below ``tol``. A fit that reaches ``n``
iterations without meeting the rule warns (:class:`VariationalConvergenceWarning`) with the hint
to allow more iterations.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping

import numpy as np
import xarray as xr
from scipy.special import expit

from bayes_rvm._warnings import warn_at_user
from bayes_rvm.dims import UNCONSTRAINED
from bayes_rvm.inference.sampling import complete_posterior
from bayes_rvm.models.spec import model_spec
from bayes_rvm.posterior.datatree import variational_group

__all__ = [
    "FIT_VI_OPTIONS",
    "VI_DEFAULTS",
    "VI_METHODS",
    "VariationalConvergenceWarning",
    "approximation_density",
    "check_vi_kwargs",
    "fit_vi",
    "relative_change",
]

VI_METHODS = ("advi", "fullrank_advi")
#: The settings :func:`fit_vi` takes beside the model, with their defaults.
VI_DEFAULTS: dict = {
    "method": "advi",
    "n": 20_000,
    "learning_rate": 0.01,
    "tol": 2e-3,
    "window": 500,
    "obj_n_mc": 1,
}


#: The keyword arguments of :func:`fit_vi` that are not settings of the approximation.
FIT_VI_OPTIONS = ("progressbar", "start", "warn")


class VariationalConvergenceWarning(UserWarning):
    """The ELBO was still changing when the iterations ran out."""


def check_vi_kwargs(vi_kwargs: Mapping | None) -> dict:
    """``vi_kwargs`` checked and completed with :data:`VI_DEFAULTS`.

    Raises
    ------
    ValueError
        For an unknown key or a value out of range, naming it.
    """
    if vi_kwargs is None:
        vi_kwargs = {}
    if not isinstance(vi_kwargs, Mapping):
        raise ValueError(f"vi_kwargs must be a dict of VI settings, got {vi_kwargs!r}.")
    unknown = sorted(set(vi_kwargs) - set(VI_DEFAULTS))
    if unknown:
        raise ValueError(f"vi_kwargs has unknown keys {unknown}; known: {sorted(VI_DEFAULTS)}.")
    out = {**VI_DEFAULTS, **vi_kwargs}
    if out["method"] not in VI_METHODS:
        raise ValueError(f"vi_kwargs['method'] must be one of {VI_METHODS}, got {out['method']!r}.")
    for key in ("n", "window", "obj_n_mc"):
        v = out[key]
        if not isinstance(v, int | np.integer) or isinstance(v, bool) or v < 1:
            raise ValueError(f"vi_kwargs[{key!r}] must be a positive integer, got {v!r}.")
    for key in ("learning_rate", "tol"):
        v = out[key]
        if not isinstance(v, int | float) or isinstance(v, bool) or not 0 < v < np.inf:
            raise ValueError(f"vi_kwargs[{key!r}] must be a positive number, got {v!r}.")
    return out


def relative_change(loss: np.ndarray, window: int) -> float:
    """Relative change of the mean loss between the last two windows (inf if too short)."""
    loss = np.asarray(loss, dtype=np.float64)
    if loss.size < 2 * window:
        return np.inf
    last, before = loss[-window:].mean(), loss[-2 * window : -window].mean()
    return float(abs(last - before) / max(abs(last), 1.0))


class _StopWhenFlat:
    """The stopping rule: the smoothed loss is flat (see the module docstring)."""

    check_every = 100

    def __init__(self, window: int, tol: float):
        self.window, self.tol, self.converged = window, tol, False

    def __call__(self, loss: np.ndarray) -> bool:
        """Whether to stop after the iterations of ``loss``."""
        if loss.size % self.check_every == 0 and relative_change(loss, self.window) < self.tol:
            self.converged = True
        return self.converged


def _diverged(settings: Mapping, what: str) -> str:
    """Why ADVI stopped on a non-finite value, and what to change."""
    rate = settings["learning_rate"]
    return (
        f"ADVI diverged: {what} became NaN or infinite at vi_kwargs['learning_rate']={rate:g} "
        f"(method {settings['method']!r}). Lower vi_kwargs['learning_rate'] (for example to "
        f"{rate / 10:g}; the default is {VI_DEFAULTS['learning_rate']:g})."
    )


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def _log_q(eps: np.ndarray, log_det: float) -> np.ndarray:
    """``ln q(x)`` at ``x = mu + L eps`` of the Gaussian ``q = N(mu, L L')``, ``log_det`` being
    ``ln |L|``: the standard normal densities of ``eps`` less the log determinant."""
    return -0.5 * (eps**2).sum(axis=-1) - 0.5 * eps.shape[-1] * np.log(2 * np.pi) - log_det


class _MeanField:
    """PyMC's ``MeanField``: ``x = mu + sd * eps``, ``sd = softplus(rho)``; ``mu`` starts at the
    start point and ``rho`` at 0. ``params`` is ``[mu, rho]``."""

    def __init__(self, mu: np.ndarray):
        self.d = mu.size
        self.params = np.concatenate([mu, np.zeros(self.d)])

    @property
    def mu(self) -> np.ndarray:
        return self.params[: self.d]

    def factor(self) -> np.ndarray:
        """The standard deviations (the diagonal of the Cholesky factor)."""
        return _softplus(self.params[self.d :])

    def draws(self, eps: np.ndarray) -> np.ndarray:
        return self.mu + eps * self.factor()

    def log_det(self) -> float:
        return float(np.log(self.factor()).sum())

    def gradient(self, eps: np.ndarray, grad_logp: np.ndarray) -> np.ndarray:
        """The gradient in ``params`` of the loss ``mean(ln q(x_s) - ln p(x_s))`` at the draws
        ``x_s = mu + sd * eps_s``, given ``grad_logp[s]``, the gradient of ``ln p`` at ``x_s``."""
        rho = self.params[self.d :]
        d_sd = -(grad_logp * eps).mean(axis=0) - 1.0 / _softplus(rho)
        return np.concatenate([-grad_logp.mean(axis=0), d_sd * expit(rho)])


class _FullRank:
    """PyMC's ``FullRank``: ``x = mu + L eps`` with ``L`` lower triangular, packed row by row
    (``np.tril_indices``) with its diagonal through ``softplus``; ``mu`` starts at the start
    point and the packed entries at the identity's (a diagonal of ``softplus(1)``). ``params``
    is ``[mu, L_tril]``."""

    def __init__(self, mu: np.ndarray):
        self.d = mu.size
        self.rows, self.cols = np.tril_indices(self.d)
        self.diag = np.flatnonzero(self.rows == self.cols)
        self.params = np.concatenate([mu, np.eye(self.d)[self.rows, self.cols]])

    @property
    def mu(self) -> np.ndarray:
        return self.params[: self.d]

    def factor(self) -> np.ndarray:
        """The Cholesky factor ``L`` of the covariance."""
        packed = self.params[self.d :].copy()
        packed[self.diag] = _softplus(packed[self.diag])
        chol = np.zeros((self.d, self.d))
        chol[self.rows, self.cols] = packed
        return chol

    def draws(self, eps: np.ndarray) -> np.ndarray:
        return self.mu + eps @ self.factor().T

    def log_det(self) -> float:
        return float(np.log(_softplus(self.params[self.d :][self.diag])).sum())

    def gradient(self, eps: np.ndarray, grad_logp: np.ndarray) -> np.ndarray:
        """As :meth:`_MeanField.gradient`, at ``x_s = mu + L eps_s``."""
        d_chol = -(grad_logp.T @ eps)[self.rows, self.cols] / eps.shape[0]
        raw = self.params[self.d :][self.diag]
        d_chol[self.diag] = (d_chol[self.diag] - 1.0 / _softplus(raw)) * expit(raw)
        return np.concatenate([-grad_logp.mean(axis=0), d_chol])


class _Adam:
    """PyMC's ``pm.adam``: Kingma & Ba's updates with beta1 0.9, beta2 0.999, epsilon 1e-8."""

    beta1, beta2, epsilon = 0.9, 0.999, 1e-8

    def __init__(self, size: int, learning_rate: float):
        self.rate, self.t = learning_rate, 0
        self.m, self.v = np.zeros(size), np.zeros(size)

    def step(self, params: np.ndarray, grad: np.ndarray) -> None:
        """Update ``params`` in place by the gradient of the loss ``grad``."""
        self.t += 1
        b1, b2 = self.beta1, self.beta2
        a_t = self.rate * np.sqrt(1.0 - b2**self.t) / (1.0 - b1**self.t)
        self.m = b1 * self.m + (1.0 - b1) * grad
        self.v = b2 * self.v + (1.0 - b2) * grad**2
        params -= a_t * self.m / (np.sqrt(self.v) + self.epsilon)


def _log_densities(density, x: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """``ln p`` at each row of ``x``, its gradients written into the rows of ``grad``."""
    return np.array([density.logp(x[s], grad[s]) for s in range(x.shape[0])])


def _optimise(family, density, settings: Mapping, rng, progressbar: bool):
    """Adam on the negative ELBO of ``family`` until the stopping rule or ``n`` iterations.

    Returns the loss per iteration (the Monte Carlo estimate of the negative ELBO at the
    parameters before each step, as PyMC records it) and whether the rule stopped the fit.
    """
    from pymc.progress_bar import CustomProgress, default_progress_theme
    from rich.console import Console
    from rich.progress import Progress, TextColumn

    n, n_mc = settings["n"], settings["obj_n_mc"]
    adam = _Adam(family.params.size, settings["learning_rate"])
    stop = _StopWhenFlat(settings["window"], settings["tol"])
    loss = np.empty(n)
    grad = np.empty((n_mc, family.d))
    # Overflow and NaN are caught below, with the advice, not as NumPy's warnings.
    with (
        np.errstate(all="ignore"),
        CustomProgress(
            *Progress.get_default_columns(),
            TextColumn("{task.fields[loss]}"),
            console=Console(theme=default_progress_theme),
            disable=not progressbar,
        ) as progress,
    ):
        task = progress.add_task("Fitting:", total=n, loss="")
        for i in range(n):
            eps = rng.standard_normal((n_mc, family.d))
            log_p = _log_densities(density, family.draws(eps), grad)
            loss[i] = float(np.mean(_log_q(eps, family.log_det()) - log_p))
            if np.isnan(loss[i]):
                raise FloatingPointError(_diverged(settings, "the ELBO"))
            adam.step(family.params, family.gradient(eps, grad))
            if not np.all(np.isfinite(family.params)):
                raise FloatingPointError(_diverged(settings, "the approximation's parameters"))
            if progressbar and (i % 10 == 0 or i == n - 1):
                average = f"Average Loss = {loss[max(0, i - 999) : i + 1].mean():,.5g}"
                progress.update(task, completed=i + 1, loss=average)
            if stop(loss[: i + 1]):
                break
        progress.update(task, completed=i + 1)
    return loss[: i + 1], stop.converged


def _fit_gaussian(model, settings: Mapping, *, start, seed: int, progressbar: bool = False):
    """ADVI of ``settings`` (:func:`check_vi_kwargs`) on any PyMC model.

    The log density is the sampler's (:func:`bayes_rvm.inference.sampling.compiled_model`,
    loaded from the disk cache where it was compiled before); the Gaussian starts at the model's
    initial point (``start``: overrides by variable name). Returns the
    :class:`~bayes_rvm.inference.nutpie_backend.LogDensity`, the fitted family (``_MeanField``
    or ``_FullRank``), the loss per iteration and whether the stopping rule ended the fit.
    """
    from bayes_rvm.inference.nutpie_backend import log_density
    from bayes_rvm.inference.sampling import compiled_model

    density = log_density(compiled_model(model), model)
    start_point = density.start(None if start is None else dict(start))
    family = (_FullRank if settings["method"] == "fullrank_advi" else _MeanField)(start_point)
    loss, converged = _optimise(family, density, settings, np.random.default_rng(seed), progressbar)
    return density, family, loss, converged


def approximation_density(
    mu: np.ndarray, factor: np.ndarray, eps: np.ndarray, log_p: np.ndarray, names
) -> xr.Dataset:
    """The fitted Gaussian ``q`` and, at each of its draws, ``ln q`` and the model's ``ln p``.

    What the importance-corrected leave-one-out of an approximate posterior needs
    (:func:`arviz_stats.loo_approximate_posterior`, used by :func:`bayes_rvm.compare`).

    Parameters
    ----------
    mu : ndarray, shape (d,)
        The mean of ``q`` in the unconstrained space.
    factor : ndarray, shape (d,) or (d, d)
        Its standard deviations (mean-field ADVI) or the Cholesky factor ``L`` of its
        covariance (full rank).
    eps : ndarray, shape (draws, d)
        The standardised draws: the draws are ``mu + L eps``.
    log_p : ndarray, shape (draws,)
        The model's joint log density ``ln p(theta, y)`` at the draws, with the Jacobian of the
        transforms (``model.logp()``): the density ``q`` approximates.
    names : sequence of str
        The unconstrained coordinates, ``"<value variable>[<flat index>]"``.

    Returns
    -------
    xarray.Dataset
        ``mu[unconstrained]`` and ``sd[unconstrained]`` (the mean and marginal sd of each
        unconstrained coordinate), for full-rank ADVI also
        ``chol[unconstrained, unconstrained_col]``, and ``log_p[chain, draw]``,
        ``log_q[chain, draw]`` (one chain).
    """
    full_rank = factor.ndim == 2
    sd = np.sqrt(np.sum(factor**2, axis=1)) if full_rank else factor
    log_det = np.log(np.diag(factor) if full_rank else factor).sum()
    names = np.asarray(names, dtype=str)
    out = xr.Dataset(
        {
            "mu": ((UNCONSTRAINED,), mu),
            "sd": ((UNCONSTRAINED,), sd),
            "log_p": (("chain", "draw"), log_p[None, :]),
            "log_q": (("chain", "draw"), _log_q(eps, log_det)[None, :]),
        },
        coords={UNCONSTRAINED: names, "chain": [0], "draw": np.arange(eps.shape[0])},
    )
    if full_rank:
        out["chol"] = ((UNCONSTRAINED, f"{UNCONSTRAINED}_col"), factor)
        out = out.assign_coords({f"{UNCONSTRAINED}_col": names})
    return out


def _draws_tree(model, density, x: np.ndarray) -> xr.DataTree:
    """The draws ``x`` (unconstrained) as ``approx.sample`` gives them: the model's variables,
    transforms undone, with its deterministics (one chain), and its observed and constant data."""
    import pymc
    from pymc.backends.arviz import (
        coords_and_dims_for_inferencedata,
        dict_to_dataset,
        find_constants,
        find_observations,
    )
    from pymc.util import get_default_varnames

    expanded = [density.expand(row) for row in x]
    posterior = {
        name: np.stack([e[name] for e in expanded])[None].astype(model[name].dtype)
        for name in get_default_varnames(expanded[0], include_transformed=False)
    }
    coords, dims = coords_and_dims_for_inferencedata(model)
    tree = {
        "posterior": dict_to_dataset(posterior, inference_library=pymc, coords=coords, dims=dims)
    }
    for group, values in (
        ("constant_data", find_constants(model)),
        ("observed_data", find_observations(model)),
    ):
        tree[group] = dict_to_dataset(
            values, inference_library=pymc, coords=coords, dims=dims, sample_dims=[]
        )
    return xr.DataTree.from_dict(tree)


def fit_vi(
    model,
    *,
    draws: int = 1000,
    random_seed=None,
    progressbar: bool = False,
    start: Mapping | None = None,
    warn: bool = True,
    advice: str = "model",
    **vi_kwargs,
) -> xr.DataTree:
    """Fit ADVI to a model of :mod:`bayes_rvm.models.graphs` and return the completed DataTree.

    Parameters
    ----------
    model : pymc.Model
        A regression model of :func:`bayes_rvm.models.graphs.rvm_regression_model` (any form and
        likelihood, with or without an offset), :func:`~bayes_rvm.models.graphs.rvm_width_model` or
        :func:`~bayes_rvm.models.graphs.rvm_poisson_model`: every model of
        :mod:`bayes_rvm.models.graphs`
        that :func:`~bayes_rvm.inference.sampling.complete_posterior` completes.
    draws : int, default=1000
        Draws from the fitted approximation (one chain).
    random_seed : int, optional
        Seeds the optimisation, the draws and the weights drawn back.
    progressbar : bool, default=False
        A progress bar of the iterations (PyMC's, as ``pm.fit`` draws it).
    start : dict, optional
        Starting means by variable name (default the model's initial point).
    warn : bool, default=True
        Warn (:class:`VariationalConvergenceWarning`) when the loss is still changing after
        ``n`` iterations.
    advice : {"model", "estimator"}, default="model"
        Wording of the warning's hint: the keyword ``n`` of this function, or the estimator's
        ``sampler_config["vi_kwargs"]``.
    **vi_kwargs
        ``method`` ({"advi", "fullrank_advi"}, default "advi"), ``n`` (iteration cap, 20000),
        ``learning_rate`` (Adam's, 0.01), ``tol`` (2e-3) and ``window`` (500) of the stopping
        rule, ``obj_n_mc`` (Monte Carlo draws per gradient, 1).

    Returns
    -------
    xarray.DataTree
        Groups ``posterior`` (``alpha_rel``, ``sigma_rel``, ``alpha``, ``sigma``, ``beta``,
        ``w`` and ``z``; as the model has them: counts have no noise, Student-t noise adds
        ``noise_nu``), ``log_likelihood`` (``y``), ``observed_data``, ``constant_data``, and
        ``variational`` (``loss[iteration]``, the negative ELBO per iteration; the
        approximation's ``mu``, ``sd`` (full rank: ``chol``) per unconstrained coordinate and
        ``log_q``, ``log_p`` per draw, :func:`approximation_density`; attrs
        ``vi_method``, ``converged``, ``relative_change``, ``tol``, ``window``,
        ``learning_rate``); root attrs ``method="vi"``, ``likelihood``, ``vi_method``,
        ``settings`` (JSON), ``converged``, ``n_iter``, ``wall_time``.

    Raises
    ------
    FloatingPointError
        When the optimisation diverges (a parameter of the approximation becomes NaN or
        infinite, the loss NaN, or the last ``window`` losses are not all finite): the message
        names ``vi_kwargs['learning_rate']`` and asks for a lower one.
    """
    settings = check_vi_kwargs(vi_kwargs)
    likelihood = model_spec(model).likelihood
    if not isinstance(draws, int | np.integer) or draws < 1:
        raise ValueError(f"draws must be a positive integer, got {draws!r}.")
    seed = int(np.random.default_rng(random_seed).integers(2**31 - 1))
    t0 = time.time()
    density, family, loss, converged = _fit_gaussian(
        model, settings, start=start, seed=seed, progressbar=bool(progressbar)
    )
    if not np.all(np.isfinite(loss[-settings["window"] :])):
        raise FloatingPointError(_diverged(settings, "the ELBO"))
    eps = np.random.default_rng(seed + 1).standard_normal((int(draws), family.d))
    x = family.draws(eps)
    log_p = _log_densities(density, x, np.empty_like(x))
    dt = _draws_tree(model, density, x)
    wall = time.time() - t0
    names = [
        f"{name}[{i}]"
        for name, shape in zip(density.free_names, density.free_shapes, strict=True)
        for i in range(int(np.prod(shape, dtype=np.int64)))
    ]
    approximation = approximation_density(family.mu.copy(), family.factor(), eps, log_p, names)
    change = relative_change(loss, settings["window"])
    if warn and not converged:
        where = "sampler_config={'vi_kwargs': {'n': ...}}" if advice == "estimator" else "n=..."
        warn_at_user(
            f"ADVI did not converge in {loss.size} iterations: the mean loss over the last "
            f"{settings['window']} changed by {change:.2g} (relative), above tol="
            f"{settings['tol']:g}. Allow more iterations ({where}), or raise the learning rate.",
            VariationalConvergenceWarning,
        )
    dt = complete_posterior(dt, model, random_seed=[seed, 2])
    dt["variational"] = variational_group(
        loss,
        vi_method=settings["method"],
        converged=converged,
        relative_change=change,
        tol=settings["tol"],
        window=settings["window"],
        learning_rate=settings["learning_rate"],
        approximation=approximation,
    )
    dt.attrs.update(
        method="vi",
        likelihood=likelihood,
        vi_method=settings["method"],
        settings=json.dumps(
            {**model_spec(model).to_dict(), **settings, "draws": int(draws), "random_seed": seed},
            sort_keys=True,
            default=str,
        ),
        converged=int(converged),
        n_iter=int(loss.size),
        wall_time=float(wall),
    )
    return dt
