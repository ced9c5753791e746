"""Save / load: bit-for-bit predictions in a fresh process, clear errors for bad files."""

import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from bayes_rvm import load_model, save_model
from bayes_rvm.datasets import make_sinc
from bayes_rvm.estimators.regressor import RVR
from bayes_rvm.io import FORMAT, ModelFileError, tree_checksum

X_TEST = np.linspace(-10, 10, 200)[:, None]


@pytest.fixture(scope="module")
def fitted():
    X, y = make_sinc(60, random_state=0, shuffle=False)
    return RVR(gamma=0.11, prior="student_t", prior_params={"nu": 1e-4}, max_iter=500).fit(X, y)


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_round_trip_in_a_fresh_process_is_bit_for_bit(tmp_path, fitted, suffix):
    path = save_model(fitted, tmp_path / f"model{suffix}")
    mean, std = fitted.predict(X_TEST, return_std=True)
    np.save(tmp_path / "X.npy", X_TEST)
    code = (
        "import sys, numpy as np; from bayes_rvm import load_model; "
        "m = load_model(sys.argv[1]); mu, sd = m.predict(np.load(sys.argv[2]), return_std=True); "
        "np.save(sys.argv[3], np.c_[mu, sd])"
    )
    out = tmp_path / "pred.npy"
    subprocess.run(
        [sys.executable, "-c", code, str(path), str(tmp_path / "X.npy"), str(out)], check=True
    )
    got = np.load(out)
    np.testing.assert_array_equal(got[:, 0], mean)
    np.testing.assert_array_equal(got[:, 1], std)
    loaded = load_model(path)
    assert loaded.get_params() == fitted.get_params()
    np.testing.assert_array_equal(loaded.relevance_, fitted.relevance_)
    assert loaded.log_evidence_ == fitted.log_evidence_
    assert loaded.fit_.reason == fitted.fit_.reason


def test_saved_file_records_every_parameter_as_json(tmp_path, fitted):
    path = save_model(fitted, tmp_path / "m.nc")
    tree = xr.open_datatree(path, engine="h5netcdf")
    assert json.loads(tree.attrs["params"]) == fitted.get_params()


def test_multi_output_and_pickle_round_trip(tmp_path):
    X, y = make_sinc(40, random_state=1, shuffle=False)
    model = RVR(gamma=0.1).fit(X, np.c_[y, -y])
    loaded = load_model(save_model(model, tmp_path / "m.zarr"))
    np.testing.assert_array_equal(loaded.predict(X_TEST), model.predict(X_TEST))
    unpickled = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(unpickled.predict(X_TEST), model.predict(X_TEST))


def test_other_constructor_parameters_give_a_clear_error(tmp_path, fitted):
    path = save_model(fitted, tmp_path / "m.nc")
    tree = xr.open_datatree(path, engine="h5netcdf").load()
    params = json.loads(tree.attrs["params"])
    params["old_option"] = 1
    del params["prior_params"]
    tree.attrs["params"] = json.dumps(params)
    tree.attrs["checksum"] = tree_checksum(tree)  # as another version would have written it
    tree.to_netcdf(tmp_path / "other.nc", engine="h5netcdf")
    with pytest.raises(
        ValueError, match=r"other constructor parameters.*missing \['prior_params'\].*old_option"
    ):
        load_model(tmp_path / "other.nc")


def test_corrupted_or_foreign_files(tmp_path, fitted):
    bad = tmp_path / "bad.nc"
    bad.write_bytes(b"not a netcdf file at all")
    with pytest.raises(ValueError, match="could not read a bayes_rvm model"):
        load_model(bad)
    path = save_model(fitted, tmp_path / "m.nc")
    truncated = tmp_path / "truncated.nc"
    truncated.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match="could not read"):
        load_model(truncated)
    xr.DataTree(xr.Dataset(attrs={"x": 1})).to_netcdf(tmp_path / "foreign.nc", engine="h5netcdf")
    with pytest.raises(ValueError, match="not a bayes_rvm model"):
        load_model(tmp_path / "foreign.nc")
    with pytest.raises(FileNotFoundError):
        load_model(tmp_path / "missing.nc")


def test_unserialisable_kernel_points_to_pickle(tmp_path):
    X, y = make_sinc(20, random_state=0, shuffle=False)
    model = RVR(kernel=lambda A, B: A @ B.T).fit(X, y)
    with pytest.raises(TypeError, match="pickle"):
        save_model(model, tmp_path / "m.nc")


@pytest.mark.parametrize("multi_class", ["multinomial", "ovr"])
@pytest.mark.parametrize("n_classes", [2, 3])
def test_classifier_round_trip(tmp_path, multi_class, n_classes):
    from sklearn.datasets import make_blobs

    from bayes_rvm.estimators.classifier import RVC

    X, y = make_blobs(90, centers=n_classes, cluster_std=2.0, random_state=0)
    labels = np.array(["ant", "bee", "cow"])[y]
    model = RVC(gamma=0.2, multi_class=multi_class).fit(X, labels)
    loaded = load_model(save_model(model, tmp_path / "c.nc"))
    np.testing.assert_array_equal(loaded.predict_proba(X), model.predict_proba(X))
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    assert loaded.get_params() == model.get_params()


def _walk_attrs(tree: xr.DataTree):
    """(group path, key, value) of every attribute of every group and variable of ``tree``."""
    for node in tree.subtree:
        ds = node.to_dataset(inherit=False)
        for key, value in node.attrs.items():
            yield node.path, key, value
        for name, var in ds.variables.items():
            for key, value in var.attrs.items():
                yield f"{node.path}:{name}", key, value


def test_a_saved_file_names_its_classes_by_short_names_only(tmp_path, fitted):
    # Moving a class must not break a file: no attribute holds a module path.
    from sklearn.datasets import make_blobs

    from bayes_rvm.estimators.classifier import RVC

    X, y = make_blobs(60, centers=3, random_state=0)
    for model in (fitted, RVC(gamma=0.2, multi_class="ovr").fit(X, y)):
        tree = xr.open_datatree(save_model(model, tmp_path / "m.nc"), engine="h5netcdf")
        attrs = list(_walk_attrs(tree))
        assert not [a for a in attrs if "bayes_rvm." in str(a[2])]
        assert tree.attrs["format"] == FORMAT
        assert tree.attrs["estimator"] == type(model).__name__
        kinds = {value for _, key, value in attrs if key.endswith("kind")}
        assert kinds <= {"EvidenceFit", "GaussianWeights", "LaplaceWeights"} and kinds


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t["fit"].attrs.update(kind="bayes_rvm.result:Fit"), "unknown result kind"),
        (lambda t: t["fit"].attrs.update({"posterior.kind": "Weights"}), "unknown result kind"),
        (lambda t: t.attrs.update(estimator="SVR"), "unknown estimator 'SVR'"),
    ],
)
def test_unknown_kinds_are_named(tmp_path, fitted, edit, message):
    tree = xr.open_datatree(save_model(fitted, tmp_path / "m.nc"), engine="h5netcdf").load()
    edit(tree)
    tree.attrs["checksum"] = tree_checksum(tree)
    tree.to_netcdf(tmp_path / "other.nc", engine="h5netcdf")
    with pytest.raises(ModelFileError, match=message):
        load_model(tmp_path / "other.nc")


def test_files_of_an_earlier_format_are_refused_naming_both_formats(tmp_path, fitted):
    # Written by bayes_rvm at 23a5226 in format 2 (module paths for its classes); and fresh
    # files marked as format 1, which carried no checksum, and 3. None is read: re-fit and save.
    tree = xr.open_datatree(save_model(fitted, tmp_path / "m.nc"), engine="h5netcdf").load()
    tree.attrs["format"] = "bayes_rvm-model/1"
    del tree.attrs["checksum"]
    tree.to_netcdf(tmp_path / "one.nc", engine="h5netcdf")
    old = {"bayes_rvm-model/2": Path(__file__).parent / "data" / "rvr_23a5226.nc"}
    old["bayes_rvm-model/1"] = tmp_path / "one.nc"
    # Format 3 stored the flat constructor parameters of before (nu, draws, n_centres, ...).
    tree.attrs["format"] = "bayes_rvm-model/3"
    tree.attrs["checksum"] = tree_checksum(tree)
    tree.to_netcdf(tmp_path / "three.nc", engine="h5netcdf")
    old["bayes_rvm-model/3"] = tmp_path / "three.nc"
    for fmt, path in old.items():
        with pytest.raises(ModelFileError) as info:
            load_model(path)
        message = str(info.value)
        assert str(path) in message and repr(fmt) in message and repr(FORMAT) in message
        assert "re-fit" in message
        assert info.value.__cause__ is None  # a message, not a traceback from inside
    # Such a file is still a saved model: a save may replace it.
    save_model(fitted, tmp_path / "one.nc")
    assert load_model(tmp_path / "one.nc").get_params() == fitted.get_params()


@pytest.fixture(scope="module")
def statistics_mcmc():
    # MCMC after a fit from sufficient statistics (chunk_rows): the model file must keep them.
    import warnings

    rng = np.random.default_rng(0)
    X = rng.uniform(-5, 5, (1500, 2))
    y = np.sinc(X[:, 0] / np.pi) * np.cos(X[:, 1] / 2) + 0.1 * rng.standard_normal(1500)
    model = RVR(inference="mcmc", centres=("random", 20), chunk_rows=400)
    model.set_params(sampler_config={"draws": 60, "chains": 2}, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 60 draws: the R-hat warning is not this test's
        model.fit(X, y, progressbar=False)
    assert model._fitted_on_statistics and model._mcmc_basis() == "relevant"
    return X, y, model


def _same_mcmc_model(loaded, fitted):
    """Both build the MCMC model of the same columns, with the same density at one point."""
    assert loaded._mcmc_basis() == "relevant"
    np.testing.assert_array_equal(loaded._mcmc_columns(), fitted._mcmc_columns())
    ours, theirs = loaded.make_model(), fitted.make_model()
    point = theirs.initial_point()
    assert set(point) == set(ours.initial_point())
    assert ours.compile_logp()(point) == pytest.approx(theirs.compile_logp()(point), rel=1e-12)


def test_statistics_mcmc_round_trip(tmp_path, statistics_mcmc):
    from bayes_rvm.basis.statistics import SufficientStatistics

    X, y, fitted = statistics_mcmc
    loaded = load_model(save_model(fitted, tmp_path / "s.nc"))
    Xt = np.random.default_rng(1).uniform(-5, 5, (100, 2))
    for got, want in zip(
        loaded.predict(Xt, return_std=True), fitted.predict(Xt, return_std=True), strict=True
    ):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    # The statistics come back bit for bit, and are those of the design (a dense product).
    for name in ("gram", "cross", "tt", "t_sum", "n"):
        np.testing.assert_array_equal(
            getattr(loaded.statistics_, name), getattr(fitted.statistics_, name)
        )
    dense = SufficientStatistics.from_design(fitted.basis_.transform(X), y)
    np.testing.assert_allclose(loaded.statistics_.gram, dense.gram, rtol=1e-12)
    np.testing.assert_allclose(loaded.statistics_.cross, dense.cross, rtol=1e-12, atol=1e-12)
    _same_mcmc_model(loaded, fitted)


def test_statistics_mcmc_files_without_their_statistics_are_refused(tmp_path, statistics_mcmc):
    _, _, fitted = statistics_mcmc
    tree = xr.open_datatree(save_model(fitted, tmp_path / "s.nc"), engine="h5netcdf").load()
    arrays = tree["arrays"].to_dataset()
    kept = [k for k in arrays.data_vars if not k.startswith("statistics_")]
    assert len(kept) < len(arrays.data_vars)
    tree["arrays"] = xr.DataTree(arrays[kept])
    tree.attrs["checksum"] = tree_checksum(tree)
    tree.to_netcdf(tmp_path / "old.nc", engine="h5netcdf")
    with pytest.raises(ModelFileError, match="sufficient statistics without its statistics"):
        load_model(tmp_path / "old.nc")


def test_inconsistent_stored_statistics_are_refused(tmp_path, statistics_mcmc):
    _, _, fitted = statistics_mcmc
    tree = xr.open_datatree(save_model(fitted, tmp_path / "s.nc"), engine="h5netcdf").load()
    arrays = tree["arrays"].to_dataset()
    tree["arrays"] = xr.DataTree(arrays.drop_vars("statistics_cross"))
    tree.attrs["checksum"] = tree_checksum(tree)
    tree.to_netcdf(tmp_path / "partial.nc", engine="h5netcdf")
    with pytest.raises(ValueError, match=r"statistics without \['cross'\]"):
        load_model(tmp_path / "partial.nc")


def _alpha_at_draws(model, draws):
    """The graph's ``alpha`` deterministic evaluated at stored ``alpha_rel`` draws."""
    import pytensor

    alpha = pytensor.function([model["alpha_rel"]], model["alpha"], on_unused_input="ignore")
    return np.stack([alpha(a) for a in draws.values.reshape(-1, draws.shape[-1])])


def test_mcmc_draws_round_trip_on_the_graphs_column_scale(tmp_path):
    import warnings

    X, y = make_sinc(30, random_state=0, shuffle=False)
    model = RVR(
        gamma=0.11,
        inference="mcmc",
        sampler_config={"draws": 10, "tune": 50, "chains": 1},
        random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 10 draws: convergence warnings are not this test's
        model.fit(X, y, progressbar=False)
    loaded = load_model(save_model(model, tmp_path / "m.nc"))
    for var in ("alpha_rel", "alpha"):
        np.testing.assert_array_equal(
            loaded.idata_["posterior"][var], model.idata_["posterior"][var]
        )
    post = loaded.idata_["posterior"].dataset
    stored = model.idata_["posterior"]["alpha"].values.reshape(-1, post.sizes["basis"])
    got = _alpha_at_draws(loaded.make_model(), post["alpha_rel"])
    np.testing.assert_allclose(got, stored, rtol=1e-10)
    # One chain has no R-hat: null in the saved diagnostics, which strict JSON parsers read
    # (Python's NaN token is not JSON).
    import json

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    diag = json.loads(loaded.idata_.attrs["diagnostics"], parse_constant=refuse)
    assert diag["max_rhat"] is None and diag["min_ess_bulk"] > 0


def _width_search_fits():
    """Fits that search the width: the RVM's own evidence (grid and refinements), the default
    rule from sufficient statistics (no design: ``Phi`` None), a one-vs-rest classifier."""
    from sklearn.datasets import make_blobs

    from bayes_rvm.estimators.classifier import RVC

    X, y = make_sinc(40, noise=0.1, random_state=0, shuffle=False)
    rng = np.random.default_rng(0)
    Xs = rng.uniform(-5, 5, (600, 2))
    ys = np.sinc(Xs[:, 0] / np.pi) + 0.1 * rng.standard_normal(600)
    Xb, yb = make_blobs(60, centers=3, cluster_std=2.0, random_state=0)
    return {
        "evidence": (RVR(gamma="evidence"), X, y),
        "statistics": (RVR(centres=("random", 20), chunk_rows=200, random_state=0), Xs, ys),
        "ovr": (RVC(multi_class="ovr"), Xb, yb),
    }


@pytest.mark.parametrize("case", ["evidence", "statistics", "ovr"])
def test_width_selection_is_saved_without_its_design(tmp_path, case):
    model, X, y = _width_search_fits()[case]
    want = model.fit(X, y).width_selection_
    path = save_model(model, tmp_path / "w.nc")
    got = load_model(path).width_selection_
    assert got.Phi is None
    assert type(got.fit) is type(want.fit)
    np.testing.assert_array_equal(got.length_scale, want.length_scale)
    assert got.starts == want.starts and got.n_fits == want.n_fits
    assert got.seconds == want.seconds and got.fit.log_evidence == want.fit.log_evidence
    np.testing.assert_array_equal(got.fit.active, want.fit.active)
    np.testing.assert_array_equal(got.fit.mean, want.fit.mean)
    np.testing.assert_array_equal(got.path.log_evidence, want.path.log_evidence)
    np.testing.assert_array_equal(got.path.length_scale, want.path.length_scale)
    if case == "evidence":
        assert len(got.starts) >= 1 and got.n_fits > 1  # a grid and its refinements
    if case == "ovr":
        assert len(got.fit.fits) == 3
        for a, b in zip(got.fit.fits, want.fit.fits, strict=True):
            np.testing.assert_array_equal(a.alpha, b.alpha)
    # A refit at a fixed width made no search: the earlier one's diagnostics are not kept.
    model.set_params(gamma=0.3).fit(X, y)
    assert not hasattr(model, "width_selection_")
    assert not hasattr(load_model(save_model(model, tmp_path / "fixed.nc")), "width_selection_")


def test_an_inconsistent_width_selection_is_refused(tmp_path):
    X, y = make_sinc(40, noise=0.1, random_state=0, shuffle=False)
    tree = xr.open_datatree(save_model(RVR().fit(X, y), tmp_path / "w.nc"), engine="h5netcdf")
    tree = tree.load()
    fit = tree["width_selection/fit_0"].to_dataset()
    tree["width_selection/fit_0"] = xr.DataTree(fit.isel(alpha_0=slice(1, None)))
    tree.attrs["checksum"] = tree_checksum(tree)
    tree.to_netcdf(tmp_path / "bad.nc", engine="h5netcdf")
    with pytest.raises(ValueError, match=r"alphas of shape \(40,\) for 41 basis functions"):
        load_model(tmp_path / "bad.nc")


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_a_saved_classifier_keeps_its_labels_dtype(tmp_path, suffix):
    # Object labels came back as '<U3' and uint8 ones as int64 (the JSON list lost the dtype).
    from bayes_rvm.estimators.classifier import RVC

    X, y = make_sinc(40, noise=0.1, random_state=0)
    for labels in (np.array(["no", "yes"], dtype=object)[(y > 0.2).astype(int)], y > 0.2):
        labels = labels if labels.dtype == object else labels.astype(np.uint8)
        est = RVC(gamma=1.0).fit(X, labels)
        path = tmp_path / f"rvc_{labels.dtype}{suffix}"
        save_model(est, path)
        loaded = load_model(path)
        assert loaded.classes_.dtype == est.classes_.dtype == labels.dtype
        assert loaded.predict(X).dtype == labels.dtype
        np.testing.assert_array_equal(loaded.predict(X), est.predict(X))
