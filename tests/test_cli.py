"""The ``bayes-rvm`` command: the main job's files, a CSV fit, MCMC, compare, and bad input."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bayes_rvm import load_model
from bayes_rvm.cli import main

PNG = b"\x89PNG\r\n\x1a\n"


def test_default_main_job_writes_summary_plot_and_model(tmp_path, capsys):
    assert main(["--output", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    summary = (tmp_path / "summary.txt").read_text()
    assert summary.strip() in out
    n_rv = int(re.search(r"relevance vectors : (\d+) of 100", summary).group(1))
    assert 3 <= n_rv <= 12
    noise = float(re.search(r"noise sd\s+: ([0-9.]+)", summary).group(1))
    assert noise == pytest.approx(0.1, rel=0.25)
    # One noise draw: its error scatters around the paper's mean of 0.0326 (the mean over 100
    # draws is tested in test_estimators); it must be well below the noise sd and the signal RMS.
    rmse = float(re.search(r"test RMSE\s+: ([0-9.]+)", summary).group(1))
    assert rmse < 0.1
    png = (tmp_path / "fit.png").read_bytes()
    assert png[:8] == PNG and len(png) > 10_000
    model = load_model(tmp_path / "model.nc")
    assert model.n_relevance_vectors_ == n_rv
    assert "posterior" in model.idata_.children


def test_csv_fit(tmp_path, capsys):
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(80, 2))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.05 * rng.standard_normal(80)
    path = tmp_path / "table.csv"
    np.savetxt(path, np.c_[X, y], delimiter=",", header="a,b,response", comments="")
    assert (
        main(
            ["fit", "--data", str(path), "--target", "response", "--output", str(tmp_path / "out")]
        )
        == 0
    )
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "features ['a', 'b']" in summary
    train_rmse = float(re.search(r"training RMSE\s+: ([0-9.]+)", summary).group(1))
    assert train_rmse < 0.1
    assert (tmp_path / "out" / "fit.png").read_bytes()[:8] == PNG


@pytest.mark.slow
def test_mcmc_fit_and_compare(tmp_path, capsys):
    common = ["--draws", "100", "--tune", "100", "--chains", "2", "--quiet", "--n-samples", "40"]
    assert main(["fit", "--inference", "mcmc", *common, "--output", str(tmp_path / "m")]) == 0
    summary = (tmp_path / "m" / "summary.txt").read_text()
    assert "MCMC (nutpie)" in summary and "max R-hat" in summary and "LOO elpd" in summary
    assert summary.index("MCMC (nutpie)") < summary.index("type-II fit (the sampler's seed)")
    assert "sample_stats" in load_model(tmp_path / "m" / "model.nc").idata_.children
    assert main(["compare", *common, "--output", str(tmp_path / "c")]) == 0
    table = (tmp_path / "c" / "compare.csv").read_text().splitlines()
    assert len(table) == 5 and {"MCMC ard", "type-II student_t"} <= {r.split(",")[0] for r in table}
    for name in ("compare.png", "noise.png"):
        assert (tmp_path / "c" / name).read_bytes()[:8] == PNG


def test_bad_arguments_exit_with_a_message(tmp_path, capsys):
    with pytest.raises(SystemExit, match="n-samples"):
        main(["--n-samples", "1", "--output", str(tmp_path)])
    with pytest.raises(SystemExit, match="gamma"):
        main(["--gamma", "wide", "--output", str(tmp_path)])
    with pytest.raises(SystemExit, match="does not exist"):
        main(["fit", "--data", str(tmp_path / "none.csv")])
    bad = tmp_path / "bad.csv"
    bad.write_text("x,y\n1,2\n3,4\n")
    with pytest.raises(SystemExit, match="not a column"):
        main(["fit", "--data", str(bad), "--target", "z"])
    with pytest.raises(SystemExit):
        main(["fit", "--inference", "nuts"])
    assert "invalid choice" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["fit", "--likelihood", "binomial"])
    assert "invalid choice" in capsys.readouterr().err


def test_likelihood_and_inference_flags_reach_the_estimator():
    from bayes_rvm.cli import _parser

    args = _parser().parse_args(["fit", "--likelihood", "poisson", "--inference", "vi"])
    assert (args.likelihood, args.inference) == ("poisson", "vi")
    args = _parser().parse_args(["fit"])
    assert (args.likelihood, args.inference) == ("gaussian", "type2")


def test_poisson_fit_of_the_built_in_counts(tmp_path, capsys):
    """``--likelihood poisson`` with no data: counts of rate exp(1 + sin x); the prediction is
    the rate, scored by the Poisson deviance explained."""
    out = tmp_path / "p"
    argv = ["fit", "--likelihood", "poisson", "--n-samples", "100", "--output", str(out)]
    assert main(argv) == 0
    summary = (out / "summary.txt").read_text()
    assert "likelihood=poisson" in summary and "noise sd" not in summary
    d2 = float(re.search(r"D\^2 \(deviance\)\s+: ([0-9.]+)", summary).group(1))
    assert 0.3 < d2 < 1.0
    rmse = float(re.search(r"test RMSE\s+: ([0-9.]+)", summary).group(1))
    assert rmse < 0.5  # against rates of 1 to 7.4
    model = load_model(out / "model.nc")
    assert model.likelihood == "poisson"
    assert model.idata_.attrs["likelihood"] == "poisson"
    assert (out / "fit.png").read_bytes()[:8] == PNG


def test_poisson_vi_fit_of_the_built_in_counts(tmp_path, capsys):
    """``--likelihood poisson --inference vi``: ADVI over the weights of the counts model; the
    rate it predicts is as close to the true one as the type-II fit's (RMSE < 0.5 against rates
    of 1 to 7.4), and the saved model is the VI fit, with its ELBO trace."""
    out = tmp_path / "pvi"
    argv = ["fit", "--likelihood", "poisson", "--inference", "vi", "--n-samples", "200"]
    assert main([*argv, "--output", str(out)]) == 0
    summary = (out / "summary.txt").read_text()
    assert "inference=vi, likelihood=poisson" in summary
    rmse = float(re.search(r"test RMSE\s+: ([0-9.]+)", summary).group(1))
    assert rmse < 0.5
    model = load_model(out / "model.nc")
    assert (model.likelihood, model.inference) == ("poisson", "vi")
    assert model.idata_.attrs["method"] == "vi"
    assert "variational" in model.idata_.children and "w" in model.idata_["posterior"]


def test_features_choose_the_columns_of_a_table_with_text_in_others(tmp_path, capsys):
    # An identifier and a label column beside the features: the fit had no way to leave them
    # out ("column 'id' ... is not numeric"); --features takes the named columns, in order.
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, size=(60, 2))
    y = np.sin(x[:, 0]) + 0.5 * x[:, 1] + 0.05 * rng.standard_normal(60)
    rows = [
        f"r{i},{'ab'[i % 2]},{a},{b},{t}" for i, (a, b, t) in enumerate(zip(*x.T, y, strict=True))
    ]
    path = tmp_path / "table.csv"
    path.write_text("\n".join(["id,group,a,b,response", *rows]) + "\n")
    argv = ["fit", "--data", str(path), "--target", "response", "--no-plot"]
    assert "--features chooses the feature columns" in _fails(argv, capsys)
    out = str(tmp_path / "out")
    assert main([*argv, "--features", "b,a", "--output", out]) == 0
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "features ['b', 'a']" in summary
    assert float(re.search(r"training RMSE\s+: ([0-9.]+)", summary).group(1)) < 0.1
    message = _fails([*argv, "--features", "a,response"], capsys)
    assert "--features ['a', 'response'] must name distinct feature columns" in message


def test_help_lists_every_option(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    text = capsys.readouterr().out
    for option in (
        "--data",
        "--target",
        "--features",
        "--kernel",
        "--gamma",
        "--prior",
        "--nu",
        "--inference",
        "--likelihood",
        "--draws",
        "--chains",
        "--sampler",
        "--output",
    ):
        assert option in text


def _fails(argv, capsys) -> str:
    """Run the command as the interpreter would and return its stderr: exit status 1, one line."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    code = info.value.code
    err = capsys.readouterr().err
    if isinstance(code, str):  # the interpreter prints the message on stderr and exits with 1
        err, code = err + code + "\n", 1
    assert code == 1, f"exit status {code} for {argv}"
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"{len(lines)} lines on stderr for {argv}: {err!r}"
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def csv_file(tmp_path):
    def write(text: str, name="t.csv"):
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    return write


def test_every_failure_is_one_line_and_exit_status_1(tmp_path, capsys, csv_file):
    out = ["--output", str(tmp_path / "out"), "--no-plot"]
    # The cases: tracebacks for a NaN cell, a single row, --gamma -1 and --kernel foo.
    nan = csv_file("a,b,y\n1,2,3\n4,,6\n7,8,9\n")
    assert "column 'b'" in _fails(["fit", "--data", nan, *out], capsys)
    assert "empty or NaN cell at line 3" in _fails(["fit", "--data", nan, *out], capsys)
    one = csv_file("a,y\n1,2\n")
    assert "1 data row(s)" in _fails(["fit", "--data", one, *out], capsys)
    assert "positive number, got '-1'" in _fails(["--gamma", "-1", *out], capsys)
    err = _fails(["--kernel", "foo", *out], capsys)
    assert "invalid choice: 'foo'" in err and "rbf" in err
    # A header-only CSV is not "non-numeric": it has no data rows.
    header = csv_file("a,b,y\n")
    assert "0 data row(s) below its header" in _fails(["fit", "--data", header, *out], capsys)
    text = csv_file("a,y\n1,2\nseven,3\n")
    assert "column 'a'" in (err := _fails(["fit", "--data", text, *out], capsys))
    assert "'seven' at line 3" in err
    # An infinite cell is named as an empty one is (it was scikit-learn's message).
    inf = csv_file("a,b,y\n1,2,3\n4,-inf,6\n7,8,9\n")
    assert "column 'b' of" in (err := _fails(["fit", "--data", inf, *out], capsys))
    assert "infinite value (-inf) at line 3" in err
    inf_target = csv_file("a,y\n1,2\n2,1e999\n3,4\n4,5\n", "inf_y.csv")
    assert "column 'y' of" in (err := _fails(["fit", "--data", inf_target, *out], capsys))
    assert "infinite value (inf) at line 3" in err
    # A constant target is said to be one (not offered to --task classify).
    constant = csv_file("a,y\n1,5\n2,5\n3,5\n4,5\n", "const.csv")
    capsys.readouterr()
    assert main(["fit", "--data", constant, *out]) == 0
    assert "warning: the target is constant (5 in every row)" in capsys.readouterr().err
    # Option errors of argparse follow the same rule (it exits with 2 and two lines by default).
    assert "invalid choice: 'nuts'" in _fails(["fit", "--inference", "nuts"], capsys)
    assert "y[0] = -1.0 is negative" in _fails(
        ["fit", "--data", csv_file("a,y\n1,-1\n2,3\n3,4\n"), "--likelihood", "poisson", *out],
        capsys,
    )
    assert "--draws" in _fails(["fit", "--draws", "many"], capsys)
    # Errors of the estimator itself (a bad --nu) and of the file system are one line too.
    assert "nu" in _fails(["--prior", "student_t", "--nu", "-2", *out], capsys)
    assert "give --prior student_t" in _fails(["--nu", "0.01", *out], capsys)
    (tmp_path / "occupied").write_text("a file where the output folder should go")
    assert "occupied" in _fails(["--output", str(tmp_path / "occupied"), "--no-plot"], capsys)


def test_a_model_path_held_by_a_users_file_is_refused_in_one_line(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.nc").write_text("my notes")
    err = _fails(["--output", str(out), "--no-plot", "--n-samples", "20"], capsys)
    assert "is not a bayes_rvm model; refusing to write over it" in err
    assert (out / "model.nc").read_text() == "my notes"


def test_one_column_of_decimals_is_not_split_on_the_point(tmp_path, csv_file, capsys):
    # pandas' sniffing took '.' for the delimiter of a one-column file of decimals.
    one_column = csv_file("y\n0.25\n1.5\n2.75\n")
    assert "1 column(s) ['y']" in _fails(["fit", "--data", one_column], capsys)
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, 30)
    rows = "\n".join(f"{a:.6f};{2 * a + 0.5:.6f}" for a in x)
    semicolons = csv_file(f"x;y\n{rows}\n", name="semi.csv")
    assert (
        main(
            [
                "fit",
                "--data",
                semicolons,
                "--kernel",
                "linear",
                "--no-plot",
                "--output",
                str(tmp_path / "o"),
            ]
        )
        == 0
    )
    summary = (tmp_path / "o" / "summary.txt").read_text()
    assert "features ['x']" in summary
    assert float(re.search(r"training RMSE\s+: ([0-9.e-]+)", summary).group(1)) < 1e-3


def test_the_installed_command_prints_one_line_and_exits_1(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bayes_rvm.cli",
            "--kernel",
            "linear",
            "--gamma",
            "-1",
            "--output",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "bayes-rvm: --gamma must be one of 'evidence_shared', 'evidence', 'evidence_ard', "
        "'scale', 'auto' or a positive number, got '-1'"
    ]


def _run_with_stderr_on_a_terminal(args, cwd) -> tuple[int, str, str]:
    """Run the command with stdout to a pipe (as ``> file``) and stderr to a terminal (a pty)."""
    import os
    import pty
    import threading

    master, slave = pty.openpty()
    chunks = []

    def read():
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # the terminal closed
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    import bayes_rvm

    # the package under test, whatever the working directory
    tree = str(Path(bayes_rvm.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "bayes_rvm.cli", *args],
        stdout=subprocess.PIPE,
        stderr=slave,
        cwd=cwd,
        env=env,
        check=False,
    )
    os.close(slave)
    reader.join(timeout=10)
    os.close(master)
    terminal = b"".join(chunks).decode(errors="replace")
    return proc.returncode, proc.stdout.decode(), re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", terminal)


@pytest.mark.slow
def test_mcmc_output_results_on_stdout_one_line_warnings_and_progress_on_stderr(tmp_path):
    from PIL import Image

    mcmc = ["--inference", "mcmc", "--draws", "100", "--tune", "100", "--chains", "2"]
    rc, out, err = _run_with_stderr_on_a_terminal(
        ["fit", *mcmc, "--n-samples", "30", "--output", "out"], cwd=tmp_path
    )
    assert rc == 0, err
    # stdout: the results and nothing else, as summary.txt holds them (plus the files written)
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert out.startswith(summary) and out[len(summary) :].lstrip().startswith("wrote")
    # stderr: NUTS's progress bar (2 chains of 100 draws) ...
    assert "Draw" in err and "━" in err
    # ... and the warnings one line each, without a path: 2 x 100 draws cannot reach a bulk ESS
    # of 400, so the ESS warning must be there
    warnings = [line for line in err.splitlines() if "warning" in line.lower()]
    assert any("min bulk ESS of the hyperparameters" in line for line in warnings), err
    assert all(line.startswith("bayes-rvm: warning: ") for line in warnings), warnings
    for noise in (".py:", "<frozen", "warnings.warn", "sys.exit", "site-packages"):
        assert noise not in err
    # the report counts the points whose Pareto k is too large instead of ArviZ's warning
    assert re.search(r"LOO elpd\s+: [-0-9.]+ ± [0-9.]+ \((every Pareto k|\d+ of 30 points)", out)
    # the figure is titled by the MCMC fit: draws and the basis functions it sampled
    title = Image.open(tmp_path / "out" / "fit.png").text["Title"]
    n_basis = int(re.search(r"over (\d+) basis functions", summary).group(1))
    assert n_basis == 31  # mcmc_basis="all": every training point and the bias
    assert title == f"RVR by MCMC (nutpie): 2 chains x 100 draws over {n_basis} basis functions"


# -- predict, classification, compare --data, readable output --------------------------------


def _ripley_csv(path: Path, *, labels, test: bool = False, extra_column: bool = False) -> Path:
    """Ripley's data as CSV: features xs, ys and the class (as ``labels[y]``) in column 'cls'."""
    import pandas as pd

    from bayes_rvm.datasets import load_ripley

    X, y, X_test, y_test = load_ripley()
    X, y = (X_test, y_test) if test else (X, y)
    frame = pd.DataFrame({"cls": np.asarray(labels)[y.astype(int)], "ys": X[:, 1], "xs": X[:, 0]})
    if extra_column:
        frame.insert(0, "id", np.arange(len(frame)))
    frame.to_csv(path, index=False)
    return path


def _predicted(capsys) -> "pd.DataFrame":  # noqa: F821 - pandas imported on use
    import io

    import pandas as pd

    return pd.read_csv(io.StringIO(capsys.readouterr().out))


@pytest.fixture(scope="module")
def text_classifier(tmp_path_factory):
    """``fit`` on Ripley's training data with the labels as text ('no', 'yes'), done once for
    the module: the output folder (summary, plot and model) and the exit status."""
    root = tmp_path_factory.mktemp("text")
    train = _ripley_csv(root / "train.csv", labels=["no", "yes"])
    out = root / "c"
    return out, main(["fit", "--data", str(train), "--target", "cls", "--output", str(out)])


def test_a_text_target_fits_a_classifier_that_predict_scores_on_new_rows(
    tmp_path, capsys, text_classifier
):
    """Ripley's data with the labels as text: ``fit`` picks RVC by itself, ``predict`` takes the
    feature columns by name (in another order, beside an identifier and the target) and its
    labels reach Ripley's test error (Tipping 2001: 9.3% for the RVM; Bayes rate 8%)."""
    out, status = text_classifier
    assert status == 0
    summary = (out / "summary.txt").read_text()
    assert "relevance vector classification" in summary and "classes           : no, yes" in summary
    assert float(re.search(r"training accuracy : ([0-9.]+)", summary).group(1)) > 0.85
    assert (out / "fit.png").read_bytes()[:8] == PNG  # two features: the probability map
    capsys.readouterr()
    test = _ripley_csv(tmp_path / "test.csv", labels=["no", "yes"], test=True, extra_column=True)
    assert main(["predict", str(out / "model.nc"), "--data", str(test)]) == 0
    pred = _predicted(capsys)
    assert list(pred.columns) == ["prediction", "p_no", "p_yes"] and len(pred) == 1000
    np.testing.assert_allclose(pred["p_no"] + pred["p_yes"], 1.0, atol=1e-7)
    assert (pred["prediction"] == np.where(pred["p_yes"] > 0.5, "yes", "no")).all()
    import pandas as pd

    error = float(np.mean(pred["prediction"] != pd.read_csv(test)["cls"]))
    assert 0.07 < error < 0.12


def test_integer_labels_classify_on_request_and_warn_otherwise(tmp_path, capsys, text_classifier):
    """0/1 labels regress by default (with a warning naming --task classify); with --task
    classify they give the same probabilities as the same classes written as text."""
    ints = _ripley_csv(tmp_path / "ints.csv", labels=[0, 1])
    text_out, status = text_classifier  # the same rows with the classes 'no' and 'yes'
    assert status == 0
    common = ["--target", "cls", "--no-plot"]
    assert main(["fit", "--data", str(ints), *common, "--output", str(tmp_path / "r")]) == 0
    captured = capsys.readouterr()
    assert "relevance vector regression" in captured.out
    assert re.search(
        r"warning: the target takes only the values \[0.0, 1.0\].*--task classify", captured.err
    )
    argv = ["fit", "--data", str(ints), "--task", "classify", *common]
    assert main([*argv, "--output", str(tmp_path / "i")]) == 0
    capsys.readouterr()
    test = _ripley_csv(tmp_path / "test.csv", labels=[0, 1], test=True)
    main(["predict", str(tmp_path / "i" / "model.nc"), "--data", str(test)])
    by_int = _predicted(capsys)
    main(["predict", str(text_out / "model.nc"), "--data", str(test)])
    by_text = _predicted(capsys)
    assert set(by_int["prediction"]) == {0, 1} and set(by_text["prediction"]) == {"no", "yes"}
    np.testing.assert_allclose(by_int["p_1"], by_text["p_yes"], rtol=1e-10)


def test_regression_predict_writes_the_mean_and_sd_to_stdout_or_a_file(tmp_path, capsys):
    """The built-in sinc fit, predicted at new x: close to the noise-free sinc, with an sd at
    least the fitted noise sd (the predictive sd includes the noise) and the same numbers in
    ``--output`` as on stdout."""
    from bayes_rvm.datasets import sinc

    out = tmp_path / "s"
    assert main(["--output", str(out), "--no-plot"]) == 0
    noise = float(re.search(r"noise sd\s+: ([0-9.]+)", (out / "summary.txt").read_text())[1])
    x = np.linspace(-9.5, 9.5, 40)
    data = tmp_path / "x.csv"
    np.savetxt(data, x[:, None], header="x", comments="")
    capsys.readouterr()
    assert main(["predict", str(out / "model.nc"), "--data", str(data)]) == 0
    pred = _predicted(capsys)
    assert list(pred.columns) == ["prediction", "sd"]
    assert np.sqrt(np.mean((pred["prediction"] - sinc(x)) ** 2)) < 0.1
    assert (pred["sd"] >= noise * (1 - 1e-6)).all() and (pred["sd"] < 3 * noise).all()
    assert (
        main(
            [
                "predict",
                str(out / "model.nc"),
                "--data",
                str(data),
                "--output",
                str(tmp_path / "p.csv"),
            ]
        )
        == 0
    )
    import pandas as pd

    np.testing.assert_allclose(
        pd.read_csv(tmp_path / "p.csv").to_numpy(), pred.to_numpy(), rtol=1e-7
    )


def test_predict_has_its_own_help_and_one_line_failures(tmp_path, capsys, csv_file):
    with pytest.raises(SystemExit):
        main(["predict", "--help"])
    help_text = capsys.readouterr().out
    assert help_text.startswith("usage: bayes-rvm predict") and "--data" in help_text
    assert "--inference" not in help_text  # not fit's help
    model = tmp_path / "m"
    assert main(["--output", str(model), "--no-plot", "--n-samples", "20"]) == 0
    capsys.readouterr()
    two = csv_file("a,b\n1,2\n")
    err = _fails(["predict", str(model / "model.nc"), "--data", two], capsys)
    assert "fitted on 1 unnamed feature(s)" in err
    assert "does not exist" in _fails(["predict", str(tmp_path / "no.nc"), "--data", two], capsys)
    # A model fitted on named columns asks for them by name.
    uvy = np.random.default_rng(0).normal(size=(12, 3))
    named = csv_file("u,v,y\n" + "\n".join(",".join(f"{a:.5f}" for a in r) for r in uvy), "n.csv")
    assert main(["fit", "--data", named, "--output", str(tmp_path / "n"), "--no-plot"]) == 0
    err = _fails(["predict", str(tmp_path / "n" / "model.nc"), "--data", two], capsys)
    assert "lacks the model's feature column(s) ['u', 'v']" in err
    text = csv_file("u,v\n1,2\nx,3\n", "t.csv")
    err = _fails(["predict", str(tmp_path / "n" / "model.nc"), "--data", text], capsys)
    assert "column 'u'" in err and "'x' at line 3" in err
    inf = csv_file("u,v\n1,2\n3,inf\n", "i.csv")
    err = _fails(["predict", str(tmp_path / "n" / "model.nc"), "--data", inf], capsys)
    assert "column 'v'" in err and "infinite value (inf) at line 3" in err


def test_predict_into_a_closed_pipe_stops_quietly(tmp_path):
    """``bayes-rvm predict ... | head -1``: the reader leaves after one line; the command stops
    without a message, with the status of a process ended by SIGPIPE (141), as Unix tools do."""
    model = tmp_path / "m"
    assert main(["--output", str(model), "--no-plot", "--n-samples", "20"]) == 0
    data = tmp_path / "x.csv"
    np.savetxt(data, np.linspace(-10, 10, 100_000)[:, None], header="x", comments="")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bayes_rvm.cli", "predict", str(model / "model.nc"), "--data", data],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout.readline() == b"prediction,sd\n"
    proc.stdout.close()
    assert proc.wait(timeout=120) == 141
    assert proc.stderr.read() == b""


def test_a_broken_pipe_of_another_connection_is_an_error(monkeypatch, capsys):
    # Only standard output's reader leaving is the quiet SIGPIPE stop; a sampler's or a
    # cluster's broken connection is reported (and --traceback shows it).
    import bayes_rvm.cli as cli

    def broken(args):
        raise BrokenPipeError(32, "worker pipe")

    monkeypatch.setattr(cli, "_fit", broken)
    assert "error: [Errno 32] worker pipe" in _fails(["fit", "--no-plot"], capsys)
    with pytest.raises(BrokenPipeError):
        main(["fit", "--no-plot", "--traceback"])
    # Where select has no poll (Windows), the same one line.
    import select

    monkeypatch.delattr(select, "poll", raising=False)
    assert "error: [Errno 32] worker pipe" in _fails(["fit", "--no-plot"], capsys)


def test_classification_refuses_regression_options_in_one_line(tmp_path, capsys, csv_file):
    labels = csv_file("a,y\n1,p\n2,q\n3,p\n4,q\n")
    out = ["--output", str(tmp_path / "o"), "--no-plot"]
    err = _fails(["fit", "--data", labels, "--likelihood", "poisson", *out], capsys)
    assert "--likelihood poisson is for regression" in err
    assert "classify by type2 or mcmc" in _fails(
        ["fit", "--data", labels, "--inference", "vi"], capsys
    )
    err = _fails(["fit", "--data", labels, "--task", "regress", *out], capsys)
    assert "holds labels, not numbers ('p' at line 2)" in err and "--task classify" in err
    assert "--task classify needs --data" in _fails(["fit", "--task", "classify", *out], capsys)
    # Column options without a table were ignored, and the built-in sinc fitted.
    for flag, value in (("--target", "y"), ("--features", "a,b")):
        assert f"{flag} needs --data" in _fails(["fit", flag, value, *out], capsys)
    assert "compare fits regressions" in _fails(["compare", "--data", labels, *out], capsys)


def test_tables_print_rounded_and_unwrapped():
    """A weight of 1.7e-16 prints as 0.000, -0.0 as 0.000, and 14 columns stay on one line."""
    import pandas as pd

    from bayes_rvm.cli import _table_text

    table = pd.DataFrame(
        {f"column_{j}": [1.665335e-16, -1e-9, 123.456789] for j in range(14)},
        index=["MCMC ard", "type-II ard", "MCMC student_t"],
    )
    table["method"] = ["PSIS-LOO", "exact LOO (100 refits)", "PSIS-LOO"]
    lines = _table_text(table).splitlines()
    assert len(lines) == 4  # the header and one line per row: nothing wrapped
    assert "e-16" not in lines[1] and "-0.000" not in lines[2]
    assert lines[1].split()[2:4] == ["0.000", "0.000"] and "123.457" in lines[3]


def test_the_study_plot_labels_each_model_by_its_elpd_method():
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    from bayes_rvm.plots import plot_study

    table = pd.DataFrame(
        {
            "dataset": ["sinc", "sinc"],
            "model": ["type-II", "MCMC"],
            "elpd_loo": [80.0, 82.0],
            "elpd_loo_se": [5.0, 5.0],
            "elpd_method": ["exact LOO (100 refits)", "PSIS-LOO"],
        }
    )
    fig = plot_study(table)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["type-II\n(exact LOO (100 refits))", "MCMC\n(PSIS-LOO)"]
    assert "PSIS" not in ax.get_xlabel()
    # A table without the column (an older store) is labelled by model alone.
    fig = plot_study(table.drop(columns="elpd_method"))
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["type-II", "MCMC"]


def test_the_poisson_plot_calls_its_band_a_rate_band(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from bayes_rvm import RVR
    from bayes_rvm.plots import plot_regression

    X = np.linspace(-5, 5, 60)[:, None]
    y = np.random.default_rng(0).poisson(np.exp(1 + np.sin(X[:, 0])))
    ax = plot_regression(RVR(likelihood="poisson").fit(X, y), X, y)
    labels = ax.get_legend_handles_labels()[1]
    assert "rate ±2 sd" in labels and "rate mean" in labels
    assert not any("predictive" in label for label in labels)


@pytest.mark.slow
def test_compare_on_a_csv_file_and_the_weights_line(tmp_path, capsys, csv_file):
    rng = np.random.default_rng(3)
    x = rng.uniform(-5, 5, 30)
    rows = "\n".join(
        f"{a:.6f},{np.sin(a) + 0.1 * e:.6f}" for a, e in zip(x, rng.normal(size=30), strict=True)
    )
    data = csv_file(f"x,y\n{rows}\n")
    common = ["--draws", "100", "--tune", "100", "--chains", "2", "--quiet", "--no-plot"]
    assert main(["compare", "--data", data, *common, "--output", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert f"elpd comparison on {data} (30 rows" in out
    assert "e-1" not in out and "e+" not in out  # no unrounded weights
    assert (
        main(
            ["fit", "--data", data, "--inference", "mcmc", *common, "--output", str(tmp_path / "m")]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert re.search(r"weights\s+: 31 sampled; \d+ individually clear of zero", out)


def test_an_interrupt_is_one_line_and_an_errors_notes_are_kept(monkeypatch, capsys):
    # Ctrl-C printed a 70-line traceback; a study's note of which fit failed was dropped.
    from bayes_rvm import cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_fit", interrupted)
    assert main(["fit", "--no-plot"]) == 130
    assert capsys.readouterr().err.strip() == "bayes-rvm: interrupted"

    def failed(args):
        exc = ValueError("gamma must be positive")
        exc.add_note("(study fit of model 'bad' on data set 's')")
        raise exc

    monkeypatch.setattr(cli, "_fit", failed)
    with pytest.raises(SystemExit, match=r"positive \(study fit of model 'bad' on data set 's'\)"):
        main(["fit", "--no-plot"])


def test_the_sampler_warnings_remedies_have_flags_here(tmp_path, capsys):
    """The estimators' sampler warnings name Python settings (``sampler_config={'mcmc_basis':
    'relevant', 'draws': 4000}``, ``fit(X, y, thin=4)``): the command takes them as flags, and
    its warnings say which."""
    import io

    from bayes_rvm.cli import _show_warning

    out = tmp_path / "m"
    args = ["--inference", "mcmc", "--draws", "20", "--tune", "30", "--chains", "2"]
    args += ["--mcmc-basis", "relevant", "--thin", "2", "--quiet", "--no-plot"]
    assert main([*args, "--n-samples", "40", "--output", str(out)]) == 0
    post = load_model(out / "model.nc").idata_["posterior"]
    assert post.sizes["draw"] == 20  # thinned from 40 per chain
    assert post.sizes["basis"] < 41  # the relevance vectors, not all 41 columns
    buffer = io.StringIO()
    _show_warning("Raise tune (sampler_config={'tune': 1000}).", UserWarning, "x", 1, buffer)
    assert "--tune" in buffer.getvalue() and "--mcmc-basis" in buffer.getvalue()
    buffer = io.StringIO()
    _show_warning("the noise estimate fell", RuntimeWarning, "x", 1, buffer)
    assert "command line" not in buffer.getvalue()


def test_options_that_do_nothing_here_are_refused(tmp_path, capsys, csv_file):
    # MCMC's options with a type-II or VI fit, and the sinc generator's with --data, were ignored.
    out = ["--output", str(tmp_path / "o"), "--no-plot"]
    err = _fails(["fit", "--draws", "50", "--thin", "0", "--sampler", "numpyro", *out], capsys)
    assert "--draws, --sampler, --thin set the sampler of --inference mcmc" in err
    err = _fails(["--inference", "vi", "--chains", "2", *out], capsys)
    assert "this fit is --inference vi" in err
    assert "--draws set the sampler" in _fails(["--draw=5", *out], capsys)  # abbreviated
    data = csv_file("a,y\n1,1\n2,3\n3,4\n4,2\n")
    err = _fails(["fit", "--data", data, "--n-samples", "50", "--noise", "0.2", *out], capsys)
    assert "--n-samples, --noise shape the built-in sinc data" in err


def test_a_warning_for_python_says_that_the_command_has_no_flag_for_it(capsys):
    from bayes_rvm.cli import _show_warning

    _show_warning("give likelihood_params={'noise_variance': ...}.", UserWarning, "f", 1)
    assert "no flag for a fixed noise" in capsys.readouterr().err
