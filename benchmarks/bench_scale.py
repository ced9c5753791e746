"""Large-N regression: the RVM from streamed statistics against what a user would pick instead.

One table: for N = 1e5, 3e5 and 1e6 rows of a smooth function of 2 inputs plus noise
(``y = sin(x1) cos(x2) + 0.5 exp(-|x|^2 / 4) + N(0, 0.1^2)``, ``x`` uniform on [-3, 3]^2), each
method's fit time, peak memory, test RMSE (against the noise-free function at 10,000 new inputs)
and kept vectors or components, at the same kernel (rbf, ``gamma = 0.5``) and the same number of
centres M (``--centres``, default 500):

* ``RVR``: ``RVR(gamma=0.5, centres="random", n_centres=M)``, the package's fit (from the
  sufficient statistics where the design would not fit, or always, see ``docs/large_data.md``);
* ``Nystroem+BayesianRidge`` and ``Nystroem+ARD``: scikit-learn's ``Nystroem(n_components=M)``
  features into ``BayesianRidge`` / ``ARDRegression`` (they hold the N x M features and copies of
  them: skipped, with a note, where the estimate passes ``--max-gb``);
* ``fastrvm``: SparseBayes in C++ on the full N x N kernel: it has no subset of centres, so it
  fits only at a few thousand rows; it is run at N = 5000 beside the RVM at that N, and noted
  as skipped beyond;
* ``limit``: the physical limit of one pass over the statistics, ``N M^2`` flops of ``dsyrk``
  plus the ``N M`` exponentials of the kernel, at this machine's rates measured once at the
  start (one thread).

``--dask`` adds N = 2e6 with M = 1000 centres (``--dask-centres``) on a 2-worker
``LocalCluster`` (one thread, ``memory_limit="3GiB"`` each): the data generated on the workers,
the statistics reduced there (:mod:`bayes_rvm.distributed`), the peak memory that of the worker
processes (their ``ru_maxrss``) and of the client, and whether a worker was lost.

Each fit runs in a fresh subprocess (one thread: ``OMP_NUM_THREADS=1``), which reports its own
``resource.getrusage(RUSAGE_SELF).ru_maxrss`` at the end: the peak memory is the whole process's
(Python, the libraries, the inputs and the fit). ``time / limit`` is the fit time over the limit.

    python benchmarks/bench_scale.py            # the table (several minutes)
    python benchmarks/bench_scale.py --dask     # and N = 2e6 on a local cluster
    python benchmarks/bench_scale.py --dask --no-table   # that row only
    python benchmarks/bench_scale.py --quick    # a smoke run (N = 2e4, 5e4; M = 100)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

GAMMA = 0.5
SEED = 0
N_TEST = 10_000
FASTRVM_N = 5000
# What each peer holds at its peak, in N x M float64 matrices, for the skip rule: the Nystroem
# features with BayesianRidge's centred copy, SVD and products (5.8 GiB at N = 3e5, M = 500,
# measured: five of them), the same for ARDRegression; fastrvm's N x N kernel and its solver's
# copies (12 GiB at N = 20,000, measured: four).
PEER_COPIES = {"Nystroem+BayesianRidge": 5, "Nystroem+ARD": 5, "fastrvm": 4}


def truth(X: np.ndarray) -> np.ndarray:
    return np.sin(X[:, 0]) * np.cos(X[:, 1]) + 0.5 * np.exp(-np.sum(X**2, axis=1) / 4)


def make_data(n: int, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    return X, truth(X) + 0.1 * rng.standard_normal(n)


def test_set() -> tuple[np.ndarray, np.ndarray]:
    X = np.random.default_rng(10_000 + SEED).uniform(-3, 3, size=(N_TEST, 2))
    return X, truth(X)


def peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def make_estimator(method: str, m: int):
    """The estimator of a row of the table (a fresh one, unfitted)."""
    from sklearn.kernel_approximation import Nystroem
    from sklearn.linear_model import ARDRegression, BayesianRidge
    from sklearn.pipeline import make_pipeline

    if method == "RVR":
        from bayes_rvm.estimators import RVR

        return RVR(gamma=GAMMA, centres="random", n_centres=m, random_state=SEED)
    if method == "fastrvm":
        import fastrvm

        return fastrvm.RVR(kernel="rbf", gamma=GAMMA, fit_intercept=True)
    features = Nystroem(kernel="rbf", gamma=GAMMA, n_components=m, random_state=SEED)
    last = BayesianRidge() if method == "Nystroem+BayesianRidge" else ARDRegression()
    return make_pipeline(features, last)


def kept(model, method: str) -> int:
    """Relevance vectors, or the components a peer keeps."""
    if method == "RVR":
        return int(model.n_relevance_vectors_)
    if method == "fastrvm":
        return int(model.relevance_.size)
    last = model[-1]
    if hasattr(last, "lambda_") and np.ndim(last.lambda_):  # ARD: the finite precisions
        return int(np.sum(last.lambda_ < last.threshold_lambda))
    return int(model[0].n_components)


def child(method: str, n: int, m: int) -> dict:
    """One fit in this process: the row's figures (run by :func:`run_one` in a subprocess)."""
    X, y = make_data(n)
    Xt, ft = test_set()
    model = make_estimator(method, m)
    start = time.perf_counter()
    model.fit(X, y)
    seconds = time.perf_counter() - start
    rmse = float(np.sqrt(np.mean((model.predict(Xt) - ft) ** 2)))
    return {"time": seconds, "peak": peak_gib(), "rmse": rmse, "kept": kept(model, method)}


def run_one(method: str, n: int, m: int, timeout: float) -> dict:
    """:func:`child` in a fresh one-thread process; its figures, or the reason it gave none."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [sys.executable, __file__, "--child", method, str(n), str(m)]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"note": f"over {timeout:.0f} s"}
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["?"])[-1]
        return {"note": f"failed: {tail[:70]}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def blas_rates(m: int) -> dict:
    """Seconds per row of one pass at M centres: ``dsyrk`` of a block and its exponentials."""
    from scipy.linalg.blas import dsyrk
    from threadpoolctl import threadpool_limits

    rows = 20_000
    Phi = np.random.default_rng(0).random((rows, m))
    with threadpool_limits(1):
        c = np.zeros((m, m), order="F")
        best_syrk = best_exp = np.inf
        for _ in range(3):
            t = time.perf_counter()
            dsyrk(1.0, Phi.T, beta=1.0, c=c, trans=0, overwrite_c=1)
            best_syrk = min(best_syrk, time.perf_counter() - t)
            t = time.perf_counter()
            np.exp(-Phi, out=Phi)
            best_exp = min(best_exp, time.perf_counter() - t)
    return {
        "gflops": rows * m * m / best_syrk / 1e9,
        "per_row": (best_syrk + best_exp) / rows,
    }


def dask_row(n: int, m: int, chunk: int) -> dict:
    """The RVM on a 2-worker LocalCluster (3 GiB each): the data made and reduced on the workers."""
    import dask.array as da
    from distributed import Client, LocalCluster

    from bayes_rvm.estimators import RVR

    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            memory_limit="3GiB",
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as client,
    ):
        pids = client.run(os.getpid)
        rng = da.random.default_rng(SEED)
        X = rng.uniform(-3, 3, size=(n, 2), chunks=(chunk, 2))
        f = da.sin(X[:, 0]) * da.cos(X[:, 1]) + 0.5 * da.exp(-(X**2).sum(axis=1) / 4)
        y = f + 0.1 * rng.standard_normal(n, chunks=chunk)
        X, y = client.persist([X, y])  # the data live on the workers, as on a real cluster
        client.wait_for_workers(2)
        model = RVR(gamma=GAMMA, centres="random", n_centres=m, random_state=SEED)
        start = time.perf_counter()
        model.fit(X, y)
        seconds = time.perf_counter() - start
        Xt, ft = test_set()
        rmse = float(np.sqrt(np.mean((model.predict(Xt) - ft) ** 2)))
        worker_peak = max(client.run(peak_gib).values())
        lost = set(client.run(os.getpid).values()) != set(pids.values())
    return {
        "time": seconds,
        "peak": max(worker_peak, peak_gib()),
        "rmse": rmse,
        "kept": int(model.n_relevance_vectors_),
        "note": f"workers' peak {worker_peak:.2f} GiB; {'a worker lost' if lost else 'none lost'}",
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dask", action="store_true")
    parser.add_argument("--no-table", action="store_true", help="with --dask: only its row")
    parser.add_argument("--centres", type=int, default=500)
    parser.add_argument("--dask-centres", type=int, default=1000)
    parser.add_argument("--max-gb", type=float, default=6.0)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--child", nargs=3, metavar=("METHOD", "N", "M"))
    args = parser.parse_args(argv)
    if args.child:
        method, n, m = args.child
        print(json.dumps(child(method, int(n), int(m))))
        return
    m = 100 if args.quick else args.centres
    sizes = (20_000, 50_000) if args.quick else (100_000, 300_000, 1_000_000)
    rates = blas_rates(m)
    print(f"load average {os.getloadavg()[0]:.2f}; dsyrk at M = {m}: {rates['gflops']:.1f} GFlop/s")
    print(f"rbf kernel, gamma = {GAMMA}, M = {m} centres; one thread per fit\n")
    header = f"{'N':>9} {'method':<24} {'time s':>8} {'peak GiB':>9} {'RMSE':>7} {'kept':>5} "
    print(header + f"{'time/limit':>10}  note")
    rows = [(FASTRVM_N, "fastrvm"), (FASTRVM_N, "RVR")] if not args.quick else []
    methods = ("RVR", "Nystroem+BayesianRidge", "Nystroem+ARD", "fastrvm")
    rows += [(n, method) for n in sizes for method in methods]
    rows = [] if args.no_table else rows
    for n, method in rows:
        need = 8.0 * n * (n if method == "fastrvm" else m) * PEER_COPIES.get(method, 1) / 2**30
        if method in PEER_COPIES and (need > args.max_gb or (args.quick and method == "fastrvm")):
            print_row(n, method, {"note": f"skipped: needs about {need:.1f} GiB"}, None)
            continue
        r = run_one(method, n, m, args.timeout)
        print_row(n, method, r, n * rates["per_row"] if method == "RVR" else None)
    if args.dask:
        n, md = (200_000, 100) if args.quick else (2_000_000, args.dask_centres)
        r = dask_row(n, md, chunk=n // 20)
        # Two workers share the rows: the limit is half a one-thread pass.
        print_row(n, f"RVR on Dask, M={md}", r, n * blas_rates(md)["per_row"] / 2)


def print_row(n: int, method: str, r: dict, limit: float | None) -> None:
    if "time" not in r:
        print(f"{n:>9} {method:<24} {'':>8} {'':>9} {'':>7} {'':>5} {'':>10}  {r['note']}")
        return
    ratio = f"{r['time'] / limit:10.1f}" if limit else f"{'':>10}"
    print(
        f"{n:>9} {method:<24} {r['time']:8.1f} {r['peak']:9.2f} {r['rmse']:7.4f} {r['kept']:5d} "
        f"{ratio}  {r.get('note', '')}",
        flush=True,
    )


if __name__ == "__main__":
    main()
