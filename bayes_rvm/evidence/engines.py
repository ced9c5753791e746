"""The table of type-II engines, by likelihood family and solver, that both estimators use."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from bayes_rvm.evidence.chunked import fit_laplace_chunked
from bayes_rvm.evidence.design import ChunkedDesign
from bayes_rvm.evidence.gaussian import fit_mackay
from bayes_rvm.evidence.laplace import fit_laplace_mackay, fit_laplace_sequential
from bayes_rvm.evidence.options import EvidenceOptions
from bayes_rvm.evidence.result import EvidenceFit
from bayes_rvm.evidence.sequential import fit_sequential
from bayes_rvm.evidence.student_t import fit_student_t

__all__ = ["ENGINES", "SOLVERS", "fit_evidence"]

SOLVERS = ("sequential", "mackay")
#: ``(family, solver) -> engine``: ``"gaussian"`` for the Gaussian likelihood, ``"laplace"`` for
#: the others (Bernoulli, softmax, Poisson) through the Laplace approximation, ``"student_t"``
#: for Student-t noise (variational EM around the Gaussian engine of the same solver).
ENGINES: dict[tuple[str, str], Callable[..., EvidenceFit]] = {
    ("gaussian", "sequential"): fit_sequential,
    ("gaussian", "mackay"): fit_mackay,
    ("laplace", "sequential"): fit_laplace_sequential,
    ("laplace", "mackay"): fit_laplace_mackay,
    ("student_t", "sequential"): functools.partial(fit_student_t, solver="sequential"),
    ("student_t", "mackay"): functools.partial(fit_student_t, solver="mackay"),
}


def fit_evidence(
    Phi: np.ndarray,
    T: np.ndarray,
    *,
    solver: str = "sequential",
    options: EvidenceOptions | None = None,
    **settings,
) -> EvidenceFit:
    """Fit by the engine of ``solver`` for the likelihood of ``options`` (default Gaussian).

    Parameters
    ----------
    Phi : ndarray of shape (N, M) or ChunkedDesign
        Design matrix, float64; a :class:`~bayes_rvm.evidence.design.ChunkedDesign` (built in
        row blocks, Laplace likelihoods only) goes to
        :func:`~bayes_rvm.evidence.chunked.fit_laplace_chunked`.
    T : array-like of shape (N,) or (N, D)
        Targets.
    solver : {"sequential", "mackay"}, default="sequential"
        Tipping and Faul's sequential algorithm, or MacKay's re-estimation with pruning.
    options : EvidenceOptions, optional
        Engine settings; ``settings`` override its fields. ``likelihood="student_t"`` (a
        setting) fits Student-t noise by :func:`~bayes_rvm.evidence.student_t.fit_student_t`,
        which also takes ``noise_nu`` (None: learned) and its EM settings.

    Returns
    -------
    EvidenceFit
    """
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}.")
    if isinstance(Phi, ChunkedDesign):
        # A design built in row blocks: the Laplace engines start from a subset of rows.
        return fit_laplace_chunked(Phi, T, solver=solver, options=options, **settings)
    likelihood = settings.get("likelihood", options.likelihood if options else None)
    family = "gaussian" if likelihood in (None, "gaussian") else "laplace"
    if likelihood == "student_t":
        family = "student_t"
    return ENGINES[family, solver](Phi, T, options=options, **settings)
