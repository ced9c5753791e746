"""Basis functions: from a kernel specification to the RVM design matrix.

The RVM places one basis function ``phi_i(x) = k(x, x_i)`` on every training input (the *centres*)
and, optionally, a constant bias column. :class:`KernelBasis` remembers its centres so that the same
design matrix can be rebuilt for new inputs, and can build only a chosen subset of columns (the
relevance vectors) so that prediction costs O(n_relevant) kernel evaluations per point.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Real

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.gaussian_process.kernels import Kernel as GPKernel
from sklearn.metrics.pairwise import PAIRWISE_KERNEL_FUNCTIONS
from sklearn.utils.validation import check_array, check_is_fitted

from bayes_rvm.threads import process_threads

__all__ = [
    "KERNELS",
    "STATIONARY_KERNELS",
    "WIDTH_KERNELS",
    "WIDTH_RULES",
    "KernelBasis",
    "LaplacianKernel",
    "RBFKernel",
    "StationaryKernel",
    "WidthRule",
    "check_kernel",
    "reference_gamma",
    "stationary_distances",
    "stationary_kernel",
    "uses_gamma",
    "width_design",
]

#: Kernel names understood by :class:`KernelBasis` (scikit-learn's ``pairwise_kernels`` names).
KERNELS = ("rbf", "linear", "poly", "polynomial", "laplacian", "sigmoid", "cosine")
_USES_GAMMA = {"rbf", "poly", "polynomial", "laplacian", "sigmoid"}
_USES_DEGREE = {"poly", "polynomial"}
_USES_COEF0 = {"poly", "polynomial", "sigmoid"}
#: Blocks of a named stationary kernel with at least this many entries are built by the fused,
#: multi-threaded loop of :mod:`~bayes_rvm.basis.blocks` (8x faster than scikit-learn's on 2-D
#: inputs, 3x on 1-D: 2.9 against 8.7 ms of CPU for the 1000 x 1000 rbf design, a fifth of that
#: fit); smaller ones keep scikit-learn's values (:func:`rbf_block` for rbf), so that fits below
#: N = 1000 never import numba: its import and first call cost about 0.9 s of CPU (1.8 s wall
#: on a busy machine) once per process, against 3 s of CPU for importing the estimators.
FUSED_MIN_ENTRIES = 10**6
#: Row blocks of the rbf design below :data:`FUSED_MIN_ENTRIES` hold about this many entries
#: (256 KB): each block is clamped, scaled and exponentiated while it is in the core's cache.
RBF_BLOCK_ENTRIES = 2**15
#: Blocks of the rbf design of at least this many entries share their row blocks among the
#: process's threads (:func:`~bayes_rvm.threads.process_threads`).
RBF_THREADED_ENTRIES = 2**17

KernelSpec = str | Callable[[np.ndarray, np.ndarray], np.ndarray] | GPKernel


def uses_gamma(kernel) -> bool:
    """Whether the named kernel has a coefficient ``gamma`` (rbf, poly, laplacian, sigmoid)."""
    return isinstance(kernel, str) and kernel in _USES_GAMMA


# ---------------------------------------------------------------------------------------------
# Stationary kernels own their width
# ---------------------------------------------------------------------------------------------
class StationaryKernel:
    """The width of a stationary kernel ``k(x, c) = exp(-gamma d(x, c))``.

    One small object per kernel (as tinygp's kernels) says everything the package needs about
    its width: the distance ``d`` that ``gamma`` multiplies, the map between ``gamma`` and a
    length scale ``l``, the design at many widths and its derivative in ``log l``. The width
    search, the sampled width, cross-validation and saving all ask it, never the kernel's name.
    """

    #: The kernel's name in :data:`KERNELS`.
    name: str = ""

    def distances(self, X: np.ndarray, centres: np.ndarray) -> np.ndarray:
        """What ``gamma`` multiplies in the kernel, between rows of ``X`` and ``centres``."""
        raise NotImplementedError

    def gamma(self, length_scale):
        """The coefficient(s) ``gamma`` of length scale(s) ``l`` (an array)."""
        raise NotImplementedError

    def length_scale(self, gamma):
        """The length scale(s) of ``gamma``; works on NumPy arrays and PyTensor variables."""
        raise NotImplementedError

    def feature_scale(self, gamma: np.ndarray) -> np.ndarray:
        """Per-feature factors ``s`` with ``k(x, c; gamma) = k(s x, s c; 1)`` (``1 / l``)."""
        raise NotImplementedError

    def log_length_sum(self, weights: np.ndarray, diff: np.ndarray, length_scale: float) -> float:
        """``sum_nj W_nj dlog k_nj / dlog l_d`` over one feature's differences ``x_d - c_d``."""
        raise NotImplementedError

    def reference_gamma(self, X: np.ndarray) -> float:
        """``gamma`` of the length scale ``sqrt(n_features * X.var())`` of ``gamma="scale"``."""
        raise NotImplementedError

    def design(self, distances: np.ndarray, gamma, *, bias: bool = True) -> np.ndarray:
        """Designs ``exp(-gamma d)`` at one or many ``gamma`` (:func:`width_design`)."""
        return width_design(distances, gamma, bias=bias)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class RBFKernel(StationaryKernel):
    """``exp(-sum_d (x_d - c_d)^2 / l_d^2)``: ``gamma = 1 / l^2`` on squared distances."""

    name = "rbf"

    def distances(self, X, centres):
        from sklearn.metrics.pairwise import euclidean_distances

        return euclidean_distances(X, centres, squared=True)

    def gamma(self, length_scale):
        return 1.0 / np.asarray(length_scale, dtype=np.float64) ** 2

    def length_scale(self, gamma):
        return gamma**-0.5

    def feature_scale(self, gamma):
        return np.sqrt(gamma)

    def log_length_sum(self, weights, diff, length_scale):
        return 2.0 * np.sum(weights * diff**2) / length_scale**2

    def reference_gamma(self, X):
        return float(resolve_gamma("scale", X))


class LaplacianKernel(StationaryKernel):
    """``exp(-sum_d |x_d - c_d| / l_d)``: ``gamma = 1 / l`` on L1 distances."""

    name = "laplacian"

    def distances(self, X, centres):
        from sklearn.metrics.pairwise import manhattan_distances

        return manhattan_distances(X, centres)

    def gamma(self, length_scale):
        return 1.0 / np.asarray(length_scale, dtype=np.float64)

    def length_scale(self, gamma):
        return 1.0 / gamma

    def feature_scale(self, gamma):
        return gamma

    def log_length_sum(self, weights, diff, length_scale):
        return np.sum(weights * np.abs(diff)) / length_scale

    def reference_gamma(self, X):
        return float(np.sqrt(resolve_gamma("scale", X)))


#: The stationary kernels, by name: those whose width the evidence or a sampler can choose.
STATIONARY_KERNELS: dict[str, StationaryKernel] = {
    "rbf": RBFKernel(),
    "laplacian": LaplacianKernel(),
}
#: Names of the kernels with a width (the keys of :data:`STATIONARY_KERNELS`).
WIDTH_KERNELS = tuple(STATIONARY_KERNELS)
#: ``gamma`` values that learn the kernel width by the evidence: of the same basis under one
#: shared prior precision (the estimators' default), or the RVM's own (one width, or one per
#: feature).
WIDTH_RULES = ("evidence_shared", "evidence", "evidence_ard")


def stationary_kernel(kernel, *, purpose: str | None = None) -> StationaryKernel | None:
    """The width object of ``kernel``; None for kernels without one, unless ``purpose`` is given.

    With ``purpose`` (what needs the width, for the message), a kernel without a width raises a
    ValueError instead.
    """
    found = STATIONARY_KERNELS.get(kernel) if isinstance(kernel, str) else None
    if found is None and purpose is not None:
        raise ValueError(f"{purpose} needs kernel 'rbf' or 'laplacian', got {kernel!r}.")
    return found


@dataclass(frozen=True)
class WidthRule:
    """What an estimator's ``gamma`` asks of the kernel width, resolved once in ``fit``.

    Attributes
    ----------
    kind : {"fixed", "scale", "evidence_shared", "evidence", "evidence_ard", "prior"}
        ``"fixed"``: a number (or one per feature) or ``"auto"``; ``"scale"``: scikit-learn's
        rule (also the default's fallback on kernels without a width); the evidence rules; a
        width sampled from a :class:`~bayes_rvm.models.priors.Prior`.
    gamma : object
        The estimator's ``gamma`` as given.
    kernel : StationaryKernel or None
        The kernel's width object (None for kernels without a width).
    """

    kind: str
    gamma: object
    kernel: StationaryKernel | None

    @classmethod
    def resolve(
        cls, gamma, kernel, *, default: str = "evidence_shared", sampled: bool = False
    ) -> WidthRule:
        """The rule of ``gamma`` for ``kernel``.

        ``default`` is the rule that falls back to ``"scale"`` on a kernel without a width;
        ``sampled`` says that ``gamma`` is a prior to sample (the caller knows the prior type,
        which lives in a layer above this one). Only the kind is read here; the checks of the
        value belong to :class:`KernelBasis` (a number) and to the estimators (a rule the
        kernel cannot follow, a prior).
        """
        width = stationary_kernel(kernel)
        if sampled:
            kind = "prior"
        elif isinstance(gamma, str) and gamma in WIDTH_RULES:
            kind = "scale" if gamma == default and width is None else gamma
        elif isinstance(gamma, str) and gamma == "scale":
            kind = "scale"
        else:
            kind = "fixed"
        return cls(kind, gamma, width)

    @property
    def sampled(self) -> bool:
        """The width is sampled by MCMC (seeded by its evidence fit)."""
        return self.kind == "prior"

    @property
    def learned(self) -> bool:
        """The width is chosen by the evidence (also where that fit seeds a sampled width)."""
        return self.kind in WIDTH_RULES or self.sampled

    @property
    def basis_gamma(self):
        """What :class:`KernelBasis` receives before any learning: ``"scale"`` for a rule."""
        return "scale" if self.kind in WIDTH_RULES or self.kind == "scale" else self.gamma

    def require_width(self, what: str) -> StationaryKernel:
        """The kernel's width object; a ValueError saying ``what`` needs one if it has none."""
        if self.kernel is None:
            raise ValueError(what.format(kernels=WIDTH_KERNELS))
        return self.kernel


def resolve_gamma(gamma, X: np.ndarray) -> float | list[float]:
    """Resolve ``gamma`` as :class:`sklearn.svm.SVR` does.

    ``"scale"`` gives ``1 / (n_features * X.var())`` and ``"auto"`` gives ``1 / n_features``; a
    sequence of ``n_features`` positive numbers (one coefficient per input feature, for the rbf
    and laplacian kernels) is returned as a list of floats.
    """
    if isinstance(gamma, str):
        if gamma == "scale":
            var = float(X.var())
            return 1.0 / (X.shape[1] * var) if var > 0 else 1.0
        if gamma == "auto":
            return 1.0 / X.shape[1]
        raise ValueError(f"gamma must be 'scale', 'auto' or a positive float, got {gamma!r}.")
    if isinstance(gamma, list | tuple | np.ndarray):
        g = np.asarray(gamma, dtype=np.float64)
        if g.ndim != 1 or g.size != X.shape[1] or not np.all(np.isfinite(g) & (g > 0)):
            raise ValueError(
                f"a per-feature gamma must hold {X.shape[1]} positive finite numbers (one per "
                f"input feature), got {gamma!r}."
            )
        # A list, not an array: the fitted basis's attributes are saved as JSON.
        return [float(v) for v in g]
    if not isinstance(gamma, Real) or not np.isfinite(gamma) or gamma <= 0:
        raise ValueError(f"gamma must be 'scale', 'auto' or a positive float, got {gamma!r}.")
    return float(gamma)


def _dense_pair(X, C) -> bool:
    """2-D float64 NumPy arrays with as many features: what :func:`rbf_block` takes (anything
    else goes to scikit-learn's kernel, which converts it or says what is wrong)."""
    return all(
        isinstance(A, np.ndarray) and A.ndim == 2 and A.dtype == np.float64 for A in (X, C)
    ) and (X.shape[1] == C.shape[1])


def rbf_block(
    X: np.ndarray,
    C: np.ndarray,
    gamma: float,
    out: np.ndarray,
    *,
    same: bool = False,
    chunk_size: int | None = None,
    threads: int = 1,
) -> bool:
    """Write scikit-learn's ``rbf_kernel(X, C, gamma)`` into ``out``, value for value.

    scikit-learn forms ``-2 X C'``, adds the squared norms, clamps at zero, scales and
    exponentiates: seven passes over two ``(n, k)`` temporaries, then a copy into the design.
    Here the same floating-point operations, in the same order, are done on row blocks of
    ``out`` (``(n, k)`` with contiguous rows: the design's centre columns) while each block is
    in cache, with no temporary of the design's size. On 1-D inputs one product of
    ``[-2 x, |x|^2, 1]`` and ``[c, 1, |c|^2]`` gives ``((-2 x c) + |x|^2) + |c|^2`` in one
    pass: BLAS accumulates the three terms in order, rounding as scikit-learn's two additions
    do (the tests check it value for value).

    Parameters
    ----------
    X, C : ndarray of shape (n, p) and (k, p)
    gamma : float
    out : ndarray of shape (n, k)
    same : bool, default=False
        ``X`` and ``C`` are one array: scikit-learn then sets the diagonal distances to zero.
    chunk_size : int, optional
        On inputs of several features, form ``X C'`` in chunks of this many rows, as
        scikit-learn's kernel called on such chunks does (BLAS's rounding of a sum over features
        depends on the shapes it is given).
    threads : int, default=1
        Threads to share the row blocks (the exponential, most of the time, releases the GIL);
        each value is computed the same way by any thread.

    Returns
    -------
    bool
        Whether the values are certainly finite: in [0, 1] when no squared norm exceeds 1e300
        (no distance can then overflow), so the caller can skip its check.
    """
    n, p = X.shape
    k = C.shape[0]
    xx = np.einsum("ij,ij->i", X, X)  # scikit-learn's row_norms(squared=True)
    cc = np.einsum("ij,ij->i", C, C)
    step = max(2, RBF_BLOCK_ENTRIES // max(k, 1))
    # No block of a single row: numpy multiplies one row by GEMV, which rounds differently.
    starts = list(range(0, n, step))
    if len(starts) > 1 and n - starts[-1] < 2:
        starts.pop()
    blocks = list(itertools.pairwise([*starts, n]))
    augmented = p == 1 and n > 1 and k > 1
    if augmented:
        A = np.empty((n, 3))
        np.multiply(X[:, 0], -2.0, out=A[:, 0])
        A[:, 1] = xx
        A[:, 2] = 1.0
        Bt = np.empty((k, 3))
        Bt[:, 0] = C[:, 0]
        Bt[:, 1] = 1.0
        Bt[:, 2] = cc
        Bt = Bt.T
    else:
        rows = max(n if chunk_size is None else int(chunk_size), 1)
        for start in range(0, n, rows):
            np.matmul(X[start : start + rows], C.T, out=out[start : start + rows])

    def fill(start: int, stop: int) -> None:
        block = out[start:stop]
        if augmented:
            np.matmul(A[start:stop], Bt, out=block)
        else:
            block *= -2.0
            block += xx[start:stop, None]
            block += cc
        np.maximum(block, 0.0, out=block)
        if same:
            diag = np.arange(start, min(stop, k))
            block[diag - start, diag] = 0.0
        block *= -gamma
        np.exp(block, out=block)

    if n * k >= RBF_THREADED_ENTRIES and threads > 1:
        share_blocks(fill, blocks, threads)
    else:
        for start, stop in blocks:
            fill(start, stop)
    largest = max(float(xx.max(initial=0.0)), float(cc.max(initial=0.0)))
    return largest <= 1e300


def share_blocks(fn: Callable, blocks: list[tuple], threads: int) -> None:
    """``fn(*block)`` for every block, on this thread and up to ``threads - 1`` more.

    Each thread takes the next block not yet taken, so a thread that a busy machine does not
    run leaves its share to the others (static halves made a 1000-point rbf design 40% slower
    than one thread under a load of 3 on two cores). Every thread runs under this thread's
    NumPy error state; an exception in any is raised here, after all have stopped.
    """
    errstate = np.geterr()
    lock = threading.Lock()
    pending = iter(blocks)
    failed: list[BaseException] = []

    def work() -> None:
        try:
            with np.errstate(**errstate):
                while not failed:
                    with lock:
                        block = next(pending, None)
                    if block is None:
                        return
                    fn(*block)
        except BaseException as exc:  # raised again on the calling thread
            failed.append(exc)

    workers = [
        threading.Thread(target=work, daemon=True) for _ in range(min(threads, len(blocks)) - 1)
    ]
    for worker in workers:
        worker.start()
    work()
    for worker in workers:
        worker.join()
    if failed:
        raise failed[0]


def check_kernel(kernel):
    """``kernel`` if it names a kernel this package computes, is a callable or a scikit-learn
    kernel object; else a ValueError (an unknown name) or TypeError naming it."""
    if isinstance(kernel, str) and kernel not in (*KERNELS, "precomputed"):
        raise ValueError(
            f"kernel must be one of {(*KERNELS, 'precomputed')}, a callable or a scikit-learn "
            f"kernel object, got {kernel!r}."
        )
    if not isinstance(kernel, str) and not callable(kernel):
        raise TypeError(f"kernel must be a string, a callable or a kernel object, got {kernel!r}.")
    return kernel


class KernelBasis(TransformerMixin, BaseEstimator):
    """Kernel design matrix ``Phi[n, i] = k(x_n, c_i)`` over stored centres, plus a bias column.

    Parameters
    ----------
    kernel : str, callable, scikit-learn GP kernel or "precomputed", default="rbf"
        One of :data:`KERNELS` (scikit-learn's ``pairwise_kernels`` conventions), a callable
        ``k(X, Y) -> (n_X, n_Y)`` array, a :mod:`sklearn.gaussian_process.kernels` object, or
        ``"precomputed"``, in which case ``X`` passed to :meth:`transform` is already the kernel
        between the inputs and the centres (shape ``(n_samples, n_centres)``).
    gamma : {"scale", "auto"}, float or array-like of shape (n_features,), default="scale"
        Kernel coefficient of rbf, poly, laplacian and sigmoid; ``"scale"`` is
        ``1 / (n_features * X.var())`` as in :class:`sklearn.svm.SVR`. For the rbf kernel
        ``exp(-gamma ||x - y||^2)``, a Gaussian of width ``r`` is ``gamma = 1 / r^2``. For rbf
        and laplacian, one coefficient per input feature gives ``exp(-sum_d gamma_d (x_d -
        y_d)^2)`` and ``exp(-sum_d gamma_d |x_d - y_d|)`` (per-feature length scales).
    degree : int, default=3
        Degree of the polynomial kernel.
    coef0 : float, default=1.0
        Independent term of the polynomial and sigmoid kernels.
    kernel_params : dict, optional
        Extra keyword arguments for a callable kernel.
    bias : bool, default=True
        Append a constant column of ones (the RVM's bias basis function) as the last column.

    Attributes
    ----------
    centres_ : ndarray of shape (n_centres, n_features) or None
        The inputs the basis functions sit on (None for a precomputed kernel).
    gamma_ : float, list of float or None
        The resolved kernel coefficient (a list: one per input feature).
    n_basis_ : int
        Number of basis functions (columns of the design matrix).
    """

    def __init__(
        self,
        kernel: KernelSpec = "rbf",
        *,
        gamma: str | float = "scale",
        degree: int = 3,
        coef0: float = 1.0,
        kernel_params: dict | None = None,
        bias: bool = True,
    ) -> None:
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.bias = bias

    # -- fitting ---------------------------------------------------------------------------------
    def fit(self, X, y=None, *, centres=None) -> KernelBasis:
        """Store the centres (``X`` itself unless ``centres`` is given) and resolve ``gamma``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training inputs (or, for ``kernel="precomputed"``, the training kernel matrix).
        y : ignored
        centres : array-like of shape (n_centres, n_features), optional
            Candidate centres other than the training inputs (for example a random or k-means
            subset). Not allowed with a precomputed kernel.
        """
        kernel = check_kernel(self.kernel)
        if (
            isinstance(self.degree, bool)
            or not isinstance(self.degree, int | np.integer)
            or self.degree < 1
        ):
            raise ValueError(f"degree must be a positive integer, got {self.degree!r}.")
        if not isinstance(self.coef0, Real) or not np.isfinite(self.coef0):
            raise ValueError(f"coef0 must be a finite number, got {self.coef0!r}.")
        X = check_array(X, dtype=np.float64, ensure_min_samples=1, input_name="X")
        if kernel == "precomputed":
            if centres is not None:
                raise ValueError("centres cannot be given with kernel='precomputed'.")
            self.centres_ = None
            self.gamma_ = None
            self.n_features_in_ = X.shape[1]
            self.n_centres_ = X.shape[1]
        else:
            C = (
                X
                if centres is None
                else check_array(centres, dtype=np.float64, input_name="centres")
            )
            if C.shape[1] != X.shape[1]:
                raise ValueError(f"centres has {C.shape[1]} features but X has {X.shape[1]}.")
            self.centres_ = C
            self.n_features_in_ = X.shape[1]
            self.n_centres_ = C.shape[0]
            uses_gamma = isinstance(kernel, str) and kernel in _USES_GAMMA
            self.gamma_ = resolve_gamma(self.gamma, X) if uses_gamma else None
            if isinstance(self.gamma_, list) and stationary_kernel(kernel) is None:
                raise ValueError(
                    f"a per-feature gamma works with the kernels {sorted(STATIONARY_KERNELS)}, not "
                    f"{kernel!r}."
                )
        self.n_basis_ = self.n_centres_ + int(bool(self.bias))
        return self

    # -- evaluation ------------------------------------------------------------------------------
    def kernel_matrix(self, X: np.ndarray, centres: np.ndarray) -> np.ndarray:
        """Evaluate the kernel between rows of ``X`` and ``centres`` (no bias, no validation)."""
        kernel = self.kernel
        if isinstance(kernel, str):
            params = {}
            if kernel in _USES_GAMMA:
                params["gamma"] = self.gamma_
                if kernel in STATIONARY_KERNELS and np.ndim(self.gamma_) == 1:
                    # One coefficient per input feature (ARD over the inputs): the kernel of
                    # inputs rescaled per feature, with a unit coefficient.
                    g = np.asarray(self.gamma_, dtype=np.float64)
                    s = STATIONARY_KERNELS[kernel].feature_scale(g)
                    X, centres, params["gamma"] = X * s, centres * s, 1.0
            if kernel in _USES_DEGREE:
                params["degree"] = self.degree
            if kernel in _USES_COEF0:
                params["coef0"] = self.coef0
            if kernel == "rbf" and _dense_pair(X, centres):
                # scikit-learn's rbf_kernel, value for value, without its temporaries.
                out = np.empty((X.shape[0], centres.shape[0]))
                rbf_block(
                    X, centres, params["gamma"], out, same=X is centres, threads=process_threads()
                )
                return out
            return PAIRWISE_KERNEL_FUNCTIONS[kernel](X, centres, **params)
        if isinstance(kernel, GPKernel):
            return np.asarray(kernel(X, centres), dtype=np.float64)
        return np.asarray(kernel(X, centres, **(self.kernel_params or {})), dtype=np.float64)

    def diagonal(self, X: np.ndarray, *, chunk_size: int = 256) -> np.ndarray:
        """``k(x, x)`` for each row of ``X`` (no bias, no validation; not for "precomputed").

        1 for rbf and laplacian, the kernel object's ``diag`` for scikit-learn kernels, otherwise
        the diagonals of small diagonal blocks of the kernel matrix.
        """
        if self.kernel == "precomputed":
            raise ValueError("k(x, x) of new inputs is unknown for kernel='precomputed'.")
        if stationary_kernel(self.kernel) is not None:
            return np.ones(X.shape[0])
        if isinstance(self.kernel, GPKernel):
            return np.asarray(self.kernel.diag(X), dtype=np.float64)
        out = np.empty(X.shape[0])
        for start in range(0, X.shape[0], chunk_size):
            block = X[start : start + chunk_size]
            out[start : start + chunk_size] = np.diag(self.kernel_matrix(block, block))
        return out

    def _fused(self, entries: int) -> bool:
        """Whether a block of ``entries`` values goes to the fused kernel of
        :mod:`~bayes_rvm.basis.blocks` (a named stationary kernel on a large block)."""
        return (
            isinstance(self.kernel, str)
            and self.kernel in STATIONARY_KERNELS
            and entries >= FUSED_MIN_ENTRIES
        )

    def _fused_block(self, X: np.ndarray, C: np.ndarray, out: np.ndarray) -> bool:
        """The fused kernel into ``out``; whether its values are certainly finite (in [0, 1]:
        no distance can overflow when no coordinate exceeds 1e100 and ``gamma`` is finite), so
        that the caller can skip its check, a pass over the design."""
        from bayes_rvm.basis.blocks import stationary_block

        gamma = self.gamma_
        if np.ndim(gamma) == 1:
            # One coefficient per input feature: the kernel of rescaled inputs (kernel_matrix).
            s = STATIONARY_KERNELS[self.kernel].feature_scale(np.asarray(gamma, dtype=np.float64))
            X, C, gamma = X * s, C * s, 1.0
        stationary_block(X, C, gamma, self.kernel, out, threads=process_threads())
        largest = max(float(np.abs(A).max(initial=0.0)) for A in (X, C))
        return largest <= 1e100 and math.isfinite(gamma)

    def transform(
        self, X, columns=None, *, chunk_size: int | None = None, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Build the design matrix for ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs (for a precomputed kernel: shape ``(n_samples, n_centres)``).
        columns : array-like of int, optional
            Indices of the basis columns to build (centres ``0..n_centres-1``, the bias is
            ``n_centres``). Building only the relevance vectors makes prediction cheap.
        chunk_size : int, optional
            Evaluate the kernel this many rows at a time, to bound the temporary memory of
            kernels that allocate pairwise-distance intermediates.
        out : ndarray of shape (n_samples, n_columns), optional
            A C-contiguous float64 array to build the design in (a pass over many blocks reuses
            one, instead of faulting in fresh pages for every block). Needs the centre columns
            before the bias, as they are when ``columns`` is None.

        Returns
        -------
        Phi : ndarray of shape (n_samples, n_columns)
        """
        check_is_fitted(self, "n_basis_")
        X = check_array(X, dtype=np.float64, input_name="X")
        if X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features, but the basis was fitted with {self.n_features_in_}."
            )
        cols = np.arange(self.n_basis_) if columns is None else np.asarray(columns, dtype=np.intp)
        if cols.size and (cols.min() < 0 or cols.max() >= self.n_basis_):
            raise ValueError(f"columns must lie in [0, {self.n_basis_}).")
        # Centre columns first, then the bias: a contiguous block to write the kernel into (a
        # scattered column assignment costs more than the kernel itself at large N).
        order = np.argsort(cols >= self.n_centres_, kind="stable")
        centre_cols = cols[order][: int(np.sum(cols < self.n_centres_))]
        k = centre_cols.size
        shape = (X.shape[0], cols.size)
        if out is None:
            block_out = np.empty(shape, dtype=np.float64)
        elif out.shape != shape or out.dtype != np.float64 or not out.flags.c_contiguous:
            raise ValueError(f"out must be a C-contiguous float64 array of shape {shape}.")
        elif not np.all(order == np.arange(cols.size)):
            raise ValueError("out needs the centre columns before the bias.")
        else:
            block_out = out
        block_out[:, k:] = 1.0
        finite = False
        if self.kernel == "precomputed":
            block_out[:, :k] = X[:, centre_cols]
        elif k and self._fused(X.shape[0] * k):
            finite = self._fused_block(X, self.centres_[centre_cols], block_out[:, :k])
        elif k and self.kernel == "rbf":
            # Straight into the design, in cache-sized row blocks, with scikit-learn's values
            # (no temporary of the block's size: chunks only shape products over features).
            C, gamma = self.centres_[centre_cols], self.gamma_
            if np.ndim(gamma) == 1:
                s = STATIONARY_KERNELS["rbf"].feature_scale(np.asarray(gamma, dtype=np.float64))
                X, C, gamma = X * s, C * s, 1.0
            finite = rbf_block(
                X, C, gamma, block_out[:, :k], chunk_size=chunk_size, threads=process_threads()
            )
        elif k:
            C = self.centres_[centre_cols]
            step = X.shape[0] if chunk_size is None else max(int(chunk_size), 1)
            for start in range(0, X.shape[0], step):
                block = self.kernel_matrix(X[start : start + step], C)
                if block.shape != (min(step, X.shape[0] - start), k):
                    raise ValueError(
                        f"kernel returned shape {block.shape}; expected "
                        f"(n_X, n_Y) = {(min(step, X.shape[0] - start), k)}."
                    )
                block_out[start : start + step, :k] = block
        # A sum is a cheap test for NaN or inf; the exact test runs only when it fails.
        if not finite and not np.isfinite(block_out.sum()) and not np.all(np.isfinite(block_out)):
            raise ValueError(
                "kernel produced non-finite values; check the kernel and its parameters "
                f"(kernel={self.kernel!r}, gamma={self.gamma!r})."
            )
        if np.all(order == np.arange(cols.size)):
            return block_out
        out = np.empty_like(block_out)
        out[:, order] = block_out
        return out


# ---------------------------------------------------------------------------------------------
# Designs of a stationary kernel at many widths (a sampled kernel width)
# ---------------------------------------------------------------------------------------------
def stationary_distances(X: np.ndarray, centres: np.ndarray, kernel: str) -> np.ndarray:
    """What ``gamma`` multiplies in ``k(x, c) = exp(-gamma d(x, c))``: (n, K).

    The squared Euclidean distance for ``"rbf"``, the L1 distance for ``"laplacian"`` (the
    conventions of scikit-learn's ``rbf_kernel`` and ``laplacian_kernel``).
    """
    width = stationary_kernel(kernel, purpose="a sampled width")
    return width.distances(np.asarray(X, dtype=np.float64), np.asarray(centres, dtype=np.float64))


def reference_gamma(X: np.ndarray, kernel: str) -> float:
    """The coefficient that states a sampled width's prior: ``gamma = gamma_rel * reference``.

    The length scale ``r0 = sqrt(n_features * X.var())`` of scikit-learn's ``gamma="scale"``
    as a coefficient of ``kernel``: ``1 / r0^2`` for ``"rbf"`` (exactly ``"scale"``), ``1 / r0``
    for ``"laplacian"``.
    """
    width = stationary_kernel(kernel, purpose="a sampled width")
    return width.reference_gamma(np.asarray(X, dtype=np.float64))


def width_design(distances: np.ndarray, gamma, *, bias: bool = True) -> np.ndarray:
    """Design matrices ``exp(-gamma d)`` (plus a column of ones) for one or many ``gamma``.

    Parameters
    ----------
    distances : ndarray of shape (n, K)
        From :func:`stationary_distances`.
    gamma : float or ndarray of shape (S,)
        Kernel coefficient(s), one design per value.
    bias : bool, default=True
        Append a constant column (the bias is the last basis function, as in
        :class:`KernelBasis`).

    Returns
    -------
    ndarray of shape (n, K + bias), or (S, n, K + bias) for an array of ``gamma``
    """
    g = np.asarray(gamma, dtype=np.float64)
    d = np.asarray(distances, dtype=np.float64)
    out = np.ones((*g.shape, d.shape[0], d.shape[1] + int(bool(bias))))
    out[..., : d.shape[1]] = np.exp(-g[..., None, None] * d)
    return out
