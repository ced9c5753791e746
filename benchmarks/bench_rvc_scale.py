"""RVC at scale: the chunked Laplace path on N = 10^6 binary rows.

Prints one table: ``RVC(centres=("random", 500))`` on a 2-D nonlinear boundary with 10%
label noise (the Bayes error is 10%), fitted in memory on 50,000 of the rows and on the chunked
path (:mod:`bayes_rvm.evidence.chunked`) on all N; wall and CPU time, peak memory
(``/usr/bin/time -v``, each fit in its own process), passes over the rows, relevance vectors,
Laplace log evidence and test error on 200,000 fresh rows, with the ratios (of CPU time and
memory) to the in-memory fit on 50,000 rows (the peer: the target is a test error no worse
than its) and the load average around each fit::

    python benchmarks/bench_rvc_scale.py [--rows 1000000]

The machine's load (``os.getloadavg``) is printed with it: timings on a shared machine are only
comparable as ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

import numpy as np

N_TEST = 200_000


def boundary_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points on [-2, 2]^2, labelled by ``sin(2 x1) + x2^2 > 1.5``, 10% of labels flipped."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, size=(n, 2))
    y = (np.sin(2.0 * X[:, 0]) + X[:, 1] ** 2 > 1.5).astype(np.intp)
    flip = rng.random(n) < 0.1
    return X, np.where(flip, 1 - y, y)


def child(rows: int, chunked: bool, centres: int, gamma: float) -> None:
    """Fit one model and print its figures as a JSON line (run under ``/usr/bin/time -v``)."""
    import warnings

    from bayes_rvm.estimators.classifier import RVC

    X, y = boundary_data(rows, seed=0)
    Xt, yt = boundary_data(N_TEST, seed=1)
    clf = RVC(
        gamma=gamma,
        centres=("random", centres),
        random_state=0,
        chunk_rows="auto" if chunked else None,
    )
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf.fit(X, y)
    seconds = time.perf_counter() - start
    out = {
        "seconds": seconds,
        "error": float(np.mean(clf.predict(Xt) != yt)),
        "n_relevance": int(clf.active_.size),
        "log_evidence": float(clf.log_evidence_),
        "passes": clf.chunked_passes_,
        "warnings": sorted({type(w.message).__name__ for w in caught}),
    }
    print("RESULT " + json.dumps(out), flush=True)


def run(rows: int, chunked: bool, centres: int, gamma: float) -> dict:
    cmd = [
        "/usr/bin/time",
        "-v",
        sys.executable,
        __file__,
        "--child",
        "--rows",
        str(rows),
        "--centres",
        str(centres),
        "--gamma",
        str(gamma),
    ] + (["--chunked"] if chunked else [])
    load = os.getloadavg()[0]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode or not line:
        raise RuntimeError(f"the fit failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    out = json.loads(line[0][7:])
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    out["peak_gib"] = int(peak.group(1)) / 2**20 if peak else float("nan")
    # CPU seconds: on a shared, oversubscribed machine the wall time mostly measures the others.
    cpu = re.findall(r"(?:User|System) time \(seconds\): ([0-9.]+)", proc.stderr)
    out["cpu_seconds"] = sum(float(c) for c in cpu) if cpu else float("nan")
    out["load"] = f"{load:.1f}-{os.getloadavg()[0]:.1f}"
    print(f"{rows} rows, chunked={chunked}: {json.dumps(out)}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--subset", type=int, default=50_000)
    parser.add_argument("--centres", type=int, default=500)
    parser.add_argument("--gamma", type=float, default=1.0)
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--chunked", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(args.rows, args.chunked, args.centres, args.gamma)
        return
    print(f"load average before: {os.getloadavg()}")
    base = run(args.subset, False, args.centres, args.gamma)
    big = run(args.rows, True, args.centres, args.gamma)
    print(f"load average after: {os.getloadavg()}")
    print(
        f"\nRVC(centres=('random', {args.centres}), gamma={args.gamma}); test error on "
        f"{N_TEST} fresh rows (Bayes error 0.100)\n"
    )
    head = (
        f"{'fit':<12}{'rows':>9}{'wall s':>9}{'CPU s':>9}{'x':>7}{'GiB':>7}{'x':>7}{'RVs':>6}"
        f"{'error':>8}{'log ev':>12}{'load':>10}"
    )
    print(head + "  passes (kernel over all columns / kept blocks / active-column fills)")
    for name, n, r in (("in memory", args.subset, base), ("chunked", args.rows, big)):
        p = r["passes"] or {}
        passes = f"{p.get('full', '-')} / {p.get('cached', '-')} / {p.get('cache_fills', '-')}"
        print(
            f"{name:<12}{n:>9}{r['seconds']:>9.1f}{r['cpu_seconds']:>9.1f}"
            f"{r['cpu_seconds'] / base['cpu_seconds']:>7.2f}"
            f"{r['peak_gib']:>7.2f}{r['peak_gib'] / base['peak_gib']:>7.2f}"
            f"{r['n_relevance']:>6}{r['error']:>8.4f}{r['log_evidence']:>12.1f}{r['load']:>10}"
            f"  {passes}"
            f"  {','.join(r['warnings'])}"
        )


if __name__ == "__main__":
    main()
