"""BLAS threads: one for the estimators' thin algebra, all of the process's for large blocks.

The estimators' algebra is on small or thin matrices, where a second BLAS thread costs more in
hand-offs than it gains; the passes over large data (a statistics pass, a fused kernel block) are
BLAS-3 or parallel loops that run at twice the rate on two cores.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

__all__ = ["all_blas_threads", "one_blas_thread", "process_threads", "single_blas_thread"]


@functools.cache
def _blas_controller():
    # Built once, after NumPy and SciPy have loaded their BLAS libraries.
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


@functools.cache
def process_threads() -> int:
    """The BLAS threads this process had before any guard of ours: the threads a large block
    (a statistics pass, a fused kernel block) may use.

    Read once, when first asked, which is before the first guard: a Dask worker or a study's
    job limited to one thread by its environment stays at one.
    """
    counts = [pool["num_threads"] for pool in _blas_controller().select(user_api="blas").info()]
    return max(counts, default=1)


def all_blas_threads():
    """Lift :func:`single_blas_thread` inside a guarded call, for BLAS-3 work on large blocks
    (a context manager): ``dsyrk`` on a block of the statistics pass runs at twice the rate on
    two cores.
    """
    return _blas_controller().limit(limits=process_threads(), user_api="blas")


def single_blas_thread():
    """Limit BLAS to one thread (a context manager) for the sequential engines.

    Their operands are thin (N x K, K x K) and their O(N M) matrix-vector products are
    memory-bound: a second thread gains little, while thread hand-offs on a busy 2-core machine
    made the small products and solves 10-100x slower (measured).
    """
    process_threads()  # read before the first limit
    return _blas_controller().limit(limits=1, user_api="blas")


def one_blas_thread(method: Callable) -> Callable:
    """Run ``method`` with BLAS limited to one thread (:func:`single_blas_thread`): the guard of
    every public entry point that does dense algebra (fit, predict, ...).

    The estimators' algebra is on small or thin matrices (the width search's eigendecompositions,
    the engines' products and solves, predictive variances): on a busy 2-core machine
    ``RVR().fit`` on 100 points took 1.9-2.2 s with the default BLAS threads against 0.1-0.17 s
    with one. The limit applies for the whole call, nested calls included.
    """

    @functools.wraps(method)
    def guarded(*args, **kwargs):
        with single_blas_thread():
            return method(*args, **kwargs)

    return guarded
