"""Large data on one machine: ``RVR`` fitted from sufficient statistics (a chunked pass).

Prints, in one run, for ``RVR(kernel="rbf", gamma=0.5, centres="random", n_centres=M)`` on 2-D
inputs (uniform on [-5, 5]^2, ``y = sinc(x1) cos(x2) + 0.1 noise``):

* the rate of one BLAS ``dsyrk`` on a 64 MiB block of M columns (GFLOP/s, one thread, as ``fit``
  runs it) and the physical limit of a fit it sets: the ``N M^2`` flops of ``Phi'Phi``;
* per row count N, the wall time and the peak memory (``ru_maxrss`` of a fresh process per fit)
  of the fit from statistics (``chunk_rows="auto"``, which switches above 2 GiB of design, or a
  forced chunk size) and, where it fits, of the in-memory fit (``chunk_rows=None``), with the
  largest relative difference of their predictions on 1000 test points;
* each time's ratio to the in-memory fit at the smallest N (the peer measured in the same run:
  timings on a busy machine are noisy, ratios less so) and to the physical limit.

Run ``python benchmarks/bench_statistics.py`` (about 10 minutes on a busy 2-core machine;
``--quick``: M = 500 and N up to 2e5; ``--sizes 100000 1000000``, ``--centres 2000``).
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


def data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-5, 5, size=(n, 2))
    y = np.sinc(X[:, 0]) * np.cos(X[:, 1]) + 0.1 * rng.standard_normal(n)
    return X, y


def syrk_rate(n_basis: int) -> float:
    """GFLOP/s of one ``dsyrk`` on a 64 MiB block (the rate of the chunked pass), one thread."""
    from scipy.linalg.blas import dsyrk
    from threadpoolctl import threadpool_limits

    from bayes_rvm.statistics import chunk_rows_for

    rows = chunk_rows_for(n_basis)
    A = np.random.default_rng(0).random((rows, n_basis))
    C = np.zeros((n_basis, n_basis), order="F")
    with threadpool_limits(1, "blas"):
        dsyrk(1.0, A.T, beta=1.0, c=C, trans=0, lower=0, overwrite_c=1)
        start = time.perf_counter()
        for _ in range(3):
            dsyrk(1.0, A.T, beta=1.0, c=C, trans=0, lower=0, overwrite_c=1)
        seconds = (time.perf_counter() - start) / 3
    return rows * n_basis * (n_basis + 1) / seconds / 1e9


def one_fit(n: int, n_centres: int, chunk_rows) -> dict:
    """One fit in this process: time, peak memory, predictions (run in a child process)."""
    from bayes_rvm import RVR

    X, y = data(n)
    X_test, _ = data(1000, seed=1)
    start = time.perf_counter()
    model = RVR(
        kernel="rbf",
        gamma=0.5,
        centres="random",
        n_centres=n_centres,
        chunk_rows=chunk_rows,
        random_state=0,
    ).fit(X, y)
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "statistics": model.statistics_ is not None,
        "n_rv": int(model.n_relevance_vectors_),
        "noise_sd": float(np.sqrt(model.noise_variance_)),
        "prediction": model.predict(X_test).tolist(),
    }


def run_child(n: int, n_centres: int, chunk_rows) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONPATH=ROOT)
    code = (
        f"import json, sys; sys.path.insert(0, {HERE!r}); import bench_statistics as b; "
        f"print(json.dumps(b.one_fit({n}, {n_centres}, {chunk_rows!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    if out.returncode:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--centres", type=int, default=2000)
    parser.add_argument("--sizes", type=int, nargs="*")
    args = parser.parse_args()
    m = 500 if args.quick else args.centres
    sizes = args.sizes or ([50_000, 200_000] if args.quick else [100_000, 200_000, 1_000_000])
    print(f"load average {os.getloadavg()}, {os.cpu_count()} cores")
    rate = syrk_rate(m + 1)
    print(f"dsyrk, one thread, {m + 1} columns: {rate:.1f} GFLOP/s")
    print(
        f"{'N':>9} {'path':>10} {'seconds':>8} {'peak GiB':>8} {'RVs':>4} {'x in-mem':>8} "
        f"{'x limit':>8} {'pred. rel. diff':>15}"
    )
    peer = None
    for n in sizes:
        limit = n * (m + 1) ** 2 / (rate * 1e9)
        runs = [("statistics", 20_000 if n <= 2 * 10**5 else "auto")]
        if n <= 2 * 10**5:
            runs.insert(0, ("in-memory", None))
        dense_pred = None
        for name, chunk in runs:
            r = run_child(n, m, chunk)
            if "error" in r:
                print(f"{n:>9} {name:>10}  failed: {r['error']}")
                continue
            pred = np.asarray(r["prediction"])
            diff = ""
            if dense_pred is None:
                dense_pred = pred
            else:
                diff = f"{np.max(np.abs(pred - dense_pred)) / np.max(np.abs(dense_pred)):.1e}"
            peer = peer or r["seconds"]
            print(
                f"{n:>9} {name:>10} {r['seconds']:>8.1f} {r['peak_gib']:>8.2f} {r['n_rv']:>4} "
                f"{r['seconds'] / peer:>8.2f} {r['seconds'] / limit:>8.2f} {diff:>15}"
            )
        print(f"{'':>9} {'limit':>10} {limit:>8.1f}   (N M^2 flops of Phi'Phi at the dsyrk rate)")


if __name__ == "__main__":
    main()
