"""The Gaussian evidence of a basis under one prior precision shared by all its weights.

The RVM's own evidence, maximised over one alpha per basis function, rewards narrow widths: the
more basis functions can each be tuned, the better the alphas fit the training targets (on
Friedman #3 it keeps 239 of 240 basis functions and a noise sd a tenth of the truth). With one
precision shared by all weights, the same basis is a Gaussian process (covariance
``Phi Phi^T / alpha`` plus noise) with two hyperparameters, whose evidence is a smooth function
of the width that cannot be raised by overfitting; it costs one eigendecomposition per width
(on a large design whose spectrum decays fast, a sketched range and the SVD of its projection,
:func:`sketched_svd`, which :func:`~bayes_rvm.models.marginal.lowrank.thin_svd` and the
sequential engine's ceiling on this evidence use too).

The default width rule (:func:`~bayes_rvm.evidence.width.select_width_shared`) maximises it, and
the sequential engine (:func:`~bayes_rvm.evidence.fit_sequential`) never stops below it: every
alpha equal to one shared precision is a point of its own hyperparameter space. It lives apart
from the width search so that the engines, which the width search runs, can read it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import linalg

from bayes_rvm.evidence.options import BETA_MAX
from bayes_rvm.threads import one_blas_thread

__all__ = [
    "RANK_TOL",
    "SharedEvidence",
    "grow_range",
    "principal_axes",
    "principal_coordinates",
    "range_sketch",
    "shared_evidence",
    "shared_evidence_design_gradient",
    "shared_evidence_gram",
    "sketched_svd",
]

#: Eigenvalues of the Gram matrix below this fraction of the largest are taken as zero.
RANK_TOL = 1e-12
#: :func:`sketched_svd` sketches designs at least this large in both dimensions (a full
#: decomposition of a smaller one takes milliseconds), with this many columns first.
SKETCH_MIN_SIZE = 256
_SKETCH_COLUMNS = 48
#: :func:`principal_coordinates` accepts a sketched range whose residual's norm is at most this
#: fraction of the cut's singular value.
_SKETCH_RESIDUAL = 1e-7
#: A range whose smallest singular value is below this fraction of the cut is not grown.
_SKETCH_TAIL = 1e-6
#: Rows per block of the residual ``Phi - Q B``: its temporary (this many rows of k) stays in
#: cache while it is formed, subtracted and summed. Blocks of 2048 rows, a fresh 4 MB at k = 500,
#: made the residual twice the cost of the two products of the range finder.
_BLOCK_ROWS = 128


@dataclass(frozen=True)
class SharedEvidence:
    """Evidence of a design under one prior precision shared by all weights, at its optimum.

    Attributes
    ----------
    log_evidence : float
        ``ln p(T | alpha, beta)`` (Gaussian) or its Laplace approximation ``ln p(t | alpha)``
        (Bernoulli, summed over one-vs-rest problems), at the optimum over the precision(s).
    alpha : float or ndarray
        The shared prior precision of the weights (one per one-vs-rest problem).
    beta : float
        Noise precision (NaN for classification).
    n_effective : float
        ``sum_k beta s_k / (alpha + beta s_k)``: the number of well-determined parameters
        (summed over one-vs-rest problems for classification).
    """

    log_evidence: float
    alpha: float | np.ndarray
    beta: float
    n_effective: float


@one_blas_thread
def shared_evidence(
    Phi: np.ndarray,
    T: np.ndarray,
    *,
    beta: float | None = None,
    max_iter: int = 1000,
    tol: float = 1e-10,
) -> SharedEvidence:
    """Maximise the Gaussian evidence of ``T = Phi w + noise`` with ``w ~ N(0, I / alpha)``.

    In the eigenbasis of the Gram matrix (``Phi Phi^T = U diag(s) U^T``, ``P = U^T T``) the
    covariance of each output is diagonal, ``lambda_k = 1/beta + s_k / alpha``, and MacKay's
    fixed-point updates ``alpha = D g / ||M||^2``, ``beta = D (N - g) / SSE`` (``g`` the number
    of well-determined parameters) cost O(r D) each after one O(min(N, M)^3) decomposition.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
    T : ndarray of shape (N,) or (N, D)
        Targets; the D outputs share alpha and beta.
    beta : float, optional
        A fixed noise precision (default: estimated).
    max_iter : int, default=1000
    tol : float, default=1e-10
        Stop when neither log precision moves by more than this.

    Returns
    -------
    SharedEvidence
    """
    T, _, s, P2 = _spectrum(Phi, T)
    return _shared_on_spectrum(s, P2, float(np.sum(T * T)), T.shape, beta, max_iter, tol)


def _spectrum(Phi: np.ndarray, T: np.ndarray):
    """``(T, U, s, P2)``: the targets as (N, D), ``Phi Phi^T = U diag(s) U^T`` on its principal
    axes and the squared projections ``P2 = sum_d (U^T T)^2``."""
    T = np.asarray(T, dtype=np.float64)
    T = T[:, None] if T.ndim == 1 else T
    Z = principal_coordinates(Phi)  # U diag(sqrt(s)): its columns have squared norms s
    s = np.einsum("ij,ij->j", Z, Z)
    U = Z / np.sqrt(s)
    P = U.T @ T
    return T, U, s, np.sum(P * P, axis=1)


def shared_evidence_design_gradient(
    Phi: np.ndarray, T: np.ndarray, *, beta: float | None = None
) -> tuple[SharedEvidence, np.ndarray]:
    """:func:`shared_evidence` and its derivative ``dL/dPhi`` (N x M) at the optimal precisions.

    The evidence is that of ``N(T | 0, C)``, ``C = I / beta + Phi Phi^T / alpha``, so that
    ``dL/dPhi = (C^-1 T T^T C^-1 - D C^-1) Phi / alpha``; at the optimum over ``alpha`` and
    ``beta`` this partial derivative is the derivative of the profile evidence (the envelope
    theorem, as for the RVM's own evidence). ``C^-1`` comes from the decomposition the evidence
    already made: ``U diag(1 / lambda) U^T`` on the span of ``Phi`` and ``beta`` outside it.
    """
    T, U, s, P2 = _spectrum(Phi, T)
    D = T.shape[1]
    ev = _shared_on_spectrum(s, P2, float(np.sum(T * T)), T.shape, beta, 1000, 1e-10)
    lam = 1.0 / ev.beta + s / ev.alpha

    def c_inv(A):
        UA = U.T @ A
        return U @ (UA / lam[:, None]) + ev.beta * (A - U @ UA)

    R = c_inv(T)
    G = (R @ (R.T @ Phi) - D * c_inv(Phi)) / ev.alpha
    return ev, G


def shared_evidence_gram(
    gram: np.ndarray,
    cross: np.ndarray,
    tt: float,
    n_rows: int,
    *,
    beta: float | None = None,
    all_axes: bool = False,
) -> SharedEvidence:
    """:func:`shared_evidence` from the sufficient statistics of the design and the targets.

    ``gram = Phi^T Phi`` (M x M), ``cross = Phi^T T`` (M x D), ``tt = sum(T**2)`` and N: the
    eigenvalues of ``gram`` are those of ``Phi Phi^T`` and ``P = V^T Phi^T T / sqrt(s)``, so
    the design itself is not needed (the large-data path of :mod:`bayes_rvm.basis.statistics`).
    ``all_axes``: see :func:`principal_axes`.
    """
    s, V = principal_axes(gram, all_axes=all_axes)
    P = (V.T @ cross) / np.sqrt(s)[:, None]
    P2 = np.sum(P * P, axis=1)
    return _shared_on_spectrum(s, P2, float(tt), (int(n_rows), cross.shape[1]), beta, 1000, 1e-10)


#: Starting noise levels of MacKay's iteration, as fractions of the targets' mean square. The
#: shared evidence over (alpha, beta) can have two maxima, one calling most of the signal noise:
#: from 10% alone the iteration reached such a one, 213 nats below the other, on 120 rows of
#: ``sin(x0) + x1^2 / 6`` (noise 5%) at per-feature widths, and the width search's curve jumped
#: there.
_NOISE_STARTS = (0.1, 1e-3)
#: A third start: the best point of a log grid of noise fractions (these) and of ``alpha / beta``
#: over the spectrum. At wide widths the signal lies in eigenvalues 1e-8 of the largest, and from
#: ``alpha = 1`` both starts stayed at the all-noise maximum, 270 nats below the other, on
#: ``make_regression(50, 5)`` at gamma 1e-4. The best of the three is kept.
_GRID_NOISE = np.geomspace(1.0, 1e-6, 7)


def _shared_on_spectrum(s, P2, tt, shape, beta, max_iter, tol) -> SharedEvidence:
    """MacKay's fixed point of the shared precision on the spectrum ``s`` and projections P2:
    the best of the starts :data:`_NOISE_STARTS` (one start when ``beta`` is fixed), both from
    ``alpha = 1``, and of the best point of a grid (:data:`_GRID_NOISE`)."""
    rest = max(tt - float(np.sum(P2)), 0.0)  # outside the span of Phi: noise whatever alpha is
    fixed, noise = beta is not None, tt / np.prod(shape)
    starts = [1.0 / max(noise * f, 1e-12) for f in _NOISE_STARTS] if not fixed else [beta]
    b = np.array(starts[-1:] if fixed else 1.0 / np.maximum(noise * _GRID_NOISE, 1e-12))
    b = b[:, None, None]  # (beta, alpha, spectrum)
    ratio = np.geomspace(max(s.max(), 1e-300), max(s.min(), 1e-300), 13)[:, None]
    a = np.clip(b * ratio, 1e-10, 1e10)
    i, k = np.unravel_index(
        int(np.argmax(_shared_log_evidence(s, P2, rest, shape, a, b))), a.shape[:2]
    )
    starts = [(1.0, float(b0)) for b0 in starts] + [(float(a[i, k, 0]), float(b[i, 0, 0]))]
    fits = [_mackay_shared(s, P2, rest, shape, ab, fixed, max_iter, tol) for ab in starts]
    return max(fits, key=lambda f: f.log_evidence)


def _shared_log_evidence(s, P2, rest, shape, a, b):
    """The log evidence at shared precision ``a`` and noise precision ``b`` (broadcast over the
    last axis, the spectrum)."""
    N, D = shape
    lam = 1.0 / b + s / a
    return -0.5 * (
        N * D * math.log(2.0 * math.pi)
        + D * np.sum(np.log(lam), axis=-1)
        - D * (N - s.size) * np.log(b[..., 0])
        + np.sum(P2 / lam, axis=-1)
        + b[..., 0] * rest
    )


def _mackay_shared(s, P2, rest, shape, start, fixed, max_iter, tol) -> SharedEvidence:
    """MacKay's updates of ``alpha`` and ``beta`` from ``start = (alpha, beta)`` to their fixed
    point."""
    N, D = shape
    a, b = start
    for _ in range(max_iter):
        shrink = a / (a + b * s)  # the fraction of each component the prior pulls to zero
        g = float(np.sum(1.0 - shrink))
        m2 = float(np.sum(b * b * s * P2 / (a + b * s) ** 2))
        sse = float(np.sum(shrink * shrink * P2)) + rest
        a_new = min(max(D * g / max(m2, 1e-300), 1e-10), 1e10)
        b_new = b if fixed else min(max(D * (N - g) / max(sse, 1e-300), 1e-10), BETA_MAX)
        done = abs(math.log(a_new / a)) < tol and abs(math.log(b_new / b)) < tol
        a, b = a_new, b_new
        if done:
            break
    log_ev = float(_shared_log_evidence(s, P2, rest, shape, a, np.array([b])))
    return SharedEvidence(log_ev, a, b, float(np.sum(b * s / (a + b * s))))


def principal_axes(
    G: np.ndarray, rank_tol: float = RANK_TOL, *, all_axes: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """The eigenvalues (ascending) and eigenvectors of the symmetric positive semi-definite
    ``G`` that exceed ``rank_tol`` times its largest eigenvalue.

    Only these are computed (LAPACK's MRRR driver on the values above ``rank_tol`` times the
    mean eigenvalue, which is at most the largest): a smooth kernel's Gram matrix has a few
    dozen of its N, and the rest cost half of a full decomposition (N = 1000: 0.08-0.13 s
    against 0.17-0.22 s for divide and conquer, the same eigenvalues to 4e-16 of the largest).
    Where hundreds are kept MRRR costs more than all of them by divide and conquer, which
    ``all_axes`` takes (500 columns of a 4-D rbf design keeping 178: 12 ms against 32 ms).
    """
    low = rank_tol * max(float(np.trace(G)), 0.0) / max(G.shape[0], 1)
    if all_axes:
        s, U = linalg.eigh(G, driver="evd")
    else:
        s, U = linalg.eigh(G, driver="evr", subset_by_value=(low, np.inf))
    keep = s > rank_tol * max(float(s[-1]) if s.size else 0.0, 1e-300)
    return s[keep], U[:, keep]


def principal_coordinates(Phi: np.ndarray, rank_tol: float = RANK_TOL) -> np.ndarray:
    """``U_r diag(sqrt(s_r))``: the design in the coordinates of its r principal axes whose
    eigenvalues exceed ``rank_tol`` times the largest.

    On a large design, from a sketched range (:func:`sketched_svd`) where its measured residual
    is a thousandth of the cut's singular value or less: the Ritz values then agree with a full
    decomposition's to its own rounding (sinc N = 1000: 15 ms instead of 0.12 s).
    """
    found = sketched_svd(Phi, math.sqrt(rank_tol), _SKETCH_RESIDUAL)
    if found is not None:
        U, s, _ = found
        return U * s
    N, M = Phi.shape
    if M >= N:
        s, U = principal_axes(Phi @ Phi.T, rank_tol)
        return U * np.sqrt(s)
    return Phi @ principal_axes(Phi.T @ Phi, rank_tol)[1]


def range_sketch(Phi: np.ndarray, l: int) -> tuple[np.ndarray, np.ndarray, float]:
    """A randomized range finder (Halko, Martinsson and Tropp, 2011): ``Phi = Q B + R``.

    Deterministic (a fixed Gaussian test matrix); three ``O(N k l)`` products.

    Parameters
    ----------
    Phi : ndarray of shape (N, k)
    l : int
        Columns of the range, at most ``min(N, k)``.

    Returns
    -------
    Q : ndarray of shape (N, l)
        Orthonormal columns spanning ``Phi`` times the test matrix.
    B : ndarray of shape (l, k)
        ``Q^T Phi``.
    delta : float
        ``||R||_F^2 = ||Phi - Q B||_F^2``, measured (not ``||Phi||^2 - ||B||^2``, which
        cancels far above the values a rank cut asks about).
    """
    Q = linalg.qr(Phi @ _test_matrix(Phi.shape[1], l), mode="economic", check_finite=False)[0]
    B = Q.T @ Phi
    return Q, B, _residual(Phi, Q, B)


def grow_range(
    R: np.ndarray, Q: np.ndarray, B: np.ndarray, l: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """:func:`range_sketch` in place and by blocks (Martinsson and Voronin, 2016): ``l`` more
    columns for a range ``Phi = Q B + R``, ``R`` overwritten with the new residual.

    Start from ``R = Phi`` (a copy the caller may lose) and an empty ``Q`` (N, 0) and ``B``
    (0, k). A range that proved too small grows for what its new columns cost, ``O(N k l)``,
    where :func:`range_sketch` would draw it again whole and measure the residual in blocks.

    Returns
    -------
    Q : ndarray of shape (N, L)
        The orthonormal columns, ``L`` those given plus ``l``.
    B : ndarray of shape (L, k)
        ``Q^T Phi``.
    delta : float
        ``||R||_F^2``, summed from the residual itself (see :func:`range_sketch`).
    """
    if not (R.flags.c_contiguous and R.dtype == np.float64):
        raise ValueError("grow_range overwrites R: it must be a C-contiguous float64 array.")
    if Q.shape[1] + l > min(R.shape):
        raise ValueError(
            f"grow_range: {Q.shape[1]} + {l} columns exceed the rank {min(R.shape)} a range of "
            "this design can have."
        )
    Y = R @ _test_matrix(R.shape[1], l, Q.shape[1])
    # R is orthogonal to Q only to the rounding of Phi, which is large beside a small residual:
    # the new columns are made orthogonal to Q twice ("twice is enough").
    for _ in range(2 if Q.shape[1] else 1):
        Y -= Q @ (Q.T @ Y)
        Y = linalg.qr(Y, mode="economic", check_finite=False)[0]
    B_new = (R.T @ Y).T  # Y^T Phi, as Y^T Q B is rounding (R^T Y: faster than Y^T R)
    total = _residual(R, Y, B_new, in_place=True)
    return np.hstack([Q, Y]), np.vstack([B, B_new]), total


@functools.lru_cache(maxsize=8)
def _test_matrix(k: int, l: int, seed: int = 0) -> np.ndarray:
    """The range finder's Gaussian test matrix, ``(k, l)``: fixed, so drawn once per shape (a
    grown range's block has a seed of its own, the columns it follows)."""
    omega = np.random.default_rng(seed).standard_normal((k, l))
    omega.flags.writeable = False
    return omega


def _residual(Phi: np.ndarray, Q: np.ndarray, B: np.ndarray, *, in_place: bool = False) -> float:
    """``||Phi - Q B||_F^2``, a block of rows at a time (each in cache while it is formed,
    subtracted and summed); ``in_place``: ``Phi`` is overwritten with ``Phi - Q B``."""
    total = 0.0
    buf = np.empty((min(_BLOCK_ROWS, Phi.shape[0]), Phi.shape[1]))
    for start in range(0, Phi.shape[0], _BLOCK_ROWS):
        rows = slice(start, start + _BLOCK_ROWS)
        out = buf[: Phi[rows].shape[0]]
        np.matmul(Q[rows], B, out=out)
        if in_place:
            out = np.subtract(Phi[rows], out, out=Phi[rows])
        else:
            out -= Phi[rows]
        total += float(np.vdot(out, out))
    return total


def sketched_svd(
    Phi: np.ndarray, rtol: float, residual: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The singular triplets of ``Phi`` above ``rtol`` times the largest, from a sketched range.

    ``Phi = Q B + R`` (:func:`range_sketch`); where ``||R||_F <= residual * rtol * s_max``, every
    singular value above the cut lies in the range and the SVD of the ``l x M`` matrix ``B``
    gives them within ``||R||_F``. Where the range was too small (its smallest value still a
    millionth of the cut or more: the spectrum decays there), once more with a larger one,
    sized by the geometric decay of the values found, extrapolated to the cut. None (decompose
    in full) below :data:`SKETCH_MIN_SIZE` rows or columns, where the cut lies beyond a quarter
    of them (the sketch would cost about as much), or where what the range leaves out is a flat
    tail far below the cut.

    Returns
    -------
    (U, s, Vt) or None
        ``U`` (N, r), ``s`` (r,) descending, ``Vt`` (r, M).
    """
    if min(Phi.shape) < SKETCH_MIN_SIZE:
        return None
    l = _SKETCH_COLUMNS
    for _ in range(2):
        if l > min(Phi.shape) // 4:
            return None
        Q, B, delta = range_sketch(Phi, l)
        U, s, Vt = linalg.svd(B, full_matrices=False, lapack_driver="gesdd", check_finite=False)
        if math.sqrt(delta) <= residual * rtol * s[0]:
            r = max(int(np.sum(s > rtol * s[0])), 1)
            return Q @ U[:, :r], s[:r], Vt[:r]
        if not s[-1] > _SKETCH_TAIL * rtol * s[0]:
            return None
        decay = math.log(s[-1] / s[0]) / (s.size - 1)
        l = max(2 * l, int(1.5 * math.log(rtol) / decay) + 16) if decay < 0 else math.inf
    return None
