"""Engines on a model, as one public face: MCMC, the type-II fit as a DataTree, predictives.

The work is done in four modules, which this one re-exports:

- :mod:`bayes_rvm.posterior.draws`: the posterior as arrays
  (:class:`~bayes_rvm.posterior.draws.PosteriorDraws`,
  :func:`draw_weights`, :func:`pointwise_log_likelihood`, :func:`gaussian_loo_terms`,
  :func:`gaussian_completion`, :func:`predict_draws`);
- :mod:`bayes_rvm.posterior.datatree`: the one DataTree adapter (:func:`type2_datatree`,
  :func:`sample_posterior_predictive`; the groups and attrs of a fit are described there);
- :mod:`bayes_rvm.inference.sampling`: MCMC (:func:`sample_mcmc`, :func:`complete_posterior`,
  :func:`type2_initvals`, the compiled-model cache) and the prior predictive
  (:func:`sample_prior_predictive`);
- :mod:`bayes_rvm.inference.diagnostics`: R-hat, ESS and the warnings about them (:func:`diagnose`,
  :class:`SamplingDiagnosticsWarning`).
"""

from __future__ import annotations

from bayes_rvm.inference.diagnostics import SamplingDiagnosticsWarning, diagnose
from bayes_rvm.inference.sampling import (
    SAMPLERS,
    complete_posterior,
    sample_mcmc,
    sample_prior_predictive,
    type2_centring,
    type2_initvals,
)
from bayes_rvm.posterior.datatree import sample_posterior_predictive, type2_datatree
from bayes_rvm.posterior.draws import (
    PosteriorDraws,
    draw_weights,
    gaussian_completion,
    gaussian_loo_terms,
    latent,
    pointwise_log_likelihood,
    predict_draws,
)

__all__ = [
    "SAMPLERS",
    "PosteriorDraws",
    "SamplingDiagnosticsWarning",
    "complete_posterior",
    "diagnose",
    "draw_weights",
    "gaussian_completion",
    "gaussian_loo_terms",
    "latent",
    "pointwise_log_likelihood",
    "predict_draws",
    "sample_mcmc",
    "sample_posterior_predictive",
    "sample_prior_predictive",
    "type2_centring",
    "type2_datatree",
    "type2_initvals",
]
