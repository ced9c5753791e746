"""Type-II maximum likelihood (evidence) engines: NumPy and SciPy only, no PyMC."""

from bayes_rvm.evidence.gaussian import (
    EvidenceFit,
    GaussianPosterior,
    fit_mackay,
    gaussian_posterior,
)
from bayes_rvm.evidence.laplace import LaplaceFit, fit_laplace_mackay, fit_laplace_sequential
from bayes_rvm.evidence.sequential import fit_sequential

__all__ = [
    "EvidenceFit",
    "GaussianPosterior",
    "LaplaceFit",
    "fit_laplace_mackay",
    "fit_laplace_sequential",
    "fit_mackay",
    "fit_sequential",
    "gaussian_posterior",
]
