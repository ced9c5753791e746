"""Small data sets of the RVM literature: generated (sinc, Friedman) and shipped (Ripley, Pima).

The generated ones follow Tipping (2001): sinc on 100 equally spaced inputs in [-10, 10] with
Gaussian noise of standard deviation 0.1, and the Friedman #1-#3 functions of scikit-learn, whose
input ranges are those of the paper.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np
from sklearn.datasets import make_friedman1, make_friedman2, make_friedman3
from sklearn.utils import check_random_state

__all__ = ["load_pima", "load_ripley", "make_friedman", "make_sinc", "sinc"]


def sinc(x: np.ndarray) -> np.ndarray:
    """The unnormalised sinc function ``sin(x) / x`` (1 at 0), element-wise."""
    return np.sinc(np.asarray(x, dtype=np.float64) / np.pi)


def make_sinc(
    n_samples: int = 100,
    *,
    noise: float = 0.1,
    low: float = -10.0,
    high: float = 10.0,
    random: bool = False,
    n_features: int = 1,
    shuffle: bool = True,
    random_state=None,
) -> tuple[np.ndarray, np.ndarray]:
    """Tipping's sinc regression problem.

    Parameters
    ----------
    n_samples : int, default=100
        Number of points.
    noise : float, default=0.1
        Standard deviation of the additive Gaussian noise.
    low, high : float, default=-10, 10
        Input range.
    random : bool, default=False
        Draw inputs uniformly instead of equally spaced (always random when ``n_features > 1``).
    n_features : int, default=1
        With more than one feature the target is ``sinc(||x||)`` (the radial sinc).
    shuffle : bool, default=True
        Return the rows in random order, as scikit-learn's generators do, so that unshuffled
        folds (``cross_val_score(RVR(), X, y, cv=5)``) each span the input range. False keeps
        equally spaced inputs in increasing order (for line plots); the pairs ``(x, y)`` are the
        same either way.
    random_state : int, RandomState or None
        Seed of the noise (and of the inputs when random, and of the order when shuffled).

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,)
    """
    if n_samples < 1 or n_features < 1:
        raise ValueError("n_samples and n_features must be positive.")
    if noise < 0:
        raise ValueError(f"noise must be non-negative, got {noise!r}.")
    rng = check_random_state(random_state)
    if n_features == 1 and not random:
        X = np.linspace(low, high, n_samples)[:, None]
    else:
        X = rng.uniform(low, high, size=(n_samples, n_features))
    y = sinc(np.linalg.norm(X, axis=1)) + noise * rng.standard_normal(n_samples)
    if shuffle:
        order = rng.permutation(n_samples)
        X, y = X[order], y[order]
    return X, y


def make_friedman(
    number: int, n_samples: int = 240, *, noise: float = 0.0, random_state=None
) -> tuple[np.ndarray, np.ndarray]:
    """Friedman's regression problem #1, #2 or #3 (scikit-learn's generators, Tipping's ranges).

    ``noise`` is the standard deviation of the Gaussian noise added to the target.
    """
    makers = {1: make_friedman1, 2: make_friedman2, 3: make_friedman3}
    if number not in makers:
        raise ValueError(f"number must be 1, 2 or 3, got {number!r}.")
    return makers[number](n_samples=n_samples, noise=noise, random_state=random_state)


def _data_folder(path, name: str):
    """The folder of data set ``name``: ``path`` if given, else the copy shipped in the package."""
    if path is None:
        return resources.files("bayes_rvm") / "data" / name
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"data folder {str(folder)!r} not found.")
    return folder


def load_ripley(path=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Ripley's synthetic two-class problem: 250 training and 1000 test points in 2-D.

    Parameters
    ----------
    path : str or Path, optional
        Folder holding ``synth.tr`` and ``synth.te`` (whitespace-separated, header ``xs ys yc``);
        default the copy shipped inside the package.

    Returns
    -------
    X_train : ndarray of shape (250, 2)
    y_train : ndarray of shape (250,), int 0/1
    X_test : ndarray of shape (1000, 2)
    y_test : ndarray of shape (1000,), int 0/1

    Notes
    -----
    The training file is sorted by class: draw a random subset (Tipping 2001 trains on 100 points)
    rather than taking the first rows.
    """
    folder = _data_folder(path, "ripley")
    with (folder / "synth.tr").open() as ftr, (folder / "synth.te").open() as fte:
        tr = np.loadtxt(ftr, skiprows=1)
        te = np.loadtxt(fte, skiprows=1)
    return tr[:, :2], tr[:, 2].astype(int), te[:, :2], te[:, 2].astype(int)


def load_pima(path=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Ripley's split of the Pima Indians diabetes data: 200 training and 332 test cases.

    Parameters
    ----------
    path : str or Path, optional
        Folder holding ``pima_train.csv`` and ``pima_test.csv`` (whitespace-separated, header
        ``npreg glu bp skin bmi ped age type``, ``type`` Yes/No); default the copy shipped
        inside the package.

    Returns
    -------
    X_train : ndarray of shape (200, 7)
    y_train : ndarray of shape (200,), int (1 = diabetic)
    X_test : ndarray of shape (332, 7)
    y_test : ndarray of shape (332,), int
    """
    folder = _data_folder(path, "pima")

    def read(name):
        rows = [
            line.split() for line in (folder / name).read_text().splitlines()[1:] if line.strip()
        ]
        X = np.array([[float(v) for v in r[:-1]] for r in rows])
        y = np.array([r[-1] == "Yes" for r in rows], dtype=int)
        return X, y

    return (*read("pima_train.csv"), *read("pima_test.csv"))
