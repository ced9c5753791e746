"""The engine contract, the table of engines, and the convenience function over both.

Every type-II engine is a function ``engine(problem, options, warm=None) -> EvidenceFit`` of a
:class:`~bayes_rvm.evidence.problem.Problem`, the one :class:`EvidenceOptions` and, optionally, a
previous fit of the same targets to start from (the fit at another kernel width).
:func:`fit_problem` picks the engine by the problem's likelihood (or design) and the options'
solver, and is what the estimators, cross-validation and the width search call;
:func:`fit_evidence` is the same on a design and targets as they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from bayes_rvm.evidence.chunked import chunked_engine
from bayes_rvm.evidence.design import ChunkedDesign
from bayes_rvm.evidence.gaussian import mackay_engine
from bayes_rvm.evidence.laplace import laplace_mackay_engine, laplace_sequential_engine
from bayes_rvm.evidence.options import SOLVERS, EvidenceOptions, merge_options
from bayes_rvm.evidence.problem import OneVsRestFit, Problem
from bayes_rvm.evidence.result import EvidenceFit
from bayes_rvm.evidence.sequential import sequential_engine
from bayes_rvm.evidence.student_t import student_t_engine

__all__ = ["ENGINES", "SOLVERS", "Engine", "fit_evidence", "fit_problem"]

#: The engine contract: ``engine(problem, options, warm=None) -> EvidenceFit``.
Engine = Callable[[Problem, EvidenceOptions, EvidenceFit | None], EvidenceFit]
#: ``(family, solver) -> engine``: ``"gaussian"`` for the Gaussian likelihood, ``"laplace"`` for
#: the others (Bernoulli, softmax, Poisson) through the Laplace approximation, ``"student_t"``
#: for Student-t noise (variational EM around the Gaussian engine of the same solver),
#: ``"chunked"`` for a Laplace likelihood on a design built in row blocks.
ENGINES: dict[tuple[str, str], Engine] = {
    ("gaussian", "sequential"): sequential_engine,
    ("gaussian", "mackay"): mackay_engine,
    ("laplace", "sequential"): laplace_sequential_engine,
    ("laplace", "mackay"): laplace_mackay_engine,
    ("student_t", "sequential"): student_t_engine,
    ("student_t", "mackay"): student_t_engine,
    ("chunked", "sequential"): chunked_engine,
    ("chunked", "mackay"): chunked_engine,
}


def _family(problem: Problem) -> str:
    if isinstance(problem.design, ChunkedDesign):
        return "chunked"
    if problem.likelihood in ("gaussian", "student_t"):
        return problem.likelihood
    return "laplace"


def fit_problem(
    problem: Problem, options: EvidenceOptions | None = None, warm: EvidenceFit | None = None
) -> EvidenceFit | OneVsRestFit:
    """The fit of ``problem`` by the engine of its likelihood and ``options.solver``.

    Parameters
    ----------
    problem : Problem
        Normalised (:meth:`~bayes_rvm.evidence.problem.Problem.regression` and its siblings; its
        :meth:`~bayes_rvm.evidence.problem.Problem.unscale` maps the fit back) or as given
        (:meth:`~bayes_rvm.evidence.problem.Problem.given`).
    options : EvidenceOptions, optional
        The solver and the engine's settings (default: all defaults).
    warm : EvidenceFit, optional
        A previous fit of the same targets (at another kernel width) to start from: the
        Gaussian engines take its noise precision (unless the problem fixes it) and the
        sequential one its alphas; the Laplace engines start cold.

    Returns
    -------
    EvidenceFit or OneVsRestFit
        A :class:`~bayes_rvm.evidence.problem.OneVsRestFit` for a one-vs-rest problem, whose
        classes are fitted one by one against the rest.
    """
    options = EvidenceOptions() if options is None else options
    if problem.one_vs_rest:
        classes = range(problem.targets.shape[1])
        return OneVsRestFit(tuple(fit_problem(problem.class_problem(c), options) for c in classes))
    return ENGINES[_family(problem), options.solver](problem, options, warm)


def fit_evidence(
    Phi: np.ndarray,
    T: np.ndarray,
    *,
    solver: str | None = None,
    options: EvidenceOptions | None = None,
    **settings,
) -> EvidenceFit:
    """Fit by the engine of ``solver`` for the likelihood of ``options`` (default Gaussian).

    :func:`fit_problem` of :meth:`Problem.given(Phi, T)
    <bayes_rvm.evidence.problem.Problem.given>`.

    Parameters
    ----------
    Phi : ndarray of shape (N, M), ChunkedDesign or SufficientStatistics
        Design matrix, float64; a :class:`~bayes_rvm.evidence.design.ChunkedDesign` (built in
        row blocks, Laplace likelihoods only) goes to
        :func:`~bayes_rvm.evidence.chunked.fit_laplace_chunked`'s engine; the problem's
        :class:`~bayes_rvm.basis.statistics.SufficientStatistics` (with ``T`` None) to a
        Gaussian one.
    T : array-like of shape (N,) or (N, D)
        Targets.
    solver : {"sequential", "mackay"}, optional
        Tipping and Faul's sequential algorithm, or MacKay's re-estimation with pruning
        (default: that of ``options``, ``"sequential"``).
    options : EvidenceOptions, optional
        Engine settings; ``settings`` override its fields. ``likelihood="student_t"`` (a
        setting) fits Student-t noise by :func:`~bayes_rvm.evidence.student_t.fit_student_t`,
        which also reads ``noise_nu`` (None: learned) and its EM settings.

    Returns
    -------
    EvidenceFit
    """
    settings = dict(settings)
    student_t = settings.get("likelihood") == "student_t"
    if student_t:
        del settings["likelihood"]
    opt = merge_options(options, settings)
    if solver is not None:
        opt = dataclasses.replace(opt, solver=solver)
    likelihood = opt.likelihood or ("bernoulli" if isinstance(Phi, ChunkedDesign) else "gaussian")
    return fit_problem(
        Problem.given(Phi, T, likelihood="student_t" if student_t else likelihood), opt
    )
