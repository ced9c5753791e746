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
engine, results): ``RVR(kernel="rbf", gamma=1/9)`` against
``fastrvm.RVR(kernel="rbf", gamma=1/9, fit_intercept=True)`` (the same model: an rbf column per
training point and a bias) on ``make_sinc(N, noise=0.1, random=True, random_state=0)`` at each
``--est-sizes`` N. Each estimator fits in a process of its own, as a user's fits run: sharing one
process, each one's allocations moved the other's page faults (fastrvm took 15.8 ms a fit at
N = 1000 alone and 20 ms between our fits). BLAS on one thread, CPU seconds of the process (every
thread counted, so that other work on a shared machine moves them less than wall time), in
``--pairs`` interleaved pairs of samples (ours then fastrvm, then the other way round; a sample
is the mean of enough fits to last ~0.1 s), the median of each and the median of the pairs'
ratios. Then, at each of those N, each alone in a fresh process without thread limits (the
kernel's threads as they come: see ``bayes_rvm.basis.blocks.PARALLEL_MIN_ENTRIES``), median
wall and CPU seconds per fit. Then both alone at ``--est-big`` rows, each in a subprocess of
its own and on the process's threads: CPU seconds (and the part of them spent in the system,
mostly the first touch of the design's fresh pages), wall seconds and peak resident memory
(fastrvm's N x N kernel and its copies: it is skipped where they would not fit in the memory
available). Each row also gives the CPU time of the engine's shared-precision check
(``restart_from_shared_bound``) and of the design (kernel and column normalisation) within our
fit; the load average of the machine is printed before and after.

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


def _proc_gb(path: str, field: str) -> float | None:
    """A field of a /proc status file, in GB (None where the file or field is missing)."""
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1e6
    except OSError:
        pass
    return None


def _peak_gb() -> float:
    peak = _proc_gb("/proc/self/status", "VmHWM")
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6 if peak is None else peak


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
    """CPU times of the sequential engine's shared-precision check, appended as fits run."""
    from bayes_rvm.evidence import sequential

    spent: list[float] = []
    check = sequential._Sequential.restart_from_shared_bound

    def timed(self):
        t0 = time.process_time()
        try:
            return check(self)
        finally:
            spent.append(time.process_time() - t0)

    sequential._Sequential.restart_from_shared_bound = timed
    return spent


def _design_timer() -> list[float]:
    """CPU times of the design's build (``KernelBasis.transform``) and column normalisation
    (``Problem.with_design``)."""
    from bayes_rvm.basis.kernels import KernelBasis
    from bayes_rvm.evidence import problem

    spent: list[float] = []

    def timed(fn):
        def run(*args, **kwargs):
            t0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent.append(time.process_time() - t0)

        return run

    KernelBasis.transform = timed(KernelBasis.transform)
    problem.Problem.with_design = timed(problem.Problem.with_design)
    return spent


def _cpu() -> float:
    """CPU seconds of this process, every thread and any child counted."""
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _system() -> float:
    """System CPU seconds of this process: mostly the kernel's first touch of fresh pages."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def _estimator_fits():
    """The two estimators' fits of ``(X, y)``, by name."""
    import fastrvm

    from bayes_rvm.estimators.regressor import RVR

    return {
        "ours": lambda X, y: RVR(kernel="rbf", gamma=GAMMA).fit(X, y),
        "fastrvm": lambda X, y: fastrvm.RVR(kernel="rbf", gamma=GAMMA, fit_intercept=True).fit(
            X, y
        ),
    }


def _sinc(n: int):
    from bayes_rvm.datasets import make_sinc

    return make_sinc(n, noise=0.1, random=True, random_state=0)


def _available_gb() -> float:
    available = _proc_gb("/proc/meminfo", "MemAvailable")
    return float("inf") if available is None else available


#: fastrvm holds the N x N kernel and about three copies of it at its peak (measured: 4 x 8 N^2
#: bytes, bench_scale.PEER_COPIES).
FASTRVM_COPIES = 4


def estimator_worker(n: int, which: str) -> dict:
    """One fit of ``which`` ("ours" or "fastrvm") on ``make_sinc(n)`` as a user's runs (the
    process's threads): CPU, system and wall seconds, peak resident memory."""
    fit = _estimator_fits()[which]
    X, y = _sinc(n)
    # Imports, compiled kernels (ours: numba's, from N = 2048) and lazily built tables, in
    # neither figure.
    fit(*_sinc(2100))
    guard = _guard_timer() if which == "ours" else []
    _reset_peak()
    t0, c0, s0 = time.perf_counter(), _cpu(), _system()
    model = fit(X, y)
    seconds, cpu, system = time.perf_counter() - t0, _cpu() - c0, _system() - s0
    n_rv = model.n_relevance_vectors_ if which == "ours" else model.n_relevance_
    return {
        "n": n,
        "which": which,
        "time": seconds,
        "cpu": cpu,
        "system": system,
        "peak_gb": _peak_gb(),
        "guard": sum(guard),
        "n_rv": int(n_rv),
    }


def _warmed_up(fit, X, y):
    """``(model, repeat)``: a first fit (imports, compiled kernels, lazily built tables), and
    how many fits make a sample of about 0.1 s, timed on a second."""
    model = fit(X, y)
    t0 = time.perf_counter()
    fit(X, y)
    return model, max(1, int(0.1 / max(time.perf_counter() - t0, 1e-3)))


def user_process_worker(n: int, which: str) -> dict:
    """``which`` alone on ``make_sinc(n)`` in a process without thread limits, as a user's
    (numba's and BLAS's threads as they come): median wall and CPU seconds per fit."""
    import statistics

    fit = _estimator_fits()[which]
    X, y = _sinc(n)
    _, repeat = _warmed_up(fit, X, y)
    wall, cpu = [], []
    for _ in range(7):
        t0, c0 = time.perf_counter(), _cpu()
        for _ in range(repeat):
            fit(X, y)
        wall.append((time.perf_counter() - t0) / repeat)
        cpu.append((_cpu() - c0) / repeat)
    return {"wall": statistics.median(wall), "cpu": statistics.median(cpu)}


def sampler_worker(n: int, which: str) -> None:
    """Fit ``which`` on ``make_sinc(n)`` with one BLAS thread, a sample per line read.

    Prints the fits per sample (enough to last ~0.1 s) once warmed up, then answers each
    non-empty line of its input with one sample (CPU, user CPU and wall seconds per fit), and
    an empty line with the fit's relevance vectors and, for ours, the median CPU seconds of the
    shared-precision check and the mean of the design per fit.
    """
    import statistics

    from threadpoolctl import threadpool_limits

    fit = _estimator_fits()[which]
    X, y = _sinc(n)
    guard = _guard_timer() if which == "ours" else []
    design = _design_timer() if which == "ours" else []
    with threadpool_limits(1):  # one core, so that CPU time is the work done
        model, repeat = _warmed_up(fit, X, y)
        guard.clear()
        design.clear()
        _say({"repeat": repeat})
        n_fits = 0
        for line in sys.stdin:
            if not line.strip():
                break
            t0, c0, s0 = time.perf_counter(), _cpu(), _system()
            for _ in range(repeat):
                fit(X, y)
            cpu = (_cpu() - c0) / repeat
            system = (_system() - s0) / repeat
            n_fits += repeat
            sample = {"cpu": cpu, "user": cpu - system, "wall": (time.perf_counter() - t0) / repeat}
            _say(sample)
    n_rv = model.n_relevance_vectors_ if which == "ours" else model.n_relevance_
    _say(
        {
            "n_rv": int(n_rv),
            "guard": statistics.median(guard) if guard else float("nan"),
            "design": sum(design) / max(n_fits, 1) if design else float("nan"),
        }
    )


#: Marks the sampler's answers among whatever else the libraries may print.
_ANSWER = "@@ "


def _say(message: dict) -> None:
    print(_ANSWER + json.dumps(message), flush=True)


def _answer(proc: subprocess.Popen, name: str) -> dict:
    """The sampler's next answer; a RuntimeError naming it where it stopped instead."""
    for line in proc.stdout:
        if line.startswith(_ANSWER):
            return json.loads(line[len(_ANSWER) :])
    raise RuntimeError(f"the {name} sampler stopped (exit status {proc.wait()}); see its stderr")


def _big_fit(n: int, which: str) -> dict | None:
    if which == "fastrvm" and FASTRVM_COPIES * 8e-9 * n * n > 0.8 * _available_gb():
        print(
            f"  fastrvm at N={n} skipped: its {FASTRVM_COPIES} N x N matrices "
            f"({FASTRVM_COPIES * 8e-9 * n * n:.1f} GB) would not fit in the "
            f"{_available_gb():.1f} GB available"
        )
        return None
    # Address space capped at what is available now (and 2 GB for the libraries' reservations),
    # so that a peer that needs more fails here instead of pushing other work out of memory.
    cap = int((_available_gb() + 2.0) * 1e9)
    proc = subprocess.run(
        [sys.executable, __file__, "--estimator-worker", str(n), which],
        capture_output=True,
        text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap)),
    )
    if proc.returncode != 0:
        print(f"  ! {which} at N={n} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def estimator_table(sizes, pairs: int, big_n: int) -> None:
    """Our estimator against fastrvm's, each in a process of its own (see the module docstring)."""
    import statistics

    print(f"load average before: {_load()}")
    head = (
        f"{'N':>6} {'ours CPU s':>11} {'fastrvm CPU s':>13} {'ratio':>6} {'pair ratio':>10} "
        f"{'user ratio':>10} {'ours wall s':>11} {'guard ms':>9} {'design ms':>10} "
        f"{'#RV ours':>8} {'#RV fastrvm':>11}"
    )
    print(head)
    print("-" * len(head))
    names = ("ours", "fastrvm")
    for n in sizes:
        procs = {
            name: subprocess.Popen(
                [sys.executable, __file__, "--sampler", str(n), name],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for name in names
        }
        try:
            for name, proc in procs.items():
                _answer(proc, name)  # warmed up
            samples: dict[str, list[dict]] = {name: [] for name in names}
            for i in range(pairs):
                for name in names if i % 2 == 0 else names[::-1]:
                    procs[name].stdin.write("sample\n")
                    procs[name].stdin.flush()
                    samples[name].append(_answer(procs[name], name))
            info = {}
            for name, proc in procs.items():
                proc.stdin.write("\n")
                proc.stdin.flush()
                info[name] = _answer(proc, name)
        except (RuntimeError, BrokenPipeError) as err:
            print(f"  ! N={n}: {err}", flush=True)
            continue
        finally:
            for proc in procs.values():
                proc.kill()
                proc.wait()

        def median(name, key, samples=samples):
            return statistics.median(s[key] for s in samples[name])

        ours, fast = median("ours", "cpu"), median("fastrvm", "cpu")
        pair = statistics.median(
            a["cpu"] / b["cpu"] for a, b in zip(samples["ours"], samples["fastrvm"], strict=True)
        )
        user_ratio = median("ours", "user") / median("fastrvm", "user")
        print(
            f"{n:>6} {ours:>11.4f} {fast:>13.4f} {ours / fast:>6.2f} {pair:>10.2f} "
            f"{user_ratio:>10.2f} {median('ours', 'wall'):>11.4f} "
            f"{1e3 * info['ours']['guard']:>9.1f} {1e3 * info['ours']['design']:>10.1f} "
            f"{info['ours']['n_rv']:>8} {info['fastrvm']['n_rv']:>11}",
            flush=True,
        )
    print(
        f"CPU seconds per fit, median of {pairs} interleaved samples, each estimator in a process "
        "of its own; ratio = ours / fastrvm of the medians, pair ratio = median of the samples' "
        "ratios, user ratio = the ratio of the medians without system time (fastrvm's first "
        "touch of fresh pages at every fit); guard = the engine's shared-precision check, "
        "design = kernel design and column normalisation (CPU per fit)"
    )
    for n in sizes:
        got = {}
        for which in names:
            proc = subprocess.run(
                [sys.executable, __file__, "--user-process", str(n), which],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                print(f"  ! {which} at N={n} alone failed:\n{proc.stderr[-2000:]}")
                break
            got[which] = json.loads(proc.stdout.strip().splitlines()[-1])
        else:
            ours, fast = got["ours"], got["fastrvm"]
            print(
                f"N={n}, each alone in a process without thread limits (a user's): ours "
                f"{1e3 * ours['wall']:.1f} ms wall, {1e3 * ours['cpu']:.1f} ms CPU; fastrvm "
                f"{1e3 * fast['wall']:.1f} ms wall, {1e3 * fast['cpu']:.1f} ms CPU; wall ratio "
                f"{ours['wall'] / fast['wall']:.2f}",
                flush=True,
            )
    if big_n > 0:
        for which in names:
            r = _big_fit(big_n, which)
            if r is not None:
                print(
                    f"N={r['n']} {which}: {r['cpu']:.2f} s CPU, of which {r['system']:.2f} s in "
                    f"the system (page faults), {r['time']:.2f} s wall; peak "
                    f"resident memory {r['peak_gb']:.2f} GB, {r['n_rv']} relevance vectors"
                    + (f", guard {1e3 * r['guard']:.0f} ms" if which == "ours" else ""),
                    flush=True,
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
    ap.add_argument("--pairs", type=int, default=7, help="interleaved pairs (--estimators)")
    ap.add_argument("--estimator-worker", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--user-process", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--sampler", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    if args.user_process:
        n, which = args.user_process
        print(json.dumps(user_process_worker(int(n), which)))
        return
    if args.sampler:
        n, which = args.sampler
        sampler_worker(int(n), which)
        return
    if args.estimator_worker:
        n, which = args.estimator_worker
        print(json.dumps(estimator_worker(int(n), which)))
        return
    if args.estimators:
        if args.quick:
            args.est_sizes, args.est_big, args.pairs = [300, 600], 2000, 2
        estimator_table(args.est_sizes, args.pairs, args.est_big)
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
