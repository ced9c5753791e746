"""What predicts: one object per kind of fitted posterior, behind one protocol.

An estimator chooses its predictor once, from its fitted state (:func:`regression_predictor`),
and every prediction goes through it:

- ``predict(rows, std=False, cov=False)``: the predictive mean, with its standard deviation or
  joint covariance (scikit-learn's ``return_std`` / ``return_cov``);
- ``sample(rows, n, rng)``: ``n`` draws of new targets at each input.

``rows`` is a :class:`Rows`: the new inputs, whose design rows and kernel blocks each predictor
asks for (only RVM* needs the kernel against the training inputs; a sampled width needs one
design per draw). The predictors are

- :class:`GaussianType2`: type-II Gaussian weights, with Gaussian or Student-t noise;
- :class:`RVMStar`: RVM* around a type-II Gaussian fit (an added function per test point);
- :class:`LaplaceRate`: counts, the rate ``exp(phi w)`` under a Laplace posterior of ``w``;
- :class:`RegressionDraws`: posterior draws (MCMC, VI), the mixture over the draws;
- :class:`RateDraws`: counts from posterior draws;
- :class:`RVMStarDraws`: RVM* around each posterior draw.

A new predictive is a class here with those two methods, and one line in
:func:`regression_predictor`. The arrays are in the user's units; each predictor reports
``n_basis`` and ``n_draws`` (for the estimators' memory checks) and ``joint`` (whether its draws
come from a joint covariance over the inputs).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import linalg

from bayes_rvm._warnings import warn_at_user
from bayes_rvm.basis.kernels import KernelBasis, stationary_distances, width_design
from bayes_rvm.families import POISSON, rate_moments, student_t_variance
from bayes_rvm.posterior.draws import PosteriorDraws
from bayes_rvm.posterior.predictive import (
    AugmentationData,
    DrawPosteriors,
    mixture_moments,
    rvm_star,
    rvm_star_cov,
    rvm_star_draws,
    target_amplitude,
)

__all__ = [
    "LATENT_VAR_WARN",
    "GaussianType2",
    "LaplaceRate",
    "RVMStar",
    "RVMStarDraws",
    "RateDraws",
    "RegressionDraws",
    "Rows",
    "regression_predictor",
]

#: Laplace variance of the log rate above which a count prediction warns: the lognormal mean is
#: then ``exp(var / 2) > 7`` times the median ``exp(mean)``, a factor the Gaussian's upper tail
#: makes.
LATENT_VAR_WARN = 4.0
#: Float64 temporaries a block of rows may hold when moments are taken per row (128 MiB).
BLOCK_FLOATS = 2**24


class Rows:
    """New inputs as the predictors read them: design rows and kernel blocks, each built once.

    Parameters
    ----------
    X : ndarray of shape (n, n_features)
        Checked new inputs (a precomputed kernel: their kernel against the training inputs).
    basis : KernelBasis
        The fitted basis.
    x_train : ndarray, optional
        The training inputs (RVM*'s added functions sit on them).
    """

    def __init__(self, X: np.ndarray, basis: KernelBasis, x_train: np.ndarray | None = None):
        self.X, self.basis, self.x_train = X, basis, x_train
        self._cross: np.ndarray | None = None

    @property
    def n(self) -> int:
        return self.X.shape[0]

    def subset(self, rows: slice) -> Rows:
        return Rows(self.X[rows], self.basis, self.x_train)

    def cross(self) -> np.ndarray:
        """``k(X, X_train)``: RVM*'s added functions at the training inputs, (n, N)."""
        if self._cross is None:
            if self.x_train is None:
                raise ValueError(
                    "this fit holds no training inputs; refit it to predict with predictive='rvm*'."
                )
            cross = self.basis.kernel_matrix(self.X, self.x_train)
            # A sum is a cheap test for NaN or inf (as in KernelBasis.transform).
            if not np.isfinite(cross.sum()) and not np.all(np.isfinite(cross)):
                raise ValueError(
                    f"kernel produced non-finite values at the new inputs "
                    f"(kernel={self.basis.kernel!r})."
                )
            self._cross = cross
        return self._cross

    def self_kernel(self) -> np.ndarray:
        """``k(x, x)`` of each row, (n,)."""
        return self.basis.diagonal(self.X)

    def test_kernel(self) -> np.ndarray:
        """``k(X, X)``, (n, n)."""
        return self.basis.kernel_matrix(self.X, self.X)

    def design(self, columns) -> np.ndarray:
        """Design rows over ``columns``, (n, k).

        Once RVM*'s block ``k(X, X_train)`` is built and the candidate centres are the training
        inputs, every kernel column is already in it: one kernel evaluation serves both.
        """
        cols = np.asarray(columns, dtype=np.intp)
        centres, x_train = self.basis.centres_, self.x_train
        same = self._cross is not None and (
            centres is x_train
            or (centres.shape == x_train.shape and np.array_equal(centres, x_train))
        )
        if not same:
            return self.basis.transform(self.X, columns=cols)
        out = np.ones((self.n, cols.size))
        is_centre = cols < self.basis.n_centres_
        out[:, is_centre] = self._cross[:, cols[is_centre]]
        return out

    def width_designs(self, columns: np.ndarray, gamma: np.ndarray) -> np.ndarray:
        """One design over ``columns`` per sampled kernel coefficient, (S, n, k)."""
        n_centres = self.basis.n_centres_
        centres = self.basis.centres_[columns[columns < n_centres]]
        dist = stationary_distances(self.X, centres, self.basis.kernel)
        return width_design(dist, gamma, bias=bool(np.any(columns >= n_centres)))


def in_row_blocks(fn, rows: Rows, floats_per_row: float):
    """``fn(rows)`` on blocks of rows, concatenated (a tuple of arrays for a tuple).

    A block holds at most about :data:`BLOCK_FLOATS` of the ``floats_per_row`` temporaries, for
    functions whose rows do not interact (per-row moments over posterior draws).
    """
    step = max(1, int(BLOCK_FLOATS // max(floats_per_row, 1)))
    if rows.n <= step:
        return fn(rows)
    parts = [fn(rows.subset(slice(i, i + step))) for i in range(0, rows.n, step)]
    if isinstance(parts[0], tuple):
        return tuple(np.concatenate(p) for p in zip(*parts, strict=True))
    return np.concatenate(parts)


def _per_output(value: np.ndarray, single: bool, n_outputs: int) -> np.ndarray:
    """A variance-like array shared by every output, repeated along a last axis of outputs."""
    return value if single else np.repeat(value[..., None], n_outputs, value.ndim)


def _joint_gaussian_draws(mean, cov, n: int, rng, single: bool) -> np.ndarray:
    """``n`` draws of each output from ``N(mean, cov)``: (n_inputs, n) or (n_inputs, D, n)."""
    if single:
        return rng.multivariate_normal(mean, cov, n).T
    out = [rng.multivariate_normal(mean[:, d], cov[..., d], n).T for d in range(mean.shape[1])]
    return np.stack(out, axis=1)


def _answer(mean, spread, std: bool, cov: bool):
    return (mean, spread) if std or cov else mean


@dataclass(frozen=True)
class GaussianType2:
    """The type-II predictive: Gaussian weights at the evidence optimum, plus the noise.

    ``N(m^T phi(x), 1/beta + phi(x)^T Sigma phi(x))`` (Tipping 2001; Bishop 2006, section 7.2.1)
    over the retained columns. With Student-t noise (``noise_nu`` finite) the spread is that of
    a new observation, ``phi^T Sigma phi + nu / (nu - 2) sigma^2``, and draws add t noise to a
    Gaussian location.
    """

    fit: object
    columns: np.ndarray
    single: bool
    noise_nu: float = np.inf
    n_draws: int = 0
    joint: bool = True

    @property
    def n_basis(self) -> int:
        return int(self.columns.size)

    def noise_variance(self) -> float:
        """A new target's noise variance: ``1/beta``, or the Student-t's ``nu/(nu-2) sigma^2``."""
        if not np.isfinite(self.noise_nu):
            return 1.0 / self.fit.beta
        return float(student_t_variance(self.fit.beta**-0.5, self.noise_nu))

    def _latent_cov(self, phi: np.ndarray) -> np.ndarray:
        v = linalg.solve_triangular(self.fit.chol, phi.T, lower=True, check_finite=False)
        return v.T @ v

    def predict(self, rows: Rows, *, std: bool = False, cov: bool = False):
        phi = rows.design(self.columns)
        mean, var = self.fit.predict(phi)
        return self._answer(phi, mean, var, std=std, cov=cov)

    def _answer(self, phi, mean, var, *, std: bool, cov: bool, widen=None):
        """The moments in the estimator's shapes; ``widen(cov)`` adds to the joint covariance."""
        if self.single:
            mean = mean[:, 0]
        d = 1 if self.single else mean.shape[1]
        if cov:
            joint = self._latent_cov(phi)
            joint[np.diag_indices_from(joint)] += self.noise_variance()
            joint = joint if widen is None else widen(joint)
            return mean, _per_output(joint, self.single, d)
        return _answer(mean, _per_output(np.sqrt(var), self.single, d), std, cov)

    def sample(self, rows: Rows, n: int, rng) -> np.ndarray:
        if np.isfinite(self.noise_nu):
            # A location from q(w), plus Student-t noise.
            phi = rows.design(self.columns)
            loc = rng.multivariate_normal((phi @ self.fit.mean)[:, 0], self._latent_cov(phi), n)
            out = (loc + self.fit.beta**-0.5 * rng.standard_t(self.noise_nu, size=loc.shape)).T
            return out if self.single else out[:, None, :]
        mean, cov = self.predict(rows, cov=True)
        return _joint_gaussian_draws(mean, cov, n, rng, self.single)


@dataclass(frozen=True)
class RVMStar(GaussianType2):
    """RVM* (Rasmussen & Quinonero-Candela 2005) around a type-II Gaussian fit.

    One basis function is added at each test point at prediction time
    (:func:`bayes_rvm.posterior.predictive.rvm_star`), so the variance grows again away from the
    data; ``data`` is the training problem the augmentation needs.
    """

    data: AugmentationData | None = None

    @classmethod
    def around(cls, inner: GaussianType2, phi: np.ndarray, y: np.ndarray) -> RVMStar:
        """RVM* around ``inner``, whose training design over its columns is ``phi``."""
        T = y[:, None] if y.ndim == 1 else y
        beta = float(inner.fit.beta)
        data = AugmentationData(
            phi=phi,
            precision=beta,
            score=beta * (T - phi @ inner.fit.mean),
            chol=inner.fit.chol,
            amplitude=target_amplitude(y),
        )
        return cls(inner.fit, inner.columns, inner.single, data=data)

    def predict(self, rows: Rows, *, std: bool = False, cov: bool = False):
        cross, self_k = rows.cross(), rows.self_kernel()
        phi = rows.design(self.columns)
        # var=None: rvm_star forms phi^T Sigma phi from the triangular solve it needs anyway.
        mean, var = rvm_star(phi @ self.fit.mean, None, phi, cross, self_k, self.data)
        var = var + 1.0 / self.fit.beta

        def widen(joint):
            return rvm_star_cov(joint, var, phi, cross, self_k, rows.test_kernel(), self.data)

        return self._answer(phi, mean, var, std=std, cov=cov, widen=widen)


@dataclass(frozen=True)
class LaplaceRate:
    """Counts under a Laplace posterior of the weights: the rate ``exp(phi^T w)``.

    ``predict`` gives the posterior mean of the rate and its standard deviation or covariance
    (the lognormal moments of the Gaussian log rate): the uncertainty of the rate, not of a new
    count. Draws are Poisson counts, one weight draw per sample.
    """

    fit: object
    columns: np.ndarray
    n_draws: int = 0
    joint: bool = False

    @property
    def n_basis(self) -> int:
        return int(self.columns.size)

    def predict(self, rows: Rows, *, std: bool = False, cov: bool = False):
        phi = rows.design(self.columns)
        m, v = self.fit.predict(phi)
        if v.size and v.max() > LATENT_VAR_WARN:
            warn_at_user(
                f"the Laplace posterior of the log rate has variance up to {v.max():.3g} at "
                f"{int(np.sum(v > LATENT_VAR_WARN))} of these inputs (regions of zero or few "
                "counts, or far from the data): there the rate's mean exp(mu + var/2) comes from "
                "the upper tail of a Gaussian the counts do not support, and can be orders of "
                "magnitude above the median exp(mu). Use inference='mcmc' for the rate's exact "
                "posterior there.",
                RuntimeWarning,
            )
        mean, sd = rate_moments(m[:, 0], v[:, 0])
        if cov:
            u = linalg.solve_triangular(self.fit.chol, phi.T, lower=True, check_finite=False)
            # Lognormal covariance: E r_i E r_j (exp(Cov(eta_i, eta_j)) - 1).
            return mean, np.outer(mean, mean) * np.expm1(u.T @ u)
        return _answer(mean, sd, std, cov)

    def sample(self, rows: Rows, n: int, rng) -> np.ndarray:
        phi = rows.design(self.columns)
        z = rng.standard_normal((self.columns.size, n))
        # w = m + L^-T z has the Laplace covariance (L L^T)^-1.
        dw = linalg.solve_triangular(self.fit.chol, z, lower=True, trans="T")
        return rng.poisson(POISSON.mean(phi @ (self.fit.mean + dw))).astype(np.float64)


@dataclass(frozen=True)
class _OverDraws:
    """What every predictor over posterior draws reports for the memory checks."""

    draws: PosteriorDraws

    @property
    def n_draws(self) -> int:
        return self.draws.n_draws

    @property
    def n_basis(self) -> int:
        return int(self.draws.basis.size)


@dataclass(frozen=True)
class RegressionDraws(_OverDraws):
    """The mixture over posterior draws (MCMC or VI): per draw, its function plus its noise.

    ``predict`` gives the mixture's moments (within-draw noise plus the spread of the function
    between draws), in blocks of rows when no covariance is asked for; ``sample`` draws exactly
    from the mixture (a draw chosen at random, its function plus its noise). With a sampled
    kernel width each draw has its own design.
    """

    joint: bool = False

    @property
    def single(self) -> bool:
        return self.draws.extra_dim is None

    @property
    def width_sampled(self) -> bool:
        return self.draws.gamma is not None

    def design(self, rows: Rows) -> np.ndarray:
        """The draws' design rows: (n, k), or (S, n, k) with the width sampled."""
        if self.width_sampled:
            return rows.width_designs(self.draws.columns, self.draws.flat("gamma"))
        return rows.design(self.draws.columns)

    def function(self, rows: Rows) -> tuple[np.ndarray, np.ndarray]:
        """Regression function per draw, (S, n[, D]), and the noise sd of a new target, (S,)."""
        f = self.draws.function(self.design(rows))
        sd = self.draws.flat("sigma")
        if self.draws.likelihood == "student_t":  # the t noise's sd: its moments are mixed
            sd = np.sqrt(student_t_variance(sd, self.draws.flat("nu")))
        return (f[..., 0] if self.single else f), sd

    def _per_draw_floats(self) -> float:
        per_draw = 2 * (1 if self.single else self.draws.w.shape[3])
        return self.n_draws * (per_draw + (self.n_basis if self.width_sampled else 0))

    def predict(self, rows: Rows, *, std: bool = False, cov: bool = False):
        if cov:
            f, sigma = self.function(rows)
            return mixture_moments(f, sigma, return_cov=True)

        def moments(block: Rows):
            mean, var = mixture_moments(*self.function(block))
            return mean, np.sqrt(var)

        mean, sd = in_row_blocks(moments, rows, self._per_draw_floats())
        return _answer(mean, sd, std, cov)

    def sample(self, rows: Rows, n: int, rng) -> np.ndarray:
        if self.draws.likelihood == "student_t":
            f = self.draws.function(self.design(rows))[..., 0]
            pick = rng.randint(f.shape[0], size=n)
            nu = self.draws.flat("nu")[pick][:, None]
            noise = self.draws.flat("sigma")[pick][:, None] * rng.standard_t(nu, f[pick].shape)
            return (f[pick] + noise).T
        f, sigma = self.function(rows)
        pick = rng.randint(f.shape[0], size=n)
        noise = sigma[pick].reshape((-1,) + (1,) * (f.ndim - 1))
        out = f[pick] + noise * rng.standard_normal((n, *f.shape[1:]))
        return np.moveaxis(out, 0, -1)


@dataclass(frozen=True)
class RateDraws(_OverDraws):
    """Counts from posterior draws: the rate per draw, its moments over the draws."""

    joint: bool = False

    def latent(self, rows: Rows) -> np.ndarray:
        """The log rate per posterior draw, (S, n)."""
        phi = rows.design(self.draws.columns)
        return self.draws.function(phi, self.draws.intercept_at(rows.n))[..., 0]

    def predict(self, rows: Rows, *, std: bool = False, cov: bool = False):
        if cov:
            rate = POISSON.mean(self.latent(rows))
            return rate.mean(axis=0), np.atleast_2d(np.cov(rate, rowvar=False, ddof=0))

        def moments(block: Rows):
            rate = POISSON.mean(self.latent(block))
            return rate.mean(axis=0), rate.std(axis=0)

        mean, sd = in_row_blocks(moments, rows, 2 * self.n_draws)
        return _answer(mean, sd, std, cov)

    def sample(self, rows: Rows, n: int, rng) -> np.ndarray:
        eta = self.latent(rows)
        eta = eta[rng.randint(eta.shape[0], size=n)].T
        return rng.poisson(POISSON.mean(eta)).astype(np.float64)


#: The most numbers an RVM* predictor keeps of its draws' factored weight posteriors (64 MB).
_KEPT_POSTERIOR_FLOATS = 8_000_000


@dataclass(frozen=True)
class _StarBlock:
    """RVM* per draw at some inputs: the moments and what each draw's joint covariance needs."""

    mean: np.ndarray  # (S, n[, D])
    var: np.ndarray  # (S, n), noise included
    phi_test: np.ndarray  # (n, M)
    cross: np.ndarray  # (n, N)
    self_k: np.ndarray  # (n,)


@dataclass(frozen=True)
class RVMStarDraws(_OverDraws):
    """RVM* around each posterior draw: the equal-weight mixture of the draws' RVM* Gaussians.

    Given a draw of ``(alpha, beta)`` the weights' posterior is Gaussian and integrated out
    (:func:`bayes_rvm.posterior.predictive.rvm_star_draws`); ``phi`` and ``y`` are the training
    design over the sampled columns and the targets.
    """

    phi: np.ndarray = None
    y: np.ndarray = None
    single: bool = True
    joint: bool = True
    amplitude: float = field(init=False)
    #: Every draw's weight posterior, factored on the first prediction where they fit in
    #: :data:`_KEPT_POSTERIOR_FLOATS` (None until then, or where they do not).
    _posteriors: DrawPosteriors | None = field(init=False, default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "amplitude", target_amplitude(self.y))

    def _hyper(self) -> tuple[np.ndarray, np.ndarray]:
        return self.draws.flat("alpha"), self.draws.flat("sigma") ** -2.0

    def _kept_posteriors(self, alpha: np.ndarray, beta: np.ndarray) -> DrawPosteriors | None:
        # Predictions in blocks of rows (in_row_blocks) would factor every draw's posterior
        # again per block: most of the time of predicting thousands of rows.
        (S, M), T = alpha.shape, self.y[:, None] if self.y.ndim == 1 else self.y
        floats = S * (M * (2 * M + 1 + T.shape[1]) + 1)  # both factors, scales, means, beta
        if self._posteriors is None and floats <= _KEPT_POSTERIOR_FLOATS:
            posteriors = DrawPosteriors.from_draws(
                self.phi.T @ self.phi, self.phi.T @ T, alpha, beta
            )
            object.__setattr__(self, "_posteriors", posteriors)
        return self._posteriors

    def _star(self, rows: Rows) -> _StarBlock:
        alpha, beta = self._hyper()
        cross, self_k = rows.cross(), rows.self_kernel()
        phi_test = rows.design(self.draws.columns)
        mean, var = rvm_star_draws(
            self.phi,
            self.y,
            alpha,
            beta,
            phi_test,
            cross,
            self_k,
            self.amplitude,
            posteriors=self._kept_posteriors(alpha, beta),
        )
        return _StarBlock(mean[..., 0] if self.single else mean, var, phi_test, cross, self_k)

    def draw_moments(self, rows: Rows) -> tuple[np.ndarray, np.ndarray]:
        """Each draw's RVM* predictive mean, (S, n[, D]), and standard deviation, (S, n)."""
        star = self._star(rows)
        return star.mean, np.sqrt(star.var)

    def _cov(self, rows: Rows, star: _StarBlock, s: int) -> np.ndarray:
        """Joint RVM* covariance of new targets given draw ``s`` (noise included)."""
        alpha, beta = self._hyper()
        kept = self._kept_posteriors(alpha, beta)
        if kept is not None:
            one = kept.take(slice(s, s + 1))
        else:
            T = self.y[:, None] if self.y.ndim == 1 else self.y
            one = DrawPosteriors.from_draws(
                self.phi.T @ self.phi, self.phi.T @ T, alpha[s : s + 1], beta[s : s + 1]
            )
        data = one.augmentation(0, self.phi, self.y, self.amplitude)
        v = linalg.solve_triangular(data.chol, star.phi_test.T, lower=True, check_finite=False)
        cov = v.T @ v
        cov[np.diag_indices_from(cov)] += 1.0 / beta[s]
        test_k = rows.test_kernel()
        return rvm_star_cov(cov, star.var[s], star.phi_test, star.cross, star.self_k, test_k, data)

    def predict(self, rows: Rows, *, std: bool = False, cov: bool = False):
        if cov:
            star = self._star(rows)
            # Law of total covariance: the draws' joint RVM* covariances (one n x n
            # factorisation per draw), averaged, plus the covariance of the draws' means.
            mean, between = mixture_moments(star.mean, np.zeros(star.var.shape), return_cov=True)
            within = sum(self._cov(rows, star, s) for s in range(star.var.shape[0]))
            within /= star.var.shape[0]
            return mean, between + (within if self.single else within[..., None])

        def moments(block: Rows):
            star = self._star(block)
            mean, var = mixture_moments(star.mean, np.sqrt(star.var))
            return mean, np.sqrt(var)

        per_draw = 2 * (1 if self.single else self.draws.w.shape[3])
        mean, sd = in_row_blocks(moments, rows, self.n_draws * per_draw)
        return _answer(mean, sd, std, cov)

    def sample(self, rows: Rows, n: int, rng) -> np.ndarray:
        star = self._star(rows)
        pick = rng.randint(star.var.shape[0], size=n)
        mean = star.mean if star.mean.ndim == 3 else star.mean[..., None]
        out = np.empty((rows.n, mean.shape[2], n))
        for s in np.unique(pick):
            where = np.flatnonzero(pick == s)
            cov = self._cov(rows, star, s)
            for d in range(mean.shape[2]):
                out[:, d, where] = rng.multivariate_normal(mean[s, :, d], cov, where.size).T
        return out[:, 0] if self.single else out


def regression_predictor(
    *,
    likelihood: str,
    star: bool,
    fit=None,
    single: bool = True,
    draws: PosteriorDraws | None = None,
    training: tuple[np.ndarray, np.ndarray] | None = None,
):
    """The predictor of a fitted regressor, chosen once from its resolved settings.

    Parameters
    ----------
    likelihood : {"gaussian", "student_t", "poisson"}
    star : bool
        RVM* (``predictive="rvm*"``).
    fit : EvidenceFit, optional
        The type-II fit in the user's units (its retained columns are ``fit.active``).
    single : bool
        One output, predicted without an output axis.
    draws : PosteriorDraws, optional
        Posterior draws (MCMC, VI): the predictor averages over them instead of using ``fit``.
    training : (phi, y), optional
        RVM*: the training design over the predictor's columns, and the targets.
    """
    if draws is not None:
        if likelihood == "poisson":
            return RateDraws(draws)
        if star:
            return RVMStarDraws(draws, *training, single=single)
        return RegressionDraws(draws)
    columns = np.asarray(fit.active)
    if likelihood == "poisson":
        return LaplaceRate(fit, columns)
    nu = float(getattr(fit.posterior, "nu", np.inf))
    inner = GaussianType2(fit, columns, single, noise_nu=nu)
    return RVMStar.around(inner, *training) if star else inner
