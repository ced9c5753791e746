"""Type-II fit of the RVM with Student-t noise: variational EM on the Gaussian scale mixture.

The noise of target ``t_n`` is Student-t with scale ``sigma = beta^-1/2`` and ``nu`` degrees of
freedom, written as a scale mixture (Tipping and Lawrence 2005)::

    t_n | w, u_n ~ N(phi_n w, 1 / (beta u_n)),    u_n ~ Gamma(nu/2, rate=nu/2),
    w_i ~ N(0, 1 / alpha_i).

With a factorised ``q(w) q(u)`` the log marginal likelihood ``ln p(t | alpha, beta, nu)`` is bounded
below by ``L = E_q[ln p(t, w, u)] + H[q(w)] + H[q(u)]``, and coordinate ascent on ``L`` is:

- **E-step.** ``q(u_n) = Gamma(a_n, b_n)`` with ``a_n = (nu + 1)/2``,
  ``b_n = (nu + beta r_n)/2`` and ``r_n = E_q[(t_n - phi_n w)^2] = (t_n - phi_n m)^2 +
  phi_n^T Sigma phi_n``, so ``E[u_n] = (nu + 1)/(nu + beta r_n)``.
- **M-step.** Given ``q(u)``, the terms of ``L`` in ``w``, ``alpha``, ``beta`` are the Gaussian
  RVM's on the reweighted problem ``(U^1/2 Phi, U^1/2 t)``, ``U = diag(E[u])``: the Gaussian
  type-II engine itself (:func:`~bayes_rvm.evidence.fit_sequential` or
  :func:`~bayes_rvm.evidence.fit_mackay`, warm-started from the previous step) gives the
  alphas, ``beta`` and ``q(w)``, its posterior.
- **nu-step**, before each E-step unless ``nu`` is fixed. Given ``q(w)``, with ``q(u)`` at its
  optimum, the terms of ``L`` in ``nu`` and ``beta`` are ``sum_n ln St(r_n^1/2 | 0,
  beta^-1/2, nu)``: both maximise it (:func:`update_nu`, the ECME step of Liu and Rubin 1995,
  ``beta`` profiled), then the E-step uses them. The EM step, ``nu`` solving ``ln(nu/2) + 1 -
  psi(nu/2) + mean_n(E[ln u_n] - E[u_n]) = 0`` given ``q(u)``, has the same fixed points but
  crawls as ``nu`` grows (Gaussian noise: ``nu = 79`` after 500 iterations, 1e4 after 1e5).

Then ``L = ln Z_rw + 1/2 sum_n E[ln u_n] - sum_n KL(q(u_n) || p(u_n | nu))``, with ``ln Z_rw``
the reweighted problem's Gaussian log evidence (``ln Z_rw + 1/2 sum_n ln E[u_n]`` is the
evidence of the targets under the noise precisions ``beta E[u_n]``, and ``E_q ln p(t | w, u)``
differs from that by ``1/2 sum_n (E[ln u_n] - ln E[u_n])``). ``L`` is what the fit reports as
its ``log_evidence``: a lower bound on the log marginal likelihood, not the marginal itself.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.special import digamma, gammaln, logsumexp, roots_hermitenorm
from sklearn.exceptions import ConvergenceWarning

from bayes_rvm._warnings import PACKAGE_FRAMES
from bayes_rvm.evidence.gaussian import mackay_engine
from bayes_rvm.evidence.options import EvidenceOptions, merge_options
from bayes_rvm.evidence.problem import Problem
from bayes_rvm.evidence.result import EvidenceFit, GaussianWeights
from bayes_rvm.evidence.sequential import sequential_engine
from bayes_rvm.families import student_t_log_likelihood, student_t_variance

__all__ = [
    "NU_RANGE",
    "StudentTWeights",
    "fit_student_t",
    "student_t_bound",
    "student_t_e_step",
    "student_t_engine",
    "update_nu",
]

#: The degrees of freedom a learned ``nu`` is kept within: below 0.1 the noise has almost no
#: finite moments and the EM crawls; above 1e5 it is Gaussian to 1e-5 in every weight.
NU_RANGE = (0.1, 1e5)
_INNER = {"sequential": sequential_engine, "mackay": mackay_engine}


@dataclass(frozen=True)
class StudentTWeights(GaussianWeights):
    """``q(w)`` of a Student-t noise fit: a Gaussian with the noise's scale and degrees of freedom.

    Attributes
    ----------
    mean, chol : ndarray
        Mean and lower Cholesky factor of the precision ``A + beta Phi^T U Phi`` of ``q(w)``.
    beta : float
        Precision ``1 / sigma^2`` of the noise's scale ``sigma``.
    nu : float
        Degrees of freedom of the noise.
    weights : ndarray of shape (N,)
        ``E[u_n]``, each training point's weight in the fit (near 0: treated as an outlier).
    """

    nu: float = np.inf
    weights: np.ndarray = dataclasses.field(default_factory=lambda: np.ones(0))

    @property
    def likelihood(self) -> str:
        """``"student_t"``."""
        return "student_t"

    def predict(self, phi_active: np.ndarray, *, with_noise: bool = True):
        """Mean (n, D) and variance (n,) of a new target's location, or of the target itself.

        ``with_noise``: ``phi^T Sigma phi + nu / (nu - 2) sigma^2``, the variance of a new
        observation (``inf`` for ``nu <= 2``); otherwise ``phi^T Sigma phi``, of the location.
        """
        mean, var = super().predict(phi_active, with_noise=False)
        if with_noise:
            var = var + student_t_variance(self.beta**-0.5, self.nu)
        return mean, var

    def log_predictive(self, phi_active: np.ndarray, T: np.ndarray) -> np.ndarray:
        """``ln int St(t | f, sigma, nu) N(f | phi^T m, phi^T Sigma phi) df`` per row, (n, D).

        The predictive density of new targets ``T`` (n, D): the t noise around the Gaussian
        location has no closed form; 64-point Gauss-Hermite quadrature over the location.
        """
        mean, var = super().predict(phi_active, with_noise=False)
        x, wq = roots_hermitenorm(64)
        f = mean[..., None] + np.sqrt(var)[:, None, None] * x  # (n, D, 64)
        ll = student_t_log_likelihood(np.asarray(T)[..., None], f, self.beta**-0.5, self.nu)
        return logsumexp(ll, axis=-1, b=wq / wq.sum())

    def rescaled(self, column_norms: np.ndarray, target_scale: float) -> StudentTWeights:
        """The posterior for columns ``phi * column_norms`` and targets ``T * target_scale``."""
        base = super().rescaled(column_norms, target_scale)
        return StudentTWeights(base.mean, base.chol, base.beta, self.nu, self.weights)


def student_t_e_step(
    T: np.ndarray, mean: np.ndarray, var: np.ndarray, beta: float, nu: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``q(u)`` from ``q(w)``'s predictive moments: ``(E[u], E[ln u], b)`` per point.

    Parameters
    ----------
    T : ndarray of shape (N,)
        Targets.
    mean, var : ndarray of shape (N,)
        ``phi_n m`` and ``phi_n^T Sigma phi_n`` under ``q(w)``.
    beta, nu : float
        Precision of the noise's scale and its degrees of freedom.
    """
    r = (T - mean) ** 2 + var
    a = 0.5 * (nu + 1.0)
    b = 0.5 * (nu + beta * r)
    return a / b, digamma(a) - np.log(b), b


def _nu_slope(z2: np.ndarray, nu: float) -> float:
    """``2 d/dnu`` of ``mean_n ln St(z_n | 0, 1, nu)``.

    Written so that it keeps its ``O(nu^-2)`` size at large ``nu``, where the ``O(1/nu)`` terms
    cancel exactly: ``log1p`` and ``(z2 - 1) / (nu + z2)`` rather than differences of logs.
    """
    diff = digamma(0.5 * (nu + 1.0)) - digamma(0.5 * nu)
    return float(diff + np.mean((z2 - 1.0) / (nu + z2) - np.log1p(z2 / nu)))


def _profile_beta(r: np.ndarray, nu: float, beta_prior: tuple[float, float]) -> float:
    """The ``beta`` that maximises ``sum_n ln St(r_n^1/2 | 0, beta^-1/2, nu) + ln p(ln beta)``.

    Its stationarity condition ``N/2 + a = 1/2 sum_n (nu+1) x_n / (nu + x_n) + b beta``, with
    ``x_n = beta r_n`` and the hyperprior ``Gamma(a, b)``, has a right-hand side increasing in
    ``beta`` from 0 to ``N (nu+1) / 2`` (``inf`` for ``b > 0``): one root where ``b > 0`` or
    ``a = 0`` (:func:`fit_student_t` refuses the rest), near the Gaussian's ``(N + 2a) / sum r``.
    """
    a, b = beta_prior
    half = 0.5 * r.size + a

    def excess(log_beta: float) -> float:
        beta = np.exp(log_beta)
        x = beta * r
        return float(0.5 * np.sum((nu + 1.0) * x / (nu + x)) + b * beta - half)

    lo = hi = np.log(2.0 * half / np.sum(r))
    step = np.log(nu + 2.0) + 1.0
    while excess(lo) > 0:
        lo -= step
    while excess(hi) < 0:
        hi += step
    return float(np.exp(brentq(excess, lo, hi, xtol=1e-13)))


def update_nu(
    r: np.ndarray,
    beta: float,
    nu: float,
    *,
    fixed_beta: bool = False,
    beta_prior: tuple[float, float] = (0.0, 0.0),
) -> tuple[float, float]:
    """The ``(nu, beta)`` that maximise the bound given ``q(w)``: ``q(u)`` optimised with them.

    Given ``q(w)``, the bound's terms in ``q(u)``, ``nu`` and ``beta``, with ``q(u)`` at its
    optimum, are ``sum_n ln St(r_n^1/2 | 0, beta^-1/2, nu)`` (plus ``ln p(ln beta)``), the
    Student-t log-likelihood of the expected residuals ``r_n = E_q(t_n - phi_n w)^2``. This is
    the ECME step of Liu and Rubin (1995), with the scale profiled out: the EM step of ``nu``
    given ``q(u)`` crawls along the ridge where ``nu`` and ``beta`` trade off (its rate tends to
    1 as ``nu`` grows, which is Gaussian noise), and so does ``nu`` alone given ``beta``.

    Parameters
    ----------
    r : ndarray of shape (N,)
        Expected squared residuals under ``q(w)``.
    beta, nu : float
        The current precision of the noise's scale and degrees of freedom: kept unless a
        candidate raises the objective, so that the step never lowers the bound.
    fixed_beta : bool, default=False
        Keep ``beta`` (the noise scale is given): ``nu`` alone is optimised.
    beta_prior : (shape, rate), default=(0, 0)
        The Gamma hyperprior of ``beta`` over ``log beta``, as the Gaussian engine's.

    Returns
    -------
    nu, beta : float
        ``nu`` within NU_RANGE.
    """
    r = np.asarray(r, dtype=np.float64)

    @functools.cache  # keyed on ln nu: brentq evaluates its bracket's ends again
    def beta_at(log_nu: float) -> float:
        return beta if fixed_beta else _profile_beta(r, float(np.exp(log_nu)), beta_prior)

    def score(log_nu: float, beta_: float) -> float:
        ll = student_t_log_likelihood(np.sqrt(r), 0.0, beta_**-0.5, np.exp(log_nu))
        return float(np.sum(ll) + beta_prior[0] * np.log(beta_) - beta_prior[1] * beta_)

    # By the envelope theorem the profile's slope in nu is the slope at its beta.
    def slope(log_nu: float) -> float:
        return _nu_slope(beta_at(log_nu) * r, float(np.exp(log_nu)))

    def root(lo: float, hi: float) -> list[tuple[float, float]]:
        if not slope(lo) > 0 > slope(hi):
            return []
        # 1e-9 in ln nu: the bound is flat to O(1e-18) about its maximum.
        x = brentq(slope, lo, hi, xtol=1e-9)
        return [(x, beta_at(x))]

    lo, hi = np.log(NU_RANGE[0]), np.log(NU_RANGE[1])
    here = float(np.clip(np.log(nu), lo, hi))
    # Between EM steps nu moves little: a maximum within a factor e^0.5 of it is looked for
    # first, and only without one the whole range, whose ends are then candidates too.
    candidates = [(here, beta), *root(max(lo, here - 0.5), min(hi, here + 0.5))]
    if len(candidates) == 1:
        candidates += [(lo, beta_at(lo)), (hi, beta_at(hi)), *root(lo, hi)]
    # The profile may have more than one stationary point: the best candidate keeps every EM
    # step an ascent of the bound.
    log_nu, beta_new = max(candidates, key=lambda c: score(*c))
    # The range's ends exactly, not exp(log(end)).
    ends = {lo: NU_RANGE[0], hi: NU_RANGE[1]}
    return ends.get(log_nu, float(np.exp(log_nu))), beta_new


def student_t_bound(
    log_z_rw: float, mean_u: np.ndarray, mean_log_u: np.ndarray, b: np.ndarray, nu: float
) -> float:
    """The lower bound ``L`` from the reweighted Gaussian log evidence and ``q(u)``.

    ``L = ln Z_rw + 1/2 sum E[ln u] - sum KL(Gamma(a, b) || Gamma(nu/2, nu/2))``
    (module docstring), with ``a = E[u] b``.
    """
    a = mean_u * b
    c = 0.5 * nu
    kl = (a - c) * digamma(a) - gammaln(a) + gammaln(c) + c * np.log(b / c) + a * (c - b) / b
    return float(log_z_rw + 0.5 * np.sum(mean_log_u) - np.sum(kl))


#: The options of the EM itself, which the Gaussian engine of its M-step does not take.
_EM_OPTIONS = ("noise_nu", "nu_init", "em_tol", "em_max_iter")


def _inner_options(options: EvidenceOptions) -> EvidenceOptions:
    """The options of the M-step's Gaussian engine: ``options`` without the EM's own."""
    if options.likelihood not in (None, "gaussian"):
        raise ValueError(f"fit_student_t cannot fit the {options.likelihood!r} likelihood.")
    if options.gram is not None:
        raise ValueError("fit_student_t reweights the rows of Phi: a precomputed gram is refused.")
    if options.noise_nu is None and options.beta_prior[0] > 0 and options.beta_prior[1] == 0:
        # The profile of beta then has no maximum at small nu (see _profile_beta).
        raise ValueError(
            f"a learned nu takes a beta_prior of positive rate or zero shape, got "
            f"{options.beta_prior!r}; give it a rate or fix noise_nu."
        )
    fields = dataclasses.fields(EvidenceOptions)
    return dataclasses.replace(
        options, **{f.name: f.default for f in fields if f.name in _EM_OPTIONS}
    )


def fit_student_t(
    Phi: np.ndarray, T: np.ndarray, *, options: EvidenceOptions | None = None, **settings
) -> EvidenceFit:
    """Type-II RVM with Student-t noise by variational EM (see the module docstring).

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
        Design matrix, float64.
    T : array-like of shape (N,) or (N, 1)
        Targets (one output).
    options : EvidenceOptions, optional
        Options of the EM and of the Gaussian engine of its M-step (``settings`` override its
        fields): ``solver`` (default ``"sequential"``) names that engine; ``noise_nu`` fixes the
        degrees of freedom (None learns ``nu``, starting from ``nu_init``, default 4.0);
        ``em_tol`` (default 1e-6): converged when the bound rises by less than
        ``em_tol * (1 + |L|)`` and no ``ln E[u_n]`` nor ``ln nu`` moves by more than
        ``sqrt(em_tol)``; ``em_max_iter`` (default 500): cap on EM iterations, reaching it warns
        with ConvergenceWarning. ``beta_init`` and ``alpha_init`` start the first M-step, later
        ones start from the previous one.
    **settings
        Fields of ``options`` to override.

    Returns
    -------
    EvidenceFit
        With a :class:`StudentTWeights` posterior; ``log_evidence`` and ``trace`` are the
        variational lower bound ``L``, one entry per EM iteration.
    """
    settings = dict(settings)
    if settings.pop("likelihood", "student_t") != "student_t":
        raise ValueError("fit_student_t fits the 'student_t' likelihood only.")
    opt = merge_options(options, settings)
    return student_t_engine(Problem.given(Phi, T, likelihood="student_t"), opt)


def student_t_engine(
    problem: Problem, options: EvidenceOptions, warm: EvidenceFit | None = None
) -> EvidenceFit:
    """The Student-t EM (:func:`fit_student_t`) on ``problem``: the engine contract.

    ``warm`` starts the first M-step as it starts the Gaussian engine of ``options.solver``.
    """
    options = problem.start_options(options, warm, solver=options.solver)
    inner = _inner_options(options)
    if problem.targets.shape[1] != 1:
        raise ValueError(
            f"student_t targets must be one column, got shape {problem.targets.shape}."
        )
    Phi, t = problem.design, problem.targets.reshape(-1)
    engine = _INNER[options.solver]
    noise_nu = options.noise_nu
    nu = float(noise_nu if noise_nu is not None else options.nu_init)
    fit = engine(Problem.given(Phi, t), inner)  # u = 1: the Gaussian RVM starts the EM
    bounds: list[float] = []
    log_u = np.zeros(t.size)
    converged, it, moved = False, 0, np.inf
    while not converged and it < options.em_max_iter:
        it += 1
        mean, var = fit.predict(Phi[:, fit.active], with_noise=False)
        nu_old, beta = nu, fit.beta
        if noise_nu is None:
            nu, beta = update_nu(
                (t - mean[:, 0]) ** 2 + var,
                beta,
                nu,
                fixed_beta=options.fixed_beta,
                beta_prior=options.beta_prior,
            )
        mean_u, mean_log_u, b = student_t_e_step(t, mean[:, 0], var, beta, nu)
        root = np.sqrt(mean_u)
        # The sequential engine brings a pruned column back when it pays; MacKay's cannot, so
        # while the weights still move by more than a factor e its pruned columns restart (a
        # column the outliers pruned may be needed without them); later it runs warm.
        restart = options.solver == "mackay" and moved > 1.0
        alpha = np.where(np.isinf(fit.alpha), 1.0, fit.alpha) if restart else fit.alpha
        start = {"alpha_init": alpha}
        if not options.fixed_beta:
            start["beta_init"] = beta
        reweighted = Problem.given(Phi * root[:, None], t * root)
        fit = engine(reweighted, dataclasses.replace(inner, **start))
        bounds.append(student_t_bound(fit.log_evidence, mean_u, mean_log_u, b, nu))
        moved = max(np.max(np.abs(np.log(mean_u) - log_u)), abs(np.log(nu / nu_old)))
        log_u = np.log(mean_u)
        rise = bounds[-1] - bounds[-2] if len(bounds) > 1 else np.inf
        em_tol = options.em_tol
        converged = abs(rise) <= em_tol * (1.0 + abs(bounds[-1])) and moved <= np.sqrt(em_tol)
    if not converged:
        warnings.warn(
            f"the Student-t EM did not converge in {options.em_max_iter} iterations (last bound "
            f"change {bounds[-1] - bounds[-2] if len(bounds) > 1 else np.nan:.2e}); raise "
            "em_max_iter, or fix noise_nu, which converges faster than a learned nu.",
            ConvergenceWarning,
            skip_file_prefixes=PACKAGE_FRAMES,
        )
    post = StudentTWeights(fit.posterior.mean, fit.posterior.chol, fit.beta, nu, np.exp(log_u))
    return dataclasses.replace(
        fit,
        posterior=post,
        log_evidence=bounds[-1],
        trace=np.asarray(bounds),
        n_iter=it,
        converged=converged,
        reason="bound and weights converged" if converged else "em_max_iter reached",
        actions=tuple(f"em {k}" for k in range(1, it + 1)),
    )
