"""Numba implementation of :class:`~.op.MarginalLogLikelihood` (nutpie's backend).

Registered with PyTensor's numba linker on import (the package ``__init__`` imports this module);
the compiled kernels live in :mod:`bayes_rvm.models.marginal.numba_kernels`.
"""

from __future__ import annotations

from pytensor.link.numba.dispatch.basic import register_funcify_default_op_cache_key

from bayes_rvm.models.marginal.numba_kernels import (
    log_evidence_numba,
    lowrank_log_evidence_and_grad,
)
from bayes_rvm.models.marginal.op import MarginalLogLikelihood

__all__ = ["lowrank_log_evidence_and_grad"]


@register_funcify_default_op_cache_key(MarginalLogLikelihood)
def _numba_funcify_marginal(op, node=None, **kwargs):
    # Bumping the integer invalidates numba's on-disk cache when a kernel changes.
    if op.lowrank:
        return lowrank_log_evidence_and_grad, 7
    return log_evidence_numba, 7
