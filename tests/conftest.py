"""Shared fixtures: small seeded problems."""

import numpy as np
import pytest
import scipy.linalg  # noqa: F401  (loads SciPy's own OpenBLAS, so that the limit reaches it)
from threadpoolctl import threadpool_limits

# Tests run two workers on two cores: BLAS threads on top only spin against each other, and
# NumPy's and SciPy's separate OpenBLAS libraries spin against each other's idle threads.
threadpool_limits(1)


@pytest.fixture
def rng():
    return np.random.default_rng(20011)


def random_design(rng, n=40, m=12):
    """A random design with a few relevant columns and its targets."""
    Phi = rng.normal(size=(n, m))
    w = np.zeros(m)
    w[rng.choice(m, 3, replace=False)] = rng.normal(scale=2.0, size=3)
    return Phi, Phi @ w + 0.3 * rng.normal(size=n)
