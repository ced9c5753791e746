"""bayes_rvm: the Relevance Vector Machine as a PyMC model (type-II maximum likelihood or MCMC).

The public face::

    from bayes_rvm import RVR, RVC, KernelBasis, Prior, compare, save_model, load_model
"""

from importlib.metadata import PackageNotFoundError, version

from bayes_rvm.classifier import RVC
from bayes_rvm.compare import compare
from bayes_rvm.estimators import RVR
from bayes_rvm.io import load_model, save_model
from bayes_rvm.kernels import KernelBasis
from bayes_rvm.priors import Prior

try:
    __version__ = version("bayes-rvm")
except PackageNotFoundError:  # pragma: no cover - running from a source tree never installed
    __version__ = "0.0.0+unknown"

__all__ = [
    "RVC",
    "RVR",
    "KernelBasis",
    "Prior",
    "__version__",
    "compare",
    "load_model",
    "save_model",
]
