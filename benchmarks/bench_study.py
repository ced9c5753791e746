"""A model comparison study on 1 and 2 workers: wall time, speed-up, and the same table.

The grid: 2 data sets (sinc and Friedman #1, N=100 each, with test sets) x 12 models (type-II
ARD at several RBF widths, MacKay, Student-t, other kernels, and MCMC over the relevance vectors
with the ARD and Student-t priors). It runs through :func:`bayes_rvm.studies.runner.run_study` on a
Dask
``LocalCluster`` of 1 and then of 2 single-threaded worker processes (and, with ``--loky``, on
joblib's local processes with ``n_jobs`` 1 and 2), each on a fresh cluster so that every run pays
its workers' start-up, imports and in-memory MCMC compilations (after one untimed warm-up run, so
that the on-disk compilation caches are equally warm for all), and prints one table:

- ``wall_s``: wall time of ``run_study``, cluster start-up excluded;
- ``fit_s``: the sum of the fits' own times (``fit_time``), ``fits/worker_s`` = ``fit_s`` /
  ``wall_s`` / workers, the share of the workers' time spent fitting;
- ``speed-up``: wall time on 1 worker over wall time on this many;
- ``same_table``: the numeric columns equal those of the 1-worker run to 1e-8.

On a machine shared with other work, compare the ratio, not the seconds: both runs suffer the same
contention, and ``fits/worker_s`` shows how much of the wall time the workers had.

Run ``python benchmarks/bench_study.py`` (``--quick`` for a smaller grid, ``--loky`` to add the
local-process backend).
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import pandas as pd

from bayes_rvm.datasets import make_friedman, make_sinc
from bayes_rvm.estimators.regressor import RVR
from bayes_rvm.studies.runner import run_study

RUN_COLUMNS = ["fit_time", "worker", "warnings"]


def grid(n: int, draws: int) -> tuple[dict, dict]:
    """12 models x 2 data sets (sinc and Friedman #1, ``n`` training points each, with test sets).

    The test suite runs this grid small on a Dask cluster against the serial run.
    """
    X1, y1 = make_sinc(n, noise=0.1, random_state=0, shuffle=False)
    X1t, y1t = make_sinc(200, noise=0.1, random=True, random_state=1, shuffle=False)
    F, t = make_friedman(1, n + 200, noise=0.5, random_state=1)
    config = {"mcmc_basis": "relevant", "draws": draws, "tune": draws, "chains": 2}
    mcmc = dict(inference="mcmc", sampler_config=config)
    models = {
        **{f"ARD rbf g={g}": RVR(gamma=g) for g in (0.03, 0.1, 0.3, 1.0)},
        "ARD MacKay g=0.1": RVR(gamma=0.1, solver="mackay"),
        "Student-t nu=1": RVR(gamma=0.1, prior="student_t", prior_params={"nu": 1.0}),
        "Student-t nu=1e-4": RVR(gamma=0.1, prior="student_t", prior_params={"nu": 1e-4}),
        "ARD laplacian": RVR(kernel="laplacian", gamma=0.3),
        "ARD poly": RVR(kernel="poly", kernel_params={"degree": 2}, gamma=0.1),
        "ARD linear": RVR(kernel="linear"),
        "MCMC ARD": RVR(gamma=0.1, **mcmc),
        "MCMC Student-t": RVR(gamma=0.1, prior="student_t", **mcmc),
    }
    datasets = {"sinc": (X1, y1, X1t, y1t), "friedman1": (F[:n], t[:n], F[n:], t[n:])}
    return models, datasets


def same_table(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    a, b = a.drop(columns=RUN_COLUMNS), b.drop(columns=RUN_COLUMNS)
    num = a.select_dtypes("number").columns
    return a.drop(columns=num).equals(b.drop(columns=num)) and np.allclose(
        a[num].to_numpy(float), b[num].to_numpy(float), rtol=1e-8, atol=1e-8, equal_nan=True
    )


def run_dask(models, datasets, workers: int) -> tuple[float, pd.DataFrame]:
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        start = time.perf_counter()
        table = run_study(models, datasets, client=client, random_state=0)
        return time.perf_counter() - start, table


def run_loky(models, datasets, workers: int) -> tuple[float, pd.DataFrame]:
    from joblib.externals.loky import get_reusable_executor

    # Fresh workers: no compiled models left over. (n_jobs=1 runs in this process, which
    # compiles nothing before.)
    get_reusable_executor().shutdown(wait=True)
    start = time.perf_counter()
    table = run_study(models, datasets, n_jobs=workers, random_state=0)
    return time.perf_counter() - start, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller data and fewer draws")
    parser.add_argument("--loky", action="store_true", help="also joblib's local processes")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    models, datasets = grid(40, 100) if args.quick else grid(100, 500)
    n_fits = len(models) * len(datasets)
    print(
        f"{n_fits} fits ({len(datasets)} data sets x {len(models)} models), {os.cpu_count()} CPUs"
    )
    # An untimed run on a throw-away worker first: compiled graphs that PyTensor and numba keep
    # on disk are then equally warm for every timed run, whichever comes first.
    run_dask(models, datasets, 1)
    rows, reference = [], {}
    runners = [("dask", run_dask)] + ([("loky", run_loky)] if args.loky else [])
    for backend, runner in runners:
        for workers in (1, 2):
            wall, table = runner(models, datasets, workers)
            reference.setdefault(backend, (wall, table))
            base_wall, base = reference[backend]
            fit_s = float(table["fit_time"].sum())
            rows.append(
                {
                    "backend": backend,
                    "workers": workers,
                    "wall_s": round(wall, 1),
                    "fit_s": round(fit_s, 1),
                    "fits/worker_s": round(fit_s / wall / workers, 2),
                    "speed-up": round(base_wall / wall, 2),
                    "same_table": same_table(table, base),
                    "distinct_workers": table["worker"].nunique(),
                }
            )
            print(pd.DataFrame(rows[-1:]).to_string(index=False, header=len(rows) == 1))
    print()
    print(pd.DataFrame(rows).to_string(index=False))


if __name__ == "__main__":
    main()
