"""Write MCMC models saved by bayes_rvm at bff6a04 (hyperpriors on unit-norm columns).

At that commit ``alpha_rel`` was stated for columns of unit Euclidean norm; later versions state it
for columns of unit root-mean-square (``bayes_rvm.evidence.problem.prior_column_scale``), N times
larger.
Run from a checkout of that commit: ``python tests/data/write_mcmc_models.py tests/data``.
"""

import sys
import warnings

import numpy as np
from sklearn.datasets import make_blobs

from bayes_rvm.datasets import make_sinc
from bayes_rvm.estimators.classifier import RVC
from bayes_rvm.estimators.regressor import RVR
from bayes_rvm.io import save_model

out = sys.argv[1]
settings = {"inference": "mcmc", "draws": 20, "tune": 100, "chains": 2, "random_state": 0}
warnings.simplefilter("ignore")  # 20 draws: convergence warnings are not the fixture's concern
X, y = make_sinc(30, random_state=0)
reg = RVR(gamma=0.11, **settings).fit(X, y, progressbar=False)
Xt = np.linspace(-10, 10, 25)[:, None]
mu, sd = reg.predict(Xt, return_std=True)
save_model(reg, f"{out}/rvr_mcmc_bff6a04.nc")
Xc, yc = make_blobs(30, centers=2, cluster_std=2.0, random_state=0)
clf = RVC(gamma=0.2, **settings).fit(Xc, yc, progressbar=False)
save_model(clf, f"{out}/rvc_mcmc_bff6a04.nc")
np.savez(
    f"{out}/predictions_mcmc_bff6a04.npz",
    X_reg=Xt,
    mean=mu,
    std=sd,
    X_clf=Xc,
    proba=clf.predict_proba(Xc),
)
