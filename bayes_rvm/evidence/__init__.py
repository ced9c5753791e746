"""Type-II maximum likelihood (evidence) engines: NumPy and SciPy only, no PyMC.

Every engine is ``fit_*(Phi, T, *, options=None, **settings) -> EvidenceFit`` with one
:class:`EvidenceOptions`; :func:`fit_evidence` picks the engine by likelihood and solver.
"""

from bayes_rvm.evidence.engines import ENGINES, SOLVERS, fit_evidence
from bayes_rvm.evidence.gaussian import GaussianPosterior, fit_mackay, gaussian_posterior
from bayes_rvm.evidence.importance import ImportanceDraws, importance_draws
from bayes_rvm.evidence.laplace import fit_laplace_mackay, fit_laplace_sequential
from bayes_rvm.evidence.log_evidence import gaussian_log_evidence, laplace_log_evidence
from bayes_rvm.evidence.options import EvidenceOptions
from bayes_rvm.evidence.result import EvidenceFit, GaussianWeights, LaplaceWeights
from bayes_rvm.evidence.sequential import fit_sequential
from bayes_rvm.evidence.single_basis import log_gain, log_hyperprior, optimal_alpha
from bayes_rvm.evidence.student_t import StudentTWeights, fit_student_t

__all__ = [
    "ENGINES",
    "SOLVERS",
    "EvidenceFit",
    "EvidenceOptions",
    "GaussianPosterior",
    "GaussianWeights",
    "ImportanceDraws",
    "LaplaceWeights",
    "StudentTWeights",
    "fit_evidence",
    "fit_laplace_mackay",
    "fit_laplace_sequential",
    "fit_mackay",
    "fit_sequential",
    "fit_student_t",
    "gaussian_log_evidence",
    "gaussian_posterior",
    "importance_draws",
    "laplace_log_evidence",
    "log_gain",
    "log_hyperprior",
    "optimal_alpha",
]
