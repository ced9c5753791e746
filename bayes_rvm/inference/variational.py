"""Variational inference: ADVI over the free variables of a model of :mod:`bayes_rvm.models.graphs`.

:func:`fit_vi` fits PyMC's automatic differentiation variational inference (``pm.fit``) to a
model of :mod:`bayes_rvm.models.graphs` and returns a DataTree of the same groups as
:func:`bayes_rvm.inference.sampling.sample_mcmc`: draws from the approximation in ``posterior``,
completed by
:func:`bayes_rvm.inference.sampling.complete_posterior` as MCMC's draws are, ``observed_data`` and
``constant_data``, and a ``variational`` group with the loss (the negative ELBO) per iteration,
the fitted Gaussian and, at each draw, its log density and the model's (what
:func:`bayes_rvm.compare` needs to correct the leave-one-out of approximate draws).
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
  ``ln p(t_n | w, ...)`` per draw, as under MCMC. Measured on the problems of the tests (300
  counts of log rate ``1 + sin x``; sinc, N = 100, with 10% gross outliers), over the type-II
  relevance vectors the estimators use: about 3000-3600 iterations to the stopping rule below,
  a log-rate RMSE of 0.09 (type-II 0.11) and a test RMSE 0.23 of the Gaussian RVR's. Against
  NUTS (4 x 1000 draws) in the same run: the rates within 2.7% of MCMC's (relative RMS), the
  Student-t locations within 0.006; the posterior sds of the Student-t weights 0.66-0.95 of
  MCMC's, but those of the three strongly correlated count weights (two basis functions and the
  bias) only 0.4 of MCMC's, the price of a factorised Gaussian: there the rate's posterior sd is
  0.5-1.5 times MCMC's (median 1.16). Full-rank ADVI at the default settings did not help
  (12000 iterations; rates 5% off MCMC's, weight sds 1.1-2.3 times MCMC's). Starting the
  weights at the type-II mode did not stop sooner (3100-4300 iterations either way).

**Why mean-field ADVI on the marginal model.** The regression model's free variables are only the
hyperparameters (the precisions, one per basis function, and ``sigma_rel``): the weights are
integrated out exactly in the graph, and drawn back exactly afterwards. The approximation only has
to describe the precisions and the noise in the coordinates NUTS samples: ``log alpha_rel`` and
``log sigma_rel`` (M + 1 numbers), or under the default R2-D2 hyperprior on the full basis
``logit R^2``, its Gaussian vector ``z`` and ``log sigma_rel`` (M + 2,
:func:`bayes_rvm.models.priors.r2d2_precision`). Measured on sinc (N = 100, width 2, 101 basis
functions; NLPD on 1000 held-out points), against NUTS (4 x 1000 draws) in the same run
(``benchmarks/bench_vi.py``, notebook 10):

- mean-field ADVI, Adam at a learning rate of 0.01, stopped by the rule below: 1800 iterations;
  held-out NLPD 0.0016 nat/point *below* MCMC's (-0.8195 against -0.8179); first fit in a fresh
  process 0.79-1.13 of MCMC's (5.3-6.2 s, load average about 1 on 2 cores); the posterior sds of
  ``log alpha_rel`` a median 0.99 of MCMC's. In the R2-D2 prior's Gaussian coordinates each
  column's skewed ``log alpha`` is a transform of Gaussians, so the approximation keeps its width
  and skew (notebook 10: sd ratio median 1.00, quartiles 0.96-1.03; median skewness 1.46 against
  MCMC's 1.43; largest Pareto k of the draws 0.44). Measured earlier in ``log alpha`` (the
  half-Cauchy's coordinates): sds 0.93 of MCMC's (0.83-1.06), as the Gaussians cut the skewed
  marginals' long upper tails;
- full-rank ADVI: no better predictions (NLPD 0.008 above MCMC's after 13000 iterations at the
  largest stable learning rate, 0.003; at 0.03 it diverged), 5-8x the time per iteration, and many
  more iterations for its 5000 covariance parameters;
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

import contextlib
import json
import time
from collections.abc import Mapping

import numpy as np
import xarray as xr

from bayes_rvm._warnings import quiet_logger, warn_at_user
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
    """``pm.fit`` callback: stop once the smoothed loss is flat (see the module docstring)."""

    check_every = 100

    def __init__(self, window: int, tol: float):
        self.window, self.tol, self.converged = window, tol, False

    def __call__(self, approx, loss, i) -> None:
        if loss is None or i % self.check_every:
            return
        if relative_change(loss, self.window) < self.tol:
            self.converged = True
            raise StopIteration(f"relative change of the loss below {self.tol} at {i}")


def _diverged(settings: Mapping, what: str) -> str:
    """Why ADVI stopped on a non-finite value, and what to change."""
    rate = settings["learning_rate"]
    return (
        f"ADVI diverged: {what} became NaN or infinite at vi_kwargs['learning_rate']={rate:g} "
        f"(method {settings['method']!r}). Lower vi_kwargs['learning_rate'] (for example to "
        f"{rate / 10:g}; the default is {VI_DEFAULTS['learning_rate']:g})."
    )


def approximation_density(approx, model, draws: int, random_seed) -> xr.Dataset:
    """The fitted Gaussian ``q`` and, at each of its draws, ``ln q`` and the model's ``ln p``.

    What the importance-corrected leave-one-out of an approximate posterior needs
    (:func:`arviz_stats.loo_approximate_posterior`, used by :func:`bayes_rvm.compare`): the
    draws of ``approx.sample(draws, random_seed=random_seed)`` (regenerated in the unconstrained
    space, where ``q`` is a Gaussian), ``ln q`` of each, and the model's joint log density
    ``ln p(theta, y)`` there, with the Jacobian of the transforms
    (``model.compile_logp(jacobian=True)``): the density ``q`` approximates.

    Returns
    -------
    xarray.Dataset
        ``mu[unconstrained]`` and ``sd[unconstrained]`` (the mean and marginal sd of each
        unconstrained coordinate, named ``"<value variable>[<flat index>]"``), for full-rank
        ADVI also ``chol[unconstrained, unconstrained_col]`` (the Cholesky factor of the
        covariance), and ``log_p[chain, draw]``, ``log_q[chain, draw]`` (one chain).
    """
    from pymc.util import _get_seeds_per_chain
    from scipy.linalg import solve_triangular

    group = approx.groups[0]
    mu = np.asarray(approx.mean.eval(), dtype=np.float64)
    full_rank = hasattr(group, "L")
    chol = np.asarray(group.L.eval(), dtype=np.float64) if full_rank else None
    sd = np.sqrt(np.sum(chol**2, axis=1)) if full_rank else np.asarray(approx.std.eval())
    # approx.sample draws with this seed in the unconstrained space and transforms the draws.
    (seed,) = _get_seeds_per_chain(random_seed, 1)
    raw = approx.sample_dict_fn(draws, random_seed=seed)
    flat = np.empty((draws, mu.size))
    names = np.empty(mu.size, dtype=object)
    for name, slc, _, _ in group.ordering.values():
        flat[:, slc] = np.asarray(raw[name], dtype=np.float64).reshape(draws, -1)
        names[slc] = [f"{name}[{i}]" for i in range(slc.stop - slc.start)]
    # ln q: the standardised draws' normal densities, less the log determinant of the factor.
    if full_rank:
        z = solve_triangular(chol, (flat - mu).T, lower=True).T
        log_det = np.log(np.diag(chol)).sum()
    else:
        z = (flat - mu) / sd
        log_det = np.log(sd).sum()
    log_q = -0.5 * (z**2).sum(axis=1) - 0.5 * mu.size * np.log(2 * np.pi) - log_det
    logp = model.compile_logp(jacobian=True)
    log_p = np.array([logp({k: v[i] for k, v in raw.items()}) for i in range(draws)])
    out = xr.Dataset(
        {
            "mu": ((UNCONSTRAINED,), mu),
            "sd": ((UNCONSTRAINED,), sd),
            "log_p": (("chain", "draw"), log_p[None, :]),
            "log_q": (("chain", "draw"), log_q[None, :]),
        },
        coords={UNCONSTRAINED: names.astype(str), "chain": [0], "draw": np.arange(draws)},
    )
    if full_rank:
        out["chol"] = ((UNCONSTRAINED, f"{UNCONSTRAINED}_col"), chol)
        out = out.assign_coords({f"{UNCONSTRAINED}_col": names.astype(str)})
    return out


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
        PyMC's progress bar.
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
        When the optimisation diverges (a NaN parameter, which PyMC reports as "NaN occurred in
        optimization", chained as the cause; or a non-finite loss): the message names
        ``vi_kwargs['learning_rate']`` and asks for a lower one.
    """
    import pymc as pm

    settings = check_vi_kwargs(vi_kwargs)
    likelihood = model_spec(model).likelihood
    if not isinstance(draws, int | np.integer) or draws < 1:
        raise ValueError(f"draws must be a positive integer, got {draws!r}.")
    seed = int(np.random.default_rng(random_seed).integers(2**31 - 1))
    stop = _StopWhenFlat(settings["window"], settings["tol"])
    t0 = time.time()
    # PyMC logs why it stopped; the DataTree records it (attrs), so without a progress bar the
    # log would be noise in scripts and notebooks.
    quiet = contextlib.nullcontext() if progressbar else quiet_logger("pymc.variational")
    with model, quiet:
        try:
            approx = pm.fit(
                n=settings["n"],
                method=settings["method"],
                random_seed=seed,
                progressbar=bool(progressbar),
                start=None if start is None else dict(start),
                obj_optimizer=pm.adam(learning_rate=settings["learning_rate"]),
                obj_n_mc=settings["obj_n_mc"],
                callbacks=[stop],
            )
        except FloatingPointError as err:
            # PyMC stops at the first NaN parameter ("NaN occurred in optimization"), before
            # the loss check below could say what to change.
            raise FloatingPointError(_diverged(settings, "the approximation's parameters")) from err
        dt = approx.sample(draws, random_seed=seed + 1)
    wall = time.time() - t0
    density = approximation_density(approx, model, draws, seed + 1)
    loss = np.asarray(approx.hist, dtype=np.float64)
    change = relative_change(loss, settings["window"])
    if not np.all(np.isfinite(loss[-settings["window"] :])):
        raise FloatingPointError(_diverged(settings, "the ELBO"))
    if warn and not stop.converged:
        where = "sampler_config={'vi_kwargs': {'n': ...}}" if advice == "estimator" else "n=..."
        warn_at_user(
            f"ADVI did not converge in {loss.size} iterations: the mean loss over the last "
            f"{settings['window']} changed by {change:.2g} (relative), above tol="
            f"{settings['tol']:g}. Allow more iterations ({where}), or raise the learning rate.",
            VariationalConvergenceWarning,
        )
    if "sample_stats" in dt.children and not dt["sample_stats"].dataset.data_vars:
        del dt["sample_stats"]  # an empty group: ADVI has no per-draw statistics
    dt = complete_posterior(dt, model, random_seed=[seed, 2])
    dt["variational"] = variational_group(
        loss,
        vi_method=settings["method"],
        converged=stop.converged,
        relative_change=change,
        tol=settings["tol"],
        window=settings["window"],
        learning_rate=settings["learning_rate"],
        approximation=density,
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
        converged=int(stop.converged),
        n_iter=int(loss.size),
        wall_time=float(wall),
    )
    return dt
