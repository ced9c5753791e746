"""Nothing lost, nothing silently wrong (issue 12): saved models, damaged files, extreme scales,
memory and bad targets.

Each test replays a case of the issue's battery; the property tests (hypothesis) check that
save -> load -> predict is bit-identical for random fits, and that any truncation or flipped byte
of a saved file either loads bit-identically or raises :class:`~bayes_rvm.io.ModelFileError`.
"""

import json
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bayes_rvm import load_model, save_model
from bayes_rvm.datasets import make_sinc, sinc
from bayes_rvm.estimators.base import MEMORY_ENV, memory_limit, normalise_columns
from bayes_rvm.estimators.classifier import RVC
from bayes_rvm.estimators.regressor import RVR
from bayes_rvm.io import ModelFileError, tree_checksum
from bayes_rvm.models.priors import Prior
from bayes_rvm.posterior import predictors

X_TEST = np.linspace(-10, 10, 57)[:, None]


@pytest.fixture(scope="module")
def sinc_model():
    X, y = make_sinc(50, random_state=3, shuffle=False)
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
    X, y = make_sinc(30, random_state=9, shuffle=False)
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
    X, y = make_sinc(30, random_state=9, shuffle=False)
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


def _edit(path: Path, edit, *, fix_checksum: bool, tree: xr.DataTree | None = None) -> Path:
    """Rewrite a saved netCDF model after ``edit(tree)``; optionally with a fresh checksum.

    ``tree``: the file's tree already read (it is copied, never edited); default read it here.
    """
    tree = xr.load_datatree(path, engine="h5netcdf") if tree is None else tree.copy(deep=True)
    edit(tree)
    if fix_checksum:
        tree.attrs["checksum"] = tree_checksum(tree)
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


@pytest.fixture(scope="module")
def saved_tree(saved_files):
    """The tree of the module's saved netCDF model, read once (tests edit copies of it)."""
    return xr.load_datatree(saved_files[".nc"], engine="h5netcdf")


@pytest.mark.parametrize("what", list(EDITS))
def test_edited_state_is_caught_by_the_checksum_and_by_the_consistency_checks(
    tmp_path, saved_files, saved_tree, what
):
    edit, message = EDITS[what]
    # the edited files are written beside the test's own copy of the saved model
    path = shutil.copyfile(saved_files[".nc"], tmp_path / "m.nc")
    with pytest.raises(ModelFileError, match="damaged"):
        load_model(_edit(path, edit, fix_checksum=False, tree=saved_tree))
    # With a matching checksum (a file from a buggy writer) the state must still agree with itself.
    with pytest.raises(ModelFileError, match=rf"edited\.nc.*{message}"):
        load_model(_edit(path, edit, fix_checksum=True, tree=saved_tree))


def test_a_missing_group_is_named(tmp_path, sinc_model):
    path = save_model(sinc_model, tmp_path / "m.zarr")
    shutil.rmtree(path / "basis")
    with pytest.raises(ModelFileError, match="damaged"):
        load_model(path)
    tree = xr.load_datatree(save_model(sinc_model, tmp_path / "m.nc"), engine="h5netcdf")
    tree = xr.DataTree.from_dict(
        {k: v.to_dataset(inherit=False) for k, v in tree.subtree_with_keys if k != "basis"}
    )
    tree.attrs["checksum"] = tree_checksum(tree)
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


def test_files_of_another_format_are_refused_naming_it(tmp_path, sinc_model):
    path = save_model(sinc_model, tmp_path / "m.nc")

    def legacy(tree):
        tree.attrs["format"] = "bayes_rvm-model/1"
        del tree.attrs["checksum"]

    with pytest.raises(ModelFileError, match="format 'bayes_rvm-model/1'; this version reads"):
        load_model(_edit(path, legacy, fix_checksum=False))


# -- 6. all fitted state saved ---------------------------------------------------------------------
def test_a_model_saved_with_a_key_its_kernel_ignores_still_loads(tmp_path, monkeypatch):
    # fit refuses kernel_params keys a named kernel does not read; models saved before, when such
    # a key was dropped without a word, load as they were (the file format is the same).
    X, y = make_sinc(30, noise=0.1, random_state=0)
    monkeypatch.setattr(RVR, "_check_kernel_kwargs", lambda self: None)
    model = RVR(gamma=1.0, kernel_params={"degre": 3}).fit(X, y)
    path = save_model(model, tmp_path / "m.nc")
    monkeypatch.undo()
    loaded = load_model(path)
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    with pytest.raises(ValueError, match="kernel_params has no key 'degre' for kernel='rbf'"):
        loaded.fit(X, y)


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
    max_examples=8,
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


@settings(PROPERTY, max_examples=20)
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


def test_a_large_design_is_normalised_and_checked_as_numpy_sums_it_to_the_bit():
    # A design of FUSED_MIN_ENTRIES values or more, once the fused kernel's module is loaded,
    # is summed and divided in compiled passes: the truth is NumPy's einsum and division, to the
    # bit (the engines' fits move by 1e-6 for a change of one unit in the last place).
    from bayes_rvm.basis import blocks  # noqa: F401  (loaded, as by a fused kernel block)
    from bayes_rvm.basis.kernels import FUSED_MIN_ENTRIES
    from bayes_rvm.evidence.problem import Problem

    rng = np.random.default_rng(2)
    Phi = rng.normal(size=(FUSED_MIN_ENTRIES // 400 + 3, 400)) * rng.uniform(0.1, 10.0, 400)
    Phi[:, 0] = np.exp(-rng.uniform(0.0, 5.0, Phi.shape[0]))  # peaks below 1: scaled first
    Phi[0, 0] = 1.0  # this one peaks at 1: not scaled
    Phi[:, 7] = 0.0
    peak = np.abs(Phi).max(axis=0)
    peak[peak == 0] = 1.0
    want = Phi / peak
    want_norms = np.sqrt(np.einsum("ij,ij->j", want, want))
    want_norms[want_norms == 0] = 1.0
    want /= want_norms
    problem = Problem.regression(Phi, rng.normal(size=Phi.shape[0]))
    np.testing.assert_array_equal(problem.design, want)
    np.testing.assert_array_equal(problem.norms, peak * want_norms)
    np.testing.assert_array_equal(problem.squared_norms, np.einsum("ij,ij->j", want, want))
    assert problem.squared_norms[7] == 0.0
    # Every column peaking at 1 (as rbf columns on the training points): nothing is scaled and
    # the sums of squares come from the pass that found the peaks.
    unit = np.delete(want, 7, axis=1)
    unit /= np.abs(unit).max(axis=0)
    assert np.all(np.abs(unit).max(axis=0) == 1.0)
    unit_norms = np.sqrt(np.einsum("ij,ij->j", unit, unit))
    problem = Problem.regression(unit.copy(), rng.normal(size=Phi.shape[0]))
    np.testing.assert_array_equal(problem.design, unit / unit_norms)
    np.testing.assert_array_equal(problem.norms, unit_norms)
    bad = np.ones_like(Phi)
    bad[3, 5] = np.nan
    with pytest.raises(ValueError, match="Phi must be finite"):
        _ = Problem.regression(bad, np.ones(Phi.shape[0])).squared_norms


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


def test_a_nearly_collinear_basis_warns_once_at_the_users_line():
    # At a very wide kernel the posterior precision turns numerically indefinite at several
    # steps of the engine; the warning named those steps' lines, so a user saw it up to five
    # times for one fit. Attributed to the caller, the default filter shows it once.
    from sklearn.datasets import make_regression

    X, y = make_regression(200, 5, n_informative=3, noise=0.1, random_state=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        RVR(kernel="rbf", gamma=1e-5).fit(X, y)
    jitter = [w for w in caught if "numerically indefinite" in str(w.message)]
    assert len(jitter) == 1 and jitter[0].filename == __file__
    assert "a larger gamma" in str(jitter[0].message)


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
    assert "RVR(centres=('kmeans', 2000))" in message and MEMORY_ENV in message
    assert "limit of 8.0 GiB" in message
    # RVC's MacKay engine also holds an M x M Hessian: 37.3 GiB in all.
    with pytest.raises(MemoryError, match=r"37\.3 GiB.*RVC\(centres=\('kmeans', 2000\)\)"):
        RVC(solver="mackay").fit(X, y > 0)
    # The advice works: a subset of centres fits under the same limit.
    model = RVR(centres=("random", 100), random_state=0).fit(X[:20_000], y[:20_000])
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


def test_a_fit_that_interpolates_its_rows_says_its_intervals_are_not_to_be_trusted():
    # Three points of a noisy sine: the evidence grew as the noise went to 0, and the fit
    # returned a noise sd of 6.5e-7 and predictive sds near 1e-6 without a word.
    rng = np.random.default_rng(1)
    X = rng.uniform(-5, 5, (200, 1))[:6]
    y = np.sin(X[:, 0]) + rng.normal(0, 0.2, 200)[:6]
    with pytest.warns(
        RuntimeWarning, match=r"noise estimate fell .* passes through its 3 training"
    ):
        three = RVR().fit(X[:3], y[:3])
    assert float(np.sqrt(three.noise_variance_)) < 1e-4
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        six = RVR().fit(X, y)  # six rows: a noise sd of 0.13, no warning
    assert 0.05 < float(np.sqrt(six.noise_variance_)) < 0.4
    # Sampled, the noise has its own posterior (sd about 0.6 here): nothing to warn of.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        RVR(inference="mcmc", sampler_config={"draws": 100, "tune": 100, "chains": 2}).fit(
            X[:3], y[:3], progressbar=False
        )
    assert not [w for w in caught if "noise estimate fell" in str(w.message)]


def test_the_noise_floor_is_relative_to_the_targets_spread_not_their_level():
    # The engines' floor on the noise sd was 1e-6 of the targets' root-mean-square: a constant
    # of 1e6 added to sinc targets (noise sd 0.1) held the noise sd at 1.0 and left one
    # relevance vector of four. It is 1e-6 of their standard deviation now.
    X, y = make_sinc(100, noise=0.1, random_state=0)
    Xt = np.linspace(-9, 9, 50)[:, None]
    truth = np.sinc(Xt[:, 0] / np.pi)
    base = RVR(gamma=0.147).fit(X, y)
    far = RVR(gamma=0.147).fit(X, y + 1e6)
    assert np.sqrt(far.noise_variance_) == pytest.approx(np.sqrt(base.noise_variance_), rel=0.05)
    error = np.sqrt(np.mean((base.predict(Xt) - truth) ** 2))
    assert np.sqrt(np.mean((far.predict(Xt) - 1e6 - truth) ** 2)) < 1.3 * error


def test_the_targets_spread_is_0_only_within_rounding():
    # Constant targets whose mean differs from each value in its last bit have a "spread" of
    # 1e-30 (a floor 1e30 times too low, which let a constant of 5436.25 escape it); targets
    # that vary by 1e-12 of their level, 17,000 float64 steps, are not constant.
    from bayes_rvm.evidence.problem import target_spread

    x = np.linspace(0, 6, 60)
    assert target_spread(np.full((100, 1), 5436.254478404314)) == 0.0
    varying = (1e6 + 1e-6 * np.sin(x))[:, None]
    assert target_spread(varying) == pytest.approx(np.sum((varying - varying.mean()) ** 2))
    # A flat fit at the floor is not said to pass through its targets.
    with pytest.warns(RuntimeWarning, match=r"the engines' floor, with 1 basis function\(s\) for"):
        RVR().fit(x[:, None], 1e6 + 1e-4 * np.sin(x))


def test_a_missing_target_in_an_object_array_is_named_before_the_width_search():
    # None passes scikit-learn's finiteness check of object arrays and became NaN on conversion:
    # the default width search then failed in its bookkeeping ("cannot convert float NaN").
    X = np.linspace(0.0, 1.0, 30)[:, None]
    y = np.array([*np.sin(6 * X[:-1, 0]), None], dtype=object)
    with pytest.raises(ValueError, match=r"RVR: the targets y must be finite; row 29 is nan"):
        RVR().fit(X, y)


# =============================================================================================
# Issue 26: studies, saved models and concurrency
# =============================================================================================
def _sinc_set(n=20, seed=0):
    X, y = make_sinc(n, noise=0.1, random_state=seed, shuffle=False)
    Xt, yt = make_sinc(30, noise=0.1, random=True, random_state=seed + 1, shuffle=False)
    return X, y, Xt, yt


def _same(a, b) -> bool:
    """Deep bit-for-bit equality of fitted attributes: arrays, dataclasses, bases, containers."""
    import dataclasses

    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(
            _same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, z) for x, z in zip(a, b, strict=True))
    if isinstance(a, xr.DataTree):
        return a.identical(b)
    if isinstance(a, np.ndarray | np.generic | float | int) and not isinstance(a, bool):
        a, b = np.asarray(a), np.asarray(b)
        nan = a.dtype.kind == "f" and b.dtype.kind == "f"
        return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=nan)
    if hasattr(a, "get_params"):  # a fitted KernelBasis
        return type(a) is type(b) and _same(vars(a), vars(b))
    return a == b


def _fitted_attributes(model) -> dict:
    return {k: v for k, v in vars(model).items() if k.endswith("_") and not k.startswith("_")}


def _as_saved(name: str, value):
    """A fitted attribute as a saved model keeps it: the width search's diagnostics without the
    N x M design at the chosen width (``Phi``, None when loaded)."""
    import dataclasses

    return dataclasses.replace(value, Phi=None) if name == "width_selection_" else value


def _round_trip_cases():
    from sklearn.datasets import make_blobs

    X, y = make_sinc(40, noise=0.1, random_state=0, shuffle=False)
    Xb, yb = make_blobs(60, centers=3, cluster_std=2.0, random_state=0)
    mcmc = dict(
        inference="mcmc", sampler_config={"draws": 60, "tune": 60, "chains": 2}, random_state=0
    )
    return {
        "ARD": (RVR(gamma=0.1), X, y),
        "student_t": (RVR(gamma=0.1, prior="student_t"), X, y),
        "rvm*": (RVR(gamma=0.1, predictive="rvm*"), X, y),
        "multi-output": (RVR(gamma=0.1), X, np.c_[y, 2 * y - 1]),
        "evidence width": (RVR(), X, y),
        "binary": (RVC(gamma=0.2), Xb, yb == 0),
        "one-vs-rest": (RVC(gamma=0.2, multi_class="ovr"), Xb, yb),
        "multinomial": (RVC(gamma=0.2), Xb, yb),
        "MCMC": (RVR(gamma=0.1, **mcmc), X, y),
    }


@pytest.mark.parametrize("case", list(_round_trip_cases()))
def test_save_load_is_bit_identical_for_every_fitted_attribute(tmp_path, case):
    # The cases: an RVM* fit predicted 1e-16 off after loading (its training design was
    # column-major when fitted, row-major when read), a one-vs-rest log_evidence_ moved by an
    # ulp. Pickle is the truth: it keeps everything, memory order included.
    import pickle

    model, X, y = _round_trip_cases()[case]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X, y)
    Xq = X[::3] + 0.31
    pickled = pickle.loads(pickle.dumps(model))
    for suffix in (".nc", ".zarr"):
        loaded = load_model(save_model(model, tmp_path / f"m{suffix}"))
        for other in (pickled, loaded):
            if isinstance(model, RVC):
                assert np.array_equal(other.predict_proba(Xq), model.predict_proba(Xq))
            else:
                got, want = other.predict(Xq, return_std=True), model.predict(Xq, return_std=True)
                assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
        fitted = _fitted_attributes(model)
        assert set(_fitted_attributes(loaded)) == set(fitted)
        for name in fitted:
            assert _same(getattr(loaded, name), _as_saved(name, fitted[name])), (suffix, name)
        assert loaded.log_evidence_ == model.log_evidence_ or model.log_evidence_ is None


def _save_repeatedly(args) -> int:
    path, seed, times = args
    X, y = make_sinc(25, random_state=seed, shuffle=False)
    model = RVR(gamma=0.1).fit(X, y)
    for _ in range(times):
        save_model(model, path)
    return seed


@pytest.mark.parametrize("suffix", [".zarr", ".nc"])
def test_concurrent_saves_to_one_path_all_succeed_and_leave_a_whole_model(tmp_path, suffix):
    # The issue's case: 4 processes x 12 zarr saves to one path, 8% of them failed with "exists
    # and is not a bayes_rvm model" (another process's folder was mid-swap).
    import multiprocessing

    path = tmp_path / f"model{suffix}"
    # fork where there is one: the children start with the package imported (seconds, not a
    # minute); the saves are the same either way.
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    save_model(RVR(gamma=0.1).fit(*make_sinc(25, random_state=0, shuffle=False)), path)
    with multiprocessing.get_context(method).Pool(3) as pool:
        job = pool.map_async(_save_repeatedly, [(path, seed, 8) for seed in range(3)])
        loads = 0
        while not job.ready():  # and readers meanwhile always find a whole model
            load_model(path)
            loads += 1
        done = job.get()
    assert done == [0, 1, 2] and loads > 0
    loaded = load_model(path)  # whole, and one of the three writers' model
    X = np.linspace(-10, 10, 11)[:, None]
    expected = [
        RVR(gamma=0.1).fit(*make_sinc(25, random_state=s, shuffle=False)).predict(X)
        for s in range(3)
    ]
    assert any(np.array_equal(loaded.predict(X), e) for e in expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # nothing left behind


def test_cross_validated_fits_save_and_load_bit_identically(tmp_path):
    from sklearn.datasets import make_blobs

    from bayes_rvm.estimators.cv import RVCCV, RVRCV

    X, y = make_sinc(30, noise=0.1, random_state=0, shuffle=False)
    Xb, yb = make_blobs(30, centers=2, cluster_std=3.0, random_state=0)
    reg = RVRCV(widths=[1.0, 3.0], cv=3).fit(X, y)
    clf = RVCCV(widths=[2.0, 4.0], cv=3).fit(Xb, yb)
    for model, Xq in ((reg, X + 0.1), (clf, Xb + 0.1)):
        for suffix in (".nc", ".zarr"):
            loaded = load_model(save_model(model, tmp_path / f"{type(model).__name__}{suffix}"))
            assert type(loaded) is type(model) and loaded.get_params() == model.get_params()
            assert np.array_equal(loaded.predict(Xq), model.predict(Xq))
            for name in (
                "cv_results_",
                "best_score_",
                "best_index_",
                "best_params_",
                "n_splits_",
                "length_scale_",
                "gamma_",
            ):
                assert _same(getattr(loaded, name), getattr(model, name)), name
    assert np.array_equal(loaded.predict_proba(Xb), clf.predict_proba(Xb))
    assert np.array_equal(loaded.classes_, clf.classes_)


# -- study stores: every file checked, every fault named -------------------------------------
@pytest.fixture(scope="module")
def small_study(tmp_path_factory):
    from bayes_rvm.studies.runner import run_study

    store = tmp_path_factory.mktemp("study") / "store"
    models = {"ARD": RVR(gamma=0.1), "narrow": RVR(gamma=3.0)}
    table = run_study(models, {"sinc": _sinc_set()}, store=store, n_jobs=1, random_state=2)
    return models, store, table


def _fresh_copy(small_study, tmp_path) -> Path:
    store = tmp_path / "store"
    shutil.copytree(small_study[1], store)
    return store


def _row_file(store: Path, model: str) -> Path:
    from bayes_rvm.studies.runner import _key

    return store / "rows" / f"{_key('sinc', model)}.json"


def test_a_tampered_row_is_refused_by_load_study_and_refitted_by_a_resume(small_study, tmp_path):
    # The case: elpd_loo set to 999 in a row came back from load_study and a resume.
    from bayes_rvm.studies.runner import StudyStoreError, load_study, run_study

    models, _, table = small_study
    store = _fresh_copy(small_study, tmp_path)
    path = _row_file(store, "ARD")
    entry = json.loads(path.read_text())
    entry["row"]["elpd_loo"] = 999.0
    path.write_text(json.dumps(entry))
    with pytest.raises(StudyStoreError, match=f"{path}: the study row does not match its check"):
        load_study(store)
    with pytest.warns(UserWarning, match=f"{path}.*Fitting that task again"):
        resumed = run_study(models, {"sinc": _sinc_set()}, store=store, n_jobs=1)
    # The refit is the original fit, bit for bit (and the store is whole again).
    assert resumed["elpd_loo"].tolist() == table["elpd_loo"].tolist()
    assert load_study(store)["elpd_loo"].tolist() == table["elpd_loo"].tolist()


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (lambda p: p.write_text("{not json"), "cannot read the study row {path}"),
        (lambda p: p.write_text("[1, 2]"), "{path}: the study row is not a JSON object"),
        (lambda p: p.write_bytes(p.read_bytes()[:40]), "cannot read the study row {path}"),
    ],
)
def test_unreadable_rows_are_named(small_study, tmp_path, damage, match):
    from bayes_rvm.studies.runner import StudyStoreError, load_study

    store = _fresh_copy(small_study, tmp_path)
    path = _row_file(store, "narrow")
    damage(path)
    with pytest.raises(StudyStoreError, match=re.escape(match.format(path=path))):
        load_study(store)


def test_settings_without_their_tasks_are_named(small_study, tmp_path):
    from bayes_rvm.io import json_checksum
    from bayes_rvm.studies.runner import StudyStoreError, load_study

    store = _fresh_copy(small_study, tmp_path)
    path = store / "study.json"
    settings = json.loads(path.read_text())
    del settings["tasks"]
    path.write_text(json.dumps(settings))  # checksum now wrong
    with pytest.raises(StudyStoreError, match=re.escape(f"{path}: the study settings does not")):
        load_study(store)
    settings.pop("checksum")
    settings["checksum"] = json_checksum(settings)  # as a hand edit with a fresh checksum
    path.write_text(json.dumps(settings))
    with pytest.raises(StudyStoreError, match=re.escape(f"{path}: the study settings lack")):
        load_study(store)


def test_a_damaged_fit_file_is_named_never_loaded(small_study, tmp_path):
    # The cases: a truncated fit file failed without naming it; one flipped byte in the
    # posterior loaded silently with other draws.
    from bayes_rvm.studies.runner import StudyStoreError, _key, load_fit

    store = _fresh_copy(small_study, tmp_path)
    path = store / "fits" / f"{_key('sinc', 'ARD')}.nc"
    good = load_fit(store, "sinc", "ARD")
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(StudyStoreError, match=re.escape(str(path))):
        load_fit(store, "sinc", "ARD")
    data = bytearray(raw)
    at = data.find(np.ascontiguousarray(good["log_likelihood"]["y"].values).tobytes()[:16])
    assert at > 0
    data[at + 5] ^= 0x01  # a mantissa bit of one log-likelihood: still a number
    path.write_bytes(bytes(data))
    with pytest.raises(StudyStoreError, match=re.escape(f"{path} is damaged")):
        load_fit(store, "sinc", "ARD")
    path.write_bytes(raw)
    assert load_fit(store, "sinc", "ARD").identical(good)


# -- run_study and the study command check everything before the first fit --------------------
class _MustNotFit(RVR):
    def fit(self, X, y):  # pragma: no cover - the point is that it is never called
        raise AssertionError("a fit ran before the arguments were checked")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"client": "tcp://127.0.0.1:8786"}, TypeError, "client must be a dask.distributed.Client"),
        ({"datasets": None}, TypeError, "datasets must be a non-empty mapping"),
        ({"datasets": {"a": (None, None)}}, TypeError, r"datasets\['a'\]: X must be an array"),
        ({"datasets": {"a": (np.ones((3, 1)), 5)}}, TypeError, r"datasets\['a'\]: y must be"),
        ({"progress": 5}, TypeError, "progress must be True, False or a callable"),
        ({"store": 5}, TypeError, "store must be a path"),
        ({"n_jobs": True}, ValueError, "n_jobs must be a nonzero int"),
    ],
)
def test_run_study_checks_its_arguments_before_the_first_fit(kwargs, error, match):
    from bayes_rvm.studies.runner import run_study

    args = {"models": {"m": _MustNotFit()}, "datasets": {"a": _sinc_set()}, "n_jobs": 1}
    with pytest.raises(error, match=match):
        run_study(**{**args, **kwargs})


@pytest.mark.parametrize(
    ("study", "extra", "match"),
    [
        ('store = 5\noutput = "out"', "", r"\[study\] store must be a folder name"),
        ('output = "out"\nn_jobs = "two"', "", r"\[study\] n_jobs must be a nonzero int"),
        ('output = "taken.txt"', "", r"\[study\] output .*taken\.txt is a file"),
        ('output = "out"', "models = 5\n", "models must be"),
        ('output = "out"', "[models]\nARD = 5\n", r"\[models\.ARD\] must be a table"),
        # A model's bad values (the good one beside it was fitted first, and the error named
        # neither the file nor the model)
        (
            'output = "out"',
            "[models.bad]\nkernel = 'foo'\n",
            r"study\.toml: \[models\.bad\] kernel must be one of",
        ),
        (
            'output = "out"',
            "[models.bad]\nsampler_config = {drawz = 5}\n",
            r"\[models\.bad\] RVR: sampler_config has no key 'drawz'",
        ),
        (
            'output = "out"',
            "[datasets.c]\nsource = 'csv'\npath = 'taken.txt'\nn_test = 100\n",
            r"\[datasets\.c\] n_test draws test points of generated data",
        ),
    ],
)
def test_study_config_faults_stop_the_command_before_any_fit(tmp_path, study, extra, match):
    from bayes_rvm.cli import main

    (tmp_path / "taken.txt").write_text("keep me")
    models = "" if "models =" in extra or "[models]" in extra else "[models.ARD]\ngamma = 0.1\n"
    text = f"{extra}[study]\n{study}\n\n[datasets.s]\nsource = 'sinc'\nn_samples = 10\n\n{models}"
    config = tmp_path / "study.toml"
    config.write_text(text)
    with pytest.raises(SystemExit, match=match):
        main(["study", str(config)])
    assert (tmp_path / "taken.txt").read_text() == "keep me"
    assert not (tmp_path / "out").exists()  # nothing ran, nothing was made


# -- where a fit runs does not change its result -----------------------------------------------
def _study_grid():
    models = {
        "ARD": RVR(gamma=0.1),
        "Student-t": RVR(gamma=0.1, prior="student_t"),
        "narrow": RVR(gamma=3.0),
        "MCMC": RVR(
            gamma=0.1, inference="mcmc", sampler_config={"draws": 60, "tune": 60, "chains": 2}
        ),
    }
    return models, {"a": _sinc_set(20, 0), "b": _sinc_set(20, 5)}


def _assert_bitwise_same_table(a, b):
    import pandas as pd

    run = ["fit_time", "worker"]
    pd.testing.assert_frame_equal(a.drop(columns=run), b.drop(columns=run), check_exact=True)


def test_fits_in_threads_of_one_process_give_the_serial_rows():
    # The root cause of the Dask tables that differed from the serial one: a worker with several
    # threads ran fits side by side, and the first to leave threadpool_limits(1) gave BLAS its
    # threads back in the middle of the other (and took its warnings).
    from concurrent.futures import ThreadPoolExecutor

    from bayes_rvm.studies.runner import _fit_task, _key, _Task, task_seed

    models, datasets = _study_grid()
    models.pop("MCMC")
    data = [(d, m) for d in datasets for m in models]
    tasks = [_Task(d, m, _key(d, m), task_seed(7, d, m), "", "") for d, m in data]
    jobs = [(t, models[t.model], _study_data(datasets[t.dataset])) for t in tasks]
    serial = [_fit_task(*job)[0] for job in jobs]
    with ThreadPoolExecutor(3) as pool:
        threaded = [row for row, _ in pool.map(lambda job: _fit_task(*job), jobs)]
    for a, b in zip(serial, threaded, strict=True):
        a, b = dict(a), dict(b)
        for run in ("fit_time", "worker"):
            a.pop(run), b.pop(run)
        assert json.dumps(a) == json.dumps(b)  # bit for bit (NaN included)


def _study_data(value):
    from bayes_rvm.studies.config import StudyData

    return StudyData(*value)


@pytest.mark.slow
def test_a_study_on_dask_gives_the_serial_table_bit_for_bit(tmp_path):
    # The case: four models (type-II ARD, Student-t, a narrow width, MCMC) on two sinc
    # sets gave other numbers on a 2-worker LocalCluster than serially, every row.
    distributed = pytest.importorskip("distributed")
    from bayes_rvm.studies.runner import run_study

    models, datasets = _study_grid()
    serial = run_study(models, datasets, n_jobs=1, random_state=5)
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
        pytest.warns(UserWarning, match="workers run 2 threads each"),
    ):
        on_dask = run_study(models, datasets, client=client, random_state=5)
    _assert_bitwise_same_table(on_dask, serial)
    assert (serial["method"] == "mcmc").sum() == 2


# -- a failed convergence check is in the printed line, the table and the plot ----------------
def test_a_fit_that_did_not_converge_says_so_everywhere(capsys):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bayes_rvm.plots import plot_study
    from bayes_rvm.studies.runner import _convergence_note, run_study

    models = {"capped": RVR(gamma=0.1, max_iter=2), "ARD": RVR(gamma=0.1)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        truth = models["capped"].fit(*_sinc_set()[:2]).converged_
    assert truth is False
    table = run_study(models, {"sinc": _sinc_set()}, n_jobs=1, random_state=0, progress=True)
    assert table["converged"].tolist() == [False, True]
    lines = capsys.readouterr().err.splitlines()
    assert "NOT CONVERGED" in lines[0] and "NOT CONVERGED" not in lines[1]
    fig = plot_study(table)
    crossed = [ln for ln in fig.axes[0].lines if ln.get_label() == "not converged"]
    assert len(crossed) == 1 and crossed[0].get_xdata()[0] == table["elpd_loo"][0]
    plt.close(fig)
    # An MCMC row names the diagnostics that failed.
    row = {"converged": False, "method": "mcmc", "max_rhat": 1.596, "min_ess_bulk": 6.9}
    assert "R-hat 1.5960, bulk ESS 7, 0 divergences" in _convergence_note({**row, "divergences": 0})
    # R-hat 1.00991 passes: four decimals, so that a failed ESS is not read as a failed R-hat
    row = {**row, "max_rhat": 1.00991, "min_ess_bulk": 325.0, "divergences": 0}
    assert "R-hat 1.0099, bulk ESS 325" in _convergence_note(row)


def test_a_store_of_another_format_is_refused_naming_its_version(small_study, tmp_path):
    # Written before the checksums (format 1) or with estimators fingerprinted by module path
    # (format 2): refused, naming what wrote it.
    from bayes_rvm.io import json_checksum
    from bayes_rvm.studies.runner import StudyStoreError, load_study, run_study

    store = _fresh_copy(small_study, tmp_path)
    path = store / "study.json"
    settings = json.loads(path.read_text())
    settings.pop("checksum")
    settings.update(format="bayes_rvm-study/2", bayes_rvm_version="0.0.9")
    path.write_text(json.dumps({**settings, "checksum": json_checksum(settings)}))
    message = r"written by bayes_rvm 0\.0\.9 in format 'bayes_rvm-study/2'; this version reads"
    with pytest.raises(StudyStoreError, match=message):
        load_study(store)
    with pytest.raises(StudyStoreError, match=message):
        run_study(small_study[0], {"sinc": _sinc_set()}, store=store, n_jobs=1)


# -- issue 26: Prior validation ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (
            lambda: Prior("Gamma", alpha="2", beta=1.0),
            TypeError,
            r"Prior\('Gamma'\): parameter alpha must be",
        ),
        (lambda: Prior("Gamma", alpha=True, beta=1.0), TypeError, "alpha must be a number"),
        (lambda: Prior("HalfNormal", sigma=1.0, dims=3), TypeError, "dims must be a dimension"),
        (lambda: Prior("HalfNormal", sigma=1.0, dims=[1, 2]), TypeError, "sequence of names"),
        (lambda: Prior.from_dict([{"dist": "HalfNormal"}]), TypeError, "takes a dict.*got list"),
        (lambda: Prior.from_dict({"dist": "Gamma", "kwargs": [1]}), TypeError, "'kwargs' must"),
        (lambda: Prior.from_dict({"dist": "Gamma", "kwarg": {}}), ValueError, "keys 'dist'"),
        (
            lambda: Prior("HalfNormal", sigma=float("nan")),
            ValueError,
            "parameter sigma must be finite, got nan",
        ),
        (lambda: Prior("Normal", mu=0.0, sigma=[1.0, np.inf]), ValueError, "must be finite"),
        # Parameter supports come from the distribution's own logp, for every distribution.
        (lambda: Prior("HalfNormal", sigma=-1.0), ValueError, r"must satisfy sigma > 0"),
        (lambda: Prior("Gamma", alpha=0, beta=0), ValueError, r"must satisfy alpha > 0, beta > 0"),
        (lambda: Prior("Normal", mu=0.0, sigma=[1.0, -1.0]), ValueError, "sigma > 0"),
        (lambda: Prior("Beta", alpha=2.0, beta=-0.5), ValueError, "beta > 0"),
        (lambda: Prior("HalfCauchyPrecision", beta=0.0), ValueError, "beta > 0"),
        # A parameter that is a prior is checked at its own typical value: Normal's is 0.
        (
            lambda: Prior("Gamma", alpha=2.0, beta=Prior("Normal", mu=0.0, sigma=1.0)),
            ValueError,
            "beta > 0",
        ),
    ],
)
def test_invalid_priors_are_refused_where_they_are_written(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_a_real_line_prior_is_refused_for_a_precision_a_scale_or_a_width():
    normal = Prior("Normal", mu=0.0, sigma=1.0)
    X, y = make_sinc(30, random_state=0, shuffle=False)
    for params, name in (
        ({"prior_params": {"alpha_prior": normal}}, "alpha_prior"),
        ({"likelihood_params": {"noise_prior": normal}}, "noise_prior"),
        ({"prior": "student_t", "prior_params": {"nu": normal}}, "nu"),
        ({"gamma": normal}, "gamma"),
    ):
        est = RVR(inference="mcmc", **params)
        # Refused before the type-II fit and before any sampling.
        with pytest.raises(ValueError, match=f"{name} must be a distribution on the positive"):
            est.fit(X, y)
    with pytest.raises(ValueError, match="alpha_prior must be a distribution on the positive"):
        RVC(inference="mcmc", prior_params={"alpha_prior": normal.to_dict()}).fit(X, y > 0)


def test_valid_priors_still_build_and_round_trip():
    nested = Prior("HalfCauchyPrecision", beta=Prior("HalfCauchy", beta=0.1))
    assert Prior.from_dict(json.loads(nested.to_json())) == nested
    assert Prior("Normal", mu=0, sigma=[1, 2], dims="basis").parameters["sigma"].dtype == float
    assert Prior("Gamma", alpha=np.float32(2.0), beta=3).parameters == {"alpha": 2.0, "beta": 3.0}


# -- Issue 26, estimator side: offsets, duplicated rows, ARD widths, CV parameters, memory ------
@pytest.mark.parametrize("outputs", [1, 2])
def test_offsets_of_the_wrong_kind_are_refused_before_the_graph(outputs):
    import pymc as pm
    import pytensor.tensor as pt

    X, y = make_sinc(30, random_state=0, shuffle=False)
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
    X, y = make_sinc(100, random_state=0, shuffle=False)
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
        fixed = RVR(gamma=1.0, likelihood_params={"noise_variance": 0.02}).fit(X2, y2)
    # A precomputed kernel's columns are the training samples too: a warning says what to do.
    K = np.exp(-((X2 - X2.T) ** 2))
    with pytest.warns(UserWarning, match="kernel='precomputed' they cannot be dropped"):
        RVR(kernel="precomputed").fit(K, y2)
    # Cross-validation drops them too: copies of a row in a fold's training and test rows
    # made held-out error reward interpolation (RVRCV chose 0.37 over 3.0, test RMSE 0.075 for
    # 0.044).
    from bayes_rvm.estimators.cv import RVRCV

    cv = RVRCV(widths=[3.0, 0.37], cv=3, random_state=0)
    with pytest.warns(UserWarning, match="100 of the 200 training rows") as record:
        cv.fit(np.vstack([X, X]), np.r_[y, y])
    assert record[0].filename == __file__  # the warning points at the user's call
    ref = RVRCV(widths=[3.0, 0.37], cv=3, random_state=0).fit(X, y)
    assert cv.length_scale_ == ref.length_scale_ == 3.0
    for f in range(3):
        np.testing.assert_array_equal(
            cv.cv_results_[f"split{f}_test_score"], ref.cv_results_[f"split{f}_test_score"]
        )
    half = RVR(gamma=1.0, likelihood_params={"noise_variance": 0.01}, solver="mackay").fit(X, y)
    fixed_m = RVR(gamma=1.0, likelihood_params={"noise_variance": 0.02}, solver="mackay").fit(
        X2, y2
    )
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
    ("cls", "params", "name"),
    [
        (
            "RVRCV",
            {"likelihood_params": {"noise_variance": 0}},
            "likelihood_params['noise_variance']",
        ),
        (
            "RVRCV",
            {"likelihood_params": {"noise_variance": -1.0}},
            "likelihood_params['noise_variance']",
        ),
        ("RVRCV", {"prior_params": {"nu": -1.0}}, "prior_params['nu']"),
        ("RVRCV", {"tol": 0.0}, "tol"),
        ("RVRCV", {"prior_params": {"threshold_alpha": -1}}, "prior_params['threshold_alpha']"),
        ("RVRCV", {"warm_start": "yes"}, "warm_start"),
        ("RVRCV", {"cv": 1}, "cv"),
        ("RVRCV", {"kernel": "poly"}, "kernel"),
        ("RVCCV", {"prior_params": {"nu": -1.0}}, "prior_params['nu']"),
        ("RVCCV", {"solver": "newton"}, "solver"),
        ("RVCCV", {"max_iter": 0}, "max_iter"),
        ("RVCCV", {"prior_params": {"threshold_alpha": 0}}, "prior_params['threshold_alpha']"),
    ],
)
def test_cv_estimators_check_their_parameters_as_rvr_and_rvc_do(cls, params, name, monkeypatch):
    from sklearn.utils._param_validation import InvalidParameterError

    from bayes_rvm.estimators import cv

    est = getattr(cv, cls)(**params)
    template = est._template
    # Nothing reaches a fold: the search would raise its own error.
    monkeypatch.setattr(cv._WidthCV, "_search", lambda *a: pytest.fail("a fold was fitted"))
    X, y = make_sinc(20, random_state=0, shuffle=False)
    target = y if cls == "RVRCV" else y > 0.2
    with pytest.raises(InvalidParameterError, match=re.escape(f"The {name!r} parameter of {cls}")):
        est.fit(X, target)
    (param,) = params
    if param in template._parameter_constraints and param != "kernel":
        # The same check as the estimator's own (the message names the other class).
        with pytest.raises(InvalidParameterError) as own:
            template(**params).fit(X, target)
        with pytest.raises(InvalidParameterError) as twin:
            est.fit(X, target)
        assert str(twin.value) == str(own.value).replace(template.__name__, cls, 1)
    # The twins take the keys they forward, no others.
    with pytest.raises(ValueError, match=r"prior_params has no key 'alpha_prior'"):
        getattr(cv, cls)(prior_params={"alpha_prior": None}).fit(X, target)


def test_predictions_too_large_for_memory_stop_before_allocating(eight_gib):
    # sample_y(n_samples=10**12) died in NumPy ("Unable to allocate 36.4 TiB"), and a request
    # between free memory and memory plus swap met the OOM killer; the joint covariance of
    # predict(return_cov=True) and posterior predictive draws at many inputs are its siblings.
    X, y = make_sinc(30, random_state=0, shuffle=False)
    est = RVR(gamma=1.0).fit(X, y)
    with pytest.raises(
        MemoryError,
        match=r"RVR\.sample_y: 3 inputs x n_samples=1000000000000 draws.*"
        r"limit of 8\.0 GiB.*smaller n_samples",
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

    X, y = make_sinc(30, random_state=0, shuffle=False)
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

    X, y = make_sinc(30, random_state=0, shuffle=False)
    est = RVR(
        gamma=1.0,
        inference="mcmc",
        sampler_config={"draws": 100, "tune": 100, "chains": 2},
        random_state=0,
    )
    est.set_params(predictive=predictive).fit(X, y, progressbar=False)
    whole = est.predict(X_TEST, return_std=True)
    # blocks of 20 rows (the last one of 17); and 251 blocks for the 5001 inputs below
    monkeypatch.setattr(predictors, "BLOCK_FLOATS", 2 * 200 * 20)
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


# -- reliability issue: comparisons, Prior messages, VI divergence, sample_y, large counts -------
def test_compare_refuses_other_rows_and_other_likelihoods_and_takes_a_list():
    # Two fits on other data of the same N were ranked by elpd without a word; a regressor's
    # density beside a classifier's probabilities too; a list failed on list.items().
    from bayes_rvm import compare

    X, y = make_sinc(30, random_state=0, shuffle=False)
    a = RVR(gamma=1.0).fit(X, y)
    b = RVR(gamma=0.5).fit(X, y)
    elpd_a = a.refit_loo().elpd_i.sum()  # once: 30 refits
    for fits in ([a, b.idata_], (a.idata_, b)):
        table = compare(fits)
        assert sorted(table.index) == ["model_0", "model_1"]
        assert table.loc["model_0", "elpd"] == pytest.approx(elpd_a)
    # Other targets on the same 30 inputs (another noise draw): refused, naming both fits.
    _, y_other = make_sinc(30, random_state=1, shuffle=False)
    other = RVR(gamma=1.0).fit(X, y_other)
    with pytest.raises(ValueError, match=r"different data: their targets y differ.*'a'.*'other'"):
        compare({"a": a, "other": other.idata_})
    # The same targets on other inputs: the estimators keep their training inputs.
    shuffled = RVR(gamma=1.0).fit(X[::-1], y)
    with pytest.raises(ValueError, match=r"training inputs X differ.*'model_0'.*'model_1'"):
        compare([a, shuffled])
    # The same rows, scored as a density and as class probabilities (every other row: a
    # classifier's elpd is one refit per row).
    X, y = X[::2], y[::2]
    labels = y > 0.2
    reg = RVR(gamma=1.0).fit(X, labels.astype(float))
    clf = RVC(gamma=1.0).fit(X, labels)
    with pytest.raises(
        ValueError,
        match=r"likelihoods differ.*'reg' \(gaussian\): densities.*'clf' \(bernoulli\): prob",
    ):
        compare({"reg": reg, "clf": clf})
    # Two classifiers on the same rows compare; on other labels of the same N they do not.
    table = compare([clf, RVC(gamma=0.5).fit(X, labels)])  # classifiers: LOO by refits
    assert set(table["method"]) == {"exact LOO (15 refits)"}
    with pytest.raises(ValueError, match="targets y differ"):
        compare([clf, RVC(gamma=1.0).fit(X, y > 0.1)])
    # An estimator without a DataTree says why, not "not a fit".
    ovr = RVC(gamma=1.0, multi_class="ovr").fit(X, np.digitize(y, [0.1, 0.4]))
    with pytest.raises(AttributeError, match="multi_class='ovr'"):
        compare([clf, ovr])
    with pytest.raises(TypeError, match="dict of named fits or a list"):
        compare(a)
    # One tree is a Mapping of its groups, which were taken as the fits.
    with pytest.raises(TypeError, match="got one DataTree"):
        compare(a.idata_)
    with pytest.warns(UserWarning, match="'x' and 'y' are the same object"):
        compare({"x": a.idata_, "y": a.idata_})


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (
            lambda: Prior("RegularisedHorseshoePrecision", c="two"),
            ValueError,
            r"Prior\('RegularisedHorseshoePrecision'\): parameter c must be a positive number.*"
            r"got 'two'",
        ),
        (
            lambda: Prior("RegularisedHorseshoePrecision", beta=1.0, c=None),
            ValueError,
            r"Prior\('RegularisedHorseshoePrecision'\): parameter c must be .* got None",
        ),
        (
            lambda: Prior("RegularisedHorseshoePrecision", c=float("inf")),
            ValueError,
            r"parameter c must be a positive number",
        ),
        (
            lambda: Prior("RegularisedHorseshoePrecision", beta="x"),
            TypeError,
            r"Prior\('RegularisedHorseshoePrecision'\): parameter beta must be a number",
        ),
        (
            lambda: Prior("RegularisedHorseshoePrecision", beta=-1.0, c=2.0),
            ValueError,
            r"Prior\('RegularisedHorseshoePrecision'\): parameter beta must satisfy beta > 0, "
            r"got beta=-1\.0, c=2\.0",
        ),
        (
            lambda: Prior("HalfCauchyPrecision", beta=[0.1, -0.1]),
            ValueError,
            r"Prior\('HalfCauchyPrecision'\): parameter beta must satisfy beta > 0",
        ),
        (
            lambda: Prior("HalfNormal", sigma=float("inf")),
            ValueError,
            r"Prior\('HalfNormal'\): parameter sigma must be finite, got inf",
        ),
        # Of two parameters, the one that breaks its condition is named.
        (
            lambda: Prior("Gamma", alpha=2.0, beta=-1.0),
            ValueError,
            r"Prior\('Gamma'\): parameter beta must satisfy beta > 0, got alpha=2\.0, beta=-1\.0",
        ),
        (
            lambda: Prior("Uniform", lower=1.0, upper=0.0),
            ValueError,
            r"Prior\('Uniform'\): parameters lower, upper must satisfy lower <= upper",
        ),
        # A condition on PyMC's own parametrisation (StudentT's lam = sigma^-2): every given
        # parameter is named.
        (
            lambda: Prior("StudentT", nu=3.0, sigma=-1.0),
            ValueError,
            r"Prior\('StudentT'\): parameters nu, sigma must satisfy PyMC's conditions lam > 0",
        ),
        (
            lambda: Prior("Gamma", alpha=2.0, mu=1.0),
            ValueError,
            r"Prior\('Gamma'\): parameters alpha=2\.0, mu=1\.0 cannot be built",
        ),
        (
            lambda: Prior("Normal", mu=0.0, scale=1.0),
            ValueError,
            r"Prior\('Normal'\) has no parameter\(s\) \['scale'\]",
        ),
    ],
)
def test_every_refused_prior_parameter_is_named_with_its_distribution(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_the_student_t_default_prior_names_a_bad_nu():
    from bayes_rvm.models.priors import default_alpha_prior

    with pytest.raises(ValueError, match=r"default_alpha_prior\('student_t'\): nu must be"):
        default_alpha_prior("student_t", "two")
    with pytest.raises(ValueError, match=r"s must be a positive number, got -0\.1"):
        default_alpha_prior("student_t", 1.0, -0.1)


def test_a_diverging_vi_learning_rate_is_named_with_the_advice():
    # The optimisation stops at the first NaN with the package's advice, not a bare NaN error.
    X, y = make_sinc(30, random_state=0, shuffle=False)
    est = RVR(
        gamma=1.0,
        inference="vi",
        sampler_config={"draws": 20, "vi_kwargs": {"learning_rate": 1e3, "n": 300}},
    )
    with pytest.raises(
        FloatingPointError,
        match=r"ADVI diverged.*vi_kwargs\['learning_rate'\]=1000.*"
        r"Lower vi_kwargs\['learning_rate'\] \(for example to 100",
    ) as info:
        est.fit(X, y)
    assert "the approximation's parameters" in str(info.value) or "the ELBO" in str(info.value)


@pytest.mark.parametrize("n_samples", [0, -1, 1.5, "2", True, None])
def test_sample_y_refusals_name_n_samples(n_samples):
    X, y = make_sinc(20, random_state=0, shuffle=False)
    est = RVR(gamma=1.0).fit(X, y)
    want = rf"^n_samples must be an integer > 0\.0, got {re.escape(repr(n_samples))}"
    with pytest.raises(ValueError, match=want):
        est.sample_y(X[:3], n_samples=n_samples)


def test_sample_y_memory_refusals_name_n_samples_and_count_what_counts_draw(monkeypatch):
    x = np.linspace(-5.0, 5.0, 60)[:, None]
    counts = np.random.default_rng(0).poisson(np.exp(1.0 + np.sin(x[:, 0])))
    est = RVR(likelihood="poisson", gamma=0.5).fit(x, counts)
    monkeypatch.setenv(MEMORY_ENV, "1GiB")
    with pytest.raises(MemoryError, match=r"x n_samples=100000000 draws.*smaller n_samples"):
        est.sample_y(x[:3], n_samples=10**8)
    # Counts draw weights, never a joint covariance of the inputs: 20000 inputs need no
    # 20000 x 20000 matrix (3 GiB), which the Gaussian regressor's joint draw does.
    many = np.linspace(-5.0, 5.0, 20_000)[:, None]
    assert est.sample_y(many, n_samples=2).shape == (20_000, 2)
    gaussian = RVR(gamma=0.5).fit(x, np.log1p(counts))
    with pytest.raises(MemoryError, match="with their joint covariance"):
        gaussian.sample_y(many, n_samples=2)


def test_counts_above_the_limit_are_refused_naming_y_and_the_limit():
    # Counts of 1e15 (whole numbers float64 holds exactly) gave rates up to 1e304 with only
    # NumPy RuntimeWarnings.
    from bayes_rvm.estimators.likelihoods import MAX_COUNT

    x = np.linspace(-5.0, 5.0, 40)[:, None]
    rate = np.exp(1.0 + np.sin(x[:, 0]))
    with pytest.raises(
        ValueError, match=r"counts up to 1e\+09 in y; y\[0\] = 709\d{13}\.0 is larger"
    ):
        RVR(likelihood="poisson").fit(x, np.round(1e15 * rate))
    with pytest.raises(ValueError, match=r"y\[\d+\] = 1000000001\.0 is larger \(1 such value"):
        RVR(likelihood="poisson").fit(x, np.r_[np.ones(39), MAX_COUNT + 1])
    # At the limit the rates are those of the data; scoring takes counts of any size.
    y = np.round(MAX_COUNT / rate.max() * rate)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the engine's notes on near-singular curvature
        est = RVR(likelihood="poisson").fit(x, y)
    np.testing.assert_allclose(est.predict(x), y, rtol=1e-3)
    assert est.score(x, 1e6 * y) < 0
