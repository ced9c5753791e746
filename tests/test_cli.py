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
    argv = ["fit", "--likelihood", "poisson", "--n-samples", "200", "--output", str(out)]
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


def test_help_lists_every_option(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    text = capsys.readouterr().out
    for option in (
        "--data",
        "--target",
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
    # Option errors of argparse follow the same rule (it exits with 2 and two lines by default).
    assert "invalid choice: 'nuts'" in _fails(["fit", "--inference", "nuts"], capsys)
    assert "y[0] = -1.0 is negative" in _fails(
        ["fit", "--data", csv_file("a,y\n1,-1\n2,3\n3,4\n"), "--likelihood", "poisson", *out],
        capsys,
    )
    assert "--draws" in _fails(["fit", "--draws", "many"], capsys)
    # Errors of the estimator itself (a bad --nu) and of the file system are one line too.
    assert "nu" in _fails(["--nu", "-2", *out], capsys)
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
