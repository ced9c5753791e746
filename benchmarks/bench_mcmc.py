"""MCMC benchmark of the RVM regression model on Tipping's sinc problem.

One run prints, in this order (``--sections`` picks some of them):

``fresh``
    ``RVR(inference="mcmc")`` with the estimator's defaults (4 chains x 1000 draws after 300
    tuning steps, the full basis) on sinc N = 100, in two **fresh Python processes**: the
    import, the first fit, a second fit of the same shape in the same process, each fit split
    into its phases (type-II fit, model, compile or cache load, sampling, DataTree, completion of
    the posterior, diagnostics), with divergences, max R-hat and min bulk ESS of the
    hyperparameters; then the targets (under 2 s, no divergence,
    R-hat <= 1.01) beside the second process's figures (the first process after a change of the
    package fills the on-disk compile cache), and each fit against its gradient limit: its
    gradients (warmup included) times the compiled O(M r^2) kernel's time per call, timed alone
    on one core in the same process, over min(chains, cores). ``--child-python PATH`` runs two
    more processes on another interpreter, with this checkout's package first on its path: a
    virtual environment of a plain ``pip install`` (the core dependencies only), whose first
    process fills its own numba cache. That is what a user without the optional extras pays:
    where dask is installed (the ``dask`` extra, and this repository's dev environment), xarray
    imports ``dask.array`` at the first array of every process.
``scale``
    The full basis (N + 1 functions) at N = 300 and N = 1000, 4 chains x 1000 draws, the
    marginal form chosen automatically (low-rank through a thin SVD here), started from the
    type-II fit as the estimator does; and the dense kernel at N = 300 for the ratio: its
    gradient costs O(M^3), so it is run with 100 draws and its time per gradient
    (``grad_ms``: sampling wall time / leapfrog steps, all chains, warmup included) is what the
    ratio compares. Each row has its gradient limit (``limit_s``, as in ``fresh``) and
    ``wall/limit``; N = 1000 is printed against the target (under 10 s, R-hat <= 1.01,
    no divergence).
``multi``
    ``RVR(inference="mcmc")`` defaults on a two-output problem (N = 80, shared alphas).
``samplers``
    nutpie, numpyro and PyMC's NUTS on the same marginal model (N = 100, full basis). numpyro and
    blackjax run the JAX implementation of the Op; no GPU was lent to this machine, so JAX runs
    on the CPU here (the table says which device JAX saw).
``large`` (not in the default set)
    ``RVR(inference="mcmc", centres=("random", 200))``, 2 chains x 500 draws, on
    ``--large-n`` rows (10^6) of a 2-D sinc, fitted from sufficient statistics: wall and CPU
    time, peak memory, load, R-hat (and its bulk and folded halves), ESS per draw, divergences
    against the targets, and the posterior mean's test RMSE over the type-II fit's; for
    ``mcmc_basis="auto"`` (the relevance vectors on this path) on ``--large-seeds`` (0-5) at the
    default thinning (4 on this path) and unthinned, ``"all"``, and a narrower kernel.
``replicates`` (not in the default set)
    How often the ``large`` call meets R-hat <= 1.01: each data set's model sampled at 10
    sampler seeds, unthinned and thinned, and once for long (8 x 2000 draws).
``rhat`` (not in the default set)
    The null distribution of that R-hat: the max over 45 parameters of a target whose chains
    cannot disagree (an iid Gaussian), 2 x 500 kept draws, for independent draws and for NUTS
    keeping every 1st-4th and 8th draw: what the target of ``large`` asks of a sampler.
``forms`` (not in the default set)
    The weight-marginalised against the joint (non-centred) and centred forms, as before.

``pymc`` (not in the default set)
    The package's fit against PyMC's own ``pm.sample`` on the same model (the estimator's
    ``make_model()`` after its type-II fit, at the estimator's draws, tune and chains and
    ``pm.sample``'s other defaults): ``nuts_sampler="nutpie"`` and PyMC's default NUTS, each
    in fresh processes: the cold fit (empty compile caches), a new shape on the caches it left
    (N = 173), the warm first fit (N = 100 again); then, each in a fresh process on warm caches,
    N = 1000 on the full basis, Ripley's RVC and the README's Poisson example. ``fit_s`` is the
    package's whole fit; for ``pm.sample`` it is the type-II fit, the model and ``pm.sample``
    (``sample_s``: ``pm.sample`` alone, its compilation included). ``--quick`` shrinks every
    case (N = 30 and 43, 2 x 100 draws; N = 200 for the full basis, 60 Ripley rows).

``rvc`` (not in the default set)
    ``RVC(inference="mcmc")`` at its defaults (the full basis, two classes: the weights whitened
    around the type-II mode) on five plain two-class data sets in 2-D (100-173 points, labels
    ``x1 + 0.5 e > 0``) and on Ripley's data: wall time, max R-hat and min bulk ESS of ``w`` and
    ``log_alpha``, divergences, leapfrog steps a draw, the warnings the fit gave and the test
    error (2000 fresh points of the same law; Ripley's test set).

``compile`` (not in the default set)
    When the sampler compiles: fresh processes with their own compile caches
    (``PYTENSOR_FLAGS=base_compiledir=...``, ``NUMBA_CACHE_DIR``, both empty at the start): a cold
    fit of sinc N = 100, then fits of shapes never seen before (N = 173, N = 250) and of a shape
    seen (N = 173 again), each in a new process on the caches the earlier ones left. Per fit:
    the compile phase (``compile_nutpie``: the graph, then numba compiles or loads), whether a
    compilation was announced (a cache miss, ``nutpie_backend.COMPILING_MESSAGE``) and how long
    after the start of the fit (``said_at_s``), the cache files it added and the fit's wall
    time. ``--compile-families`` adds the other graphs the estimators sample (a cold fit at
    N = 100, then N = 137 on its caches): ``joint`` (the regression's joint form), ``student_t``
    (t noise), ``rvc`` (Bernoulli), ``poisson``.
    ``--compile-draws`` (default 200,200,2: draws, tune, chains) sets the sampler; ``default``
    takes the estimator's.

``--gamma`` runs the fresh and multi sections at another kernel width (``0.1111``: Tipping's,
the width of the ``scale`` section; ``scale``: SVR's, wide on sinc, whose nearly collinear
columns make a ridged posterior in ``log alpha`` that NUTS mixes slowly over the full basis).

Timings on a shared machine measure the neighbours too: each section prints the load average,
and ``cpu_s`` (CPU seconds of the process and its children) is given beside the wall time.
``--quick`` is a smoke run (smaller N, fewer draws) that keeps every code path.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")  # four chains on two cores: no nested BLAS threads

import arviz as az
import numpy as np
import pymc as pm

from bayes_rvm.basis.kernels import KernelBasis
from bayes_rvm.datasets import make_sinc
from bayes_rvm.dims import BASIS, OBS
from bayes_rvm.evidence.gaussian import fit_mackay
from bayes_rvm.inference import sample_mcmc
from bayes_rvm.models.graphs import rvm_regression_model
from bayes_rvm.models.priors import halfcauchy_precision

#: The checkout this script belongs to (its package first on a child's path).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sinc_problem(n: int, seed: int = 0):
    """Normalised design (unit-norm columns) and targets (unit RMS) of the sinc problem."""
    X, y = make_sinc(n, random_state=seed)
    Phi = KernelBasis("rbf", gamma=1.0 / 9.0).fit(X).transform(X)
    Phi = Phi / np.linalg.norm(Phi, axis=0)
    return Phi, y / np.sqrt(np.mean(y**2))


def centred_joint_model(Phi, t) -> pm.Model:
    """The baseline first measured: centred weights, the same priors as the package's model."""
    N, M = Phi.shape
    with pm.Model(coords={OBS: np.arange(N), BASIS: np.arange(M)}) as model:
        Phi_data = pm.Data("Phi", Phi, dims=(OBS, BASIS))
        y_data = pm.Data("y_obs", t, dims=OBS)
        alpha = halfcauchy_precision("alpha", beta=1.0, dims=BASIS)
        sigma = pm.HalfNormal("sigma", 1.0)
        w = pm.Normal("w", 0.0, alpha**-0.5, dims=BASIS)
        pm.Normal("y", Phi_data @ w, sigma, observed=y_data, dims=OBS)
    return model


#: NUTS's target acceptance in every run but the extra joint one (PyMC's and nutpie's default).
TARGET_ACCEPT = 0.8


def _sample_quietly(model, **kwargs):
    """``sample_mcmc`` without progress bars or warnings: the table reports the diagnostics."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sample_mcmc(model, progressbar=False, warn=False, **kwargs)


def _cpu() -> float:
    # This process's threads (nutpie, numpyro) plus finished worker processes (PyMC's NUTS).
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _model_kernel(model):
    """The compiled marginal kernel of ``model`` and its data arguments (after the log alphas
    and log beta), or None for a model of another form."""
    from bayes_rvm.models.marginal.numba_kernels import (
        log_evidence_numba,
        lowrank_log_evidence_and_grad,
    )

    value = {
        k: np.asarray(model[k].get_value(), dtype=np.float64)
        for k in model.named_vars
        if k in ("Phi", "y_obs", "gram", "Phi_U", "Phi_VS")
    }
    if "gram" not in value and "Phi_U" not in value:
        return None
    Y = value["y_obs"].reshape(value["y_obs"].shape[0], -1)
    if "Phi_U" in value:
        return lowrank_log_evidence_and_grad, (value["Phi_U"], Y, value["Phi_VS"])
    return log_evidence_numba, (value["Phi"], Y, value["gram"])


def gradient_limit(model, gradients: int, chains: int) -> dict:
    """The physical limit of a run: ``gradients`` evaluations of the model's compiled log density
    and gradient (the O(M r^2) low-rank or O(M^3) dense kernel alone, timed here on one core, in
    this process), spread over ``min(chains, cores)`` cores; nothing else of NUTS counted."""
    found = _model_kernel(model)
    if found is None:
        return {}
    kernel, data = found
    M = data[-1].shape[0]
    la, lb = np.zeros(M), np.asarray(0.0)
    kernel(la, lb, *data)  # compiled or loaded from numba's cache before timing
    reps, spent = 0, 0.0
    c0 = time.process_time()
    while spent < 0.2:  # at least 0.2 CPU seconds of calls
        for _ in range(20):
            kernel(la, lb, *data)
        reps += 20
        spent = time.process_time() - c0
    kernel_ms = 1e3 * spent / reps
    cores = min(chains, os.cpu_count() or 1)
    return {
        "kernel_ms": kernel_ms,
        "gradients": gradients,
        "limit_s": gradients * kernel_ms / 1e3 / cores,
    }


def _gradients(dt) -> int:
    """Leapfrog steps (one gradient each) of every chain, warmup included where kept."""
    return sum(
        int(dt[g].dataset["n_steps"].sum())
        for g in ("sample_stats", "warmup_sample_stats")
        if g in dt.children
    )


def run_one(
    Phi, t, relevant, *, form, sampler, draws, tune, chains, seed, target_accept=TARGET_ACCEPT
):
    if form == "joint_centred":
        model = centred_joint_model(Phi, t)
    else:
        model = rvm_regression_model(Phi, t, form=form)
    c0 = _cpu()
    t0 = time.perf_counter()
    compile_s = 0.0
    if sampler == "nutpie":
        # Compile once outside the timed sampling call (sample_mcmc then hits its cache).
        from bayes_rvm.inference import sampling

        sampling._NUTPIE_CACHE.clear()
        key = sampling._nutpie_cache_key(model)
        from bayes_rvm.inference.nutpie_backend import compile_nutpie

        sampling._NUTPIE_CACHE[key] = compile_nutpie(model)
        compile_s = time.perf_counter() - t0
    compile_cpu = _cpu() - c0
    c1 = _cpu()
    nuts = {"target_accept": target_accept}
    if sampler == "numpyro":
        nuts["chain_method"] = "parallel"
    t1 = time.perf_counter()
    dt = _sample_quietly(
        model,
        draws=draws,
        tune=tune,
        chains=chains,
        sampler=sampler,
        random_seed=seed,
        nuts=nuts,
        **({"cores": 2} if sampler != "numpyro" else {}),
    )
    sample_s = time.perf_counter() - t1
    sample_cpu = _cpu() - c1
    post = dt["posterior"].dataset
    log_alpha = np.log(post["alpha"])
    ess_la = az.ess(log_alpha.to_dataset(name="la"), method="bulk")["la"].values
    ess_sigma = float(az.ess(post[["sigma"]], method="bulk")["sigma"])
    rhat = az.rhat(post[["sigma"]].assign(la=log_alpha))
    div = int(dt["sample_stats"].dataset["diverging"].sum())
    ess_hyper = min(ess_sigma, float(np.min(ess_la[relevant])))
    wall = compile_s + sample_s
    idle = compile_cpu + sample_cpu / min(chains, os.cpu_count() or 1)
    return {
        "form": form,
        "sampler": sampler,
        "accept": target_accept,
        "compile_s": compile_s,
        "sample_s": sample_s,
        "wall_s": wall,
        "ess_bulk": ess_hyper,
        "ess_all": min(ess_sigma, float(np.min(ess_la))),
        "ess/s": ess_hyper / wall,
        "ess/s_sampling": ess_hyper / sample_s,
        "cpu_s": compile_cpu + sample_cpu,
        "idle_s": idle,
        "ess/s_idle": ess_hyper / idle,
        "div": div,
        "rhat": float(max(rhat["sigma"].max(), rhat["la"].max())),
        "sigma_mean": float(post["sigma"].mean()),
    }


def _hyper_diagnostics(dt) -> dict:
    diag = json.loads(dt.attrs["diagnostics"])
    return {
        "div": diag["divergences"],
        "rhat": diag["max_rhat"],
        "ess_bulk": diag["min_ess_bulk"],
    }


def _sinc_xy(n: int, seed: int = 0):
    return make_sinc(n, random_state=seed)


def _rvr_kwargs(gamma: str | None) -> dict:
    # --gamma: the estimator's default ("scale", a wide kernel on sinc) or another width.
    if gamma is None:
        return {}
    return {"gamma": gamma if gamma in ("scale", "auto") else float(gamma)}


#: The phases of an estimator's MCMC fit that the fresh section times: (phase, module or
#: ``module:Class``, attribute). The type-II fit is the width search's where the width is
#: chosen by the evidence (the default) and ``fit_problem`` at a given width.
PHASES = [
    ("type2", "bayes_rvm.estimators.regressor", "fit_problem"),
    ("type2", "bayes_rvm.estimators.base:BaseRVM", "_select_width"),
    ("model", "bayes_rvm.estimators.regressor:RVR", "make_model"),
    ("compile", "bayes_rvm.inference.nutpie_backend", "compile_nutpie"),
    ("initial_points", "bayes_rvm.inference.nutpie_backend", "with_initial_points"),
    ("sampling", "nutpie", "sample"),
    ("datatree", "pymc.backends.arviz", "patch_nutpie_idata"),
    ("complete", "bayes_rvm.inference.sampling", "complete_posterior"),
    ("diagnose", "bayes_rvm.inference.sampling", "diagnose"),
]


def _patch_phases(spent: dict) -> None:
    """Wrap each phase's function so that its wall time adds up in ``spent[phase]`` (a call
    inside another of the same phase, e.g. a type-II fit inside the width search, counted once).
    """
    active: set[str] = set()
    for phase, where, attr in PHASES:
        module, _, cls = where.partition(":")
        owner = importlib.import_module(module)
        if cls:
            owner = getattr(owner, cls)
        fn = getattr(owner, attr)

        def timed(*args, _fn=fn, _phase=phase, **kwargs):
            if _phase in active:
                return _fn(*args, **kwargs)
            active.add(_phase)
            t = time.perf_counter()
            try:
                out = _fn(*args, **kwargs)
                if _phase == "sampling":  # its warmup is still there: every gradient counted
                    spent["gradients"] = _gradients(out)
                return out
            finally:
                spent[_phase] = spent.get(_phase, 0.0) + time.perf_counter() - t
                active.discard(_phase)

        setattr(owner, attr, timed)


def child_fresh(n: int, gamma: str | None = None) -> None:
    """Run in a fresh process: the estimator's first and second MCMC fit, printed as JSON.

    ``import_s`` is only what is left to import after this script's own imports (PyMC, ArviZ);
    ``launch_to_first_fit_s`` is the whole of it, from the interpreter's start. Each fit's time
    is split into the phases of :data:`PHASES` (``other``: the rest, e.g. validation, the
    kernel matrix, the in-process compile cache, xarray bookkeeping).
    """
    t0 = time.perf_counter()
    import nutpie  # noqa: F401  (imported by the first fit; timed as an import here)

    from bayes_rvm.estimators.regressor import RVR

    t_import = time.perf_counter() - t0
    fits = [{}, {}]
    current: dict = {}
    _patch_phases(current)
    out = {"import_s": t_import}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k, seed in enumerate((0, 1)):
            X, y = _sinc_xy(n, seed=seed)
            current.clear()
            c = _cpu()
            t = time.perf_counter()
            est = RVR(inference="mcmc", random_state=seed, **_rvr_kwargs(gamma)).fit(X, y)
            wall = time.perf_counter() - t
            if k == 0:
                launched = float(os.environ.get("BENCH_LAUNCHED", "nan"))
                out["launch_to_first_fit_s"] = time.time() - launched
            fits[k] = {"wall_s": wall, "cpu_s": _cpu() - c, **current}
            gradients = current.pop("gradients", 0)
            fits[k]["other"] = wall - sum(current.values())
            fits[k].update(gradient_limit(est.model_, gradients, est._cfg.chains))
            fits[k]["wall/limit"] = wall / fits[k]["limit_s"] if "limit_s" in fits[k] else None
            fits[k].update(_hyper_diagnostics(est.idata_))
    out["fits"] = fits
    out["absent"] = [name for name in OPTIONAL_EXTRAS if importlib.util.find_spec(name) is None]
    out["load"] = os.getloadavg()[0]
    cfg = est._cfg
    out["settings"] = {"draws": cfg.draws, "tune": cfg.tune, "chains": cfg.chains}
    print("RESULT " + json.dumps(out), flush=True)


#: The targets for the fresh section: (label, key, bound, kind).
FRESH_TARGETS = [
    ("first fit, fresh process (s)", "wall_s", 2.0, "<"),
    ("second fit, same process (s)", "wall_s", 2.0, "<"),
    ("divergences", "div", 0, "<="),
    ("max R-hat (log alpha, sigma)", "rhat", 1.01, "<="),
    ("min bulk ESS (log alpha, sigma)", "ess_bulk", 400, ">="),
]
#: The targets for the scale section: N = 1000 on the full basis.
SCALE_TARGETS = [
    ("N=1000 full basis, wall (s)", "wall_s", 10.0, "<"),
    ("divergences", "div", 0, "<="),
    ("max R-hat (log alpha, sigma)", "rhat", 1.01, "<="),
]


def _verdicts(targets, measured: list[dict], extra=lambda key: "") -> None:
    for (label, key, bound, kind), fit in zip(targets, measured, strict=True):
        value = fit[key]
        ok = {"<": value < bound, "<=": value <= bound, ">=": value >= bound}[kind]
        verdict = "met" if ok else "NOT met"
        print(f"  {label:<34} {kind} {bound:<6g} measured {value:<9.4g} {verdict}{extra(key)}")


#: Packages of the optional extras whose presence changes a first fit's time: where dask is
#: importable, xarray imports ``dask.array`` at the first array of a process (0.4-0.7 s).
OPTIONAL_EXTRAS = ("dask", "jax")


def section_fresh(a) -> list[dict]:
    # Twice: the first process after a change of the package or its stack fills the on-disk
    # compile cache, the second shows what every later process pays.
    # With --child-python, two more processes run on that interpreter (a plain install: see
    # the module docstring), the first of them filling its own numba cache.
    n = 30 if a.quick else 100
    rows = []
    results = []
    runs = [(1, None), (2, None)]
    if a.child_python:
        runs += [(3, a.child_python), (4, a.child_python)]
    for run, python in runs:
        # launch_to_first_fit_s: from starting the interpreter to the end of the first fit.
        env = dict(os.environ, BENCH_LAUNCHED=repr(time.time()))
        # the checkout's package on either interpreter; this one's site-packages only on its own
        path = [ROOT] if python else sys.path
        env["PYTHONPATH"] = os.pathsep.join(path)
        gamma = [] if a.gamma is None else ["--gamma", a.gamma]
        res, wall = _run_child(["--child-fresh", str(n), *gamma], env, python)
        if "error" in res:
            rows.append({"case": f"fresh N={n}", "error": res["error"]})
            continue
        results.append((run, python, res))
        for k, fit in enumerate(res["fits"]):
            where = ", --child-python" if python else ""
            row = {"case": f"process {run}{where}, {('first', 'second')[k]} fit, sinc N={n}"}
            if k == 0:
                row["launch_s"] = res["launch_to_first_fit_s"]
                row["import_s"] = res["import_s"]
            row.update(fit)
            rows.append(row)
        rows[-1]["process_wall_s"] = wall
    for run, python, res in results:
        if run in (2, 4):
            _print_targets(n, a, res, run, python)
    return rows


def _print_targets(n: int, a, res: dict, run: int, python: str | None) -> None:
    """The targets beside a process's figures (the on-disk cache warm)."""
    first, second = res["fits"]
    measured = [first, second, first, first, first]
    on = f"on {python}, without {', '.join(res['absent'])}" if python else "on this interpreter"
    print(
        f"\n== targets: RVR(inference='mcmc') defaults {res['settings']} on sinc N={n}, all "
        f"{n + 1} basis functions, gamma={a.gamma or 'default'}; process {run}, {on} "
        f"(load average {res['load']:.1f} at its end, {os.cpu_count()} cores)"
    )

    def extra(key):
        return f"  (second fit: {second[key]:.4g})" if key in ("div", "rhat", "ess_bulk") else ""

    _verdicts(FRESH_TARGETS, measured, extra)
    for name, fit in (("first", first), ("second", second)):
        if "limit_s" in fit:
            print(
                f"  {name} fit against the gradient limit: {fit['gradients']} gradients x "
                f"{fit['kernel_ms']:.4f} ms (kernel alone, one core) / cores = "
                f"{fit['limit_s']:.3f} s; wall {fit['wall_s']:.3f} s = {fit['wall/limit']:.2f}x, "
                f"sampling {fit['sampling']:.3f} s = {fit['sampling'] / fit['limit_s']:.2f}x, "
                f"cpu {fit['cpu_s']:.3f} s"
            )


def _scale_row(n, draws, tune, chains, marginal, seed) -> dict:
    from bayes_rvm.inference import type2_initvals

    Phi, t = sinc_problem(n)
    fit = fit_mackay(Phi, t)
    model = rvm_regression_model(Phi, t, marginal=marginal)
    c0 = _cpu()
    t0 = time.perf_counter()
    dt = _sample_quietly(
        model,
        draws=draws,
        tune=tune,
        chains=chains,
        random_seed=seed,
        initvals=type2_initvals(fit),
        keep_warmup=True,  # its gradients are counted
    )
    wall = time.perf_counter() - t0
    cpu = _cpu() - c0
    steps = _gradients(dt)
    sample_s = float(dt.attrs["wall_time"])
    row = {
        "case": f"sinc N={n} M={n + 1} {model.rvm_spec.marginal}",
        "rank": int(model["Phi_U"].get_value().shape[1]) if "Phi_U" in model.named_vars else n + 1,
        "draws": f"{chains}x{draws}",
        "tune": tune,
        "wall_s": wall,
        "cpu_s": cpu,
        "sample_s": sample_s,
        "grad_ms": 1e3 * sample_s / max(steps, 1),
    }
    row.update(gradient_limit(model, steps, chains))
    row["wall/limit"] = wall / row["limit_s"]
    row.update(_hyper_diagnostics(dt))
    row["load"] = os.getloadavg()[0]
    return row


def section_scale(a) -> list[dict]:
    if a.quick:
        cases = [(100, 200, 200, 2, "auto"), (300, 200, 200, 2, "auto"), (100, 50, 50, 2, "dense")]
    else:
        cases = [(300, 1000, 1000, 4, "auto"), (1000, 1000, 1000, 4, "auto")]
        cases.append((300, 100, 100, 4, "dense"))
    rows = [_scale_row(*c, seed=a.seed) for c in cases]
    dense = rows[-1]
    n_dense = dense["case"].split(" M=")[0]
    low = [r for r in rows if r["case"].startswith(n_dense + " ") and "lowrank" in r["case"]]
    if low:
        dense["grad_ratio"] = dense["grad_ms"] / low[0]["grad_ms"]
    big = [r for r in rows if r["case"].startswith("sinc N=1000 ")]
    if big:
        row = big[0]
        print(
            f"\n== targets: {row['case']} rank {row['rank']}, {row['draws']} draws after "
            f"{row['tune']} tuning steps (load average {row['load']:.1f} at its end, "
            f"{os.cpu_count()} cores)"
        )
        _verdicts(SCALE_TARGETS, [row] * len(SCALE_TARGETS))
        print(
            f"  against the gradient limit: {row['gradients']} gradients x {row['kernel_ms']:.4f}"
            f" ms (kernel alone, one core) / cores = {row['limit_s']:.3f} s; wall "
            f"{row['wall_s']:.3f} s = {row['wall/limit']:.2f}x, sampling {row['sample_s']:.3f} s"
            f" = {row['sample_s'] / row['limit_s']:.2f}x, cpu {row['cpu_s']:.3f} s"
        )
        # What a user runs: the estimator with its defaults (300 tuning steps), the full basis.
        user = _estimator_row(1000, seed=a.seed)
        rows.append(user)
        print(
            f"\n== targets: {user['case']} (load average {user['load']:.1f} at its end; the"
            " estimator's compile, type-II start, completion and diagnostics included)"
        )
        _verdicts(SCALE_TARGETS, [user] * len(SCALE_TARGETS))
    return rows


def _estimator_row(n: int, seed: int) -> dict:
    from bayes_rvm.estimators.regressor import RVR

    X, y = _sinc_xy(n)
    c0 = _cpu()
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = RVR(
            gamma=1.0 / 9.0,
            inference="mcmc",
            sampler_config={"mcmc_basis": "all"},
            random_state=seed,
        )
        est.fit(X, y)
    row = {
        "case": f"RVR(inference='mcmc', sampler_config={{'mcmc_basis': 'all'}}), sinc N={n}",
        "wall_s": time.perf_counter() - t0,
        "cpu_s": _cpu() - c0,
    }
    row.update(_hyper_diagnostics(est.idata_))
    row["load"] = os.getloadavg()[0]
    return row


def section_multi(a) -> list[dict]:
    from bayes_rvm.estimators.regressor import RVR

    n = 40 if a.quick else 80
    X, y = _sinc_xy(n, seed=2)
    rng = np.random.default_rng(3)
    Y = np.column_stack([y, 0.5 * y + 0.3 * np.cos(X[:, 0]) + 0.05 * rng.normal(size=n)])
    kw = {"sampler_config": {"draws": 200, "tune": 200, "chains": 2}} if a.quick else {}
    c0 = _cpu()
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = RVR(inference="mcmc", random_state=0, **kw, **_rvr_kwargs(a.gamma)).fit(X, Y)
    row = {
        "case": f"2 outputs, N={n}",
        "gamma": a.gamma,
        "wall_s": time.perf_counter() - t0,
        "cpu_s": _cpu() - c0,
    }
    row.update(_hyper_diagnostics(est.idata_))
    return [row]


def section_samplers(a) -> list[dict]:
    n = 40 if a.quick else 100
    draws, chains = (100, 2) if a.quick else (1000, 4)
    Phi, t = sinc_problem(n)
    rows = []
    for sampler in ("nutpie", "numpyro", "pymc"):
        model = rvm_regression_model(Phi, t)
        nuts = {"chain_method": "parallel"} if sampler == "numpyro" else None
        c0 = _cpu()
        t0 = time.perf_counter()
        try:
            dt = _sample_quietly(
                model,
                sampler=sampler,
                draws=draws,
                tune=draws,
                chains=chains,
                random_seed=a.seed,
                nuts=nuts,
                **({"cores": 2} if sampler != "numpyro" else {}),
            )
        except Exception as exc:
            rows.append({"case": f"{sampler}, N={n}", "error": f"{type(exc).__name__}: {exc}"})
            continue
        row = {
            "case": f"{sampler}, N={n} {model.rvm_spec.marginal}",
            "draws": f"{chains}x{draws}",
            "wall_s": time.perf_counter() - t0,
            "cpu_s": _cpu() - c0,
        }
        row.update(_hyper_diagnostics(dt))
        row["ess/s"] = row["ess_bulk"] / row["wall_s"]
        if sampler == "numpyro":
            import jax

            row["device"] = str(jax.devices()[0].platform)
        rows.append(row)
    return rows


def section_forms(a) -> list[dict]:
    Phi, t = sinc_problem(a.n)
    relevant = fit_mackay(Phi, t).active
    runs = [(f, s, TARGET_ACCEPT) for f in a.forms.split(",") for s in a.samplers.split(",")]
    if a.joint_target_accept and "joint" in a.forms.split(","):
        runs.append(("joint", "nutpie", a.joint_target_accept))
    runs += [("joint_centred", s, TARGET_ACCEPT) for s in a.centred_samplers.split(",") if s]
    rows = []
    for form, sampler, accept in runs:
        try:
            row = run_one(
                Phi,
                t,
                relevant,
                form=form,
                sampler=sampler,
                draws=a.draws,
                tune=a.tune,
                chains=a.chains,
                seed=a.seed,
                target_accept=accept,
            )
        except Exception as exc:
            msg = f"{type(exc).__name__}: {exc}"[:80]
            row = {"form": form, "sampler": sampler, "accept": accept, "error": msg}
        rows.append(row)
    print(_table(rows))
    return []


#: The targets for the large section.
LARGE_TARGETS = {"wall_s": 180.0, "peak_gb": 8.0, "rhat": 1.01}

# One fit in a fresh process (its own ru_maxrss): the call, then the type-II fit of the
# same basis for the sanity ratio of the posterior mean prediction.
_LARGE_CHILD = """
import json, os, resource, sys, time, warnings
import numpy as np
from bayes_rvm import RVR
from bayes_rvm.inference.diagnostics import ess_bulk, ess_folded, ess_tail, rhat_parts
n, basis, gamma, seed = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
thin = sys.argv[5] if sys.argv[5] == 'auto' else int(sys.argv[5])
rng = np.random.default_rng(seed)
X = rng.uniform(-5, 5, (n, 2))
f = lambda X: np.sinc(X[:, 0] / np.pi) * np.cos(X[:, 1] / 2)
y = f(X) + 0.1 * rng.standard_normal(n)
X_test = rng.uniform(-5, 5, (2000, 2))
kw = dict(centres=('random', 200), random_state=0, chunk_rows=65536)
if gamma != 'default':
    kw['gamma'] = float(gamma)
load0, t, c = os.getloadavg()[0], time.perf_counter(), time.process_time()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    config = dict(draws=500, chains=2, mcmc_basis=basis)
    est = RVR(inference='mcmc', sampler_config=config, **kw)
    est.fit(X, y, progressbar=False, thin=thin)
wall, cpu = time.perf_counter() - t, time.process_time() - c
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
d = json.loads(est.idata_.attrs['diagnostics'])
warned = any('R-hat' in str(w.message) for w in caught)
post = est.idata_['posterior']
la = np.log(post['alpha']).transpose('basis', 'chain', 'draw').values
gap = float(np.abs(la[:, 0].mean(-1) - la[:, 1].mean(-1)).max()) / np.log(10)
x = np.concatenate([la, post['sigma'].values[None]])
per_draw = x.shape[1] * x.shape[2]
parts = rhat_parts(x)
mean = est.predict(X_test)
type2 = RVR(**kw).fit(X, y).predict(X_test)
rmse = lambda p: float(np.sqrt(np.mean((p - f(X_test)) ** 2)))
print('RESULT ' + json.dumps({'wall_s': wall, 'cpu_s': cpu, 'peak_gb': peak,
    'load': (load0 + os.getloadavg()[0]) / 2, 'sampled': len(est._mcmc_columns()),
    'thin': json.loads(est.idata_.attrs['settings'])['thin'],
    'sampling_s': float(est.idata_.attrs['wall_time']),
    'rhat': d['max_rhat'], 'rhat_bulk': d['max_rhat_bulk'], 'rhat_folded': d['max_rhat_folded'],
    'folded_binds': float(np.mean(parts[:, 1] > parts[:, 0])),
    'ess_bulk': d['min_ess_bulk'], 'bulk/draw': float(np.median(ess_bulk(x))) / per_draw,
    'folded/draw': float(np.median(ess_folded(x))) / per_draw,
    'tail/draw': float(np.median(ess_tail(x))) / per_draw,
    'rhat_w': d['max_rhat_w'], 'div': d['divergences'], 'rhat_warned': warned,
    'chain_gap': gap, 'rmse_ratio': rmse(mean) / rmse(type2),
    'rel_diff': float(np.sqrt(np.mean((mean - type2) ** 2) / np.mean(type2 ** 2))),
    'statistics': bool(est._fitted_on_statistics)}))
"""


def section_large(a) -> list[dict]:
    """``RVR(inference="mcmc", centres=("random", 200))``, 2 chains x 500 draws, on N
    rows of a 2-D sinc from sufficient statistics (``chunk_rows=65536``), each fit in a fresh
    process: wall and CPU time, peak memory, the load average, max R-hat (``log alpha``,
    ``sigma``; ``rhat_w`` over the weights) with its bulk and folded halves apart
    (``folded_binds``: the fraction of parameters whose folded R-hat is the larger), min bulk
    ESS, the median bulk, folded and tail ESS per kept draw, divergences and whether the R-hat
    warning fired, against the targets (:data:`LARGE_TARGETS`); ``thin`` is the
    sampler's thinning (``"auto"``: 4 on this path), ``sampling_s`` the sampler's wall time
    alone; ``rmse_ratio`` is the test RMSE (against the noiseless function) of the posterior
    mean over the type-II fit's, ``rel_diff`` their RMS difference relative to the type-II
    prediction, ``chain_gap`` the largest difference between the two chains' means of
    ``log10 alpha`` over the sampled columns (chains at different modes). Rows: the call
    (``mcmc_basis="auto"``: the relevance vectors on this path) on the data sets
    ``--large-seeds`` (one run of a maximum of about 45 R-hats is one draw of a noisy number),
    at the default thinning and unthinned (``thin=1``), every basis function (``"all"``), and
    the call at a narrower kernel (``gamma=0.5``; the default rule picks about 0.12 here)."""
    n = 20_000 if a.quick else a.large_n
    seeds = [int(s) for s in a.large_seeds.split(",")]
    cases = [("auto", "default", s, "auto") for s in seeds]
    cases += [("auto", "default", s, "1") for s in seeds]
    cases += [("all", "default", 0, "auto"), ("auto", "0.5", 0, "auto")]
    rows = []
    for basis, gamma, seed, thin in cases:
        proc = subprocess.run(
            [sys.executable, "-c", _LARGE_CHILD, str(n), basis, gamma, str(seed), thin],
            capture_output=True,
            text=True,
            check=False,
        )
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        row = {"case": f"N={n} mcmc_basis={basis} gamma={gamma} seed={seed} thin={thin}"}
        row.update(json.loads(lines[-1][7:]) if lines else {"error": proc.stderr[-300:]})
        rows.append(row)
    targets = ", ".join(
        f"{k} {'<=' if k == 'rhat' else '<'} {v:g}" for k, v in LARGE_TARGETS.items()
    )
    print(f"\nlarge: the targets: {targets}")
    for row in rows:
        if "error" not in row:
            met = [row[k] <= v for k, v in LARGE_TARGETS.items()]
            print(
                f"  {row['case']}: "
                + ", ".join(
                    f"{k}={row[k]:.4g} ({'met' if ok else 'NOT met'})"
                    for (k, _), ok in zip(LARGE_TARGETS.items(), met, strict=True)
                )
            )
    return rows


def _null_row(label: str, x_runs, steps: float, wall: float, cpu: float) -> dict:
    """Max rank R-hat over the parameters of each run of a target whose chains all agree."""
    from bayes_rvm.inference.diagnostics import ess_bulk, ess_folded, rhat_parts

    top, bulk, folded, eb, ef = [], [], [], [], []
    for x in x_runs:
        parts = rhat_parts(x)
        top.append(parts.max())
        bulk.append(parts[:, 0].max())
        folded.append(parts[:, 1].max())
        n = x.shape[1] * x.shape[2]
        eb.append(np.median(ess_bulk(x)) / n)
        ef.append(np.median(ess_folded(x)) / n)
    top = np.asarray(top)
    return {
        "draws": label,
        "runs": len(top),
        "max_rhat_median": float(np.median(top)),
        "max_rhat_q95": float(np.quantile(top, 0.95)),
        "P(max<=1.01)": float(np.mean(top <= 1.01)),
        "bulk_max_median": float(np.median(bulk)),
        "folded_max_median": float(np.median(folded)),
        "bulk/draw": float(np.mean(eb)),
        "folded/draw": float(np.mean(ef)),
        "grad/kept": steps,
        "wall_s": wall,
        "cpu_s": cpu,
    }


def section_rhat(a) -> list[dict]:
    """The null distribution of the max rank R-hat of the ``large`` section's size:
    ``--null-dim`` (45) parameters, 2 chains x 500 kept draws, on a target where the chains
    cannot disagree (an iid standard Gaussian), ``--null-runs`` runs each (ten times as many of
    independent draws, from numpy), and NUTS (nutpie's defaults, 300 tuning steps) keeping every
    draw and every 2nd, 3rd, 4th and 8th (:func:`bayes_rvm.inference.sampling.thinned`).
    ``bulk/draw``
    and ``folded/draw`` are the median ESS per kept draw of the rank-normalised values and of
    their distance from the median, the quantities the two halves of the R-hat read;
    ``grad/kept`` the leapfrog steps per kept draw. NUTS is antithetic in the values (bulk ESS
    above 1 per draw) and positively correlated in their spread (folded about 0.4 per draw), so
    the folded R-hat sets the max."""
    import nutpie

    from bayes_rvm.inference.sampling import thinned

    K, runs = a.null_dim, a.null_runs
    rng = np.random.default_rng(0)
    c, t = _cpu(), time.perf_counter()
    iid = [rng.standard_normal((K, 2, 500)) for _ in range(10 * runs)]  # cheap: 10x the runs
    rows = [_null_row("iid", iid, float("nan"), time.perf_counter() - t, _cpu() - c)]
    with pm.Model() as model:
        pm.Normal("x", 0.0, 1.0, shape=K)
    compiled = nutpie.compile_pymc_model(model, backend="numba")
    for thin in (1, 2, 3, 4, 8):
        c, t = _cpu(), time.perf_counter()
        xs, steps = [], 0.0
        for r in range(runs):
            dt = nutpie.sample(
                compiled, draws=500 * thin, tune=300, chains=2, cores=2, seed=r, progress_bar=False
            )
            steps += float(dt["sample_stats"]["n_steps"].sum()) / (2 * 500 * runs)
            post = thinned(dt, thin)["posterior"]["x"]
            xs.append(post.transpose("x_dim_0", "chain", "draw").values)
        rows.append(_null_row(f"NUTS thin={thin}", xs, steps, time.perf_counter() - t, _cpu() - c))
    print(f"\nrhat: K={K} iid-Gaussian parameters, 2 chains x 500 kept draws, {runs} runs")
    return rows


# One data set in a fresh process: the estimator's fit, then its model sampled again from the same
# start (the estimator's: the type-II fit, capped as RVR caps it) at --replicates sampler seeds,
# unthinned and at the default thinning; then one long run (8 x 2000 draws).
_REPLICATE_CHILD = """
import json, os, sys, time, warnings
import numpy as np
from bayes_rvm import RVR
from bayes_rvm.inference import sample_mcmc, type2_initvals
from bayes_rvm.inference.sampling import STATISTICS_THIN
n, seed, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(seed)
X = rng.uniform(-5, 5, (n, 2))
y = np.sinc(X[:, 0] / np.pi) * np.cos(X[:, 1] / 2) + 0.1 * rng.standard_normal(n)
kw = dict(centres=('random', 200), random_state=0, chunk_rows=65536)
with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    est = RVR(inference='mcmc', sampler_config=dict(draws=500, chains=2), **kw)
    est.fit(X, y, progressbar=False)
    init = type2_initvals(est.fit_, basis=est.active_, factor=n, alpha_max=1e6)
    out = {'sampled': int(est.active_.size), 'runs': []}
    t, c = time.perf_counter(), time.process_time()
    for thin in (1, STATISTICS_THIN):
        for r in range(reps):
            dt = sample_mcmc(est.model_, draws=500, tune=est._cfg.tune, chains=2, thin=thin,
                random_seed=100 + r, initvals=init, warn=False, progressbar=False)
            d = json.loads(dt.attrs['diagnostics'])
            out['runs'].append([thin, d['max_rhat'], d['max_rhat_bulk'], d['max_rhat_folded']])
    out['wall_s'], out['cpu_s'] = time.perf_counter() - t, time.process_time() - c
    dt = sample_mcmc(est.model_, draws=2000, tune=est._cfg.tune, chains=8, thin=1, random_seed=7,
        initvals=init, warn=False, progressbar=False)
d = json.loads(dt.attrs['diagnostics'])
la = np.log10(dt['posterior']['alpha']).mean('draw').values
out['long'] = {'rhat': d['max_rhat'], 'ess_bulk': d['min_ess_bulk'],
    'chain_gap': float((la.max(0) - la.min(0)).max())}
out['load'] = os.getloadavg()[0]
print('RESULT ' + json.dumps(out))
"""


def section_replicates(a) -> list[dict]:
    """How often the call meets R-hat <= 1.01: each data set of ``--large-seeds`` fitted
    once (in a fresh process with one BLAS thread), its model sampled again at ``--replicates``
    sampler seeds, 2 x 500 kept draws, unthinned and at the default thinning, from the
    estimator's start; per thinning, the max R-hat's median and 95th percentile over all runs,
    the fraction <= 1.01 and how often the folded half binds (against the ``rhat`` section's
    null for independent draws); and per data set a long run (8 chains x 2000 draws, unthinned):
    its max R-hat, min bulk ESS and ``chain_gap`` (the widest spread of the 8 chains' means of
    ``log10 alpha``): a column with two states shows there."""
    n = 20_000 if a.quick else a.large_n
    runs, rows = [], []
    for seed in [int(s) for s in a.large_seeds.split(",")]:
        cmd = [sys.executable, "-c", _REPLICATE_CHILD, str(n), str(seed), str(a.replicates)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if not lines:
            rows.append({"case": f"seed={seed}", "error": proc.stderr[-300:]})
            continue
        res = json.loads(lines[-1][7:])
        runs += res["runs"]
        long = {f"long_{k}": v for k, v in res["long"].items()}
        rows.append({"case": f"seed={seed} long 8x2000", "sampled": res["sampled"], **long})
        rows[-1].update(replicates_wall_s=res["wall_s"], cpu_s=res["cpu_s"], load=res["load"])
    r = np.asarray(runs, dtype=float).reshape(-1, 4)
    for thin in np.unique(r[:, 0]):
        top = r[r[:, 0] == thin]
        rows.append(
            {
                "case": f"thin={int(thin)}: {len(top)} runs of 2x500",
                "max_rhat_median": float(np.median(top[:, 1])),
                "max_rhat_q95": float(np.quantile(top[:, 1], 0.95)),
                "P(max<=1.01)": float(np.mean(top[:, 1] <= 1.01)),
                "folded_binds": float(np.mean(top[:, 3] > top[:, 2])),
            }
        )
    return rows


#: The fits of the compile section's families: (label, estimator kwargs, make_model form).
COMPILE_FAMILIES = {
    "rvr": ({}, None),
    "joint": ({}, "joint"),
    "student_t": ({"likelihood": "student_t"}, None),
    "rvc": ({}, None),
    "poisson": ({"likelihood": "poisson"}, None),
}


def _run_child(args: list[str], env: dict, python: str | None = None) -> tuple[dict, float]:
    """This script run again in a fresh process with ``args`` (by ``python``, default this
    interpreter): the JSON of its last ``RESULT`` line (or ``{"error": ...}``) and the process's
    wall time."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [python or sys.executable, __file__, *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    wall = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        return {"error": (proc.stderr or proc.stdout)[-300:]}, wall
    return json.loads(lines[-1][7:]), wall


def _count_files(folder: str) -> int:
    return sum(len(files) for _, _, files in os.walk(folder))


def child_compile(n: int, family: str, draws: str) -> None:
    """Run in a fresh process on the compile caches of its environment: one MCMC fit on sinc
    (labels ``y > 0.2`` for ``rvc``, Poisson counts for ``poisson``), printed as JSON."""
    import logging

    t0 = time.perf_counter()
    import nutpie  # noqa: F401

    from bayes_rvm import RVC, RVR
    from bayes_rvm.inference import nutpie_backend

    t_import = time.perf_counter() - t0
    announced = []
    # (None in a checkout from before the announcement: then only compile_s and files tell.)
    message = getattr(nutpie_backend, "COMPILING_MESSAGE", None)

    class Listen(logging.Handler):
        def emit(self, record):
            if record.getMessage() == message:
                announced.append(time.perf_counter())

    logging.getLogger("pymc").addHandler(Listen())
    spent: dict = {}
    _patch_phases(spent)
    options = (
        {}
        if draws == "default"
        else dict(zip(("draws", "tune", "chains"), map(int, draws.split(",")), strict=True))
    )
    kwargs, form = COMPILE_FAMILIES[family]
    X, y = _sinc_xy(n, seed=n)
    if family == "rvc":
        y = (y > 0.2).astype(int)
    elif family == "poisson":
        y = np.random.default_rng(n).poisson(np.exp(1.0 + y))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        if form is None:
            cls = RVC if family == "rvc" else RVR
            config = options or None
            cls(inference="mcmc", random_state=0, sampler_config=config, **kwargs).fit(X, y)
        else:  # the joint form: the estimator's model in that form, sampled as it would be
            est = RVR(**kwargs).fit(X, y)
            _sample_quietly(est.make_model(form=form), random_seed=0, **options)
        wall = time.perf_counter() - t
    out = {
        "import_s": t_import,
        "fit_s": wall,
        "compile_s": spent.get("compile", 0.0),
        "sampling_s": spent.get("sampling", 0.0),
        "announced": bool(announced),
        # from the start of the fit to the announcement (what a cold fit shows first)
        "said_at_s": announced[0] - t if announced else None,
        "load": os.getloadavg()[0],
    }
    print("RESULT " + json.dumps(out), flush=True)


def _compile_run(folder: str, n: int, family: str, draws: str) -> dict:
    """One fresh process fitting ``family`` at ``n`` on the compile caches under ``folder``."""
    pt_dir, nb_dir = os.path.join(folder, "pytensor"), os.path.join(folder, "numba")
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(sys.path),
        PYTENSOR_FLAGS=f"base_compiledir={pt_dir}",
        NUMBA_CACHE_DIR=nb_dir,
    )
    before = _count_files(pt_dir) + _count_files(nb_dir)
    args = ["--child-compile", str(n), "--compile-family", family, "--compile-draws", draws]
    res, wall = _run_child(args, env)
    if "error" in res:
        return res
    res["files_added"] = _count_files(pt_dir) + _count_files(nb_dir) - before
    res["process_s"] = wall
    return res


def section_compile(a) -> list[dict]:
    """Cold caches, new shapes on warm caches, a shape seen: does the sampler compile?"""
    import tempfile

    sizes = (30, 37, 44) if a.quick else (100, 173, 250)
    runs = {
        "rvr": [
            (sizes[0], "cold"),
            (sizes[1], "new shape"),
            (sizes[2], "new shape"),
            (sizes[1], "same shape"),
        ]
    }
    for family in a.compile_families.split(","):
        if family and family != "rvr":
            runs[family] = [(sizes[0], "cold"), (41 if a.quick else 137, "new shape")]
    cols = ["family", "case", "N", "compile_s", "announced", "said_at_s", "files_added", "fit_s"]
    cols += ["sampling_s", "import_s", "process_s", "load"]
    rows = []
    print(f"\n== compile: fresh processes, sampler {a.compile_draws} (draws,tune,chains)")
    print("  " + "  ".join(f"{c:>11}" for c in cols), flush=True)
    for family, plan in runs.items():
        with tempfile.TemporaryDirectory(prefix=f"bench_compile_{family}_") as folder:
            for n, label in plan:
                row = {"family": family, "case": label, "N": n}
                row |= _compile_run(folder, n, family, a.compile_draws)
                rows.append(row)
                if "error" in row:
                    print(f"  {family} {label} N={n}: ERROR {row['error']}", flush=True)
                    continue
                cells = [row.get(c) for c in cols]
                print(
                    "  "
                    + "  ".join(
                        f"{v:>11.3g}" if isinstance(v, float) else f"{v!s:>11}" for v in cells
                    ),
                    flush=True,
                )
    return []


#: The cases of the ``pymc`` section: (label, what is fitted, N (None: the data's own)).
PYMC_CASES = {
    "cold": ("sinc", 100),
    "new shape": ("sinc", 173),
    "warm first": ("sinc", 100),
    "N=1000 full basis": ("full", 1000),
    "Ripley RVC": ("ripley", None),
    "Poisson (README)": ("poisson", 100),
}
PYMC_SAMPLERS = ("package", "pm.sample nutpie", "pm.sample pymc")


def _pymc_estimator(kind: str, n: int | None, quick: bool):
    """The estimator (MCMC) and data of a case of the ``pymc`` section."""
    from bayes_rvm import RVC, RVR
    from bayes_rvm.datasets import load_ripley

    config = {"draws": 100, "tune": 100, "chains": 2} if quick else {}
    if kind == "ripley":
        X, y, _, _ = load_ripley()
        if quick:
            X, y = X[::4], y[::4]
        return RVC(inference="mcmc", sampler_config=config or None, random_state=0), X, y
    X, y = make_sinc(n, noise=0.1, random_state=0)
    if kind == "poisson":
        y = np.random.default_rng(0).poisson(np.exp(1 + np.sin(X[:, 0])))
        kw = {"likelihood": "poisson"}
    elif kind == "full":
        kw = {"gamma": 1.0 / 9.0, "sampler_config": {"mcmc_basis": "all", **config}}
        config = {}
    else:
        kw = {}
    if config:
        kw["sampler_config"] = config
    return RVR(inference="mcmc", random_state=0, **kw), X, y


def child_pymc(kind: str, n: int, sampler: str, quick: bool) -> None:
    """Run in a fresh process: one case of the ``pymc`` section, printed as JSON."""
    from bayes_rvm.inference import diagnose

    est, X, y = _pymc_estimator(kind, n or None, quick)
    c0 = _cpu()
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if sampler == "package":
            est.fit(X, y)
            dt, sample_s = est.idata_, float(est.idata_.attrs.get("wall_time", float("nan")))
        else:
            cfg = est._cfg
            est.set_params(inference="type2").fit(X, y)
            model = est.make_model()
            t1 = time.perf_counter()
            dt = pm.sample(
                draws=cfg.draws,
                tune=cfg.tune,
                chains=cfg.chains,
                model=model,
                nuts_sampler=sampler.split()[-1],
                random_seed=0,
                progressbar=False,
                compute_convergence_checks=False,
            )
            sample_s = time.perf_counter() - t1
        diag = diagnose(dt, warn=False)
    out = {
        "fit_s": time.perf_counter() - t0,
        "sample_s": sample_s,
        "cpu_s": _cpu() - c0,
        "div": diag["divergences"],
        "rhat": diag["max_rhat"],
        "ess_bulk": diag["min_ess_bulk"],
        "load": os.getloadavg()[0],
    }
    print("RESULT " + json.dumps(out), flush=True)


def section_pymc(a) -> list[dict]:
    """The package's fit against ``pm.sample`` (nutpie, PyMC's NUTS) on the same model."""
    import tempfile

    shrink = {100: 30, 173: 43, 1000: 200}
    rows = []
    for sampler in a.pymc_samplers.split(","):
        with tempfile.TemporaryDirectory(prefix="bench_pymc_") as folder:
            env = dict(
                os.environ,
                PYTHONPATH=os.pathsep.join(sys.path),
                PYTENSOR_FLAGS=f"base_compiledir={os.path.join(folder, 'pytensor')}",
                NUMBA_CACHE_DIR=os.path.join(folder, "numba"),
            )
            for case, (kind, n) in PYMC_CASES.items():
                if a.pymc_cases and case not in a.pymc_cases.split(","):
                    continue
                n = shrink.get(n, n) if a.quick and n else n
                args = ["--child-pymc", kind, "--pymc-n", str(n or 0), "--pymc-sampler", sampler]
                res, wall = _run_child(args + (["--quick"] if a.quick else []), env)
                row = {"case": case, "N": n or "data", "sampler": sampler, **res}
                row["process_s"] = wall
                rows.append(row)
                print(
                    "  "
                    + "  ".join(
                        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                        for k, v in row.items()
                    ),
                    flush=True,
                )
    return rows


def section_rvc(a) -> list[dict]:
    """RVC's MCMC at its defaults on plain two-class data in 2-D and on Ripley's."""
    import arviz_stats as azs

    from bayes_rvm import RVC
    from bayes_rvm.datasets import load_ripley

    cases = []
    for seed, n in enumerate((100, 120, 140, 160, 173)):
        rng = np.random.default_rng(seed)
        X, Xt = rng.normal(size=(n, 2)), rng.normal(size=(2000, 2))
        y = (X[:, 0] + 0.5 * rng.normal(size=n) > 0).astype(int)
        yt = (Xt[:, 0] + 0.5 * rng.normal(size=2000) > 0).astype(int)
        cases.append((f"2-D set {seed}", X, y, Xt, yt))
    cases.append(("Ripley", *load_ripley()))
    rows = []
    for label, X, y, Xt, yt in cases:
        if a.quick:
            X, y = X[::3], y[::3]
        config = {"draws": 100, "tune": 100, "chains": 2} if a.quick else None
        est = RVC(inference="mcmc", sampler_config=config, random_state=0)
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est.fit(X, y)
        fit_s = time.perf_counter() - t0
        post = est.idata_["posterior"].dataset
        stats = est.idata_["sample_stats"].dataset
        row = {
            "case": label,
            "N": X.shape[0],
            "M": int(post.sizes["basis"]),
            "form": est.model_.rvm_spec.form,
            "fit_s": fit_s,
            "rhat": max(float(azs.rhat(post[v]).max()) for v in ("w", "log_alpha")),
            "ess_bulk": min(float(azs.ess(post[v]).min()) for v in ("w", "log_alpha")),
            "div": int(stats["diverging"].sum()),
            "steps": float(stats["n_steps"].mean()),
            "warnings": len(caught),
            "test_err": float(np.mean(est.predict(Xt) != yt)),
            "load": os.getloadavg()[0],
        }
        rows.append(row)
        print(
            "  "
            + "  ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()
            ),
            flush=True,
        )
    return rows


SECTIONS = {
    "pymc": section_pymc,
    "rvc": section_rvc,
    "compile": section_compile,
    "fresh": section_fresh,
    "scale": section_scale,
    "multi": section_multi,
    "samplers": section_samplers,
    "forms": section_forms,
    "large": section_large,
    "rhat": section_rhat,
    "replicates": section_replicates,
}


def _print_rows(title: str, rows: list[dict]) -> None:
    print(f"\n== {title} (load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores)")
    for row in rows:
        cells = []
        for k, v in row.items():
            # R-hats with a digit more: 1.0102 is not 1.010 against a bound of 1.01
            digits = 5 if "rhat" in k else 4
            cells.append(f"{k}={v:.{digits}g}" if isinstance(v, float) else f"{k}={v}")
        print("  " + "  ".join(cells), flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke run: small N, few draws")
    p.add_argument("--sections", default="fresh,scale,multi,samplers")
    p.add_argument("--child-fresh", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument(
        "--child-python",
        default=None,
        help="fresh section: also run its processes on this interpreter (a plain install)",
    )
    p.add_argument("--child-compile", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--compile-family", default="rvr", help=argparse.SUPPRESS)
    p.add_argument("--child-pymc", default="", help=argparse.SUPPRESS)
    p.add_argument("--pymc-n", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--pymc-sampler", default="package", help=argparse.SUPPRESS)
    p.add_argument(
        "--pymc-samplers",
        default=",".join(PYMC_SAMPLERS),
        help="pymc section: the fits compared (package, pm.sample nutpie, pm.sample pymc)",
    )
    p.add_argument(
        "--pymc-cases",
        default="",
        help=f"pymc section: the cases run (default all: {', '.join(PYMC_CASES)})",
    )
    p.add_argument(
        "--compile-families",
        default="",
        help="compile section: graphs beyond RVR's default (joint,student_t,rvc,poisson)",
    )
    p.add_argument(
        "--compile-draws",
        default="200,200,2",
        help="compile section: draws,tune,chains of each fit, or 'default' (the estimator's)",
    )
    p.add_argument("--n", type=int, default=100, help="N of the forms section")
    p.add_argument("--draws", type=int, default=1000, help="draws of the forms section")
    p.add_argument("--tune", type=int, default=1000, help="tune of the forms section")
    p.add_argument("--chains", type=int, default=4, help="chains of the forms section")
    p.add_argument("--forms", default="marginal,joint")
    p.add_argument("--samplers", default="nutpie,numpyro,pymc")
    p.add_argument(
        "--centred-samplers",
        default="nutpie",
        help="samplers for the centred joint form (slow: NUTS runs to its maximum tree depth)",
    )
    p.add_argument(
        "--joint-target-accept",
        type=float,
        default=0.99,
        help="target_accept of an extra nutpie run of the joint form (0 to skip)",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--large-n", type=int, default=1_000_000, help="N of the large section")
    p.add_argument("--large-seeds", default="0,1,2,3,4,5", help="data sets of the large section")
    p.add_argument("--replicates", type=int, default=10, help="sampler seeds per data set")
    p.add_argument("--null-dim", type=int, default=45, help="parameters of the rhat section")
    p.add_argument("--null-runs", type=int, default=40, help="runs per row of the rhat section")
    p.add_argument(
        "--gamma",
        default=None,
        help="RVR kernel width of the fresh and multi sections (default: the estimator's)",
    )
    a = p.parse_args(argv)
    if a.child_fresh:
        child_fresh(a.child_fresh, a.gamma)
        return 0
    if a.child_compile:
        child_compile(a.child_compile, a.compile_family, a.compile_draws)
        return 0
    if a.child_pymc:
        child_pymc(a.child_pymc, a.pymc_n, a.pymc_sampler, a.quick)
        return 0
    if a.quick:
        a.n, a.draws, a.tune, a.chains = 30, 100, 100, 2
    print(
        "bench_mcmc: no GPU is lent to this machine; the JAX path (numpyro) runs on the CPU. "
        f"{os.cpu_count()} cores, shared with other jobs: see the load averages."
    )
    for name in a.sections.split(","):
        t0 = time.perf_counter()
        rows = SECTIONS[name](a)
        if rows:
            _print_rows(f"{name} ({time.perf_counter() - t0:.0f} s)", rows)
    return 0


_COLS = [
    "form",
    "sampler",
    "accept",
    "compile_s",
    "sample_s",
    "wall_s",
    "ess_bulk",
    "ess_all",
    "ess/s",
    "ess/s_sampling",
    "cpu_s",
    "idle_s",
    "ess/s_idle",
    "div",
    "rhat",
    "sigma_mean",
]


def _format_row(row) -> str:
    if "error" in row:
        return f"{row['form']:<9} {row['sampler']:<8} ERROR {row['error']}"
    cells = []
    for c in _COLS:
        width = max(len(c), 8)
        v = row[c]
        cells.append(f"{v:>{width}.3g}" if isinstance(v, float) else f"{v!s:>{width}}")
    return "  ".join(cells)


def _table(rows) -> str:
    head = "  ".join(f"{c:>{max(len(c), 8)}}" for c in _COLS)
    return "\n".join([head, *(_format_row(r) for r in rows)])


if __name__ == "__main__":
    sys.exit(main())
