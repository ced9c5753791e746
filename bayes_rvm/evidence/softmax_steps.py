"""Softmax steps of the Laplace sequential engine (:mod:`bayes_rvm.evidence.laplace`).

The softmax model shares one ``alpha`` per basis function across its C classes and couples the
classes in its (K C)-square Hessian. Three pieces of the engine are its own: the active alphas'
re-estimation by MacKay's rule from the coupled Hessian, the Hessian the mode search of a step
starts from (the accepted mode's, bordered by the added columns), and the shortlist of candidates
whose statistics a screened step computes.
"""

from __future__ import annotations

import numpy as np

from bayes_rvm.evidence.design import softmax_cross_hessian
from bayes_rvm.evidence.mode import LaplacePosterior

__all__ = ["WEAK_GAMMA", "bordered_hessian", "shortlist", "softmax_reestimation"]

#: A softmax column whose summed well-determinedness sum_c gamma_ic falls below this times C while
#: its MacKay alpha rises is pruned (MacKay's alpha would creep to infinity).
WEAK_GAMMA = 1e-3


def shortlist(s: np.ndarray, Q: np.ndarray, candidates: np.ndarray, size: int) -> np.ndarray:
    """The (sorted) indices of the ``size`` candidates of largest ``max_c q_c^2 / s_c``.

    ``s`` (M x C) from the last full pass, ``Q`` (M x C) current, ``candidates`` a mask. A column
    enters for some class where ``q^2 > s``: the ratio ranks those not in yet by how far they
    are from it (their gains would all be flat at zero).
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        score = np.max(Q * Q / s, axis=1)
    score = np.where(candidates & np.isfinite(score), score, -np.inf)
    n = min(size, int(np.isfinite(score).sum()))
    return np.sort(np.argsort(-score, kind="stable")[:n])


def bordered_hessian(
    post: LaplacePosterior, accepted: tuple, act: np.ndarray, Phi_a: np.ndarray, alpha_a
) -> tuple[np.ndarray, bool]:
    """The negative softmax Hessian of the columns ``act`` (design ``Phi_a``, alphas
    ``alpha_a``) at the latent values of the mode ``post`` of ``accepted = (columns, alphas of
    all M)``: its blocks over the kept columns, and the added columns' rows, O(N K C^2) each
    instead of the O(N (K C)^2) of all.

    Returns ``(H, exact)``: ``exact`` when no column was removed (then the start of the mode
    search has the accepted mode's latent values, and ``H`` is its Hessian).
    """
    old, old_alpha = accepted
    C, K0, K = post.mean.shape[1], len(old), act.size
    pos = {k: p for p, k in enumerate(old)}
    kept = np.array([p for p, k in enumerate(act.tolist()) if k in pos], dtype=np.intp)
    new = np.array([p for p, k in enumerate(act.tolist()) if k not in pos], dtype=np.intp)
    src = np.array([pos[k] for k in act[kept].tolist()], dtype=np.intp)
    classes = np.arange(C)[:, None]
    ni, oi = (classes * K + kept).ravel(), (classes * K0 + src).ravel()
    Hd = post.hessian[np.ix_(oi, oi)]
    Hd[np.diag_indices_from(Hd)] -= np.tile(old_alpha[act[kept]], C)
    H = np.empty((K * C, K * C))
    H[np.ix_(ni, ni)] = Hd
    if new.size:
        X = softmax_cross_hessian(Phi_a, post.mu, Phi_a[:, new])
        ci = (classes * K + new).ravel()
        H[:, ci] = X
        H[ci, :] = X.T
    H[np.diag_indices_from(H)] += np.tile(alpha_a, C)
    return H, kept.size == K0


def softmax_reestimation(steps, post: LaplacePosterior, act, alpha_a, prior_thr) -> None:
    """Softmax: the active columns' re-estimations by MacKay's update, in place.

    The per-class S leaves out the softmax's cross-class curvature, which misleads the
    re-estimations (they lower the true Laplace evidence); the active alphas take MacKay's update
    from the exact Hessian instead, and S, Q only propose additions and deletions.
    """
    (a, b), threshold_alpha = prior_thr
    M, C, K = steps.gain.size, post.mean.shape[1], act.size
    is_act = np.zeros(M, dtype=bool)
    is_act[act] = True
    W2 = np.sum(post.mean**2, axis=1)
    gam = np.sum(post.gamma(alpha_a), axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        mack = (gam + 2 * a) / (W2 + 2 * b)
    mack = np.where(np.isfinite(mack) & (mack > 0) & (mack < threshold_alpha), mack, np.inf)
    steps.new_alpha[act] = mack
    steps.reest = is_act & np.isfinite(steps.new_alpha)
    steps.delete |= is_act & ~np.isfinite(steps.new_alpha)
    if K == 1:
        steps.delete[:] = False
        steps.reest[act] = True
        steps.new_alpha[act] = np.where(np.isfinite(mack), mack, alpha_a)
    steps.gain[steps.reest] = 0.0
    # MacKay's alphas creep to infinity over thousands of steps once a column is no longer
    # determined by the data (gamma ~ 0): a rising alpha of such a column is taken to its limit
    # at once, and the MacKay step prunes it.
    if K > 1:
        weak = np.zeros(M, dtype=bool)
        weak[act] = (gam < WEAK_GAMMA * C) & (mack > alpha_a)
        steps.new_alpha[weak] = np.inf
        steps.reest &= ~weak
        steps.delete |= weak
        steps.gain[weak] = -np.inf
