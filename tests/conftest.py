"""Shared fixtures: small seeded problems; how ``pytest -n 2`` shares the tests out."""

import numpy as np
import pytest
import scipy.linalg  # noqa: F401  (loads SciPy's own OpenBLAS, so that the limit reaches it)
from threadpoolctl import threadpool_limits

# Tests run two workers on two cores: BLAS threads on top only spin against each other, and
# NumPy's and SciPy's separate OpenBLAS libraries spin against each other's idle threads.
threadpool_limits(1)


def pytest_configure(config):
    # xdist's default "load" hands out single tests, so one module's tests land on both workers
    # and each builds the module's shared fits (MCMC, VI, width searches) again: in the last full
    # run test_width_mcmc's sampled-width fit was built on both (101 s and 87 s under load).
    # "loadscope" keeps a module on one worker. ("loadgroup" would keep only
    # the tests of one fit together, but xdist 3.8 cannot rename pytest 9's node ids: its groups
    # are silently ignored.) The modules go out in the order the workers collect them in, most
    # slow tests first (pytest_collection_modifyitems). An explicit --dist wins.
    explicit = any(a == "--dist" or a.startswith("--dist=") for a in config.invocation_params.args)
    if getattr(config.option, "dist", "no") == "load" and not explicit:
        config.option.dist = "loadscope"
        config.option.loadscopereorder = False


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    node.workerinput["slow_modules_first"] = node.config.option.dist == "loadscope"


@pytest.hookimpl(trylast=True)  # after -m has deselected
def pytest_collection_modifyitems(config, items):
    if not getattr(config, "workerinput", {}).get("slow_modules_first"):
        return  # not a worker of a `-n` run: the written order stays
    modules = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    # The slow tests take most of the time: a module with many of them (the RVC MCMC fits) started
    # last would leave the other worker idle. Without them (the default run, -m "not slow") the
    # modules with the most tests go first (the scikit-learn checks of test_estimators and
    # test_classifier, test_reliability): a proxy for the longest jobs first, so that short ones
    # fill the end. The sort is stable.
    ordered = sorted(
        modules.values(),
        key=lambda tests: (-sum(bool(t.get_closest_marker("slow")) for t in tests), -len(tests)),
    )
    items[:] = [item for tests in ordered for item in tests]


@pytest.fixture
def rng():
    return np.random.default_rng(20011)


def random_design(rng, n=40, m=12):
    """A random design with a few relevant columns and its targets."""
    Phi = rng.normal(size=(n, m))
    w = np.zeros(m)
    w[rng.choice(m, 3, replace=False)] = rng.normal(scale=2.0, size=3)
    return Phi, Phi @ w + 0.3 * rng.normal(size=n)
