"""Type-II maximum likelihood (evidence) engines: NumPy and SciPy only, no PyMC.

Every engine takes ``(problem, options, warm=None)``: a :class:`Problem` (the normalised design
and targets, or those given), the one :class:`EvidenceOptions` (which names the solver), and
optionally a previous fit to start from. :func:`fit_problem` picks the engine by the problem's
likelihood and the options' solver; :func:`fit_evidence` and the ``fit_*(Phi, T, *,
options=None, **settings)`` functions are the same on a design and targets as they are.

What the estimators need of this layer is importable from here.
"""

from bayes_rvm.evidence.chunked import CACHE_BYTES, chunked_design
from bayes_rvm.evidence.engines import ENGINES, SOLVERS, Engine, fit_evidence, fit_problem
from bayes_rvm.evidence.gaussian import GaussianPosterior, fit_mackay, gaussian_posterior
from bayes_rvm.evidence.importance import MIN_ESS, ImportanceDraws, importance_draws
from bayes_rvm.evidence.laplace import fit_laplace_mackay, fit_laplace_sequential
from bayes_rvm.evidence.log_evidence import (
    WARN_SKIP,
    gaussian_log_evidence,
    laplace_log_evidence,
)
from bayes_rvm.evidence.loo import RefitLOO, refit_loo
from bayes_rvm.evidence.options import FREE_LATENT_SD, EvidenceOptions
from bayes_rvm.evidence.problem import (
    OneVsRestFit,
    Problem,
    TrainingData,
    column_scale,
    normalise_columns,
    prior_column_scale,
    target_scale,
)
from bayes_rvm.evidence.result import EvidenceFit, GaussianWeights, LaplaceWeights, moderation
from bayes_rvm.evidence.sequential import fit_sequential
from bayes_rvm.evidence.shared import SharedEvidence, shared_evidence
from bayes_rvm.evidence.single_basis import log_gain, log_hyperprior, optimal_alpha
from bayes_rvm.evidence.student_t import StudentTWeights, fit_student_t
from bayes_rvm.evidence.width import (
    SEARCH_RANK_TOL,
    WidthFit,
    WidthPath,
    default_width_grid,
    maximise_width,
    maximise_width_shared_ard,
    select_width_shared,
    shared_laplace_evidence,
)

__all__ = [
    "CACHE_BYTES",
    "ENGINES",
    "FREE_LATENT_SD",
    "MIN_ESS",
    "SEARCH_RANK_TOL",
    "SOLVERS",
    "WARN_SKIP",
    "Engine",
    "EvidenceFit",
    "EvidenceOptions",
    "GaussianPosterior",
    "GaussianWeights",
    "ImportanceDraws",
    "LaplaceWeights",
    "OneVsRestFit",
    "Problem",
    "RefitLOO",
    "SharedEvidence",
    "StudentTWeights",
    "TrainingData",
    "WidthFit",
    "WidthPath",
    "chunked_design",
    "column_scale",
    "default_width_grid",
    "fit_evidence",
    "fit_laplace_mackay",
    "fit_laplace_sequential",
    "fit_mackay",
    "fit_problem",
    "fit_sequential",
    "fit_student_t",
    "gaussian_log_evidence",
    "gaussian_posterior",
    "importance_draws",
    "laplace_log_evidence",
    "log_gain",
    "log_hyperprior",
    "maximise_width",
    "maximise_width_shared_ard",
    "moderation",
    "normalise_columns",
    "optimal_alpha",
    "prior_column_scale",
    "refit_loo",
    "select_width_shared",
    "shared_evidence",
    "shared_laplace_evidence",
    "target_scale",
]
