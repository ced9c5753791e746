"""Laplace fits on a design too large for memory: a row subset first, then passes over all rows.

A :class:`~bayes_rvm.evidence.design.ChunkedDesign` builds its unit-norm columns ``chunk_rows``
rows at a time (:func:`chunked_design`: one pass finds the column norms). The Laplace engines run
on it unchanged (:mod:`bayes_rvm.evidence.laplace`): each sequential step's candidate statistics
``Phi^T [B Phi_a, t - y]`` and ``(Phi * Phi)^T B`` are one pass over every column, and the Newton
steps of the mode read only the active columns, which the design keeps in a bounded cache.

A pass costs about ``N M (K + kernel)`` flops, so :func:`fit_laplace_chunked` spends as few as it
can: the engine first runs in memory on a deterministic subset of :func:`subset_rows` rows, and
the fit on all rows starts from the alphas it found (the sequential engine's ``alpha_init``), so
that the passes over all rows only refine them. The refinement reaches the same optimum of the
Laplace evidence as a cold fit on all rows where both converge to it (tested against the
in-memory fit); it skips the deletion probes (``probe_deletions``), whose screens would cost
dozens of passes each (the subset fit has run them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from bayes_rvm.evidence.design import ChunkedDesign
from bayes_rvm.evidence.laplace import fit_laplace_mackay, fit_laplace_sequential
from bayes_rvm.evidence.options import EvidenceOptions, resolve_options
from bayes_rvm.evidence.result import EvidenceFit

__all__ = [
    "CACHE_BYTES",
    "SUBSET_ROWS",
    "chunked_design",
    "column_norms",
    "fit_laplace_chunked",
    "subset_rows",
]

#: Rows of the in-memory subset fit that starts a chunked one (at most a quarter of the rows).
SUBSET_ROWS = 50_000
#: Memory a chunked design may keep between passes (see
#: :class:`~bayes_rvm.evidence.design.ChunkedDesign`): the whole design up to this size.
CACHE_BYTES = 4.5 * 2**30


def column_norms(design_blocks) -> np.ndarray:
    """Column norms over every row block ``(rows, P)`` of ``design_blocks``, as
    :func:`bayes_rvm.problem.normalise_columns` computes them (1 for a zero column).

    The sum of squares is kept relative to the largest magnitude seen so far, rescaled when a
    larger one comes (LAPACK's ``dnrm2``), so kernel values of 1e160 or 1e-200 neither overflow
    nor underflow.
    """
    peak = ssq = None
    for _, P in design_blocks:
        if not np.all(np.isfinite(P)):
            raise ValueError("the kernel produced non-finite values in a block of rows.")
        p = np.maximum(P.max(axis=0, initial=0.0), -P.min(axis=0, initial=0.0))
        if peak is None:
            peak, ssq = np.zeros_like(p), np.zeros_like(p)
        new = np.maximum(peak, p)
        with np.errstate(divide="ignore", invalid="ignore"):
            ssq = np.where(new > 0, ssq * np.square(np.where(new > 0, peak / new, 0.0)), 0.0)
            scaled = P / np.where(new > 0, new, 1.0)
        ssq += np.einsum("ij,ij->j", scaled, scaled)
        peak = new
    norms = peak * np.sqrt(ssq)
    norms[norms == 0] = 1.0
    return norms


def chunked_design(
    block: Callable, n_rows: int, n_columns: int, *, chunk_rows: int, cache_bytes=CACHE_BYTES
) -> ChunkedDesign:
    """The unit-norm :class:`~bayes_rvm.evidence.design.ChunkedDesign` of ``block(rows,
    columns)`` (the design's rows in its own units, see there): one pass finds the norms."""
    raw = ChunkedDesign(
        block, n_rows, np.ones(n_columns), chunk_rows=chunk_rows, cache_bytes=cache_bytes
    )
    norms = column_norms(raw.blocks())
    design = ChunkedDesign(block, n_rows, norms, chunk_rows=chunk_rows, cache_bytes=cache_bytes)
    design.counter = raw.counter
    if "blocks" in raw.store:
        # The norms pass kept the blocks: normalised in place, they serve every later pass.
        for _, P in raw.store["blocks"]:
            P /= norms
        design.store = raw.store
    return design


def subset_rows(n_rows: int, size: int = SUBSET_ROWS) -> np.ndarray:
    """The rows of the subset fit: ``min(size, n_rows // 4)`` of them, sorted, drawn with a fixed
    seed (the same data give the same fit)."""
    n = max(min(int(size), n_rows // 4), 1)
    return np.sort(np.random.default_rng(0).choice(n_rows, n, replace=False))


def fit_laplace_chunked(
    design: ChunkedDesign,
    T,
    *,
    solver: str = "sequential",
    options: EvidenceOptions | None = None,
    **settings,
) -> EvidenceFit:
    """A Laplace fit on a chunked design: in memory on a row subset, then refined on all rows.

    Parameters
    ----------
    design : ChunkedDesign
        Unit-norm columns (:func:`chunked_design`).
    T : array-like of shape (N,) or (N, C)
        Targets (see :func:`~bayes_rvm.evidence.posterior_mode`).
    solver : {"sequential", "mackay"}
        ``"mackay"`` runs MacKay's engine on all rows from the start (every candidate column
        active: O(N M^2) a pass).
    options, **settings
        As for :func:`~bayes_rvm.evidence.fit_laplace_sequential`; an ``alpha_init`` given there
        skips the subset fit.

    Returns
    -------
    EvidenceFit
        The fit on all rows; ``design.counter`` holds the passes it took.
    """
    engine = "laplace_" + solver
    opt = resolve_options(engine, options, settings)
    if solver == "mackay":
        return fit_laplace_mackay(design, T, options=opt)
    if opt.alpha_init is None:
        rows = subset_rows(design.shape[0])
        T2 = np.asarray(T, dtype=np.float64)
        T2 = T2[:, None] if T2.ndim == 1 else T2
        # The subset's columns keep the norms of all rows, so its weights and alphas are on the
        # scale of the full problem's and start it where they stand.
        start = fit_laplace_sequential(design.rows(rows), T2[rows], options=opt)
        if np.isfinite(start.alpha).any():
            opt = dataclasses.replace(opt, alpha_init=start.alpha)
    opt = dataclasses.replace(opt, probe_deletions=False)
    return fit_laplace_sequential(design, T, options=opt)
