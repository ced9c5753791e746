"""The marginal likelihood of the RVM regression model, ``w`` integrated out, as a PyTensor Op.

:func:`marginal_log_likelihood` builds the symbolic log density on ``(log alpha, log beta)`` with
its closed-form gradient; :func:`log_evidence_and_grad` is the NumPy reference path;
:func:`lowrank_marginal_log_likelihood` is the same density through a thin SVD of the design
(:mod:`bayes_rvm.models.marginal.lowrank`). Backends:
numba (registered on import, used by nutpie) and JAX (:func:`register_jax_dispatch`, for numpyro
and blackjax).
"""

from bayes_rvm.models.marginal import numba_backend as _numba_backend  # noqa: F401  (registers numba)
from bayes_rvm.models.marginal.jax_backend import register_jax_dispatch
from bayes_rvm.models.marginal.lowrank import (
    RANK_RTOL,
    draw_weights_lowrank,
    loo_terms_lowrank,
    lowrank_completion,
    thin_svd,
    use_lowrank,
)
from bayes_rvm.models.marginal.numba_kernels import lowrank_log_evidence_and_grad
from bayes_rvm.models.marginal.op import (
    MarginalLogLikelihood,
    log_evidence_and_grad,
    lowrank_marginal_log_likelihood,
    marginal_log_likelihood,
)
from bayes_rvm.models.marginal.statistics_form import (
    compressed_design,
    statistics_log_density_offset,
)

__all__ = [
    "RANK_RTOL",
    "MarginalLogLikelihood",
    "compressed_design",
    "draw_weights_lowrank",
    "log_evidence_and_grad",
    "loo_terms_lowrank",
    "lowrank_completion",
    "lowrank_log_evidence_and_grad",
    "lowrank_marginal_log_likelihood",
    "marginal_log_likelihood",
    "register_jax_dispatch",
    "statistics_log_density_offset",
    "thin_svd",
    "use_lowrank",
]
