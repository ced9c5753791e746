"""The ``bayes-rvm`` command: the main job's files, a CSV fit, MCMC, compare, and bad input."""

import re

import numpy as np
import pytest

from bayes_rvm.cli import main
from bayes_rvm.io import load_model

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
    assert "posterior sigma" in summary and "MCMC diagnostics" in summary
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
        main(["fit", "--inference", "vi"])
    assert "invalid choice" in capsys.readouterr().err


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
        "--draws",
        "--chains",
        "--sampler",
        "--output",
    ):
        assert option in text
