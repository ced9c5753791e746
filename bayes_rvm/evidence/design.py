"""The design matrix as the Laplace engines read it: in memory, or built in row blocks on the fly.

Every quantity a Laplace fit needs of the design is a sum over rows (:mod:`bayes_rvm.evidence.mode`
and :mod:`bayes_rvm.evidence.laplace`): the latent values ``Phi W``, the gradient ``Phi^T (T - Y)``
and curvature ``Phi^T B Phi`` of a Newton step, and the candidate statistics
``Phi^T [B Phi_a, T - Y]`` and ``(Phi * Phi)^T B`` of a sequential step. Two classes give them:

- :class:`DenseDesign`: an N x M array in memory (the engines' classic input);
- :class:`ChunkedDesign`: the unit-norm columns of a kernel basis built ``chunk_rows`` rows at a
  time from the inputs, so that no N x M array ever exists. The columns of the active set (the
  few the Newton steps read again and again) are kept in a cache of bounded size; beyond it they
  are rebuilt at each pass too. It counts its passes (:attr:`ChunkedDesign.passes`).

Both give the same numbers up to the order of the row sums.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from bayes_rvm.families import Family
from bayes_rvm.progress import Progress
from bayes_rvm.threads import all_blas_threads

__all__ = [
    "ChunkedDesign",
    "DenseDesign",
    "PassCounter",
    "as_design",
    "data_hessian",
    "softmax_cross_hessian",
]

#: Rows per block of the in-memory pass that forms the candidate statistics: small enough for
#: the block and its square to stay in cache.
DENSE_BLOCK_ROWS = 128


def data_hessian(Phi_a: np.ndarray, Y: np.ndarray, fam: Family) -> np.ndarray:
    """The likelihood's part of the negative Hessian, ``Phi^T B Phi``, at the mean ``Y`` (N x C)
    (class-major KC x KC blocks for the softmax)."""
    if fam.name != "softmax":
        return (Phi_a * fam.curvature(Y)).T @ Phi_a
    return softmax_cross_hessian(Phi_a, Y)


def softmax_cross_hessian(Phi_a: np.ndarray, Y: np.ndarray, Phi_b: np.ndarray | None = None):
    """The softmax's ``Phi_a^T B Phi_b`` at the mean ``Y`` (N x C), class-major (Ka C x Kb C):
    block ``(c, c')`` is ``Phi_a^T diag(y_c (delta_cc' - y_c')) Phi_b``; ``Phi_b`` defaults to
    ``Phi_a`` (then one symmetric product)."""
    N, Ka = Phi_a.shape
    C = Y.shape[1]
    # Z[:, c*K + i] = y_c phi_i: Z_a^T Z_b holds every sum_n y_c y_c' phi phi^T at once.
    Za = (Y[:, :, None] * Phi_a[:, None, :]).reshape(N, C * Ka)
    if Phi_b is None:
        Kb, Zb, H = Ka, Za, -(Za.T @ Za)
    else:
        Kb = Phi_b.shape[1]
        Zb = (Y[:, :, None] * Phi_b[:, None, :]).reshape(N, C * Kb)
        H = -(Za.T @ Zb)
    for c in range(C):
        H[c * Ka : (c + 1) * Ka, c * Kb : (c + 1) * Kb] += Phi_a.T @ Zb[:, c * Kb : (c + 1) * Kb]
    return H


def _statistics_block(P, P_act, B, R, out) -> None:
    """Add one block's ``P^T [B P_act, R]`` and ``(P * P)^T B`` to ``out = (G, S)``."""
    C = B.shape[1]
    K = P_act.shape[1]
    Z = np.empty((P.shape[0], C * K + R.shape[1]))
    for c in range(C):
        Z[:, c * K : (c + 1) * K] = P_act * B[:, c : c + 1]
    Z[:, C * K :] = R
    G, S = out
    G += P.T @ Z
    S += np.multiply(P, P).T @ B


class DenseDesign:
    """An N x M design matrix in memory (float64, neither copied nor modified)."""

    def __init__(self, Phi: np.ndarray) -> None:
        self.Phi = Phi
        self.shape = Phi.shape

    def take(self, columns) -> DenseDesign:
        """The design of ``columns`` (a copy, contiguous for the Newton steps' products)."""
        return DenseDesign(self.Phi[:, columns])

    def dot(self, W: np.ndarray) -> np.ndarray:
        """``Phi W``."""
        return self.Phi @ W

    def curvature(self, R: np.ndarray, Y: np.ndarray, fam: Family):
        """``(Phi^T R, Phi^T B Phi)``: a Newton step's data terms (residuals ``R``, mean ``Y``)."""
        return self.Phi.T @ R, data_hessian(self.Phi, Y, fam)

    def gradient(self, R: np.ndarray) -> np.ndarray:
        """``Phi^T R``: a chord step's data term."""
        return self.Phi.T @ R

    def statistics(self, act: np.ndarray, B: np.ndarray, R: np.ndarray):
        """``(Phi^T [B Phi_act | R], (Phi * Phi)^T B)`` in one pass, without an N x M temporary.

        ``B`` (N, C) weights the active columns per class (class-major blocks); ``R`` (N, D) is
        appended. The design is the big object; reading it once, in cache-sized row blocks, is
        what bounds the cost of a sequential step.
        """
        M = self.shape[1]
        out = (np.zeros((M, B.shape[1] * act.size + R.shape[1])), np.zeros((M, B.shape[1])))
        for start in range(0, self.shape[0], DENSE_BLOCK_ROWS):
            rows = slice(start, start + DENSE_BLOCK_ROWS)
            P = self.Phi[rows]
            _statistics_block(P, P[:, act], B[rows], R[rows], out)
        return out

    def all_finite(self) -> bool:
        return bool(np.all(np.isfinite(self.Phi)))


@dataclass
class PassCounter:
    """Passes over the rows of a chunked design: ``full`` (every column built by the kernel),
    ``columns`` (a subset of columns built: the active set beyond its cache), ``cache_fills``
    (of those, the ones that filled the active columns' cache) and ``cached`` (read from the
    stored blocks, no kernel evaluation)."""

    full: int = 0
    columns: int = 0
    cache_fills: int = 0
    cached: int = 0


class ChunkedDesign:
    """The unit-norm design of a basis, built ``chunk_rows`` rows at a time.

    Parameters
    ----------
    block : callable
        ``block(rows, columns)`` -> the design's ``rows`` (a slice or an int array) over
        ``columns`` (int array, or None for all), in the basis's own units (a new float64
        C-ordered array, which the design may modify).
    n_rows : int
    norms : ndarray of shape (M,)
        What each column is divided by (its norm over all rows; 1 for a zero column).
    chunk_rows : int
        Rows per block.
    cache_bytes : float
        The most memory the design may keep between passes: all its blocks when the N x M
        design fits (then only the first pass evaluates the kernel), else the active columns
        (N floats each); 0 keeps nothing. Either way the memory held is bounded by it, not by N.
    columns : ndarray of int, optional
        The columns of this view (default all); views share the cache and the counter.
    progress : bool or "auto", default=False
        Report the rows of each pass on stderr (:class:`bayes_rvm.progress.Progress`: nothing
        for a pass that ends within 2 s).
    """

    def __init__(
        self, block, n_rows, norms, *, chunk_rows, cache_bytes, columns=None, progress=False
    ) -> None:
        self._block: Callable = block
        self.norms = np.asarray(norms, dtype=np.float64)
        self.n_rows = int(n_rows)
        self.chunk_rows = max(int(chunk_rows), 1)
        self.cache_bytes = float(cache_bytes)
        self.columns = None if columns is None else np.asarray(columns, dtype=np.intp)
        M = self.norms.size if self.columns is None else self.columns.size
        self.shape = (self.n_rows, M)
        self.cache: dict[int, np.ndarray] = {}
        #: ``"blocks"``: the normalised row blocks over every column, once a pass stored them.
        self.store: dict = {}
        self.counter = PassCounter()
        self.progress = progress

    # -- blocks ------------------------------------------------------------------------------
    def blocks(self, columns: np.ndarray | None = None) -> Iterator[tuple[slice, np.ndarray]]:
        """``(rows, block)``: the normalised design over ``columns`` of this view, by blocks."""
        cols = self._absolute(columns)
        counter = self.counter
        stored = self.store.get("blocks")
        if stored is not None:
            counter.cached += 1
            with self._progress() as bar:
                for i, (rows, P) in enumerate(stored, 1):
                    yield rows, (P if cols is None else P[:, cols])
                    bar.update(rows.stop, blocks=(i, len(stored)))
            return
        whole = cols is None or cols.size == self.norms.size
        if whole:
            counter.full += 1
        else:
            counter.columns += 1
        keep = [] if whole and 8.0 * self.n_rows * self.norms.size <= self.cache_bytes else None
        scale = self.norms if cols is None else self.norms[cols]
        n_blocks = -(-self.n_rows // self.chunk_rows)
        with self._progress() as bar:
            for i, start in enumerate(range(0, self.n_rows, self.chunk_rows), 1):
                rows = slice(start, min(start + self.chunk_rows, self.n_rows))
                P = self._block(rows, cols)
                P /= scale
                if keep is not None:
                    keep.append((rows, P))
                yield rows, P
                bar.update(rows.stop, blocks=(i, n_blocks))
        if keep is not None and cols is None:
            self.store["blocks"] = keep

    def _progress(self) -> Progress:
        """The progress of the pass just counted (its number: every pass so far)."""
        passes = sum(dataclasses.astuple(self.counter)) - self.counter.cache_fills
        what = f"pass {passes} over the rows"
        # Transient on a terminal: the fit's own line (its rounds or steps) is drawn there next.
        return Progress(what, self.n_rows, "rows", enabled=self.progress, terminal="erase")

    def rows(self, index: np.ndarray) -> np.ndarray:
        """The normalised design's rows ``index`` (all columns of this view) in memory."""
        P = self._block(index, self.columns)
        P /= self.norms if self.columns is None else self.norms[self.columns]
        return P

    def _absolute(self, columns) -> np.ndarray | None:
        if columns is None:
            return self.columns
        columns = np.asarray(columns, dtype=np.intp)
        return columns if self.columns is None else self.columns[columns]

    # -- the engines' interface -----------------------------------------------------------------
    def take(self, columns) -> DenseDesign | ChunkedDesign:
        """The design of ``columns``: in memory from the cache when they fit in it, else a
        chunked view (each use a pass over the rows)."""
        cols = self._absolute(columns)
        design_bytes = 8.0 * self.n_rows * self.norms.size if "blocks" in self.store else 0.0
        if 8.0 * self.n_rows * cols.size <= self.cache_bytes - design_bytes or design_bytes:
            return DenseDesign(self._cached(cols))
        view = ChunkedDesign.__new__(ChunkedDesign)
        view.__dict__.update(self.__dict__)
        view.columns, view.shape = cols, (self.n_rows, cols.size)
        return view

    def _cached(self, cols: np.ndarray) -> np.ndarray:
        """The columns ``cols`` (absolute) as an N x K array, building the missing ones in one
        pass and dropping cached columns not asked for when the cache would overflow."""
        missing = np.array([c for c in dict.fromkeys(cols.tolist()) if c not in self.cache])
        keep = set(cols.tolist())
        per_column = 8.0 * self.n_rows
        if (len(self.cache) + missing.size) * per_column > self.cache_bytes:
            for c in [c for c in self.cache if c not in keep]:
                del self.cache[c]
        if missing.size:
            self.counter.cache_fills += 1
            new = np.empty((missing.size, self.n_rows))
            whole = ChunkedDesign.__new__(ChunkedDesign)
            whole.__dict__.update(self.__dict__)
            whole.columns = None
            for rows, P in whole.blocks(missing):
                new[:, rows] = P.T
            for i, c in enumerate(missing.tolist()):
                self.cache[c] = new[i]
        out = np.empty((self.n_rows, cols.size))
        for i, c in enumerate(cols.tolist()):
            out[:, i] = self.cache[c]
        return out

    def dot(self, W: np.ndarray) -> np.ndarray:
        """``Phi W`` in one pass."""
        out = np.empty((self.n_rows, W.shape[1]))
        for rows, P in self.blocks():
            out[rows] = P @ W
        return out

    def curvature(self, R: np.ndarray, Y: np.ndarray, fam: Family):
        """``(Phi^T R, Phi^T B Phi)`` in one pass."""
        K, C = self.shape[1], Y.shape[1]
        G, H = np.zeros((K, R.shape[1])), np.zeros((K * C, K * C))
        for rows, P in self.blocks():
            G += P.T @ R[rows]
            H += data_hessian(P, Y[rows], fam)
        return G, H

    def gradient(self, R: np.ndarray) -> np.ndarray:
        """``Phi^T R`` in one pass."""
        G = np.zeros((self.shape[1], R.shape[1]))
        for rows, P in self.blocks():
            G += P.T @ R[rows]
        return G

    def statistics(self, act: np.ndarray, B: np.ndarray, R: np.ndarray):
        """As :meth:`DenseDesign.statistics`, in one pass over the rows.

        The product of each block with the weighted active columns is BLAS-3 on a large block:
        it runs on every BLAS thread of the process (the engines' own algebra stays on one,
        :func:`~bayes_rvm.threads.single_blas_thread`).
        """
        M = self.shape[1]
        out = (np.zeros((M, B.shape[1] * act.size + R.shape[1])), np.zeros((M, B.shape[1])))
        with all_blas_threads():
            for rows, P in self.blocks():
                _statistics_block(P, P[:, act], B[rows], R[rows], out)
        return out

    def all_finite(self) -> bool:
        # The norms pass found every column finite (ChunkedDesign is built from it).
        return bool(np.all(np.isfinite(self.norms)))


def as_design(Phi) -> DenseDesign | ChunkedDesign:
    """``Phi`` as a design object (an array is wrapped, not copied)."""
    if isinstance(Phi, DenseDesign | ChunkedDesign):
        return Phi
    return DenseDesign(Phi)
