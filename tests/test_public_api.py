"""The package's public face, and its shipped data sets read from an installed copy."""

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_public_names():
    import bayes_rvm
    from bayes_rvm import RVC, RVR, KernelBasis, Prior, compare, load_model, save_model

    assert RVR.__module__ == "bayes_rvm.estimators.regressor"
    assert RVC.__module__ == "bayes_rvm.estimators.classifier"
    assert callable(compare) and callable(save_model) and callable(load_model)
    assert (
        KernelBasis is bayes_rvm.basis.kernels.KernelBasis
        and Prior is bayes_rvm.models.priors.Prior
    )
    assert bayes_rvm.__version__[0].isdigit()
    assert set(bayes_rvm.__all__) >= {"RVR", "RVC", "KernelBasis", "compare", "save_model"}


def test_public_names_survive_importing_every_module():
    # A submodule named like an exported function would replace it on the package once imported
    # (``bayes_rvm.compare`` the module shadowed ``compare`` the function).
    import importlib
    import pkgutil

    import bayes_rvm

    for info in pkgutil.walk_packages(bayes_rvm.__path__, "bayes_rvm."):
        importlib.import_module(info.name)
    for name in bayes_rvm._EXPORTS:
        assert callable(getattr(bayes_rvm, name)), name
    assert bayes_rvm.compare.__module__ == "bayes_rvm.posterior.comparison"


def test_numeric_layers_import_without_pymc():
    # DESIGN.md: the engines are NumPy + SciPy only; the public names resolve lazily.
    code = (
        "import sys, bayes_rvm.evidence, bayes_rvm.basis.kernels; "
        "print(sorted(m for m in ('pymc', 'pytensor', 'numba', 'jax') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    import bayes_rvm

    with pytest.raises(AttributeError, match="no attribute 'RVMX'"):
        bayes_rvm.RVMX


_TYPE2_FIT = """
import sys
import numpy as np
from bayes_rvm import RVC, RVR

X = np.linspace(-5, 5, 40)[:, None]
y = np.sinc(X[:, 0] / np.pi)
RVR().fit(X, y).predict(X, return_std=True)
RVC().fit(X, y > 0.2).predict_proba(X)
print(sorted(m for m in ("pymc", "pytensor") if m in sys.modules))
"""


def _run(code: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return out.stdout.strip().splitlines()


def test_type2_fit_imports_no_pymc():
    # A type-II user pays for neither PyMC nor PyTensor (2-3 s of imports).
    assert _run(_TYPE2_FIT) == ["[]"]


@pytest.mark.slow
def test_mcmc_imports_pymc_on_demand_after_a_type2_fit():
    code = _TYPE2_FIT + textwrap.dedent(
        """
        est = RVR(
            inference="mcmc",
            sampler_config={"draws": 60, "tune": 60, "chains": 1},
            random_state=0,
        ).fit(X, y)
        print(dict(est.idata_["posterior"].sizes)["draw"], "pymc" in sys.modules)
        """
    )
    assert _run(code) == ["[]", "60 True"]


def test_one_nu_default_everywhere():
    from bayes_rvm import RVC, RVR
    from bayes_rvm.cli import _parser
    from bayes_rvm.models.priors import DEFAULT_MCMC_NU, DEFAULT_NU

    # "auto": the type-II default, and a Student-t that NUTS can sample under MCMC.
    assert RVR()._cfg.nu == RVC()._cfg.nu == "auto"
    assert RVR()._type2_nu() == RVC()._type2_nu() == DEFAULT_NU
    assert RVR()._mcmc_student_t() == RVC()._mcmc_student_t() == DEFAULT_MCMC_NU
    assert RVR(prior_params={"nu": 3.0})._mcmc_student_t() == 3.0
    assert _parser().parse_args(["fit"]).nu is None


def test_student_t_default_is_sparse_on_sinc():
    # Reference document 002: small nu, few relevance vectors. nu = 1 keeps all 100 here.
    from bayes_rvm import RVR
    from bayes_rvm.datasets import make_sinc

    X, y = make_sinc(100, noise=0.1, random_state=0, shuffle=False)
    sparse = RVR(gamma=1 / 9, prior="student_t").fit(X, y)
    ard = RVR(gamma=1 / 9).fit(X, y)
    assert sparse.n_relevance_vectors_ <= 2 * ard.n_relevance_vectors_ <= 20
    assert (
        RVR(gamma=1 / 9, prior="student_t", prior_params={"nu": 1.0}).fit(X, y).n_relevance_vectors_
        > 50
    )


def test_shipped_data_match_their_published_sizes():
    from bayes_rvm.datasets import load_pima, load_ripley

    Xtr, ytr, Xte, yte = load_ripley()
    assert Xtr.shape == (250, 2) and Xte.shape == (1000, 2)
    assert np.bincount(ytr).tolist() == [125, 125] and np.bincount(yte).tolist() == [500, 500]
    Xtr, ytr, Xte, yte = load_pima()
    assert Xtr.shape == (200, 7) and Xte.shape == (332, 7)
    assert ytr.sum() == 68 and yte.sum() == 109  # MASS: Pima.tr 68 Yes, Pima.te 109 Yes


@pytest.mark.slow
def test_shipped_data_load_from_an_installed_wheel(tmp_path):
    pytest.importorskip("hatchling", reason="building the wheel needs hatchling")
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"),
            *("-w", str(wheels), str(ROOT)),
        ],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = wheels.glob("bayes_rvm-*.whl")
    site = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(site), str(wheel)],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    script = textwrap.dedent(
        """
        import bayes_rvm.datasets as d
        print(d.__file__)
        print(d.load_ripley()[0].shape, d.load_pima()[2].shape)
        """
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = subprocess.run(
        [sys.executable, "-c", script],
        cwd=elsewhere,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    where, shapes = run.stdout.split("\n")[:2]
    assert Path(where).is_relative_to(site)
    assert shapes == "(250, 2) (332, 7)"


@pytest.mark.slow
def test_readme_quick_start_runs_as_written():
    # A fresh process, the block exactly as the README shows it; then what its comments claim.
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Quick start", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    claims = textwrap.dedent(
        """
        import arviz as az
        import matplotlib
        matplotlib.use("Agg")
        az.plot_ppc_dist(mcmc.idata_)
        print(az.loo_pit(mcmc.idata_)["y"].shape, clf.score(Xr_test, yr_test) > 0.88)
        """
    )
    assert _run(block + claims)[-1] == "(100,) True"


def test_public_entry_points_run_with_one_blas_thread():
    # One guard (threads.one_blas_thread) on fit / predict / sample_y / the
    # classifier's probabilities: a kernel of our own records BLAS's thread count
    # where the estimators evaluate it, with two threads allowed outside.
    from sklearn.metrics.pairwise import rbf_kernel
    from threadpoolctl import threadpool_info, threadpool_limits

    from bayes_rvm import RVC, RVR

    seen = []

    def kernel(a, b):
        seen.append(max(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"))
        return rbf_kernel(a, b, gamma=0.5)

    X = np.linspace(-5, 5, 30)[:, None]
    y = np.sinc(X[:, 0] / np.pi)
    with threadpool_limits(limits=2, user_api="blas"):
        kernel(X, X)
        if seen.pop() < 2:
            pytest.skip("BLAS runs one thread here whatever the limit")
        RVR(kernel=kernel).fit(X, y).sample_y(X, 2)
        clf = RVC(kernel=kernel).fit(X, y > 0.2)
        clf.predict_proba(X)
        clf.predict(X)
    assert seen and set(seen) == {1}


@pytest.mark.parametrize("kernel", ["rbf", "linear", "poly"])
def test_sparse_input_fits_and_predicts_as_dense(kernel):
    # scikit-learn's SVR and kernels take CSR; so do the RVMs, with the dense fit's results.
    import scipy.sparse as sp

    from bayes_rvm import RVC, RVR

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 5)) * (rng.random((40, 5)) < 0.4)  # 60% zeros
    y = np.sin(X.sum(axis=1))
    Xs, Xt = sp.csr_array(X), X[:7] + 0.1
    for make, target in ((RVR, y), (RVC, y > 0)):
        dense = make(kernel=kernel, random_state=0).fit(X, target)
        sparse = make(kernel=kernel, random_state=0).fit(Xs, target)
        np.testing.assert_array_equal(sparse.active_, dense.active_)
        if make is RVR:
            for got, want in zip(
                sparse.predict(sp.csr_matrix(Xt), return_std=True),
                dense.predict(Xt, return_std=True),
                strict=True,
            ):
                np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        else:
            np.testing.assert_allclose(
                sparse.predict_proba(sp.csc_array(Xt)), dense.predict_proba(Xt), rtol=1e-12
            )
