"""The state of the fast sequential engine: the active set, its posterior, each column's factors.

Split from :mod:`bayes_rvm.evidence.sequential`, which holds the schedule of the steps; this module
holds their rank-one algebra (Tipping and Faul, 2003, appendix): the posterior covariance ``Sigma``
of the K active weights, the cross products ``Phi_a^T Phi`` (K x M), and ``S_m``, ``Q_m`` for all M
columns, each step updating them in O(K M).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import lapack

from bayes_rvm.evidence.log_evidence import cholesky, gaussian_log_evidence

__all__ = ["GramState", "SequentialState"]


class SequentialState:
    """Active set, its posterior, and the factors ``S``, ``Q`` of every column.

    Rows of the active arrays are in the order the columns entered; a deletion moves the last row
    into the freed one, so nothing is shifted. Every step runs a few dozen NumPy calls on arrays
    of size K or M, so the methods keep the number of calls (not only the flops) small: at small
    K and M each call costs more than its arithmetic.
    """

    def __init__(self, Phi, PT, dd, tt, beta, ab):
        self.Phi, self.PT, self.dd, self.tt = Phi, PT, dd, tt
        self.N, self.D = self.n_rows(), PT.shape[1]
        self.M = PT.shape[0]
        self.beta = beta
        self.a, self.b = ab
        self.idx = np.empty(0, dtype=np.intp)  # active columns
        self.pos = np.full(self.M, -1, dtype=np.intp)  # column -> row in the active arrays
        self.alpha = np.empty(0)
        self.is_free = np.zeros(0, dtype=bool)
        self.n_free = 0
        self.G = np.empty((0, 0))  # Phi_a^T Phi_a
        self.C = np.empty((8, self.M))  # rows Phi^T phi_j of the active columns (grown by doubling)
        self.Sigma = np.empty((0, 0))
        self.mu = np.empty((0, self.D))
        self.S = beta * dd
        self.Q = beta * PT
        self.residual_base = 0.0
        self.log_ev = 0.0

    @property
    def K(self) -> int:
        return self.idx.size

    def n_rows(self) -> int:
        return self.Phi.shape[0]

    def like(self, beta: float) -> SequentialState:
        """An empty state of the same problem at noise precision ``beta``."""
        return SequentialState(self.Phi, self.PT, self.dd, self.tt, beta, (self.a, self.b))

    def column(self, j: int) -> np.ndarray:
        return np.ascontiguousarray(self.Phi[:, j])

    def column_products(self, phi_j: np.ndarray) -> np.ndarray:
        # The only O(N M) operation of a step.
        return self.Phi.T @ phi_j

    def prior_term(self) -> float:
        if not (self.a or self.b):
            return 0.0
        reg = self.alpha[~self.is_free] if self.n_free else self.alpha
        return float(np.sum(self.a * np.log(reg) - self.b * reg))

    def append(self, j: int, alpha: float, free: bool, cj: np.ndarray) -> None:
        """Grow the active arrays by one column (``Sigma``, ``mu`` are the caller's business)."""
        K = self.K
        if K == self.C.shape[0]:
            self.C = np.concatenate([self.C, np.empty_like(self.C)])
        self.C[K] = cj
        G = np.empty((K + 1, K + 1))
        G[:K, :K] = self.G
        G[K, :K] = G[:K, K] = cj[self.idx]
        G[K, K] = self.dd[j]
        self.G = G
        self.idx = np.append(self.idx, j)
        self.pos[j] = K
        self.alpha = np.append(self.alpha, alpha)
        self.is_free = np.append(self.is_free, free)
        self.n_free += bool(free)

    def factor(self, beta: float) -> tuple:
        """Cholesky factor of ``H = A + beta G`` and the log evidence at ``beta`` (O(K^3)).

        Uses ``beta ||T - Phi M||^2 + sum alpha m^2 = beta ||T||^2 - beta^2 |z|^2`` with
        ``z = L^-1 Phi_a^T T``. Returns ``(L, log_ev, H, z)``: :meth:`refresh` takes the tuple.
        """
        H = beta * self.G
        H.flat[:: self.K + 1] += self.alpha
        # LAPACK directly: SciPy's wrappers cost more than the K x K work itself at small K.
        # Cholesky's backward error is insensitive to a diagonal scaling of H, so the
        # equilibration of log_evidence.cholesky is left to the rare case that H is numerically
        # indefinite, where that function takes over (with its jitter and warning).
        L, info = lapack.dpotrf(H, lower=1, clean=1)
        if info:
            L = cholesky(H)
        z, _ = lapack.dtrtrs(L, self.PT[self.idx], lower=1)
        quad = beta * self.tt - beta * beta * float(np.vdot(z, z))
        return L, gaussian_log_evidence(L, self.alpha, beta, self.N, quad, self.D), H, z

    def refresh(self, factored: tuple | None = None) -> None:
        """Recompute ``Sigma``, ``mu``, ``S``, ``Q`` and the log evidence from scratch.

        ``factored`` is :meth:`factor` at the current ``beta`` when the caller has it already.
        """
        K, beta = self.K, self.beta
        L, self.log_ev, H, z = self.factor(beta) if factored is None else factored
        Linv, _ = lapack.dtrtri(L, lower=1)
        self.Sigma = Linv.T @ Linv
        self.mu = Linv.T @ z
        self.mu *= beta
        CK = self.C[:K]
        U = Linv @ CK
        U *= U
        S = U.sum(axis=0)
        S *= -beta * beta
        S += beta * self.dd
        self.S = S
        Q = self.PT - CK.T @ self.mu
        Q *= beta
        self.Q = Q
        # Residual of H Sigma = I after equilibration by diag(H): it measures rounding, not the
        # (possibly huge) spread of the alphas. Kept as the baseline the guard compares with.
        dh = np.sqrt(H.diagonal())
        R = H @ self.Sigma
        R *= dh / dh[:, None]
        R.flat[:: K + 1] -= 1.0
        self.residual_base = float(np.abs(R).max())

    def column_residual(self, p: int) -> float:
        """Equilibrated residual of column ``p`` of ``H Sigma = I`` (O(K^2))."""
        col = self.Sigma[:, p]
        hd = self.beta * self.G.diagonal()
        hd += self.alpha
        r = self.G @ col
        r *= self.beta
        r += self.alpha * col
        r *= np.sqrt(hd[p] / hd)
        r[p] -= 1.0
        return float(np.abs(r).max())

    def factors_active(self):
        """``s`` and ``|q|^2`` of the active columns measured without themselves."""
        al = self.alpha
        sd = self.Sigma.diagonal()
        inv_sd = 1.0 / sd
        # Two algebraically equal forms; each loses precision where alpha Sigma_ii nears the
        # other end of [0, 1], so take the well-conditioned one.
        prior_side = al * sd > 0.5
        if not prior_side.any():  # every weight well determined by the data: one form
            ratio, s, q = inv_sd, inv_sd - al, self.mu
        else:
            S = self.S[self.idx]
            ratio = np.where(prior_side, al / (al - S), inv_sd)
            s = np.where(prior_side, S * ratio, inv_sd - al)
            q = np.where(prior_side[:, None], self.Q[self.idx], self.mu)
        if self.D == 1:
            q = q[:, 0] * ratio
            q2 = q * q
        else:
            q = q * ratio[:, None]
            q2 = np.einsum("ij,ij->i", q, q)
        return np.maximum(s, 0.0, out=s), q2

    # --- rank-one steps (Tipping and Faul, appendix) ------------------------------------------

    def add(self, j: int, alpha: float, cj: np.ndarray) -> None:
        beta, K = self.beta, self.K
        v = self.Sigma @ cj[self.idx]
        # e = beta (cj - beta C^T v): the change of S and Q is rank one along it.
        e = v @ self.C[:K]
        e *= -beta
        e += cj
        e *= beta
        sjj = 1.0 / (alpha + self.S[j])
        mj = sjj * self.Q[j]
        Sig = np.empty((K + 1, K + 1))
        Sig[:K, :K] = self.Sigma
        Sig[:K, :K] += (beta * beta * sjj) * np.multiply.outer(v, v)
        Sig[:K, K] = Sig[K, :K] = -beta * sjj * v
        Sig[K, K] = sjj
        self.Sigma = Sig
        mu = np.empty((K + 1, self.D))
        mu[:K] = self.mu - np.multiply.outer(beta * v, mj)
        mu[K] = mj
        self.mu = mu
        self.Q -= np.multiply.outer(e, mj)
        e *= e
        e *= sjj
        self.S -= e
        self.append(j, alpha, False, cj)

    def _downdate(self, p: int, kappa: float) -> None:
        """``Sigma <- Sigma - kappa Sigma_p Sigma_p^T`` and what follows from it (O(K M))."""
        sp = self.Sigma[:, p].copy()
        mp = self.mu[p].copy()
        W = np.multiply.outer(sp, sp)
        W *= kappa  # after the product, so that Sigma stays exactly symmetric
        self.Sigma -= W
        self.mu -= np.multiply.outer(kappa * sp, mp)
        z = sp @ self.C[: self.K]  # Phi^T Phi_a Sigma_p: the change of S and Q is along it
        self.Q += np.multiply.outer(z, (kappa * self.beta) * mp)
        z *= z
        z *= kappa * self.beta * self.beta
        self.S += z

    def reestimate(self, p: int, alpha: float) -> None:
        delta = alpha - self.alpha[p]
        # kappa = 1 / (Sigma_pp + 1 / delta), written without dividing by a vanishing delta.
        self._downdate(p, delta / (self.Sigma[p, p] * delta + 1.0))
        self.alpha[p] = alpha

    def delete(self, p: int) -> None:
        self._downdate(p, 1.0 / self.Sigma[p, p])
        last = self.K - 1
        j = int(self.idx[p])
        if p != last:
            for arr in (self.Sigma, self.G):
                arr[p, :] = arr[last, :]
                arr[:, p] = arr[:, last]
            for arr in (self.mu, self.C, self.alpha, self.is_free, self.idx):
                arr[p] = arr[last]
            self.pos[self.idx[p]] = p
        self.Sigma = self.Sigma[:last, :last].copy()
        self.G = self.G[:last, :last].copy()
        self.mu = self.mu[:last]
        self.alpha = self.alpha[:last]
        self.is_free = self.is_free[:last]
        self.idx = self.idx[:last]
        self.pos[j] = -1


class GramState(SequentialState):
    """The state of a problem given by its sufficient statistics: no design, its Gram matrix.

    ``Phi^T phi_j`` is column ``j`` of ``gram = Phi^T Phi`` (read, not computed: an addition
    costs O(M) instead of O(N M)); everything else is the parent's.
    """

    def __init__(self, gram, n_rows, PT, dd, tt, beta, ab):
        self.gram, self._n = gram, int(n_rows)
        super().__init__(None, PT, dd, tt, beta, ab)

    def n_rows(self) -> int:
        return self._n

    def like(self, beta: float) -> GramState:
        return GramState(self.gram, self._n, self.PT, self.dd, self.tt, beta, (self.a, self.b))

    def column(self, j: int) -> int:
        return int(j)

    def column_products(self, phi_j: int) -> np.ndarray:
        # The Gram matrix is symmetric: row j is column j, and contiguous.
        return self.gram[phi_j].copy()
