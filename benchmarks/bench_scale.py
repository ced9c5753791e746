"""Large-N regression: the RVM from streamed statistics, its physical limit and its peers.

One run prints, for N = 1e5, 3e5 and 1e6 rows of a smooth function of 2 inputs plus noise
(``y = sin(x1) cos(x2) + 0.5 exp(-|x|^2 / 4) + N(0, 0.1^2)``, ``x`` uniform on [-3, 3]^2), at the
rbf kernel with ``gamma = 0.5`` and M centres (``--centres``, default 2000 and 500), each fit's
wall time, CPU time, peak memory, test RMSE (against the noise-free function at 10,000 new inputs)
and kept vectors or components:

* ``RVR stats``: ``RVR(gamma=0.5, centres=("random", M), chunk_rows=...)`` fitted from
  its sufficient statistics in the blocks of ``chunk_rows="auto"`` (forced also where "auto"
  would hold the design in memory);
* ``RVR memory`` (up to ``--in-memory-max`` rows): the same fit on the design in memory, and the
  largest difference of the two fits' test predictions relative to their largest value;
* ``Nystroem+BR``: scikit-learn's ``Nystroem(n_components=M)`` features into ``BayesianRidge``,
  what a user would pick instead (it holds the N x M features and about four copies of them:
  skipped, with the memory it would need, where that passes ``--max-gb``);
* ``fastrvm``: SparseBayes in C++ on the full N x N kernel (it has no subset of centres): run at
  N = 5000 beside the RVM at that N, skipped beyond with the memory it would need;
* ``time/limit``: the fit's wall time over the physical limit of one pass over the statistics,
  the ``N M^2`` flops of ``Phi'Phi`` at the ``dsyrk`` rate measured at the start of this run on a
  block of the fit's own size (``chunk_rows_for(M + 1)`` rows) with the fit's own BLAS threads;
  ``CPU/limit``: the same of the CPU times (every thread's), which a busy machine moves less.

Every fit runs in a fresh subprocess with the machine's default threads (as a user's fit), which
reports its ``ru_maxrss`` (the whole process's peak: Python, libraries, inputs and fit), its CPU
time (``ru_utime + ru_stime``: BLAS's and numba's threads included) and the load average when it
started. Timings on a shared machine are noisy: read ``time/limit`` and the CPU time beside the
wall time.

``--dask`` adds N = 2e6 with M = 1000 centres (``--dask-centres``) on a ``LocalCluster`` of two
workers with one thread and 3 GiB each: the data generated and persisted on the workers, the
statistics reduced there (:mod:`bayes_rvm.estimators.distributed`), the workers' BLAS threads as
the fit sees
them (``process_threads()``, 1 under Dask's nanny), the peak memory and CPU time of the worker
processes and whether a worker was lost. Its limit is half a one-thread pass (two workers share
the rows). ``--dask-layouts`` also times the other layouts a user may pick on two cores: one
worker with two threads, and one worker with one thread and two BLAS threads.

    python benchmarks/bench_scale.py                      # the table (13 minutes, busy 2 cores)
    python benchmarks/bench_scale.py --dask               # and N = 2e6 on a local cluster
    python benchmarks/bench_scale.py --dask --no-table    # that row only
    python benchmarks/bench_scale.py --centres 2000 --sizes 1000000 --in-memory-max 0
    python benchmarks/bench_scale.py --quick --dask       # a smoke run (N = 2e4, 5e4; M = 100)
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)  # this checkout's bayes_rvm, also when run from elsewhere

GAMMA = 0.5
SEED = 0
N_TEST = 10_000
FASTRVM_N = 5000
# What each peer holds at its peak, in N x M (fastrvm: N x N) float64 matrices, for the skip
# rule: the Nystroem features with BayesianRidge's centred copy, SVD and products (5.8 GiB at
# N = 3e5, M = 500, measured: five of them); fastrvm's kernel and its solver's copies (12 GiB at
# N = 20,000, measured: four).
PEER_COPIES = {"Nystroem+BR": 5, "fastrvm": 4}


def truth(X: np.ndarray) -> np.ndarray:
    return np.sin(X[:, 0]) * np.cos(X[:, 1]) + 0.5 * np.exp(-np.sum(X**2, axis=1) / 4)


def make_data(n: int, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    return X, truth(X) + 0.1 * rng.standard_normal(n)


def test_set() -> tuple[np.ndarray, np.ndarray]:
    X = np.random.default_rng(10_000 + SEED).uniform(-3, 3, size=(N_TEST, 2))
    return X, truth(X)


def usage() -> dict:
    """This process's peak memory (GiB) and CPU seconds, all its threads included."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"peak": r.ru_maxrss / 2**20, "cpu": r.ru_utime + r.ru_stime}  # KiB on Linux


def make_estimator(method: str, m: int):
    """The estimator of a row of the table (a fresh one, unfitted)."""
    if method.startswith("RVR"):
        from bayes_rvm.basis.statistics import chunk_rows_for
        from bayes_rvm.estimators.regressor import RVR

        chunk = None if method == "RVR memory" else chunk_rows_for(m + 1)
        return RVR(gamma=GAMMA, centres=("random", m), chunk_rows=chunk, random_state=SEED)
    if method == "fastrvm":
        import fastrvm

        return fastrvm.RVR(kernel="rbf", gamma=GAMMA, fit_intercept=True)
    from sklearn.kernel_approximation import Nystroem
    from sklearn.linear_model import BayesianRidge
    from sklearn.pipeline import make_pipeline

    features = Nystroem(kernel="rbf", gamma=GAMMA, n_components=m, random_state=SEED)
    return make_pipeline(features, BayesianRidge())


def kept(model, method: str) -> int:
    """Relevance vectors, or the components a peer keeps."""
    if method.startswith("RVR"):
        return int(model.n_relevance_vectors_)
    if method == "fastrvm":
        return int(model.relevance_.size)
    return int(model[0].n_components)


def child(method: str, n: int, m: int) -> dict:
    """One fit in this process: the row's figures (run by :func:`run_one` in a subprocess)."""
    X, y = make_data(n)
    Xt, ft = test_set()
    model = make_estimator(method, m)
    before = usage()["cpu"]
    start = time.perf_counter()
    model.fit(X, y)
    seconds = time.perf_counter() - start
    after = usage()
    pred = model.predict(Xt)
    rmse = float(np.sqrt(np.mean((pred - ft) ** 2)))
    return {
        "time": seconds,
        "cpu": after["cpu"] - before,
        "peak": after["peak"],
        "rmse": rmse,
        "kept": kept(model, method),
        "prediction": pred[:1000].tolist(),
    }


def run_one(method: str, n: int, m: int, timeout: float) -> dict:
    """:func:`child` in a fresh process; its figures (with the load average at its start), or
    the reason it gave none."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", method, str(n), str(m)]
    load = os.getloadavg()[0]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"note": f"over {timeout:.0f} s"}
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["?"])[-1]
        return {"note": f"failed: {tail[:70]}"}
    return json.loads(out.stdout.strip().splitlines()[-1]) | {"load": load}


def syrk_seconds_per_row(n_columns: int, threads: int) -> tuple[float, float, float]:
    """``(seconds per row, GFLOP/s, CPU seconds per row)`` of ``dsyrk`` on a block of the
    statistics pass.

    The block has ``chunk_rows_for(n_columns)`` rows, as in a fit, and BLAS runs on ``threads``
    threads, as in a fit (the fastest of the calls made in 8 s, at least 5). The CPU seconds
    (every thread's, of the fastest call) make a limit that a busy machine moves less than the
    wall time: the fit's CPU time over it is the ratio to read there.
    """
    from scipy.linalg.blas import dsyrk
    from threadpoolctl import threadpool_limits

    from bayes_rvm.basis.statistics import chunk_rows_for

    rows = chunk_rows_for(n_columns)
    A = np.random.default_rng(0).random((rows, n_columns))
    C = np.zeros((n_columns, n_columns), order="F")
    best, best_cpu, calls, begin = np.inf, np.inf, 0, time.perf_counter()
    with threadpool_limits(threads, "blas"):
        # The best call of at least 8 s (and 5 calls): on a shared machine a few calls can all
        # fall in a busy moment and make the limit too long.
        while calls < 5 or time.perf_counter() - begin < 8.0:
            start, start_cpu = time.perf_counter(), time.process_time()
            dsyrk(1.0, A.T, beta=1.0, c=C, trans=0, lower=0, overwrite_c=1)
            best = min(best, time.perf_counter() - start)
            best_cpu, calls = min(best_cpu, time.process_time() - start_cpu), calls + 1
    return best / rows, rows * n_columns**2 / best / 1e9, best_cpu / rows


def dask_row(n: int, m: int, chunk: int, layout: tuple[int, int, int]) -> dict:
    """The RVM on a LocalCluster of ``layout = (workers, threads each, BLAS threads each)`` with
    3 GiB per worker thread: the data made and persisted on the workers, reduced there."""
    import dask.array as da
    from distributed import Client, LocalCluster, wait

    from bayes_rvm.estimators.regressor import RVR
    from bayes_rvm.threads import process_threads

    workers, threads, blas = layout
    names = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    with (
        LocalCluster(
            n_workers=workers,
            threads_per_worker=threads,
            processes=True,
            memory_limit=f"{3 * threads}GiB",
            dashboard_address=None,
            env=dict.fromkeys(names, str(blas)),  # the nanny's default: 1
        ) as cluster,
        Client(cluster) as client,
    ):
        pids = client.run(os.getpid)
        rng = da.random.default_rng(SEED)
        X = rng.uniform(-3, 3, size=(n, 2), chunks=(chunk, 2))
        f = da.sin(X[:, 0]) * da.cos(X[:, 1]) + 0.5 * da.exp(-(X**2).sum(axis=1) / 4)
        y = f + 0.1 * rng.standard_normal(n, chunks=chunk)
        X, y = client.persist([X, y])  # the data live on the workers, as on a real cluster
        client.wait_for_workers(workers)
        wait([X, y])
        fit_threads = set(client.run(process_threads).values())
        cpu0 = client.run(lambda: usage()["cpu"])
        model = RVR(gamma=GAMMA, centres=("random", m), random_state=SEED)
        load = os.getloadavg()[0]
        start, client_cpu = time.perf_counter(), usage()["cpu"]
        model.fit(X, y)
        seconds, client_cpu = time.perf_counter() - start, usage()["cpu"] - client_cpu
        workers_usage = client.run(usage)
        Xt, ft = test_set()
        rmse = float(np.sqrt(np.mean((model.predict(Xt) - ft) ** 2)))
        lost = set(client.run(os.getpid).values()) != set(pids.values())
    worker_cpu = sum(u["cpu"] - cpu0.get(a, 0.0) for a, u in workers_usage.items())
    worker_peak = max(u["peak"] for u in workers_usage.values())
    return {
        "time": seconds,
        "cpu": worker_cpu + client_cpu,
        "peak": max(worker_peak, usage()["peak"]),
        "rmse": rmse,
        "kept": int(model.n_relevance_vectors_),
        "load": load,
        "note": (
            f"{workers} worker(s) x {threads} thread(s), process_threads() = "
            f"{sorted(fit_threads)}; workers' peak {worker_peak:.2f} GiB, client CPU "
            f"{client_cpu:.0f} s; {'a worker LOST' if lost else 'none lost'}"
        ),
    }


HEADER = (
    f"{'N':>9} {'M':>5} {'method':<12} {'wall s':>7} {'CPU s':>7} {'load':>5} {'peak GiB':>8} "
    f"{'RMSE':>7} {'kept':>5} {'limit s':>8} {'time/limit':>10} {'CPU/limit':>9}  note"
)


def print_row(
    n: int, m: int, method: str, r: dict, limit: float | None, cpu_limit: float | None = None
) -> None:
    lim = f"{limit:8.1f}" if limit else f"{'':>8}"
    if "time" not in r:
        print(f"{n:>9} {m:>5} {method:<12} {'':>7} {'':>7} {'':>5} {'':>8} {'':>7} {'':>5} "
              f"{lim} {'':>10} {'':>9}  {r['note']}", flush=True)  # fmt: skip
        return
    ratio = f"{r['time'] / limit:10.2f}" if limit else f"{'':>10}"
    cpu_ratio = f"{r['cpu'] / cpu_limit:9.2f}" if cpu_limit else f"{'':>9}"
    print(
        f"{n:>9} {m:>5} {method:<12} {r['time']:7.1f} {r['cpu']:7.1f} {r['load']:5.1f} "
        f"{r['peak']:8.2f} {r['rmse']:7.4f} {r['kept']:5d} {lim} {ratio} {cpu_ratio}  "
        f"{r.get('note', '')}",
        flush=True,
    )


def table(args, threads: int) -> None:
    """The one-machine rows, per M: the RVR's two paths, the peers, the limit."""
    for m in args.centres:
        per_row, gflops, cpu_per_row = syrk_seconds_per_row(m + 1, threads)
        print(
            f"\nM = {m}: dsyrk on {threads} BLAS thread(s), blocks of the fit's size: "
            f"{gflops:.1f} GFLOP/s, {(m + 1) ** 2 / cpu_per_row / 1e9:.1f} GFLOP per CPU second "
            f"(load {os.getloadavg()[0]:.1f})"
        )
        print(HEADER)
        # fastrvm holds the N x N kernel: it runs at a few thousand rows, beside the RVM there.
        first = not args.quick and m == args.centres[0]
        rows = [(FASTRVM_N, "fastrvm"), (FASTRVM_N, "RVR memory")] if first else []
        for n in args.sizes:
            rows += [(n, "RVR stats")] + [(n, "RVR memory")] * (n <= args.in_memory_max)
            rows += [(n, "Nystroem+BR")]
        stats: dict = {}  # the last statistics fit, for the in-memory fit's comparison
        for n, method in rows:
            size = n if method == "fastrvm" else m
            need = 8.0 * n * size * PEER_COPIES.get(method, 1) / 2**30
            if method in PEER_COPIES and need > args.max_gb:
                print_row(n, m, method, {"note": f"skipped: needs about {need:.1f} GiB"}, None)
                continue
            r = run_one(method, n, m, args.timeout)
            note = r.get("note", "")
            if method == "RVR memory" and "prediction" in r and "prediction" in stats:
                a, b = np.asarray(r["prediction"]), np.asarray(stats["prediction"])
                diff = np.max(np.abs(a - b)) / np.max(np.abs(a))
                note = f"predictions differ from the statistics' by {diff:.1e} relative"
            stats = r if method == "RVR stats" else stats
            limit = n * per_row if method.startswith("RVR") else None
            cpu_limit = n * cpu_per_row if method.startswith("RVR") else None
            print_row(n, m, method, r | ({"note": note} if note else {}), limit, cpu_limit)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 2e4, 5e4; M = 100")
    parser.add_argument("--dask", action="store_true", help="add N = 2e6 on a local cluster")
    parser.add_argument("--dask-layouts", action="store_true", help="and the other layouts")
    parser.add_argument("--no-table", action="store_true", help="with --dask: only its rows")
    parser.add_argument("--centres", type=int, nargs="+", default=[2000, 500])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    parser.add_argument("--in-memory-max", type=int, default=100_000)
    parser.add_argument("--dask-centres", type=int, default=1000)
    parser.add_argument("--dask-n", type=int, default=2_000_000)
    parser.add_argument("--max-gb", type=float, default=6.0)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--child", nargs=3, metavar=("METHOD", "N", "M"))
    args = parser.parse_args(argv)
    if args.child:
        method, n, m = args.child
        print(json.dumps(child(method, int(n), int(m))))
        return
    if args.quick:
        args.centres, args.sizes, args.in_memory_max = [100], [20_000, 50_000], 20_000
        args.dask_n, args.dask_centres = 200_000, 100
    from bayes_rvm.threads import process_threads

    threads = process_threads()
    print(
        f"load average {os.getloadavg()}, {os.cpu_count()} cores; each fit in a fresh process "
        f"with {threads} BLAS thread(s); rbf kernel, gamma = {GAMMA}"
    )
    if not args.no_table:
        table(args, threads)
    if args.dask:
        n, m = args.dask_n, args.dask_centres
        per_row, gflops, _ = syrk_seconds_per_row(m + 1, 1)
        print(f"\nDask, M = {m}: dsyrk on 1 BLAS thread: {gflops:.1f} GFLOP/s; the limit is half")
        print("a one-thread pass (two cores share the rows)")
        print(HEADER)
        layouts = [(2, 1, 1)] + ([(1, 2, 1), (1, 1, 2)] if args.dask_layouts else [])
        for layout in layouts:
            r = dask_row(n, m, n // 20, layout)
            print_row(n, m, "RVR on Dask", r, n * per_row / 2)
    print(f"\nload average at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
