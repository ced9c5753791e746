"""The likelihood families of the RVM: one home for their formulas (NumPy and SciPy only).

Each family maps the latent ``eta`` (the linear predictor ``Phi w``, plus any offset) to the
likelihood's mean, its pointwise log-likelihood and the curvature the Laplace engines need::

    family      mean y          ln p(t | eta)                  curvature B
    Gaussian    eta             ln N(t | eta, sigma^2)         1 / sigma^2
    Bernoulli   expit(eta)      t ln y + (1 - t) ln(1 - y)     y (1 - y)
    softmax     softmax(eta)    sum_c t_c ln y_c               y_c (1 - y_c)  (diagonal blocks)
    Poisson     exp(eta)        t eta - e^eta - ln t!          y

The pointwise log-likelihoods are batched: ``eta`` may carry leading axes of draws, e.g. shape
(S, N) or (S, N, C) against targets of shape (N,) or (N, C), and the result has the shape of
``eta`` without its class axis (softmax) -- the ``log_likelihood`` group ArviZ's LOO reads.
The Newton mode finder needs the *sum* over the data at every step, in one pass:
:meth:`Family.mean_and_log_likelihood` gives the mean and that sum together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import expit, gammaln, logsumexp

__all__ = [
    "BERNOULLI",
    "ETA_MAX",
    "FAMILIES",
    "LOG_2PI",
    "NOISE_LIKELIHOODS",
    "POISSON",
    "SOFTMAX",
    "Family",
    "family",
    "gaussian_log_likelihood",
    "rate_moments",
    "student_t_log_likelihood",
    "student_t_variance",
]

#: ``ln 2 pi``, the constant of every Gaussian density in the package.
LOG_2PI = math.log(2.0 * math.pi)
#: Likelihoods of real targets with a noise scale ``sigma`` (the regression's).
NOISE_LIKELIHOODS = ("gaussian", "student_t")
#: Largest latent whose exponential is formed (a Poisson rate): ``exp(700)`` is finite.
ETA_MAX = 700.0


def gaussian_log_likelihood(t, mean, sigma) -> np.ndarray:
    """Pointwise ``ln N(t | mean, sigma^2)``, broadcast over all three arguments.

    Parameters
    ----------
    t, mean, sigma : array-like
        Targets, means and standard deviations (positive); any broadcastable shapes, e.g.
        ``t`` (N,), ``mean`` (S, N) and ``sigma`` (S, 1) for S draws.
    """
    sigma = np.asarray(sigma, dtype=np.float64)
    return -0.5 * ((np.asarray(t) - mean) / sigma) ** 2 - np.log(sigma) - 0.5 * LOG_2PI


def student_t_log_likelihood(t, mean, sigma, nu) -> np.ndarray:
    """Pointwise ``ln St(t | mean, sigma, nu)``, the Student-t density, broadcast over all four.

    ``St(t | mu, sigma, nu) = Gamma((nu+1)/2) / (Gamma(nu/2) sqrt(nu pi) sigma)
    (1 + ((t - mu) / sigma)^2 / nu)^(-(nu+1)/2)``: the scale mixture of ``N(mu, sigma^2 / u)``
    over ``u ~ Gamma(nu/2, rate=nu/2)`` (scipy.stats.t with ``df=nu``, ``loc``, ``scale``).

    Parameters
    ----------
    t, mean, sigma, nu : array-like
        Targets, locations, scales (positive) and degrees of freedom (positive); any
        broadcastable shapes, e.g. ``t`` (N,), ``mean`` (S, N), ``sigma`` and ``nu`` (S, 1).
    """
    sigma = np.asarray(sigma, dtype=np.float64)
    nu = np.asarray(nu, dtype=np.float64)
    z2 = ((np.asarray(t) - mean) / sigma) ** 2
    return (
        gammaln(0.5 * (nu + 1.0))
        - gammaln(0.5 * nu)
        - 0.5 * np.log(nu * math.pi)
        - np.log(sigma)
        - 0.5 * (nu + 1.0) * np.log1p(z2 / nu)
    )


def student_t_variance(sigma, nu) -> np.ndarray:
    """Variance ``nu / (nu - 2) sigma^2`` of the Student-t noise; ``inf`` where ``nu <= 2``."""
    sigma = np.asarray(sigma, dtype=np.float64)
    nu = np.asarray(nu, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(nu > 2.0, nu / np.maximum(nu - 2.0, 1e-300) * sigma**2, np.inf)


def log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    """``scipy.special.log_softmax`` for a NumPy array, the same operations in the same order.

    The softmax engines call it at every Newton step; scipy's array-API dispatch costs about
    ten times the arithmetic on their arrays (hundreds of rows by a few classes).
    """
    x_max = x.max(axis=axis, keepdims=True)
    x_max[~np.isfinite(x_max)] = 0
    tmp = x - x_max
    with np.errstate(divide="ignore"):  # a class of probability zero: log(0) = -inf
        return tmp - np.log(np.exp(tmp).sum(axis=axis, keepdims=True))


@dataclass(frozen=True)
class Family:
    """A non-Gaussian likelihood family with a canonical link (Bernoulli, softmax, Poisson).

    Attributes
    ----------
    name : {"bernoulli", "softmax", "poisson"}
    """

    name: str

    def mean(self, eta: np.ndarray) -> np.ndarray:
        """The likelihood's mean at ``eta`` (softmax: over the last axis, the classes)."""
        if self.name == "bernoulli":
            return expit(eta)
        if self.name == "softmax":
            return np.exp(log_softmax(eta, axis=-1))
        return np.exp(np.minimum(eta, ETA_MAX))

    def log_likelihood(self, eta: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Pointwise ``ln p(t_n | eta_n)``, batched over the leading axes of ``eta``.

        Parameters
        ----------
        eta : ndarray of shape (..., N) or (..., N, C)
            Latent values; the softmax's last axis is the class.
        t : ndarray of shape (N,) or (N, C)
            Targets: 0/1 (or probabilities) for Bernoulli, class-probability (one-hot) rows for
            the softmax, counts for Poisson.

        Returns
        -------
        ndarray of shape (..., N) (softmax), else of ``eta``'s shape
        """
        t = np.asarray(t, dtype=np.float64)
        if self.name == "bernoulli":
            # t eta - ln(1 + e^eta) as ln(1 + e^-|eta|) plus a linear part: one transcendental
            # per entry, and exact where a probability is near one (the plain form rounds there
            # to a multiple of eta's last digit).
            lin = np.where(eta > 0, (1.0 - t) * eta, -t * eta)
            return -(np.logaddexp(0.0, -np.abs(eta)) + lin)
        if self.name == "softmax":
            return np.sum(t * log_softmax(eta, axis=-1), axis=-1)
        eta_c = np.minimum(eta, ETA_MAX)
        return t * eta_c - np.exp(eta_c) - gammaln(t + 1.0)

    def mean_and_log_likelihood(self, eta: np.ndarray, T: np.ndarray) -> tuple[np.ndarray, float]:
        """The mean ``Y`` (shape of ``eta``, (N, C)) and the total ``ln p(T | eta)``, in one pass.

        The Newton mode finder's evaluation: the canonical link makes the data term
        ``sum T * eta`` (clipped for Poisson), so the total needs one transcendental per entry.
        """
        # (array methods: the engines call this at every step, np.sum's dispatch costs more)
        if self.name == "bernoulli":
            Y = expit(eta)
            ll = float((T * eta).sum() - np.logaddexp(0.0, eta).sum())
        elif self.name == "softmax":
            logY = log_softmax(eta, axis=1)
            Y = np.exp(logY)
            ll = float((T * logY).sum())
        else:
            eta_c = np.minimum(eta, ETA_MAX)
            Y = np.exp(eta_c)
            ll = float((T * eta_c).sum() - Y.sum() - gammaln(T + 1.0).sum())
        return Y, ll

    def log_predictive(self, mean: np.ndarray, var: np.ndarray, t: np.ndarray) -> np.ndarray:
        """``ln int p(t_n | eta) N(eta | mean_n, var_n) d eta`` per point (one-output families).

        The predictive density of a target under a Gaussian latent (a Laplace posterior's), by
        adaptive Gauss-Hermite quadrature (Liu & Pierce 1994): 64 nodes placed by the mode and
        curvature of the integrand (found by Newton steps of at most 1 in the latent), so that
        the nodes follow the integrand however far the likelihood pulls the latent from its
        prior mean. Measured against ``scipy.integrate.quad`` (Poisson): within 1e-10 for counts
        of 3 to 50 at latent variances up to 10 and zero counts up to 5; 5e-7 for a zero count
        at variance 10, where the integrand's cliff ``exp(-e^eta)`` is least Gaussian.

        Parameters
        ----------
        mean, var : ndarray of shape (n,)
            The latent's moments (``var`` > 0).
        t : ndarray of shape (n,)
            Targets (0/1, or counts).
        """
        if self.name == "softmax":
            raise ValueError("log_predictive is defined for one-output families only.")
        mean, t = np.asarray(mean, dtype=np.float64), np.asarray(t, dtype=np.float64)
        prec = 1.0 / np.maximum(np.asarray(var, dtype=np.float64), 1e-300)
        mode = mean.copy()
        for _ in range(100):
            Y = self.mean(mode)
            step = (t - Y - (mode - mean) * prec) / (self.curvature(Y) + prec)
            mode += np.clip(step, -1.0, 1.0)
            if np.all(np.abs(step) < 1e-10):
                break
        scale = np.sqrt(2.0 / (self.curvature(self.mean(mode)) + prec))
        x, wq = np.polynomial.hermite.hermgauss(64)
        eta = mode[None] + scale[None] * x[:, None]
        log_prior = -0.5 * (eta - mean) ** 2 * prec + 0.5 * np.log(prec) - 0.5 * LOG_2PI
        terms = self.log_likelihood(eta, t) + log_prior + (np.log(wq) + x**2)[:, None]
        return logsumexp(terms, axis=0) + np.log(scale)

    def curvature(self, Y: np.ndarray) -> np.ndarray:
        """The IRLS weights ``B = -d^2 ln p / d eta^2`` from the mean ``Y`` (softmax: the
        diagonal of each point's C x C block, per class)."""
        if self.name == "poisson":
            return Y
        return Y * (1.0 - Y)

    def curvature_slope(self, Y: np.ndarray) -> np.ndarray:
        """``dB / d eta``, the third derivative of ``-ln p`` (Bernoulli and Poisson): the
        derivative of the Laplace evidence in a hyperparameter carries it through the mode."""
        if self.name == "poisson":
            return Y
        if self.name == "bernoulli":
            return Y * (1.0 - Y) * (1.0 - 2.0 * Y)
        raise ValueError("curvature_slope is defined for one-output families only.")


BERNOULLI = Family("bernoulli")
SOFTMAX = Family("softmax")
POISSON = Family("poisson")
#: The non-Gaussian families by name (the ``likelihood`` option of the engines).
FAMILIES = {f.name: f for f in (BERNOULLI, SOFTMAX, POISSON)}


def rate_moments(mean: np.ndarray, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of the Poisson rate ``exp(eta)`` for ``eta ~ N(mean, var)``.

    The lognormal moments: ``E = exp(mean + var / 2)``, ``sd = E sqrt(exp(var) - 1)``. They
    describe the rate (the expected count), not a new count, whose variance adds ``E`` (the
    Poisson's own). The latent is clipped at :data:`ETA_MAX` as everywhere else.
    """
    rate = POISSON.mean(mean + 0.5 * var)
    # A latent variance in the hundreds (a collapsed width) gives an sd beyond float64: inf,
    # which the estimator's own warning about that variance explains; NumPy's would not.
    with np.errstate(over="ignore"):
        return rate, rate * np.sqrt(np.expm1(np.minimum(var, ETA_MAX)))


def family(name: str) -> Family:
    """The :class:`Family` called ``name``; a clear error for any other name."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"likelihood must be one of {tuple(FAMILIES)}, got {name!r}.") from None
