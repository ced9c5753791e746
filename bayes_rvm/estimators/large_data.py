"""The large-data path of :class:`~bayes_rvm.RVR`: a fit from sufficient statistics.

With a subset of centres, the Gaussian type-II fit reads the N x M design only through
``Phi'Phi``, ``Phi'y``, ``y'y`` and N (:mod:`bayes_rvm.basis.statistics`).
:class:`StatisticsFitMixin`
holds the estimator's side of it: when ``fit`` takes that path (``chunk_rows``), what it cannot
do there (a clear error naming the cause), and the fit itself, whose accumulation
(:meth:`StatisticsFitMixin._statistics_of`) is the one place a distributed pass plugs in.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np

from bayes_rvm.basis.statistics import SufficientStatistics, accumulate
from bayes_rvm.estimators.base import DEFAULT_GAMMA, memory_limit
from bayes_rvm.evidence import (
    EvidenceOptions,
    Problem,
    WidthFit,
    fit_problem,
    prior_column_scale,
    shared_evidence,
)

__all__ = ["LARGE_DESIGN_BYTES", "StatisticsFitMixin", "reads_row_blocks"]

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
        Has ``chunk_rows``, ``centres``, ``n_centres``, ``kernel`` and ``bias``.
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
    if estimator.centres is None or estimator.kernel == "precomputed":
        return False
    try:
        check()
    except ValueError:
        return False  # the design path, with its own memory check
    centres = estimator.centres
    n_basis = estimator.n_centres if isinstance(centres, str) else len(centres)
    if n_basis is None:
        return False  # the design path says what is missing
    need = 8.0 * n_rows * max(n_basis + int(bool(estimator.bias)), per_row)
    limit, _ = memory_limit()
    return need > min(LARGE_DESIGN_BYTES, np.inf if limit is None else limit)


class StatisticsFitMixin:
    """``fit`` from sufficient statistics, for an estimator with ``chunk_rows`` (RVR).

    Sets ``statistics_`` (the :class:`~bayes_rvm.basis.statistics.SufficientStatistics` of the fit,
    in the user's units, or None for a fit on the design) and ``_fitted_on_statistics``.
    """

    def _on_statistics(self, X: np.ndarray) -> bool:
        """Whether ``fit`` reads the design through its sufficient statistics (``chunk_rows``)."""
        # Under MCMC the design path's pointwise log likelihood holds N values a draw.
        draws = self.draws * self.chains if self.inference == "mcmc" else 0
        return reads_row_blocks(self, X.shape[0], self._check_statistics_fit, per_row=draws)

    def _check_statistics_fit(self) -> None:
        """What a fit from sufficient statistics cannot do, as a ValueError naming the cause."""
        rule = self._width_rule()
        reason = None
        if self.centres is None or self.kernel == "precomputed":
            reason = "it needs a subset of centres (centres='random', 'kmeans' or an array)"
        elif getattr(self, "likelihood", "gaussian") != "gaussian":
            reason = (
                f"likelihood={self.likelihood!r} reweights every row at each step (its sums "
                "are not fixed statistics)"
            )
        elif self.inference == "vi":
            reason = "inference='vi' fits the model of the N training rows"
        elif self.inference == "mcmc" and self._samples_width():
            reason = "a sampled width (gamma a Prior) needs the design at every width"
        elif self.predictive != "rvm":
            reason = "predictive='rvm*' needs the training design at prediction"
        elif rule.learned and rule.kind not in (DEFAULT_GAMMA, "evidence_ard"):
            # The default and "evidence_ard" maximise the shared evidence on a row subset (the
            # same rows and search as in memory); "evidence" refits the whole design per width.
            reason = (
                f"gamma={self.gamma!r} searches the width on the whole design; use a number, "
                f"the default {DEFAULT_GAMMA!r} or 'evidence_ard' (chosen on a subset of rows)"
            )
        if reason is not None:
            raise ValueError(
                f"RVR(chunk_rows={self.chunk_rows!r}) fits from sufficient statistics, but "
                f"{reason}. Set chunk_rows=None for the in-memory design."
            )

    def _fit_statistics(
        self, X: np.ndarray, y: np.ndarray, problem: Problem, engine: EvidenceOptions
    ):
        """The fit from the statistics of a chunked pass: ``(basis, problem, fit)``.

        The width (the default rule or ``"evidence_ard"``) is chosen on at most
        ``SHARED_MAX_SAMPLES`` rows, as the design path chooses it; then one pass accumulates
        ``Phi'Phi``, ``Phi'y`` and ``y'y``.
        """
        centres = self._candidate_centres(X)
        gamma, path = None, None
        if self._learns_width():
            start = time.perf_counter()
            ls, path, rows = self._shared_width(
                X,
                centres,
                lambda Phi, r: shared_evidence(
                    Phi, problem.targets[r], beta=problem.noise_precision
                ),
                problem.targets if self._per_feature_widths(X) else None,
                beta=problem.noise_precision,
            )
            g = self._width_rule().kernel.gamma(ls)
            gamma = float(g[0]) if ls.size == 1 else g
            # The curve's evidence is over these rows, in the user's units.
            log_scale = problem.targets.shape[1] * rows.size * np.log(problem.scale)
            path = dataclasses.replace(path, log_evidence=path.log_evidence - log_scale)
        basis = self._fit_basis(X, centres, gamma)
        self.statistics_ = self._statistics_of(basis, X, y)
        stats_problem = Problem.from_statistics(
            self.statistics_, noise_variance=self.noise_variance
        )
        fit = fit_problem(stats_problem, engine)
        self._set_width(basis, path)
        if path is not None:
            self.width_selection_ = WidthFit(
                ls, fit, None, path, n_fits=1, seconds=time.perf_counter() - start
            )
        return basis, stats_problem, fit

    def _statistics_model(self, form: str, offset, priors: dict):
        """The model ``inference="mcmc"`` samples after a fit from sufficient statistics.

        :func:`bayes_rvm.models.statistics.rvm_statistics_model` on the statistics of the MCMC
        columns, with the rows of :func:`bayes_rvm.models.statistics.log_likelihood_rows` (2000,
        evenly spaced) for the pointwise log likelihood: ``idata_``'s ``log_likelihood`` holds
        those rows' exact leave-one-out terms, not all N (its attribute
        ``log_likelihood_rows`` says so, and :func:`bayes_rvm.compare` refuses to set it beside
        a fit scored on other rows). A fit on Dask arrays keeps none of the rows on the client
        (:mod:`bayes_rvm.estimators.distributed`): its model has the same density and no such rows,
        and
        its completed posterior no ``log_likelihood``.
        """
        from bayes_rvm.models.statistics import log_likelihood_rows, rvm_statistics_model

        if form != "marginal" or offset is not None:
            raise ValueError(
                "a fit from sufficient statistics (chunk_rows) samples the weight-marginalised "
                "model with no offset: form='marginal', offset=None."
            )
        cols = self._mcmc_columns()
        st = self.statistics_
        sub = SufficientStatistics(
            st.gram[np.ix_(cols, cols)], st.cross[cols], st.tt, st.n, st.t_sum
        )
        inputs, loo_rows = self.training_.inputs, None
        if inputs is not None and inputs.shape[0] == st.n:
            rows = log_likelihood_rows(st.n)
            Phi_rows = self.basis_.transform(inputs[rows], columns=cols)
            loo_rows = (rows, Phi_rows, self.training_.y[rows])
        return rvm_statistics_model(
            sub,
            rows=loo_rows,
            phi_scale=prior_column_scale(sub.column_norms(), st.n),
            y_scale=sub.target_scale(),
            basis_names=cols,
            **priors,
        )

    def _require_design(self, what: str) -> None:
        """A ValueError for ``what`` when the fit was made from sufficient statistics."""
        if getattr(self, "_fitted_on_statistics", False):
            raise ValueError(
                f"RVR.{what} needs the N x K training design, which a fit from sufficient "
                "statistics (chunk_rows) does not keep: refit with chunk_rows=None (on a subset "
                "of rows if the design does not fit in memory)."
            )

    def _statistics_of(self, basis, X, y) -> SufficientStatistics:
        """The statistics of the design of ``basis`` at ``X`` against ``y``: one chunked pass."""
        chunk = None if self.chunk_rows == "auto" else self.chunk_rows
        return accumulate(basis, X, y, chunk_rows=chunk)
