"""Fits and predictions on Dask arrays: the sufficient statistics as a map-reduce on a cluster.

With the candidate centres fixed, the Gaussian type-II fit needs the data only through
``Phi'Phi``, ``Phi't``, ``t't`` and ``N``
(:class:`bayes_rvm.basis.statistics.SufficientStatistics`),
sums over rows. For a Dask array pair ``(X, y)`` chunked by rows, each row block's statistics are
computed where the block lives (:func:`bayes_rvm.basis.statistics.accumulate` on the block, the
kernel
rows built a few thousand at a time), and the blocks' statistics are added up in a tree
(``split_every`` at a time). The fitted basis (its centres: ``n_centres x n_features`` floats) is
one key of the graph, sent once to each worker that needs it. Nothing of ``X`` comes back to the
client but the ``n`` rows of ``centres=("random", n)``.

The scheduler is Dask's default: the :class:`distributed.Client` in context when there is one (a
``LocalCluster`` or a multi-machine cluster: the same code), else Dask's threads. An error in any
block (NaN inputs, a kernel that fails) stops the whole computation, and a worker that dies
mid-pass has its blocks recomputed by the scheduler (``distributed.scheduler.allowed-failures``):
the reduction needs every block, so a partial sum is never returned.

Threads. Dask's nanny starts each worker with ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` and
``MKL_NUM_THREADS`` set to 1; a block's ``dsyrk`` and its fused kernel run on that many threads
(:func:`bayes_rvm.threads.process_threads`), so give a machine one worker thread per core (the
"Large data" page compares the layouts).

Examples
--------
>>> import dask.array as da
>>> from distributed import Client, LocalCluster
>>> from bayes_rvm.estimators.regressor import RVR
>>> with LocalCluster(n_workers=2, threads_per_worker=1) as cluster, Client(cluster):
...     X = da.random.uniform(-3, 3, size=(200_000, 2), chunks=(50_000, 2))
...     y = da.sin(X[:, 0]) * da.cos(X[:, 1]) + 0.1 * da.random.normal(size=200_000,
...                                                                     chunks=50_000)
...     model = RVR(gamma=0.5, centres=("random", 300), random_state=0).fit(X, y)
...     mean, std = model.predict(X[:1000], return_std=True)  # lazy Dask arrays
...     mean.compute()  # doctest: +SKIP

To run on your own cluster, replace the ``LocalCluster`` by ``Client("tcp://scheduler:8786")``
and read ``X`` and ``y`` with ``dask.array.from_zarr`` (or ``dask.dataframe``'s ``to_dask_array
(lengths=True)``): the workers read their blocks, the client never holds them.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from numbers import Integral

import numpy as np
from sklearn.utils import check_random_state

from bayes_rvm.basis.statistics import SufficientStatistics, accumulate
from bayes_rvm.estimators.width_selection import SHARED_MAX_SAMPLES
from bayes_rvm.evidence import Problem, WidthFit, fit_problem, shared_evidence
from bayes_rvm.progress import Progress

__all__ = [
    "DaskData",
    "dask_centres",
    "dask_scale_gamma",
    "dask_statistics",
    "dask_training_data",
    "is_dask_collection",
    "predict_dask",
]


def is_dask_collection(x) -> bool:
    """Whether ``x`` is a Dask collection (without importing Dask when it is not one)."""
    return hasattr(x, "__dask_graph__") and x.__dask_graph__() is not None


def _unknown_rows(a) -> bool:
    return any(np.isnan(c) for c in a.chunks[0])


def dask_training_data(X, y):
    """``X`` and ``y`` as Dask arrays whose row blocks line up, after the checks a fit needs.

    Parameters
    ----------
    X : dask.array.Array of shape (n_samples, n_features)
        Numeric inputs, chunked by rows (column blocks are joined: a kernel row needs every
        feature).
    y : dask.array.Array or array-like of shape (n_samples,) or (n_samples, n_outputs)
        Targets. An in-memory array is cut into ``X``'s row blocks; a Dask array whose row blocks
        differ from ``X``'s is rechunked to them: the statistics are sums over rows, the same
        whatever the blocks, and ``y`` has ``1 / n_features`` of ``X``'s bytes, so moving its
        rows costs less than moving ``X``'s (which is never done).

    Returns
    -------
    X, y : dask.array.Array
        ``X`` float64 in one column block; ``y`` float64 with ``X``'s row blocks.

    Raises
    ------
    ValueError
        Unknown chunk sizes (after boolean indexing such as ``X[X[:, 0] > 0]``: the row count and
        the blocks' alignment are then unknown; call ``X.compute_chunk_sizes()`` first), a row
        count that differs between ``X`` and ``y``, or the wrong number of dimensions.
    TypeError
        ``X`` or ``y`` not numeric.
    """
    import dask.array as da

    if not isinstance(X, da.Array):
        raise TypeError(
            f"X must be a dask.array.Array to fit on a Dask cluster, got {type(X).__name__} "
            "(a dask DataFrame: use X.to_dask_array(lengths=True))."
        )
    if not is_dask_collection(y):
        y = np.asarray(y)
    elif not isinstance(y, da.Array):
        raise TypeError(
            f"y must be a dask.array.Array or an array, got {type(y).__name__} (a dask Series: "
            "use y.to_dask_array(lengths=True))."
        )
    for name, a in (("X", X), ("y", y)):
        if a.dtype.kind not in "biuf":
            raise TypeError(f"{name} must be numeric, got dtype {a.dtype}.")
        if isinstance(a, da.Array) and _unknown_rows(a):
            raise ValueError(
                f"{name} has unknown chunk sizes along its rows (as after boolean indexing, e.g. "
                f"X[X[:, 0] > 0]): the row count and the alignment of the row blocks of X and y "
                f"are unknown. Call {name} = {name}.compute_chunk_sizes() (for X and y) before "
                "fit."
            )
    if X.ndim != 2 or X.shape[1] < 1:
        raise ValueError(f"X must be 2-D with at least one feature, got shape {X.shape}.")
    if y.ndim not in (1, 2):
        raise ValueError(f"y must be 1-D or 2-D, got shape {y.shape}.")
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]}.")
    if X.shape[0] < 2:
        raise ValueError(f"a fit needs at least 2 samples, got {X.shape[0]}.")
    X = X.astype(np.float64)
    if X.numblocks[1] > 1:
        X = X.rechunk({1: -1})
    rows = {0: X.chunks[0]} | ({1: -1} if y.ndim == 2 else {})
    if isinstance(y, da.Array):
        y = y.astype(np.float64)
        if y.chunks[0] != X.chunks[0] or (y.ndim == 2 and y.numblocks[1] > 1):
            y = y.rechunk(rows)
    else:
        y = da.from_array(y.astype(np.float64), chunks=rows)
    return X, y


def dask_centres(X, centres, n_centres, random_state) -> np.ndarray:
    """The candidate centres of a fit on a Dask array, without loading ``X``.

    ``centres=("random", n)`` draws ``n`` row indices as the in-memory fit does
    (``check_random_state(random_state).choice(N, n_centres, replace=False)``, sorted) and
    fetches those rows only: the same data and seed give the same centres in memory and on Dask.
    Given centres are checked as in memory. ``"kmeans"`` would need passes over all the rows
    (scikit-learn's k-means needs them in memory), and ``None`` (a basis function on every row)
    an N x N design: both are refused, naming the alternatives.

    Parameters
    ----------
    X : dask.array.Array of shape (n_samples, n_features)
    centres : "random" or array-like of shape (n_centres, n_features)
        The method of the estimator's ``centres=("random", n)``, or its given centres.
    n_centres : int or None
        The ``n`` of ``("random", n)``.
    random_state : int, RandomState or None

    Returns
    -------
    ndarray of shape (n_centres, n_features)
    """
    if centres is None or (isinstance(centres, str) and centres != "random"):
        raise ValueError(
            f"centres={centres!r} is not available on Dask arrays: None puts a basis function on "
            "every row (an N x N design) and 'kmeans' needs every row in memory. Use "
            "centres=('random', n), or give the centres as an array (for example the "
            "cluster centres of dask_ml.cluster.KMeans, or of sklearn's KMeans on a sample)."
        )
    if isinstance(centres, str):
        if not isinstance(n_centres, Integral) or n_centres < 1:
            raise ValueError(
                f"centres=('random', n) needs n, a positive integer; got {n_centres!r}."
            )
        n = X.shape[0]
        if n_centres > n:
            raise ValueError(
                f"centres=('random', {n_centres}) asks for {n_centres} centres; that exceeds the "
                f"{n} training samples."
            )
        rng = check_random_state(random_state)
        rows = np.sort(rng.choice(n, n_centres, replace=False))
        C = np.asarray(X[rows].compute(), dtype=np.float64)
    else:
        from sklearn.utils.validation import check_array

        C = check_array(centres, dtype=np.float64, input_name="centres")
    if C.shape[1] != X.shape[1]:
        raise ValueError(f"centres has {C.shape[1]} features but X has {X.shape[1]}.")
    if not np.all(np.isfinite(C)):
        raise ValueError(
            "the centres contain NaN or inf (rows of X drawn by centres=('random', n))."
        )
    return C


def dask_scale_gamma(X) -> float:
    """scikit-learn's ``gamma="scale"``, ``1 / (n_features * X.var())``, computed on the workers."""
    var = float(X.var().compute())
    return 1.0 / (X.shape[1] * var) if var > 0 else 1.0


def _block_statistics(basis, X: np.ndarray, T: np.ndarray, index: int, start: int):
    """One row block's statistics; a clear error naming the block if it holds NaN or inf."""
    for name, a in (("X", X), ("y", T)):
        finite = np.isfinite(a)
        if not finite.all():
            bad = np.flatnonzero(~finite.reshape(a.shape[0], -1).all(axis=1))
            raise ValueError(
                f"{name} has NaN or infinite values in row block {index} (rows {start} to "
                f"{start + a.shape[0] - 1}), {bad.size} row(s), the first at row {start + bad[0]}. "
                "Drop or impute them before fit (e.g. keep = da.isfinite(X).all(axis=1) & "
                "da.isfinite(y); then X[keep], y[keep] and compute_chunk_sizes())."
            )
    return accumulate(basis, X, T)


def _add(*parts: SufficientStatistics) -> SufficientStatistics:
    out = parts[0]
    for p in parts[1:]:
        out = out + p
    return out


def dask_statistics(basis, X, y, *, split_every: int = 8, progress=False) -> SufficientStatistics:
    """The sufficient statistics of ``basis`` on a Dask array pair, as a map-reduce.

    Each row block of ``X`` (with the same rows of ``y``) becomes
    :func:`bayes_rvm.basis.statistics.accumulate` of that block on the worker that holds it; the
    results are added in a tree, ``split_every`` at a time, so that no worker receives more than
    ``split_every`` M x M matrices at once. The computation runs on Dask's default scheduler:
    the ``distributed.Client`` in context, if any.

    Parameters
    ----------
    basis : KernelBasis
        A fitted basis (its centres are one key of the graph, sent once).
    X, y : dask.array.Array
        As :func:`dask_training_data` returns them (row blocks aligned; it is called here).
    split_every : int, default=8
        Fan-in of the reduction tree.
    progress : bool or "auto", default=False
        Report the rows whose blocks are done on stderr (:class:`bayes_rvm.progress.Progress`;
        "auto": where stderr is a terminal).

    Returns
    -------
    SufficientStatistics
        Equal to :func:`bayes_rvm.basis.statistics.accumulate` on the computed arrays up to the
        rounding of the sums' order.

    Raises
    ------
    ValueError
        NaN or inf in a block (naming the block and its rows), or what
        :func:`dask_training_data` refuses. Any error in a block stops the whole computation.
    """
    import dask

    if not isinstance(split_every, Integral) or split_every < 2:
        raise ValueError(f"split_every must be an integer >= 2, got {split_every!r}.")
    X, y = dask_training_data(X, y)
    starts = np.concatenate([[0], np.cumsum(X.chunks[0])[:-1]])
    graph_basis = dask.delayed(basis, pure=True)
    block = dask.delayed(_block_statistics, pure=True)
    parts = [
        block(graph_basis, xb, yb, i, int(starts[i]))
        for i, (xb, yb) in enumerate(
            zip(X.to_delayed().ravel(), y.to_delayed().ravel(), strict=True)
        )
    ]
    rows = [int(r) for r in X.chunks[0]]
    bar = Progress("sufficient statistics (Dask)", sum(rows), "rows", enabled=progress)
    client = _client() if bar.enabled else None
    with bar:
        if client is not None:
            # The blocks as futures, counted as they finish; then the same tree of sums.
            from distributed import as_completed

            parts = client.compute(parts)
            index = {f.key: i for i, f in enumerate(parts)}
            done = 0
            for n, future in enumerate(as_completed(parts), 1):
                done += rows[index[future.key]]
                bar.update(done, blocks=(n, len(rows)))
            while len(parts) > 1:
                parts = [
                    client.submit(_add, *parts[i : i + split_every], pure=True)
                    for i in range(0, len(parts), split_every)
                ]
            return parts[0].result()
        add = dask.delayed(_add, pure=True)
        while len(parts) > 1:
            parts = [add(*parts[i : i + split_every]) for i in range(0, len(parts), split_every)]
        with _LocalBlockProgress(bar, rows):
            (stats,) = dask.compute(parts[0])
    return stats


def _client():
    """The ``distributed.Client`` in context, or None (Dask's local schedulers)."""
    try:
        from distributed import get_client

        return get_client()
    except (ImportError, ValueError):
        return None


class _LocalBlockProgress:
    """A ``dask.callbacks.Callback`` counting the finished block tasks of a local scheduler."""

    def __init__(self, bar, rows: list[int]):
        self.bar, self.rows, self.done = bar, rows, 0
        self._callback = None

    def _posttask(self, key, *_) -> None:
        name = key[0] if isinstance(key, tuple) else key
        if str(name).startswith("_block_statistics"):
            self.done += 1
            # Blocks finish in any order: the rows are those of as many blocks, in order.
            self.bar.update(sum(self.rows[: self.done]), blocks=(self.done, len(self.rows)))

    def __enter__(self):
        if self.bar.enabled:
            from dask.callbacks import Callback

            self._callback = Callback(posttask=self._posttask)
            self._callback.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._callback is not None:
            self._callback.__exit__(*exc)


def _predict_block(estimator, X: np.ndarray, return_std: bool, shape: tuple) -> np.ndarray:
    """One row block's predictions, of shape ``(rows, *shape)``.

    A block may hold no rows (boolean indexing such as ``X[X[:, 0] > 0]`` leaves empty blocks),
    which the estimator's ``predict`` refuses as scikit-learn's checks do: its prediction is
    the empty array of the other blocks' trailing shape.
    """
    if X.shape[0] == 0:
        return np.empty((0, *shape), dtype=np.float64)
    out = estimator.predict(X, return_std=return_std)
    return np.stack(out, axis=-1) if return_std else out


def _slim(estimator):
    """The estimator without its training rows where its predictions do not read them.

    The type-II RVM predictive needs the basis and the fit only; the training record (N rows of
    inputs and targets, or their design) and a built DataTree would otherwise travel to every
    worker. MCMC and RVM* predictions read them, and get the whole estimator.
    """
    if getattr(estimator, "inference", None) != "type2" or estimator.predictive != "rvm":
        return estimator
    slim = copy.copy(estimator)
    slim.training_ = None
    slim._tree_cache = None
    return slim


def predict_dask(estimator, X, *, return_std: bool = False):
    """``estimator.predict`` on a Dask array: lazy Dask arrays with ``X``'s row blocks.

    Each row block is predicted where it lives by the estimator's own ``predict`` (the estimator,
    without its training rows for the type-II predictive, is one key of the graph, sent once to
    each worker), so the numbers are the in-memory ones.
    Row blocks of any size are fine here: unknown sizes, and empty blocks (both left by boolean
    indexing, ``X[X[:, 0] > 0]``), whose predictions are empty arrays.

    Parameters
    ----------
    estimator : fitted RVR (or any regressor whose ``predict`` takes ``return_std``)
    X : dask.array.Array of shape (n_samples, n_features)
    return_std : bool, default=False

    Returns
    -------
    mean : dask.array.Array of shape (n_samples,) or (n_samples, n_outputs)
    std : dask.array.Array of the same shape, only if ``return_std``
    """
    import dask
    import dask.array as da

    if not isinstance(X, da.Array) or X.ndim != 2:
        raise ValueError(
            f"X must be a 2-D dask.array.Array, got {type(X).__name__} "
            f"of {getattr(X, 'ndim', '?')} dimensions."
        )
    if X.dtype.kind not in "biuf":
        raise TypeError(f"X must be numeric, got dtype {X.dtype}.")
    if X.shape[1] != estimator.n_features_in_:
        raise ValueError(
            f"X has {X.shape[1]} features, but {type(estimator).__name__} was fitted with "
            f"{estimator.n_features_in_}."
        )
    if X.numblocks[1] > 1:
        X = X.rechunk({1: -1})
    n_outputs = int(np.size(estimator.intercept_))
    outputs = () if np.ndim(estimator.intercept_) == 0 else (n_outputs,)
    stacked = outputs + ((2,) if return_std else ())
    chunks = (X.chunks[0], *((s,) for s in stacked))
    new_axis = list(range(2, len(stacked) + 1)) if len(stacked) > 1 else None
    out = da.map_blocks(
        _predict_block,
        dask.delayed(_slim(estimator), pure=True),
        X,
        return_std,
        stacked,
        chunks=chunks,
        drop_axis=None if stacked else 1,
        new_axis=new_axis,
        dtype=np.float64,
        meta=np.empty((0,) * (1 + len(stacked))),
    )
    return (out[..., 0], out[..., 1]) if return_std else out


@dataclasses.dataclass(frozen=True)
class DaskData:
    """Training data in Dask arrays: the statistics reduced on the cluster, then the type-II fit
    from them (the path of ``chunk_rows``, see the "Large data" page).

    The client holds the centres, at most
    :data:`~bayes_rvm.estimators.width_selection.SHARED_MAX_SAMPLES` rows for the default width
    rule and the M x M statistics; the fit keeps no training rows, so ``idata_`` and
    ``refit_loo`` raise as after any fit from statistics, and ``make_model()`` builds the model
    of the statistics without the rows of its pointwise log likelihood. Rows that repeat others
    exactly are not dropped (a continuous sample has none; the in-memory fit drops them).

    Parameters
    ----------
    X, y : dask.array.Array
        Checked by :func:`dask_training_data`.
    noise_variance : float or None
        A fixed noise variance in the units of ``y`` (None: estimated).
    progress : bool or "auto"
        Report the rows whose blocks are done on stderr (:func:`dask_statistics`).
    """

    X: object
    y: object
    noise_variance: float | None = None
    progress: bool | str = False

    def fit(self, engine, *, search, centres, scale_gamma: bool, fit_basis):
        """The basis on ``centres``, the problem of the reduced statistics and the fit there.

        ``search`` is the fit's width search (None: the width is not learned); ``scale_gamma``
        resolves ``gamma="scale"`` on the cluster; ``fit_basis(X, centres, gamma)`` builds the
        basis. Returns a :class:`~bayes_rvm.estimators.large_data.DataFit`.
        """
        from bayes_rvm.estimators.large_data import DataFit

        start = time.perf_counter()
        gamma = path = ls = None
        if search is not None:  # the default or "evidence_ard": the others are refused
            ls, path = self._shared_width(search, centres)
            g = search.rule.kernel.gamma(ls)
            gamma = float(g[0]) if ls.size == 1 else g
        elif scale_gamma:
            gamma = dask_scale_gamma(self.X)
        # The centres stand in for X: the basis reads only its feature count and a resolved gamma.
        basis = fit_basis(centres, centres, gamma)
        stats = dask_statistics(basis, self.X, self.y, progress=self.progress)
        problem = Problem.from_statistics(stats, noise_variance=self.noise_variance)
        fit = fit_problem(problem, engine)
        found = None
        if path is not None:
            seconds = time.perf_counter() - start
            found = WidthFit(ls, fit, None, path, n_fits=1, seconds=seconds)
        return DataFit(basis, problem, fit, stats, path, found)

    def _shared_width(self, search, centres) -> tuple[np.ndarray, object]:
        """The default width rule on the rows the in-memory fit would use; ``(ls, path)``.

        The same subset of at most ``SHARED_MAX_SAMPLES`` rows (its seed: ``random_state``, 0 if
        None), fetched once, with the targets scaled by their root-mean-square over all rows
        (one pass over ``y``), as the in-memory problem scales them.
        """
        import dask

        X, y = self.X, self.y
        n = X.shape[0]
        rows = np.arange(n)
        if n > SHARED_MAX_SAMPLES:
            seed = 0 if search.random_state is None else search.random_state
            rows = np.sort(check_random_state(seed).choice(n, SHARED_MAX_SAMPLES, replace=False))
        xs, ys, tt = dask.compute(X[rows], y[rows], (y**2).sum())
        T = ys[:, None] if ys.ndim == 1 else ys
        scale = float(np.sqrt(tt / (n * T.shape[1])))
        scale = scale if scale > 0 else 1.0
        noise_variance = self.noise_variance
        beta = None if noise_variance is None else scale**2 / noise_variance
        ls, path, _ = search.shared(
            xs,
            centres,
            lambda Phi, r: shared_evidence(Phi, T[r] / scale, beta=beta),
            T / scale if search.per_feature_widths(xs) else None,
            beta=beta,
        )
        # The curve's evidence is over these rows, in the user's units.
        log_scale = T.shape[1] * rows.size * np.log(scale)
        return ls, dataclasses.replace(path, log_evidence=path.log_evidence - log_scale)
