"""Nothing lost, nothing silently wrong (issue 12): saved models, damaged files, extreme scales,
memory and bad targets.

Each test replays a case of the issue's battery; the property tests (hypothesis) check that
save -> load -> predict is bit-identical for random fits, and that any truncation or flipped byte
of a saved file either loads bit-identically or raises :class:`~bayes_rvm.io.ModelFileError`.
"""

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bayes_rvm._base import MEMORY_ENV, memory_limit, normalise_columns
from bayes_rvm.classifier import RVC
from bayes_rvm.datasets import make_sinc, sinc
from bayes_rvm.estimators import RVR
from bayes_rvm.io import ModelFileError, _checksum, load_model, save_model

X_TEST = np.linspace(-10, 10, 57)[:, None]


@pytest.fixture(scope="module")
def sinc_model():
    X, y = make_sinc(50, random_state=3)
    model = RVR(gamma=0.11).fit(X, y)
    model.idata_  # built so that it is saved with the model
    return model


@pytest.fixture(scope="module")
def classifier():
    from sklearn.datasets import make_blobs

    X, y = make_blobs(60, centers=3, cluster_std=2.0, random_state=0)
    return RVC(gamma=0.2).fit(X, np.array(["ant", "bee", "cow"])[y]), X


def _predictions(model, X):
    if isinstance(model, RVC):
        return model.predict_proba(X)
    mean, std = model.predict(X, return_std=True)
    return np.c_[mean, std]


# -- 1. data loss ----------------------------------------------------------------------------------
def test_save_never_destroys_a_users_folder_or_file(tmp_path, sinc_model):
    project = tmp_path / "my_project"
    (project / "src").mkdir(parents=True)
    (project / "notes.txt").write_text("three months of work")
    (project / "src" / "main.py").write_text("print('hi')")
    with pytest.raises(FileExistsError, match=r"my_project exists and is not a bayes_rvm model"):
        save_model(sinc_model, project)
    assert (project / "notes.txt").read_text() == "three months of work"
    assert (project / "src" / "main.py").read_text() == "print('hi')"
    # A file that merely has a model's suffix is not a model either.
    other = tmp_path / "results.nc"
    other.write_bytes(b"someone else's netCDF")
    with pytest.raises(FileExistsError, match="refusing to write over it"):
        save_model(sinc_model, other)
    assert other.read_bytes() == b"someone else's netCDF"
    # Nothing of the refused saves is left behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my_project", "results.nc"]


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_an_earlier_model_is_replaced_atomically(tmp_path, sinc_model, suffix):
    X, y = make_sinc(30, random_state=9)
    first = RVR(gamma=0.3).fit(X, y)
    path = save_model(first, tmp_path / f"m{suffix}")
    save_model(sinc_model, path)
    np.testing.assert_array_equal(
        _predictions(load_model(path), X_TEST), _predictions(sinc_model, X_TEST)
    )
    with pytest.raises(FileExistsError, match="overwrite=False"):
        save_model(first, path, overwrite=False)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_an_interrupted_save_leaves_the_old_model_whole(tmp_path, sinc_model, monkeypatch, suffix):
    X, y = make_sinc(30, random_state=9)
    old = RVR(gamma=0.3).fit(X, y)
    path = save_model(old, tmp_path / f"m{suffix}")
    writer = "to_zarr" if suffix == ".zarr" else "to_netcdf"
    original = getattr(xr.DataTree, writer)

    def crash(self, target, *args, **kwargs):
        original(self, target, *args, **kwargs)
        raise KeyboardInterrupt  # the user pressed Ctrl-C once the bytes were out

    monkeypatch.setattr(xr.DataTree, writer, crash)
    with pytest.raises(KeyboardInterrupt):
        save_model(sinc_model, path)
    monkeypatch.undo()
    np.testing.assert_array_equal(_predictions(load_model(path), X_TEST), _predictions(old, X_TEST))
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


# -- 3. damaged files ------------------------------------------------------------------------------
def test_a_missing_zarr_chunk_is_caught(tmp_path, sinc_model):
    path = save_model(sinc_model, tmp_path / "m.zarr")
    chunks = sorted((path / "fit" / "mean" / "c").rglob("*"))
    chunks[-1].unlink()  # zarr would fill it with NaN and predict NaN everywhere
    with pytest.raises(ModelFileError, match=r"m\.zarr is damaged.*checksum"):
        load_model(path)


def test_a_flipped_byte_in_the_posterior_mean_of_a_netcdf_file_is_caught(tmp_path, sinc_model):
    path = save_model(sinc_model, tmp_path / "m.nc")
    data = bytearray(path.read_bytes())
    at = data.find(sinc_model.fit_.mean.tobytes())
    assert at > 0
    data[at + 5] ^= 0x01  # a mantissa bit of the first weight: it still loads as a number
    path.write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match=r"m\.nc is damaged"):
        load_model(path)


def _edit(path: Path, edit, *, fix_checksum: bool) -> Path:
    """Rewrite a saved netCDF model after ``edit(tree)``; optionally with a fresh checksum."""
    tree = xr.load_datatree(path, engine="h5netcdf")
    edit(tree)
    if fix_checksum:
        tree.attrs["checksum"] = _checksum(tree)
    out = path.with_name("edited.nc")
    tree.to_netcdf(out, engine="h5netcdf")
    return out


def _set_attr(group, key, value):
    def edit(tree):
        node = tree if group == "/" else tree[group]
        node.attrs[key] = value

    return edit


def _set_json(group, key, change):
    def edit(tree):
        node = tree if group == "/" else tree[group]
        node.attrs[key] = json.dumps(change(json.loads(node.attrs[key])))

    return edit


EDITS = {
    "n_centres_": (_set_attr("basis", "n_centres_", "49"), "n_basis_ = 51 but n_centres_ = 49"),
    "gamma_": (_set_attr("basis", "gamma_", "0.2"), r"gamma_ = 0.2 but gamma=0.11"),
    "kernel": (
        _set_json("/", "params", lambda p: {**p, "kernel": "laplacian"}),
        "training design does not match the kernel",
    ),
    "output count": (
        _set_json("/", "extras", lambda e: {**e, "single": False}),
        r"training targets of shape \(50,\)",
    ),
    "invalid JSON": (_set_attr("/", "params", "{kernel: rbf"), "'params' is not valid JSON"),
    "missing attribute": (
        lambda tree: tree["basis"].attrs.pop("gamma_"),
        r"/basis: missing attribute 'gamma_'",
    ),
}


@pytest.mark.parametrize("what", list(EDITS))
def test_edited_state_is_caught_by_the_checksum_and_by_the_consistency_checks(
    tmp_path, sinc_model, what
):
    edit, message = EDITS[what]
    path = save_model(sinc_model, tmp_path / "m.nc")
    with pytest.raises(ModelFileError, match="damaged"):
        load_model(_edit(path, edit, fix_checksum=False))
    # With a matching checksum (a file from a buggy writer) the state must still agree with itself.
    with pytest.raises(ModelFileError, match=rf"edited\.nc.*{message}"):
        load_model(_edit(path, edit, fix_checksum=True))


def test_a_missing_group_is_named(tmp_path, sinc_model):
    path = save_model(sinc_model, tmp_path / "m.zarr")
    shutil.rmtree(path / "basis")
    with pytest.raises(ModelFileError, match="damaged"):
        load_model(path)
    tree = xr.load_datatree(save_model(sinc_model, tmp_path / "m.nc"), engine="h5netcdf")
    tree = xr.DataTree.from_dict(
        {k: v.to_dataset(inherit=False) for k, v in tree.subtree_with_keys if k != "basis"}
    )
    tree.attrs["checksum"] = _checksum(tree)
    tree.to_netcdf(tmp_path / "nobasis.nc", engine="h5netcdf")
    with pytest.raises(ModelFileError, match=r"nobasis\.nc: the group '/basis' is missing"):
        load_model(tmp_path / "nobasis.nc")


def test_edited_classes_of_a_classifier_are_caught(tmp_path, classifier):
    model, _ = classifier
    path = save_model(model, tmp_path / "c.nc")
    drop = _set_json("/", "extras", lambda e: {**e, "classes": e["classes"][:2]})
    with pytest.raises(ModelFileError, match="damaged"):
        load_model(_edit(path, drop, fix_checksum=False))
    with pytest.raises(ModelFileError, match="a fit with 3 outputs for 2 classes"):
        load_model(_edit(path, drop, fix_checksum=True))


def test_legacy_files_without_checksum_load_with_a_warning(tmp_path, sinc_model):
    path = save_model(sinc_model, tmp_path / "m.nc")

    def legacy(tree):
        tree.attrs["format"] = "bayes_rvm-model/1"
        del tree.attrs["checksum"]

    with pytest.warns(UserWarning, match="cannot be verified"):
        loaded = load_model(_edit(path, legacy, fix_checksum=False))
    np.testing.assert_array_equal(_predictions(loaded, X_TEST), _predictions(sinc_model, X_TEST))


# -- 6. all fitted state saved ---------------------------------------------------------------------
@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_feature_names_survive_and_swapped_columns_still_raise(tmp_path, suffix):
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(40, 2)), columns=["height", "weight"])
    y = frame["height"] - 2 * frame["weight"]
    model = RVR(kernel="linear").fit(frame, y)
    loaded = load_model(save_model(model, tmp_path / f"m{suffix}"))
    np.testing.assert_array_equal(loaded.feature_names_in_, model.feature_names_in_)
    swapped = frame[["weight", "height"]]
    for m in (model, loaded):
        with pytest.raises(ValueError, match="feature names should match"):
            m.predict(swapped)
    np.testing.assert_array_equal(loaded.predict(frame), model.predict(frame))


# -- property tests --------------------------------------------------------------------------------
PROPERTY = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@st.composite
def random_fits(draw):
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(8, 40))
    p = draw(st.integers(1, 3))
    X = rng.normal(size=(n, p)) * draw(st.sampled_from([1e-3, 1.0, 1e3]))
    kernel = draw(st.sampled_from(["rbf", "linear", "poly", "laplacian"]))
    common = {"kernel": kernel, "bias": draw(st.booleans())}
    if draw(st.booleans()):
        d = draw(st.integers(1, 2))
        y = np.sin(X.sum(axis=1) / X.std()) + 0.1 * rng.normal(size=n)
        y = y if d == 1 else np.c_[y, 2 * y + rng.normal(size=n)]
        prior = draw(st.sampled_from(["ard", "student_t"]))
        model = RVR(**common, prior=prior, max_iter=300).fit(X, y)
        if draw(st.booleans()):
            model.idata_  # built so that it is saved with the model
    else:
        n_classes = draw(st.integers(2, 3))
        y = np.arange(n) % n_classes
        rng.shuffle(y)
        multi = draw(st.sampled_from(["multinomial", "ovr"]))
        model = RVC(**common, multi_class=multi, max_iter=300).fit(X, y)
    return model, X


@PROPERTY
@given(fitted=random_fits(), suffix=st.sampled_from([".nc", ".zarr"]))
def test_property_save_load_predict_is_bit_identical(tmp_path_factory, fitted, suffix):
    model, X = fitted
    path = save_model(model, tmp_path_factory.mktemp("p") / f"m{suffix}")
    loaded = load_model(path)
    np.testing.assert_array_equal(_predictions(loaded, X), _predictions(model, X))
    assert loaded.get_params() == model.get_params()


@pytest.fixture(scope="module")
def saved_files(tmp_path_factory, sinc_model):
    root = tmp_path_factory.mktemp("saved")
    return {s: save_model(sinc_model, root / f"m{s}") for s in (".nc", ".zarr")}


@settings(PROPERTY, max_examples=40)
@given(
    suffix=st.sampled_from([".nc", ".zarr"]),
    which=st.integers(0, 10**6),
    where=st.floats(0.0, 1.0, exclude_max=True),
    damage=st.one_of(st.just("truncate"), st.integers(1, 255)),
)
def test_property_damaged_files_load_identically_or_raise_clearly(
    tmp_path_factory, saved_files, sinc_model, suffix, which, where, damage
):
    src = saved_files[suffix]
    path = tmp_path_factory.mktemp("d") / src.name
    if src.is_dir():
        shutil.copytree(src, path)
        files = sorted(f for f in path.rglob("*") if f.is_file())
        target = files[which % len(files)]
    else:
        shutil.copyfile(src, path)
        target = path
    data = bytearray(target.read_bytes())
    at = int(where * len(data))
    if damage == "truncate":
        del data[at:]
    else:
        data[at] ^= damage
    target.write_bytes(bytes(data))
    try:
        loaded = load_model(path)
    except ModelFileError as exc:
        assert str(path) in str(exc)
        return
    np.testing.assert_array_equal(_predictions(loaded, X_TEST), _predictions(sinc_model, X_TEST))


# -- 2. scale-safe normalisation -------------------------------------------------------------------
@pytest.mark.parametrize("power", [-1000, -600, -300, 0, 300, 600, 1000])
def test_normalised_columns_are_bit_identical_under_power_of_two_scaling(power):
    rng = np.random.default_rng(1)
    Phi = rng.normal(size=(30, 6))
    Phi[:, 2] = 0.0
    ref = Phi.copy()
    ref_norms = normalise_columns(ref)
    np.testing.assert_allclose(
        ref_norms[[0, 1, 3, 4, 5]], np.linalg.norm(Phi, axis=0)[[0, 1, 3, 4, 5]]
    )
    assert ref_norms[2] == 1.0 and np.all(ref[:, 2] == 0.0)
    # Multiplying by a power of two is exact, so the normalised design must not change by a bit
    # and the norms must scale exactly, far beyond where squaring overflows (2^512) or underflows.
    scaled = Phi * 2.0**power
    norms = normalise_columns(scaled)
    np.testing.assert_array_equal(scaled, ref)
    np.testing.assert_array_equal(norms[[0, 1, 3, 4, 5]], ref_norms[[0, 1, 3, 4, 5]] * 2.0**power)


@pytest.fixture(scope="module")
def linear_problem():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(100, 2))
    y = X @ [1.5, -2.0] + 0.05 * rng.normal(size=100)
    return X, y, (X @ [1.5, -2.0] > 0).astype(int)


@pytest.mark.parametrize("scale", [1e80, 1e-100])
def test_linear_kernel_on_extreme_input_scales_fits_as_at_unit_scale(linear_problem, scale):
    # The case: the sum of squares overflowed (1e80) or underflowed (1e-100), every kernel
    # column was dropped and the fit was bias-only (R^2 -0.0017, accuracy 0.53) without a word.
    X, y, labels = linear_problem
    reg = RVR(kernel="linear").fit(X, y)
    clf = RVC(kernel="linear").fit(X, labels)
    assert reg.score(X, y) > 0.998 and clf.score(X, labels) == 1.0
    with pytest.warns(RuntimeWarning, match="alpha_ and the posterior covariance sigma_"):
        reg_s = RVR(kernel="linear").fit(X * scale, y)
    with pytest.warns(RuntimeWarning, match="leave float64's range"):
        clf_s = RVC(kernel="linear").fit(X * scale, labels)
    # The RVM is equivariant under scaling the inputs: same relevance vectors, same predictions.
    np.testing.assert_array_equal(reg_s.relevance_, reg.relevance_)
    np.testing.assert_array_equal(clf_s.relevance_, clf.relevance_)
    for a, b in zip(
        reg_s.predict(X * scale, return_std=True), reg.predict(X, return_std=True), strict=True
    ):
        np.testing.assert_allclose(a, b, rtol=1e-7)
    np.testing.assert_allclose(clf_s.predict_proba(X * scale), clf.predict_proba(X), atol=1e-9)
    # Pruned basis functions stay pruned (inf), never NaN from inf * 0.
    assert not np.isnan(reg_s.fit_.alpha).any() and not np.isnan(clf_s.fit_.alpha).any()


# -- 5. memory --------------------------------------------------------------------------------
@pytest.fixture
def eight_gib(monkeypatch):
    monkeypatch.setenv(MEMORY_ENV, "8GiB")


def test_a_design_matrix_too_large_stops_before_allocating_and_names_centres(eight_gib):
    # The case: RVR() on 50,000 points asked for an 18.6 GiB design matrix and died with
    # a bare MemoryError (or woke the OOM killer). 50000 * 50001 * 8 bytes = 18.63 GiB.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50_000, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=50_000)
    with pytest.raises(MemoryError, match=r"50000 x 50001 design matrix, 18\.6 GiB") as info:
        RVR().fit(X, y)
    message = str(info.value)
    assert "RVR(centres='kmeans', n_centres=2000)" in message and MEMORY_ENV in message
    assert "limit of 8.0 GiB" in message
    # RVC's MacKay engine also holds an M x M Hessian: 37.3 GiB in all.
    with pytest.raises(MemoryError, match=r"37\.3 GiB.*RVC\(centres='kmeans', n_centres=2000\)"):
        RVC(solver="mackay").fit(X, y > 0)
    # The advice works: a subset of centres fits under the same limit.
    model = RVR(centres="random", n_centres=100, random_state=0).fit(X[:20_000], y[:20_000])
    assert model.score(X[20_000:], y[20_000:]) > 0.9


def test_the_memory_limit_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv(MEMORY_ENV, "1.5 GiB")
    assert memory_limit() == (1.5 * 2**30, f"{MEMORY_ENV}=1.5 GiB")
    monkeypatch.setenv(MEMORY_ENV, "2e9")
    assert memory_limit()[0] == 2e9
    monkeypatch.setenv(MEMORY_ENV, "lots")
    with pytest.raises(ValueError, match=f"{MEMORY_ENV}='lots' is not an amount of memory"):
        memory_limit()
    monkeypatch.delenv(MEMORY_ENV)
    limit, source = memory_limit()
    assert limit is None or (limit > 0 and source.startswith("half the"))


# -- 7. clear errors --------------------------------------------------------------------------
def test_regression_on_text_targets_says_so():
    X = np.arange(10.0)[:, None]
    with pytest.raises(ValueError, match=r"RVR needs numeric targets y; got dtype <U1.*use RVC"):
        RVR().fit(X, np.array(list("abcdefghij")))


# -- Issue 26, estimator side: offsets, duplicated rows, ARD widths, CV parameters, memory ------
@pytest.mark.parametrize("outputs", [1, 2])
def test_offsets_of_the_wrong_kind_are_refused_before_the_graph(outputs):
    import pymc as pm
    import pytensor.tensor as pt

    X, y = make_sinc(30, random_state=0)
    Y = y if outputs == 1 else np.c_[y, 2 * y]
    est = RVR(gamma=1.0).fit(X, Y)
    shape = Y.shape
    wrong = [
        np.zeros(29),  # one row short
        np.zeros((30, 1, 1)),  # one dimension too many
        np.zeros((30, 3)),  # the wrong number of outputs
        np.zeros(30) if outputs == 2 else np.zeros((30, 1)),  # ambiguous / 2-D for one output
        lambda m: pt.zeros(29),  # a callable's tensor of another static shape
        lambda m: m["Phi"][:29, 0],  # ... or of another symbolic shape
        lambda m: pm.Normal("b", 0.0, 1.0, shape=3),
    ]
    for offset in wrong:
        with pytest.raises(
            ValueError, match=rf"offset: .* mean it joins has shape {re.escape(str(shape))}"
        ):
            est.make_model(offset=offset)
    with pytest.raises(ValueError, match="offset must be numbers"):
        est.make_model(offset=["a"] * 30)
    with pytest.raises(ValueError, match="offset: the callable returned None"):
        est.make_model(offset=lambda m: None)
    with pytest.raises(ValueError, match="offset: the callable returned str"):
        est.make_model(offset=lambda m: "x")
    # Every shape that broadcasts unambiguously is taken, with the values it means.
    good = [2.0, np.full(shape, 2.0)] + (
        [np.full((30, 1), 2.0), np.full((1, 2), 2.0)] * (outputs - 1)
    )
    for offset in good:
        np.testing.assert_array_equal(est.make_model(offset=offset)["offset"].get_value(), 2.0)
    cols = 0 if outputs == 1 else slice(0, 2)  # a term of the mean's own shape
    model = est.make_model(offset=lambda m: pm.Normal("b", 0.0, 1.0) * m["Phi"][:, cols])
    expected = 2.0 * model["Phi"].get_value()[:, cols]
    np.testing.assert_allclose(model["offset"].eval({model["b"]: np.array(2.0)}), expected)


def test_exact_duplicate_rows_are_fitted_once_not_to_zero_noise():
    # Every row twice: the RVM's evidence grows without bound as the noise goes to 0 once the
    # basis interpolates the 100 distinct rows; gamma="evidence" ran there (noise sd 4e-7, 99
    # relevance vectors, twice the test error). The fit must be the one on the distinct rows.
    X, y = make_sinc(100, random_state=0)
    order = np.random.default_rng(0).permutation(200)  # duplicates not next to each other
    X2, y2 = np.vstack([X, X])[order], np.r_[y, y][order]
    once = RVR(gamma="evidence").fit(X, y)
    with pytest.warns(UserWarning, match="100 of the 200 training rows repeat another row exactly"):
        twice = RVR(gamma="evidence").fit(X2, y2)
    # The distinct rows in another order: the engine's path may differ, not the fit.
    assert twice.noise_variance_ == pytest.approx(once.noise_variance_, rel=0.05)
    assert twice.noise_variance_ > 0.05**2
    truth = sinc(X_TEST[:, 0])
    errors = [np.sqrt(np.mean((m.predict(X_TEST) - truth) ** 2)) for m in (once, twice)]
    assert errors[1] < 1.1 * errors[0] < 0.06
    np.testing.assert_array_equal(twice.relevance_vectors_, twice.basis_.centres_[twice.relevance_])
    # Repeated inputs with other targets are measurements, and a given noise level makes
    # duplicates repeated measurements: nothing is dropped (the posterior counts them twice,
    # as a fit with the noise variance halved on the distinct rows does).
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        replicate = RVR(gamma=1.0).fit(np.vstack([X, X]), np.r_[y, y + 0.1])
        assert replicate.basis_.centres_.shape[0] == 200
        fixed = RVR(gamma=1.0, noise_variance=0.02).fit(X2, y2)
    # A precomputed kernel's columns are the training samples too: a warning says what to do.
    K = np.exp(-((X2 - X2.T) ** 2))
    with pytest.warns(UserWarning, match="kernel='precomputed' they cannot be dropped"):
        RVR(kernel="precomputed").fit(K, y2)
    # Cross-validation drops them too: copies of a row in a fold's training and test rows
    # made held-out error reward interpolation (RVRCV chose 0.37 over 3.0, test RMSE 0.075 for
    # 0.044).
    from bayes_rvm.cv import RVRCV

    cv = RVRCV(widths=[3.0, 0.37], cv=3, random_state=0)
    with pytest.warns(UserWarning, match="100 of the 200 training rows") as record:
        cv.fit(np.vstack([X, X]), np.r_[y, y])
    assert record[0].filename == __file__  # the warning points at the user's call
    ref = RVRCV(widths=[3.0, 0.37], cv=3, random_state=0).fit(X, y)
    assert cv.length_scale_ == ref.length_scale_ == 3.0
    np.testing.assert_array_equal(
        cv.cv_results_["split_test_scores"], ref.cv_results_["split_test_scores"]
    )
    half = RVR(gamma=1.0, noise_variance=0.01, solver="mackay").fit(X, y)
    fixed_m = RVR(gamma=1.0, noise_variance=0.02, solver="mackay").fit(X2, y2)
    np.testing.assert_allclose(fixed_m.predict(X_TEST), half.predict(X_TEST), atol=1e-3)
    assert fixed.basis_.centres_.shape[0] == 200


def test_per_feature_widths_follow_a_feature_rescaled_by_1e12():
    # gamma="evidence_ard" searched in absolute units: a feature of values near 1e12 set the grid
    # and the bounds of the others, whose length scales collapsed (test RMSE 0.06 -> 0.87 here).
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (120, 3))
    f = lambda X: np.sin(X[:, 0]) + X[:, 1] ** 2 / 6  # noqa: E731 - the third feature is noise
    y = f(X) + 0.05 * rng.standard_normal(120)
    Xt = rng.uniform(-3, 3, (200, 3))
    ref = RVR(gamma="evidence_ard").fit(X, y)
    rmse = np.sqrt(np.mean((ref.predict(Xt) - f(Xt)) ** 2))
    assert rmse < 0.1 and ref.length_scale_[2] > 3 * max(ref.length_scale_[:2])
    for c in (1e12, 1e-8):
        s = np.array([1.0, c, 1.0])
        model = RVR(gamma="evidence_ard").fit(X * s, y)
        np.testing.assert_allclose(model.length_scale_ / s, ref.length_scale_, rtol=1e-3)
        np.testing.assert_allclose(model.predict(Xt * s), ref.predict(Xt), atol=1e-3)


@pytest.mark.parametrize(
    ("cls", "param", "value"),
    [
        ("RVRCV", "noise_variance", 0),
        ("RVRCV", "noise_variance", -1.0),
        ("RVRCV", "nu", -1.0),
        ("RVRCV", "tol", 0.0),
        ("RVRCV", "threshold_alpha", -1),
        ("RVRCV", "warm_start", "yes"),
        ("RVRCV", "cv", 1),
        ("RVRCV", "kernel", "poly"),
        ("RVCCV", "nu", -1.0),
        ("RVCCV", "solver", "newton"),
        ("RVCCV", "max_iter", 0),
        ("RVCCV", "threshold_alpha", 0),
    ],
)
def test_cv_estimators_check_their_parameters_as_rvr_and_rvc_do(cls, param, value, monkeypatch):
    from sklearn.utils._param_validation import InvalidParameterError

    from bayes_rvm import cv

    est = getattr(cv, cls)(**{param: value})
    template = est._template
    # Nothing reaches a fold: the search would raise its own error.
    monkeypatch.setattr(cv._WidthCV, "_search", lambda *a: pytest.fail("a fold was fitted"))
    X, y = make_sinc(20, random_state=0)
    with pytest.raises(InvalidParameterError, match=f"The '{param}' parameter of {cls} must be"):
        est.fit(X, y if cls == "RVRCV" else y > 0.2)
    if param in template._parameter_constraints and param != "kernel":
        # The same check as the estimator's own (the message names the other class).
        with pytest.raises(InvalidParameterError) as own:
            template(**{param: value}).fit(X, y if cls == "RVRCV" else y > 0.2)
        with pytest.raises(InvalidParameterError) as twin:
            est.fit(X, y if cls == "RVRCV" else y > 0.2)
        assert str(twin.value) == str(own.value).replace(template.__name__, cls, 1)


def test_predictions_too_large_for_memory_stop_before_allocating(eight_gib):
    # sample_y(n_samples=10**12) died in NumPy ("Unable to allocate 36.4 TiB"), and a request
    # between free memory and memory plus swap met the OOM killer; the joint covariance of
    # predict(return_cov=True) and posterior predictive draws at many inputs are its siblings.
    X, y = make_sinc(30, random_state=0)
    est = RVR(gamma=1.0).fit(X, y)
    with pytest.raises(
        MemoryError,
        match=r"RVR\.sample_y: 3 inputs x 1000000000000 samples.*"
        r"limit of 8\.0 GiB.*fewer samples",
    ):
        est.sample_y(X[:3], n_samples=10**12)
    # The estimate is never below what the draws alone hold: a limit of exactly their size stops.
    n_samples = 2**20
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(MEMORY_ENV, str(8 * 3 * n_samples))
        with pytest.raises(MemoryError, match="sample_y"):
            est.sample_y(X[:3], n_samples=n_samples)
    assert est.sample_y(X[:3], n_samples=1000).shape == (3, 1000)
    big = np.linspace(-10, 10, 40_000)[:, None]  # a 40000 x 40000 covariance: 11.9 GiB
    with pytest.raises(
        MemoryError,
        match=r"RVR\.predict: 40000 inputs with their joint cov.*"
        r"return_std=True",
    ):
        est.predict(big, return_cov=True)
    with pytest.raises(MemoryError, match=r"RVR\.sample_y: 40000 inputs"):
        est.sample_y(big)
    # What the advice offers works, and agrees with the covariance where that fits.
    _, std = est.predict(big, return_std=True)
    _, cov = est.predict(big[:50], return_cov=True)
    np.testing.assert_allclose(std[:50], np.sqrt(np.diag(cov)), rtol=1e-10)
    n_draws = est.idata_["posterior"].sizes["draw"] * est.idata_["posterior"].sizes["chain"]
    n_rows = int(8 * 2**30 / (8 * 2 * n_draws)) + 1  # the draws and their normals alone exceed it
    with pytest.raises(MemoryError, match=rf"RVR\.sample_posterior_predictive: {n_rows} inputs"):
        est.sample_posterior_predictive(np.zeros((n_rows, 1)))


def test_posterior_predictive_offsets_of_another_shape_are_refused():
    # A reshape took an (n * D,) vector or a transposed (D, n) offset and added each value to
    # another row.
    from bayes_rvm.inference import sample_posterior_predictive

    X, y = make_sinc(30, random_state=0)
    est = RVR(gamma=1.0).fit(X, np.c_[y, 2 * y])
    dt = est.idata_
    phi = est.basis_.transform(X[:4], columns=est.active_)
    for offset in (np.zeros((2, 4)), np.zeros(8), np.zeros((4, 3)), np.zeros(4)):
        with pytest.raises(ValueError, match=r"offset must have shape \(4, 2\)"):
            sample_posterior_predictive(dt, phi, offset=offset)
    with pytest.raises(ValueError, match="offset must be finite"):
        sample_posterior_predictive(dt, phi, offset=np.full((4, 2), np.nan))
    # A per-row, per-output offset shifts each draw by exactly its value.
    off = np.arange(8.0).reshape(4, 2)
    a = sample_posterior_predictive(dt, phi, offset=off, random_seed=1)["predictions"]["y"]
    b = sample_posterior_predictive(dt, phi, random_seed=1)["predictions"]["y"]
    np.testing.assert_allclose((a - b).values, np.broadcast_to(off, a.shape), atol=1e-12)


@pytest.mark.filterwarnings("ignore::UserWarning")  # short chains: diagnostics warn
@pytest.mark.parametrize("predictive", ["rvm", "rvm*"])
def test_mcmc_predictions_are_made_in_blocks_of_rows_with_the_same_result(
    predictive, monkeypatch, eight_gib
):
    # The mixture's per-row moments held every draw at every input at once (4000 draws x 10^6
    # inputs: 32 GB for a plain predict); blocks of rows give the same moments.
    from bayes_rvm._base import BaseRVM

    X, y = make_sinc(30, random_state=0)
    est = RVR(gamma=1.0, inference="mcmc", draws=100, tune=100, chains=2, random_state=0)
    est.set_params(predictive=predictive).fit(X, y, progressbar=False)
    whole = est.predict(X_TEST, return_std=True)
    monkeypatch.setattr(BaseRVM, "_BLOCK_FLOATS", 2 * 200 * 7)  # blocks of 7 rows
    blocked = est.predict(X_TEST, return_std=True)
    for a, b in zip(whole, blocked, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-15)
    # 200 draws at 5001 inputs, with their deviations, would exceed a limit of 8 MiB at once
    # (15 MiB); in blocks they fit. The joint covariance cannot.
    monkeypatch.setenv(MEMORY_ENV, "8MiB")
    many = np.linspace(-10, 10, 5001)[:, None]
    np.testing.assert_allclose(est.predict(many)[::1000], est.predict(many[::1000]), rtol=1e-12)
    with pytest.raises(MemoryError, match=r"RVR\.predict: 5001 inputs x 200 posterior draws with"):
        est.predict(many, return_cov=True)
