"""The objective as a function of one prior precision, and the Gamma hyperprior (all engines).

With all other hyperparameters held, the objective (log evidence plus log hyperprior) depends on
one ``alpha_i`` only through the sparsity and quality factors ``s``, ``q`` of basis ``i`` measured
against the model without it (Tipping and Faul 2003, eqs. 19-22). Two layouts occur:

* **shared** (Gaussian likelihood): one ``s`` per basis function, shared by the D outputs, and
  ``q2 = |q|^2`` summed over them;
* **per class** (Laplace engines): ``s`` and ``q2`` of shape (M, C), one column per class of the
  linearised problem, the C classes sharing ``alpha_i``.

The gain of holding a basis at ``alpha`` rather than leaving it out is, summed over the outputs or
classes ``c``,

    l(alpha) = 1/2 sum_c [q_c^2 / (alpha + s_c) - log(1 + s_c / alpha)] + a log alpha - b alpha

with the Gamma(a, b) hyperprior over ``log alpha`` (``(nu/2, nu/2)`` is the Student-t prior).
"""

from __future__ import annotations

import numpy as np

__all__ = ["log_gain", "log_hyperprior", "optimal_alpha"]

#: Bisection steps of the per-class optimum on [1e-12, alpha_max] in log alpha.
_BISECTIONS = 45


def log_hyperprior(alpha, beta=None, alpha_prior=(0.0, 0.0), beta_prior=(0.0, 0.0)) -> float:
    """Log Gamma hyperprior density over ``log alpha`` (and ``log beta``), up to a constant.

    ``beta=None`` (the Laplace engines: no noise precision) leaves the noise term out.
    """
    a, b = alpha_prior
    out = float(np.sum(a * np.log(alpha) - b * alpha)) if (a or b) else 0.0
    if beta is not None:
        c, d = beta_prior
        out += float(c * np.log(beta) - d * beta)
    return out


def log_gain(s, q2, alpha, n_out: int = 1, prior=(0.0, 0.0)):
    """``l(alpha)``: objective gained by holding a basis at ``alpha`` instead of leaving it out.

    Shared layout when ``s`` has the shape of ``alpha`` (``n_out`` outputs share ``s``); per-class
    layout when ``s`` and ``q2`` have one more, trailing, class axis (``n_out`` is then ignored).
    """
    a, b = prior
    if np.ndim(s) > np.ndim(alpha):
        al = alpha[..., None]
        out = 0.5 * np.sum(q2 / (al + s) - np.log1p(s / al), axis=-1)
    else:
        out = 0.5 * (q2 / (alpha + s) - n_out * np.log1p(s / alpha))
    if a or b:
        out = out + a * np.log(alpha) - b * alpha
    return out


def _closed_form(s, q2, n_out: int):
    # Without a hyperprior: alpha = D s^2 / theta where theta = |q|^2 - D s > 0, and the gain at
    # the optimum D/2 (x - log(1 + x)) with x = theta / (D s).
    theta = q2 - n_out * s
    ok = theta > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = np.where(ok, n_out * s * s / np.where(ok, theta, 1.0), np.inf)
        x = np.where(ok, theta / (n_out * s), 0.0)
    return alpha, np.where(ok, 0.5 * n_out * (x - np.log1p(x)), 0.0)


def _cubic(s, q2, n_out: int, a: float, b: float):
    # Stationary points of l: positive roots of
    # -2b alpha^3 + (2a - 4bs) alpha^2 + (Ds - |q|^2 + 4as - 2bs^2) alpha + (D + 2a) s^2.
    c3 = np.full_like(s, -2.0 * b)
    c2 = 2.0 * a - 4.0 * b * s
    c1 = n_out * s - q2 + 4.0 * a * s - 2.0 * b * s * s
    c0 = (n_out + 2.0 * a) * s * s
    if b > 0:
        # Roots of the cubic as eigenvalues of its companion matrices, all at once.
        comp = np.zeros((*s.shape, 3, 3))
        comp[..., 0, 0] = -c2 / c3
        comp[..., 0, 1] = -c1 / c3
        comp[..., 0, 2] = -c0 / c3
        comp[..., 1, 0] = 1.0
        comp[..., 2, 1] = 1.0
        roots = np.linalg.eigvals(comp)
    else:
        # b = 0 leaves a quadratic (a > 0 here).
        sq = np.sqrt((c1 * c1 - 4.0 * c2 * c0).astype(np.complex128))
        roots = np.stack([(-c1 - sq) / (2.0 * c2), (-c1 + sq) / (2.0 * c2)], axis=-1)
    re = roots.real
    real = np.abs(roots.imag) <= 1e-9 * np.maximum(np.abs(re), 1e-300)
    # Maxima of l are where the polynomial (the sign of dl/dalpha) falls through zero.
    slope = (3.0 * c3[..., None] * re + 2.0 * c2[..., None]) * re + c1[..., None]
    cand = real & (re > 0) & (slope < 0)
    r = np.where(cand, re, 1.0)
    gains = np.where(cand, log_gain(s[..., None], q2[..., None], r, n_out, (a, b)), -np.inf)
    best = np.argmax(gains, axis=-1)[..., None]
    gain = np.take_along_axis(gains, best, axis=-1)[..., 0]
    alpha = np.take_along_axis(r, best, axis=-1)[..., 0]
    keep = gain > 0
    return np.where(keep, alpha, np.inf), np.where(keep, gain, 0.0)


def _bisection(s, q2, a: float, b: float, alpha_max: float):
    # Per class: the stationary point of the shared alpha by bisection of dl/dlog alpha on
    # [1e-12, alpha_max] (a sign change from + to - is a maximum).
    def slope(u):
        al = np.exp(u)[:, None]
        d = 0.5 * np.sum(s_r / (al + s_r) - al * q2_r / (al + s_r) ** 2, axis=1)
        return d + a - b * al[:, 0]

    alpha = np.full(s.shape[0], np.inf)
    gain = np.zeros(s.shape[0])
    s_r, q2_r = s, q2
    interior = slope(np.full(s.shape[0], np.log(alpha_max))) < 0
    # Only rows whose objective still rises towards alpha_max need a root (few, usually).
    rows = np.flatnonzero(interior)
    if rows.size:
        s_r, q2_r = s[rows], q2[rows]
        lo = np.full(rows.size, np.log(1e-12))
        hi = np.full(rows.size, np.log(alpha_max))
        for _ in range(_BISECTIONS):
            mid = 0.5 * (lo + hi)
            up = slope(mid) > 0
            lo = np.where(up, mid, lo)
            hi = np.where(up, hi, mid)
        al = np.exp(0.5 * (lo + hi))
        g = log_gain(s_r, q2_r, al, 1, (a, b))
        keep = g > 0
        alpha[rows[keep]] = al[keep]
        gain[rows[keep]] = g[keep]
    return alpha, gain


def optimal_alpha(
    s, q2, n_out: int = 1, prior=(0.0, 0.0), *, per_class: bool = False, alpha_max: float = 1e9
):
    """Best single ``alpha`` for factors ``s``, ``q2`` (vectorised) and its gain ``l(alpha)``.

    Shared layout (``s`` of any shape, ``n_out`` outputs): without a hyperprior the closed form
    ``D s^2 / (|q|^2 - D s)``; with one, the best positive root of a cubic, solved exactly.
    Per-class layout (``per_class=True``; ``s``, ``q2`` of shape (M, C)): one class without
    hyperprior takes the closed form, otherwise the stationary point is found by bisection on
    ``[1e-12, alpha_max]``.
    Returns ``alpha`` (``inf`` where leaving the basis out is best) and the gain (0 there).
    """
    a, b = prior
    s = np.asarray(s, dtype=np.float64)
    q2 = np.asarray(q2, dtype=np.float64)
    if not per_class:
        if not a and not b:
            return _closed_form(s, q2, n_out)
        return _cubic(s, q2, n_out, a, b)
    if s.shape[1] == 1 and not a and not b:
        return _closed_form(s[:, 0], q2[:, 0], 1)
    return _bisection(s, q2, a, b, alpha_max)
