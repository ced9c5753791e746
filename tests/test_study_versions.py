"""Study stores written by another version of the package: resumed where their rows are valid,
refused naming the version and format where they are not."""

import json

import pytest

from bayes_rvm.datasets import make_sinc
from bayes_rvm.estimators.regressor import RVR
from bayes_rvm.io import json_checksum
from bayes_rvm.studies.runner import StudyStoreError, load_study, run_study


def _data():
    X, y = make_sinc(15, noise=0.1, random_state=0)
    Xt, yt = make_sinc(20, noise=0.1, random=True, random_state=1)
    return {"sinc": (X, y, Xt, yt)}


def _rewrite(store, **changes):
    path = store / "study.json"
    settings = json.loads(path.read_text())
    settings.pop("checksum")
    settings.update(changes)
    path.write_text(json.dumps({**settings, "checksum": json_checksum(settings)}))


def test_a_store_of_this_format_from_another_version_resumes_without_refitting(
    tmp_path, monkeypatch
):
    models = {"ARD": RVR(gamma=0.5)}
    store = tmp_path / "store"
    table = run_study(models, _data(), store=store, n_jobs=1, random_state=0)
    _rewrite(store, bayes_rvm_version="0.0.1")

    def refuse(*args, **kwargs):
        raise AssertionError("a valid row was fitted again")

    monkeypatch.setattr(RVR, "fit", refuse)
    resumed = run_study(models, _data(), store=store, n_jobs=1)
    assert resumed["elpd_loo"].tolist() == table["elpd_loo"].tolist()
    assert load_study(store)["elpd_loo"].tolist() == table["elpd_loo"].tolist()
    # Another format is refused, naming the version and the format that wrote it.
    _rewrite(store, format="bayes_rvm-study/3", bayes_rvm_version="0.0.1")
    with pytest.raises(
        StudyStoreError, match=r"written by bayes_rvm 0\.0\.1 in format 'bayes_rvm-study/3'"
    ):
        load_study(store)
