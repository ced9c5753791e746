"""Write models saved by bayes_rvm at 23a5226 (format bayes_rvm-model/2) and their predictions.

Run from a checkout of that commit: ``python tests/data/write_base_models.py tests/data``.
"""

import sys

import numpy as np
from sklearn.datasets import make_blobs

from bayes_rvm.datasets import make_sinc
from bayes_rvm.estimators.classifier import RVC
from bayes_rvm.estimators.regressor import RVR
from bayes_rvm.io import save_model

out = sys.argv[1]
X, y = make_sinc(30, random_state=0)
reg = RVR(gamma=0.11).fit(X, y)
Xt = np.linspace(-10, 10, 25)[:, None]
mu, sd = reg.predict(Xt, return_std=True)
save_model(reg, f"{out}/rvr_23a5226.nc")
Xc, yc = make_blobs(45, centers=3, cluster_std=2.0, random_state=0)
clf = RVC(gamma=0.2, multi_class="ovr").fit(Xc, np.array(["ant", "bee", "cow"])[yc])
save_model(clf, f"{out}/rvc_ovr_23a5226.nc")
np.savez(
    f"{out}/predictions_23a5226.npz",
    X_reg=Xt,
    mean=mu,
    std=sd,
    X_clf=Xc,
    proba=clf.predict_proba(Xc),
)
