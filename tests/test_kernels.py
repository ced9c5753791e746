"""The kernel basis against scikit-learn's kernels and SVR's gamma convention."""

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF
from sklearn.metrics.pairwise import pairwise_kernels
from sklearn.svm import SVR

from bayes_rvm.basis.kernels import KERNELS, KernelBasis, resolve_gamma


@pytest.fixture
def data(rng):
    return rng.normal(size=(30, 3)), rng.normal(size=(7, 3))


@pytest.mark.parametrize("kernel", KERNELS)
def test_named_kernels_match_pairwise_kernels(data, kernel):
    X, Z = data
    basis = KernelBasis(kernel, gamma=0.3, degree=2, coef0=0.5).fit(X)
    params = {}
    if kernel in {"rbf", "poly", "polynomial", "laplacian", "sigmoid"}:
        params["gamma"] = 0.3
    if kernel in {"poly", "polynomial"}:
        params["degree"] = 2
    if kernel in {"poly", "polynomial", "sigmoid"}:
        params["coef0"] = 0.5
    Phi = basis.transform(Z)
    np.testing.assert_allclose(Phi[:, :-1], pairwise_kernels(Z, X, metric=kernel, **params))
    np.testing.assert_array_equal(Phi[:, -1], 1.0)


def test_gamma_scale_is_svr_convention(data):
    X, _ = data
    X = 5.0 * X
    svr = SVR(gamma="scale").fit(X, X[:, 0])
    assert resolve_gamma("scale", X) == pytest.approx(svr._gamma)
    assert resolve_gamma("auto", X) == pytest.approx(1 / 3)


def test_callable_and_gp_kernel_equal_rbf(data):
    X, Z = data
    ref = KernelBasis("rbf", gamma=0.5).fit(X).transform(Z)
    # exp(-||x-y||^2 / (2 l^2)) with l = 1 is gamma = 0.5.
    gp = KernelBasis(RBF(length_scale=1.0)).fit(X).transform(Z)
    fn = (
        KernelBasis(
            lambda A, B, g: np.exp(-g * ((A[:, None] - B[None]) ** 2).sum(-1)),
            kernel_params={"g": 0.5},
        )
        .fit(X)
        .transform(Z)
    )
    np.testing.assert_allclose(gp, ref)
    np.testing.assert_allclose(fn, ref)


def test_precomputed_passes_columns_through(data):
    X, Z = data
    K = pairwise_kernels(Z, X, metric="rbf", gamma=0.2)
    basis = KernelBasis("precomputed").fit(pairwise_kernels(X, X, metric="rbf", gamma=0.2))
    np.testing.assert_allclose(basis.transform(K)[:, :-1], K)
    np.testing.assert_allclose(basis.transform(K, columns=[4, 30]), np.c_[K[:, 4], np.ones(7)])


def test_column_subset_and_chunks_equal_full(data):
    X, Z = data
    basis = KernelBasis("rbf", bias=True).fit(X)
    full = basis.transform(Z)
    cols = [29, 3, 30, 0]
    np.testing.assert_allclose(basis.transform(Z, columns=cols), full[:, cols])
    np.testing.assert_allclose(basis.transform(Z, chunk_size=2), full)
    assert KernelBasis("rbf", bias=False).fit(X).transform(Z).shape == (7, 30)


def test_given_centres(data):
    X, Z = data
    basis = KernelBasis("rbf", gamma=1.0).fit(X, centres=Z)
    assert basis.n_basis_ == 8
    np.testing.assert_allclose(
        basis.transform(X)[:, :-1], pairwise_kernels(X, Z, metric="rbf", gamma=1.0)
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kernel": "nope"}, "kernel must be one of"),
        ({"kernel": 3}, "kernel must be"),
        ({"gamma": -1.0}, "gamma"),
        ({"gamma": "wide"}, "gamma"),
        ({"degree": 0, "kernel": "poly"}, "degree"),
    ],
)
def test_bad_parameters(data, kwargs, match):
    X, _ = data
    with pytest.raises((ValueError, TypeError), match=match):
        KernelBasis(**kwargs).fit(X)


def test_wrong_feature_count_and_bad_kernel_output(data):
    X, Z = data
    with pytest.raises(ValueError, match="features"):
        KernelBasis().fit(X).transform(Z[:, :2])
    with pytest.raises(ValueError, match="shape"):
        KernelBasis(lambda A, B: np.ones((len(A), 2))).fit(X).transform(Z)
    with pytest.raises(ValueError, match="non-finite"):
        KernelBasis(lambda A, B: np.full((len(A), len(B)), np.nan)).fit(X).transform(Z)


# --- stationary kernels own their width ---------------------------------------------------------


@pytest.mark.parametrize("name", ["rbf", "laplacian"])
def test_stationary_kernel_width_against_scikit_learn(name):
    from sklearn.metrics.pairwise import laplacian_kernel, rbf_kernel

    from bayes_rvm.basis.kernels import stationary_kernel

    rng = np.random.default_rng(0)
    X, C = rng.normal(size=(7, 3)), rng.normal(size=(5, 3))
    width = stationary_kernel(name)
    ref = {"rbf": rbf_kernel, "laplacian": laplacian_kernel}[name]
    ls = 1.7
    g = float(width.gamma(ls))
    # The textbook forms: exp(-||x - c||^2 / l^2) and exp(-||x - c||_1 / l).
    power = 2 if name == "rbf" else 1
    assert g == pytest.approx(ls**-power, rel=1e-15)
    assert float(width.length_scale(g)) == pytest.approx(ls, rel=1e-15)
    np.testing.assert_allclose(
        width.design(width.distances(X, C), g, bias=False), ref(X, C, gamma=g), rtol=1e-13
    )
    # Per-feature coefficients are a unit-coefficient kernel on rescaled inputs.
    gd = np.array([0.3, 2.0, 0.7])
    s = width.feature_scale(gd)
    diff = np.abs(X[:, None, :] - C[None, :, :]) ** power
    np.testing.assert_allclose(
        ref(X * s, C * s, gamma=1.0), np.exp(-(diff * gd).sum(-1)), rtol=1e-13
    )
    # d log k / d log l for one feature's length, against a finite difference.
    W = rng.normal(size=(7, 5))
    d = X[:, None, 0] - C[None, :, 0]
    h = 1e-6

    def weighted_log_k(log_l):
        return np.sum(W * -(float(width.gamma(np.exp(log_l))) * np.abs(d) ** power))

    fd = (weighted_log_k(np.log(ls) + h) - weighted_log_k(np.log(ls) - h)) / (2 * h)
    assert width.log_length_sum(W, d, ls) == pytest.approx(fd, rel=1e-7)


def test_width_rule_resolves_gamma_once():
    from bayes_rvm.basis.kernels import WIDTH_KERNELS, WidthRule, stationary_kernel

    assert WIDTH_KERNELS == ("rbf", "laplacian")
    assert stationary_kernel("poly") is None
    with pytest.raises(ValueError, match="needs kernel 'rbf' or 'laplacian', got 'poly'"):
        stationary_kernel("poly", purpose="a sampled width")
    cases = [
        ("evidence_shared", "rbf", "evidence_shared", True, "scale"),
        ("evidence_shared", "poly", "scale", False, "scale"),  # the default's fallback
        ("evidence", "laplacian", "evidence", True, "scale"),
        ("evidence_ard", "rbf", "evidence_ard", True, "scale"),
        ("scale", "rbf", "scale", False, "scale"),
        ("auto", "rbf", "fixed", False, "auto"),
        (0.5, "sigmoid", "fixed", False, 0.5),
    ]
    for gamma, kernel, kind, learned, basis_gamma in cases:
        rule = WidthRule.resolve(gamma, kernel)
        assert (rule.kind, rule.learned, rule.basis_gamma) == (kind, learned, basis_gamma)
        assert not rule.sampled
    sampled = WidthRule.resolve(object(), "rbf", sampled=True)
    assert sampled.sampled and sampled.learned and sampled.kernel is stationary_kernel("rbf")
    with pytest.raises(ValueError, match=r"kernels \('rbf', 'laplacian'\)"):
        WidthRule.resolve("evidence", "poly").require_width("needs the kernels {kernels}")


@pytest.mark.parametrize("kernel", ["rbf", "laplacian"])
@pytest.mark.parametrize("gamma", [0.7, [0.3, 2.0, 0.9]])
def test_fused_block_equals_scikit_learn_kernel(kernel, gamma):
    # A block over FUSED_MIN_ENTRIES goes to the numba loop; below it, to scikit-learn's kernel.
    from bayes_rvm.basis.kernels import FUSED_MIN_ENTRIES

    rng = np.random.default_rng(3)
    X = rng.normal(size=(FUSED_MIN_ENTRIES // 1000 + 7, 3))
    basis = KernelBasis(kernel=kernel, gamma=gamma).fit(X, centres=X[:1000])
    fused = basis.transform(X)
    small = np.vstack([basis.transform(X[i : i + 500]) for i in range(0, len(X), 500)])
    assert basis._fused(X.shape[0] * 1000) and not basis._fused(500 * 1000)
    np.testing.assert_allclose(fused, small, rtol=1e-12, atol=1e-14)
    assert np.all(fused[:, -1] == 1.0)


@pytest.mark.parametrize("kernel", ["rbf", "laplacian"])
@pytest.mark.parametrize("gamma", [0.7, [0.3, 2.0, 0.9]])
def test_the_fused_design_on_the_training_inputs_is_computed_by_halves_to_the_bit(
    kernel, gamma, monkeypatch
):
    # The inputs' design on themselves is symmetric: half is computed and half copied. The truths:
    # the same loop over every entry, to the bit; scikit-learn's kernel through the basis.
    from bayes_rvm.basis import blocks
    from bayes_rvm.basis.kernels import FUSED_MIN_ENTRIES

    monkeypatch.setattr(blocks, "PARALLEL_MIN_ENTRIES", 0)  # the tasks on two threads

    rng = np.random.default_rng(4)
    n = int(np.sqrt(FUSED_MIN_ENTRIES)) + 37  # an odd last block of rows
    for size in (128, 130, n):  # even and odd numbers of row blocks, an odd last block
        Z = rng.normal(size=(size, 3))
        halves = np.empty((size, size + 1))  # a strided block, as the design's centre columns
        blocks.stationary_block(Z, Z.copy(), 0.7, kernel, halves[:, :size], threads=2)
        every = np.empty((size, size))
        blocks._fill(Z, Z, 0.7, kernel == "laplacian", False, every)
        np.testing.assert_array_equal(halves[:, :size], every)
    X = rng.normal(size=(n, 3))
    basis = KernelBasis(kernel=kernel, gamma=gamma).fit(X)
    assert basis._fused(n * n) and not basis._fused(500 * n)
    small = np.vstack([basis.transform(X[i : i + 500]) for i in range(0, n, 500)])
    np.testing.assert_allclose(basis.transform(X), small, rtol=1e-12, atol=1e-14)


def test_the_fused_blocks_exponential_is_numpys_within_one_unit_in_the_last_place():
    # The truth: NumPy's exp, over the kernel's whole range (0 down to past the smallest
    # subnormal, where both give 0), its end points included.
    from bayes_rvm.basis.blocks import exp_nonpositive

    rng = np.random.default_rng(5)
    a = np.concatenate(
        [
            [0.0, -0.0, -1e-300, -744.4, -745.2, -746.0, -1e6],
            -rng.exponential(1.0, 20_000),
            rng.uniform(-60.0, 0.0, 20_000),
            rng.uniform(-746.0, -700.0, 20_000),
        ]
    )
    got, scratch = np.empty_like(a), np.empty_like(a)
    exp_nonpositive(a, got, scratch)
    want = np.exp(a)
    ulps = np.abs(got - want) / np.spacing(np.maximum(want, 5e-324))
    assert ulps.max() <= 1.0
    assert got[0] == got[1] == 1.0 and got[5] == got[6] == 0.0


def test_transform_into_a_buffer_checks_it():
    X = np.random.default_rng(0).normal(size=(20, 2))
    basis = KernelBasis(kernel="rbf", gamma=1.0).fit(X)
    buffer = np.empty((20, 21))
    assert basis.transform(X, out=buffer) is buffer
    np.testing.assert_array_equal(buffer, basis.transform(X))
    with pytest.raises(ValueError, match="out must be a C-contiguous float64 array"):
        basis.transform(X, out=np.empty((20, 20)))
    with pytest.raises(ValueError, match="centre columns before the bias"):
        basis.transform(X, columns=[20, 0], out=np.empty((20, 2)))


# --- the rbf design, value for value scikit-learn's -------------------------------------------


@pytest.mark.parametrize("n_features", [1, 2, 3, 7])
@pytest.mark.parametrize("threads", [1, 2])
def test_rbf_design_is_scikit_learns_value_for_value(n_features, threads, monkeypatch):
    # The design's rbf columns are built in cache-sized row blocks (by one product of augmented
    # inputs on 1-D data), shared among threads: the same floats as rbf_kernel, not close ones.
    from sklearn.metrics.pairwise import rbf_kernel

    from bayes_rvm.basis import kernels

    monkeypatch.setattr(kernels, "RBF_BLOCK_ENTRIES", 2**11)  # many blocks, an odd last one
    monkeypatch.setattr(kernels, "RBF_THREADED_ENTRIES", 1)
    monkeypatch.setattr(kernels, "process_threads", lambda: threads)
    rng = np.random.default_rng(n_features)
    X = rng.uniform(-10, 10, size=(301, n_features))
    X[:40] = np.round(X[:40], 1)  # near and equal pairs: distances that cancel to zero or below
    basis = KernelBasis("rbf", gamma=1 / 9).fit(X)
    np.testing.assert_array_equal(basis.transform(X)[:, :-1], rbf_kernel(X, X[:], gamma=1 / 9))
    Z = rng.normal(size=(57, n_features)) * 4
    cols = np.sort(rng.choice(302, 40, replace=False))
    np.testing.assert_array_equal(
        basis.transform(Z, columns=cols), np.c_[rbf_kernel(Z, X, gamma=1 / 9), np.ones(57)][:, cols]
    )
    # Chunks of rows form their products as scikit-learn's kernel on those chunks does.
    chunked = np.vstack([rbf_kernel(Z[i : i + 5], X, gamma=1 / 9) for i in range(0, 57, 5)])
    np.testing.assert_array_equal(basis.transform(Z, chunk_size=5)[:, :-1], chunked)
    # kernel_matrix of an array with itself: scikit-learn's zero diagonal distances.
    np.testing.assert_array_equal(basis.kernel_matrix(Z, Z), rbf_kernel(Z, gamma=1 / 9))
    np.testing.assert_array_equal(basis.kernel_matrix(Z[:1], X), rbf_kernel(Z[:1], X, gamma=1 / 9))
    # One coefficient per feature: the kernel of rescaled inputs with a unit coefficient.
    g = rng.uniform(0.1, 2.0, n_features)
    ard = KernelBasis("rbf", gamma=list(g)).fit(X)
    s = np.sqrt(g)
    np.testing.assert_array_equal(ard.transform(Z)[:, :-1], rbf_kernel(Z * s, X * s, gamma=1.0))


def test_rbf_design_checks_only_what_can_overflow():
    # Squared norms beyond 1e300 can make a distance inf - inf: then the sum check runs.
    from bayes_rvm.basis.kernels import rbf_block

    X = np.array([[1e151], [-1e151], [0.0]])
    out = np.empty((3, 3))
    assert not rbf_block(X, X, 1.0, out)  # finite values, but the check is not skipped
    assert rbf_block(X / 1e10, X / 1e10, 1.0, out)
    np.testing.assert_array_equal(KernelBasis("rbf", gamma=1.0).fit(X).transform(X)[:, -1], 1.0)
    with (
        np.errstate(over="ignore", invalid="ignore"),
        pytest.raises(ValueError, match="non-finite"),
    ):
        KernelBasis("rbf", gamma=1.0).fit(X * 1e9).transform(X * 1e9)  # inf - inf on the diagonal


def test_shared_blocks_raise_what_a_thread_raised():
    from bayes_rvm.basis.kernels import share_blocks

    done = []

    def fill(start, stop):
        if start == 6:
            raise FloatingPointError("in a block")
        done.append(start)

    with pytest.raises(FloatingPointError, match="in a block"):
        share_blocks(fill, [(i, i + 1) for i in range(10)], 3)
    share_blocks(done.append, [(i,) for i in range(10, 20)], 4)
    assert sorted(d for d in done if d >= 10) == list(range(10, 20))
