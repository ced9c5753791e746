"""Large blocks of a stationary kernel, fused and multi-threaded (numba).

scikit-learn's ``rbf_kernel`` builds squared distances by a matrix product ``X C'`` and then
exponentiates: on low-dimensional inputs that product has an inner dimension of 2 or 3, runs far
below BLAS's rate and allocates two temporaries of the block's size. For a design of a million
rows against 2000 centres it took 26 s of a 29 s statistics pass (measured, 2-D inputs). One
fused loop, parallel over rows and writing straight into the caller's block, takes about 3 s on
two cores and computes each distance directly (no cancellation in ``|x|^2 + |c|^2 - 2 x'c``).

The exponential is most of that loop's work, and a call of the C library's ``exp`` per value
runs one value at a time. :func:`exp_nonpositive` is fdlibm's exponential (the reduction
``x = n ln 2 + r`` in two parts and its rational approximation on ``|r| <= ln 2 / 2``, an error
below one unit in the last place) written as loops without calls or branches, which the compiler
runs four values at a time on AVX2: values within one unit in the last place of NumPy's, at
about half the cost per value.

:meth:`~bayes_rvm.basis.kernels.KernelBasis.transform` calls the kernel loop, only for blocks of at
least :data:`~bayes_rvm.basis.kernels.FUSED_MIN_ENTRIES` (fits below N = 1000 never import
numba); the column passes (:func:`column_peaks`, :func:`column_squares`,
:func:`divide_columns`) normalise such designs once the module is loaded
(:func:`~bayes_rvm.evidence.problem.normalise_columns`).
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["column_peaks", "column_squares", "divide_columns", "stationary_block"]


#: fdlibm's ``e_exp.c``: ``ln 2`` in two parts (the first with 32 trailing zero bits, so that
#: ``n * _LN2_HI`` is exact for every ``|n| < 2^20``) and the coefficients of ``R(r^2)``.
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_P1 = 1.66666666666666019037e-01
_P2 = -2.77777777770155933842e-03
_P3 = 6.61375632143793436117e-05
_P4 = -1.65339022054652515390e-06
_P5 = 4.13813679705723846039e-08
_LOG2E = 1.4426950408889634
#: ``1.5 * 2^52``: ``(y + _SHIFT) - _SHIFT`` rounds ``y`` to an integer, and the low bits of
#: ``y + _SHIFT`` hold that integer (no float-to-integer conversion, which AVX2 lacks).
_SHIFT = 6755399441055744.0
_SHIFT_BITS = int(np.float64(_SHIFT).view(np.int64))
#: Below this ``exp`` is 0 in float64 (the smallest subnormal is ``exp(-744.44)``).
_EXP_FLOOR = -746.0
#: Rows per task of the parallel loop (the tasks' scratch rows are allocated once each).
_ROWS_PER_TASK = 64
#: Blocks of fewer values run on one thread. After a parallel loop the OpenMP workers spin for
#: a while: a fit's rbf design of sinc (one BLAS thread for the engine) cost 7-10 ms more CPU on
#: two threads than on one at N = 1000-4000, for 0.7 ms less wall time at N = 1000 (of 11),
#: 2.5 ms at N = 2000 (of 38) and 10 ms at N = 4000 (of 162). Where the second thread saves
#: little wall time for that CPU the block stays on one; the cut is a compromise (about
#: N = 1450 for a square design), kept low because the large-data passes run many blocks in a
#: row, which keep the workers busy, and blocks of their active columns can be small.
PARALLEL_MIN_ENTRIES = 2**21


@numba.njit(cache=True, nogil=True, error_model="numpy")
def exp_nonpositive(a, out, scale):  # pragma: no cover - compiled by numba
    """``out[j] = exp(a[j])`` for ``a[j] <= 0`` (1-D, contiguous; ``scale`` is scratch of the
    same size), within one unit in the last place, subnormal results and 0 included."""
    k = a.size
    for j in range(k):
        x = a[j] if a[j] > _EXP_FLOOR else _EXP_FLOOR
        shifted = x * _LOG2E + _SHIFT
        scale[j] = shifted
        n = shifted - _SHIFT
        hi = x - n * _LN2_HI
        lo = n * _LN2_LO
        r = hi - lo
        t = r * r
        c = r - t * (_P1 + t * (_P2 + t * (_P3 + t * (_P4 + t * _P5))))
        out[j] = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi)
    # 2^n in two factors 2^n1 2^(n - n1), each a normal number for n >= -1076: the product
    # rounds once, where it is subnormal, as a correctly scaled result does.
    bits = scale.view(np.int64)
    for j in range(k):
        n = bits[j] - _SHIFT_BITS
        half = n >> 1
        bits[j] = (half + 1023) << 52
        out[j] *= scale[j]
        bits[j] = (n - half + 1023) << 52
        out[j] *= scale[j]


@numba.njit(cache=True, parallel=True, nogil=True, error_model="numpy")
def _fill(X, C, gamma, l1, symmetric, out):  # pragma: no cover - compiled by numba
    n, p = X.shape
    k = C.shape[0]
    CT = np.ascontiguousarray(C.T)  # each feature's centre coordinates contiguous
    n_blocks = (n + _ROWS_PER_TASK - 1) // _ROWS_PER_TASK
    # With X == C, row block b needs only the columns from its first row on, and it copies
    # those right of its rows into the rows below, a square tile at a time (one tile's reads and
    # writes stay in the core's cache; no other task writes there, so one parallel loop does it
    # all). Blocks b and n_blocks - 1 - b share a task, so that the tasks' work is even.
    n_tasks = (n_blocks + 1) // 2 if symmetric else n_blocks
    for task in numba.prange(n_tasks):
        dist = np.empty(k)
        row = np.empty(k)
        scale = np.empty(k)
        for half in range(2 if symmetric else 1):
            b = n_blocks - 1 - np.int64(task) if half else np.int64(task)
            if half and b == task:
                continue
            first = b * _ROWS_PER_TASK if symmetric else 0
            last = min(n, (b + 1) * _ROWS_PER_TASK)
            m = k - first
            for i in range(b * _ROWS_PER_TASK, last):
                # Distances summed over features in order, as a loop over features per pair
                # (so that the (i, j) and (j, i) values are the same bits).
                dist[:m] = 0.0
                for d in range(p):
                    xd = X[i, d]
                    for j in range(m):
                        diff = xd - CT[d, first + j]
                        dist[j] += abs(diff) if l1 else diff * diff
                for j in range(m):
                    dist[j] *= -gamma
                exp_nonpositive(dist[:m], row[:m], scale[:m])
                for j in range(m):
                    out[i, first + j] = row[j]
            if symmetric:
                for left in range(last, k, _ROWS_PER_TASK):
                    for i in range(left, min(k, left + _ROWS_PER_TASK)):
                        for j in range(first, last):
                            out[i, j] = out[j, i]


def stationary_block(
    X: np.ndarray, C: np.ndarray, gamma: float, kernel: str, out: np.ndarray, *, threads: int
) -> None:
    """Write ``exp(-gamma d(x_i, c_j))`` into ``out`` (shape ``(len(X), len(C))``, any strides).

    ``d`` is the squared Euclidean distance for ``"rbf"`` and the L1 distance for
    ``"laplacian"`` (scikit-learn's conventions). ``threads`` bounds numba's threads, so that a
    process limited to one core (a Dask worker, a study's job) stays on one; blocks below
    :data:`PARALLEL_MIN_ENTRIES` values use one.
    """
    # The design of the training inputs on themselves (the default basis) is symmetric: half of
    # it is computed, the other half copied (the same bits: each distance is summed in the same
    # order either way).
    symmetric = X.shape == C.shape and out.shape[1] == C.shape[0] and np.array_equal(X, C)
    threads = threads if out.shape[0] * out.shape[1] >= PARALLEL_MIN_ENTRIES else 1
    previous = numba.get_num_threads()
    numba.set_num_threads(max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS)))
    try:
        _fill(
            np.ascontiguousarray(X, dtype=np.float64),
            np.ascontiguousarray(C, dtype=np.float64),
            float(gamma),
            kernel == "laplacian",
            symmetric,
            out,
        )
    finally:
        numba.set_num_threads(previous)


#: What :func:`_column_pass` does besides summing squares.
_SQUARES, _DIVIDE, _PEAKS = 0, 1, 2


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _column_pass(Phi, values, mode, squares):  # pragma: no cover - compiled by numba
    """``squares[j] += Phi[i, j]**2`` over the rows in order; first ``Phi[i, j] /= values[j]``
    where ``mode == _DIVIDE``, or also ``values[j] = max |Phi[i, j]|`` where ``mode == _PEAKS``
    (one function for the passes: one entry in numba's cache to load)."""
    if mode == _DIVIDE:
        for i in range(Phi.shape[0]):
            for j in range(Phi.shape[1]):
                x = Phi[i, j] / values[j]
                Phi[i, j] = x
                squares[j] += x * x
    elif mode == _PEAKS:
        for i in range(Phi.shape[0]):
            for j in range(Phi.shape[1]):
                x = Phi[i, j]
                values[j] = max(values[j], abs(x))
                squares[j] += x * x
    else:
        for i in range(Phi.shape[0]):
            for j in range(Phi.shape[1]):
                squares[j] += Phi[i, j] * Phi[i, j]


def column_squares(Phi: np.ndarray) -> np.ndarray:
    """The columns' sums of squares of a C-contiguous ``Phi``, summed over the rows in order:
    NumPy's ``einsum("ij,ij->j", Phi, Phi)`` to the bit, in one pass that the compiler
    vectorises."""
    squares = np.zeros(Phi.shape[1])
    _column_pass(Phi, squares, _SQUARES, squares)
    return squares


def column_peaks(Phi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The columns' largest absolute values (NaN ignored) and :func:`column_squares`, in one
    pass over a C-contiguous ``Phi``."""
    peaks, squares = np.zeros(Phi.shape[1]), np.zeros(Phi.shape[1])
    _column_pass(Phi, peaks, _PEAKS, squares)
    return peaks, squares


def divide_columns(Phi: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """``Phi /= norms`` in place (``Phi`` C-contiguous) and :func:`column_squares` of the result,
    in one pass instead of two."""
    squares = np.zeros(Phi.shape[1])
    _column_pass(Phi, np.ascontiguousarray(norms, dtype=np.float64), _DIVIDE, squares)
    return squares
