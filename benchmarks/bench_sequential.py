"""Benchmark of the sequential evidence engine against fastrvm (C++ SparseBayes) and fit_mackay.

Sinc data (Tipping 2001: ``sin(x)/x`` on [-10, 10], noise 0.1), rbf kernel
``exp(-gamma (x - x')^2)`` with the same ``gamma`` for everyone, plus a bias column. Both engines
get the same design matrix and the same starting noise (10% of the targets' standard deviation,
SparseBayes' default).

For each size the script prints the fit time (median of ``--repeats`` runs, one engine after the
other), the peak resident memory of the process during one fit (the design matrix included;
the high-water mark is reset just before the fit), the extra memory our engine allocates
(tracemalloc peak), the numbers of relevance vectors, the log evidence (ours computed by
``gaussian_posterior`` from each engine's alphas) and the RMSE on 1000 noise-free test points.
Each size runs in its own subprocess so that memory peaks do not mix.

    python benchmarks/bench_sequential.py            # full sizes (several minutes)
    python benchmarks/bench_sequential.py --quick    # smoke run (seconds)

``--estimators`` runs another table instead, the estimators end to end (kernel, normalisation,
engine, results), both in this process and interleaved (ours, fastrvm, fastrvm, ours, ...: a
machine shared with other work slows both alike): ``RVR(kernel="rbf", gamma=1/9)`` against
``fastrvm.RVR(kernel="rbf", gamma=1/9, fit_intercept=True)`` (the same model: an rbf column per
training point and a bias) on ``make_sinc`` at each ``--est-sizes`` N, medians of ``--repeats``,
then ``RVR`` alone at ``--est-big`` rows (its time and peak resident memory, in a subprocess of
its own; fastrvm's N x N kernel and copies do not fit there). Each row also gives the time of
the engine's shared-precision check (``restart_from_shared_bound``) within our fit, and the ratio
of the two fits' CPU times (the process's, every thread counted: on a machine shared with other
work it moves less than the wall-time ratio); the load average of the machine is printed before
and after.

    python benchmarks/bench_sequential.py --estimators
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import tracemalloc

import numpy as np
from sklearn.metrics.pairwise import rbf_kernel

GAMMA = 1.0 / 9.0  # rbf width 3 on the sinc inputs


def make_data(n: int, seed: int):
    try:
        from bayes_rvm.datasets import make_sinc
    except ImportError:  # pragma: no cover - only before datasets.py exists
        rng = np.random.default_rng(seed)
        X = np.linspace(-10, 10, n)[:, None]
        return X, np.sinc(X[:, 0] / np.pi) + 0.1 * rng.standard_normal(n)
    return make_sinc(n, noise=0.1, random_state=seed, shuffle=False)


def design(X: np.ndarray, centres: np.ndarray, chunk: int = 2000) -> np.ndarray:
    """Kernel columns on ``centres`` plus a bias column, built in row blocks (no N x N copy)."""
    Phi = np.empty((X.shape[0], centres.shape[0] + 1))
    for s in range(0, X.shape[0], chunk):
        Phi[s : s + chunk, :-1] = rbf_kernel(X[s : s + chunk], centres, gamma=GAMMA)
    Phi[:, -1] = 1.0
    return Phi


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _peak_gb() -> float:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1e6
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def worker(cfg: dict) -> dict:
    from bayes_rvm.evidence import fit_mackay, fit_sequential, gaussian_posterior

    n, m, seed = cfg["n"], cfg["m"], cfg["seed"]
    X, y = make_data(n, seed)
    rng = np.random.default_rng(seed + 1)
    centres = X if m is None else X[np.sort(rng.choice(n, m, replace=False))]
    Phi = design(X, centres)
    Xt = rng.uniform(-10, 10, (1000, 1))
    ft = np.sinc(Xt[:, 0] / np.pi)
    noise_std = 0.1 * float(np.std(y))
    tt = float(y @ y)
    out = {"n": n, "m": Phi.shape[1], "phi_gb": Phi.nbytes / 1e9, "engines": {}}

    def summarise(idx, alpha, beta, mean):
        order = np.argsort(idx)
        idx, alpha, mean = idx[order], alpha[order], mean[order]
        P = Phi[:, idx]
        ev = gaussian_posterior(P.T @ P, (P.T @ y)[:, None], tt, n, alpha, beta).log_evidence
        cols = design(Xt, centres)[:, idx]
        rmse = float(np.sqrt(np.mean((cols @ mean - ft) ** 2)))
        return {"n_rv": int(idx.size), "log_evidence": float(ev), "rmse": rmse}

    def run_ours():
        return fit_sequential(Phi, y, beta_init=1.0 / noise_std**2)

    def run_fastrvm():
        from fastrvm import _sparsebayes_bindings as sb

        engine = sb.SparseBayes(
            sb.Likelihood.Gaussian, 10_000, False, False, False, True, False, noise_std
        )
        return engine.inference(Phi, y)

    def run_mackay():
        return fit_mackay(Phi, y, beta_init=1.0 / noise_std**2, max_iter=100_000)

    runners = {"ours": run_ours, "fastrvm": run_fastrvm, "mackay": run_mackay}
    engines = cfg["engines"]
    times: dict[str, list[float]] = {e: [] for e in engines}
    results = {}
    for e in engines:
        # One engine at a time: fastrvm's OpenBLAS threads spin for a while after each call and
        # would slow whatever runs next on a 2-core machine.
        time.sleep(1.0)
        for _ in range(1 if e == "mackay" else cfg["repeats"]):  # mackay: minutes per run
            t0 = time.perf_counter()
            results[e] = runners[e]()
            times[e].append(time.perf_counter() - t0)
    for e in engines:
        res = results[e]
        if e == "fastrvm":
            idx = np.asarray(res["relevant_idx"]).ravel()
            # fastrvm's alpha is on its unit-norm column scale: times the column norm^4.
            alpha = np.asarray(res["alpha"]).ravel() * np.linalg.norm(Phi[:, idx], axis=0) ** 4
            s = summarise(idx, alpha, float(res["beta"]), np.asarray(res["mean"]).ravel())
            s["n_iter"] = int(res["n_iter"])
        else:
            s = summarise(res.active, res.alpha[res.active], res.beta, res.mean[:, 0])
            s["n_iter"] = int(res.n_iter)
            s["converged"] = bool(res.converged)
        s["time"] = float(np.median(times[e]))
        s["times"] = [float(t) for t in times[e]]
        if e != "mackay":
            _reset_peak()
            runners[e]()
            s["peak_gb"] = _peak_gb()
        if e == "ours":
            tracemalloc.start()
            run_ours()
            s["extra_mb"] = tracemalloc.get_traced_memory()[1] / 1e6
            tracemalloc.stop()
        out["engines"][e] = s
    return out


def _load() -> str:
    try:
        with open("/proc/loadavg") as fh:
            return " ".join(fh.read().split()[:3])
    except OSError:
        return "n/a"


def _guard_timer() -> list[float]:
    """Times of the sequential engine's shared-precision check, appended as fits run."""
    from bayes_rvm.evidence import sequential

    spent: list[float] = []
    check = sequential._Sequential.restart_from_shared_bound

    def timed(self):
        t0 = time.perf_counter()
        try:
            return check(self)
        finally:
            spent.append(time.perf_counter() - t0)

    sequential._Sequential.restart_from_shared_bound = timed
    return spent


def _design_timer() -> list[float]:
    """Times of the design's build (``KernelBasis.transform``) and column normalisation."""
    from bayes_rvm.basis.kernels import KernelBasis
    from bayes_rvm.evidence import problem

    spent: list[float] = []

    def timed(fn):
        def run(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent.append(time.perf_counter() - t0)

        return run

    KernelBasis.transform = timed(KernelBasis.transform)
    problem.normalise_columns = timed(problem.normalise_columns)
    return spent


def estimator_worker(n: int) -> dict:
    """``RVR(kernel="rbf", gamma=1/9)`` on ``make_sinc(n)``: time and peak memory of one fit."""
    from bayes_rvm.datasets import make_sinc
    from bayes_rvm.estimators.regressor import RVR

    X, y = make_sinc(n, noise=0.1, random=True, random_state=n, shuffle=False)
    RVR(kernel="rbf", gamma=GAMMA).fit(
        *make_sinc(3000, noise=0.1, random_state=0, shuffle=False)
    )  # warm-up
    guard = _guard_timer()
    _reset_peak()
    t0, c0 = time.perf_counter(), time.process_time()
    model = RVR(kernel="rbf", gamma=GAMMA).fit(X, y)
    seconds = time.perf_counter() - t0
    return {
        "n": n,
        "time": seconds,
        "cpu": time.process_time() - c0,
        "peak_gb": _peak_gb(),
        "guard": sum(guard),
        "n_rv": int(model.n_relevance_vectors_),
    }


def estimator_table(sizes, repeats: int, big_n: int) -> None:
    """Our estimator against fastrvm's, interleaved in one process (see the module docstring)."""
    import fastrvm

    from bayes_rvm.datasets import make_sinc
    from bayes_rvm.estimators.regressor import RVR

    print(f"load average before: {_load()}")
    guard = _guard_timer()
    design = _design_timer()
    fits = {
        "ours": lambda X, y: RVR(kernel="rbf", gamma=GAMMA).fit(X, y),
        "fastrvm": lambda X, y: fastrvm.RVR(kernel="rbf", gamma=GAMMA, fit_intercept=True).fit(
            X, y
        ),
    }
    head = (
        f"{'N':>6} {'bayes_rvm s':>12} {'fastrvm s':>10} {'ratio':>6} {'CPU ratio':>9} "
        f"{'guard ms':>9} {'design ms':>10} {'#RV ours':>8} {'#RV fastrvm':>11}"
    )
    print(head)
    print("-" * len(head))
    for n in sizes:
        X, y = make_sinc(n, noise=0.1, random=True, random_state=n, shuffle=False)
        models = {name: fit(X, y) for name, fit in fits.items()}  # warm-up
        times: dict[str, list[float]] = {name: [] for name in fits}
        cpu: dict[str, list[float]] = {name: [] for name in fits}
        guard.clear()
        design.clear()
        for i in range(repeats):
            for name in ("ours", "fastrvm") if i % 2 == 0 else ("fastrvm", "ours"):
                time.sleep(0.2)  # let BLAS threads left spinning by the other go idle
                t0, c0 = time.perf_counter(), time.process_time()
                fits[name](X, y)
                times[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)
        ours, fast = float(np.median(times["ours"])), float(np.median(times["fastrvm"]))
        cpu_ratio = float(np.median(cpu["ours"]) / np.median(cpu["fastrvm"]))
        print(
            f"{n:>6} {ours:>12.4f} {fast:>10.4f} {ours / fast:>6.2f} {cpu_ratio:>9.2f} "
            f"{1e3 * float(np.median(guard)):>9.1f} {1e3 * sum(design) / repeats:>10.1f} "
            f"{models['ours'].n_relevance_vectors_:>8} "
            f"{models['fastrvm'].n_relevance_:>11}",
            flush=True,
        )
    print(
        "ratio = bayes_rvm time / fastrvm time (median of each); CPU ratio = the same of the "
        "process's CPU time (all threads), steadier than wall time on a busy machine; guard = "
        "shared-precision check; design = kernel design and column normalisation (mean per fit)"
    )
    if big_n > 0:
        proc = subprocess.run(
            [sys.executable, __file__, "--estimator-worker", str(big_n)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            print(f"  ! N={big_n} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        else:
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            print(
                f"N={r['n']}: bayes_rvm {r['time']:.2f} s ({r['cpu']:.2f} s CPU), peak resident "
                f"memory {r['peak_gb']:.2f} GB (the design alone: "
                f"{8e-9 * r['n'] * (r['n'] + 1):.2f} GB), guard {1e3 * r['guard']:.0f} ms, "
                f"{r['n_rv']} relevance vectors"
            )
    print(f"load average after: {_load()}")


def spawn(cfg: dict) -> dict | None:
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(cfg)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        print(f"  ! {cfg} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def engine_differences(n_problems: int, n: int = 100) -> np.ndarray:
    """Sequential minus MacKay log evidence, each from its own start, on sinc and Friedman data.

    The evidence is multimodal, so single problems may go either way; the distribution shows
    whether one engine is systematically worse.
    """
    import warnings

    from sklearn.datasets import make_friedman1, make_friedman2, make_friedman3

    from bayes_rvm.evidence import fit_mackay, fit_sequential

    diffs = []
    for seed in range(n_problems):
        if seed % 2 == 0:
            X, y = make_data(n, 1000 + seed)
            gamma = GAMMA
        else:
            maker = (make_friedman1, make_friedman2, make_friedman3)[seed // 2 % 3]
            X, y = maker(n_samples=n, noise=0.0, random_state=seed)
            y = y + np.std(y) / 3 * np.random.default_rng(seed).standard_normal(n)
            X = (X - X.mean(0)) / X.std(0)
            gamma = 1.0 / X.shape[1]
        Phi = np.c_[rbf_kernel(X, X, gamma=gamma), np.ones(n)]
        Phi /= np.linalg.norm(Phi, axis=0)
        y = y / np.sqrt(np.mean(y**2))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            seq = fit_sequential(Phi, y)
            mk = fit_mackay(Phi, y, max_iter=20_000)
        diffs.append(seq.log_evidence - mk.log_evidence)
    return np.asarray(diffs)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[1000, 2000, 4000, 20000],
        help="N for full-kernel designs (M = N + 1)",
    )
    ap.add_argument(
        "--big-n", type=int, default=100_000, help="N of the candidate-subset design (0: skip it)"
    )
    ap.add_argument("--big-m", type=int, default=2000, help="number of random candidate centres")
    ap.add_argument(
        "--mackay-n", type=int, default=2000, help="N for the fit_mackay comparison (0: skip it)"
    )
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--problems",
        type=int,
        default=30,
        help="sinc / Friedman problems (N=100) for the sequential-vs-MacKay evidence comparison",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-fastrvm", action="store_true", help="skip fastrvm")
    ap.add_argument("--quick", action="store_true", help="tiny smoke run")
    ap.add_argument(
        "--estimators", action="store_true", help="the end-to-end estimator table instead"
    )
    ap.add_argument("--est-sizes", type=int, nargs="+", default=[1000, 2000, 4000])
    ap.add_argument("--est-big", type=int, default=20_000, help="N of RVR alone (0: skip it)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--estimator-worker", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    if args.estimator_worker:
        print(json.dumps(estimator_worker(args.estimator_worker)))
        return
    if args.estimators:
        if args.quick:
            args.est_sizes, args.est_big, args.repeats = [300, 600], 2000, 2
        estimator_table(args.est_sizes, args.repeats, args.est_big)
        return
    if args.quick:
        args.sizes, args.big_n, args.big_m = [300, 600], 5000, 200
        args.mackay_n, args.repeats, args.problems = 300, 2, 4

    base = ["ours"] + ([] if args.no_fastrvm else ["fastrvm"])
    configs = [{"n": n, "m": None, "engines": list(base)} for n in args.sizes]
    if args.big_n > 0:
        configs.append({"n": args.big_n, "m": args.big_m, "engines": list(base)})
    for cfg in configs:
        if cfg["n"] == args.mackay_n and cfg["m"] is None:
            cfg["engines"].append("mackay")
    if args.mackay_n > 0 and not any("mackay" in c["engines"] for c in configs):
        configs.append({"n": args.mackay_n, "m": None, "engines": ["ours", "mackay"]})

    head = (
        f"{'N':>7} {'M':>6} {'engine':>8} {'time s':>9} {'ratio':>6} {'peak GB':>8} "
        f"{'extra MB':>9} {'#RV':>4} {'steps':>6} {'log evidence':>14} {'test RMSE':>10}"
    )
    print(head)
    print("-" * len(head))
    rows = []
    for cfg in configs:
        cfg = {**cfg, "seed": args.seed, "repeats": args.repeats}
        res = spawn(cfg)
        if res is None:
            continue
        rows.append(res)
        ours = res["engines"]["ours"]["time"]
        for e, s in res["engines"].items():
            ratio = ours / s["time"] if e != "ours" else 1.0
            print(
                f"{res['n']:>7} {res['m']:>6} {e:>8} {s['time']:>9.3f} {ratio:>6.2f} "
                f"{s.get('peak_gb', float('nan')):>8.2f} {s.get('extra_mb', float('nan')):>9.1f} "
                f"{s['n_rv']:>4} {s['n_iter']:>6} {s['log_evidence']:>14.6f} {s['rmse']:>10.4f}",
                flush=True,
            )
    print(
        "\nratio = our time / that engine's time (below 1: we are faster); peak GB includes the "
        "design matrix (phi GB: " + ", ".join(f"{r['n']}: {r['phi_gb']:.2f}" for r in rows) + ")"
    )
    full = [r for r in rows if r["m"] == r["n"] + 1]
    if len(full) >= 2:
        n = np.log([r["n"] for r in full])
        for e in base:
            t = np.log([r["engines"][e]["time"] for r in full])
            slope = np.polyfit(n, t, 1)[0]
            print(f"growth exponent of fit time in N ({e}, full kernel): {slope:.2f}")
    if args.problems > 0:
        d = engine_differences(args.problems)
        q = np.quantile(d, [0, 0.25, 0.5, 0.75, 1])
        print(
            f"\nsequential minus MacKay log evidence (nats) on {d.size} problems (N=100, half "
            "sinc, half Friedman #1-#3), each engine from its own start: "
            "min / 25% / median / 75% / max = "
            + " / ".join(f"{v:+.3g}" for v in q)
            + f"; sequential higher on {np.sum(d > 1e-6)}, equal on {np.sum(np.abs(d) <= 1e-6)}"
        )


if __name__ == "__main__":
    main()
