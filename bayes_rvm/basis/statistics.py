"""Sufficient statistics of a Gaussian RVM fit: sums over rows, built in one chunked pass.

With the candidate centres fixed, the Gaussian type-II fit (MacKay's and Tipping and Faul's
engines) and the weight-marginalised likelihood depend on the data only through

- ``gram = Phi' Phi`` (M x M),
- ``cross = Phi' T`` (M x D),
- ``tt = sum_n t_n^2`` per output (D,),
- ``t_sum = sum_n t_n`` per output (D,) and the row count ``n``.

Each is a sum over rows, so a design that does not fit in memory is never needed: the kernel
rows are built a block at a time (:func:`design_chunks`), each block's statistics are added up
(:func:`accumulate`), and blocks computed elsewhere (Dask workers, other files) are added with
``+``. The memory held is ``O(M^2 + chunk_rows M)`` whatever the number of rows.

Precision. Everything is accumulated in float64. Kernel values lie in [-1, 1] for the stationary
kernels, so float32 blocks would hold them to 6e-8 relative, but the Gram matrix of a kernel
basis is ill-conditioned (condition numbers of 1e8 and beyond are usual), and its errors reach
the weights multiplied by that condition number: float32 is safe only for the *kernel
evaluation* of well-separated centres with a short width, never for the accumulation. This module
therefore uses float64 throughout; ``design_chunks(dtype=np.float32)`` exists for callers that
only need the design itself (a prediction at float32 tolerance).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from scipy.linalg.blas import dsyrk

from bayes_rvm.threads import all_blas_threads

__all__ = [
    "CHUNK_BYTES",
    "SufficientStatistics",
    "accumulate",
    "chunk_rows_for",
    "design_chunks",
]

#: The memory budget of one design block (256 MiB): on two threads of a quiet 2-core machine
#: ``dsyrk`` ran at 112 GFLOP/s on blocks of 20,000 rows of 2001 columns against 93 on the 4192
#: rows of 64 MiB (its M x M output is read and written once per block), while the block and
#: the kernel's temporaries (the fused kernel has none; a scikit-learn kernel about two blocks)
#: stay far below 8 GB whatever N.
CHUNK_BYTES = 256 * 2**20


def chunk_rows_for(n_basis: int, *, itemsize: int = 8, budget: int = CHUNK_BYTES) -> int:
    """Rows of a design block of ``n_basis`` columns that fit in ``budget`` bytes (at least 1)."""
    return max(1, int(budget // (itemsize * max(int(n_basis), 1))))


def design_chunks(
    basis, X: np.ndarray, *, chunk_rows: int | None = None, dtype=np.float64
) -> Iterator[tuple[slice, np.ndarray]]:
    """Blocks of rows of the design matrix of a fitted basis, built on the fly.

    Parameters
    ----------
    basis : KernelBasis
        A fitted :class:`~bayes_rvm.KernelBasis` (anything with ``transform(X,
        out=)`` and
        ``n_basis_``).
    X : ndarray of shape (N, P)
        The inputs (for a precomputed kernel, the kernel rows against the centres).
    chunk_rows : int, optional
        Rows per block; default :func:`chunk_rows_for` the basis (about 256 MiB a block).
    dtype : numpy dtype, default=np.float64
        The blocks' type (the kernel is evaluated in float64 and cast).

    Yields
    ------
    rows : slice
        The rows of ``X`` the block holds.
    Phi : ndarray of shape (rows, M), C-contiguous
        In float64, a view of one buffer that the next block overwrites: copy a block to keep it.
    """
    n_rows = int(X.shape[0])
    step = chunk_rows_for(basis.n_basis_) if chunk_rows is None else int(chunk_rows)
    if step < 1:
        raise ValueError(f"chunk_rows must be a positive integer, got {chunk_rows!r}.")
    # One buffer for every block: fresh pages for each block cost a tenth of the pass.
    buffer = np.empty((min(step, n_rows), basis.n_basis_))
    for start in range(0, n_rows, step):
        rows = slice(start, min(start + step, n_rows))
        block = basis.transform(X[rows], out=buffer[: rows.stop - rows.start])
        yield rows, (block if block.dtype == dtype else block.astype(dtype))


def _as_targets(T) -> np.ndarray:
    T = np.asarray(T, dtype=np.float64)
    if T.ndim == 1:
        return T[:, None]
    if T.ndim != 2:
        raise ValueError(f"targets must have shape (N,) or (N, D), got {T.shape}.")
    return T


@dataclass(frozen=True, eq=False)
class SufficientStatistics:
    """What a Gaussian RVM fit needs of its training rows, as exact sums over them.

    Add two with ``+`` (the statistics of the union of two blocks of rows); build one block's
    with :meth:`from_design`, a chunked pass with :func:`accumulate`.

    Attributes
    ----------
    gram : ndarray of shape (M, M)
        ``Phi' Phi``, symmetric.
    cross : ndarray of shape (M, D)
        ``Phi' T``.
    tt : ndarray of shape (D,)
        ``sum_n T[n, d]^2`` per output.
    n : int
        The number of rows.
    t_sum : ndarray of shape (D,)
        ``sum_n T[n, d]`` per output (the targets' mean, for the noise's starting value).
    """

    gram: np.ndarray
    cross: np.ndarray
    tt: np.ndarray
    n: int
    t_sum: np.ndarray

    def __post_init__(self) -> None:
        m = self.gram.shape[0]
        if self.gram.shape != (m, m) or self.cross.ndim != 2 or self.cross.shape[0] != m:
            raise ValueError(
                f"gram must be (M, M) and cross (M, D); got {self.gram.shape} and "
                f"{self.cross.shape}."
            )
        d = self.cross.shape[1]
        if np.shape(self.tt) != (d,) or np.shape(self.t_sum) != (d,):
            raise ValueError(
                f"tt and t_sum must have shape ({d},); got {np.shape(self.tt)} and "
                f"{np.shape(self.t_sum)}."
            )

    @property
    def n_basis(self) -> int:
        """M, the number of basis functions."""
        return int(self.gram.shape[0])

    @property
    def n_outputs(self) -> int:
        """D, the number of target columns."""
        return int(self.cross.shape[1])

    @classmethod
    def zeros(cls, n_basis: int, n_outputs: int = 1) -> SufficientStatistics:
        """The statistics of no rows (the identity of ``+``)."""
        d = int(n_outputs)
        return cls(
            np.zeros((n_basis, n_basis)), np.zeros((n_basis, d)), np.zeros(d), 0, np.zeros(d)
        )

    @classmethod
    def from_design(cls, Phi: np.ndarray, T) -> SufficientStatistics:
        """The statistics of one block: design rows ``Phi`` (N, M), targets ``T`` (N,) or (N, D)."""
        Phi = np.asarray(Phi, dtype=np.float64)
        T = _as_targets(T)
        if Phi.ndim != 2 or Phi.shape[0] != T.shape[0]:
            raise ValueError(
                f"Phi must be (N, M) with the N rows of T; got {Phi.shape} and {T.shape}."
            )
        out = cls.zeros(Phi.shape[1], T.shape[1])
        out._add_block(Phi, T)
        return out._symmetrised()

    def _add_block(self, Phi: np.ndarray, T: np.ndarray) -> None:
        """Add a block's sums in place (only on statistics this module has just created)."""
        # dsyrk on the Fortran view of a C-contiguous block computes Phi' Phi without a copy and
        # half the flops of a general product; it fills the upper triangle of the accumulator.
        Phi = np.ascontiguousarray(Phi)
        gram = self.gram.T  # the Fortran-ordered view of the C-ordered matrix
        dsyrk(1.0, Phi.T, beta=1.0, c=gram, trans=0, lower=0, overwrite_c=1)
        self.cross[...] += Phi.T @ T
        self.tt[...] += np.einsum("nd,nd->d", T, T)
        self.t_sum[...] += T.sum(axis=0)
        object.__setattr__(self, "n", self.n + Phi.shape[0])

    def _symmetrised(self) -> SufficientStatistics:
        # dsyrk wrote the upper triangle of the Fortran view: the lower one of the C array.
        g = self.gram
        lower = np.tril(g)
        object.__setattr__(self, "gram", lower + np.tril(g, -1).T)
        return self

    def __add__(self, other: SufficientStatistics) -> SufficientStatistics:
        if not isinstance(other, SufficientStatistics):
            return NotImplemented
        if other.gram.shape != self.gram.shape or other.cross.shape != self.cross.shape:
            raise ValueError(
                f"statistics of different bases cannot be added: gram {self.gram.shape} and "
                f"{other.gram.shape}, cross {self.cross.shape} and {other.cross.shape}."
            )
        return SufficientStatistics(
            self.gram + other.gram,
            self.cross + other.cross,
            self.tt + other.tt,
            self.n + other.n,
            self.t_sum + other.t_sum,
        )

    def __radd__(self, other):
        # sum(list_of_statistics) starts from 0.
        return self if isinstance(other, int) and other == 0 else NotImplemented

    def column_norms(self) -> np.ndarray:
        """``sqrt(diag(gram))``: the norms of the design's columns (1 where a column is zero)."""
        norms = np.sqrt(np.maximum(np.diag(self.gram), 0.0))
        norms[norms == 0] = 1.0
        return norms

    def target_scale(self) -> float:
        """The targets' root-mean-square over all rows and outputs (1 for all-zero targets)."""
        rms = float(np.sqrt(np.sum(self.tt) / max(self.n * self.n_outputs, 1)))
        return rms if rms > 0 else 1.0

    def target_variance(self) -> float:
        """The variance of all target values pooled (``np.var`` of the (N, D) matrix)."""
        size = max(self.n * self.n_outputs, 1)
        mean = float(np.sum(self.t_sum)) / size
        return max(float(np.sum(self.tt)) / size - mean * mean, 0.0)


def accumulate(
    basis, X: np.ndarray, T, *, chunk_rows: int | None = None, progress=False
) -> SufficientStatistics:
    """The statistics of the design of ``basis`` at ``X`` against targets ``T``, in one pass.

    The design is built a block of rows at a time (:func:`design_chunks`) and never held whole:
    memory is ``O(M^2 + chunk_rows M)``. Each block adds ``Phi' Phi`` by BLAS ``dsyrk`` into one
    float64 accumulator (no M x M temporary per block) and ``Phi' T`` by a matrix product. The
    result equals :meth:`SufficientStatistics.from_design` of the whole design up to float64
    rounding of the sums (1e-13 relative); float32 is not used (see the module docstring).

    Parameters
    ----------
    basis : KernelBasis
        A fitted basis.
    X : ndarray of shape (N, P)
    T : array-like of shape (N,) or (N, D)
    chunk_rows : int, optional
        Rows per block (default: about 256 MiB of design a block, :data:`CHUNK_BYTES`).
    progress : bool or "auto", default=False
        Report the rows processed on stderr (:class:`bayes_rvm.progress.Progress`; "auto":
        where stderr is a terminal), for a pass of more than a few seconds.
    """
    from bayes_rvm.progress import Progress

    T = _as_targets(T)
    if T.shape[0] != X.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but the targets have {T.shape[0]}.")
    if not np.all(np.isfinite(T)):
        raise ValueError("the targets contain NaN or inf.")
    out = SufficientStatistics.zeros(basis.n_basis_, T.shape[1])
    # The pass is BLAS-3 on large blocks: every thread the process has (the estimators' guard
    # keeps BLAS on one thread for their thin algebra).
    bar = Progress("sufficient statistics", X.shape[0], "rows", enabled=progress)
    with all_blas_threads(), bar:
        for rows, Phi in design_chunks(basis, X, chunk_rows=chunk_rows):
            out._add_block(Phi, T[rows])
            bar.update(rows.stop)
    return out._symmetrised()
