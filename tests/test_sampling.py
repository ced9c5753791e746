"""nutpie on disk-cached numba callbacks (inference.nutpie_backend, .sampling), progress bar."""

from __future__ import annotations

import sys

import numpy as np
import pymc as pm
import pytest

from bayes_rvm.inference import nutpie_backend as _nutpie
from bayes_rvm.inference import sampling
from bayes_rvm.inference.nutpie_backend import compile_nutpie, with_initial_points


@pytest.fixture(params=["callbacks", "pyfunc"])
def entry(request, monkeypatch):
    """Both ways into nutpie: C callbacks cached on disk, and the function-based fallback."""
    if request.param == "pyfunc":
        # As for a graph PyTensor cannot cache (which therefore has no lookup entry either).
        monkeypatch.setattr(_nutpie, "_graph_cache_key", lambda fn: None)
        monkeypatch.setattr(_nutpie, "_source_graph_key", lambda model, layout: None)
        monkeypatch.setattr(_nutpie, "_native_density", lambda model, layout: None)
    return request.param


def _start(compiled, seed):
    make = getattr(compiled, "initial_point_func", None) or compiled._make_initial_points
    return make(seed)


def _conjugate_model(y):
    # Normal mean with known sd: the posterior is N(m, s^2) in closed form.
    with pm.Model() as model:
        data = pm.Data("y_data", y)
        mu = pm.Normal("mu", 0.0, 10.0)
        sd = pm.HalfNormal("sd", 1.0)
        pm.Normal("y", mu, 1.0, observed=data)
        pm.Deterministic("sd_used", sd)
    return model


def _posterior_of_mu(y):
    prec = 1 / 100 + y.size
    return y.sum() / prec, prec**-0.5


def test_nutpie_samples_a_user_model_exactly(entry):
    import nutpie
    from nutpie.compile_pymc import CompiledPyMCModel

    rng = np.random.default_rng(0)
    y = rng.normal(1.5, 1.0, size=25)
    model = _conjugate_model(y)
    compiled = compile_nutpie(model)
    assert isinstance(compiled, CompiledPyMCModel) == (entry == "callbacks")
    dt = nutpie.sample(compiled, draws=600, tune=300, chains=2, seed=1, progress_bar=False)
    mu = dt["posterior"]["mu"].values.ravel()
    m, s = _posterior_of_mu(y)
    assert abs(mu.mean() - m) < 5 * s / np.sqrt(300)
    assert abs(mu.std() - s) < 0.15 * s
    # new data through with_data, same compiled function
    y2 = y + 3.0
    dt2 = nutpie.sample(
        compiled.with_data(y_data=y2), draws=600, tune=300, chains=2, seed=2, progress_bar=False
    )
    m2, _ = _posterior_of_mu(y2)
    assert abs(dt2["posterior"]["mu"].values.mean() - m2) < 5 * s / np.sqrt(300)


def test_initial_points_are_set_without_recompiling(entry):
    model = _conjugate_model(np.zeros(5))
    compiled = compile_nutpie(model)
    started = with_initial_points(compiled, model, {"mu": 40.0, "sd": 2.0})
    # the flat start nutpie asks for: (mu, log sd), jittered by at most 1 as PyMC does
    start = _start(started, 3)
    assert abs(start[0] - 40.0) <= 1.0 and abs(start[1] - np.log(2.0)) <= 1.0
    if entry == "callbacks":
        assert started.compiled_logp_func is compiled.compiled_logp_func
    else:
        assert started._make_logp_func is compiled._make_logp_func
    default = _start(with_initial_points(compiled, model, None), 3)
    assert abs(default[0]) <= 1.0


def _call_logp_callback(compiled, x):
    import ctypes

    logp = np.zeros(())
    grad = np.zeros_like(x)
    ptr = ctypes.POINTER(ctypes.c_double)
    code = compiled.compiled_logp_func.ctypes(
        x.size,
        x.ctypes.data_as(ptr),
        grad.ctypes.data_as(ptr),
        logp.ctypes.data_as(ptr),
        ctypes.c_void_p(compiled.user_data.ctypes.data),
    )
    return code, float(logp), grad


def test_callbacks_give_pymcs_logp_and_gradient_on_new_data(monkeypatch):
    # The RVM's marginal model (low-rank form) through PyTensor's graph (the default model's
    # own density is held to it in test_r2d2_density), against PyMC's own compiled logp and
    # gradient on the C backend, before and after with_data (also with a design of another
    # rank, which keeps the in-process cache key).
    monkeypatch.setattr(_nutpie, "_native_density", lambda model, layout: None)
    from bayes_rvm.inference.nutpie_backend import with_model_data
    from bayes_rvm.models.graphs import rvm_regression_model, set_model_data

    rng = np.random.default_rng(3)
    x = np.linspace(-5, 5, 40)
    Phi = np.exp(-0.1 * (x[:, None] - x[None, :]) ** 2)
    model = rvm_regression_model(Phi, np.sin(x) + 0.1 * rng.normal(size=40))
    assert model.rvm_spec.marginal == "lowrank"
    compiled = compile_nutpie(model)
    ranks = [model["Phi_U"].get_value().shape[1]]
    point = rng.normal(scale=0.5, size=compiled.n_dim)
    ip = model.initial_point()
    names = compiled._rvm_free_names
    sizes = [int(np.prod(s)) for s in compiled._rvm_free_shapes]
    parts = np.split(point, np.cumsum(sizes)[:-1])
    split = {
        n: p.reshape(s) for n, p, s in zip(names, parts, compiled._rvm_free_shapes, strict=True)
    }
    assert set(split) == set(ip)
    # new targets, then a narrower kernel: a design of another rank, the same compiled model
    narrow = np.exp(-0.4 * (x[:, None] - x[None, :]) ** 2)
    key = sampling._nutpie_cache_key(model)
    for new in (None, (Phi, np.cos(x)), (narrow, np.cos(x))):
        if new is not None:
            set_model_data(model, *new)
            compiled = with_model_data(compiled, model)
            assert sampling._nutpie_cache_key(model) == key
        code, logp, grad = _call_logp_callback(compiled, point)
        assert code == 0
        np.testing.assert_allclose(logp, model.compile_logp()(split), rtol=1e-10)
        dlogp = model.compile_dlogp()(split)
        np.testing.assert_allclose(grad, dlogp, rtol=1e-8, atol=1e-10)
        ranks.append(model["Phi_U"].get_value().shape[1])
    assert ranks[-1] > ranks[0]


@pytest.mark.slow
def test_a_fresh_process_loads_the_callbacks_from_disk(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "load.py"
    script.write_text(
        "import numpy as np\n"
        "from bayes_rvm.inference.nutpie_backend import compile_nutpie\n"
        "from bayes_rvm.models.graphs import rvm_regression_model\n"
        "rng = np.random.default_rng(0)\n"
        "c = compile_nutpie(rvm_regression_model(rng.normal(size=(9, 4)), rng.normal(size=9)))\n"
        "print(c.compiled_logp_func.cache_hits, c.compiled_expand_func.cache_hits)\n"
    )
    runs = [
        subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True)
        for _ in range(2)
    ]
    # the first process may fill the cache; the second one compiles nothing
    assert runs[1].stdout.split() == ["1", "1"]


def test_progressbar_auto_is_silent_in_non_interactive_output(capfd):
    from bayes_rvm.models.graphs import rvm_regression_model

    rng = np.random.default_rng(1)
    Phi = rng.normal(size=(15, 4))
    model = rvm_regression_model(Phi, Phi @ np.array([1.0, 0, 0, -1]) + 0.1 * rng.normal(size=15))
    assert not sampling.interactive()  # pytest captures the streams
    sampling.sample_mcmc(model, draws=10, tune=10, chains=2, random_seed=0, warn=False)
    out, err = capfd.readouterr()
    assert out == "" and err == ""


@pytest.mark.parametrize("has_ipywidgets", [True, False])
def test_progressbar_auto_in_jupyter_needs_ipywidgets(monkeypatch, has_ipywidgets):
    # Without ipywidgets rich cannot draw a live bar in a kernel, only a warning to install them
    # (with the library's path) and an empty output: "auto" leaves the bar out there.
    import importlib.util
    import types

    shell = types.SimpleNamespace(config={"IPKernelApp": {}})
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: (
            (object() if has_ipywidgets else None) if name == "ipywidgets" else find_spec(name, *a)
        ),
    )
    assert sampling.interactive() is has_ipywidgets


@pytest.mark.parametrize("value", [True, False])
def test_progressbar_explicit_values_are_accepted(value):
    from bayes_rvm.models.graphs import rvm_regression_model

    rng = np.random.default_rng(2)
    Phi = rng.normal(size=(12, 3))
    model = rvm_regression_model(Phi, rng.normal(size=12))
    dt = sampling.sample_mcmc(
        model, draws=5, tune=5, chains=2, random_seed=0, warn=False, progressbar=value
    )
    assert dt["posterior"]["w"].shape == (2, 5, 3)


def _graph_keys(model) -> tuple:
    """The on-disk cache keys of ``model``'s compiled log density and trace expansion."""
    fns = _nutpie._make_functions(
        model,
        mode="NUMBA",
        join_expanded=True,
        pymc_initial_point_fn=_nutpie._initial_point_fn(model),
    )
    return _nutpie._graph_cache_key(fns[2]), _nutpie._graph_cache_key(fns[3])


def _graph_of(name: str, n: int, m: int):
    """The model of one graph builder (and form) the estimators sample, on n rows, m columns."""
    from bayes_rvm.models.graphs import (
        rvm_classification_model,
        rvm_poisson_model,
        rvm_regression_model,
        rvm_width_model,
    )

    rng = np.random.default_rng(n)
    Phi = rng.normal(size=(n, m))
    y = Phi[:, 0] + 0.1 * rng.normal(size=n)
    build = {
        "marginal": lambda: rvm_regression_model(Phi, y, marginal="dense"),
        "lowrank": lambda: rvm_regression_model(Phi, y, marginal="lowrank"),
        "outputs": lambda: rvm_regression_model(Phi, np.c_[y, -y]),
        "offset": lambda: rvm_regression_model(Phi, y, offset=np.ones(n)),
        "statistics": lambda: rvm_regression_model(Phi, y, n_rows=10 * n),
        "joint": lambda: rvm_regression_model(Phi, y, form="joint"),
        "student_t": lambda: rvm_regression_model(Phi, y, form="joint", likelihood="student_t"),
        "bernoulli": lambda: rvm_classification_model(Phi, (y > 0).astype(int)),
        "softmax": lambda: rvm_classification_model(Phi, np.arange(n) % 3),
        "poisson": lambda: rvm_poisson_model(Phi, rng.poisson(np.exp(y))),
        "width": lambda: rvm_width_model(Phi[:, :2], y, Phi[:m, :2]),
    }
    return build[name]()


@pytest.mark.parametrize(
    "name",
    ["marginal"]
    + [
        pytest.param(name, marks=pytest.mark.slow)
        for name in (
            "lowrank outputs offset statistics joint student_t bernoulli softmax poisson width"
        ).split()
    ],
)
def test_the_compiled_graphs_do_not_depend_on_the_data_shape(name):
    # The on-disk cache keys of a builder's functions at two shapes are equal, so that a fit on
    # a shape never seen before loads the machine code compiled for another (nothing is
    # compiled here: the functions are built, not called).
    keys = _graph_keys(_graph_of(name, 30, 8))
    assert None not in keys
    assert keys == _graph_keys(_graph_of(name, 37, 11))


@pytest.mark.parametrize(
    "name", "marginal lowrank outputs statistics bernoulli softmax poisson joint width".split()
)
def test_the_layout_reads_the_shapes_nutpie_computes(name):
    # The shapes come from the variables' dims where every traced variable has them (no
    # PyTensor function compiled); nutpie's own computation is the truth, and where the dims do
    # not settle a shape (a transform that may change it) it is what the layout uses.
    from nutpie.compile_pymc import _compute_shapes

    model = _graph_of(name, 30, 8)
    truth = {k: tuple(int(n) for n in v) for k, v in _compute_shapes(model).items()}
    shapes = _nutpie._dims_shapes(model)
    assert shapes is None or shapes == truth
    if name in ("marginal", "lowrank", "outputs", "bernoulli"):
        assert shapes == truth


def test_initial_points_in_numpy_are_pymcs_plus_the_jitter():
    # The estimators' start (every free variable given, transforms none, log and log-odds) is
    # PyMC's transformed initial point plus U(-1, 1) jitter; anything else falls back to PyMC.
    from pymc.initial_point import make_initial_point_fn

    from bayes_rvm.models.priors import r2d2_free_values

    model = _graph_of("marginal", 30, 8)
    free = {rv.name for rv in model.free_RVs}
    values = r2d2_free_values(model, {"alpha_rel": np.linspace(0.5, 4.0, 8), "sigma_rel": 0.3})
    initvals = {k: v for k, v in values.items() if k in free}
    assert len(initvals) == len(free) == 3
    layout = _nutpie._layout(model)
    point = _nutpie._numpy_initial_point(model, initvals, layout.free_names, layout.free_shapes)
    truth = make_initial_point_fn(
        model=model, overrides=initvals, jitter_rvs=set(), return_transformed=True
    )(0)
    jitter = np.concatenate(
        [np.ravel(point(seed)[k] - truth[k]) for seed in range(200) for k in truth]
    )
    assert set(point(0)) == set(truth)
    assert np.all(np.abs(jitter) < 1.0) and abs(jitter.mean()) < 0.05
    assert np.std(jitter) == pytest.approx(1.0 / np.sqrt(3.0), rel=0.05)
    assert np.array_equal(point(7)["alpha_rel_z"], point(7)["alpha_rel_z"])
    partial = {k: v for k, v in initvals.items() if k != "sigma_rel"}
    args = (layout.free_names, layout.free_shapes)
    assert _nutpie._numpy_initial_point(model, partial, *args) is None
    assert _nutpie._numpy_initial_point(model, {**initvals, "sigma_rel": "prior"}, *args) is None


@pytest.mark.slow
def test_a_new_data_shape_compiles_nothing(tmp_path):
    # Cold compile caches of the test's own: the first process compiles (and says so on PyMC's
    # logger); a fresh one fitting another shape adds no cache file and compiles nothing.
    import os
    import subprocess

    script = tmp_path / "fit.py"
    script.write_text(
        "import logging, sys, warnings\n"
        "from bayes_rvm import RVR\n"
        "from bayes_rvm.datasets import make_sinc\n"
        "from bayes_rvm.inference.nutpie_backend import COMPILING_MESSAGE\n"
        "said = []\n"
        "class Listen(logging.Handler):\n"
        "    def emit(self, record):\n"
        "        said.append(record.getMessage() == COMPILING_MESSAGE)\n"
        "logging.getLogger('pymc').addHandler(Listen())\n"
        "logging.getLogger('pymc').setLevel(logging.INFO)\n"
        "warnings.simplefilter('ignore')\n"
        "X, y = make_sinc(int(sys.argv[1]), random_state=0, shuffle=False)\n"
        "RVR(inference='mcmc', sampler_config=dict(draws=5, tune=5, chains=1),\n"
        "    random_state=0).fit(X, y)\n"
        "print('compiled' if any(said) else 'loaded')\n"
    )
    env = dict(
        os.environ,
        PYTENSOR_FLAGS=f"base_compiledir={tmp_path / 'pytensor'}",
        NUMBA_CACHE_DIR=str(tmp_path / "numba"),
    )

    def files():
        return sorted(str(p) for p in tmp_path.rglob("*") if p.is_file())

    def fit(n):
        run = subprocess.run(
            [sys.executable, str(script), str(n)], capture_output=True, text=True, env=env
        )
        assert run.returncode == 0, run.stderr[-2000:]
        return run.stdout.split()[-1]

    assert fit(30) == "compiled"
    before = files()
    assert fit(37) == "loaded"
    assert files() == before


def _source_key(model):
    """The digest the compiled callbacks are looked up by (before PyTensor's rewrites)."""
    keyed = _nutpie._source_graph_key(model, _nutpie._layout(model))
    return None if keyed is None else keyed[0]


def test_models_that_differ_never_share_a_lookup_entry():
    # The lookup skips PyTensor's rewrites and compilation: a digest shared by two models that
    # compile differently would sample the wrong one. Every builder and form the estimators
    # sample, two constants of the priors, the bound checks, and a user's model with one
    # constant changed each get their own digest; a builder at another data shape, its own.
    from bayes_rvm import Prior
    from bayes_rvm.models.graphs import rvm_regression_model

    names = "marginal lowrank outputs offset statistics joint student_t bernoulli softmax poisson"
    keys = {name: _source_key(_graph_of(name, 30, 8)) for name in names.split()}
    rng = np.random.default_rng(5)
    Phi, y = rng.normal(size=(30, 8)), rng.normal(size=30)
    for label, kwargs in {
        "noise scale 2": {"noise_prior": Prior("HalfNormal", sigma=2.0)},
        "r2_a 1": {"alpha_prior": Prior("R2D2Precision", r2_a=1.0, r2_b=0.5, concentration=0.5)},
    }.items():
        keys[label] = _source_key(rvm_regression_model(Phi, y, marginal="dense", **kwargs))
    # a setting the default prior does not read (the Student-t prior's nu): the same model
    default = rvm_regression_model(Phi, y, marginal="dense", nu=3.0)
    assert _source_key(default) == _source_key(_graph_of("marginal", 30, 8))
    unchecked = rvm_regression_model(Phi, y, marginal="dense")
    unchecked.check_bounds = False
    keys["unchecked"] = _source_key(unchecked)
    user = _conjugate_model(np.zeros(5))
    keys["user"] = _source_key(user)
    with pm.Model() as other:  # the same model with the prior's scale 10 -> 20
        data = pm.Data("y_data", np.zeros(5))
        mu = pm.Normal("mu", 0.0, 20.0)
        sd = pm.HalfNormal("sd", 1.0)
        pm.Normal("y", mu, 1.0, observed=data)
        pm.Deterministic("sd_used", sd)
    keys["user, other scale"] = _source_key(other)
    assert None not in keys.values()
    assert len(set(keys.values())) == len(keys)
    # what the lookup is for: another data shape, the same entry (and stable across builds)
    assert _source_key(_graph_of("marginal", 37, 11)) == keys["marginal"]
    assert _source_key(_conjugate_model(np.ones(9))) == keys["user"]


def test_an_op_of_another_library_is_not_looked_up(monkeypatch):
    # Only Ops whose code the digest pins (PyTensor's, PyMC's, this package's) are keyed.
    model = _conjugate_model(np.zeros(5))
    assert _source_key(model) is not None
    # a PyTensor Op holding a function of the user's (the digest would name it, not hold it)
    from pytensor.compile.ops import as_op
    from pytensor.tensor import dvector

    @as_op(itypes=[dvector], otypes=[dvector])
    def doubled(x):
        return 2 * x

    with pytest.raises(_nutpie._Unkeyable):
        _nutpie._check_op(doubled)
    with model:
        pm.Potential("user_term", doubled(model["mu"][None]).sum())
    assert _source_key(model) is None
    monkeypatch.setattr(_nutpie, "_KEYED_OP_MODULES", ("bayes_rvm.",))
    assert _source_key(_conjugate_model(np.zeros(5))) is None


def test_the_looked_up_callbacks_sample_what_the_compiled_ones_do(tmp_path, monkeypatch):
    # The entry written by a full compilation gives callbacks (loaded from numba's disk cache,
    # nothing rewritten) whose draws at one seed are the full path's, bit for bit; an entry
    # whose callbacks numba's cache does not hold is passed over and rewritten.
    import nutpie

    from bayes_rvm.models.graphs import rvm_regression_model

    monkeypatch.setattr(_nutpie, "_manifest_path", lambda key: tmp_path / f"{key}.json")
    monkeypatch.setattr(_nutpie, "_native_density", lambda model, layout: None)
    rng = np.random.default_rng(4)
    Phi = rng.normal(size=(20, 5))
    model = rvm_regression_model(Phi, Phi[:, 0] + 0.1 * rng.normal(size=20), marginal="dense")
    full = compile_nutpie(model)  # nothing recorded in tmp_path yet: the full path
    assert full.logp_func is not None
    entries = list(tmp_path.glob("*.json"))
    assert len(entries) == 1
    looked_up = compile_nutpie(model)
    assert looked_up.logp_func is None  # not compiled by PyTensor
    assert looked_up.compiled_logp_func.cache_hits == 1
    draws = [
        nutpie.sample(c, draws=50, tune=50, chains=2, seed=7, progress_bar=False)
        for c in (full, looked_up)
    ]
    posterior = [d["posterior"].dataset for d in draws]
    assert set(posterior[0].data_vars) == set(posterior[1].data_vars)
    for name in posterior[0].data_vars:
        np.testing.assert_array_equal(posterior[0][name].values, posterior[1][name].values)
    np.testing.assert_array_equal(
        draws[0]["sample_stats"]["step_size"].values, draws[1]["sample_stats"]["step_size"].values
    )
    # a stale entry (a key numba's cache does not hold): passed over, then written again
    import json

    entry = json.loads(entries[0].read_text())
    entries[0].write_text(json.dumps({**entry, "logp_key": "not-a-cached-graph"}))
    again = compile_nutpie(model)
    assert again.logp_func is not None
    assert json.loads(entries[0].read_text()) == entry
