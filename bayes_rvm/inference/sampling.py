"""MCMC: NUTS through nutpie (or ``pm.sample``), the compiled-model cache, the posterior completed.

:func:`sample_mcmc` samples a model of :mod:`bayes_rvm.models.graphs` and returns its DataTree,
completed by :func:`complete_posterior` with the weights drawn back from their Gaussian
conditional and the pointwise log likelihood, and diagnosed by
:func:`bayes_rvm.inference.diagnostics.diagnose`. nutpie runs on the disk-cached callbacks of
:mod:`bayes_rvm.inference.nutpie_backend`, its sampler backend.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from bayes_rvm.dims import BASIS, CLASS, OBS
from bayes_rvm.evidence.gaussian import EvidenceFit
from bayes_rvm.inference.diagnostics import diagnose
from bayes_rvm.posterior.datatree import extra_dims, make_datatree
from bayes_rvm.posterior.draws import (
    draw_weights,
    gaussian_completion,
    gaussian_loo_terms,
    pointwise_log_likelihood,
    width_designs,
)
from bayes_rvm.progress import interactive
from bayes_rvm.threads import one_blas_thread

__all__ = [
    "SAMPLERS",
    "STATISTICS_THIN",
    "complete_posterior",
    "sample_mcmc",
    "sample_prior_predictive",
    "thinned",
    "type2_initvals",
]

SAMPLERS = ("nutpie", "numpyro", "blackjax", "pymc")
#: Cache of compiled nutpie models keyed on the model's settings and shapes (see sample_mcmc).
_NUTPIE_CACHE: dict[tuple, object] = {}
_NUTPIE_CACHE_SIZE = 8


def _likelihood(model) -> str:
    # Read from the graph: a clone or a pm.do transform keeps it, and a model that is not one of
    # bayes_rvm.models.graphs' is refused (ValueError) rather than taken for a Gaussian one.
    from bayes_rvm.models.spec import model_spec

    return model_spec(model).likelihood


def _model_offset(model, post: xr.Dataset, shape: tuple[int, ...]) -> np.ndarray | None:
    """The user's terms of the mean as (S, N, D) (a Deterministic) or (N, D) (data), or None."""
    if "offset" in post:
        off = post["offset"].values
        return off.reshape(-1, *shape)
    if "offset" in model.named_vars and hasattr(model["offset"], "get_value"):
        return np.asarray(model["offset"].get_value(), dtype=np.float64).reshape(shape)
    return None


def _seed_from(random_seed) -> int:
    # One integer seed for the sampler, derived reproducibly from whatever the user passed.
    if random_seed is None:
        return int(np.random.default_rng().integers(2**31 - 1))
    if isinstance(random_seed, int | np.integer):
        return int(random_seed)
    return int(np.random.default_rng(random_seed).integers(2**31 - 1))


def _nutpie_cache_key(model) -> tuple | None:
    # Initial values are not part of the key: they are set per run (with_initial_points).
    from bayes_rvm.models.graphs import model_cache_key

    key = model_cache_key(model)
    if key is None:
        return None  # graphs with terms of the user's own cannot be compared by their spec
    return (key, tuple(sorted(map(str, model.coords.items()))))


#: The thinning of ``sample_mcmc(thin="auto")`` for a model of sufficient statistics.
STATISTICS_THIN = 4


def _thin(thin, model) -> int:
    """``thin`` checked (a positive integer or ``"auto"``) and resolved for ``model``."""
    if isinstance(thin, str) and thin == "auto":
        return STATISTICS_THIN if "n_rows" in model.named_vars else 1
    if isinstance(thin, bool) or not isinstance(thin, int | np.integer) or thin < 1:
        raise ValueError(f'thin must be a positive integer or "auto", got {thin!r}.')
    return int(thin)


def _check_nuts(nuts) -> None:
    """``nuts`` is None or a mapping of sampler options; a ``target_accept`` lies in (0, 1)."""
    if nuts is None:
        return
    if not isinstance(nuts, Mapping):
        raise ValueError(
            f"nuts must be a dict of NUTS options (e.g. {{'target_accept': 0.95}}), got {nuts!r}."
        )
    ta = nuts.get("target_accept")
    if ta is not None and not (isinstance(ta, int | float) and 0.0 < ta < 1.0):
        raise ValueError(f"nuts['target_accept'] must be a number in (0, 1), got {ta!r}.")


def compiled_model(model):
    """``compile_nutpie(model)``, reused within the process for a model of the same key.

    Models built by :func:`rvm_regression_model` with the same settings and shapes give the same
    compiled model (:func:`_nutpie_cache_key`); the result holds the data of the model that was
    compiled: set the current model's with
    :func:`bayes_rvm.inference.nutpie_backend.with_model_data`.
    """
    from bayes_rvm.inference.nutpie_backend import compile_nutpie

    key = _nutpie_cache_key(model)
    compiled = _NUTPIE_CACHE.get(key) if key is not None else None
    if compiled is None:
        compiled = compile_nutpie(model)
        if key is not None:
            if len(_NUTPIE_CACHE) >= _NUTPIE_CACHE_SIZE:
                _NUTPIE_CACHE.pop(next(iter(_NUTPIE_CACHE)))
            _NUTPIE_CACHE[key] = compiled
    return compiled


def _sample_nutpie_cached(model, *, draws, tune, chains, cores, seed, progressbar, initvals, nuts):
    """``pm.sample``'s nutpie branch, compiled through ``compile_nutpie``.

    Its numba callbacks are cached on disk and hold no data size, so a fresh process fitting any
    shape does not recompile them; models built by :func:`rvm_regression_model` with the same
    settings and shapes give the same compiled model, so within a process one is reused with the
    new model's data (``with_data``), coordinates and initial values.
    """
    import nutpie
    from pymc.backends.arviz import patch_nutpie_idata

    from bayes_rvm.inference.nutpie_backend import with_initial_points, with_model_data

    compiled = compiled_model(model)
    compiled = with_model_data(with_initial_points(compiled, model, initvals), model)
    nuts = dict(nuts or {})
    if "max_treedepth" in nuts:
        nuts["maxdepth"] = nuts.pop("max_treedepth")
    try:
        from pymc.progress_bar.progress import NutpieProgressBarManager

        pb = NutpieProgressBarManager(
            chains=chains, draws=draws, progressbar=progressbar, progressbar_theme=None
        )
        pb_kwargs = {"progress_bar": False, "progress_callback": pb.update}
    except (ImportError, TypeError):  # pragma: no cover - PyMC moved its progress bar
        pb, pb_kwargs = None, {"progress_bar": bool(progressbar)}
    t0 = time.time()
    with pb if pb is not None else contextlib.nullcontext():
        dt = nutpie.sample(
            compiled,
            draws=draws,
            tune=max(tune, 1),
            chains=chains,
            cores=cores,
            seed=seed,
            **pb_kwargs,
            **nuts,
        )
    patch_nutpie_idata(dt, model, sampling_time=time.time() - t0)
    return dt


@one_blas_thread
def sample_mcmc(
    model,
    *,
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    sampler: str = "nutpie",
    random_seed=None,
    progressbar: bool | str = "auto",
    initvals: Mapping | None = None,
    cores: int | None = None,
    nuts: Mapping | None = None,
    warn: bool = True,
    cache: bool = True,
    keep_warmup: bool = False,
    advice: str = "model",
    thin: int | str = "auto",
    **kwargs,
) -> xr.DataTree:
    """Sample a model of :mod:`bayes_rvm.models.graphs` with NUTS and complete its DataTree.

    Parameters
    ----------
    model : pymc.Model
    draws, tune, chains : int
        As in :func:`pymc.sample`.
    sampler : {"nutpie", "numpyro", "blackjax", "pymc"}, default="nutpie"
        The NUTS implementation (``nuts_sampler`` of :func:`pymc.sample`). ``"nutpie"`` runs the
        numba kernels with its chains in parallel threads and is the one to use on a CPU.
        ``"numpyro"`` and ``"blackjax"`` run the JAX implementation of the marginal likelihood
        (dense and low-rank); they are meant for a JAX accelerator: on a CPU they pay a JAX
        compilation in every process and run their chains one core each. Measured on sinc,
        N = 100, 101 basis functions, 4 x 1000 draws, 2 contended cores (the ``samplers``
        section of ``benchmarks/bench_mcmc.py``): numpyro 4.0x nutpie's wall time and 2.4x its
        time per effective draw. ``"pymc"`` is PyMC's own NUTS (C backend, one process per
        chain): 5.2x nutpie's wall time there.
    random_seed : int, optional
        Makes the run reproducible (also the draws of ``w`` in the marginal form).
    progressbar : bool or "auto", default="auto"
        PyMC's progress bar. ``"auto"``: shown where a person is watching (a terminal or a
        Jupyter kernel), left out of non-interactive output (logs, CI, redirected streams).
    initvals : dict, optional
        Starting values by variable name (one dict for all chains), for example
        :func:`type2_initvals`. Those of R2-D2 precisions sampled in Gaussian coordinates
        (:func:`~bayes_rvm.models.priors.r2d2_precision`) are turned into their free variables'.
    cores : int, optional
        Parallel chains (nutpie, pymc).
    nuts : dict, optional
        Sampler options, for example ``{"target_accept": 0.9}``.
    warn : bool, default=True
        Emit :class:`SamplingDiagnosticsWarning` for divergences, R-hat > 1.01 or bulk ESS < 400
        of the hyperparameters, each with the usual remedy.
    cache : bool, default=True
        Reuse compiled nutpie models across calls (nutpie only; see Notes).
    keep_warmup : bool, default=False
        Keep the sampler's warmup groups (they hold as many draws as the posterior; saved fits
        are several times smaller without them).
    advice : {"model", "estimator", "estimator_relevant"}, default="model"
        Wording of the diagnostics' remedies (see :func:`diagnose`).
    thin : int or "auto", default="auto"
        Run ``draws * thin`` iterations per chain after tuning and keep every ``thin``-th:
        ``draws`` draws per chain, each nearly independent of the last (:func:`thinned`).
        ``"auto"``: :data:`STATISTICS_THIN` for a model of sufficient statistics
        (:func:`bayes_rvm.models.statistics.rvm_statistics_model`), 1 otherwise. Why: NUTS draws
        are antithetic in a parameter's value but positively correlated in its distance from
        the median, so the folded half of the rank R-hat over many parameters exceeds 1.01 at
        2 x 500 draws even where the chains agree (see Notes).
    **kwargs
        Passed to :func:`pymc.sample`.

    Returns
    -------
    xarray.DataTree
        Groups ``posterior`` (``w``, ``alpha``, ``sigma``, ``beta``), ``log_likelihood`` (``y``),
        ``observed_data``, ``constant_data``, ``sample_stats``; root attrs ``method="mcmc"``,
        ``settings`` (JSON) and ``diagnostics`` (JSON of :func:`diagnose`, null where it gives
        NaN: the R-hat of one chain).

    Notes
    -----
    The result goes through :func:`complete_posterior`: in the marginal form ``w`` is drawn from
    its Gaussian conditional ``N(m, Sigma)`` for each posterior draw of ``(alpha, sigma)``, and
    the pointwise log likelihood is computed from the weights in every form.

    With nutpie and ``cache=True`` the model's log density and trace expansion are PyTensor numba
    functions (for the default regression model, its density written in numba,
    :mod:`bayes_rvm.models.marginal.r2d2_density`) wrapped in C callbacks, all cached on disk
    (:mod:`bayes_rvm.inference.nutpie_backend`): a fresh
    process loads them instead of compiling, and nutpie's chains call them from its own threads
    without entering Python. They read the data's sizes at run time, so they are compiled once
    per machine (for given model settings), not per data shape; a fit that does compile says so
    first, in one line on PyMC's logger. Within a process the compiled model is also kept in a
    small cache keyed on the model settings, data shapes (not the rank of the low-rank factors),
    variable names and coordinates, so that refitting on new data of the same shape reuses it
    with new data and initial values.

    Large full-basis problems (N = 1000 on sinc, rank 25): the low-rank marginal form
    (:mod:`bayes_rvm.models.marginal.lowrank`), initial values from the type-II fit
    (:func:`type2_initvals`, as :class:`~bayes_rvm.RVR` does), nutpie's
    diagonal mass
    matrix and the half-Cauchy hyperprior on the weight scales sample it with no
    divergence and R-hat below 1.01 (``benchmarks/bench_mcmc.py``, ``scale`` section); RVR's fit
    under the default R2-D2 hyperprior too (4 x 1000 draws, max R-hat 1.008), at twice the
    gradient evaluations per draw.

    Thinning costs ``thin`` times the sampling time for the same number of kept draws. NUTS
    (nutpie's defaults) on an iid 45-dimensional Gaussian, 2 x 500 draws, gives a bulk ESS of
    2.8 per draw but a folded one of 0.39, and a max rank R-hat above 1.01 in 40 of 40 runs
    (median 1.017); with ``thin=4``, 0.90 and 0.90 per kept draw and max R-hat <= 1.01 in 90%
    of runs, near independent draws' 97%. A model of sufficient statistics samples the
    ``log alpha`` of the type-II relevance vectors (about 45) at a cost per gradient
    independent of N: at N = 10^6, 2 x 2000 iterations take one or two seconds, and ``"auto"``
    thins by 4 there (max R-hat <= 1.01 in 88% and 95% of two sets of 60 runs of 2 x 500 kept
    draws, against 3% and 13% unthinned). Elsewhere a gradient costs more and the
    estimators draw 1000 per chain instead. Figures: ``benchmarks/bench_mcmc.py --sections
    rhat,replicates`` and docs/large_data.md.
    """
    import pymc as pm

    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}.")
    _check_nuts(nuts)
    if initvals:
        from bayes_rvm.models.priors import r2d2_free_values

        initvals = r2d2_free_values(model, initvals)
    thin = _thin(thin, model)
    spec = getattr(model, "rvm_spec", None)
    settings = spec.to_dict() if spec is not None else {}
    if sampler in ("numpyro", "blackjax"):
        from bayes_rvm._optional import require
        from bayes_rvm.models.marginal import register_jax_dispatch

        also = "blackjax" if sampler == "blackjax" else ""  # not in the extra
        for module in ("jax", sampler):
            require(module, "jax", f"sampler={sampler!r}", also=also)

        register_jax_dispatch()
    seed = _seed_from(random_seed)
    progressbar = interactive() if progressbar == "auto" else bool(progressbar)
    t0 = time.time()
    if sampler == "nutpie" and cache and not kwargs:
        dt = _sample_nutpie_cached(
            model,
            draws=draws * thin,
            tune=tune,
            chains=chains,
            cores=cores,
            seed=seed,
            progressbar=progressbar,
            initvals=initvals,
            nuts=nuts,
        )
    else:
        dt = pm.sample(
            draws=draws * thin,
            tune=tune,
            chains=chains,
            cores=cores,
            model=model,
            nuts_sampler=sampler,
            random_seed=seed,
            progressbar=progressbar,
            initvals=initvals,
            nuts=dict(nuts or {}),
            compute_convergence_checks=False,
            **kwargs,
        )
    wall = time.time() - t0
    if not keep_warmup:
        for name in [k for k in dt.children if k.startswith("warmup")]:
            del dt[name]
    if thin > 1:
        dt = thinned(dt, thin)
    dt = complete_posterior(dt, model, random_seed=[seed, 1])
    from bayes_rvm.models.spec import model_spec

    diag = diagnose(dt, warn=warn, advice=advice, spec=model_spec(model))
    dt.attrs.update(
        method="mcmc",
        likelihood=_likelihood(model),
        sampler=sampler,
        settings=json.dumps(
            {
                **settings,
                "draws": draws,
                "tune": tune,
                "chains": chains,
                "thin": thin,
                "sampler": sampler,
                "random_seed": None if random_seed is None else seed,
            },
            sort_keys=True,
        ),
        # Strict JSON: a one-chain R-hat, NaN, is written null (Python's NaN token is not JSON).
        diagnostics=json.dumps(
            {k: None if isinstance(v, float) and np.isnan(v) else v for k, v in diag.items()},
            sort_keys=True,
        ),
        wall_time=float(wall),
    )
    return dt


def sample_prior_predictive(model, draws: int = 500, *, random_seed=None) -> xr.DataTree:
    """Draws from the prior of a model of :mod:`bayes_rvm.models.graphs`, weights included.

    ``pm.sample_prior_predictive`` draws the hyperparameters; where the model integrates the
    weights out (the Gaussian ``MarginalNormal`` likelihood) ``w`` is drawn from its prior
    ``N(0, 1 / alpha)`` given each draw of ``alpha``, and ``y`` from ``Phi w`` plus noise given
    that ``w`` and ``sigma``, so that ``prior`` holds the same variables as a fit's
    ``posterior`` and each draw of ``y`` goes with the ``w`` beside it. Other likelihoods sample
    their weights, and PyMC draws everything.

    Parameters
    ----------
    model : pymc.Model
        Built by :mod:`bayes_rvm.models.graphs` (for instance an estimator's ``model_``); not a
        model of sufficient statistics, whose targets are a compressed design.
    draws : int, default=500
    random_seed : int, optional

    Returns
    -------
    xarray.DataTree
        ``prior`` (``alpha_rel``, ``alpha``, ``log_alpha``, ``w``, ``sigma``, ... over one
        chain) and ``prior_predictive`` (``y[obs]``, ``y[obs, output]`` with several outputs).
    """
    import warnings

    import pymc as pm

    from bayes_rvm._warnings import quiet_logger
    from bayes_rvm.models.graphs import prior_draw, quiet_marginal_draw
    from bayes_rvm.models.spec import MARGINAL_NORMAL

    if isinstance(draws, bool) or not isinstance(draws, int | np.integer) or draws < 1:
        raise ValueError(f"draws must be a positive integer, got {draws!r}.")
    _likelihood(model)  # refuses a model that is not one of this package's
    if "n_rows" in model.named_vars:
        raise ValueError(
            "a model of sufficient statistics has no data rows to draw targets at: its y is a "
            "compressed design. Build the model on a subset of rows for a prior predictive."
        )
    pm_seed, np_seed = np.random.SeedSequence(_seed_from(random_seed)).spawn(2)
    marginal = type(model["y"].owner.op).__name__ == MARGINAL_NORMAL
    names = [v.name for v in (*model.free_RVs, *model.deterministics)] if marginal else None
    with warnings.catch_warnings(), quiet_logger("pymc"):
        quiet_marginal_draw()
        dt = pm.sample_prior_predictive(
            int(draws),
            model=model,
            var_names=names,
            random_seed=int(pm_seed.generate_state(1)[0]),
        )
    prior = dt["prior"].dataset
    out = xr.DataTree()
    if not marginal:
        out["prior"], out["prior_predictive"] = dt["prior"], dt["prior_predictive"]
        return out
    y_obs = np.asarray(model["y_obs"].get_value())
    y_dims = model.named_vars_to_dims["y"]
    if "kernel_dist" in model.named_vars:  # a sampled width: one design per draw
        Phi = width_designs(np.asarray(model["kernel_dist"].get_value()), prior, model.coords)
        Phi = Phi.reshape(*prior["alpha"].shape[:2], *Phi.shape[1:])
    else:
        Phi = np.asarray(model["Phi"].get_value(), dtype=np.float64)
    batch = prior["alpha"].shape[:2]
    w, y = prior_draw(
        Phi,
        np.log(prior["alpha"].values),
        -2.0 * np.log(prior["sigma"].values),
        np.zeros(y_obs.shape),
        np.random.default_rng(np_seed),
        batch=batch,
    )
    # The user's terms of the mean: fixed data, or a Deterministic with one value per draw.
    offset = _model_offset(model, prior, y_obs.shape)
    if offset is not None:
        y += offset.reshape(*batch, *y_obs.shape) if offset.ndim > y_obs.ndim else offset
    w_dims = ("chain", "draw", BASIS, *y_dims[1:])
    out["prior"] = xr.DataTree(prior.assign(w=(w_dims, w)))
    pred = xr.Dataset(
        {"y": (("chain", "draw", *y_dims), y)},
        coords={"chain": prior.chain, "draw": prior.draw}
        | {d: np.asarray(model.coords[d]) for d in y_dims},
        attrs=dict(dt["prior_predictive"].attrs) if "prior_predictive" in dt.children else {},
    )
    out["prior_predictive"] = xr.DataTree(pred)
    return out


def thinned(dt: xr.DataTree, thin: int) -> xr.DataTree:
    """Every ``thin``-th draw of ``posterior`` and ``sample_stats`` (the last of each block).

    The draws are renumbered from 0. In ``sample_stats`` a kept draw's ``diverging`` is true
    when any draw of its block diverged, so that a thinned run hides no divergence; its other
    statistics are the kept draw's own. Warmup groups are left as they are.

    Parameters
    ----------
    dt : xarray.DataTree
        A sampler's result (``posterior`` and ``sample_stats`` with a ``draw`` dimension).
    thin : int
        Keep draws ``thin - 1, 2 thin - 1, ...``; an incomplete last block is dropped.

    Returns
    -------
    xarray.DataTree
        A copy with ``draws // thin`` draws per chain.
    """
    out = dt.copy()
    for group in ("posterior", "sample_stats"):
        if group not in dt.children:
            continue
        ds = dt[group].dataset
        n = ds.sizes["draw"] // thin * thin
        kept = ds.isel(draw=slice(thin - 1, n, thin))
        if "diverging" in ds:
            blocks = ds["diverging"].isel(draw=slice(0, n)).coarsen(draw=thin).any()
            kept["diverging"] = blocks.assign_coords(draw=kept.draw)
        out[group] = xr.DataTree(kept.assign_coords(draw=np.arange(kept.sizes["draw"])))
    return out


def complete_posterior(dt: xr.DataTree, model, *, random_seed=None) -> xr.DataTree:
    """Complete a plain ``pm.sample`` result of an RVM model with ``w`` and ``log_likelihood``.

    ``pm.sample`` on the weight-marginalised model gives no ``w``, and
    ``pm.compute_log_likelihood`` finds no pointwise terms in it; this adds both, so that
    ``az.loo``, ``az.compare`` and :func:`sample_posterior_predictive` work. Any model of
    :mod:`bayes_rvm.models.graphs` is accepted, with or without terms of the user's own in the mean
    (their values are read from the ``offset`` deterministic or data).

    Parameters
    ----------
    dt : xarray.DataTree
        The result of ``pm.sample(model=model)`` (or of :func:`sample_mcmc`).
    model : pymc.Model
        The model that was sampled.
    random_seed : int or sequence of int, optional
        Seed of the weight draws (marginal form).

    Returns
    -------
    xarray.DataTree
        ``dt`` with ``w`` in ``posterior`` (drawn from ``N(m, Sigma)`` per draw in the marginal
        form, with its non-centred coordinates ``z = w sqrt(alpha)`` of the joint form; the
        sampled ``w`` in the joint form), ``log_likelihood`` (``y[obs]``), and the Gram matrix (a
        sampling cache, not data) left out of ``constant_data``.

    Notes
    -----
    Regression: given the hyperparameters the targets are dependent once ``w`` is integrated
    out, and ``log_likelihood`` holds the exact leave-one-out terms ``ln p(t_n | t_-n, alpha,
    sigma)`` (:func:`gaussian_loo_terms`), in every form: PSIS-LOO on them is the leave-one-out
    of the non-factorised model (Buerkner, Gabry & Vehtari 2021) and has far smaller Pareto k
    than the terms conditional on one weight draw (on sinc at width 1, max k 0.3 against 0.75).
    Classifiers: ``ln p(t_n | w)`` for the sampled weights, which factorise given ``w``.

    Examples
    --------
    >>> import pymc as pm  # doctest: +SKIP
    >>> idata = pm.sample(model=est.model_)  # doctest: +SKIP
    >>> idata = complete_posterior(idata, est.model_, random_seed=0)  # doctest: +SKIP
    >>> az.loo(idata)  # doctest: +SKIP
    """
    likelihood = _likelihood(model)
    post = dt["posterior"].dataset
    y = np.asarray(model["y_obs"].get_value())
    multi = likelihood == "gaussian" and y.ndim == 2
    C, S = post.sizes["chain"], post.sizes["draw"]
    if "kernel_dist" in model.named_vars:
        # a sampled kernel width (rvm_width_model): one design per draw, at that draw's width
        Phi = width_designs(np.asarray(model["kernel_dist"].get_value()), post, model.coords)
    else:
        Phi = np.asarray(model["Phi"].get_value(), dtype=np.float64)
    obs = None
    if likelihood == "gaussian":
        w, ll, z, obs = _gaussian_completion(model, post, Phi, y, multi, random_seed)
    else:
        D = post["w"].sizes.get(CLASS, 1)
        w = post["w"].values.reshape(C * S, Phi.shape[1], D)
        offset = _model_offset(model, post, (Phi.shape[0], D))
        noise = {}
        if likelihood == "student_t":  # t noise: ln p(t_n | w, sigma, nu), given each draw
            y = y[:, None]
            noise = {"sigma": post["sigma"].values.reshape(-1)}
            noise["nu"] = post["noise_nu"].values.reshape(-1)
        ll = pointwise_log_likelihood(Phi, y, w, likelihood=likelihood, offset=offset, **noise)
    if obs is None:
        obs = np.arange(Phi.shape[-2])
    w_extra, y_extra = extra_dims(likelihood, multi)
    w_out = w.reshape(C, S, *w.shape[1:])
    coords = {
        "chain": post.chain.values,
        "draw": post.draw.values,
        BASIS: post[BASIS].values if BASIS in post.coords else np.asarray(model.coords[BASIS]),
        OBS: obs,
    }
    if w_extra is not None:
        coords[w_extra] = np.asarray(model.coords[w_extra])
    else:
        w_out = w_out[..., 0]
    draws = {"w": w_out}
    if likelihood == "gaussian" and "z" not in post and "kernel_dist" not in model.named_vars:
        # The non-centred coordinates of the joint form: with them pm.sample_posterior_predictive
        # on make_model(form="joint") uses the posterior of w rather than drawing z from its prior.
        draws["z"] = z.reshape(w_out.shape)
    new = make_datatree(
        {"posterior": draws}
        | ({} if ll is None else {"log_likelihood": {"y": ll.reshape(C, S, -1)}}),
        coords=coords,
        w_extra=w_extra,
        y_extra=y_extra,
    )
    out = dt.copy()
    out["posterior"] = xr.DataTree(
        post.drop_vars("w", errors="ignore").assign(new["posterior"].dataset.data_vars)
    )
    if ll is not None:
        out["log_likelihood"] = new["log_likelihood"]
    if "n_rows" in model.named_vars:
        out.attrs["log_likelihood_rows"] = (
            "none" if ll is None else f"subset of {obs.size} of {_n_rows(model)} data rows"
        )
        # The elpd of such a fit is estimated on the scale of all its rows (bayes_rvm.compare).
        out.attrs["n_data_rows"] = _n_rows(model)
    if "constant_data" in out.children:
        # Sampling caches of the marginal and whitened forms, not data.
        caches = ("gram", "Phi_U", "Phi_VS", "gram_ref", "target_ref")
        const = out["constant_data"].dataset.drop_vars(caches, errors="ignore")
        const = const.drop_dims([d for d in const.dims if d.startswith(caches)])
        if "y_obs" not in const:
            # The joint form's weights are whitened around the targets' conditional mean, so
            # y_obs is upstream of w: PyMC reads data missing from constant_data as changed,
            # and pm.sample_posterior_predictive on make_model(form="joint") warned.
            y_obs = np.asarray(model["y_obs"].get_value())
            dims = model.named_vars_to_dims.get("y_obs") or [
                f"y_obs_dim_{i}" for i in range(y_obs.ndim)
            ]
            const = const.assign(y_obs=(dims, y_obs))
        out["constant_data"] = xr.DataTree(const)
    out.attrs.setdefault("likelihood", likelihood)
    return out


def _gaussian_completion(model, post, Phi, y, multi: bool, random_seed):
    """The Gaussian models' weights (drawn given alpha, sigma where marginalised), their exact
    leave-one-out terms, the non-centred coordinates and the rows of the terms (None: all)."""
    C, S = post.sizes["chain"], post.sizes["draw"]
    obs = None
    Y = (y if multi else y[:, None]).astype(np.float64)
    offset = _model_offset(model, post, Y.shape)
    sigma = post["sigma"].values.reshape(-1)
    Yc = Y if offset is None else Y - offset
    alpha = post["alpha"].values.reshape(C * S, -1)
    statistics = "n_rows" in model.named_vars
    rng = None if "w" in post else np.random.default_rng(random_seed)
    w = ll = None
    if "Phi_U" in model.named_vars and Yc.ndim == 2:
        # The low-rank marginal form: O(M r) per draw, not O(M^3), the weights and the
        # leave-one-out terms from one factorisation of each draw.
        from bayes_rvm.models.marginal import lowrank_completion

        U, VS = (np.asarray(model[k].get_value()) for k in ("Phi_U", "Phi_VS"))
        w, ll = lowrank_completion(U, VS, Yc, alpha, sigma**-2.0, rng, loo=not statistics)
    if rng is None:
        w = post["w"].values.reshape(C * S, Phi.shape[-1], -1)
    elif w is None and not statistics:
        # The weights and the leave-one-out terms from one factorisation of each draw.
        w, ll = gaussian_completion(Phi, Yc, alpha, sigma**-2.0, rng)
    elif w is None:
        w = draw_weights(Phi, Yc, alpha, sigma**-2.0, rng)
    # The targets are dependent given (alpha, sigma): the pointwise terms are the exact
    # leave-one-out densities of the marginal, valid for PSIS-LOO whatever the form.
    if statistics:
        # A model of sufficient statistics: its Phi and y are a compressed design; the
        # terms are those of the documented subset of data rows it keeps, if any.
        ll, obs = _statistics_loo_terms(model, Phi, Yc, alpha, sigma**-2.0)
    elif ll is None:
        ll = gaussian_loo_terms(Phi, Yc, alpha, sigma**-2.0)
    z = w * np.sqrt(alpha)[..., None]
    return w, ll, z, obs


def _n_rows(model) -> int:
    return int(np.asarray(model["n_rows"].get_value()))


def _statistics_loo_terms(model, R, S, alpha, beta) -> tuple[np.ndarray | None, np.ndarray]:
    """Leave-one-out terms of a statistics model's subset of rows, and the rows' indices.

    ``R`` and ``S`` are its compressed design and targets, whose ``R'R`` and ``R'S`` are the
    whole data's statistics; the subset's design and targets are the data ``Phi_rows`` and
    ``y_rows`` (:func:`bayes_rvm.models.statistics.rvm_statistics_model`).
    """
    if "ll_rows" not in model.named_vars:
        return None, np.arange(0)
    rows = np.asarray(model["ll_rows"].get_value())
    Phi_rows = np.asarray(model["Phi_rows"].get_value(), dtype=np.float64)
    y_rows = np.asarray(model["y_rows"].get_value(), dtype=np.float64).reshape(rows.size, -1)
    ll = gaussian_loo_terms(Phi_rows, y_rows, alpha, beta, statistics=(R.T @ R, R.T @ S))
    return ll, rows


def type2_initvals(
    fit: EvidenceFit,
    basis: Sequence[int] | None = None,
    *,
    alpha_max: float = 1e4,
    factor: float = 1.0,
) -> dict[str, np.ndarray]:
    """Initial values for MCMC from a type-II fit: ``alpha_rel`` (capped) and ``sigma_rel``.

    Parameters
    ----------
    fit : EvidenceFit
        A fit of the problem the model is stated on: the normalised one for a model with
        ``phi_scale`` and ``y_scale`` (as the estimators build), the raw one for a model without.
    basis : sequence of int, optional
        The columns the MCMC model uses (default all columns of the fit).
    alpha_max : float, default=1e4
        Cap for pruned (infinite) or very large ``alpha``: a finite start in the region the
        hyperprior supports, in the model's units (after ``factor``).
    factor : float, default=1
        ``alpha_rel`` of the model per ``alpha`` of the fit: ``N`` for a fit of unit-norm columns
        (the type-II engines') and a model stated for unit-RMS ones (the estimators',
        :func:`bayes_rvm.evidence.problem.prior_column_scale`).

    Returns
    -------
    dict
        ``{"alpha_rel": ..., "sigma_rel": ...}`` (no noise for a classifier's Laplace fit).
    """
    alpha = np.asarray(fit.alpha, dtype=np.float64)
    if basis is not None:
        alpha = alpha[np.asarray(basis, dtype=int)]
    alpha = np.minimum(np.where(np.isfinite(alpha), alpha * float(factor), alpha_max), alpha_max)
    out = {"alpha_rel": alpha}
    if getattr(fit, "likelihood", "gaussian") in ("gaussian", "student_t"):
        out["sigma_rel"] = np.asarray(fit.beta**-0.5)
    return out


def type2_centring(fit: EvidenceFit, basis: Sequence[int] | None = None) -> np.ndarray:
    """How far to centre each sampled weight: a type-II fit's determinedness of it.

    ``c_i = 1 - alpha_i Sigma_ii`` (MacKay 1992's well-determinedness of weight ``i``: 1 where the
    data fix it, 0 where its prior does) on the fit's relevance vectors, 0 on the columns it
    pruned; the ``centred`` argument of :func:`bayes_rvm.models.graphs.rvm_poisson_model`
    (``v ~ N(0, sd^c)``, ``w = sd^(1 - c) v``). Measured on counts of log rate ``1 + sin x``
    (100 rows, the relevance vectors, 4 x 1000 draws at target acceptance 0.99; loaded 2-core
    machine, ``benchmarks/bench_count_mcmc.py``): 50 divergences in all over six replicate sets
    against 136 over five of them for the centred form; through the estimator 159 against 206
    over eight sets, at most 0.5% of the draws on six of them against three (two sets still
    diverge in 1.6-1.7%).

    Parameters
    ----------
    fit : EvidenceFit
        A type-II fit with one output (``alpha * Sigma_ii`` is the same in any column units).
    basis : sequence of int, optional
        The columns the MCMC model uses (default all columns of the fit).

    Returns
    -------
    ndarray of shape (len(basis),)
        Values in [0, 1].
    """
    alpha = np.asarray(fit.alpha, dtype=np.float64)
    c = np.zeros(alpha.size)
    active = np.asarray(fit.active, dtype=int)
    cov = np.asarray(fit.covariance, dtype=np.float64).reshape(active.size, active.size)
    c[active] = np.clip(1.0 - alpha[active] * np.diag(cov), 0.0, 1.0)
    return c if basis is None else c[np.asarray(basis, dtype=int)]
