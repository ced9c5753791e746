"""Speed check: fail loudly when the default type-II fit or the first MCMC fit got slower.

Two ratios, each measured side by side in this one process against fastrvm's fit of the same
problem (SparseBayes in C++), so that the machine's speed divides out. The figures are CPU
seconds (every thread of the process; BLAS on one thread for the type-II and fastrvm fits), so
that other processes on a shared machine do not move them; wall seconds are printed beside.

``type2_over_fastrvm``
    ``RVR(kernel="rbf", gamma=1/9)`` on sinc N = 1000 (width 3, noise 0.1) against
    ``fastrvm.RVR`` on the same data: median of 7 interleaved pairs of samples (4 fits each).
``mcmc_first_over_fastrvm``
    The process's first ``RVR(inference="mcmc", gamma=1/9)`` fit at the estimator's defaults on
    sinc N = 100 (the compile caches warm: the on-disk caches of PyTensor and numba that an
    earlier run, e.g. the test suite, filled), against the same fastrvm median.

The recorded ratios live in ``benchmarks/speed_check.json``. The exit status is 1, with a
message naming the figure, when a ratio exceeds 1.5 times its recorded value; 0 otherwise.
``--record`` measures and writes the file instead (after a change that is meant to move them;
run it on a quiet machine)::

    .venv/bin/python benchmarks/speed_check.py            # what .ci/run runs
    .venv/bin/python benchmarks/speed_check.py --record   # rewrite the recorded ratios
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
import warnings
from pathlib import Path

RECORD = Path(__file__).with_name("speed_check.json")
#: A ratio this many times its recorded value fails the check.
TOLERANCE = 1.5
GAMMA = 1.0 / 3.0**2
PAIRS = 7
#: Fits in one timed sample of the type-II and fastrvm fits (each ~50 ms of CPU).
REPEAT = 4


def _cpu() -> float:
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _timed(fit, repeat: int = 1) -> tuple[float, float]:
    """(wall, CPU) seconds of one call, the mean of ``repeat``; CPU counts every thread and any
    child process (the kernel counts it in ticks of a few ms: short fits are repeated)."""
    wall, cpu = time.perf_counter(), _cpu()
    for _ in range(repeat):
        fit()
    return (time.perf_counter() - wall) / repeat, (_cpu() - cpu) / repeat


def measure() -> dict[str, float]:
    """The two ratios and the times behind them (CPU seconds; wall seconds as ``*_wall_s``)."""
    import fastrvm
    import nutpie  # noqa: F401  (imported by the MCMC fit; not part of its time)
    from threadpoolctl import threadpool_limits

    from bayes_rvm.datasets import make_sinc
    from bayes_rvm.estimators.regressor import RVR

    X, y = make_sinc(1000, noise=0.1, random=True, random_state=0)
    type2 = lambda: RVR(kernel="rbf", gamma=GAMMA).fit(X, y)  # noqa: E731
    peer = lambda: fastrvm.RVR(kernel="rbf", gamma=GAMMA, fit_intercept=True).fit(X, y)  # noqa: E731
    t_type2, t_peer = [], []
    with threadpool_limits(1):  # one core each, so that CPU time is the work done
        type2(), peer()  # first calls: imports and lazily built tables, in neither figure
        for _ in range(PAIRS):
            t_type2.append(_timed(type2, REPEAT))
            t_peer.append(_timed(peer, REPEAT))
    Xs, ys = make_sinc(100, noise=0.1, random_state=0)
    mcmc = RVR(kernel="rbf", gamma=GAMMA, inference="mcmc", random_state=0)
    t_mcmc = _timed(lambda: mcmc.fit(Xs, ys, progressbar=False))
    with threadpool_limits(1):
        for _ in range(PAIRS):  # fastrvm again after the MCMC fit: the load of both halves
            t_peer.append(_timed(peer, REPEAT))
    out = {"load": os.getloadavg()[0]}
    for name, times in (("type2", t_type2), ("fastrvm", t_peer), ("mcmc_first", [t_mcmc])):
        out[f"{name}_wall_s"] = statistics.median(t[0] for t in times)
        out[f"{name}_s"] = statistics.median(t[1] for t in times)
    out["type2_over_fastrvm"] = out["type2_s"] / out["fastrvm_s"]
    out["mcmc_first_over_fastrvm"] = out["mcmc_first_s"] / out["fastrvm_s"]
    return out


RATIOS = ("type2_over_fastrvm", "mcmc_first_over_fastrvm")


def check(got: dict[str, float], recorded: dict[str, float]) -> list[str]:
    """One line per ratio above ``TOLERANCE`` times its recorded value."""
    return [
        f"{name} is {got[name]:.3g}, {got[name] / recorded[name]:.2f}x the recorded "
        f"{recorded[name]:.3g} (allowed: {TOLERANCE}x)"
        for name in RATIOS
        if got[name] > TOLERANCE * recorded[name]
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="write the measured ratios")
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the short MCMC run's diagnostics are not checked here
        got = measure()
    print(
        "speed_check: CPU (wall) seconds: type-II {type2_s:.3f} ({type2_wall_s:.3f}), fastrvm "
        "{fastrvm_s:.3f} ({fastrvm_wall_s:.3f}), first MCMC fit {mcmc_first_s:.2f} "
        "({mcmc_first_wall_s:.2f}); load {load:.1f}; CPU ratios: type-II/fastrvm "
        "{type2_over_fastrvm:.3f}, first MCMC/fastrvm {mcmc_first_over_fastrvm:.1f}".format(**got)
    )
    if args.record:
        RECORD.write_text(json.dumps({k: round(v, 4) for k, v in got.items()}, indent=2) + "\n")
        print(f"speed_check: recorded in {RECORD.name}")
        return 0
    recorded = json.loads(RECORD.read_text())
    failed = check(got, recorded)
    for line in failed:
        print(f"speed_check: SLOWER: {line}", file=sys.stderr)
    print("speed_check: " + ("FAILED" if failed else "ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
