"""What a model of :mod:`bayes_rvm.models.graphs` is, recorded in its graph: its spec and cache key.

:class:`RVMSpec` holds the choices a model was built from (likelihood, priors, form, shapes).
:func:`record_spec` writes it on the model's observed ``y`` (and as ``model.rvm_spec``), where
``pymc.model.fgraph.clone_model`` and ``pm.do`` keep it; :func:`model_spec` reads it back,
checked against ``y``'s distribution, or refuses; :func:`model_cache_key` names what a compiled
sampler of a model depends on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pymc as pm

from bayes_rvm.models.priors import Prior

__all__ = ["MARGINAL_NORMAL", "RVMSpec", "model_cache_key", "model_spec", "record_spec"]


@dataclass(frozen=True)
class RVMSpec:
    """The choices a model of this module was built from (``model.rvm_spec``, :func:`model_spec`).

    Two models with equal specs and data of the same shapes compile to the same function, so
    :func:`model_cache_key` uses it as the key of compiled samplers. A model whose mean has terms
    of the user's own (``offset`` a callable) has no key: its graph cannot be compared.
    """

    likelihood: str
    prior: str
    form: str
    alpha_prior: Prior | None
    nu: float | Prior | None
    s: float | None
    noise_prior: Prior | None
    noise_sd: float | None
    basis: tuple[int, ...]
    n_outputs: int
    offset: str | None  # None, "data" (a fixed array) or "custom" (a user callable)
    marginal: str | None = None  # "dense" or "lowrank" evaluation of the marginal form
    kernel: str | None = None  # a sampled width's kernel ("rbf" or "laplacian")
    gamma_prior: Prior | None = None  # a sampled width's prior on gamma / gamma_0
    bias: bool | None = None  # a sampled width's design has a bias column
    slab: float | None = None  # the classifiers' slab scale (latent units per unit column RMS)
    intercept_sd: float | None = None  # a classifier's free intercept's prior sd (logits)
    noise_nu: float | Prior | None = None  # Student-t noise: its fixed or sampled nu

    def to_dict(self) -> dict:
        """A JSON-ready dict (priors as their :meth:`Prior.to_dict`)."""

        def enc(v):
            return v.to_dict() if isinstance(v, Prior) else v

        return {
            "likelihood": self.likelihood,
            "prior": self.prior,
            "form": self.form,
            "alpha_prior": enc(self.alpha_prior),
            "nu": enc(self.nu),
            "s": self.s,
            "noise_prior": enc(self.noise_prior),
            "noise_sd": self.noise_sd,
            "basis": list(self.basis),
            "n_outputs": self.n_outputs,
            "marginal": self.marginal,
            "offset": self.offset,
            "kernel": self.kernel,
            "gamma_prior": enc(self.gamma_prior),
            "bias": self.bias,
            "slab": self.slab,
            "intercept_sd": self.intercept_sd,
            "noise_nu": enc(self.noise_nu),
        }


def record_spec(model: pm.Model, spec: RVMSpec) -> pm.Model:
    """Record ``spec`` in the model's graph (on its observed ``y``) and as ``model.rvm_spec``.

    The attribute is lost by ``pymc.model.fgraph.clone_model`` and ``pm.do``, which build a new
    ``pm.Model``; the tag of the observed variable is copied with the graph, so that
    :func:`model_spec` still reads it from a transformed model.
    """
    model["y"].tag.rvm_spec = spec
    model.rvm_spec = spec
    return model


#: The distribution name of the weight-marginalised Gaussian ``y`` (dense, low-rank or with a
#: sampled width): ``y | alpha, sigma ~ N(offset, sigma^2 I + Phi A^-1 Phi^T)``, as model graphs
#: show it.
MARGINAL_NORMAL = "MarginalNormal"

#: The likelihood each observed distribution of this module's graphs stands for.
_GRAPH_LIKELIHOODS = {
    "BernoulliRV": "bernoulli",
    "CategoricalRV": "softmax",
    "NormalRV": "gaussian",
    "PoissonRV": "poisson",
    "StudentTRV": "student_t",
}


def _graph_likelihood(y) -> str | None:
    """The likelihood the observed ``y``'s distribution is, or None where it is no known one."""
    op = type(getattr(y.owner, "op", None)).__name__
    # The marginal Gaussian forms (dense, low-rank, sampled width) are one named CustomDist.
    return "gaussian" if op == MARGINAL_NORMAL else _GRAPH_LIKELIHOODS.get(op)


def model_spec(model: pm.Model) -> RVMSpec:
    """The :class:`RVMSpec` a model of this module was built from, read from its graph.

    It survives ``pymc.model.fgraph.clone_model`` and ``pm.do`` (which drop the
    ``model.rvm_spec`` attribute), and is checked against the distribution of the observed
    ``y``: a model whose likelihood was replaced is refused, not misread.

    Parameters
    ----------
    model : pymc.Model
        Built by :func:`rvm_regression_model`, :func:`rvm_classification_model` or
        :func:`rvm_width_model`, or a clone or ``pm.do`` transform of one.

    Returns
    -------
    RVMSpec

    Raises
    ------
    ValueError
        If the model has no observed ``y`` carrying a spec (not built by this module, or ``y``
        itself was intervened on), or if ``y``'s distribution is not the spec's likelihood.
    """
    y = model.named_vars.get("y")
    spec = getattr(getattr(y, "tag", None), "rvm_spec", None)
    if spec is None or y not in model.observed_RVs:
        raise ValueError(
            "the model has no observed variable 'y' carrying a bayes_rvm spec: it was not built "
            "by bayes_rvm.models.graphs (rvm_regression_model, rvm_classification_model, "
            "rvm_width_model), or 'y' was replaced (pm.do on 'y'); its likelihood is unknown."
        )
    found = _graph_likelihood(y)
    if found != spec.likelihood:
        raise ValueError(
            f"the model's observed 'y' is a {type(y.owner.op).__name__}, not the "
            f"{spec.likelihood!r} likelihood it was built with: its graph was changed, and the "
            "posterior cannot be completed for it."
        )
    return spec


def model_cache_key(model: pm.Model) -> str | None:
    """A string naming what a compiled sampler of ``model`` depends on, or None.

    The spec (priors, form, likelihood), the shapes of the data, the variable names and the
    coordinate names. None for models not built here or with user terms in the mean. The rank
    of the low-rank form's factors (``Phi_U``, ``Phi_VS``) is left out: the compiled functions
    read it from the data at run time, so refits whose designs differ in rank (another kernel
    width, other inputs) reuse one compiled sampler.
    """
    spec = getattr(model, "rvm_spec", None)
    if spec is None or spec.offset == "custom":
        return None
    shapes = {
        name: list(np.shape(model[name].get_value()))
        for name in sorted(model.named_vars)
        if hasattr(model[name], "get_value")
    }
    for name in ("Phi_U", "Phi_VS"):
        if name in shapes:
            shapes[name][-1] = "rank"
    return json.dumps(
        {"spec": spec.to_dict(), "shapes": shapes, "vars": sorted(model.named_vars)},
        sort_keys=True,
    )
