"""Sampling diagnostics: divergences, rank-normalised R-hat and bulk / tail ESS, with remedies.

:func:`diagnose` summarises an MCMC fit and warns (:class:`SamplingDiagnosticsWarning`) with the
usual remedy for each problem. Its R-hat and ESS are the estimators of ``arviz.rhat``
(``method="rank"``) and ``arviz.ess`` (``"bulk"``, ``"tail"``) of ArviZ 1.x (Vehtari et al. 2021,
"Rank-normalization, folding, and localization"), to rounding: ArviZ evaluates them one scalar at
a time (a rank transform, a normal quantile function and an FFT per scalar), which cost about a
second on an RVM fit with 101 basis functions and 4 x 1000 draws, more than the sampling itself.
Here the ranks, quantile functions and autocovariances are computed for all scalars in one array
operation; only Geyer's initial sequences, a few steps per scalar, are a loop. ``arviz_stats``'
array layer (``array_stats.rhat``, ``array_stats.ess``) gives the same values to rounding on
plain arrays but loops over the scalars too: 3-5x the time here on 101 x 4 x 1000 draws.
:func:`rhat_rank`, :func:`ess_bulk` and :func:`ess_tail` take an array of shape
``(K, chain, draw)`` and return shape ``(K,)``; :func:`rhat_parts` and :func:`ess_folded` give
the two halves of the rank R-hat apart (bulk, and folded: the rank-normalised distance from the
median), which tell a disagreement of the chains' locations from one of their spreads.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np
import xarray as xr
from scipy import fft, special

from bayes_rvm._warnings import warn_at_user

if TYPE_CHECKING:
    from bayes_rvm.models.spec import RVMSpec

__all__ = [
    "SamplingDiagnosticsWarning",
    "diagnose",
    "ess_bulk",
    "ess_folded",
    "ess_tail",
    "rhat_parts",
    "rhat_rank",
]


class SamplingDiagnosticsWarning(UserWarning):
    """Divergences, large R-hat or small ESS after sampling."""


def _split_chains(x: np.ndarray) -> np.ndarray:
    # (K, C, S) -> (K, 2C, S // 2): first and last halves of each chain (the middle draw of an
    # odd number is dropped, as ArviZ does).
    half = x.shape[2] // 2
    return np.concatenate([x[:, :, :half], x[:, :, x.shape[2] - half :]], axis=1)


def _z_scale(x: np.ndarray) -> np.ndarray:
    # Ranks over all chains and draws (average ties), Blom's offset, the normal quantile. The
    # quantiles of the ranks 1..n are the same for every row: computed once and placed by each
    # row's order in one compiled pass (rank_kernels), the normal quantile function only where
    # ties average the rank (the same values as ndtri of every rank, at a fraction of the cost).
    from bayes_rvm.inference.rank_kernels import place_scores

    K, C, S = x.shape
    n = C * S
    flat = np.ascontiguousarray(x.reshape(K, n))

    def blom(rank):
        return special.ndtri((rank - 0.375) / (n + 0.25))

    z, tied, n_tied = place_scores(flat, np.argsort(flat, axis=1), blom(np.arange(1.0, n + 1.0)))
    if n_tied:
        at = tied > 0
        z[at] = blom(tied[at])
    return z.reshape(K, C, S)


def _rhat(x: np.ndarray) -> np.ndarray:
    S = x.shape[2]
    between = S * np.var(np.mean(x, axis=2), axis=1, ddof=1)
    within = np.mean(np.var(x, axis=2, ddof=1), axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt((between / within + S - 1) / S)


def _valid(x: np.ndarray, min_chains: int) -> np.ndarray:
    C, S = x.shape[1:]
    ok = ~np.isnan(x).any(axis=(1, 2))
    return ok & (C >= min_chains) & (S >= 4)


#: Scalars per thread below which the diagnostics run in the calling thread only.
_MIN_SCALARS_PER_THREAD = 64


def _usable_cpus() -> int:
    # The CPUs this process may run on (its affinity, where the platform has one).
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _in_threads(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    """``fn(x)`` for ``x`` of shape (K, chain, draw), its scalars split between threads.

    Every estimator here treats each scalar on its own, so the split gives the same values. The
    work is sorts, FFTs and ufuncs on whole blocks, which release the GIL: on the full basis at
    N = 1000 (1001 weights and 1002 hyperparameters x 4000 draws) the diagnostics ran over a
    second on one core while the sampler's threads had finished.
    """
    n = min(_usable_cpus(), x.shape[0] // _MIN_SCALARS_PER_THREAD)
    if n < 2:
        return fn(x)
    with ThreadPoolExecutor(n) as pool:
        return np.concatenate(list(pool.map(fn, np.array_split(x, n))))


def rhat_rank(x: np.ndarray) -> np.ndarray:
    """Rank-normalised split R-hat: the larger of the bulk and the folded (tail) one.

    Parameters
    ----------
    x : ndarray of shape (K, chain, draw)

    Returns
    -------
    ndarray of shape (K,)
        NaN where a scalar has a NaN draw or there are fewer than 2 chains or 4 draws.
    """
    return _in_threads(_rhat_rank, np.asarray(x, dtype=np.float64))


def _rhat_rank(x: np.ndarray, z: np.ndarray | None = None) -> np.ndarray:
    # z: the rank-normalised split chains, where the caller has them (_hyper_stats)
    return np.max(_rhat_parts(x, z), axis=1)


def rhat_parts(x: np.ndarray) -> np.ndarray:
    """The bulk and the folded rank-normalised split R-hat, apart (:func:`rhat_rank` is their
    larger).

    The folded one is the R-hat of the rank-normalised ``|x - median|``: the chains' spreads.
    NUTS draws are antithetic in ``x`` and positively correlated in ``|x - median|`` (an iid
    Gaussian's folded ESS is about 0.4 per draw), so of many parameters' R-hat at a few hundred
    draws per chain the folded one is usually the largest.

    Parameters
    ----------
    x : ndarray of shape (K, chain, draw)

    Returns
    -------
    ndarray of shape (K, 2)
        Bulk, folded; NaN as in :func:`rhat_rank`.
    """
    return _in_threads(_rhat_parts, np.asarray(x, dtype=np.float64))


def _folded(split: np.ndarray) -> np.ndarray:
    return np.abs(split - np.median(split, axis=(1, 2), keepdims=True))


def _rhat_parts(x: np.ndarray, z: np.ndarray | None = None) -> np.ndarray:
    split = _split_chains(x)
    bulk = _rhat(_z_scale(split) if z is None else z)
    out = np.column_stack([bulk, _rhat(_z_scale(_folded(split)))])
    return np.where(_valid(x, 2)[:, None], out, np.nan)


def _autocov(x: np.ndarray) -> np.ndarray:
    # Autocovariance of each chain at every lag, by FFT, divided by the number of draws.
    S = x.shape[-1]
    x = x - x.mean(axis=-1, keepdims=True)
    f = fft.rfft(x, n=fft.next_fast_len(2 * S), axis=-1)
    return fft.irfft(f * np.conjugate(f), n=fft.next_fast_len(2 * S), axis=-1)[..., :S] / S


def _ess(x: np.ndarray) -> np.ndarray:
    """ESS of each scalar of ``x`` (K, chain, draw), Geyer's initial monotone sequence."""
    _, C, S = x.shape
    acov = _autocov(x)
    mean_var = np.mean(acov[:, :, 0], axis=1) * S / (S - 1.0)
    var_plus = mean_var * (S - 1.0) / S
    if C > 1:
        var_plus = var_plus + np.var(np.mean(x, axis=2), axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = 1.0 - (mean_var[:, None] - np.mean(acov, axis=1)) / var_plus[:, None]
    from bayes_rvm.inference.rank_kernels import geyer_tau

    total = C * S
    out = total / geyer_tau(np.ascontiguousarray(rho), total)
    constant = (x.max(axis=(1, 2)) - x.min(axis=(1, 2))) < np.finfo(float).resolution
    return np.where(constant, float(total), out)


def ess_bulk(x: np.ndarray) -> np.ndarray:
    """Bulk ESS: the ESS of the rank-normalised split chains.

    Parameters
    ----------
    x : ndarray of shape (K, chain, draw)

    Returns
    -------
    ndarray of shape (K,)
    """
    return _in_threads(_ess_rank, np.asarray(x, dtype=np.float64))


def _ess_rank(x: np.ndarray, folded: bool = False) -> np.ndarray:
    # The ESS of the rank-normalised split chains, or of their distance from the median.
    split = _split_chains(x)
    out = _ess(_z_scale(_folded(split) if folded else split))
    return np.where(_valid(x, 1), out, np.nan)


def ess_folded(x: np.ndarray) -> np.ndarray:
    """Folded ESS: the ESS of the rank-normalised ``|x - median|`` of the split chains, the
    quantity whose between-chain variance the folded R-hat reads (:func:`rhat_parts`).

    Parameters
    ----------
    x : ndarray of shape (K, chain, draw)

    Returns
    -------
    ndarray of shape (K,)
        ``arviz.ess(method="folded")`` of each scalar; NaN as in :func:`ess_bulk`.
    """
    return _in_threads(functools.partial(_ess_rank, folded=True), np.asarray(x, dtype=np.float64))


def ess_tail(x: np.ndarray, prob: float | None = None) -> np.ndarray:
    """Tail ESS: the smaller ESS of the indicators below the ``(1 - prob)`` and ``prob`` quantiles.

    Parameters
    ----------
    x : ndarray of shape (K, chain, draw)
    prob : float, optional
        ArviZ's ``stats.ci_prob`` setting by default (0.89), as ``arviz.ess(method="tail")``.

    Returns
    -------
    ndarray of shape (K,)
    """
    if prob is None:
        from arviz_base import rcParams

        prob = rcParams["stats.ci_prob"]
    return _in_threads(functools.partial(_ess_tail, prob=prob), np.asarray(x, dtype=np.float64))


def _ess_tail(x: np.ndarray, prob: float) -> np.ndarray:
    K = x.shape[0]
    out = np.full(K, np.inf)
    for p in sorted((prob, 1.0 - prob)):
        q = np.quantile(x.reshape(K, -1), p, axis=1)
        below = (x <= q[:, None, None]).astype(np.float64)
        out = np.minimum(out, _ess(_split_chains(below)))
    return np.where(_valid(x, 1), out, np.nan)


def _hyper_stats(x: np.ndarray, prob: float) -> np.ndarray:
    """Bulk and folded R-hat, bulk ESS and tail ESS of each scalar of ``x`` (K, chain, draw),
    shape (K, 4): the rank-normalised split chains made once for the R-hat and the bulk ESS."""
    z = _z_scale(_split_chains(x))
    bulk = np.where(_valid(x, 1), _ess(z), np.nan)
    return np.column_stack([_rhat_parts(x, z), bulk, _ess_tail(x, prob)])


def _nan_extreme(reduce, values: np.ndarray) -> float:
    """``reduce`` (``np.nanmax`` or ``np.nanmin``) of ``values``; NaN, without NumPy's warning,
    where every value is NaN (R-hat of a single chain)."""
    return float(reduce(values)) if not np.isnan(values).all() else math.nan


def diagnose(
    dt: xr.DataTree, *, warn: bool = True, advice: str = "model", spec: RVMSpec | None = None
) -> dict:
    """Divergences, max R-hat and min bulk ESS of the hyperparameters, with warnings and remedies.

    Parameters
    ----------
    dt : xarray.DataTree
        An MCMC fit from :func:`sample_mcmc` (or any ``pm.sample`` result with ``alpha``).
    warn : bool, default=True
        Emit a :class:`SamplingDiagnosticsWarning` for each problem found, at the caller's line
        outside this package.
    advice : {"model", "estimator", "estimator_relevant"}, default="model"
        Word the remedies for a user's own model, for the RVR / RVC estimators, or for an
        estimator that already samples only the type-II relevance vectors.
    spec : RVMSpec, optional
        The sampled model's spec (:func:`bayes_rvm.models.spec.model_spec`): the divergence
        remedies named are those of its prior and form.

    Returns
    -------
    dict
        ``divergences``, ``max_rhat``, ``min_ess_bulk``, ``min_ess_tail`` (over ``log alpha``,
        ``sigma``, ``nu`` and a Student-t noise's ``noise_nu``), ``max_rhat_bulk`` and
        ``max_rhat_folded`` (the two halves of ``max_rhat``, :func:`rhat_parts`),
        ``max_rhat_w`` (over the weights), ``max_treedepth_hits``.
    """
    post = dt["posterior"].dataset
    hyper = [v for v in ("alpha", "sigma", "nu", "noise_nu") if v in post]

    def scalars(name: str, log: bool = False) -> np.ndarray:
        # (K, chain, draw): every scalar of the variable, for the vectorised diagnostics
        # (ArviZ's estimators, one array operation for all scalars: see rhat_rank).
        da = post[name]
        x = da.transpose(..., "chain", "draw").values.reshape(
            -1, da.sizes["chain"], da.sizes["draw"]
        )
        return np.log(x) if log else x

    # As documented, on log alpha: the scale NUTS moves on (rank R-hat is not log-invariant).
    x = np.concatenate([scalars(v, log=v == "alpha") for v in hyper])
    from arviz_base import rcParams

    stats = _in_threads(functools.partial(_hyper_stats, prob=rcParams["stats.ci_prob"]), x)
    out = {
        "divergences": 0,
        "max_rhat": _nan_extreme(np.nanmax, stats[:, :2]),
        "max_rhat_bulk": _nan_extreme(np.nanmax, stats[:, 0]),
        "max_rhat_folded": _nan_extreme(np.nanmax, stats[:, 1]),
        "min_ess_bulk": _nan_extreme(np.nanmin, stats[:, 2]),
        "min_ess_tail": _nan_extreme(np.nanmin, stats[:, 3]),
        "max_treedepth_hits": 0,
    }
    if "w" in post:
        weights = [scalars(v) for v in ("w", "intercept") if v in post]
        out["max_rhat_w"] = _nan_extreme(np.nanmax, rhat_rank(np.concatenate(weights)))
    if "sample_stats" in dt.children:
        ss = dt["sample_stats"].dataset
        if "diverging" in ss:
            out["divergences"] = int(ss["diverging"].sum())
        for name in ("maxdepth_reached", "reached_max_treedepth"):
            if name in ss:
                out["max_treedepth_hits"] = int(ss[name].sum())
    if warn:
        n = post.sizes["chain"] * post.sizes["draw"]
        tips = _ADVICE[advice]
        if out["divergences"]:
            _warn(
                f"{out['divergences']} of {n} draws diverged. "
                f"{divergence_advice(advice, spec)}{tips['divergences']}"
            )
        classes = spec is not None and spec.likelihood in ("bernoulli", "softmax")
        joint = spec is not None and spec.form == "joint"  # the marginal form mixes faster
        modes = _relevance_modes(post, classes) if out["max_rhat"] > 1.01 else ""
        near = out["max_rhat"] <= NEAR_RHAT  # where finite draws alone can explain it
        if out["max_rhat"] > 1.01:
            _warn(
                f"max R-hat of the hyperparameters is {_above(out['max_rhat'], 1.01)}, above "
                f"1.01: the chains disagree{_which_half(out)}. "
                + (f"{modes}{tips['modes']}" if modes else tips["rhat"])
                + (f" {tips['rhat_near']}" if not modes and "rhat_near" in tips and near else "")
            )
        if out["min_ess_bulk"] < 400:
            _warn(
                f"min bulk ESS of the hyperparameters is {int(out['min_ess_bulk'])}, below 400. "
                + (
                    "The chains sit in different modes (above)."
                    if modes
                    else tips.get("ess_joint" if joint else "ess", tips["ess"])
                )
            )
    return out


def _which_half(out: dict) -> str:
    # Only the folded half above 1.01: the chains' spreads differ, not their locations, which
    # is what NUTS's positively correlated |x - median| gives at a few hundred draws.
    if out["max_rhat_bulk"] <= 1.01 < out["max_rhat_folded"]:
        return (
            f" in spread only (folded R-hat {_above(out['max_rhat_folded'], 1.01)}, bulk "
            f"{out['max_rhat_bulk']:.3f}; NUTS draws are correlated in their distance from the "
            "median: thinning, sample_mcmc(thin=4), makes them nearly independent)"
        )
    return ""


#: Below this the R-hat warning adds that the largest of many R-hats just above 1.01 can be the
#: noise of finite draws (above it, as iris's 1.26, the chains disagree for a reason).
NEAR_RHAT = 1.05
#: How far apart (in pooled within-chain standard deviations) the chains' medians of a
#: basis function's log alpha must lie for :func:`diagnose` to call them different modes.
MODE_SEPARATION = 2.0


def _relevance_modes(post: xr.Dataset, classes: bool = False, limit: int = 5) -> str:
    """A sentence naming the basis functions whose log alpha the chains place in different
    modes (chain medians :data:`MODE_SEPARATION` within-chain sds apart or more), or "".
    ``classes``: a classifier's model, whose separable classes the sentence mentions.

    Chains that each keep a different one of several nearly collinear basis functions relevant
    (a small alpha in one chain, pruned in the others) sample different modes of the posterior,
    which NUTS does not cross: more draws leave R-hat where it is. On iris (100 rows, raw
    features, the default width; R-hat 1.50) the chains' medians of the three worst log alphas
    lay 11.5-12.3 apart, 3.2-4.4 within-chain sds; on the tests' three-class Ripley problem
    (R-hat 1.01-1.02, chains that mix slowly but in one mode) at most 0.22 sds.
    """
    if "alpha" not in post or "basis" not in post["alpha"].dims:
        return ""
    la = np.log(post["alpha"].transpose("basis", ..., "chain", "draw").values)
    la = la.reshape(la.shape[0], -1, la.shape[-2], la.shape[-1])
    medians = np.median(la, axis=-1)
    spread = np.sqrt(np.mean(np.var(la, axis=-1), axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        apart = np.max((np.ptp(medians, axis=-1)) / spread, axis=-1)
    where = np.flatnonzero(np.nan_to_num(apart) >= MODE_SEPARATION)
    if where.size == 0:
        return ""
    names = post["alpha"]["basis"].values
    worst = where[np.argsort(-apart[where])][:limit]
    listed = ", ".join(str(names[i]) for i in worst) + (", ..." if where.size > limit else "")
    return (
        f"The chains keep different basis functions relevant ({listed}: log alpha's chain "
        f"medians up to {apart[worst[0]]:.0f} within-chain sds apart): the posterior has several "
        "modes, nearly collinear basis functions that can each carry the same part of the "
        "function, and the chains do not move between them, so more draws do not help. "
        + (
            "Where classes separate in the basis, each mode's weights grow to the hyperprior's "
            "tail (tens to hundreds), which deepens the valleys between them. "
            if classes
            else ""
        )
    )


def divergence_advice(advice: str, spec: RVMSpec | None) -> str:
    """The divergence remedies that depend on the sampled model: its prior and its form."""
    said = []
    if spec is not None and spec.prior == "student_t":
        nu = "prior_params={'nu': ...}" if advice.startswith("estimator") else "nu"
        said.append(
            f"The Student-t prior's Gamma(nu/2, nu/2) on alpha puts a wall in log alpha when nu "
            f"is small: a larger nu ({nu}) or prior='ard' samples well."
        )
    regression = spec is not None and spec.likelihood in ("gaussian", "student_t")
    if regression and spec.form == "centred":
        said.append(
            "The weights are sampled centred, a funnel where the data leave a weight loose: "
            "the joint form without centred=True samples them whitened by their Gaussian "
            "posterior given the hyperparameters, which removes it."
        )
    elif regression and spec.form == "joint":
        accept = (
            "fit(X, y, nuts={'target_accept': 0.95})"
            if advice.startswith("estimator")
            else "sample_mcmc(..., nuts={'target_accept': 0.95})"
        )
        said.append(
            "The weights are sampled whitened by their Gaussian posterior given the "
            "hyperparameters, which leaves NUTS the geometry of the weight-marginalised model: "
            "divergences come from the hyperparameters or from terms of your own (give those "
            f"priors on the scale of the data), and a higher target acceptance ({accept}) takes "
            "smaller steps there."
        )
    elif spec is not None and spec.form == "whitened":
        poorly = (
            "counts the expansion fits poorly (a rate that varies over decades)"
            if spec.likelihood == "poisson"
            else "labels the expansion fits poorly (classes the latent all but separates)"
        )
        if advice.startswith("estimator"):
            where, accept = "the type-II mode", "fit(X, y, nuts={'target_accept': 0.99})"
        else:
            where = "the reference weights"
            accept = "sample_mcmc(..., nuts={'target_accept': 0.99})"
        said.append(
            "The weights are sampled whitened by the Gaussian posterior, given the precisions, "
            f"of the log-likelihood expanded at {where}: divergences come from the precisions "
            f"or from {poorly}, and a target acceptance nearer 1 ({accept}) takes smaller steps "
            "there."
        )
    elif spec is not None and spec.form in ("joint", "centred", "partly centred"):
        # The count models sample at 0.9 whitened; other forms are the user's.
        accept = 0.995 if spec.likelihood == "poisson" else 0.99
        said.append(
            "The weights are sampled with their precisions (no closed-form marginal for this "
            "likelihood), a funnel where the data say little: a target acceptance nearer 1 "
            f"(fit(X, y, nuts={{'target_accept': {accept}}}) on an estimator, sample_mcmc(..., "
            f"nuts={{'target_accept': {accept}}}) on a model) takes smaller steps into its neck, "
            "and a longer warm-up (more tune) adapts the step size better."
        )
    return "".join(f"{s} " for s in said)


#: Remedies by audience: a user's own model, or the RVR / RVC estimators (which already sample
#: the weight-marginalised regression model and start from the type-II fit).
_ADVICE = {
    "model": {
        "divergences": "Raise target_accept (nuts={'target_accept': 0.95}); prefer "
        "form='marginal' over the joint form where the likelihood has one; avoid Gamma "
        "hyperpriors with tiny rates, whose wall in log alpha NUTS cannot cross.",
        "rhat": "Run longer (more tune and draws), start from type2_initvals(fit), or restrict "
        "the basis to the type-II relevance vectors (basis=fit.active). Nearly collinear columns, "
        "as from a wide kernel, make a ridged posterior; a narrower one (larger gamma) helps.",
        "ess": "Draw more samples (draws=...).",
        "ess_joint": "Draw more samples (draws=...), or use form='marginal', where the "
        "likelihood has one.",
        "modes": "Restrict the basis to the type-II relevance vectors (basis=fit.active), one of "
        "the modes, and draw more there.",
    },
    "estimator": {
        "divergences": "Raise tune (sampler_config={'tune': ...}), or sample only the type-II "
        "relevance vectors (sampler_config={'mcmc_basis': 'relevant'}).",
        "rhat": "Raise tune and draws, or sample only the type-II relevance vectors with more "
        "draws (sampler_config={'mcmc_basis': 'relevant', 'draws': 4000}). Nearly collinear "
        "basis columns, as from a wide kernel, make a ridged posterior; a narrower kernel "
        "(larger gamma) can help.",
        "rhat_near": "Just above 1.01 with a bulk ESS of a few hundred, the largest of many "
        "R-hats is within the noise of the finite draws (NUTS on an iid Gaussian of 45 "
        "parameters exceeds 1.01 in every run of 2 x 500 draws): raise draws, or thin (fit(X, "
        "y, thin=4)).",
        "ess": "Raise draws (or chains).",
        "modes": "Sample only the type-II relevance vectors (sampler_config={'mcmc_basis': "
        "'relevant'}: one of the modes, a posterior conditional on that choice), with more "
        "draws (sampler_config={'draws': 4000}).",
    },
    # An estimator that already samples only the type-II relevance vectors.
    "estimator_relevant": {
        "divergences": "Raise tune (sampler_config={'tune': 1000}).",
        "rhat": "Raise tune and draws.",
        "rhat_near": "Just above 1.01 with a bulk ESS of a few hundred, the largest of many "
        "R-hats is within the noise of the finite draws: raise draws, or thin (fit(X, y, "
        "thin=4)).",
        "ess": "Raise draws (or chains).",
        "modes": "Narrow the kernel (a larger gamma) so that fewer basis functions are alike.",
    },
}


def _above(value: float, limit: float) -> str:
    """``value`` with enough decimals to differ visibly from ``limit`` (never "1.010 > 1.01")."""
    for digits in range(3, 10):
        text = f"{value:.{digits}f}"
        if text != f"{limit:.{digits}f}":
            return text
    return repr(value)


def _warn(message: str) -> None:
    warn_at_user(message, SamplingDiagnosticsWarning)
