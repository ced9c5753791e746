"""Hyperpriors as objects, and the package's default hyperpriors (stated here and only here).

A :class:`Prior` names a distribution and its parameters, which may themselves be priors, after the
design of ``pymc_extras.prior.Prior``: it can be printed, compared, hashed, written to JSON
(:meth:`Prior.to_dict` / :meth:`Prior.from_dict`) and turned into a PyMC variable inside a model
(:meth:`Prior.create_variable`). pymc-extras itself cannot be installed beside PyMC 6.4 (it pins
``pymc < 6.4``), so the package carries this small equivalent; its dictionaries use the same keys
(``dist``, ``kwargs``, ``dims``) so that they read the same.

All hyperpriors of the RVM models are stated for the **normalised problem**: basis columns of unit
root-mean-square (``phi_scale = ||phi|| / sqrt(N)``,
:func:`bayes_rvm.evidence.problem.prior_column_scale`,
as Gelman et al. 2008 standardise predictors) and targets of unit root-mean-square (regression).
The models write that normalisation into their graphs (``alpha = alpha_rel * phi_scale**2 /
y_scale**2``, ``sigma = sigma_rel * y_scale``), so the same defaults suit targets of 1e-8 and of
1e8, and rows of 10^2 and of 10^6: a relative weight ``w_rel`` adds ``w_rel`` times the targets'
RMS to a row, whatever N. (Stated for unit-norm columns, as before, it added ``y_rms / sqrt(N)``:
at N = 10^6 a relevance vector needed ``alpha_rel ~ 1e-6``, deep in the hyperprior's tail, and
weakly supported columns' chains split between the likelihood and the prior's mode: R-hat
1.17-1.26 on ``benchmarks/bench_mcmc.py --sections large``.) The type-II engines keep their
unit-norm columns, which condition their linear algebra; their fits do not use these priors.
At N = 100 the defaults below equal the former ones on unit-norm columns (a scale of 0.1 per row
is one of 1 on unit-norm columns), so the figures measured at N = 100 keep their meaning; figures
of ``alpha_rel`` below are on unit-norm columns (``alpha_rel / N``, as
:func:`bayes_rvm.posterior.comparison.relevance_summary` reads them).

Defaults
--------
``DEFAULT_NU = 1e-4``
    Degrees of freedom of the Student-t weight prior of type-II fits (estimators' ``nu="auto"``,
    CLI). Smaller ``nu`` gives fewer relevance vectors (Prince 2012, chapter 8); at ``1e-4`` the
    sinc problem (N = 100) keeps about as many as the ARD prior does (6 against 5), where
    ``nu = 1`` keeps every basis function; the count grows with N (127 at N = 1000, where the
    estimators warn). Not a prior to sample: ``Gamma(5e-5, 5e-5)`` puts 97% of its mass below
    1e-300, and NUTS then wanders over hundreds of decades of ``log alpha`` (the models warn).
``DEFAULT_MCMC_NU = 1.0``
    Degrees of freedom of the Student-t prior that MCMC samples under ``nu="auto"``: Cauchy weights
    of scale ``s = DEFAULT_WEIGHT_SCALE`` (sinc, N = 100, width 2, 2 x 500 draws: no divergences,
    ``alpha_rel`` within 1e-5.9 .. 1e1.4, where ``nu = 1e-4`` spread it over 1e-11.5 .. 1e5.2).
``DEFAULT_WEIGHT_SCALE = 0.1``
    The prior scale of a relative weight on a unit-RMS column: a basis function a priori adds about
    a tenth of the targets' RMS to each row (kernel bases are redundant: many columns share the
    signal), and the Cauchy tail lets the data ask for more. Against a scale of 1, measured with the
    default otherwise (2 x 400-500 draws): on 20 features, 3 informative (N = 100), the irrelevant
    columns' median log10 ``alpha_rel`` lies 1.78 above the informative ones' against 1.18, their
    P(alpha_rel < 10) is 0.66 against 0.87; on sinc (N = 100, width 2) PSIS-LOO elpd 78.0 against
    75.4 (se 5.8); at N = 10^6 the chains agree under both (max R-hat 1.011-1.020 against
    1.011-1.014 on three data sets, 2 x 500 unthinned draws; docs/theory.md).
``default_alpha_prior("halfcauchy")``
    ``Prior("HalfCauchyPrecision", beta=0.1)``: a half-Cauchy of scale :data:`DEFAULT_WEIGHT_SCALE`
    on the relative weight scale ``alpha_rel^(-1/2)`` (Gelman 2006), sampled in ``log alpha``; the
    classifiers' and the count model's default (their latent function in its own units, on unit-RMS
    columns), and the regression's before the R2-D2 prior (``alpha_prior="halfcauchy"`` asks for
    it by name). It is a prior per column, so the prior on
    the function grows with the number of columns M: the prior predictive's median ``|y|`` is about
    4 times the targets' RMS at N = 100 on a kernel basis (M = 101) and about 40 times at N = 1000
    (a sum of M half-Cauchy variances, whose median grows as M^2). What it does: a proper, weakly
    informative prior that NUTS samples without divergences, whose posterior predicts well, and
    which determines relevance where the data do: on 20 independent features, 3 informative (N =
    100, 2 x 500 draws), the irrelevant columns' posterior median log10 alpha_rel lies 1.75 above
    the informative ones', and P(alpha_rel < 10), 0.805 under the prior, goes to 0.975 and 0.66
    (``tests/test_relevance.py`` checks each column against its one-dimensional posterior). What it
    does not do: make the posterior sparse. On a redundant kernel basis (sinc, width 2: neighbouring
    columns correlate at 0.998, 18 of 100 singular values above 1e-3 of the largest) the data fix
    combinations of weights, not which column carries them; the posterior spreads over many columns
    (12.2 effective parameters where type-II has 6.5; 8.0 on 30 added columns of an unrelated input)
    and each column's ``alpha_rel`` stays near its prior (median log10 0.13 for type-II's relevance
    vectors and for the pruned alike). ``benchmarks/bench_relevance.py`` and ``docs/theory.md``
    ("Hyperpriors under MCMC") have the comparison with the alternatives.
:func:`sparse_alpha_prior` ``(M, N)``
    ``HalfCauchyPrecision(beta=1 / ((M - 1) sqrt(N)))``, the horseshoe's global scale of Piironen
    and Vehtari (2017, Electron. J. Stat. 11: 5018-5051) fixed at their ``tau0``. What it does: a
    sparse posterior draw by draw. On sinc (N = 100, width 2, 2 x 500 draws, no divergences) a draw
    has about 11 basis functions with ``alpha_rel < 100`` (type-II keeps 7), the probability that
    one within 0.6 of a type-II relevance vector is among them is 0.8-0.99, and basis functions far
    from every relevance vector keep the prior's 0.06. What it does not do: say which of nearly
    collinear neighbours is relevant. Relevance moves between them from draw to draw, so each single
    ``alpha_rel``'s posterior median stays near the prior median (log10 3.5-4.0 for the relevance
    vectors, 3.0-4.1 for the others): relevance is a property of a region of the input space, not of
    one column. What it costs: that hopping mixes slowly, and the predictive is worse. On sinc, N =
    60, width 3, 4 x 1000 draws: max R-hat 1.21 and 2-7 divergences (target acceptance 0.9 / 0.8)
    against 1.006 and none for the default, PSIS-LOO elpd -10.9 to -11.1 against -8.5 (scales 0.1
    and 0.03 in between: R-hat 1.01-1.12, 8-9 divergences, elpd -9.7 and -10.4). A hierarchical
    global scale (the horseshoe proper, ``Prior("HalfCauchyPrecision", beta=Prior("HalfCauchy",
    beta=0.01))``) let the global scale grow until the posterior was dense again (log10 alpha_rel
    1.4-1.9 everywhere); a Gamma(0.01, 1e-4) on ``alpha_rel`` (Tipping's pruning pressure, proper)
    kept it dense too (0.0-1.1, 4 divergences). In ``benchmarks/bench_relevance.py`` (2 x 500
    draws): 0.5 effective parameters on 30 columns of an unrelated input, where the default puts
    8.0; R-hat up to 1.47 and PSIS-LOO elpd 2.7 below the default's on sinc (dse 1.5).
``Prior("RegularisedHorseshoePrecision", beta=..., c=...)``
    Piironen and Vehtari's regularised horseshoe (:func:`regularised_horseshoe_precision`), ``alpha
    = (tau lambda)^-2 + c^-2``, with a sampled global scale ``beta=Prior("HalfCauchy", beta=1 / ((M
    - 1) sqrt(N)))`` and a fixed slab ``c`` (their scale 2 for standardised columns is ``c = 2`` on
    unit-RMS ones). In ``benchmarks/bench_relevance.py``: no divergences, the default's elpd on
    sinc, 3.5 effective parameters on the unrelated columns; the global scale grows until irrelevant
    features' P(alpha_rel < 10) exceeds its prior's, and on sinc its per-region figures are the
    default's. Not the default: not clearly better, and its global scale depends on M and N.
``default_alpha_prior("r2d2")``
    ``Prior("R2D2Precision", r2_a=0.5, r2_b=0.5, concentration=0.5)`` (:func:`r2d2_precision`,
    :data:`DEFAULT_R2D2`): the R2-D2 prior of Zhang et al. (2022), a prior on the function rather
    than on each column. The function's mean square ``omega = sum_i 1 / alpha_rel_i`` (in units of
    the targets' mean square) is ``BetaPrime(1/2, 1/2)``, its RMS half-Cauchy(1), and a
    ``Dirichlet(1/2, ..., 1/2)`` shares it among the columns; the weights stay ``N(0, 1 / alpha_i)``
    given the precisions. What it does: the prior predictive no longer depends on M (median ``|y|``
    0.95 and 0.96 of the targets' RMS on sinc at N = 100 and 1000, against the half-Cauchy's 4.5 and
    44; on Friedman #2 0.95 and 0.96 against 8.1 and 79; 2000 draws), and on the problems measured
    it predicts as well as the half-Cauchy (RVR defaults, 4 x 1000 draws, PSIS-LOO elpd, N = 100:
    sinc 85.9 / 92.5 / 76.3 against 85.3 / 91.8 / 76.0 on three seeds, dse 0.3-0.5; Friedman #2,
    noise 125, 4 standardised inputs, -620.7 / -637.4 against -620.7 / -636.5, dse 0.5-0.7), with no
    divergences and max R-hat 1.005-1.008 under both. What it costs: slower mixing on sinc, min bulk
    ESS 1550-1750 of 4000 draws against about 4200, 27 against 88 per 1000 gradient evaluations (N =
    300: 13 against 108, elpd 267.6 against 266.4), where on Friedman #2 it mixed better (21 against
    12). Stating ``R^2`` itself against the targets' scale (``1 / alpha_i = R^2 phi_i``, as
    pymc-extras' ``R2D2M2CP`` does, so that the function's mean square is below the targets') cost
    16-23 nats on Friedman #2, where the kernel columns' weights must exceed the function's RMS: the
    BetaPrime's tail on ``omega`` allows them.
``DEFAULT_REGRESSION_ALPHA_PRIOR``
    The name (``"halfcauchy"`` or ``"r2d2"``) of the ARD hyperprior the Gaussian regression models
    (:func:`bayes_rvm.models.graphs.rvm_regression_model`, ``rvm_width_model``, RVR's MCMC and
    VI) use when none is given: ``default_alpha_prior("ard")``. It is ``"r2d2"``: the
    prior on the function, which does not grow with the number of columns. Sampled in ``log
    alpha`` the half-Cauchy mixed faster on kernel bases (sinc, N = 1000, full basis, RVR's
    defaults, 4 x 1000 draws: 15 gradient evaluations per draw against 31, least bulk ESS 3500
    against 1150); in the Gaussian coordinates :func:`r2d2_precision` now samples it in, the
    R2-D2 prior takes 15 there too (least bulk ESS 1000-1100).
``default_alpha_prior("student_t", nu, s)``
    ``alpha_rel ~ Gamma(nu / 2, nu s^2 / 2)``, whose marginal is ``w ~ StudentT(nu, 0, s)``.
``DEFAULT_NOISE_PRIOR``
    ``Prior("HalfNormal", sigma=1.0)`` on the relative noise sd ``sigma_rel = sigma / y_scale``.
``DEFAULT_GAMMA_PRIOR``
    ``Prior("LogNormal", mu=0.0, sigma=2.0)`` on the relative kernel coefficient ``gamma_rel = gamma
    / gamma_0`` of a sampled width (``RVR(inference="mcmc", gamma=Prior(...))``), where ``gamma_0``
    is :func:`bayes_rvm.basis.kernels.reference_gamma`: the coefficient of the length scale ``r0 =
    sqrt(n_features * X.var())`` that scikit-learn's ``gamma="scale"`` uses. For the rbf kernel
    (``gamma = 1 / r^2``) it is ``log(r / r0) ~ Normal(0, 1)``: the width known within a factor of
    about 7 either way at 95%, weak against the evidence of a few dozen points (on Tipping's sinc, N
    = 100, the evidence width is about 0.4 r0) and proper, which a flat prior on ``log r`` is not
    (the marginal likelihood tends to a constant as the width grows without bound). For the
    laplacian kernel (``gamma = 1 / r``) the same prior is ``log(r / r0) ~ Normal(0, 2)``. Any
    :class:`Prior` of positive support may replace it (NUTS samples ``log gamma_rel``).
"""

from __future__ import annotations

import ast
import inspect
import json
import operator
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_GAMMA_PRIOR",  # noqa: F822 - built on first use by __getattr__
    "DEFAULT_MCMC_NU",
    "DEFAULT_NOISE_PRIOR",  # noqa: F822
    "DEFAULT_NU",
    "DEFAULT_R2D2",
    "DEFAULT_REGRESSION_ALPHA_PRIOR",
    "DEFAULT_WEIGHT_SCALE",
    "NAMED_ALPHA_PRIORS",
    "Prior",
    "as_prior",
    "decode_params",
    "default_alpha_prior",
    "encode_params",
    "halfcauchy_precision",
    "in_log_alpha",
    "r2d2_free_values",
    "r2d2_precision",
    "regularised_horseshoe_precision",
    "sparse_alpha_prior",
]

#: Degrees of freedom of the Student-t weight prior of type-II fits.
DEFAULT_NU = 1e-4

#: Degrees of freedom of the Student-t weight prior that MCMC samples by default (``nu="auto"``).
DEFAULT_MCMC_NU = 1.0

#: Prior scale of a relative weight on a unit-RMS column (the default ARD half-Cauchy's and the
#: Student-t prior's ``s``): a basis function contributes about a tenth of the targets' RMS.
DEFAULT_WEIGHT_SCALE = 0.1

#: The ARD hyperprior that the Gaussian regression models sample by default ("r2d2" or
#: "halfcauchy", :func:`default_alpha_prior`); the classifiers and counts keep "halfcauchy".
DEFAULT_REGRESSION_ALPHA_PRIOR = "r2d2"

#: The R2-D2 default's parameters (:func:`r2d2_precision`): R^2 ~ Beta(1/2, 1/2), the function's
#: RMS half-Cauchy(1) in units of the targets', shared by a Dirichlet of concentration 1/2.
DEFAULT_R2D2 = {"r2_a": 0.5, "r2_b": 0.5, "concentration": 0.5}


# ---------------------------------------------------------------------------------------------
# The half-Cauchy prior on a weight's prior scale, written as a prior on its precision
# ---------------------------------------------------------------------------------------------
def _halfcauchy_precision_logp(value, beta):
    import pytensor.tensor as pt
    from pymc.distributions.dist_math import check_parameters

    # alpha = s^-2 with s ~ HalfCauchy(beta):
    # p(alpha) = 2 / (pi beta (1 + 1/(alpha beta^2))) * alpha^(-3/2) / 2
    logp = -pt.log(np.pi * beta) - pt.log1p(1.0 / (value * beta**2)) - 1.5 * pt.log(value)
    return check_parameters(logp, beta > 0, msg="beta > 0")


def _halfcauchy_precision_support_point(rv, size, beta):
    import pytensor.tensor as pt
    from pymc.distributions.shape_utils import rv_size_is_none

    # The median of alpha; also the start of NUTS before jitter.
    med = beta**-2.0
    return med if rv_size_is_none(size) else pt.full(size, med)


def _halfcauchy_precision_graph(beta, size):
    # The draw as a PyTensor graph rather than a Python function: it compiles with the rest of a
    # prior predictive (numba runs a Python draw in object mode, and says so).
    import pymc as pm

    return pm.HalfCauchy.dist(beta, size=size) ** -2.0


def halfcauchy_precision(name: str, beta=1.0, *, dims=None, **kwargs):
    """A precision ``alpha`` whose scale ``alpha^(-1/2)`` is half-Cauchy(``beta``).

    Must be called inside a model context. The variable is sampled in ``log alpha`` (log
    transform), where its density is ``1 / (2 pi cosh((log alpha + 2 log beta) / 2))``: a proper
    hyperbolic-secant density with exponential tails on both sides. The upper tail lets irrelevant
    basis functions wander to large ``alpha`` (weights pinned at zero), the lower tail lets relevant
    ones take weights far larger than ``beta``. A Gamma hyperprior with a tiny shape and rate
    instead puts a wall in ``log alpha`` that NUTS cannot cross.

    Parameters
    ----------
    name : str
    beta : float or tensor, default=1.0
        Scale of the half-Cauchy (``alpha`` has median ``beta^-2``).
    dims : str or sequence of str, optional
    **kwargs
        Passed to :class:`pymc.CustomDist` (``shape``, ``initval``, ...).
    """
    import pymc as pm

    return pm.CustomDist(
        name,
        beta,
        logp=_halfcauchy_precision_logp,
        dist=_halfcauchy_precision_graph,
        support_point=_halfcauchy_precision_support_point,
        transform=pm.distributions.transforms.log,
        class_name="HalfCauchyPrecision",
        dims=dims,
        **kwargs,
    )


def _halfcauchy_precision_dist(beta=1.0):
    import pymc as pm

    return pm.CustomDist.dist(
        beta,
        logp=_halfcauchy_precision_logp,
        dist=_halfcauchy_precision_graph,
        support_point=_halfcauchy_precision_support_point,
        class_name="HalfCauchyPrecision",
    )


# ---------------------------------------------------------------------------------------------
# The regularised horseshoe (Piironen and Vehtari 2017) as a prior on the precision
# ---------------------------------------------------------------------------------------------
def _slab_precision(c) -> float:
    # The slab enters as the floor c^-2 of alpha, which the transform needs as a number: checked
    # before anything converts it, so that a string or None is refused by name too.
    value = None
    if not isinstance(c, Prior | str | bytes | bool | np.bool_) and np.ndim(c) == 0:
        try:
            value = float(c)
        except (TypeError, ValueError):
            value = None
    if value is None or not (np.isfinite(value) and value > 0):
        raise ValueError(
            "Prior('RegularisedHorseshoePrecision'): parameter c must be a positive number (a "
            f"fixed positive slab scale, not a Prior or an array), got {c!r}."
        )
    return value**-2.0


def _shifted_log_transform(shift: float):
    """``log(alpha - shift)``: NUTS's coordinate for a precision bounded below by ``shift``."""
    import pytensor.tensor as pt
    from pymc.distributions.transforms import LogTransform

    class ShiftedLog(LogTransform):
        # A LogTransform, so that Prior.has_positive_support knows it for a positive one.
        name = "shifted_log"

        def forward(self, value, *inputs):
            # Used for starting values only: a start below the floor (a type-II alpha the slab
            # forbids, type2_initvals) starts just above it instead of at log of a negative.
            return pt.log(pt.maximum(value - shift, 1e-3 * shift))

        def backward(self, value, *inputs):
            return pt.exp(value) + shift

        def log_jac_det(self, value, *inputs):
            return value

    return ShiftedLog()


def _regularised_horseshoe_logp(value, beta, c):
    import pytensor.tensor as pt

    # alpha = alpha_local + c^-2 with alpha_local ~ HalfCauchyPrecision(beta).
    local = _halfcauchy_precision_logp(value - c**-2.0, beta)
    return pt.switch(value > c**-2.0, local, -np.inf)


def _regularised_horseshoe_support_point(rv, size, beta, c):
    return _halfcauchy_precision_support_point(rv, size, beta) + c**-2.0


def _regularised_horseshoe_graph(beta, c, size):
    return _halfcauchy_precision_graph(beta, size) + c**-2.0


def regularised_horseshoe_precision(name: str, beta=1.0, c=1.0, *, dims=None, **kwargs):
    """The precision of a weight under Piironen and Vehtari's (2017) regularised horseshoe.

    The weight's variance is ``c^2 tau^2 lambda^2 / (c^2 + tau^2 lambda^2)`` with
    ``tau lambda ~ HalfCauchy(beta)``, so its precision is ``alpha = (tau lambda)^-2 + c^-2``: the
    horseshoe's precision (:func:`halfcauchy_precision`) plus the slab's floor ``c^-2``, which
    keeps the weights the data call for from growing beyond the slab scale ``c``. ``beta`` may be
    a tensor (a sampled global scale); ``c`` is a fixed number here (the paper's fixed-slab
    variant), sampled as ``log(alpha - c^-2)``. Must be called inside a model context.
    """
    import pymc as pm

    floor = _slab_precision(c)
    return pm.CustomDist(
        name,
        beta,
        float(c),
        **_horseshoe_parts(),
        transform=_shifted_log_transform(floor),
        dims=dims,
        **kwargs,
    )


def _regularised_horseshoe_dist(beta=1.0, c=1.0):
    import pymc as pm

    _slab_precision(c)
    return pm.CustomDist.dist(beta, float(c), **_horseshoe_parts())


def _horseshoe_parts() -> dict:
    """The regularised horseshoe precision's CustomDist parts: density, draws, start point."""
    return {
        "logp": _regularised_horseshoe_logp,
        "dist": _regularised_horseshoe_graph,
        "support_point": _regularised_horseshoe_support_point,
        "class_name": "RegularisedHorseshoePrecision",
    }


# ---------------------------------------------------------------------------------------------
# R2-D2 (Zhang et al. 2022): a prior on the function's total variance, shared among the columns
# ---------------------------------------------------------------------------------------------
def _r2d2_logp(value, r2_a, r2_b, concentration):
    import pytensor.tensor as pt
    from pymc.distributions.dist_math import check_parameters

    # omega ~ BetaPrime(a, b) and phi ~ Dirichlet(c) give v = omega phi (v = 1 / alpha) the
    # density BetaPrime(omega; a, b) Dir(v / omega; c) / omega^(M - 1), and alpha the Jacobian
    # prod v^2: the logp below (r2d2_precision).
    c = concentration
    log_v = -pt.log(value)
    omega = pt.sum(pt.exp(log_v), axis=-1)
    c_sum = pt.sum(c, axis=-1)
    log_norm = (
        pt.gammaln(r2_a + r2_b)
        - pt.gammaln(r2_a)
        - pt.gammaln(r2_b)
        + pt.gammaln(c_sum)
        - pt.sum(pt.gammaln(c), axis=-1)
    )
    logp = (
        log_norm
        + pt.sum((c + 1.0) * log_v, axis=-1)
        + (r2_a - c_sum) * pt.log(omega)
        - (r2_a + r2_b) * pt.log1p(omega)
    )
    return check_parameters(
        logp, r2_a > 0, r2_b > 0, pt.all(c > 0), msg="r2_a > 0, r2_b > 0, concentration > 0"
    )


def _r2d2_support_point(rv, size, r2_a, r2_b, concentration):
    import pytensor.tensor as pt
    from pymc.distributions.shape_utils import rv_size_is_none

    # Each column's share c_i / sum(c) of omega = a / b (the median of omega when a = b).
    share = r2_a / r2_b * concentration / pt.sum(concentration, axis=-1, keepdims=True)
    out = 1.0 / share
    if rv_size_is_none(size):
        return out
    return pt.broadcast_to(out, pt.concatenate([size, out.shape[-1:]]))


def _r2d2_graph(r2_a, r2_b, concentration, size):
    import pymc as pm

    # omega = G_a / G_b, a BetaPrime(a, b), without the rounding of R^2 / (1 - R^2) near R^2 = 1
    omega = pm.Gamma.dist(r2_a, 1.0, size=size) / pm.Gamma.dist(r2_b, 1.0, size=size)
    phi = pm.Dirichlet.dist(concentration, size=size)
    return 1.0 / (omega[..., None] * phi)


def _r2d2_concentration(concentration, dims, kwargs) -> Any:
    """The Dirichlet concentration as a vector of the columns' length (the model's dimension)."""
    import pytensor.tensor as pt

    conc = pt.as_tensor_variable(np.asarray(concentration, dtype=np.float64))
    if conc.ndim > 0:
        return conc
    return pt.full((_r2d2_length(dims, kwargs),), conc)


def _r2d2_length(dims, kwargs) -> Any:
    """The number of columns, from ``shape`` or the model's length of the last of ``dims``."""
    import pymc as pm

    if "shape" in kwargs:
        return np.atleast_1d(kwargs["shape"])[-1]
    if dims is not None:
        dims = (dims,) if isinstance(dims, str) else tuple(dims)
        return pm.modelcontext(None).dim_lengths[dims[-1]]
    raise ValueError(
        "Prior('R2D2Precision') is a vector over the columns: create it with dims or shape."
    )


def _r2d2_parameters(r2_a, r2_b, concentration) -> None:
    """Refuse, by name, parameters that are not positive numbers (a vector for concentration)."""
    for key, value in (("r2_a", r2_a), ("r2_b", r2_b), ("concentration", concentration)):
        try:
            arr = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            arr = None
        vector = key == "concentration"
        ok = arr is not None and arr.ndim <= int(vector) and arr.size > 0
        if not (ok and np.all(np.isfinite(arr) & (arr > 0))):
            raise ValueError(
                f"Prior('R2D2Precision'): parameter {key} must be a positive number"
                f"{' or a vector of them, one per column' if vector else ''}, got {value!r}."
            )


def _vector_log_transform():
    """``log alpha`` for a vector variable: the Jacobian summed over its last axis (PyMC refuses
    an elementwise one on a multivariate distribution)."""
    import pytensor.tensor as pt
    from pymc.distributions.transforms import LogTransform

    class VectorLog(LogTransform):
        # A LogTransform, so that Prior.has_positive_support knows it for a positive one.
        name = "vector_log"
        ndim_supp = 1

        def log_jac_det(self, value, *inputs):
            return pt.sum(value, axis=-1)

    return VectorLog()


def r2d2_precision(
    name: str,
    r2_a=0.5,
    r2_b=0.5,
    concentration=0.5,
    *,
    dims=None,
    coordinates: str = "auto",
    **kwargs,
):
    """Precisions whose weights share one prior variance of the function (the R2-D2 prior).

    Zhang, Naughton, Bondell and Reich (2022, J. Am. Stat. Assoc. 117: 862-874) put the prior on
    the fit: ``R^2 ~ Beta(r2_a, r2_b)``, so that ``omega = R^2 / (1 - R^2)`` is
    ``BetaPrime(r2_a, r2_b)``, and share ``omega`` among the M columns by
    ``phi ~ Dirichlet(concentration)``. On unit-RMS columns and targets (the normalised problem
    of :mod:`bayes_rvm.models.priors`) column ``i``'s relative weight has prior variance
    ``1 / alpha_i = omega phi_i``, so the function ``Phi w`` has prior mean square ``omega``
    times the targets' whatever M (``E ||Phi w||^2 / N = sum_i 1 / alpha_i`` on unit-RMS
    columns, however they correlate). The targets' mean square stands where Zhang et al. have
    the noise variance, as pymc-extras' ``R2D2M2CP`` states the explained variance against the
    targets' scale; the noise keeps its own prior. ``r2_a = r2_b = 1/2`` makes the function's
    RMS ``sqrt(omega)`` half-Cauchy(1) (Gelman 2006's prior of a scale, on the whole function
    rather than on each column). Given the precisions the weights are ``N(0, 1 / alpha_i)``, as
    under every ARD hyperprior.

    An unneeded column's density falls as ``alpha^(-concentration)`` in ``log alpha`` (the
    half-Cauchy's rate at ``concentration = 1/2``); a column the data need is limited by the
    heavy tail of ``omega`` (``P(omega > t) ~ t^(-r2_b)``), not by its share.

    What NUTS samples (``coordinates``). At ``concentration = 1/2`` (the default) the shares are
    the squared direction of a standard Gaussian vector: with ``z ~ N(0, I_M)``, ``phi_i = z_i^2
    / ||z||^2`` is ``Dirichlet(1/2, ..., 1/2)``, since ``z_i^2 / 2 ~ Gamma(1/2, 1)``. NUTS then
    samples ``logit(R^2) = log omega`` (the variable ``{name}_r2``, a ``Beta(r2_a, r2_b)``) and
    ``z`` (``{name}_z``), and ``name`` is the deterministic ``alpha_i = ||z||^2 / (omega
    z_i^2)``: the same prior on ``alpha``, one more coordinate (the length of ``z``, which nothing
    but its own Gaussian prior sees), and the signs of ``z`` are not identified (only ``z_i^2``
    enters; read ``name``, not ``{name}_z``). Why: in ``log alpha`` a column's coordinate has
    the shape of ``-log`` of a ``Gamma(1/2)`` variable (skewness 1.5), whose tail towards large
    weights is doubly exponential, and the posterior of a kernel basis keeps that shape for every
    column (each ``log alpha_rel``'s posterior sd 2.3 against the prior's 2.2, skewness 1.4 on
    sinc, N = 100): its curvature limits NUTS's step size. In ``z`` the same prior is a standard
    Gaussian. On sinc with RVR's defaults (4 x 1000 draws; 2-core machine at load 5-7) the step
    size went from 0.28 to 0.49 at N = 100 (15 to 7 leapfrog steps per draw, gradients for
    tuning and draws 89-91k to 40-41k on three seeds) and from 0.16 to 0.31 at N = 1000 on the
    full basis (31 to 15 steps, 174k to 82k gradients), R-hat and bulk ESS as before or better and
    no divergences in either. Any other concentration is sampled in ``log alpha``
    (``coordinates="log_alpha"``, also available at 1/2).

    The Gaussian coordinates suit a basis most of whose columns the data leave to the prior (a
    kernel's full basis). Where the data pin every precision (a fit's relevance vectors, as the
    estimators sample them from sufficient statistics, with a sampled width or with
    ``mcmc_basis="relevant"``) they fix each share ``z_i^2 / ||z||^2`` while the length of
    ``z`` stays free: a thin curved shell that NUTS crosses with divergences (59 of 4000 draws
    on 17 relevance vectors of 5000 rows, none in ``log alpha``). The estimators therefore
    sample a basis of relevance vectors in ``log alpha`` (:func:`in_log_alpha`).

    Parameters
    ----------
    name : str
    r2_a, r2_b : float, default=0.5
        The Beta prior of ``R^2 = omega / (1 + omega)``.
    concentration : float or array of shape (M,), default=0.5
        The Dirichlet's concentration per column (a number for all).
    dims : str or sequence of str, optional
        The columns' dimension: the variable is a vector over them (``dims`` or ``shape`` is
        required). Must be called inside a model context.
    coordinates : {"auto", "gaussian", "log_alpha"}, default="auto"
        What NUTS samples: ``"gaussian"`` (``{name}_r2`` and ``{name}_z``, concentration 1/2
        only) or ``"log_alpha"`` (``name`` itself, in logs); ``"auto"`` takes the first where it
        applies. The prior on ``alpha`` is the same.
    **kwargs
        Passed to :class:`pymc.CustomDist` (``shape``, ``initval``, ...), or under the Gaussian
        coordinates to ``z``'s :class:`pymc.Normal` (``shape``).

    Returns
    -------
    TensorVariable
        The precisions: a random variable in ``log alpha`` coordinates, a
        :class:`pymc.Deterministic` in the Gaussian ones (:func:`r2d2_free_values` turns its
        values into those of the variables NUTS samples, to start the chains from).
    """
    import pymc as pm

    _r2d2_parameters(r2_a, r2_b, concentration)
    if coordinates not in ("auto", "log_alpha", "gaussian"):
        raise ValueError(
            "r2d2_precision: coordinates must be 'auto', 'log_alpha' or 'gaussian', got "
            f"{coordinates!r}."
        )
    half = bool(np.all(np.asarray(concentration, dtype=np.float64) == 0.5))
    if coordinates == "gaussian" and not half:
        raise ValueError(
            "r2d2_precision: coordinates='gaussian' needs concentration 1/2 (the squares of a "
            f"Gaussian vector's direction are Dirichlet(1/2, ..., 1/2)), got {concentration!r}."
        )
    if coordinates == "gaussian" or (coordinates == "auto" and half):
        return _r2d2_gaussian_form(name, r2_a, r2_b, dims, kwargs)
    conc = _r2d2_concentration(concentration, dims, kwargs)
    return pm.CustomDist(
        name,
        float(r2_a),
        float(r2_b),
        conc,
        **_r2d2_dist_parts(),
        transform=_vector_log_transform(),
        dims=dims,
        **kwargs,
    )


def _r2d2_gaussian_form(name: str, r2_a, r2_b, dims, kwargs):
    """The R2-D2 precisions at concentration 1/2 from ``R^2`` and a standard Gaussian vector."""
    import pymc as pm
    import pytensor.tensor as pt

    # Beta's own transform is logit(R^2) = log omega: NUTS samples the log of the function's
    # mean square, whose density (a log-BetaPrime) is log-concave.
    _r2d2_length(dims, kwargs)  # a vector over the columns: dims or shape is required
    r2 = pm.Beta(f"{name}_r2", float(r2_a), float(r2_b))
    z = pm.CustomDist(
        f"{name}_z",
        dist=_standard_normal_graph,
        support_point=_equal_shares_support_point,
        class_name="StandardNormal",
        dims=dims,
        **kwargs,
    )
    z2 = pt.sqr(z)
    log_omega = pt.log(r2) - pt.log1p(-r2)
    log_alpha = pt.log(pt.sum(z2, axis=-1, keepdims=True)) - pt.log(z2) - log_omega
    return pm.Deterministic(name, pt.exp(log_alpha), dims=dims)


def _standard_normal_graph(size):
    import pymc as pm

    return pm.Normal.dist(0.0, 1.0, size=size)


def _equal_shares_support_point(rv, size):
    import pytensor.tensor as pt
    from pymc.distributions.shape_utils import rv_size_is_none

    # Where NUTS starts before jitter: equal shares, as in log alpha (z = 0 has no direction). A
    # support point rather than an initval, which pm.do and model cloning refuse.
    return pt.ones(()) if rv_size_is_none(size) else pt.ones(size)


def r2d2_free_values(model, values: Mapping[str, Any]) -> dict[str, Any]:
    """Values of R2-D2 precisions sampled in Gaussian coordinates as those of their free variables.

    ``values`` maps variable names to values (initial values: ``{"alpha_rel": ..., "sigma_rel":
    ...}``). An entry that names the deterministic precisions of :func:`r2d2_precision`'s
    Gaussian coordinates is replaced by ``{name}_r2 = omega / (1 + omega)`` and ``{name}_z =
    sqrt(M v / omega)`` (``v = 1 / alpha``, ``omega = sum(v)``: positive signs, length
    ``sqrt(M)``, the typical length of ``z``), which give back the same ``alpha``; every other
    entry is returned as it is.
    """
    out = {}
    for key, value in values.items():
        parts = (f"{key}_r2", f"{key}_z")
        var = model.named_vars.get(key)
        if (
            var is None
            or var not in model.deterministics
            or not all(p in model.named_vars for p in parts)
        ):
            out[key] = value
            continue
        v = 1.0 / np.asarray(value, dtype=np.float64)
        omega = v.sum(axis=-1, keepdims=True)
        out[parts[0]] = (omega / (1.0 + omega))[..., 0]
        out[parts[1]] = np.sqrt(v.shape[-1] * v / omega)
    return out


def _r2d2_precision_dist(r2_a=0.5, r2_b=0.5, concentration=0.5):
    import pymc as pm

    _r2d2_parameters(r2_a, r2_b, concentration)
    # Unnamed (Prior's own checks): two columns when the concentration is one number.
    conc = np.asarray(concentration, dtype=np.float64)
    conc = np.full(2, float(conc)) if conc.ndim == 0 else conc
    return pm.CustomDist.dist(float(r2_a), float(r2_b), conc, **_r2d2_dist_parts())


def _r2d2_dist_parts() -> dict:
    return {
        "logp": _r2d2_logp,
        "dist": _r2d2_graph,
        "support_point": _r2d2_support_point,
        "signature": "(),(),(m)->(m)",
        "class_name": "R2D2Precision",
    }


#: Distributions known by name besides PyMC's own: name -> (factory, parameter names, the
#: factory of an unnamed variable).
_EXTRA_DISTRIBUTIONS = {
    "HalfCauchyPrecision": (halfcauchy_precision, ("beta",), _halfcauchy_precision_dist),
    "RegularisedHorseshoePrecision": (
        regularised_horseshoe_precision,
        ("beta", "c"),
        _regularised_horseshoe_dist,
    ),
    "R2D2Precision": (
        r2d2_precision,
        ("r2_a", "r2_b", "concentration"),
        _r2d2_precision_dist,
    ),
}


#: Those of them whose variable is a vector over the columns (created with ``dims`` or ``shape``).
_VECTOR_DISTRIBUTIONS = frozenset({"R2D2Precision"})

#: Options of theirs that choose how the variable is built, not its distribution: name ->
#: {option: allowed values}; the first value is the factory's default.
_DISTRIBUTION_OPTIONS = {"R2D2Precision": {"coordinates": ("auto", "gaussian", "log_alpha")}}


def _pymc_parameters(dist: str) -> set[str] | None:
    # PyMC is imported here, not at the top: a type-II fit never builds a PyMC variable.
    import pymc as pm

    cls = getattr(pm, dist, None)
    if cls is None or not isinstance(cls, type) or not issubclass(cls, pm.Distribution):
        return None
    params = {
        p.name
        for p in inspect.signature(cls.dist).parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    return params - {"self", "args", "kwargs", "size", "rng", "dtype", "shape", "dims", "name"}


# ---------------------------------------------------------------------------------------------
# Prior objects
# ---------------------------------------------------------------------------------------------
def _quick_eval(var) -> np.ndarray:
    """A few scalars evaluated once: no graph rewriting, Python linker (compiles nothing)."""
    import pytensor

    return np.asarray(var.eval(mode=pytensor.compile.mode.Mode(linker="py", optimizer=None)))


def _fmt(v) -> str:
    return repr(v.tolist()) if isinstance(v, np.ndarray) else repr(v)


_COMPARISONS = {
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}


def _failing_condition(condition: str, values: Mapping[str, Any]) -> list[str]:
    """The given parameters of one of PyMC's conditions (``"lower <= upper"``) if it fails.

    Empty when the condition holds or cannot be evaluated (it names something not given).
    """
    try:
        node = ast.parse(condition.strip(), mode="eval").body
    except SyntaxError:
        return []
    if not isinstance(node, ast.Compare) or not all(type(o) in _COMPARISONS for o in node.ops):
        return []
    names, operands = [], []
    for term in (node.left, *node.comparators):
        sign = 1.0
        if isinstance(term, ast.UnaryOp) and isinstance(term.op, ast.USub):
            sign, term = -1.0, term.operand
        if isinstance(term, ast.Name) and term.id in values:
            names.append(term.id)
            operands.append(sign * np.asarray(values[term.id], dtype=np.float64))
        elif isinstance(term, ast.Constant) and isinstance(term.value, int | float):
            operands.append(sign * float(term.value))
        else:
            return []
    holds = all(
        np.all(_COMPARISONS[type(op)](a, b))
        for op, a, b in zip(node.ops, operands, operands[1:], strict=False)
    )
    return [] if holds or not names else names


#: The JSON of every Prior whose parameters passed :meth:`Prior._check_support`.
_SUPPORT_CHECKED: set[str] = set()


def _clean_parameter(distribution: str, key: str, value):
    """A parameter as a Prior, a float or a float array; anything else is refused by name."""
    if isinstance(value, Prior):
        return value
    arr = None if isinstance(value, str | bytes) else np.asarray(value)
    if arr is None or arr.dtype.kind not in "iuf" or arr.size == 0:
        raise TypeError(
            f"Prior({distribution!r}): parameter {key} must be a number, an array of numbers or "
            f"a Prior, got {value!r}."
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"Prior({distribution!r}): parameter {key} must be finite, got {value!r}.")
    return float(arr) if arr.ndim == 0 else arr.astype(np.float64)


def _clean_dims(dims) -> tuple[str, ...] | None:
    if dims is None:
        return None
    names = (dims,) if isinstance(dims, str) else dims
    if not isinstance(names, Sequence) or not all(isinstance(d, str) for d in names):
        raise TypeError(f"dims must be a dimension name or a sequence of names, got {dims!r}.")
    return tuple(names)


class Prior:
    """A distribution with parameters (numbers, arrays or other priors) and dims.

    Parameters
    ----------
    distribution : str
        A PyMC distribution name (``"HalfNormal"``, ``"Gamma"``, ...) or ``"HalfCauchyPrecision"``
        (:func:`halfcauchy_precision`).
    dims : str or sequence of str, optional
        Dims of the variable when it is created without explicit dims.
    **parameters
        The distribution's parameters: numbers, array-likes, or :class:`Prior` objects (created as
        variables named ``f"{name}_{parameter}"``).

    Examples
    --------
    >>> from bayes_rvm.models.priors import Prior
    >>> Prior("Gamma", alpha=2.0, beta=Prior("HalfNormal", sigma=1.0))
    Prior("Gamma", alpha=2.0, beta=Prior("HalfNormal", sigma=1.0))
    """

    def __init__(self, distribution: str, *, dims: str | Sequence[str] | None = None, **parameters):
        if not isinstance(distribution, str):
            raise TypeError(f"distribution must be a name, got {distribution!r}.")
        allowed = _DISTRIBUTION_OPTIONS.get(distribution, {})
        options = {k: parameters.pop(k) for k in list(parameters) if k in allowed}
        for key, value in options.items():
            if not isinstance(value, str) or value not in allowed[key]:
                raise ValueError(
                    f"Prior({distribution!r}): {key} must be one of {allowed[key]}, got {value!r}."
                )
        if distribution in _EXTRA_DISTRIBUTIONS:
            known = set(_EXTRA_DISTRIBUTIONS[distribution][1]) | set(allowed)
        else:
            known = _pymc_parameters(distribution)
            if known is None:
                raise ValueError(f"{distribution!r} is not a PyMC distribution.")
        unknown = set(parameters) - known
        if unknown:
            raise ValueError(
                f"Prior({distribution!r}) has no parameter(s) {sorted(unknown)}; it takes "
                f"{sorted(known)}."
            )
        if distribution == "RegularisedHorseshoePrecision" and "c" in parameters:
            _slab_precision(parameters["c"])  # the transform needs the slab as a number
        self.distribution = distribution
        self.parameters = {k: _clean_parameter(distribution, k, v) for k, v in parameters.items()}
        # How the variable is built (R2D2Precision's coordinates), kept apart from the numbers.
        self.options = options
        self.dims = _clean_dims(dims)
        self._check_support()

    def _dist(self, params: Mapping[str, Any]):
        """An unnamed random variable of this distribution with the given parameter values."""
        import pymc as pm

        if self.distribution in _EXTRA_DISTRIBUTIONS:
            return _EXTRA_DISTRIBUTIONS[self.distribution][2](**params)
        return getattr(pm, self.distribution).dist(**params)

    def _typical_value(self) -> np.ndarray:
        """The distribution's support point (where NUTS starts), as numbers."""
        params = {
            k: v._typical_value() if isinstance(v, Prior) else v for k, v in self.parameters.items()
        }
        from pymc.distributions.distribution import support_point

        return _quick_eval(support_point(self._dist(params)))

    def _check_support(self) -> None:
        # The distribution's own logp states which parameter values it admits (PyMC's
        # check_parameters): evaluate it once at its support point, with every parameter that is
        # itself a Prior at that prior's support point. Impossible parameters (Gamma(0, 0), a
        # negative scale) are refused here, not by a sampler that finds no finite start.
        key = self.to_json()
        if key in _SUPPORT_CHECKED:  # a copy (scikit-learn's clone) or a repeat: checked already
            return
        import pymc as pm
        from pymc.distributions.distribution import support_point
        from pymc.logprob.utils import ParameterValueError

        params = {
            k: v._typical_value() if isinstance(v, Prior) else v for k, v in self.parameters.items()
        }
        try:
            rv = self._dist(params)
            logp = _quick_eval(pm.logp(rv, support_point(rv)))
        except ParameterValueError as err:
            raise ValueError(self._refusal(str(err), params)) from None
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"Prior({self.distribution!r}): parameters {self._given(params)} cannot be "
                f"built into a distribution: {err}"
            ) from None
        if not np.all(np.isfinite(logp)):
            raise ValueError(
                f"Prior({self.distribution!r}): parameters {self._given(params)} give no finite "
                "density at the distribution's own support point; check them."
            )
        _SUPPORT_CHECKED.add(key)

    def _given(self, values: Mapping[str, Any]) -> str:
        """The parameters as written, a Prior with the typical value it was checked at."""

        def fmt(k):
            v = self.parameters[k]
            if isinstance(v, Prior):
                return f"{k}={v!r} (checked at its typical value {_fmt(values[k])})"
            return f"{k}={_fmt(v)}"

        return ", ".join(fmt(k) for k in self.parameters) or "(none)"

    def _refusal(self, conditions: str, values: Mapping[str, Any]) -> str:
        """The message for parameters that break the distribution's own conditions.

        ``conditions`` is PyMC's statement of them (``"alpha > 0, beta > 0"``); those written in
        the parameters given are evaluated, to name the ones that fail. Conditions on PyMC's
        internal parameters (StudentT's ``lam`` for ``sigma``) cannot be: then every given
        parameter is named.
        """
        failed, names = [], []
        for cond in conditions.split(", "):
            involved = _failing_condition(cond, values)
            if involved:
                failed.append(cond)
                names += [k for k in involved if k not in names]
        rule = ", ".join(failed)
        if not failed:
            names = list(self.parameters)
            rule = f"PyMC's conditions {conditions} (on its own parametrisation)"
        which = f"parameter{'s' if len(names) != 1 else ''} {', '.join(names) or '(none)'}"
        return (
            f"Prior({self.distribution!r}): {which} must satisfy {rule}, got "
            f"{self._given(values)}; {self!r} is not a proper distribution."
        )

    def has_positive_support(self) -> bool:
        """Whether the distribution lives on the positive reals (PyMC samples it in logs)."""
        import pymc as pm

        if self.distribution in _EXTRA_DISTRIBUTIONS:
            return True  # precisions, positive by construction (R2-D2's may be a deterministic)

        # A vector over the columns (R2D2Precision) needs their number: two will do.
        size = {"shape": (2,)} if self.distribution in _VECTOR_DISTRIBUTIONS else {}
        with pm.Model() as model:
            var = self.create_variable("x", **size)
        transform = model.rvs_to_transforms.get(var)
        return isinstance(transform, pm.distributions.transforms.LogTransform)

    # -- construction of the PyMC variable ----------------------------------------------------
    def create_variable(self, name: str, dims: str | Sequence[str] | None = None, **kwargs):
        """Create the variable ``name`` in the current model context.

        Parameters
        ----------
        name : str
        dims : str or sequence of str, optional
            Overrides :attr:`dims`.
        **kwargs
            Passed to the distribution (``initval``, ``shape``, ...).
        """
        params = {
            k: v.create_variable(f"{name}_{k}") if isinstance(v, Prior) else v
            for k, v in self.parameters.items()
        }
        dims = self.dims if dims is None else dims
        if self.distribution in _EXTRA_DISTRIBUTIONS:
            factory = _EXTRA_DISTRIBUTIONS[self.distribution][0]
            return factory(name, **params, **self.options, dims=dims, **kwargs)
        import pymc as pm

        return getattr(pm, self.distribution)(name, **params, dims=dims, **kwargs)

    # -- serialisation -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: ``{"dist": name, "kwargs": {...}}`` (and ``"dims"`` when set)."""

        def enc(v):
            if isinstance(v, Prior):
                return v.to_dict()
            return v.tolist() if isinstance(v, np.ndarray) else v

        out: dict[str, Any] = {
            "dist": self.distribution,
            "kwargs": {k: enc(v) for k, v in sorted((self.parameters | self.options).items())},
        }
        if self.dims is not None:
            out["dims"] = list(self.dims)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Prior:
        """Inverse of :meth:`to_dict`."""
        if not isinstance(data, Mapping):
            raise TypeError(
                f"Prior.from_dict takes a dict {{'dist': name, 'kwargs': {{...}}}}, got "
                f"{type(data).__name__} {data!r}."
            )
        extra = set(data) - {"dist", "kwargs", "dims"}
        if "dist" not in data or extra:
            raise ValueError(
                f"a Prior dict has the keys 'dist', 'kwargs' and 'dims' (only 'dist' required), "
                f"got {sorted(map(str, data))}."
            )
        kwargs = data.get("kwargs", {})
        if not isinstance(kwargs, Mapping):
            raise TypeError(f"a Prior dict's 'kwargs' must be a dict, got {kwargs!r}.")

        def dec(v):
            return cls.from_dict(v) if isinstance(v, Mapping) else v

        return cls(data["dist"], dims=data.get("dims"), **{k: dec(v) for k, v in kwargs.items()})

    def to_json(self) -> str:
        """:meth:`to_dict` as sorted JSON (a stable key for caches and files)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    # -- value semantics ---------------------------------------------------------------------
    def __eq__(self, other) -> bool:
        return isinstance(other, Prior) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash(self.to_json())

    def __repr__(self) -> str:
        def fmt(v):
            return repr(v.tolist()) if isinstance(v, np.ndarray) else repr(v)

        parts = [f'"{self.distribution}"']
        parts += [f"{k}={fmt(v)}" for k, v in (self.parameters | self.options).items()]
        if self.dims is not None:
            parts.append(f"dims={self.dims!r}")
        return f"Prior({', '.join(parts)})"

    # scikit-learn's clone deep-copies parameters that lack get_params; Prior is immutable in
    # practice, so a copy is an equal object.
    def __deepcopy__(self, memo):
        return Prior.from_dict(self.to_dict())


def in_log_alpha(prior: Prior | None) -> Prior | None:
    """``prior`` with its precisions sampled in ``log alpha``.

    An ``R2D2Precision`` left to choose its coordinates (``coordinates="auto"``, see
    :func:`r2d2_precision`) gets ``coordinates="log_alpha"``: the same prior, in the coordinates
    that suit columns the data all pin. Any other prior (or None) is returned as it is.
    """
    choices = _DISTRIBUTION_OPTIONS.get(getattr(prior, "distribution", None), {})
    if "coordinates" not in choices or prior.options.get("coordinates", "auto") != "auto":
        return prior
    data = prior.to_dict()
    data["kwargs"] = data["kwargs"] | {"coordinates": "log_alpha"}
    return Prior.from_dict(data)


def sparse_alpha_prior(n_basis: int, n_samples: int) -> Prior:
    """A sparsity-inducing ARD hyperprior for ``n_basis`` basis functions and ``n_samples`` rows.

    ``Prior("HalfCauchyPrecision", beta=tau0)`` with ``tau0 = 1 / ((M - 1) sqrt(N))``: Piironen
    and Vehtari's (2017, eq. 3.12) horseshoe global scale ``tau0 = p0 / (D - p0) sigma /
    sqrt(n)``, fixed, for standardised columns (unit root-mean-square, as the hyperpriors are
    stated), ``sigma_rel <= 1`` and ``p0 = 1`` relevant basis function expected a priori. Most of
    its mass switches a basis function off (median ``alpha_rel = tau0^-2``), its Cauchy tail lets
    the data switch a few on. What it costs is in the module's notes: draw-by-draw sparsity,
    slower mixing, and a lower PSIS-LOO than the default on the sinc problems measured.

    Parameters
    ----------
    n_basis : int
        The number of basis functions the model samples (``M``, the bias included).
    n_samples : int
        The number of training rows (``N``): the global scale shrinks as ``1 / sqrt(N)``, the
        noise's share of one weight's uncertainty.
    """
    checked = []
    for name, value in (("n_basis", n_basis), ("n_samples", n_samples)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}.")
        checked.append(int(value))
    n_basis, n_samples = checked
    return Prior("HalfCauchyPrecision", beta=1.0 / (max(n_basis - 1, 1) * np.sqrt(n_samples)))


#: The hyperpriors that ``alpha_prior`` may name (estimators' ``prior_params``, the models).
NAMED_ALPHA_PRIORS = ("halfcauchy", "r2d2")


def default_alpha_prior(
    prior: str = "ard", nu: float | Prior = DEFAULT_NU, s: float = DEFAULT_WEIGHT_SCALE
):
    """The default hyperprior of the relative precisions ``alpha_rel`` for a weight prior.

    ``"ard"``: the Gaussian regression models' default, the hyperprior that
    :data:`DEFAULT_REGRESSION_ALPHA_PRIOR` names.
    ``"halfcauchy"``: :func:`halfcauchy_precision` of scale :data:`DEFAULT_WEIGHT_SCALE` per
    column (the classifiers' and the count model's default).
    ``"r2d2"``: :func:`r2d2_precision` with :data:`DEFAULT_R2D2`, a prior on the share of the
    targets' mean square that the columns together explain.
    ``"student_t"``: ``Gamma(nu/2, nu s^2/2)`` (returns None when ``nu`` is itself a
    :class:`Prior`: the model builds that Gamma from the ``nu`` variable).
    """
    if prior == "ard":
        prior = DEFAULT_REGRESSION_ALPHA_PRIOR
    if prior == "halfcauchy":
        return Prior("HalfCauchyPrecision", beta=DEFAULT_WEIGHT_SCALE)
    if prior == "r2d2":
        return Prior("R2D2Precision", **DEFAULT_R2D2)
    if prior == "student_t":
        if isinstance(nu, Prior):
            return None
        for name, value in (("nu", nu), ("s", s)):
            ok = isinstance(value, int | float | np.integer | np.floating) and not isinstance(
                value, bool
            )
            if not (ok and np.isfinite(value) and value > 0):
                raise ValueError(
                    f"default_alpha_prior('student_t'): {name} must be a positive number"
                    f"{' or a Prior' if name == 'nu' else ''}, got {value!r}."
                )
        return Prior("Gamma", alpha=float(nu) / 2.0, beta=float(nu) * float(s) ** 2 / 2.0)
    raise ValueError(
        f"prior must be 'ard', 'student_t' or one of {NAMED_ALPHA_PRIORS}, got {prior!r}."
    )


#: The default priors built on first use (PEP 562): a Prior of a PyMC distribution checks its
#: parameters against PyMC, which a type-II fit never imports.
_LAZY_DEFAULTS = {
    # Default prior of the relative noise sd ``sigma / y_scale``.
    "DEFAULT_NOISE_PRIOR": ("HalfNormal", {"sigma": 1.0}),
    # Default prior of a sampled kernel width, on ``gamma_rel = gamma / reference_gamma(X)``.
    "DEFAULT_GAMMA_PRIOR": ("LogNormal", {"mu": 0.0, "sigma": 2.0}),
}


def __getattr__(name: str) -> Prior:
    if name in _LAZY_DEFAULTS:
        dist, params = _LAZY_DEFAULTS[name]
        globals()[name] = value = Prior(dist, **params)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def as_prior(value, name: str, *, positive: bool = False) -> Prior | None:
    """Accept None, a :class:`Prior` or its dict form; anything else is a clear error.

    An ``alpha_prior`` may also be a name of :data:`NAMED_ALPHA_PRIORS` (``"r2d2"``,
    ``"halfcauchy"``): :func:`default_alpha_prior` of it.

    ``positive=True``: the prior of a scale or a precision, which must live on the positive reals
    (a ``Normal`` there would give NaN densities at every negative draw).
    """
    if isinstance(value, str) and name == "alpha_prior":
        if value not in NAMED_ALPHA_PRIORS:
            raise ValueError(
                f"alpha_prior names one of {NAMED_ALPHA_PRIORS} (or give a Prior), got {value!r}."
            )
        value = default_alpha_prior(value)
    if value is not None and not isinstance(value, Prior):
        if not isinstance(value, Mapping):
            raise TypeError(
                f"{name} must be a bayes_rvm.Prior (or its to_dict() form), got {value!r}."
            )
        value = Prior.from_dict(value)
    if positive and value is not None and not value.has_positive_support():
        raise ValueError(
            f"{name} must be a distribution on the positive reals (Gamma, LogNormal, HalfNormal, "
            f"HalfCauchyPrecision, ...), got {value!r}."
        )
    return value


#: Key that marks a Prior among an estimator's JSON-encoded parameters.
_PRIOR_TAG = "bayes_rvm.Prior"


def _encode(value: Any) -> Any:
    if isinstance(value, Prior):
        return {_PRIOR_TAG: value.to_dict()}
    if isinstance(value, Mapping):
        return {k: _encode(v) for k, v in value.items()}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, Mapping):
        if _PRIOR_TAG in value:
            return Prior.from_dict(value[_PRIOR_TAG])
        return {k: _decode(v) for k, v in value.items()}
    return value


def encode_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Constructor parameters with every :class:`Prior` replaced by a tagged dict (for JSON),
    also inside dict parameters (``prior_params``, ``likelihood_params``)."""
    return {k: _encode(v) for k, v in params.items()}


def decode_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`encode_params`."""
    return {k: _decode(v) for k, v in params.items()}
