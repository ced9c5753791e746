"""A ceiling on the evidence of one shared prior precision, from a few dozen principal axes.

At convergence the sequential engine compares its fit with the evidence of one prior precision
shared by its columns (a point of the same hyperparameter space that a poor local optimum can
sit far below). Computed exactly (:func:`~bayes_rvm.evidence.shared.shared_evidence`),
that costs the k x k Gram matrix of the columns and its eigendecomposition, ``O(N k^2 + k^3)``:
at k = 500 columns most of a fit at N = 1000. Ordinary fits are well above it (10-15 nats on
sinc); :func:`shared_evidence_ceiling` proves that for ``O(N k l)`` with l = 24 (grown where the
spectrum decays more slowly), and the exact value is computed only where the ceiling does not
settle it.

With ``rho = beta / alpha`` and the Gram matrix ``Phi Phi^T = sum_i s_i u_i u_i^T`` (only the
eigenvalues above :data:`~bayes_rvm.evidence.shared.RANK_TOL` times the largest kept, as the exact
computation keeps them), the evidence at its best ``beta`` for each ``rho`` is

    L(rho) = -ND/2 [log(2 pi) + 1 + log(E(rho) / ND)] - D/2 sum_i log(1 + rho s_i),
    E(rho) = sum_i P_i^2 / (1 + rho s_i) + rest,

``P_i`` the projections of the targets on ``u_i`` and ``rest`` what lies outside them (with a fixed
``beta``: ``-1/2 [ND log(2 pi) - ND log beta + D sum_i log(1 + rho s_i) + beta E(rho)]``). A
randomized range finder (Halko, Martinsson and Tropp, 2011) gives an orthonormal ``Q`` (N x l) and
``Phi = Q B + R`` with ``delta = ||R||_F^2`` measured; the eigenpairs of ``B B^T`` are the Ritz
values ``s'_j`` and vectors ``q_j`` of ``Phi Phi^T`` on the range of Q, ``w_j = q_j^T T``. Then,
rigorously up to rounding (``g``: the Gram matrix's, at its typical size ``u sqrt(N) ||Phi||_F^2``):

- ``Phi Phi^T`` and ``K' = Q B B^T Q^T`` differ by at most ``eps = 2 sqrt(s_max delta) + delta
  (+ g)``, and the kept part is below ``Phi Phi^T``, so ``E(rho) >= E'(rho) / (1 + rho eps)``;
- ``K'`` is a compression of ``Phi Phi^T``, so ``s_j >= s'_j`` (Cauchy's interlacing): the Ritz
  values surely above the rank cut bound the log-determinant from below;
- ``E(rho) >= rest`` at every ``rho``, and ``rest`` is at least the larger of two floors: the
  kept eigenvectors (eigenvalues above ``c = RANK_TOL s_max / 2``) take at most ``sqrt(delta /
  c)`` of what lies outside the range of Q and ``sqrt(s'_j / c)`` of each ``w_j`` below ``c``;
  or, with a clear gap in the Ritz values at the rank cut, the kept eigenvectors are those of
  the Ritz values above it, within ``sin theta <= eps / gap`` (Davis and Kahan).

``E`` decreases and the log-determinant increases with ``rho``, so on an interval ``[rho_lo,
rho_hi]`` the bound with ``E`` at ``rho_hi`` and the log-determinant at ``rho_lo`` holds
everywhere in it: a grid over ``rho`` in ``[0, 1e300]`` (every point MacKay's clipped iteration
can reach), refined where it matters, gives a ceiling on every value the exact computation can
return, whatever its starts. The rounding of the exact computation itself (its evidence from the
Gram matrix and from an SVD of the design differed by at most 2.5e-7 nats on sinc and
make_regression problems at rbf widths down to gamma = 5e-4) is far inside the relative margin of
1e-6 by which the sequential engine asks its fit to clear the ceiling.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy import linalg

from bayes_rvm.evidence.shared import RANK_TOL, grow_range

__all__ = ["CEILING_RANK", "Ceiling", "shared_evidence_ceiling"]

#: Columns of the range finder first. A smooth kernel's Gram matrix has few eigenvalues above
#: ``RANK_TOL`` of the largest (about 20 for the rbf of width 3 on sinc at N = 1000-4000: in the
#: sequential engine's check there, 24 columns hold them and 20 do not); where it has more, the
#: range grows while its values decay fast enough to be held by :data:`_MOST_COLUMNS`, else the
#: ceiling stays high and the exact evidence is computed.
CEILING_RANK = 24
#: The grid over ``log10 rho``: intervals of a quarter decade, the few highest of them refined
#: sixteenfold (four rounds at most) while they are above the value asked about.
_RHO_LIMITS = (-24.0, 24.0)
_RHO_PER_DECADE = 4
_REFINE = 16
_REFINE_ROUNDS = 4
_REFINE_MOST = 16
#: The range holds the spectrum above the rank cut when ``delta`` is below this fraction of it.
_CAPTURED = 1e-6
#: The most columns a range grows to (and at most half the smaller dimension of the design), at
#: least this many at a time: a pass over the residual costs about as much for fewer (N = 2000:
#: 0.5 ms for 8 columns, 1 ms for 24).
_MOST_COLUMNS = 96
_GROW_LEAST = 12
_UNIT_ROUNDOFF = np.finfo(np.float64).eps / 2


class Ceiling(NamedTuple):
    """:func:`shared_evidence_ceiling`'s answer."""

    #: The upper bound on the shared-precision log evidence.
    value: float
    #: Whether the range found holds every eigenvalue above the rank cut: then the exact
    #: evidence keeps at most that many, which the MRRR subset of
    #: :func:`~bayes_rvm.evidence.shared.principal_axes` computes fastest; else it may keep
    #: hundreds, which divide and conquer computes faster.
    captured: bool


def shared_evidence_ceiling(
    Phi: np.ndarray,
    T: np.ndarray,
    tt: float,
    *,
    beta: float | None = None,
    below: float = -math.inf,
    rank: int = CEILING_RANK,
    overwrite_phi: bool = False,
) -> Ceiling:
    """An upper bound on the log evidence of one prior precision shared by the columns of Phi.

    Bounds what :func:`~bayes_rvm.evidence.shared.shared_evidence` (or
    :func:`~bayes_rvm.evidence.shared.shared_evidence_gram` from ``Phi^T Phi``) returns for
    ``(Phi, T)``, at any ``alpha`` and (unless fixed) any ``beta`` (see the module docstring).
    Deterministic (fixed random test matrices); ``O(N k rank)``, and ``O(N k)`` more a column
    where the range missed part of the spectrum above the rank cut and a larger one is likely
    to hold it (:func:`~bayes_rvm.evidence.shared.grow_range`).

    Parameters
    ----------
    Phi : ndarray of shape (N, k)
    T : ndarray of shape (N,) or (N, D)
    tt : float
        ``sum(T**2)``.
    beta : float, optional
        A fixed noise precision (default: any).
    below : float, default=-inf
        The value the caller compares with: the grid is refined while some of it is above.
    rank : int, default=CEILING_RANK
        Columns of the range finder first.
    overwrite_phi : bool, default=False
        Whether ``Phi`` (then C-contiguous float64) may be overwritten with the residual of the
        range; else a copy is.

    Returns
    -------
    Ceiling
        The ceiling (``inf`` when the targets lie in the range found) and whether the range
        held the spectrum above the rank cut.
    """
    T = T[:, None] if T.ndim == 1 else T
    shape = Phi.shape
    R = Phi if overwrite_phi else np.array(Phi, dtype=np.float64, order="C")
    sketch = _Sketch(R, max(min(rank, *shape), 1))
    # Grown until it holds the spectrum above the rank cut, or until no size within reach is
    # likely to: only then is the ceiling computed (from a range that misses part of it, it
    # stands far above the fit: 1e5-1e6 nats on sinc at gamma = 0.25).
    while not sketch.captured() and (more := sketch.more_columns(shape)):
        sketch.grow(more)
    return Ceiling(sketch.ceiling(T, float(tt), beta, below), sketch.captured())


class _Sketch:
    """``Phi = Q B + R`` from a randomized range finder of ``l`` columns (grown by
    :meth:`grow`), ``delta = ||R||_F^2``, and the Ritz values ``s`` (descending) and vectors
    ``U`` (in the coordinates of ``Q``). ``R`` starts as ``Phi`` and is overwritten."""

    def __init__(self, R: np.ndarray, l: int):
        self.R = R
        self.Q, self.B = np.empty((R.shape[0], 0)), np.empty((0, R.shape[1]))
        self.rounds = 0
        self.grow(l)

    def grow(self, more: int) -> None:
        """Add ``more`` columns to the range."""
        self.Q, self.B, self.delta = grow_range(self.R, self.Q, self.B, more)
        self.rounds += 1
        # Ritz pairs from the l x l matrix B B^T (an SVD of B costs more at l = 24): exact for
        # one within l u s_max of it, which ``gram_error`` covers.
        s, U = linalg.eigh(self.B @ self.B.T, check_finite=False)
        self.s, self.U = np.maximum(s[::-1], 0.0), U[:, ::-1]
        self.s_max = float(self.s[0])
        # The rounding of the Gram matrix the exact evidence decomposes, at its typical size
        # (u sqrt(N) times ||Phi||_F^2 = ||B||_F^2 + delta), and of B B^T's eigenvalues.
        norm2 = float(self.s.sum()) + self.delta
        self.gram_error = _UNIT_ROUNDOFF * (
            math.sqrt(self.R.shape[0]) * norm2 + self.s.size * self.s_max
        )

    def captured(self) -> bool:
        """Whether the residual is far below the rank cut (a larger range would not help)."""
        return self.delta <= _CAPTURED * RANK_TOL * self.s_max

    def more_columns(self, shape: tuple[int, int]) -> int:
        """Columns to add so that the range likely holds the spectrum above the cut (0: none).

        Enough that the decay of the last half of the Ritz values, extrapolated geometrically,
        reaches the cut within 3/4 of the columns, and at least half as many again (each growth
        passes over the residual three times), up to :data:`_MOST_COLUMNS` or half the smaller
        dimension (the exact evidence costs little more there). The last half: a smooth
        kernel's spectrum falls ever faster (rbf of width 1 on 300 sinc points: from 24 values,
        92 columns by the last half, 120 by all of them; 50 eigenvalues above the cut), and a
        rough one's flattens (Friedman #1 at gamma = 0.1: 216 by the last half, 51 by all; 227
        above the cut). Where the extrapolation passes that limit, the first range still
        doubles once: a spectrum that decays slowly may end just past it (a low-rank design, a
        linear kernel on 26 features).
        """
        l, most = self.s.size, min(_MOST_COLUMNS, min(shape) // 2)
        h = l // 2
        if l < 4 or self.s[-1] <= 0 or l >= most:
            return 0
        rate = math.log(self.s[-1] / self.s[h]) / (l - 1 - h)  # per component
        need = (
            math.ceil((h + math.log(RANK_TOL * self.s_max / self.s[h]) / rate) / 0.75)
            if rate < 0
            else math.inf
        )
        if need > most:
            return min(2 * l, most) - l if self.rounds == 1 else 0
        return min(max(need, l + max(_GROW_LEAST, l // 2)), most) - l

    def ceiling(self, T: np.ndarray, tt: float, beta: float | None, below: float) -> float:
        """The bound of the module docstring, refined around ``below``."""
        s, s_max, delta, g = self.s, self.s_max, self.delta, self.gram_error
        W = self.U.T @ (self.Q.T @ T)  # the targets on the Ritz vectors, (l, D)
        w2 = W * W
        P2 = w2.sum(axis=1)
        eps = 2.0 * math.sqrt(s_max * delta) + delta + g  # ||Phi Phi^T - Q B B^T Q^T|| and more
        # Ritz values are at most the eigenvalues (Cauchy): those surely above the rank cut.
        kept = s >= RANK_TOL * (s_max + eps) + g
        s_low = np.where(kept, s - g, 0.0)
        tt_d = np.einsum("ij,ij->j", T, T)
        rest = max(self._rest_coupled(w2, tt_d), self._rest_gap(w2, tt_d, int(kept.sum()), eps))
        perp = max(tt - float(P2.sum()), 0.0)
        return _Intervals(s, s_low, P2, perp, rest, eps, T.shape, beta).ceiling(below)

    def _rest_coupled(self, w2: np.ndarray, tt_d: np.ndarray) -> float:
        """A floor of the targets' part outside the kept eigenvectors u (eigenvalues above c).

        Of the part of each output outside the range of Q they take at most ``sqrt(delta /
        c)`` (``u = Phi v / sqrt(s_u)`` and ``(I - Q Q^T) Phi = R``); of its projection ``w`` on
        the Ritz vectors, all, or all of that on the vectors of values ``s_j >= c`` and
        ``sqrt(sum s_j w_j^2 / c)`` of the rest (``u^T q_j = v^T Phi^T q_j / sqrt(s_u)`` and
        ``|Phi^T q_j|^2 = s_j``), whichever is less.
        """
        s, c = self.s, 0.5 * RANK_TOL * self.s_max
        if c <= 0:
            return 0.0
        big = s >= c
        in_range = np.minimum(
            np.sqrt(w2.sum(axis=0)),
            np.sqrt(w2[big].sum(axis=0)) + np.sqrt(s[~big] @ w2[~big] / c),
        )
        off = np.sqrt(np.maximum(tt_d - w2.sum(axis=0), 0.0))
        taken = in_range + math.sqrt(self.delta / c) * off
        return float(np.sum(np.maximum(tt_d - taken**2, 0.0)))

    def _rest_gap(self, w2: np.ndarray, tt_d: np.ndarray, r: int, eps: float) -> float:
        """The same floor where the spectrum has a clear gap at the rank cut: the exact evidence
        keeps the top r eigenvectors, within ``sin theta <= eps / gap`` of the top r Ritz
        vectors (Davis and Kahan); 0 without such a gap."""
        s, g = self.s, self.gram_error
        nxt = float(s[r]) if r < s.size else 0.0  # the (r+1)-th eigenvalue is below nxt + eps
        gap = float(s[r - 1]) - nxt - eps if r else 0.0
        if gap <= 0 or nxt + eps >= RANK_TOL * self.s_max - g:
            return 0.0
        # |(I - P) t| >= cos |(I - P') t| - sin |P' t| for the projections P, P' on the two.
        sin = min(eps / gap, 1.0)
        inside = w2[:r].sum(axis=0)
        outside = np.sqrt(np.maximum(tt_d - inside, 0.0))
        left = np.maximum(math.sqrt(1.0 - sin * sin) * outside - sin * np.sqrt(inside), 0.0)
        return float(np.sum(left**2))


class _Intervals:
    """The bound of the evidence on intervals of ``rho`` (see the module docstring)."""

    def __init__(self, s, s_low, P2, perp, rest, eps, shape, beta):
        self.s, self.s_low, self.P2, self.perp, self.rest, self.eps = s, s_low, P2, perp, rest, eps
        self.shape, self.beta = shape, beta

    def values(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """The bound of the evidence over each interval ``[lo, hi]``."""
        N, D = self.shape
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            E = self.P2 @ (1.0 / (1.0 + np.multiply.outer(self.s, hi))) + self.perp
            E = np.maximum(E / (1.0 + hi * self.eps), self.rest)
            logdet = np.log1p(np.multiply.outer(lo, self.s_low)).sum(axis=1)
            if self.beta is None:
                out = -0.5 * N * D * (math.log(2.0 * math.pi) + 1.0 + np.log(E / (N * D)))
            else:
                b = self.beta
                out = -0.5 * (N * D * (math.log(2.0 * math.pi) - math.log(b)) + b * E)
            out -= 0.5 * D * logdet
        return np.where(np.isnan(out), np.inf, out)

    def ceiling(self, below: float) -> float:
        """The largest bound over ``rho`` in ``[0, 1e300]``, refined where it is above ``below``."""
        a, b = _RHO_LIMITS
        inner = np.logspace(a, b, int((b - a) * _RHO_PER_DECADE) + 1)
        edges = np.concatenate([[0.0], inner, [1e300]])
        lo, hi = edges[:-1], edges[1:]
        vals = self.values(lo, hi)
        for _ in range(_REFINE_ROUNDS):
            finite = (lo > 0) & (hi < 1e300)
            cand = np.flatnonzero(finite & (vals >= below))
            if cand.size == 0:
                break
            cand = cand[np.argsort(-vals[cand], kind="stable")[:_REFINE_MOST]]
            sub = np.geomspace(lo[cand], hi[cand], _REFINE + 1, axis=1)
            keep = np.ones(lo.size, dtype=bool)
            keep[cand] = False
            new_lo, new_hi = sub[:, :-1].ravel(), sub[:, 1:].ravel()
            lo = np.concatenate([lo[keep], new_lo])
            hi = np.concatenate([hi[keep], new_hi])
            vals = np.concatenate([vals[keep], self.values(new_lo, new_hi)])
        return float(vals.max())
