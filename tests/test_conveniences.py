"""What a scikit-learn or PyMC user expects on first contact: shuffled generators, sample_weight
refused by name, float32 kept (regression and class probabilities), and optional engines that
name the extra installing them."""

import sys

import numpy as np
import pytest
from sklearn.model_selection import KFold, cross_val_score

from bayes_rvm import RVC, RVR
from bayes_rvm._optional import MissingExtraError, require
from bayes_rvm.datasets import make_sinc, sinc


def test_make_sinc_shuffles_the_same_pairs_and_keeps_them_sorted_on_request():
    X, y = make_sinc(50, noise=0.1, random_state=4)
    Xs, ys = make_sinc(50, noise=0.1, random_state=4, shuffle=False)
    assert np.all(np.diff(Xs[:, 0]) > 0) and not np.all(np.diff(X[:, 0]) > 0)
    order = np.argsort(X[:, 0])
    np.testing.assert_array_equal(X[order], Xs)
    np.testing.assert_array_equal(y[order], ys)
    # the noise is that of the sorted grid: y - sinc(x) has the requested sd
    assert np.std(ys - sinc(Xs[:, 0])) == pytest.approx(0.1, rel=0.3)


def test_cross_val_score_on_make_sinc_is_sane():
    """Unshuffled 5-fold CV on sorted inputs extrapolates each fold (R^2 well below 0); on the
    default (shuffled) rows each fold interpolates, as on a shuffled KFold of the sorted rows."""
    X, y = make_sinc(100, noise=0.1, random_state=0)
    Xs, ys = make_sinc(100, noise=0.1, random_state=0, shuffle=False)
    shuffled = cross_val_score(RVR(), X, y, cv=5)
    reference = cross_val_score(RVR(), Xs, ys, cv=KFold(5, shuffle=True, random_state=1))
    assert shuffled.mean() > 0.8 and reference.mean() > 0.8
    assert cross_val_score(RVR(), Xs, ys, cv=5).mean() < 0


@pytest.mark.parametrize(
    "estimator", [RVR(), RVR(inference="mcmc"), RVR(inference="vi"), RVC()], ids=repr
)
def test_sample_weight_is_refused_by_name(estimator):
    X, y = make_sinc(20, random_state=0)
    if isinstance(estimator, RVC):
        y = (y > 0.2).astype(int)
    with pytest.raises(TypeError, match=r"\.fit does not take sample_weight") as info:
        estimator.fit(X, y, sample_weight=np.ones(20))
    assert "sampler arguments" not in str(info.value)
    assert ("student_t" in str(info.value)) == isinstance(estimator, RVR)


def test_float32_inputs_give_float32_predictions():
    from sklearn.utils.estimator_checks import check_estimators_dtypes

    X, y = make_sinc(60, noise=0.1, random_state=0)
    model = RVR(gamma=0.1).fit(X, y)
    mean64, std64 = model.predict(X, return_std=True)
    mean32, std32 = model.predict(X.astype(np.float32), return_std=True)
    assert mean64.dtype == std64.dtype == np.float64
    assert mean32.dtype == std32.dtype == np.float32
    np.testing.assert_allclose(mean32, mean64, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(std32, std64, rtol=1e-5)
    _, cov32 = model.predict(X[:5].astype(np.float32), return_cov=True)
    assert cov32.dtype == np.float32
    check_estimators_dtypes("RVR", RVR())


def test_float32_inputs_give_float32_class_probabilities():
    X, y = make_sinc(60, noise=0.1, random_state=0)
    labels = (y > 0.2).astype(int)
    clf = RVC(gamma=0.5).fit(X, labels)
    p64, p32 = clf.predict_proba(X), clf.predict_proba(X.astype(np.float32))
    assert p64.dtype == np.float64 and p32.dtype == np.float32
    np.testing.assert_allclose(p32, p64, rtol=1e-6, atol=1e-7)
    assert clf.decision_function(X.astype(np.float32)).dtype == np.float32
    # the labels come from the float64 scores: the same as for float64 inputs
    np.testing.assert_array_equal(clf.predict(X.astype(np.float32)), clf.predict(X))


def test_a_missing_optional_package_names_its_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "numpyro", None)  # import numpyro raises ImportError
    with pytest.raises(MissingExtraError, match=r'pip install "bayes-rvm\[jax\]"') as info:
        require("numpyro", "jax", 'sampler="numpyro"')
    assert isinstance(info.value, ImportError)
    assert str(info.value).startswith('sampler="numpyro" needs numpyro, which is not installed')
    assert require("json", "jax", "anything").dumps([1]) == "[1]"


def test_the_numpyro_sampler_without_numpyro_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "numpyro", None)
    monkeypatch.setitem(sys.modules, "jax", None)
    X, y = make_sinc(20, random_state=0)
    model = RVR(gamma=0.1, inference="mcmc", sampler_config={"sampler": "numpyro", "draws": 10})
    with pytest.raises(ImportError, match=r"sampler='numpyro' needs jax.*bayes-rvm\[jax\]"):
        model.fit(X, y, progressbar=False)


def test_a_dask_client_without_dask_names_the_extra(monkeypatch):
    from bayes_rvm.studies.runner import _check_client

    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(ImportError, match=r'pip install "bayes-rvm\[dask\]"'):
        _check_client(object())


# -- progress of long passes -------------------------------------------------------------------


@pytest.fixture
def immediate_progress(monkeypatch):
    """Progress shown from the first block on, a line per update (stderr is not a terminal)."""
    import bayes_rvm.progress as progress

    monkeypatch.setattr(progress, "QUIET_SECONDS", 0.0)
    monkeypatch.setattr(progress, "LOG_SECONDS", 0.0)


def _progress_lines(err: str) -> list[tuple[int, int]]:
    import re

    return [
        (int(a.replace(",", "")), int(b.replace(",", "")))
        for a, b in re.findall(
            r"sufficient statistics[^:]*: +\d+% \(([\d,]+) of ([\d,]+) rows", err
        )
    ]


def test_a_statistics_pass_reports_its_rows_with_verbose_only(immediate_progress, capsys):
    """RVR(verbose=True) on the statistics path: a line per block of 300 rows, rows rising to
    N; the same fit without verbose (stderr not a terminal) writes nothing, and both fits are
    the same."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(1500, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=1500)
    kwargs = {"gamma": 1.0, "centres": ("random", 40), "chunk_rows": 300, "random_state": 0}
    loud = RVR(verbose=True, **kwargs).fit(X, y)
    lines = _progress_lines(capsys.readouterr().err)
    assert lines == [(300 * k, 1500) for k in range(1, 6)]
    quiet = RVR(**kwargs).fit(X, y)
    assert capsys.readouterr().err == ""
    np.testing.assert_array_equal(loud.predict(X[:20]), quiet.predict(X[:20]))


def test_progress_waits_out_short_passes_and_redraws_in_place_on_a_terminal(monkeypatch):
    import io

    import bayes_rvm.progress as progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    quick = Terminal()
    bar = progress.Progress("pass", 10, "rows", enabled=True, stream=quick)
    bar.update(10)
    bar.close()
    assert quick.getvalue() == ""  # ended within QUIET_SECONDS
    monkeypatch.setattr(progress, "QUIET_SECONDS", 0.0)
    monkeypatch.setattr(progress, "_REDRAW_SECONDS", 0.0)
    term = Terminal()
    with progress.Progress("pass", 10, "rows", enabled="auto", stream=term) as bar:
        assert bar.enabled is False  # "auto" asks whether sys.stderr (pytest's) is a terminal
    with progress.Progress("pass", 10, "rows", enabled=True, stream=term) as bar:
        bar.update(5, blocks=(1, 2))
        bar.update(10, blocks=(2, 2))
    text = term.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n") and text.count("\n") == 1
    assert "bayes_rvm: pass: 100% (10 of 10 rows, block 2 of 2)" in text
    inner = Terminal()  # a pass within a fit: erased at its end, the fit's line drawn there next
    with progress.Progress("pass", 10, "rows", enabled=True, stream=inner, terminal="erase") as bar:
        bar.update(10)
    assert inner.getvalue().endswith("rows), 0 s\x1b[K\r\x1b[K") and "\n" not in inner.getvalue()
    rounds = Terminal()  # the rounds of a fit: a line each, none added at the end
    with progress.Progress(
        "fit", None, "rounds", enabled=True, stream=rounds, terminal="lines"
    ) as bar:
        bar.update(1, detail=lambda: "3 relevance vectors")
        bar.update(2, detail=lambda: "2 relevance vectors")
    assert rounds.getvalue().count("\n") == 2 and rounds.getvalue().endswith("\x1b[K\n")
    assert "bayes_rvm: fit: 2 rounds, 2 relevance vectors, 0 s" in rounds.getvalue()
    with pytest.raises(ValueError, match="progress must be"):
        progress.Progress("pass", 1, "rows", enabled="yes")
    with pytest.raises(ValueError, match="terminal must be"):
        progress.Progress("pass", 1, "rows", terminal="bar")


def test_a_dask_pass_on_the_local_scheduler_reports_its_blocks(immediate_progress, capsys):
    da = pytest.importorskip("dask.array")
    import dask

    from bayes_rvm.basis.kernels import KernelBasis
    from bayes_rvm.basis.statistics import accumulate
    from bayes_rvm.estimators.distributed import dask_statistics

    rng = np.random.default_rng(1)
    X = rng.normal(size=(1000, 2))
    y = X[:, 0] + 0.1 * rng.normal(size=1000)
    basis = KernelBasis("rbf", gamma=0.5).fit(X, centres=X[:30])
    with dask.config.set(scheduler="synchronous"):
        stats = dask_statistics(
            basis, da.from_array(X, chunks=(250, 2)), da.from_array(y, chunks=250), progress=True
        )
    assert _progress_lines(capsys.readouterr().err) == [(250 * k, 1000) for k in range(1, 5)]
    np.testing.assert_allclose(stats.gram, accumulate(basis, X, y).gram, rtol=1e-12)


def test_auto_progress_follows_the_terminal_and_quiet_turns_it_off(monkeypatch):
    import bayes_rvm.progress as progress
    from bayes_rvm.progress import no_auto_progress, progress_wanted

    monkeypatch.setattr(progress, "interactive", lambda: True)
    assert progress_wanted("auto") and progress_wanted(True) and not progress_wanted(False)
    with no_auto_progress():
        assert not progress_wanted("auto") and progress_wanted(True)
    assert progress_wanted("auto")
    monkeypatch.setattr(progress, "interactive", lambda: False)
    assert not progress_wanted("auto")


def _numbers(pattern: str, err: str) -> list[tuple]:
    """The groups of ``pattern`` in every line of ``err``, as numbers."""
    import re

    return [tuple(float(g.replace(",", "")) for g in m) for m in re.findall(pattern, err)]


def test_a_chunked_rvc_reports_every_round_and_every_pass_with_verbose_only(
    immediate_progress, capsys
):
    """RVC(chunk_rows=...): a line per round (rounds 1..n_iter_, each with the log evidence of
    the fit's trace and, last, the relevance vectors kept) and each pass over the rows ends at
    100% (as many as ``chunked_passes_`` counts); without verbose (stderr not a terminal)
    nothing, and the same fit."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 2))
    y = (X[:, 0] * X[:, 1] + 0.3 * rng.normal(size=2000) > 0).astype(int)
    kwargs = {"gamma": 0.5, "centres": ("random", 40), "chunk_rows": 500, "random_state": 0}
    loud = RVC(verbose=True, **kwargs).fit(X, y)
    err = capsys.readouterr().err
    rounds = _numbers(
        r"fit_laplace_chunked: (\d+) rounds, (\d+) relevance vectors, "
        r"log evidence (\S+), ",
        err,
    )
    assert [r[0] for r in rounds] == list(range(1, loud.n_iter_ + 1))
    np.testing.assert_allclose([r[2] for r in rounds], loud.fit_.trace, rtol=1e-7)
    assert rounds[-1][1] == loud.active_.size
    passes = _numbers(r"pass (\d+) over the rows: 100% \(([\d,]+) of", err)
    counted = loud.chunked_passes_
    n_passes = counted["full"] + counted["columns"] + counted["cached"]
    assert passes == [(k, 2000) for k in range(1, n_passes + 1)] and n_passes > loud.n_iter_
    # the Newton searches of the mode inside each round report their steps too
    assert _numbers(r"posterior mode: (\d+) Newton steps", err)
    quiet = RVC(**kwargs).fit(X, y)
    assert capsys.readouterr().err == ""
    np.testing.assert_array_equal(loud.predict_proba(X[:20]), quiet.predict_proba(X[:20]))


def test_the_newton_mode_search_reports_each_step(immediate_progress, capsys):
    """A line per Newton step, numbered 1..n_iter, with the largest gradient entry before the
    step: falling, and above the converged one; nothing without progress."""
    from bayes_rvm.evidence.mode import newton_mode

    rng = np.random.default_rng(1)
    Phi = rng.normal(size=(300, 6))
    t = (Phi @ rng.normal(size=6) + rng.logistic(size=300) > 0).astype(float)[:, None]
    args = (Phi, t, np.full(6, 1e-2), np.zeros((6, 1)), "bernoulli", 1e-10, 50)
    post = newton_mode(*args, progress=True)
    lines = _numbers(
        r"posterior mode: (\d+) Newton steps, largest gradient (\S+), ", capsys.readouterr().err
    )
    assert post.converged and [n for n, _ in lines] == list(range(1, post.n_iter + 1))
    grads = [g for _, g in lines]
    assert grads[-1] < grads[0] and grads[-1] > post.grad_norm
    quiet = newton_mode(*args)
    assert capsys.readouterr().err == ""
    np.testing.assert_array_equal(quiet.mean, post.mean)


def test_an_engine_reports_steps_relevance_vectors_and_log_evidence(monkeypatch, capsys):
    """Throttled (a line per 10 s off a terminal), a fit that ends within them writes its first
    step and, at the end, its last state: the fit's step count, active columns and log
    evidence; unthrottled, one line per recorded objective; "auto" off a terminal: nothing."""
    import bayes_rvm.progress as progress
    from bayes_rvm.evidence import EvidenceOptions, fit_sequential

    rng = np.random.default_rng(3)
    X = np.sort(rng.uniform(-5, 5, 120))
    Phi = np.exp(-0.5 * (X[:, None] - X[None, ::3]) ** 2)
    t = np.sinc(X / np.pi) + 0.1 * rng.normal(size=X.size)
    pattern = r"fit_sequential: ([\d,]+) steps, (\d+) relevance vectors, log evidence (\S+), "
    monkeypatch.setattr(progress, "QUIET_SECONDS", 0.0)
    fit = fit_sequential(Phi, t, progress=True)
    lines = _numbers(pattern, capsys.readouterr().err)
    steps = len(fit.trace) - 1  # the first objective is the start's
    assert lines[0][0] == 1 and len(lines) == 2
    assert lines[-1][:2] == (steps, fit.active.size)
    np.testing.assert_allclose(lines[-1][2], fit.trace[-1], rtol=1e-7)
    monkeypatch.setattr(progress, "LOG_SECONDS", 0.0)
    fit_sequential(Phi, t, progress=True)
    assert [n for n, _, _ in _numbers(pattern, capsys.readouterr().err)] == list(
        range(1, steps + 1)
    )
    fit_sequential(Phi, t, progress="auto")
    assert capsys.readouterr().err == ""
    with pytest.raises(ValueError, match="progress must be"):
        EvidenceOptions(progress="yes")


def test_the_default_width_search_reports_the_widths_it_tries(immediate_progress, capsys):
    """RVR(verbose=True): a line per width the default rule evaluates, the widths of
    ``width_path_``; silent without verbose."""
    X, y = make_sinc(200, noise=0.1, random_state=0)
    loud = RVR(verbose=True).fit(X, y)
    tried = _numbers(r"width search: (\d+) widths, length scale (\S+), ", capsys.readouterr().err)
    path = loud.width_path_.length_scale
    assert [n for n, _ in tried] == list(range(1, path.size + 1))
    np.testing.assert_allclose(sorted(ls for _, ls in tried), np.sort(path), rtol=5e-3)
    RVR().fit(X, y)
    assert capsys.readouterr().err == ""
