"""bayes_rvm: the Relevance Vector Machine as a PyMC model (type-II maximum likelihood or MCMC).

The public face::

    from bayes_rvm import RVR, RVC, RVRCV, RVCCV, KernelBasis, Prior
    from bayes_rvm import compare, save_model, load_model, summary

The names are resolved on first use (PEP 562), so that importing a NumPy-only layer such as
``bayes_rvm.evidence`` or ``bayes_rvm.basis.kernels`` does not pay for importing PyMC.
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("bayes-rvm")
except PackageNotFoundError:  # pragma: no cover - running from a source tree never installed
    __version__ = "0.0.0+unknown"

_EXPORTS = {
    "RVC": "bayes_rvm.estimators.classifier",
    "RVR": "bayes_rvm.estimators.regressor",
    "RVCCV": "bayes_rvm.estimators.cv",
    "RVRCV": "bayes_rvm.estimators.cv",
    "KernelBasis": "bayes_rvm.basis.kernels",
    "Prior": "bayes_rvm.models.priors",
    "compare": "bayes_rvm.posterior.comparison",
    "load_model": "bayes_rvm.estimators.saving",
    "save_model": "bayes_rvm.estimators.saving",
    "summary": "bayes_rvm.posterior.summary",
}

__all__ = [
    "RVC",
    "RVCCV",
    "RVR",
    "RVRCV",
    "KernelBasis",
    "Prior",
    "__version__",
    "compare",
    "load_model",
    "save_model",
    "summary",
]


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'bayes_rvm' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
