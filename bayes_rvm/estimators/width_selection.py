"""The kernel width as a hyperparameter: the search of one fit, as an object.

``fit`` resolves ``gamma`` once into a :class:`~bayes_rvm.basis.kernels.WidthRule` and builds a
:class:`WidthSearch` from it and the estimator's kernel settings; the search gives the unit-norm
design at a length scale, the evidence search over the width (the default rule on a row subset,
or :func:`~bayes_rvm.evidence.width.maximise_width`) and the basis at the chosen width.
:func:`width_attributes` turns a fitted basis into ``gamma_``, ``length_scale_`` and
``width_path_``. The default rule's constants live here too.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
from sklearn.utils import check_random_state

from bayes_rvm.basis.kernels import KernelBasis, WidthRule, stationary_kernel
from bayes_rvm.evidence import (
    EvidenceOptions,
    Problem,
    WidthFit,
    WidthPath,
    fit_problem,
    maximise_width,
    maximise_width_shared_ard,
    normalise_columns,
    select_width_shared,
)
from bayes_rvm.memory import check_fit_memory
from bayes_rvm.progress import Progress

__all__ = [
    "CLASSIFIER_STOP_DROP",
    "CLASSIFIER_WIDTH_PENALTY",
    "DEFAULT_GAMMA",
    "SHARED_ARD_MAX_SAMPLES",
    "SHARED_INTERCEPT_SCALE",
    "SHARED_MAX_SAMPLES",
    "SHARED_MAX_SAMPLES_CLASSIFIER",
    "WidthFound",
    "WidthSearch",
    "width_attributes",
]

#: The default ``gamma`` of RVR and RVC. ``"evidence_shared"`` chooses the rbf / laplacian width
#: that maximises the evidence of the same basis when all weights share one prior precision (a
#: Gaussian process of covariance ``Phi Phi^T / alpha``, plus noise for RVR; its Laplace evidence
#: for RVC), then fits the RVM at that width. With two hyperparameters that evidence cannot be
#: raised by tuning one alpha per basis function to the training targets, which is how the RVM's
#: own evidence (``gamma="evidence"``) collapses onto narrow widths; SVR's ``"scale"``,
#: ``1 / (n_features X.var())``, ignores the targets. The measurements behind the choice
#: (``benchmarks/bench_width.py``) are in the README, "Choosing the kernel width". Kernels
#: without a width ignore it; poly and sigmoid fall back to ``"scale"``.
DEFAULT_GAMMA = "evidence_shared"
#: Rows the default width rule looks at: beyond, a subset of this many drawn with ``random_state``
#: (seed 0 when it is None, so that two fits agree), with the basis on the subset's inputs unless
#: centres are given. Its Gram matrix is ``min(N, M)`` square and costs ``O(min(N, M)^3)`` a width.
SHARED_MAX_SAMPLES = 1000
#: Rows of the per-feature refinement of the default width (RVR on several features), a subset
#: of those (evenly spaced): Friedman #3 at N = 1000 took 12.7 s with all 1000 for MSE 0.0041,
#: 4.2 s with 500 for 0.0044 (one width: 3.8 s, 0.0085; a busy machine, load 7).
SHARED_ARD_MAX_SAMPLES = 500
#: The same for a classifier, whose shared evidence costs Newton steps on ``r x r`` Hessians (r up
#: to the rows) at each width: 500 rows cut the width search on Image (1300 rows) 4-8x.
SHARED_MAX_SAMPLES_CLASSIFIER = 500
#: The default rule's cost per well-determined parameter for a classifier, in nats: it picks the
#: width maximising ``evidence - CLASSIFIER_WIDTH_PENALTY * n_effective``. The shared-prior
#: evidence is the dense model's; the RVM keeps one basis function, each with its own precision,
#: per well-determined direction, and narrow widths that the dense evidence favours by a few
#: nats doubled the RVM's vectors on German and Image. Half a nat per parameter
#: picked widths within a factor 2 of the paper's on all six of Tipping's Table 2 sets
#: (``benchmarks/bench_tables.py``).
CLASSIFIER_WIDTH_PENALTY = 0.5
#: A classifier's default rule scales the (unit-norm) bias column of its shared-precision design
#: by this factor: a prior on the intercept this much broader than on the kernel weights, as the
#: RVM's own ``alpha`` for the bias is. With the bias's prior as narrow as the kernel weights', a
#: rare class's base rate (logit -3.9 for one class in 50) is cheap only as the near-constant
#: columns of a wide kernel, and the width search chose those: on 50 separable classes of 2 points
#: (2-D blobs spanning 20) a length scale of 670 and no relevance vector, test accuracy 0.02
#: (1-NN 0.72); with 30, length scale 3.6 and 0.65 (with 100: 3.4 and 0.67). Ripley, moons,
#: 3 blobs and iris: gamma within 20% of the unscaled bias's, accuracy within 0.013.
SHARED_INTERCEPT_SCALE = 30.0
#: A classifier's width search stops narrowing once the penalised evidence is this many nats
#: below its best (German: the three narrowest grid widths, 15 s of the search's 60 s, were 12 to
#: 80 nats below; Banana: the narrowest, 3.7 s of 8, came after one 16 nats below).
CLASSIFIER_STOP_DROP = 10.0


@dataclasses.dataclass(frozen=True)
class WidthFound:
    """A width search's result: the basis and normalised problem at the chosen width, the
    engine's fit there, the evidence curve in the user's units and the search's diagnostics."""

    basis: KernelBasis
    problem: Problem
    fit: object
    path: WidthPath
    search: WidthFit


@dataclasses.dataclass(frozen=True)
class WidthSearch:
    """The kernel width search of one fit.

    Parameters
    ----------
    rule : WidthRule
        ``gamma`` resolved.
    kernel : str
    bias : bool
    classifier : bool
        A classifier's default rule looks at fewer rows and penalises well-determined parameters.
    per_feature : bool
        The default rule may learn one width per feature (a regression whose likelihood has the
        Gaussian evidence's closed-form gradient).
    random_state : int, RandomState or None
        Seeds the row subset of the default rule (0 when None: the same data, the same model).
    owner : str
        The estimator's name, for the memory check.
    squares : int
        Basis-by-basis matrices the fit holds beside the design (the memory check).
    progress : bool or "auto"
        Report the widths tried on stderr (:class:`bayes_rvm.progress.Progress`: nothing for a
        search that ends within 2 s).
    """

    rule: WidthRule
    kernel: object
    bias: bool
    classifier: bool = False
    per_feature: bool = True
    random_state: object = None
    owner: str = "RVR"
    squares: int = 0
    progress: bool | str = False

    def design(self, X: np.ndarray, centres: np.ndarray | None):
        """``design(l, columns=None)``: the unit-norm design at length scale(s) ``l``."""
        width = stationary_kernel(self.kernel, purpose="a learned kernel width")

        def design(length_scale, columns=None):
            g = width.gamma(length_scale)
            basis = KernelBasis(
                self.kernel, gamma=float(g[0]) if g.size == 1 else g, bias=self.bias
            ).fit(X, centres=centres)
            Phi = basis.transform(X, columns=columns)
            normalise_columns(Phi)
            return Phi

        return design

    def progress_bar(self) -> Progress:
        """The progress line of one search: widths tried (:meth:`counted` designs)."""
        return Progress("width search", None, "widths", enabled=self.progress)

    @staticmethod
    def counted(design, bar: Progress):
        """``design`` reporting on ``bar`` each width it is asked for over all columns (itself
        when ``bar`` is silent: no cost)."""
        if not bar.enabled:
            return design
        tried = [0]

        def counted_design(length_scale, columns=None):
            if columns is None:  # a subset of columns: a gradient at a width already counted
                tried[0] += 1
                ls = ", ".join(f"{v:.3g}" for v in np.ravel(length_scale))
                bar.update(tried[0], detail=lambda: f"length scale {ls}")
            return design(length_scale, columns)

        return counted_design

    def basis_at(self, X: np.ndarray, centres, length_scale: np.ndarray) -> KernelBasis:
        """The basis on ``centres`` at the chosen length scale(s)."""
        g = self.rule.kernel.gamma(length_scale)
        return KernelBasis(
            self.kernel, gamma=float(g[0]) if length_scale.size == 1 else g, bias=self.bias
        ).fit(X, centres=centres)

    def options(self) -> tuple[int, dict]:
        """Rows the default width rule looks at, and the options of its search."""
        if self.classifier:
            # The penalised curve is flat near its maximum: 10% in the width is close enough,
            # and saves two of the 8-10 evaluations.
            return SHARED_MAX_SAMPLES_CLASSIFIER, {
                "penalty": CLASSIFIER_WIDTH_PENALTY,
                "stop_drop": CLASSIFIER_STOP_DROP,
                "xtol": 0.1,
            }
        return SHARED_MAX_SAMPLES, {}

    def per_feature_widths(self, X) -> bool:
        """Whether the width rule learns one length scale per input feature.

        ``"evidence_ard"``, and the default on several features of a regression with noise
        (Gaussian or Student-t: its width criterion is the Gaussian shared evidence, whose
        gradient is closed-form). With one width for all standardised inputs of Friedman #3 the
        default's MSE was 0.018 against Tipping's 0.0164; per feature it is 0.0099.
        """
        if self.rule.kind == "evidence_ard":
            return True
        return (
            self.rule.kind == DEFAULT_GAMMA
            and not self.classifier
            and X.shape[1] > 1
            and self.per_feature
        )

    def select(
        self,
        X,
        centres,
        problem: Problem,
        engine: EvidenceOptions,
        *,
        criterion=None,
        log_scale: float = 0.0,
        gradient: bool = True,
    ) -> WidthFound:
        """Maximise the evidence over the kernel width(s) on ``centres`` (None: the inputs).

        ``problem`` holds the normalised targets (its design is replaced at each width);
        ``engine`` fits it. The result's problem has the design at the chosen width, and its fit
        is the engine's, of that normalised problem.

        ``log_scale`` is what the log evidence loses in the user's units (the Jacobian of the
        targets' scaling, over all rows), so that ``width_path_`` compares with
        ``log_evidence_``. With ``gamma="evidence_shared"`` the width maximises
        ``criterion(Phi, rows) -> SharedEvidence`` (the estimator's likelihood on the normalised
        targets of ``rows``) by :func:`~bayes_rvm.evidence.width.select_width_shared`, on at most
        :data:`SHARED_MAX_SAMPLES` rows (one width per feature where
        :meth:`per_feature_widths`; ``"evidence_ard"`` too), and the engine runs once, cold, at
        that width: the fit is the one a fixed ``gamma`` of that value gives (the sequential
        engine itself never stops below the shared-precision bound there).
        """
        n_centres = X.shape[0] if centres is None else centres.shape[0]
        check_fit_memory(self.owner, X.shape[0], n_centres + int(self.bias), squares=self.squares)
        if self.rule.kind in (DEFAULT_GAMMA, "evidence_ard"):
            start = time.perf_counter()
            ard = self.per_feature_widths(X)
            ls, path, rows = self.shared(
                X,
                centres,
                criterion,
                problem.targets if ard else None,
                beta=problem.noise_precision,
            )
            Phi = self.design(X, centres)(ls)
            fit = fit_problem(problem.with_design(Phi, normalised=True), engine)
            log_scale *= rows.size / X.shape[0]  # the curve's evidence is over these rows
            wf = WidthFit(ls, fit, Phi, path, n_fits=1, seconds=time.perf_counter() - start)
        else:
            with self.progress_bar() as bar:
                wf = maximise_width(
                    self.counted(self.design(X, centres), bar),
                    engine,
                    X,
                    problem,
                    centres=centres,
                    kernel=self.kernel,
                    bias=self.bias,
                    refine="gradient" if gradient else "bounded",
                )
        basis = self.basis_at(X, centres, wf.length_scale)
        path = dataclasses.replace(wf.path, log_evidence=wf.path.log_evidence - log_scale)
        return WidthFound(basis, problem.with_design(basis.transform(X)), wf.fit, path, wf)

    def shared(
        self, X, centres, criterion, targets=None, *, beta: float | None = None
    ) -> tuple[np.ndarray, WidthPath, np.ndarray]:
        """The default width rule on a row subset: ``(ls, path, rows)``.

        ``criterion(Phi, rows)`` is the estimator's shared evidence of those rows' targets; the
        rows and the search options are :meth:`options`'. With ``targets`` (the normalised
        targets of the rows of ``X``; ``beta`` their fixed noise precision, if any) the width is
        one per feature: the single width is searched in units of each feature's standard
        deviation, then refined per feature by
        :func:`~bayes_rvm.evidence.width.maximise_width_shared_ard`, so that rescaling a feature
        rescales its length scale and changes no prediction; ``path`` is then in those units.
        """
        n = X.shape[0]
        rows = np.arange(n)
        limit, options = self.options()
        if n > limit:
            # A fixed seed when none is given: the same data must give the same model.
            seed = 0 if self.random_state is None else self.random_state
            rng = check_random_state(seed)
            rows = np.sort(rng.choice(n, limit, replace=False))
        design = self.design(X[rows], centres)
        unit = np.ones(1)
        if targets is not None:
            unit = np.std(X[rows], axis=0)
            unit[~(np.isfinite(unit) & (unit > 0))] = 1.0
            # Only the per-feature search's start: its parabolic steps saved nothing after it
            # (Friedman #2 and #3, 10 data sets: 3 of 33 evaluations fewer, the same MSE).
            options = {**options, "xtol": 0.3}
        with self.progress_bar() as bar:
            design = self.counted(design, bar)
            ls, path, _ = select_width_shared(
                lambda u: design(u * unit),
                X[rows] / unit,
                lambda Phi: criterion(Phi, rows),
                **options,
            )
            if targets is not None:
                ls = self._refine_per_feature(X, rows, centres, targets, ls, unit, beta, bar)
        return ls, path, rows

    def _refine_per_feature(
        self, X, rows, centres, targets, ls, unit, beta, bar: Progress
    ) -> np.ndarray:
        # Each of its 20-30 evaluations decomposes a Gram matrix of the rows: at most
        # SHARED_ARD_MAX_SAMPLES of them, evenly spaced in the subset.
        sub = rows
        if rows.size > SHARED_ARD_MAX_SAMPLES:
            keep = np.linspace(0, rows.size - 1, SHARED_ARD_MAX_SAMPLES).round().astype(int)
            sub = rows[keep]
        design = self.counted(self.design(X[sub], centres), bar)
        # In units of each feature's spread too: only then is a feature rescaled by 1e12
        # searched with the same floating-point steps (1% apart in the length scales else).
        u, _, _ = maximise_width_shared_ard(
            lambda u: design(u * unit),
            X[sub] / unit,
            targets[sub],
            ls,
            centres=None if centres is None else centres / unit,
            kernel=self.kernel,
            bias=self.bias,
            beta=beta,
        )
        return u * unit


def width_attributes(basis: KernelBasis, kernel, path) -> dict:
    """``gamma_``, ``length_scale_`` and ``width_path_`` of a fitted basis."""
    g = basis.gamma_
    gamma = None if g is None else (np.asarray(g) if isinstance(g, list) else g)
    width = stationary_kernel(kernel)
    length_scale = None
    if gamma is not None and width is not None:
        ls = width.length_scale(gamma)
        length_scale = ls if np.ndim(ls) else float(ls)
    return {"gamma_": gamma, "length_scale_": length_scale, "width_path_": path}
