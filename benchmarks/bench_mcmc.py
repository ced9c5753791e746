"""MCMC benchmark of the RVM regression model on Tipping's sinc problem.

Compares the weight-marginalised and the joint (non-centred) forms under nutpie, numpyro and
PyMC's own NUTS, and the straightforward centred joint form (``w_i ~ N(0, alpha_i^-1/2)``, the
same priors; nutpie only by default), on all N + 1 basis functions of an RBF kernel (design
columns scaled to unit norm, targets to unit RMS, as :class:`bayes_rvm.estimators.RVR` does),
and prints one table:

- ``compile_s``: building and compiling the sampler (nutpie: ``compile_pymc_model``; for the other
  samplers compilation is inside ``pm.sample`` and is included in ``sample_s``);
- ``sample_s``: wall time of the sampling call, ``wall_s`` = both;
- ``ess_bulk``: minimum bulk ESS over the hyperparameters (``sigma`` and ``log alpha`` of the
  type-II relevance vectors; ``ess_all`` over every ``log alpha``);
- ``ess/s``: ``ess_bulk / wall_s``; ``ess/s_sampling``: over the sampling time alone;
- ``div``: divergent transitions after warm-up; ``rhat``: max R-hat over the hyperparameters;
- ``accept``: NUTS's target acceptance rate (0.8 unless set); the joint form is run a second
  time with nutpie at ``--joint-target-accept`` (0.99), which shows whether smaller steps remove
  its divergences, and what its ESS per second is then;
- ``cpu_s``: CPU seconds of compilation plus sampling (threads and worker processes), and
  ``idle_s`` = compile CPU + sampling CPU / min(chains, cores): the wall time the run would take
  on an otherwise idle machine; ``ess/s_idle`` = ``ess_bulk / idle_s``. On a shared machine the
  wall-clock columns measure the neighbours as much as the sampler; these do not.

Run ``python benchmarks/bench_mcmc.py`` (full: 4 chains x 1000 draws after 1000 tuning steps) or
``--quick`` for a smoke run.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")  # four chains on two cores: no nested BLAS threads

import arviz as az
import numpy as np
import pymc as pm

from bayes_rvm.datasets import make_sinc
from bayes_rvm.dims import BASIS, OBS
from bayes_rvm.evidence.gaussian import fit_mackay
from bayes_rvm.inference import sample_mcmc
from bayes_rvm.kernels import KernelBasis
from bayes_rvm.models import halfcauchy_scale_alpha, rvm_regression_model


def sinc_problem(n: int, seed: int = 0):
    """Normalised design (unit-norm columns) and targets (unit RMS) of the sinc problem."""
    X, y = make_sinc(n, random_state=seed)
    Phi = KernelBasis("rbf", gamma=1.0 / 9.0).fit(X).transform(X)
    Phi = Phi / np.linalg.norm(Phi, axis=0)
    return Phi, y / np.sqrt(np.mean(y**2))


def centred_joint_model(Phi, t) -> pm.Model:
    """The baseline the issue measured: centred weights, the same priors as the package's model."""
    N, M = Phi.shape
    with pm.Model(coords={OBS: np.arange(N), BASIS: np.arange(M)}) as model:
        Phi_data = pm.Data("Phi", Phi, dims=(OBS, BASIS))
        y_data = pm.Data("y_obs", t, dims=OBS)
        alpha = halfcauchy_scale_alpha("alpha", tau=1.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        w = pm.Normal("w", 0.0, alpha**-0.5, dims=BASIS)
        pm.Normal("y", Phi_data @ w, sigma, observed=y_data, dims=OBS)
    return model


#: NUTS's target acceptance in every run but the extra joint one (PyMC's and nutpie's default).
TARGET_ACCEPT = 0.8


def _cpu() -> float:
    # This process's threads (nutpie, numpyro) plus finished worker processes (PyMC's NUTS).
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


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
        from bayes_rvm import inference

        inference._NUTPIE_CACHE.clear()
        key = inference._nutpie_cache_key(model, None)
        import nutpie

        inference._NUTPIE_CACHE[key] = nutpie.compile_pymc_model(model)
        compile_s = time.perf_counter() - t0
    compile_cpu = _cpu() - c0
    c1 = _cpu()
    nuts = {"target_accept": target_accept}
    if sampler == "numpyro":
        nuts["chain_method"] = "parallel"
    t1 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dt = sample_mcmc(
            model,
            draws=draws,
            tune=tune,
            chains=chains,
            sampler=sampler,
            random_seed=seed,
            progressbar=False,
            nuts=nuts,
            warn=False,
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke run: N=30, 2 x 100 draws")
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--tune", type=int, default=1000)
    p.add_argument("--chains", type=int, default=4)
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
    a = p.parse_args(argv)
    if a.quick:
        a.n, a.draws, a.tune, a.chains = 30, 100, 100, 2
    Phi, t = sinc_problem(a.n)
    fit = fit_mackay(Phi, t)
    relevant = fit.active
    print(
        f"sinc N={a.n}, M={Phi.shape[1]} basis functions, {relevant.size} type-II relevance "
        f"vectors, {a.chains} chains x {a.draws} draws (+{a.tune} tune), {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
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
        print(_format_row(row), f"(load {os.getloadavg()[0]:.1f})", flush=True)
    print()
    print(_table(rows))
    ok = [r for r in rows if "error" not in r]
    for m in (r for r in ok if r["form"] == "marginal"):
        for j in (r for r in ok if r["form"] != "marginal" and r["sampler"] == m["sampler"]):
            print(
                f"{m['sampler']}: marginal / {j['form']} (target_accept {j['accept']}) "
                "ESS per second = "
                f"{m['ess/s'] / max(j['ess/s'], 1e-12):.0f}x (wall), "
                f"{m['ess/s_idle'] / max(j['ess/s_idle'], 1e-12):.0f}x (idle)"
                + (f", the joint run had {j['div']} divergences" if j["div"] else "")
            )
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
