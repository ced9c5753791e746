"""Model comparison studies: rows against direct fits, the store, resuming, Dask, a dead worker."""

import json
import os
import shutil
import signal

import arviz as az
import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.metrics import log_loss

from bayes_rvm.datasets import make_friedman, make_sinc
from bayes_rvm.estimators.classifier import RVC
from bayes_rvm.estimators.regressor import RVR
from bayes_rvm.posterior.comparison import elpd
from bayes_rvm.studies.runner import (
    COLUMNS,
    _regression_nlpd,
    load_fit,
    load_study,
    run_study,
    task_seed,
)

#: Columns that describe the run (time, process) rather than the fit.
RUN_COLUMNS = ["fit_time", "worker"]


def _sinc(n=20, seed=0):
    X, y = make_sinc(n, noise=0.1, random_state=seed, shuffle=False)
    Xt, yt = make_sinc(60, noise=0.1, random=True, random_state=seed + 100, shuffle=False)
    return X, y, Xt, yt


def assert_same_table(a: pd.DataFrame, b: pd.DataFrame, rtol=1e-8):
    assert list(a.columns) == list(b.columns) == list(COLUMNS)
    a = a.drop(columns=RUN_COLUMNS).reset_index(drop=True)
    b = b.drop(columns=RUN_COLUMNS).reset_index(drop=True)
    num = a.select_dtypes("number").columns
    pd.testing.assert_frame_equal(a.drop(columns=num), b.drop(columns=num))
    np.testing.assert_allclose(
        a[num].to_numpy(float), b[num].to_numpy(float), rtol=rtol, atol=rtol, equal_nan=True
    )


# ---------------------------------------------------------------------------------------------
# Seeds and rows
# ---------------------------------------------------------------------------------------------
def test_task_seed_depends_on_the_names_and_the_study_seed_only():
    s = task_seed(3, "sinc", "ARD")
    assert s == task_seed(3, "sinc", "ARD")
    assert 0 <= s < 2**32
    others = {
        task_seed(4, "sinc", "ARD"),
        task_seed(3, "sinc", "ARD2"),
        task_seed(3, "sinc2", "ARD"),
    }
    assert s not in others and len(others) == 3
    # The names are separated: ("ab", "c") and ("a", "bc") are different tasks.
    assert task_seed(3, "ab", "c") != task_seed(3, "a", "bc")


def test_regression_row_equals_a_direct_fit():
    X, y, Xt, yt = _sinc()
    table = run_study({"ARD": RVR(gamma=0.1)}, {"sinc": (X, y, Xt, yt)}, n_jobs=1, random_state=7)
    row = table.iloc[0]
    assert row["seed"] == task_seed(7, "sinc", "ARD")
    direct = RVR(gamma=0.1, random_state=int(row["seed"])).fit(X, y)
    # A type-II regression fit is scored by leave-one-out refits (no Pareto k)
    refits = direct.refit_loo().elpd_i
    mean, std = direct.predict(Xt, return_std=True)
    expected = {
        "elpd_loo": refits.sum(),
        "elpd_loo_se": np.sqrt(refits.size * np.var(refits)),
        "test_rmse": np.sqrt(np.mean((mean - yt) ** 2)),
        "test_nlpd": -np.mean(norm.logpdf(yt, mean, std)),
        "n_relevance_vectors": direct.n_relevance_vectors_,
        "noise_sd": np.sqrt(direct.noise_variance_),
        "log_evidence": direct.log_evidence_,
    }
    for name, value in expected.items():
        assert row[name] == pytest.approx(float(value), rel=1e-12), name
    assert row["method"] == "type2" and row["estimator"] == "RVR"
    assert (row["n_train"], row["n_test"]) == (20, 60)
    assert np.isnan(row[["max_rhat", "divergences", "test_error_rate"]].astype(float)).all()
    assert np.isnan(row[["n_pareto_k_high", "max_pareto_k"]].astype(float)).all()
    assert row["p_loo"] > 0
    assert row["fit_time"] > 0


def test_mixture_nlpd_agrees_with_the_gaussian_predictive():
    # The MCMC path averages the predictive density over draws of w; on a type-II fit's draws of
    # w ~ N(m, Sigma) (sigma fixed) that average converges to the exact Gaussian predictive.
    X, y, Xt, yt = _sinc(30)
    est = RVR(gamma=0.1, random_state=0).fit(X, y)
    exact = _regression_nlpd(est, est.idata_, "type2", Xt, yt)
    mixture = _regression_nlpd(est, est.idata_, "mcmc", Xt, yt)
    assert mixture == pytest.approx(exact, abs=0.01)
    mean, std = est.predict(Xt, return_std=True)
    assert exact == pytest.approx(-np.mean(norm.logpdf(yt, mean, std)), rel=1e-12)


def test_classifier_row_has_error_rate_and_log_loss():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = (X[:, 0] + 0.5 * rng.normal(size=60) > 0).astype(int)
    Xt = rng.normal(size=(80, 2))
    yt = (Xt[:, 0] > 0).astype(int)
    table = run_study({"RVC": RVC(gamma=0.5)}, {"blobs": (X, y, Xt, yt)}, n_jobs=1, random_state=1)
    row = table.iloc[0]
    direct = RVC(gamma=0.5, random_state=int(row["seed"])).fit(X, y)
    assert row["test_error_rate"] == pytest.approx(np.mean(direct.predict(Xt) != yt), abs=0)
    assert row["test_log_loss"] == pytest.approx(log_loss(yt, direct.predict_proba(Xt)), rel=1e-12)
    assert row["n_relevance_vectors"] == direct.n_relevance_vectors_
    assert np.isnan(row["test_rmse"]) and np.isnan(row["noise_sd"])


def test_mcmc_row_reports_diagnostics():
    X, y, Xt, yt = _sinc()
    mcmc = RVR(
        gamma=0.1,
        inference="mcmc",
        sampler_config={"mcmc_basis": "relevant", "draws": 60, "tune": 60, "chains": 2},
    )
    table = run_study({"MCMC": mcmc}, {"sinc": (X, y, Xt, yt)}, n_jobs=1, random_state=2)
    row = table.iloc[0]
    direct = mcmc.set_params(random_state=int(row["seed"])).fit(X, y)
    post = direct.idata_["posterior"].dataset
    # A different seed than the study's would give other draws: these must be the same ones.
    assert row["noise_sd"] == pytest.approx(float(post["sigma"].mean()), rel=1e-12)
    assert row["elpd_loo"] == pytest.approx(az.loo(direct.idata_).elpd, rel=1e-12)
    rhat = az.rhat(post[["sigma"]].assign(log_alpha=np.log(post["alpha"])))
    assert row["max_rhat"] >= float(rhat["sigma"]) - 1e-12
    assert row["max_rhat"] == pytest.approx(
        max(float(rhat["sigma"]), float(rhat["log_alpha"].max())), rel=1e-12
    )
    assert row["divergences"] == int(direct.idata_["sample_stats"]["diverging"].sum())
    assert row["method"] == "mcmc" and np.isnan(row["log_evidence"])
    assert "SamplingDiagnosticsWarning" in row["warnings"]


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("models", "datasets", "match"),
    [
        ({}, {"d": ([[0.0]], [0.0])}, "non-empty mapping"),
        ({"m": "RVR"}, {"d": ([[0.0]], [0.0])}, r"models\['m'\] must be a scikit-learn"),
        ({"m": RVR()}, {"d": ([[0.0], [1.0]],)}, r"datasets\['d'\] must be \(X, y\)"),
        ({"m": RVR()}, {"d": ([[0.0], [1.0]], [0.0])}, "X has 2 rows but y has 1"),
        ({"m": RVR()}, {"d": ([[0.0]], [0.0], [[1.0]], [1.0, 2.0])}, "test X has 1 rows"),
    ],
)
def test_bad_grids_are_refused(models, datasets, match):
    with pytest.raises((TypeError, ValueError), match=match):
        run_study(models, datasets, n_jobs=1)


def test_bad_random_state_and_n_jobs():
    data = {"d": _sinc()[:2]}
    with pytest.raises(ValueError, match="random_state must be >= 0"):
        run_study({"m": RVR()}, data, random_state=-1)
    with pytest.raises(TypeError, match="random_state must be None"):
        run_study({"m": RVR()}, data, random_state=1.5)
    with pytest.raises(ValueError, match="n_jobs must be a nonzero int"):
        run_study({"m": RVR()}, data, n_jobs=0)


def test_a_failing_fit_names_itself_and_keeps_the_finished_ones(tmp_path):
    X, y = _sinc()[:2]
    models = {"good": RVR(gamma=0.1), "bad": RVR(kernel="no-such-kernel")}
    with pytest.raises(ValueError) as info:
        run_study(models, {"sinc": (X, y)}, n_jobs=1, store=tmp_path / "s", random_state=0)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "model 'bad' on data set 'sinc'" in notes
    assert "1 of 2 fits are stored" in notes
    assert len(load_study(tmp_path / "s")) == 1


# ---------------------------------------------------------------------------------------------
# The store
# ---------------------------------------------------------------------------------------------
def _grid():
    X, y, Xt, yt = _sinc()
    X2, y2 = make_friedman(2, 30, noise=0.1, random_state=0)
    models = {
        "ARD g=0.1": RVR(gamma=0.1),
        "ARD g=1": RVR(gamma=1.0),
        "Student-t": RVR(gamma=0.1, prior="student_t"),
    }
    return models, {"sinc": (X, y, Xt, yt), "friedman2": (X2, y2)}


@pytest.fixture(scope="module")
def stored_grid(tmp_path_factory):
    """The study of ``_grid()`` (seed 5) stored once for the module: the store, the table, and
    the (data set, model) of each row its progress reported. Tests that write to the store work
    on a copy (``_copy_store``)."""
    models, datasets = _grid()
    store = tmp_path_factory.mktemp("grid") / "study"
    fitted = []
    table = run_study(
        models,
        datasets,
        store=store,
        n_jobs=1,
        random_state=5,
        progress=lambda i, n, row: fitted.append((row["dataset"], row["model"])),
    )
    return store, table, fitted


def _copy_store(stored_grid, tmp_path):
    store = tmp_path / "study"
    shutil.copytree(stored_grid[0], store)
    return store


def test_store_reloads_without_refitting_and_extends(tmp_path, stored_grid):
    models, datasets = _grid()
    store = _copy_store(stored_grid, tmp_path)
    _, first, fitted = stored_grid
    assert len(fitted) == 6 and len(first) == 6
    assert list(zip(first["dataset"], first["model"], strict=True)) == [
        (d, m) for d in datasets for m in models
    ]
    loaded = load_study(store)
    pd.testing.assert_frame_equal(loaded, first)
    assert loaded.attrs["random_state"] == 5 and loaded.attrs["missing"] == []
    # Every stored DataTree gives back the row's LOO (the type-II refit terms travel with it).
    for _, row in first.iterrows():
        dt = load_fit(store, row["dataset"], row["model"])
        assert elpd(dt)[0].elpd == pytest.approx(row["elpd_loo"], rel=1e-12)

    # A second run (the seed comes from the store) fits nothing and returns the same table.
    fitted = []
    again = run_study(models, datasets, store=store, n_jobs=1, progress=lambda *a: fitted.append(a))
    assert fitted == []
    pd.testing.assert_frame_equal(again, first)

    # One more model: only its two fits run, and the earlier rows are untouched.
    models["ARD g=3"] = RVR(gamma=3.0)
    bigger = run_study(
        models,
        datasets,
        store=store,
        n_jobs=1,
        progress=lambda i, n, row: fitted.append((row["dataset"], row["model"])),
    )
    assert sorted(fitted) == [("friedman2", "ARD g=3"), ("sinc", "ARD g=3")]
    assert len(bigger) == 8
    pd.testing.assert_frame_equal(
        bigger[bigger["model"] != "ARD g=3"].reset_index(drop=True), first
    )


def test_store_refuses_other_settings_data_or_seed(tmp_path, stored_grid):
    models, datasets = _grid()
    store = _copy_store(stored_grid, tmp_path)
    with pytest.raises(ValueError, match="random_state=5, not 6"):
        run_study(models, datasets, store=store, random_state=6)
    with pytest.raises(ValueError, match="'ARD g=1' on data set 'sinc' with other estimator"):
        run_study({**models, "ARD g=1": RVR(gamma=2.0)}, datasets, store=store)
    X, y, Xt, yt = datasets["sinc"]
    with pytest.raises(ValueError, match="with other data"):
        run_study(models, {**datasets, "sinc": (X, y + 1, Xt, yt)}, store=store)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a study store"):
        run_study(models, datasets, store=tmp_path / "other")
    with pytest.raises(FileNotFoundError, match="no study"):
        load_study(tmp_path / "nothing")
    with pytest.raises(FileNotFoundError, match="no finished fit"):
        load_fit(store, "sinc", "no such model")


def test_store_settings_record_the_grid(stored_grid):
    store = stored_grid[0]
    settings = json.loads((store / "study.json").read_text())
    assert settings["entropy"] == 5
    tasks = settings["tasks"]
    assert len(tasks) == 6
    one = next(t for t in tasks.values() if t["model"] == "Student-t" and t["dataset"] == "sinc")
    assert one["seed"] == task_seed(5, "sinc", "Student-t")
    assert json.loads(one["spec"])["params"]["prior"] == "student_t"
    # Estimators by their short names: a class that moves keeps the store resumable.
    assert json.loads(one["spec"])["class"] == "RVR"
    assert settings["format"] == "bayes_rvm-study/4"
    assert "bayes_rvm." not in (store / "study.json").read_text()


# ---------------------------------------------------------------------------------------------
# A worker killed mid-study (local processes)
# ---------------------------------------------------------------------------------------------
class KillsItsProcess(RegressorMixin, BaseEstimator):
    """Kills the process that fits it while ``flag`` exists (a crashed worker); else a mean."""

    def __init__(self, flag=None):
        self.flag = flag

    def fit(self, X, y):
        if self.flag is not None and os.path.exists(self.flag):
            os.kill(os.getpid(), signal.SIGKILL)
        self.mean_ = float(np.mean(y))
        return self

    def predict(self, X, return_std=False):
        mean = np.full(len(X), self.mean_)
        return (mean, np.ones(len(X))) if return_std else mean


def test_killed_worker_loses_no_finished_fit_and_rerun_fits_only_the_rest(tmp_path):
    from joblib.externals.loky.process_executor import TerminatedWorkerError

    X, y, Xt, yt = _sinc()
    flag = tmp_path / "kill"
    flag.write_text("")
    models = {f"ARD g={g}": RVR(gamma=g) for g in (0.03, 0.1, 0.3, 1.0, 3.0)}
    models["killer"] = KillsItsProcess(flag=str(flag))
    datasets = {"sinc": (X, y, Xt, yt)}
    store = tmp_path / "study"
    stored = []
    with pytest.raises(TerminatedWorkerError) as info:
        run_study(
            models,
            datasets,
            store=store,
            n_jobs=2,
            random_state=3,
            progress=lambda i, n, row: stored.append(row["model"]),
        )
    assert "run the study again" in "\n".join(info.value.__notes__)
    before = load_study(store)
    assert "killer" not in set(before["model"])
    assert sorted(before["model"]) == sorted(stored) and len(stored) >= 1
    files = {p.name: p.read_bytes() for p in (store / "rows").iterdir()}

    flag.unlink()
    refitted = []
    # The rerun in this process: which tasks a rerun fits is the store's answer, the same with
    # any n_jobs (a fresh pool of two workers would cost their start, seconds, and show nothing
    # more: the killed pool is joblib's to replace).
    after = run_study(
        models,
        datasets,
        store=store,
        n_jobs=1,
        progress=lambda i, n, row: refitted.append(row["model"]),
    )
    assert sorted(refitted) == sorted(set(models) - set(stored))
    for name, content in files.items():  # finished fits were not redone
        assert (store / "rows" / name).read_bytes() == content
    reference = run_study(models, datasets, n_jobs=1, random_state=3)
    assert_same_table(after, reference)


# ---------------------------------------------------------------------------------------------
# A Dask cluster gives the serial table
# ---------------------------------------------------------------------------------------------
def _bench_grid(n, draws):
    """The grid of benchmarks/bench_study.py (one definition for the benchmark and this test)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_study.py"
    spec = importlib.util.spec_from_file_location("bench_study", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.grid(n, draws)


@pytest.mark.slow
def test_dask_local_cluster_gives_the_serial_table(tmp_path):
    distributed = pytest.importorskip("distributed")
    models, datasets = _bench_grid(n=30, draws=40)
    assert len(models) * len(datasets) >= 24
    serial = run_study(models, datasets, n_jobs=1, random_state=11)
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        on_cluster = run_study(
            models, datasets, client=client, random_state=11, store=tmp_path / "study"
        )
    assert_same_table(on_cluster, serial)
    assert on_cluster["worker"].nunique() == 2  # both workers took fits
    assert (on_cluster["method"] == "mcmc").sum() == 4
    assert np.isfinite(on_cluster["elpd_loo"]).all()
    assert np.isfinite(on_cluster["max_rhat"][on_cluster["method"] == "mcmc"]).all()
    pd.testing.assert_frame_equal(load_study(tmp_path / "study"), on_cluster)


# ---------------------------------------------------------------------------------------------
# The TOML file, the command and the plot
# ---------------------------------------------------------------------------------------------
CONFIG = """
[study]
random_state = 4
store = "store"
output = "out"

[datasets.sinc]
source = "sinc"
n_samples = 20
noise = 0.1
n_test = 30

[datasets.friedman2]
source = "friedman2"
n_samples = 25
noise = 0.1
random_state = 1
n_test = 10

[models."ARD"]
gamma = 0.1

[models."Student-t"]
estimator = "RVR"
gamma = 0.1
prior = "student_t"
"""


def test_read_config_builds_the_grid(tmp_path):
    from bayes_rvm.studies.runner import read_config

    path = tmp_path / "s.toml"
    path.write_text(CONFIG)
    config = read_config(path)
    assert config.store == tmp_path / "store" and config.output == tmp_path / "out"
    assert config.random_state == 4 and config.n_jobs is None
    assert config.models["Student-t"].get_params()["prior"] == "student_t"
    X, _, Xt, _ = config.datasets["sinc"]
    np.testing.assert_array_equal(X, make_sinc(20, noise=0.1, random_state=0)[0])
    assert Xt.shape == (30, 1) and X.min() <= Xt.min() and Xt.max() <= X.max()
    X2, _, X2t, _ = config.datasets["friedman2"]
    full = make_friedman(2, 35, noise=0.1, random_state=1)
    np.testing.assert_array_equal(np.r_[X2, X2t], full[0])


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[study]\nseed = 1\n", r"\[study\] unknown keys \['seed'\]"),
        ('[datasets.d]\nsource = "sinc"\n', r"no \[models.NAME\] tables"),
        ('[datasets.d]\nsource = "iris"\n[models.m]\n', r"\[datasets.d\] source must be"),
        ('[datasets.d]\nsource = "sinc"\nwidth = 2\n[models.m]\n', r"bad settings for source"),
        (
            '[datasets.d]\nsource = "sinc"\n[models.m]\ngama = 1\n',
            r"RVR has no parameters \['gama'\]",
        ),
        ('[datasets.d]\nsource = "sinc"\n[models.m]\nestimator = "SVR"\n', "RVR or RVC"),
        ("[study\n", "not valid TOML"),
    ],
)
def test_bad_config_files_are_named(tmp_path, text, match):
    from bayes_rvm.studies.runner import read_config

    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        read_config(path)


@pytest.mark.parametrize(
    ("target", "model", "match"),
    [
        (
            "kind",
            "",
            r"\[models.m\] an RVR fits numeric targets, and the target of datasets.d is "
            r"text \(first value 'a'\); estimator = \"RVC\"",
        ),
        (
            "y",
            'estimator = "RVC"\n',
            r"\[models.m\] an RVC fits class labels, and the target of "
            r"datasets.d is continuous \(first value 0.25\); estimator = \"RVR\"",
        ),
    ],
)
def test_a_target_the_model_cannot_fit_is_named_when_the_file_is_read(
    tmp_path, target, model, match
):
    from bayes_rvm.studies.runner import read_config

    rows = "".join(f"{0.1 * i},{0.25 + i},{'ab'[i % 2]}\n" for i in range(8))
    (tmp_path / "d.csv").write_text("x,y,kind\n" + rows)
    (tmp_path / "fit.csv").write_text("x,y,kind\n0.1,1,1\n0.2,0,0\n0.3,1,0\n")
    path = tmp_path / "s.toml"
    for train, test in (("d.csv", None), ("fit.csv", "d.csv")):  # the test targets too
        source = f'path = "{train}"' + (f'\ntest_path = "{test}"' if test else "")
        path.write_text(
            f'[datasets.d]\nsource = "csv"\n{source}\ntarget = "{target}"\n'
            f'features = ["x"]\n[models.m]\n{model}'
        )
        with pytest.raises(ValueError, match=match):
            read_config(path)


def test_study_command_writes_table_and_plot(tmp_path, capsys):
    from bayes_rvm.cli import main
    from bayes_rvm.studies.runner import read_config

    path = tmp_path / "s.toml"
    # In this process (n_jobs = 1): the command's table is run_study's whoever fits the rows, and
    # a pool of worker processes costs their start (seconds); the killed-worker test runs one.
    path.write_text(CONFIG.replace("[study]\n", "[study]\nn_jobs = 1\n"))
    assert main(["study", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "[4/4]" in err and "friedman2 / Student-t" in err
    table = pd.read_csv(tmp_path / "out" / "study.csv", keep_default_na=False, na_values=[""])
    assert all(w.endswith(f":{os.getpid()}") for w in table["worker"])  # the configured n_jobs
    config = read_config(path)
    reference = run_study(config.models, config.datasets, n_jobs=1, random_state=4)
    for col in ("elpd_loo", "elpd_loo_se", "test_rmse", "test_nlpd", "noise_sd"):
        np.testing.assert_allclose(table[col], reference[col], rtol=1e-12)
    assert "elpd_loo" in out and "wrote" in out
    assert (tmp_path / "out" / "study.png").read_bytes()[:4] == b"\x89PNG"
    pd.testing.assert_frame_equal(
        load_study(tmp_path / "store")[["elpd_loo"]], reference[["elpd_loo"]]
    )
    with pytest.raises(SystemExit, match="no study configuration"):
        main(["study", str(tmp_path / "missing.toml")])


def test_plot_study_draws_elpd_and_se_per_data_set():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bayes_rvm.plots import plot_study

    table = pd.DataFrame(
        {
            "dataset": ["a", "a", "b"],
            "model": ["m1", "m2", "m1"],
            "elpd_loo": [-10.0, -12.5, 3.0],
            "elpd_loo_se": [1.0, 2.0, 0.5],
            "n_pareto_k_high": [0, 2, 0],
        }
    )
    fig = plot_study(table, n_se=2)
    ax_a, ax_b = fig.axes
    assert ax_b.get_title() == "b"
    assert ax_a.get_title() == "a" and [t.get_text() for t in ax_a.get_yticklabels()] == [
        "m1",
        "m2",
    ]
    # The error bars span elpd ± 2 se.
    spans = sorted(
        tuple(np.round(seg[:, 0], 6)) for coll in ax_a.collections for seg in coll.get_segments()
    )
    assert spans == [(-16.5, -8.5), (-12.0, -8.0)]
    assert ax_a.lines[-1].get_xdata()[0] == -10.0  # the best model's line
    plt.close(fig)
    # The line marks the best fit to be trusted: not one that did not converge (it was).
    table["converged"] = [False, True, True]
    fig = plot_study(table)
    assert fig.axes[0].lines[-1].get_xdata()[0] == -10.0  # m2's k is high: all are flagged
    table["n_pareto_k_high"] = [0, 0, 0]
    fig = plot_study(table)
    assert fig.axes[0].lines[-1].get_xdata()[0] == -12.5
    plt.close("all")
    with pytest.raises(ValueError, match="lacks the columns"):
        plot_study(table.drop(columns="elpd_loo_se"))


@pytest.mark.slow
def test_study_command_on_a_dask_scheduler(tmp_path, capsys):
    distributed = pytest.importorskip("distributed")
    from bayes_rvm.cli import main

    path = tmp_path / "s.toml"
    path.write_text(CONFIG)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        assert main(["study", str(path), "--scheduler", cluster.scheduler_address]) == 0
    err = capsys.readouterr().err
    assert "[4/4]" in err
    on_cluster = load_study(tmp_path / "store")
    assert not any(w.endswith(f":{os.getpid()}") for w in on_cluster["worker"])  # not here
    from bayes_rvm.studies.runner import read_config

    config = read_config(path)
    assert_same_table(
        on_cluster, run_study(config.models, config.datasets, n_jobs=1, random_state=4)
    )


def test_csv_data_sets_are_read_by_the_commands_reader(tmp_path):
    # One CSV reader for `bayes-rvm fit --data` and a study's csv source: the delimiter sniffed,
    # class labels kept as text for a study, and a bad cell named by its line.
    from bayes_rvm.studies.config import read_config, read_table

    (tmp_path / "train.csv").write_text("x1;x2;label\n0.5;1;ant\n-2;3.25;bee\n4;-1e-3;ant\n")
    (tmp_path / "test.csv").write_text("x1;x2;label\n1;2;bee\n3;4;ant\n")
    path = tmp_path / "s.toml"
    path.write_text(
        '[datasets.d]\nsource = "csv"\npath = "train.csv"\ntest_path = "test.csv"\n'
        '[models.m]\nestimator = "RVC"\n'
    )
    X, y, Xt, yt = read_config(path).datasets["d"]
    np.testing.assert_array_equal(X, [[0.5, 1.0], [-2.0, 3.25], [4.0, -1e-3]])
    assert y.tolist() == ["ant", "bee", "ant"] and yt.tolist() == ["bee", "ant"]
    np.testing.assert_array_equal(Xt, [[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(ValueError, match=r"column 'label' of .*train\.csv is not numeric: 'ant'"):
        read_table(tmp_path / "train.csv")  # the command's targets must be numbers
    # features: the named columns, in order; an identifier of text is then left out
    (tmp_path / "train.csv").write_text("id;x1;x2;label\na;0.5;1;ant\nb;-2;3.25;bee\n")
    path.write_text(
        '[datasets.d]\nsource = "csv"\npath = "train.csv"\nfeatures = ["x2", "x1"]\n'
        '[models.m]\nestimator = "RVC"\n'
    )
    X, y = read_config(path).datasets["d"]
    np.testing.assert_array_equal(X, [[1.0, 0.5], [3.25, -2.0]])
    (tmp_path / "train.csv").write_text("x1,y\n1,2\n,3\n")
    path.write_text(
        '[datasets.d]\nsource = "csv"\npath = "train.csv"\n[models.m]\nestimator = "RVC"\n'
    )
    with pytest.raises(ValueError, match=r"\[datasets\.d\] column 'x1' .* NaN cell at line 3"):
        read_config(path)


def test_test_nlpd_scores_each_likelihood_by_its_own_density():
    # A count model's column was a Gaussian density at its rate's mean and sd (38.5 against a
    # Poisson NLPD of 1.89), ranking it below the Gaussian model that elpd ranks below it; an
    # estimator without a predictive sd (Ridge) stopped the study.
    from scipy.stats import poisson
    from sklearn.linear_model import Ridge

    rng = np.random.default_rng(0)
    X, Xt = rng.uniform(-3, 3, (80, 1)), rng.uniform(-3, 3, (300, 1))
    y, yt = (rng.poisson(np.exp(1 + np.sin(x[:, 0]))) for x in (X, Xt))
    models = {"counts": RVR(likelihood="poisson"), "gaussian": RVR(), "ridge": Ridge()}
    table = run_study(models, {"d": (X, y, Xt, yt)}, random_state=0).set_index("model")
    plug_in = -poisson.logpmf(yt, RVR(likelihood="poisson").fit(X, y).predict(Xt)).mean()
    # the type-II weights' Laplace posterior widens the plug-in Poisson a little
    assert abs(table.loc["counts", "test_nlpd"] - plug_in) < 0.02
    assert table.loc["counts", "test_nlpd"] < table.loc["gaussian", "test_nlpd"]
    assert np.isnan(table.loc["ridge", "test_nlpd"])
    # and is no type-II fit (it was labelled one)
    assert table.loc["ridge", "method"] == "other" and table.loc["gaussian", "method"] == "type2"


def test_a_bad_data_set_fails_the_study_at_once_naming_it():
    # Test inputs of another width (or targets with NaN) failed inside a fit, after the others
    # had run. Inputs are the estimators' to judge (a pipeline may impute NaN): a fit that fails
    # on them names its model and data set.
    X, y = make_sinc(30, noise=0.1, random_state=0)
    models = {"a": RVR(gamma=0.25)}
    with pytest.raises(ValueError, match=r"datasets\['bad'\]: test X has 2 features but X has 1"):
        run_study(models, {"ok": (X, y), "bad": (X, y, np.c_[X, X], y)})
    with pytest.raises(ValueError, match=r"datasets\['bad'\]: y holds NaN"):
        run_study(models, {"bad": (X, np.r_[y[:-1], np.inf])})
    with pytest.raises(ValueError, match="Input X contains NaN") as info:
        run_study(models, {"bad": (np.r_[X[:-1], [[np.nan]]], y)})
    assert "model 'a' on data set 'bad'" in " ".join(info.value.__notes__)
    # lists and 1-D inputs (a text pipeline's) pass the checks
    run_study(models, {"listed": (X.tolist(), y, X[:5], y[:5])})
