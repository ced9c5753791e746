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

Only :meth:`~bayes_rvm.basis.kernels.KernelBasis.transform` calls this, and only for blocks of at
least :data:`~bayes_rvm.basis.kernels.FUSED_MIN_ENTRIES` (fits below N = 1000 never import
numba).
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["column_squares", "divide_columns", "stationary_block"]


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
def _fill(X, C, gamma, l1, out):  # pragma: no cover - compiled by numba
    n, p = X.shape
    k = C.shape[0]
    CT = np.ascontiguousarray(C.T)  # each feature's centre coordinates contiguous
    for task in numba.prange((n + _ROWS_PER_TASK - 1) // _ROWS_PER_TASK):
        dist = np.empty(k)
        row = np.empty(k)
        scale = np.empty(k)
        for i in range(task * _ROWS_PER_TASK, min(n, (task + 1) * _ROWS_PER_TASK)):
            # Distances summed over features in order, as a loop over features per pair.
            dist[:] = 0.0
            for d in range(p):
                xd = X[i, d]
                for j in range(k):
                    diff = xd - CT[d, j]
                    dist[j] += abs(diff) if l1 else diff * diff
            for j in range(k):
                dist[j] *= -gamma
            exp_nonpositive(dist, row, scale)
            for j in range(k):
                out[i, j] = row[j]


def stationary_block(
    X: np.ndarray, C: np.ndarray, gamma: float, kernel: str, out: np.ndarray, *, threads: int
) -> None:
    """Write ``exp(-gamma d(x_i, c_j))`` into ``out`` (shape ``(len(X), len(C))``, any strides).

    ``d`` is the squared Euclidean distance for ``"rbf"`` and the L1 distance for
    ``"laplacian"`` (scikit-learn's conventions). ``threads`` bounds numba's threads, so that a
    process limited to one core (a Dask worker, a study's job) stays on one.
    """
    previous = numba.get_num_threads()
    numba.set_num_threads(max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS)))
    try:
        _fill(
            np.ascontiguousarray(X, dtype=np.float64),
            np.ascontiguousarray(C, dtype=np.float64),
            float(gamma),
            kernel == "laplacian",
            out,
        )
    finally:
        numba.set_num_threads(previous)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _column_pass(Phi, norms, divide, squares):  # pragma: no cover - compiled by numba
    """``squares[j] += Phi[i, j]**2`` over the rows in order, after ``Phi[i, j] /= norms[j]``
    where ``divide`` (one function for both passes: one entry in numba's cache to load)."""
    if divide:
        for i in range(Phi.shape[0]):
            for j in range(Phi.shape[1]):
                x = Phi[i, j] / norms[j]
                Phi[i, j] = x
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
    _column_pass(Phi, squares, False, squares)
    return squares


def divide_columns(Phi: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """``Phi /= norms`` in place (``Phi`` C-contiguous) and :func:`column_squares` of the result,
    in one pass instead of two."""
    squares = np.zeros(Phi.shape[1])
    _column_pass(Phi, np.ascontiguousarray(norms, dtype=np.float64), True, squares)
    return squares
