"""The ``bayes-rvm`` main job writes what it promises and prints the fit."""

import re

import pytest

from bayes_rvm.cli import main


def test_default_main_job_writes_summary_and_plot(tmp_path, capsys):
    assert main(["--output", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    summary = (tmp_path / "summary.txt").read_text()
    assert summary.strip() in out
    n_rv = int(re.search(r"relevance vectors : (\d+) of 100", summary).group(1))
    assert 3 <= n_rv <= 12
    noise = float(re.search(r"noise sd\s+: ([0-9.]+)", summary).group(1))
    assert noise == pytest.approx(0.1, rel=0.25)
    rmse = float(re.search(r"test RMSE\s+: ([0-9.]+)", summary).group(1))
    assert rmse < 0.06
    png = (tmp_path / "sinc_fit.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_bad_arguments_exit_with_a_message(tmp_path):
    with pytest.raises(SystemExit, match="n-samples"):
        main(["--n-samples", "1", "--output", str(tmp_path)])
    with pytest.raises(SystemExit, match="gamma"):
        main(["--gamma", "wide", "--output", str(tmp_path)])
