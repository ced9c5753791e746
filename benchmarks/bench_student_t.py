"""The Student-t EM with a learned ``nu``: the profiled ``(nu, beta)`` step against the EM step.

``RVR(likelihood="student_t")`` learns the noise's degrees of freedom. Its nu step was Liu and
Rubin's EM step (``nu`` given ``q(u)``), which crawls as ``nu`` grows: on Gaussian noise, where
the likelihood peaks at ``nu = inf``, it hit ``em_max_iter=500`` and the CLI printed "NOT
converged". The step now maximises the bound over ``q(u)``, ``nu`` and ``beta`` jointly given
``q(w)`` (ECME with the scale profiled). This script fits both, in one process, alternating, on

- ``gaussian``: the CLI's default data (sinc, N = 100, noise sd 0.1, seed 0);
- ``t3``: sinc plus 0.1 times t(3) noise (N = 100, seed 0);

and prints per method the EM iterations, the median wall and CPU time of ``RVR.fit`` and of the
10-fold refits the CLI's DataTree makes (``refit_loo(n_folds=10)``), the bound ``L``
(``log_evidence_``), ``nu``, the noise scale and the RMSE against the noise-free sinc on 1000
points. "before" is the EM step, the module as of ``--before-ref``, loaded from git; "slow EM"
is that EM run to ``em_tol=1e-10`` (cap ``--slow-iter``), the optimum both should reach, and
"after 1e-10" the new step at that tolerance (the ratio at equal accuracy); on the Gaussian
data the Gaussian RVM's evidence is the ``nu = inf`` limit of the bound. Ratios after/before
are of the same run; the load average is printed with each table.

Usage::

    .venv/bin/python benchmarks/bench_student_t.py [--rounds 3] [--before-ref a495ae8]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bayes_rvm.datasets import make_sinc  # noqa: E402
from bayes_rvm.estimators.regressor import RVR  # noqa: E402
from bayes_rvm.evidence import engines  # noqa: E402

GAMMA = 1.0 / 9.0  # the CLI's default width for sinc, 3
KEY = ("student_t", "sequential")


def data(kind: str, n: int = 100, seed: int = 0):
    """The training set of ``kind`` and the noise-free test grid."""
    if kind == "gaussian":
        X, y = make_sinc(n, noise=0.1, random_state=seed, shuffle=False)
    else:
        X, _ = make_sinc(n, noise=0.0, random_state=seed, shuffle=False)
        y = np.sinc(X[:, 0] / np.pi) + 0.1 * np.random.default_rng(seed).standard_t(3.0, n)
    X_test = np.linspace(-10.0, 10.0, 1000)[:, None]
    return X, y, X_test, np.sinc(X_test[:, 0] / np.pi)


def load_before(ref: str):
    """``bayes_rvm/evidence/student_t.py`` as of ``ref``, imported as a separate module."""
    src = subprocess.run(
        ["git", "show", f"{ref}:bayes_rvm/evidence/student_t.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "student_t_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("student_t_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def as_engine(fit_student_t, **em):
    """The Student-t fit ``fit_student_t(Phi, T, *, solver, noise_nu, ..., options)`` of the
    module before, as an engine of the contract ``(problem, options, warm=None)``; ``em``
    overrides its EM settings."""

    def engine(problem, options, warm=None):
        options = problem.start_options(options, warm, solver=options.solver)
        fields = {f.name: f.default for f in dataclasses.fields(options)}
        names = ("noise_nu", "nu_init", "em_tol", "em_max_iter")
        settings = {name: getattr(options, name) for name in names} | em
        inner = dataclasses.replace(options, **{name: fields[name] for name in names})
        return fit_student_t(
            problem.design, problem.targets, solver=options.solver, options=inner, **settings
        )

    return engine


def tightened(engine, **em):
    """``engine`` with its options' EM settings overridden by ``em``."""
    return lambda problem, options, warm=None: engine(
        problem, dataclasses.replace(options, **em), warm
    )


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def run(engine, X, y, X_test, f_test, *, loo: bool) -> dict:
    """One fit (and its 10-fold refits) with ``engine`` as the Student-t engine."""
    engines.ENGINES[KEY] = engine
    model, wall, cpu = timed(lambda: RVR(gamma=GAMMA, likelihood="student_t").fit(X, y))
    row = {
        "iter": model.n_iter_,
        "conv": model.converged_,
        "wall": wall,
        "cpu": cpu,
        "L": model.log_evidence_,
        "nu": model.noise_nu_,
        "sd": float(np.sqrt(model.noise_variance_)),
        "rmse": float(np.sqrt(np.mean((model.predict(X_test) - f_test) ** 2))),
    }
    if loo:
        _, row["loo_wall"], row["loo_cpu"] = timed(
            lambda: model.refit_loo(n_folds=10, random_state=0)
        )
    return row


def show(label: str, rows: list[dict]) -> dict:
    med = {k: float(np.median([r[k] for r in rows])) for k in rows[0] if k != "conv"}
    r = rows[0]
    loo = ""
    if "loo_wall" in med:
        loo = f"  loo10 {med['loo_wall']:7.3f} s / cpu {med['loo_cpu']:7.3f} s"
    print(
        f"  {label:9s} iter {r['iter']:6d} {'conv' if r['conv'] else 'CAP ':4s}  fit "
        f"{med['wall']:7.3f} s / cpu {med['cpu']:7.3f} s{loo}  L {r['L']:.6f}  nu "
        f"{r['nu']:10.4f}  sd {r['sd']:.5f}  rmse {r['rmse']:.5f}"
    )
    return med


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed fits per method (median)")
    parser.add_argument("--before-ref", default="a495ae8", help="git revision of the EM step")
    parser.add_argument("--slow-iter", type=int, default=20000, help="cap of the slow EM")
    args = parser.parse_args()
    after = engines.ENGINES[KEY]
    old = load_before(args.before_ref)
    before = as_engine(old.fit_student_t)
    slow = as_engine(old.fit_student_t, em_tol=1e-10, em_max_iter=args.slow_iter)
    tight = tightened(after, em_tol=1e-10)
    for kind in ("gaussian", "t3"):
        X, y, X_test, f_test = data(kind)
        print(f"{kind}: N = {y.size}, load average {os.getloadavg()}")
        rows = {"before": [], "after": []}
        for _ in range(args.rounds):  # alternating, so that a load change hits both
            for name, engine in (("before", before), ("after", after)):
                rows[name].append(run(engine, X, y, X_test, f_test, loo=True))
        med = {name: show(name, r) for name, r in rows.items()}
        # Once each: the slow EM runs up to --slow-iter iterations.
        for name, engine in (("slow EM", slow), ("after 1e-10", tight)):
            med[name] = show(name, [run(engine, X, y, X_test, f_test, loo=False)])
        if kind == "gaussian":
            engines.ENGINES[KEY] = after
            gauss = RVR(gamma=GAMMA).fit(X, y)
            print(f"  Gaussian RVR (nu = inf): L {gauss.log_evidence_:.6f}")
        ratio = {k: med["after"][k] / med["before"][k] for k in ("wall", "cpu", "loo_wall")}
        tight_ratio = med["after 1e-10"]["cpu"] / med["slow EM"]["cpu"]
        print(
            f"  after / before: fit wall {ratio['wall']:.3f}, cpu {ratio['cpu']:.3f}; "
            f"loo10 wall {ratio['loo_wall']:.3f}; at em_tol=1e-10, cpu {tight_ratio:.3f}; "
            f"load average now {os.getloadavg()}"
        )
    engines.ENGINES[KEY] = after


if __name__ == "__main__":
    main()
