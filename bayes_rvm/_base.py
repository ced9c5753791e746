"""What :class:`~bayes_rvm.estimators.RVR` and :class:`~bayes_rvm.classifier.RVC` share.

The declared parameter constraints (scikit-learn's ``_parameter_constraints``, checked once at the
start of ``fit``), the kernel basis and its candidate centres, the column normalisation the engines
work on, the training arrays an estimator keeps to rebuild its PyMC model, and ``model_``: the exact
:class:`pymc.Model` that ``inference="mcmc"`` samples, rebuilt on demand and never pickled.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.cluster import MiniBatchKMeans
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_array, check_is_fitted

from bayes_rvm.kernels import KernelBasis

__all__ = ["BaseRVM", "check_number", "normalise_columns"]

PRIORS = ("ard", "student_t")
SAMPLERS = ("nutpie", "numpyro", "pymc", "blackjax")
_POSITIVE = Interval(Real, 0, None, closed="neither")


def check_number(name: str, value, *, low=0.0, integer=False, allow_none=False, inclusive=False):
    """Raise a ValueError naming ``name`` unless ``value`` is a finite number above ``low``."""
    if value is None and allow_none:
        return
    kind = Integral if integer else Real
    ok = isinstance(value, kind) and not isinstance(value, bool) and np.isfinite(value)
    ok = ok and (value >= low if inclusive else value > low)
    if not ok:
        what = "an integer" if integer else "a finite number"
        rel = ">=" if inclusive else ">"
        raise ValueError(f"{name} must be {what} {rel} {low}, got {value!r}.")


def normalise_columns(Phi: np.ndarray) -> np.ndarray:
    """Scale the columns of ``Phi`` to unit norm in place; return the norms (1 for zero columns)."""
    norms = np.sqrt(np.einsum("ij,ij->j", Phi, Phi))
    norms[norms == 0] = 1.0
    Phi /= norms
    return norms


class BaseRVM(BaseEstimator):
    """Parameters and helpers shared by the RVM estimators.

    Subclasses declare their own ``_parameter_constraints`` (extending :attr:`_shared_constraints`)
    and implement ``_build_model(form, mean)``.
    """

    #: Constraints of the parameters both estimators take; scikit-learn checks them in ``fit``.
    _shared_constraints: dict = {  # noqa: RUF012 - scikit-learn's convention
        "kernel": [str, callable],
        "gamma": [StrOptions({"scale", "auto"}), _POSITIVE],
        "degree": [Interval(Integral, 1, None, closed="left")],
        "coef0": [Interval(Real, None, None, closed="neither")],
        "kernel_params": [dict, None],
        "bias": ["boolean"],
        "prior": [StrOptions(set(PRIORS))],
        "nu": [_POSITIVE],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [_POSITIVE],
        "centres": [str, "array-like", None],
        "n_centres": [Interval(Integral, 1, None, closed="left"), None],
        "inference": [StrOptions({"type2", "mcmc"})],
        "draws": [Interval(Integral, 1, None, closed="left")],
        "tune": [Interval(Integral, 0, None, closed="left")],
        "chains": [Interval(Integral, 1, None, closed="left")],
        "sampler": [StrOptions(set(SAMPLERS))],
        "mcmc_basis": [StrOptions({"all", "relevant"})],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def _candidate_centres(self, X: np.ndarray) -> np.ndarray | None:
        """The centres the basis functions sit on: None (every training input) or a subset."""
        spec = getattr(self, "centres", None)
        if spec is None:
            return None
        if self.kernel == "precomputed":
            raise ValueError("centres cannot be chosen with kernel='precomputed'.")
        if isinstance(spec, str):
            if spec not in ("random", "kmeans"):
                raise ValueError(
                    f"centres must be None, 'random', 'kmeans' or an array, got {spec!r}."
                )
            n = self.n_centres
            check_number("n_centres", n, integer=True)
            if n > X.shape[0]:
                raise ValueError(f"n_centres={n} exceeds the {X.shape[0]} training samples.")
            rng = check_random_state(self.random_state)
            if spec == "random":
                return X[np.sort(rng.choice(X.shape[0], n, replace=False))]
            km = MiniBatchKMeans(n_clusters=n, n_init=3, random_state=rng.randint(2**31 - 1))
            return km.fit(X).cluster_centers_
        return check_array(spec, dtype=np.float64, input_name="centres")

    def _make_basis(self, X: np.ndarray) -> tuple[KernelBasis, np.ndarray]:
        if self.kernel == "precomputed" and X.shape[0] != X.shape[1]:
            raise ValueError(
                f"with kernel='precomputed', X must be the square training kernel matrix; "
                f"got shape {X.shape}."
            )
        basis = KernelBasis(
            self.kernel,
            gamma=self.gamma,
            degree=self.degree,
            coef0=self.coef0,
            kernel_params=self.kernel_params,
            bias=self.bias,
        ).fit(X, centres=self._candidate_centres(X))
        # Rows in chunks of ~64 MB keep the kernel's pairwise temporaries small at large N.
        return basis, basis.transform(X, chunk_size=max(1, 8_000_000 // basis.n_basis_))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.pairwise = self.kernel == "precomputed"
        return tags

    def _alpha_prior(self) -> tuple[float, float]:
        nu = float(self.nu)
        return (nu / 2.0, nu / 2.0) if self.prior == "student_t" else (0.0, 0.0)

    @property
    def n_relevance_vectors_(self) -> int:
        """Number of relevance vectors (basis functions other than the bias that were kept)."""
        check_is_fitted(self, "relevance_")
        return int(self.relevance_.size)
