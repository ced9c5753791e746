"""The default kernel width of RVC on many small, separable classes.

Each one-vs-rest problem of a many-class fit has a rare positive class, whose base rate is a large
negative intercept; the default width rule's shared-precision evidence must not buy that intercept
with a wide kernel (whose near-constant columns make it cheap), which leaves the classifier at
chance.
The reference is 1-nearest-neighbour accuracy on the same draws.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.neighbors import KNeighborsClassifier

from bayes_rvm import RVC


def _blobs(n_classes: int, per_class: int, std: float):
    centres = np.random.default_rng(1).uniform(-10.0, 10.0, (n_classes, 2))
    X, y = make_blobs([per_class] * n_classes, centers=centres, cluster_std=std, random_state=0)
    X_test, y_test = make_blobs([5] * n_classes, centers=centres, cluster_std=std, random_state=1)
    return X, y, X_test, y_test


def _scores(n_classes: int, per_class: int, std: float):
    X, y, X_test, y_test = _blobs(n_classes, per_class, std)
    nearest = KNeighborsClassifier(1).fit(X, y).score(X_test, y_test)
    rvc = RVC(multi_class="multinomial").fit(X, y)
    return rvc, rvc.score(X_test, y_test), nearest, float(np.ptp(X, axis=0).max())


def test_thirty_classes_of_two_points_keep_a_width_within_the_data():
    # 1-NN 0.95. With the bias's prior as narrow as the kernel weights' the rule chose a length
    # scale of 21 (the whole span), 13 relevance vectors and accuracy 0.70; now 4.2, 26, 0.85.
    rvc, accuracy, nearest, span = _scores(30, 2, 0.3)
    assert nearest > 0.9
    assert rvc.length_scale_ < span / 3
    assert accuracy > 0.85 * nearest
    assert rvc.n_relevance_vectors_ >= 20


@pytest.mark.slow
def test_fifty_classes_of_two_points_are_not_left_at_chance():
    # 1-NN 0.72, chance 0.02. The rule chose a length scale of 670 for inputs spanning 21 and no
    # relevance vector (accuracy 0.02); now 3.6, 45 vectors, 0.65.
    rvc, accuracy, nearest, span = _scores(50, 2, 0.5)
    assert nearest > 0.65
    assert rvc.length_scale_ < span / 3
    assert accuracy > 0.8 * nearest
    assert rvc.n_relevance_vectors_ >= 25
