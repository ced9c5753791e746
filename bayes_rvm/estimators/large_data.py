"""The large-data path of :class:`~bayes_rvm.RVR`: a fit from sufficient statistics.

With a subset of centres, the Gaussian type-II fit reads the N x M design only through
``Phi'Phi``, ``Phi'y``, ``y'y`` and N (:mod:`bayes_rvm.basis.statistics`). The training data
are then a :class:`StatisticsData`, which yields the basis, the problem and the fit
(a :class:`DataFit`) as the in-memory design and the Dask blocks
(:class:`~bayes_rvm.estimators.distributed.DaskData`) do; :func:`reads_row_blocks` is the rule
of ``chunk_rows``, :func:`statistics_refusal` what the path cannot do, and
:func:`statistics_model` the model MCMC samples after such a fit.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np

from bayes_rvm.basis.kernels import KernelBasis
from bayes_rvm.basis.statistics import SufficientStatistics, accumulate
from bayes_rvm.estimators.base import DEFAULT_GAMMA, memory_limit
from bayes_rvm.evidence import (
    EvidenceOptions,
    Problem,
    WidthFit,
    WidthPath,
    fit_problem,
    prior_column_scale,
    shared_evidence,
)

__all__ = [
    "LARGE_DESIGN_BYTES",
    "DataFit",
    "StatisticsData",
    "reads_row_blocks",
    "statistics_model",
    "statistics_refusal",
]

#: Above this size of the N x M design (2 GiB; under ``inference="mcmc"`` also of the N x draws
#: pointwise log likelihood), ``RVR(chunk_rows="auto")`` fits a subset of
#: centres from the design's sufficient statistics (a chunked pass) rather than holding it: the
#: design path's per-addition products then cost more memory traffic than the statistics' one
#: pass, and its memory grows with N.
LARGE_DESIGN_BYTES = 2 * 2**30


def reads_row_blocks(estimator, n_rows: int, check: Callable[[], None], *, per_row=0) -> bool:
    """Whether ``estimator.fit`` reads its design in row blocks: the rule of ``chunk_rows``.

    The rule of :class:`~bayes_rvm.RVR` (fits from sufficient statistics) and
    :class:`~bayes_rvm.RVC` (the chunked Laplace path): ``None`` never; an
    int always,
    after ``check()`` (which raises a ValueError naming what the row blocks cannot do);
    ``"auto"`` when ``centres`` selects a subset, ``check()`` passes and the N x M design (or
    ``per_row`` float64 values a row, if more) exceeds :data:`LARGE_DESIGN_BYTES` or the memory
    limit.

    Parameters
    ----------
    estimator
        Has ``chunk_rows``, ``centres``, ``kernel`` and ``bias`` (and ``_cfg``, its resolved
        settings).
    n_rows : int
        N, the training rows.
    check : callable
        Raises ValueError when the fit cannot run on row blocks.
    per_row : int, default=0
        Other values a row that the in-memory path would hold (an MCMC fit's pointwise log
        likelihood).
    """
    if estimator.chunk_rows is None:
        return False
    if estimator.chunk_rows != "auto":
        check()
        return True
    cfg = estimator._cfg
    if cfg.centre_method is None or estimator.kernel == "precomputed":
        return False
    try:
        check()
    except ValueError:
        return False  # the design path, with its own memory check
    n_basis = len(cfg.centres) if cfg.centre_method == "given" else cfg.n_centres
    need = 8.0 * n_rows * max(n_basis + int(bool(estimator.bias)), per_row)
    limit, _ = memory_limit()
    return need > min(LARGE_DESIGN_BYTES, np.inf if limit is None else limit)


def statistics_refusal(estimator) -> str | None:
    """What a fit from sufficient statistics cannot do with ``estimator``'s settings, or None.

    Parameters
    ----------
    estimator : RVR
        Its ``centres``, ``kernel``, ``likelihood``, ``inference``, ``predictive`` and resolved
        width rule.
    """
    rule = estimator._width_rule()
    if estimator.centres is None or estimator.kernel == "precomputed":
        return "it needs a subset of centres (centres=('random', n), ('kmeans', n) or an array)"
    if estimator.likelihood != "gaussian":
        return (
            f"likelihood={estimator.likelihood!r} reweights every row at each step (its sums "
            "are not fixed statistics)"
        )
    if estimator.inference == "vi":
        return "inference='vi' fits the model of the N training rows"
    if estimator.inference == "mcmc" and rule.sampled:
        return "a sampled width (gamma a Prior) needs the design at every width"
    if estimator.predictive != "rvm":
        return "predictive='rvm*' needs the training design at prediction"
    if rule.learned and rule.kind not in (DEFAULT_GAMMA, "evidence_ard"):
        # The default and "evidence_ard" maximise the shared evidence on a row subset (the
        # same rows and search as in memory); "evidence" refits the whole design per width.
        return (
            f"gamma={estimator.gamma!r} searches the width on the whole design; use a number, "
            f"the default {DEFAULT_GAMMA!r} or 'evidence_ard' (chosen on a subset of rows)"
        )
    return None


@dataclasses.dataclass(frozen=True)
class DataFit:
    """What a data source yields: the basis, the problem the engine fitted and its fit, the
    design's sufficient statistics (None on the in-memory design), and the width search's
    curve and diagnostics where the width was learned."""

    basis: KernelBasis
    problem: Problem
    fit: object
    statistics: SufficientStatistics | None = None
    path: WidthPath | None = None
    search: WidthFit | None = None


@dataclasses.dataclass(frozen=True)
class StatisticsData:
    """Training data read through the design's sufficient statistics: one chunked pass.

    Parameters
    ----------
    X, y : ndarray
        The checked training inputs and targets.
    chunk_rows : int or None
        Rows per block of the pass (None: :func:`~bayes_rvm.basis.statistics.accumulate`'s
        choice).
    noise_variance : float or None
        A fixed noise variance in the units of ``y`` (None: estimated).
    progress : bool or "auto"
        Report the pass's rows on stderr (:class:`bayes_rvm.progress.Progress`).
    """

    X: np.ndarray
    y: np.ndarray
    chunk_rows: int | None = None
    noise_variance: float | None = None
    progress: bool | str = False

    def fit(
        self, problem: Problem, engine: EvidenceOptions, *, search, centres, fit_basis
    ) -> DataFit:
        """The fit from the statistics of the basis on ``centres``.

        ``search`` is the fit's :class:`~bayes_rvm.estimators.width_selection.WidthSearch` (None:
        the width is not learned): the default rule or ``"evidence_ard"`` chooses the width on at
        most ``SHARED_MAX_SAMPLES`` rows, as the design path does; ``fit_basis(X, centres,
        gamma)`` builds the basis; then one pass accumulates ``Phi'Phi``, ``Phi'y`` and ``y'y``.
        """
        X = self.X
        gamma = path = None
        if search is not None:
            start = time.perf_counter()
            ls, path, rows = search.shared(
                X,
                centres,
                lambda Phi, r: shared_evidence(
                    Phi, problem.targets[r], beta=problem.noise_precision
                ),
                problem.targets if search.per_feature_widths(X) else None,
                beta=problem.noise_precision,
            )
            g = search.rule.kernel.gamma(ls)
            gamma = float(g[0]) if ls.size == 1 else g
            # The curve's evidence is over these rows, in the user's units.
            log_scale = problem.targets.shape[1] * rows.size * np.log(problem.scale)
            path = dataclasses.replace(path, log_evidence=path.log_evidence - log_scale)
        basis = fit_basis(X, centres, gamma)
        stats = accumulate(basis, X, self.y, chunk_rows=self.chunk_rows, progress=self.progress)
        stats_problem = Problem.from_statistics(stats, noise_variance=self.noise_variance)
        fit = fit_problem(stats_problem, engine)
        found = None
        if path is not None:
            found = WidthFit(ls, fit, None, path, n_fits=1, seconds=time.perf_counter() - start)
        return DataFit(basis, stats_problem, fit, stats, path, found)


def statistics_model(statistics: SufficientStatistics, columns, rows_of, *, form, offset, priors):
    """The model ``inference="mcmc"`` samples after a fit from sufficient statistics.

    :func:`bayes_rvm.models.statistics.rvm_statistics_model` on the statistics of the MCMC
    ``columns``, with the rows of :func:`bayes_rvm.models.statistics.log_likelihood_rows` (2000,
    evenly spaced) for the pointwise log likelihood: ``idata_``'s ``log_likelihood`` holds those
    rows' exact leave-one-out terms, not all N (its attribute ``log_likelihood_rows`` says so,
    and :func:`bayes_rvm.compare` refuses to set it beside a fit scored on other rows).
    ``rows_of(rows) -> (Phi_rows, y_rows)`` gives those rows, or is None: a fit on Dask arrays
    keeps none of them on the client, and its model has the same density and no such rows (its
    completed posterior no ``log_likelihood``).
    """
    from bayes_rvm.models.statistics import log_likelihood_rows, rvm_statistics_model

    if form != "marginal" or offset is not None:
        raise ValueError(
            "a fit from sufficient statistics (chunk_rows) samples the weight-marginalised "
            "model with no offset: form='marginal', offset=None."
        )
    st = statistics
    sub = SufficientStatistics(
        st.gram[np.ix_(columns, columns)], st.cross[columns], st.tt, st.n, st.t_sum
    )
    loo_rows = None
    if rows_of is not None:
        rows = log_likelihood_rows(st.n)
        loo_rows = (rows, *rows_of(rows))
    return rvm_statistics_model(
        sub,
        rows=loo_rows,
        phi_scale=prior_column_scale(sub.column_norms(), st.n),
        y_scale=sub.target_scale(),
        basis_names=columns,
        **priors,
    )
