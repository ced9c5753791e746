"""The ``bayes-rvm`` command.

``bayes-rvm`` (or ``bayes-rvm fit``) with no data fits Tipping's sinc problem (100 points, noise
sd 0.1) by type-II maximum likelihood, prints the fit and writes a plot of the predictive band with
the relevance vectors marked, a text summary and the saved model (with its ArviZ DataTree) into
``--output``. ``--data file.csv --target column`` fits a table instead; ``--inference mcmc``
samples the hyperparameters by NUTS, ``--inference vi`` fits a variational approximation of the
same model. ``--likelihood poisson`` fits counts with a log link (with no data, counts of log rate
``1 + sin(x)`` on [-5, 5]); ``--likelihood student_t`` robust regression. A target of labels
(text) fits a classifier (:class:`~bayes_rvm.RVC`); ``--task classify`` asks for one on integer
labels. ``bayes-rvm predict model.nc --data new.csv`` writes a saved model's predictions with their
sd (a classifier's: the label and each class's probability) as CSV to stdout or ``--output``.
``bayes-rvm compare`` fits the default problem (or ``--data``) four ways (type-II and MCMC, ARD and
Student-t priors) and writes the elpd comparison table (type-II by leave-one-out refits, MCMC by
PSIS-LOO) and plots.
``bayes-rvm study config.toml [--scheduler ADDRESS]`` runs a model comparison study described in a
TOML file (:func:`bayes_rvm.studies.config.read_config`), locally or on a Dask cluster.

Every failure (a bad option, an unreadable table, a fit that cannot run) ends the command with one
line on stderr and exit status 1; ``--traceback`` shows the full Python traceback instead. Warnings
are one line each on stderr (``bayes-rvm: warning: ...``), and so are the progress bars (drawn only
when stderr is a terminal, never with ``--quiet``): stdout carries the results alone.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from bayes_rvm.basis.kernels import KERNELS
from bayes_rvm.datasets import make_sinc, sinc
from bayes_rvm.estimators.base import DEFAULT_GAMMA, WIDTH_RULES
from bayes_rvm.estimators.classifier import RVC
from bayes_rvm.estimators.regressor import RVR
from bayes_rvm.models.priors import DEFAULT_MCMC_NU, DEFAULT_NU
from bayes_rvm.studies.config import read_features, read_table

__all__ = ["main"]

#: Gaussian kernel width of the built-in sinc problem (rbf gamma = 1 / width**2).
SINC_WIDTH = 3.0
#: The values of ``--likelihood`` and ``--inference`` (RVR's ``likelihood`` and ``inference``).
LIKELIHOODS = ("gaussian", "poisson", "student_t")
INFERENCES = ("type2", "mcmc", "vi")
#: The values of ``--task``: "auto" classifies a target of text labels and regresses numbers.
TASKS = ("auto", "regress", "classify")
#: The subcommands; anything else on the command line is an option of ``fit``.
COMMANDS = ("fit", "predict", "compare", "study")


def count_rate(x: np.ndarray) -> np.ndarray:
    """The rate of the built-in count problem: ``exp(1 + sin(x))``."""
    return np.exp(1.0 + np.sin(x))


def _data_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, help="CSV file with a header row (default: sinc)")
    p.add_argument("--target", help="target column of --data (default: the last column)")
    p.add_argument(
        "--features",
        type=lambda text: [name.strip() for name in text.split(",")],
        help="feature columns of --data, comma-separated (default: every column but the target)",
    )


def _common(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("the built-in sinc problem (used when no --data is given)")
    g.add_argument("--n-samples", type=int, default=100, help="points (default 100)")
    g.add_argument("--noise", type=float, default=0.1, help="noise sd (default 0.1)")
    g.add_argument("--seed", type=int, default=0, help="random seed of the data (default 0)")
    m = p.add_argument_group("model")
    m.add_argument(
        "--kernel",
        default="rbf",
        choices=KERNELS,
        help="rbf, linear, poly, laplacian, sigmoid or cosine (default rbf)",
    )
    m.add_argument(
        "--gamma",
        default=None,
        help="kernel coefficient: a width rule ('evidence_shared', 'evidence', 'evidence_ard'), "
        f"'scale', 'auto' or a number (default 1/{SINC_WIDTH:g}^2, Tipping's width, for sinc; "
        f"the estimators' default '{DEFAULT_GAMMA}' for --data)",
    )
    m.add_argument(
        "--nu",
        type=float,
        default=None,
        help=f"Student-t degrees of freedom (default: {DEFAULT_NU:g} for type-II, "
        f"{DEFAULT_MCMC_NU:g} for MCMC)",
    )
    s = p.add_argument_group("MCMC (with --inference mcmc, and for compare)")
    s.add_argument("--draws", type=int, default=1000, help="draws per chain (default 1000)")
    s.add_argument(
        "--tune",
        type=int,
        default=None,
        help="tuning steps per chain (default: RVR's, 300)",
    )
    s.add_argument("--chains", type=int, default=4, help="chains (default 4)")
    s.add_argument(
        "--sampler",
        default="nutpie",
        choices=("nutpie", "numpyro", "pymc"),
        help="NUTS implementation (default nutpie)",
    )
    s.add_argument(
        "--mcmc-basis",
        default="auto",
        choices=("auto", "all", "relevant"),
        help="the basis functions sampled: every candidate, or the type-II relevance vectors "
        "(default auto: RVR's choice)",
    )
    s.add_argument(
        "--thin",
        type=int,
        default=None,
        help="run draws x k iterations per chain and keep every k-th, nearly independent "
        "(default: the sampler's, 1 for a design in memory)",
    )
    p.add_argument(
        "--output",
        type=Path,
        default=Path("rvm_output"),
        help="folder for the plots, summary, table and saved model (default rvm_output)",
    )
    p.add_argument("--no-plot", action="store_true", help="do not write plots")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    _traceback_option(p)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="bayes-rvm",
        description="Relevance Vector Machine regression by type-II maximum likelihood or MCMC.",
        epilog="With no command, 'fit' runs on the built-in sinc problem (Tipping 2001: 100 "
        f"equally spaced x in [-10, 10], noise sd 0.1, Gaussian kernel of width {SINC_WIDTH:g}).",
    )
    sub = p.add_subparsers(dest="command")
    fit = sub.add_parser(
        "fit",
        help="fit one model, print its summary, write plot and model",
        description="Fit one model (RVR, or RVC for class labels) and write summary.txt, the "
        "plot and model.nc (the estimator with its ArviZ DataTree).",
    )
    _data_options(fit)
    fit.add_argument(
        "--task",
        choices=TASKS,
        default="auto",
        help="regress (RVR) or classify (RVC); auto classifies a target of text labels and "
        "regresses numbers: integer class labels need --task classify (default auto)",
    )
    fit.add_argument(
        "--prior", choices=("ard", "student_t"), default="ard", help="weight prior (default ard)"
    )
    fit.add_argument(
        "--inference",
        choices=INFERENCES,
        default="type2",
        help="type-II maximum likelihood, NUTS over the hyperparameters, or variational "
        "inference on the same model (default type2)",
    )
    fit.add_argument(
        "--likelihood",
        choices=LIKELIHOODS,
        default="gaussian",
        help="Gaussian noise, Poisson counts (log link; the prediction is the rate) or "
        "Student-t noise (default gaussian)",
    )
    _common(fit)
    pred = sub.add_parser(
        "predict",
        help="predictions of a saved model (with their sd) for the rows of a CSV file",
        description="Load a model saved by 'bayes-rvm fit' (or bayes_rvm.save_model) and write "
        "its predictions for the rows of --data as CSV: 'prediction' and 'sd' (the predictive "
        "sd; for counts the rate and its sd) for a regressor, the label and one probability "
        "column per class for a classifier. The model's feature columns are taken by name; "
        "other columns (the target, an identifier) are ignored.",
    )
    pred.add_argument("model", type=Path, help="the saved model (e.g. rvm_output/model.nc)")
    pred.add_argument("--data", type=Path, required=True, help="CSV file with a header row")
    pred.add_argument(
        "--output", type=Path, default=None, help="CSV file to write (default: stdout)"
    )
    _traceback_option(pred)
    cmp = sub.add_parser(
        "compare",
        help="type-II vs MCMC, ARD vs Student-t, by elpd (type-II: LOO refits; MCMC: PSIS-LOO)",
        description="Fit the sinc problem (or --data) with both priors by type-II and by "
        "MCMC and write ArviZ's comparison table (compare.csv) and plots.",
    )
    _data_options(cmp)
    _common(cmp)
    study = sub.add_parser(
        "study",
        help="a grid of models x data sets from a TOML file, locally or on a Dask cluster",
        description="Fit every model of a TOML study file on every data set (see "
        "bayes_rvm.studies.config.read_config), print a line per finished fit, and write the table "
        "(study.csv) and the elpd comparison plot (study.png) into the file's output folder. "
        "With a store in the file, an interrupted study resumes where it stopped.",
    )
    study.add_argument("config", type=Path, help="the study's TOML file")
    study.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="address of a running Dask scheduler (e.g. tcp://10.0.0.5:8786); default: "
        "local processes",
    )
    study.add_argument("--no-plot", action="store_true", help="do not write the plot")
    _traceback_option(study)
    return p


class _Parser(argparse.ArgumentParser):
    """argparse with the command's failure convention: one line on stderr, exit status 1."""

    def error(self, message: str):
        self.exit(1, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _traceback_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--traceback", action="store_true", help="on failure, show the full Python traceback"
    )


_GAMMA_WORDS = (*WIDTH_RULES, "scale", "auto")


def _gamma(value: str | None, default):
    if value is None:
        return default
    if value in _GAMMA_WORDS:
        return value
    try:
        gamma = float(value)
    except ValueError:
        gamma = float("nan")
    if not np.isfinite(gamma) or gamma <= 0:
        raise SystemExit(
            f"bayes-rvm: --gamma must be one of {', '.join(map(repr, _GAMMA_WORDS))} or a "
            f"positive number, got {value!r}"
        )
    return gamma


def _load_table(path: Path, target: str | None, task: str, features: list[str] | None = None):
    """Features (a DataFrame, so that the model keeps their names), target and feature names.

    The target is float for a regression and the labels as written for a classification;
    ``task="auto"`` classifies a target with any non-numeric cell.
    """
    import pandas as pd

    if not path.is_file():
        raise SystemExit(f"bayes-rvm: --data {path} does not exist")
    try:
        X, y, names = read_table(
            path,
            target,
            features=features,
            numeric=False,
            target_flag="--target",
            features_flag="--features",
        )
    except ValueError as exc:
        raise SystemExit(f"bayes-rvm: {exc}") from None
    numbers = pd.to_numeric(pd.Series(y), errors="coerce")
    labels = numbers.isna().to_numpy()
    if task == "auto":
        task = "classify" if labels.any() else "regress"
    if task == "regress":
        if labels.any():
            row = int(np.flatnonzero(labels)[0])
            column = repr(target) if target else "(the last column)"
            raise SystemExit(
                f"bayes-rvm: the target {column} of {path} holds labels, not numbers "
                f"({y[row]!r} at line {row + 2}): --task classify fits a classifier "
                "(the default --task auto does so for text labels)"
            )
        y = numbers.to_numpy(float)
        values = np.unique(y)
        if values.size == 1:
            warnings.warn(
                f"the target is constant ({values[0]:g} in every row): the fit is that constant, "
                "with a noise estimate at its floor",
                UserWarning,
                stacklevel=2,
            )
        elif values.size == 2 and np.all(values == np.round(values)):
            warnings.warn(
                f"the target takes only the values {values.tolist()}: fitting a regression; "
                "--task classify fits a classifier",
                UserWarning,
                stacklevel=2,
            )
    return pd.DataFrame(X, columns=names), y, names, task


def _problem(args):
    """Training data, optional test data with the truth, the default kernel coefficient, task.

    The task is "regress" or "classify" (``--task``, or for ``--task auto`` the target's type).
    """
    task = getattr(args, "task", "auto")
    if getattr(args, "data", None) is not None:
        X, y, names, task = _load_table(args.data, args.target, task, args.features)
        label = f"{args.data} ({len(y)} rows, features {names})"
        return X, y, None, label, DEFAULT_GAMMA, task
    if task == "classify":
        raise SystemExit("bayes-rvm: --task classify needs --data (a CSV file with class labels)")
    given = [flag for flag in ("target", "features") if getattr(args, flag, None) is not None]
    if given:
        raise SystemExit(f"bayes-rvm: --{given[0]} needs --data (the CSV file it names columns of)")
    if args.n_samples < 2:
        raise SystemExit("bayes-rvm: --n-samples must be at least 2")
    if getattr(args, "likelihood", "gaussian") == "poisson":
        X = np.linspace(-5.0, 5.0, args.n_samples)[:, None]
        y = np.random.default_rng(args.seed).poisson(count_rate(X[:, 0])).astype(np.float64)
        label = f"counts of log rate 1 + sin(x) (N={args.n_samples})"
        return X, y, np.linspace(-5.0, 5.0, 1000)[:, None], label, DEFAULT_GAMMA, "regress"
    X, y = make_sinc(args.n_samples, noise=args.noise, random_state=args.seed, shuffle=False)
    label = f"sinc (N={args.n_samples}, noise sd={args.noise:g})"
    return X, y, np.linspace(-10, 10, 1000)[:, None], label, 1.0 / SINC_WIDTH**2, "regress"


def _mcmc_params(args) -> dict:
    tune = {} if args.tune is None else {"tune": args.tune}
    config = {
        "draws": args.draws,
        **tune,
        "chains": args.chains,
        "sampler": args.sampler,
        "mcmc_basis": args.mcmc_basis,
    }
    return {"sampler_config": config, "random_state": args.seed}


def _prior_params(args, prior: str | None = None) -> dict | None:
    """``prior_params`` of a fit under ``prior`` (default: ``--prior``). ``--nu`` is the
    Student-t prior's: refused beside another ``--prior``, left out of ``compare``'s ARD fits."""
    if args.nu is None:
        return None
    if prior is None:
        prior = args.prior
        if prior != "student_t":
            raise SystemExit(
                "bayes-rvm: --nu sets the Student-t prior's degrees of freedom: give --prior "
                "student_t with it"
            )
    return {"nu": args.nu} if prior == "student_t" else None


def _fit_model(model: RVR, X, y, args) -> RVR:
    """``model.fit`` with its progress bars on stderr, so that ``> file`` keeps the results only.

    The bars are rich's (PyMC's sampling bar among them), which write to whatever ``sys.stdout``
    is when they draw; they are shown where stderr is a terminal (``progressbar="auto"``).
    """
    from bayes_rvm.progress import no_auto_progress

    mcmc = model.inference == "mcmc"
    options = {"progressbar": False} if args.quiet and mcmc else {}
    if mcmc and args.thin is not None:
        options["thin"] = args.thin
    quiet = no_auto_progress() if args.quiet else contextlib.nullcontext()
    with contextlib.redirect_stdout(sys.stderr), quiet:
        return model.fit(X, y, **options)


def _n_sampled_basis(model: RVR) -> int:
    """Basis functions the MCMC fit sampled (all candidates, or the type-II relevant ones)."""
    return model.idata_["posterior"]["w"].sizes["basis"]


def _write_plot(model, X, y, truth, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bayes_rvm.plots import plot_regression, predicts_rate

    if X.shape[1] == 1:
        ax = plot_regression(model, X, y, truth=truth)
    else:
        _, ax = plt.subplots(figsize=(5.5, 5))
        mean, std = model.predict(X, return_std=True)
        what = "rate" if predicts_rate(model) else "prediction"
        ax.errorbar(y, mean, yerr=2 * std, fmt=".", alpha=0.6, label=f"{what} ± 2 sd")
        lims = [min(y.min(), mean.min()), max(y.max(), mean.max())]
        ax.plot(lims, lims, "k--", lw=1)
        ax.set(xlabel="observed", ylabel="predicted")
        ax.legend()
    ax.set_title(title)
    ax.figure.savefig(path, dpi=120, bbox_inches="tight", metadata={"Title": title})
    plt.close(ax.figure)


def _sampled_report(model: RVR, n_obs: int) -> list[str]:
    """The MCMC or VI fit itself: draws, basis, posterior of the noise and weights, LOO and the
    engine's diagnostics."""
    import json

    from bayes_rvm.posterior.comparison import pareto_k_high
    from bayes_rvm.studies.runner import loo_columns

    dt = model.idata_
    post = dt["posterior"].dataset
    w = post["w"]
    mean = w.mean(("chain", "draw")).values
    sd = w.std(("chain", "draw")).values
    with warnings.catch_warnings():
        # ArviZ's warning of large Pareto k would only repeat the count reported below
        warnings.filterwarnings("ignore", "Estimated shape parameter of Pareto", UserWarning)
        loo = loo_columns(dt)
    n_high = int(loo["n_pareto_k_high"])
    k_high = pareto_k_high(post.sizes["chain"] * post.sizes["draw"])
    reliability = (
        f"{n_high} of {n_obs} points with Pareto k > {k_high:.3f}: not reliable"
        if n_high
        else f"every Pareto k <= {k_high:.3f}"
    )
    basis = f"{_n_sampled_basis(model)} basis functions (mcmc_basis={model._mcmc_basis()!r})"
    if dt.attrs["method"] == "vi":
        loss = dt["variational"]["loss"].values
        state = "converged" if dt.attrs["converged"] else "NOT converged"
        head = [
            f"VI ({dt.attrs['vi_method']}): {post.sizes['draw']} draws of the approximation over "
            f"{basis}",
            f"  optimisation      : {state} in {dt.attrs['n_iter']} iterations "
            f"(final ELBO {-float(loss[-1]):.2f})",
        ]
        diagnostics = []
    else:
        diag = json.loads(dt.attrs["diagnostics"])
        head = [
            f"MCMC ({dt.attrs['sampler']}): {post.sizes['chain']} chains x "
            f"{post.sizes['draw']} draws over {basis}"
        ]
        rhat = (
            f"{diag['max_rhat']:.4f} (hyperparameters)"
            if post.sizes["chain"] > 1
            else "not computed: it needs two chains or more (--chains)"
        )
        diagnostics = [
            f"  divergences       : {diag['divergences']}",
            f"  max R-hat         : {rhat}",
            f"  min bulk ESS      : {diag['min_ess_bulk']:.0f}",
            f"  min tail ESS      : {diag['min_ess_tail']:.0f}",
        ]
    return [
        *head,
        *(
            [
                f"  noise sd          : {float(post['sigma'].mean()):.4f} ± "
                f"{float(post['sigma'].std()):.4f} (posterior)"
            ]
            if "sigma" in post
            else []
        ),
        # Weights whose posterior keeps clear of zero. Over every candidate of a redundant
        # basis the effect is shared among near-duplicate columns, so few or none stand alone:
        # the predictions, not this count, say how well the fit does.
        f"  weights           : {mean.size} sampled; {int(np.sum(np.abs(mean) > 2 * sd))} "
        "individually clear of zero (|mean| > 2 posterior sd); neighbouring basis functions "
        "share the fit",
        f"  LOO elpd          : {loo['elpd_loo']:.2f} ± {loo['elpd_loo_se']:.2f} ({reliability})",
        *diagnostics,
        "",
    ]


def _type2_report(model: RVR, X, y, args, simulated: bool) -> list[str]:
    """The type-II fit: relevance vectors, weights, noise (not for counts), evidence."""
    bias = "kept" if model.bias and model.active_[-1] == model.basis_.n_centres_ else "pruned"
    lines = [f"  relevance vectors : {model.n_relevance_vectors_} of {len(y)}  (bias {bias})"]
    if X.shape[1] == 1:
        lines.append(
            f"  at x              : {np.array2string(model.relevance_vectors_[:, 0], precision=3)}"
        )
    lines.append(f"  weights           : {np.array2string(model.coef_, precision=3)}")
    if args.likelihood != "poisson":
        lines.append(
            f"  noise sd          : {np.sqrt(model.noise_variance_):.4f}"
            + (f" (true {args.noise:g})" if simulated else "")
        )
    return [
        *lines,
        f"  log evidence      : {model.log_evidence_:.3f}",
        f"  iterations        : {model.n_iter_} "
        f"({'converged' if model.converged_ else 'NOT converged'}: {model.fit_.reason})",
    ]


def _classifier(args, gamma) -> RVC:
    """The RVC of ``fit --task classify``, refusing the options that belong to regressions."""
    if args.likelihood != "gaussian":
        raise SystemExit(
            f"bayes-rvm: --likelihood {args.likelihood} is for regression; a classifier's "
            "likelihood is Bernoulli (two classes) or categorical"
        )
    if args.inference == "vi":
        raise SystemExit(
            "bayes-rvm: --inference vi fits regressions only; classify by type2 or mcmc"
        )
    params = {
        "kernel": args.kernel,
        "gamma": gamma,
        "prior": args.prior,
        "prior_params": _prior_params(args),
        "inference": args.inference,
    }
    if args.inference == "mcmc":
        params.update(_mcmc_params(args))
    return RVC(**params)


def _classify_report(model: RVC, X, y) -> list[str]:
    """A classifier's fit: classes, relevance vectors, evidence, training accuracy, log loss."""
    from sklearn.metrics import log_loss

    classes = ", ".join(map(str, model.classes_))
    proba = model.predict_proba(X)
    lines = [
        f"  classes           : {classes}",
        f"  relevance vectors : {model.n_relevance_vectors_} of {len(y)}",
    ]
    if getattr(model, "log_evidence_", None) is not None:
        lines.append(f"  log evidence      : {float(np.sum(model.log_evidence_)):.3f}")
    return [
        *lines,
        f"  training accuracy : {model.score(X, y):.4f}",
        f"  training log loss : {log_loss(y, proba, labels=model.classes_):.4f}",
    ]


def _write_class_plot(model: RVC, X, y, path: Path, title: str) -> None:
    """Two features: each class's points over the probability of the last class."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    Xv = np.asarray(X, dtype=np.float64)
    lo, hi = Xv.min(axis=0), Xv.max(axis=0)
    pad = 0.05 * (hi - lo)
    g0, g1 = np.meshgrid(*(np.linspace(lo[j] - pad[j], hi[j] + pad[j], 150) for j in (0, 1)))
    grid = np.c_[g0.ravel(), g1.ravel()]
    if hasattr(X, "columns"):
        import pandas as pd

        grid = pd.DataFrame(grid, columns=X.columns)
    proba = model.predict_proba(grid)[:, -1].reshape(g0.shape)
    fig, ax = plt.subplots(figsize=(6, 5))
    cs = ax.contourf(g0, g1, proba, levels=np.linspace(0, 1, 11), cmap="RdBu_r", alpha=0.6)
    fig.colorbar(cs, ax=ax, label=f"P(class {model.classes_[-1]})")
    for k, c in enumerate(model.classes_):
        sel = np.asarray(y) == c
        ax.plot(Xv[sel, 0], Xv[sel, 1], "os^vD"[k % 5], ms=4, mec="k", mew=0.4, label=str(c))
    names = list(X.columns) if hasattr(X, "columns") else ["x0", "x1"]
    ax.set(xlabel=names[0], ylabel=names[1], title=title)
    ax.legend(fontsize="small", title="class")
    fig.savefig(path, dpi=120, bbox_inches="tight", metadata={"Title": title})
    plt.close(fig)


#: The options of ``fit`` that only MCMC reads, and those that only shape the built-in sinc data.
_MCMC_ONLY = ("--draws", "--tune", "--chains", "--sampler", "--mcmc-basis", "--thin")
_SINC_ONLY = ("--n-samples", "--noise")


def _given(args, flag: str) -> bool:
    """Whether ``flag`` was on the command line, whole or abbreviated as argparse accepts."""
    return any(flag.startswith(token) and len(token) > 2 for token in args.given)


def _check_fit_options(args) -> None:
    """Options given where they do nothing are refused (they were ignored)."""
    unused = [f for f in _MCMC_ONLY if _given(args, f)] if args.inference != "mcmc" else []
    if unused:
        raise SystemExit(
            f"bayes-rvm: {', '.join(unused)} set the sampler of --inference mcmc; this fit is "
            f"--inference {args.inference}"
        )
    given = [f for f in _SINC_ONLY if _given(args, f)]
    if given and getattr(args, "data", None) is not None:
        raise SystemExit(
            f"bayes-rvm: {', '.join(given)} shape the built-in sinc data; with --data they do "
            "not apply"
        )


def _fit(args) -> int:
    from bayes_rvm.estimators.saving import save_model

    _check_fit_options(args)
    X, y, X_test, label, default_gamma, task = _problem(args)
    if task == "classify":
        return _fit_classifier(args, X, y, label, _gamma(args.gamma, default_gamma))
    params = {
        "kernel": args.kernel,
        "gamma": _gamma(args.gamma, default_gamma),
        "prior": args.prior,
        "prior_params": _prior_params(args),
        "inference": args.inference,
        "likelihood": args.likelihood,
    }
    if args.inference == "mcmc":
        params.update(_mcmc_params(args))
    elif args.inference == "vi":
        params["random_state"] = args.seed
    model = RVR(**params)
    start = time.perf_counter()
    _fit_model(model, X, y, args)
    elapsed = time.perf_counter() - start

    mcmc = args.inference == "mcmc"
    lines = [
        f"bayes_rvm: relevance vector regression on {label}",
        f"  kernel={args.kernel}, prior={args.prior}, inference={args.inference}, "
        f"likelihood={args.likelihood}",
    ]
    counts = args.likelihood == "poisson"
    truth = None if X_test is None else (count_rate if counts else sinc)
    if args.inference != "type2":
        lines += _sampled_report(model, len(y))
        lines.append(
            "type-II fit (the sampler's seed):" if mcmc else "type-II fit of the same model:"
        )
    lines += _type2_report(model, X, y, args, X_test is not None)
    if args.inference != "type2":
        engine = "MCMC" if mcmc else "VI"
        lines += ["", f"predictions (posterior predictive mean of the {engine} fit):"]
    lines.append(f"  training RMSE     : {np.sqrt(np.mean((model.predict(X) - y) ** 2)):.4f}")
    if counts:
        lines.append(f"  D^2 (deviance)    : {model.score(X, y):.4f} (Poisson deviance explained)")
    if X_test is not None:
        rmse = float(np.sqrt(np.mean((model.predict(X_test) - truth(X_test[:, 0])) ** 2)))
        what = "the true rate" if counts else "the noise-free sinc"
        lines.append(f"  test RMSE         : {rmse:.4f} against {what} on 1000 points")
    lines.append(f"  fit time          : {elapsed:.3f} s")

    args.output.mkdir(parents=True, exist_ok=True)
    summary = args.output / "summary.txt"
    summary.write_text("\n".join(lines) + "\n")
    model.idata_  # noqa: B018 - build the type-II DataTree so that it is saved with the model
    saved = save_model(model, args.output / "model.nc")
    written = [summary, saved]
    if not args.no_plot:
        plot = args.output / "fit.png"
        _write_plot(
            model,
            X,
            y,
            truth,
            plot,
            f"RVR by MCMC ({args.sampler}): {model.idata_['posterior'].sizes['chain']} chains x "
            f"{model.idata_['posterior'].sizes['draw']} draws over {_n_sampled_basis(model)} "
            "basis functions"
            if mcmc
            else f"RVR (type-II): {model.n_relevance_vectors_} relevance vectors",
        )
        written.append(plot)
    lines.append("  wrote             : " + ", ".join(str(p) for p in written))
    print("\n".join(lines))
    return 0


def _fit_classifier(args, X, y, label: str, gamma) -> int:
    from bayes_rvm.estimators.saving import save_model

    model = _classifier(args, gamma)
    start = time.perf_counter()
    _fit_model(model, X, y, args)
    elapsed = time.perf_counter() - start
    mcmc = args.inference == "mcmc"
    lines = [
        f"bayes_rvm: relevance vector classification on {label}",
        f"  kernel={args.kernel}, prior={args.prior}, inference={args.inference}",
    ]
    if mcmc:
        lines += _sampled_report(model, len(y))
        lines.append("type-II fit (the sampler's seed) and predictions of the MCMC fit:")
    lines += _classify_report(model, X, y)
    lines.append(f"  fit time          : {elapsed:.3f} s")
    args.output.mkdir(parents=True, exist_ok=True)
    summary = args.output / "summary.txt"
    summary.write_text("\n".join(lines) + "\n")
    model.idata_  # noqa: B018 - build the type-II DataTree so that it is saved with the model
    written = [summary, save_model(model, args.output / "model.nc")]
    if not args.no_plot and X.shape[1] == 2:
        written.append(args.output / "fit.png")
        title = (
            f"RVC ({'MCMC' if mcmc else 'type-II'}): {model.n_relevance_vectors_} relevance vectors"
        )
        _write_class_plot(model, X, y, written[-1], title)
    lines.append("  wrote             : " + ", ".join(str(p) for p in written))
    print("\n".join(lines))
    return 0


def _predict(args) -> int:
    """A saved model's predictions for the rows of ``--data``, as CSV."""
    import pandas as pd

    from bayes_rvm.estimators.saving import load_model

    if not args.model.exists():
        raise SystemExit(f"bayes-rvm: the model {args.model} does not exist")
    model = load_model(args.model)
    names = getattr(model, "feature_names_in_", None)
    try:
        X = read_features(args.data, None if names is None else list(names), model.n_features_in_)
    except ValueError as exc:
        raise SystemExit(f"bayes-rvm: {exc}") from None
    if not hasattr(model, "feature_names_in_"):
        X = X.to_numpy()
    if hasattr(model, "predict_proba"):
        proba = model.predict_proba(X)
        table = pd.DataFrame(proba, columns=[f"p_{c}" for c in model.classes_])
        table.insert(0, "prediction", model.predict(X))
    else:
        mean, sd = model.predict(X, return_std=True)
        if mean.ndim == 1:
            table = pd.DataFrame({"prediction": mean, "sd": sd})
        else:
            outputs = range(mean.shape[1])
            table = pd.DataFrame(
                {
                    **{f"prediction_{j}": mean[:, j] for j in outputs},
                    **{f"sd_{j}": sd[:, j] for j in outputs},
                }
            )
    target = sys.stdout if args.output is None else args.output
    table.to_csv(target, index=False, float_format="%.8g")
    if args.output is not None:
        print(f"wrote {len(table)} predictions to {args.output}", file=sys.stderr)
    return 0


def _compare(args) -> int:
    import arviz as az
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bayes_rvm.posterior.comparison import compare

    X, y, _, label, default_gamma, task = _problem(args)
    if task == "classify":
        raise SystemExit(
            "bayes-rvm: compare fits regressions; the target of --data holds class labels "
            "(type-II classifiers have no leave-one-out refits to compare by)"
        )
    gamma = _gamma(args.gamma, default_gamma)
    fits = {}
    for prior in ("ard", "student_t"):
        for inference in ("type2", "mcmc"):
            name = f"{'type-II' if inference == 'type2' else 'MCMC'} {prior}"
            extra = _mcmc_params(args) if inference == "mcmc" else {}
            print(f"fitting {name} ...", file=sys.stderr, flush=True)  # progress, not results
            model = RVR(
                kernel=args.kernel,
                gamma=gamma,
                prior=prior,
                prior_params=_prior_params(args, prior),
                inference=inference,
                **extra,
            )
            _fit_model(model, X, y, args)
            fits[name] = model.idata_
    table = compare(fits)
    args.output.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.output / "compare.csv")
    print(f"elpd comparison on {label} (type-II by leave-one-out refits, MCMC by PSIS-LOO):")
    print(_table_text(table))
    written = [args.output / "compare.csv"]
    if not args.no_plot:
        pc = az.plot_compare(table)
        pc.savefig(args.output / "compare.png")
        noise = {k: v["posterior"]["sigma"].values.ravel() for k, v in fits.items()}
        fig, ax = plt.subplots(figsize=(7, 4))
        for k, v in noise.items():
            if "MCMC" in k:
                ax.hist(v, bins=40, alpha=0.5, density=True, label=f"{k} posterior")
            else:
                ax.axvline(v[0], ls="--", color="k" if "ard" in k else "C3", label=f"{k} estimate")
        ax.set(xlabel="noise sd", ylabel="density")
        ax.legend(fontsize="small")
        fig.savefig(args.output / "noise.png", dpi=120, bbox_inches="tight")
        plt.close("all")
        written += [args.output / "compare.png", args.output / "noise.png"]
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def _study(args) -> int:
    import pandas as pd

    from bayes_rvm.studies.config import read_config
    from bayes_rvm.studies.runner import run_study

    try:
        config = read_config(args.config)
        # Made before the first fit: a folder that cannot be made fails now, not after them.
        config.output.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"bayes-rvm: {exc}") from None
    client = None
    if args.scheduler:
        from bayes_rvm._optional import require

        try:
            Client = require("distributed", "dask", "--scheduler").Client
        except ImportError as exc:
            raise SystemExit(f"bayes-rvm: {exc}") from None
        client = Client(args.scheduler)
    try:
        table = run_study(
            config.models,
            config.datasets,
            client=client,
            store=config.store,
            n_jobs=config.n_jobs,
            random_state=config.random_state,
            progress=True,
        )
    finally:
        if client is not None:
            client.close()
    written = [config.output / "study.csv"]
    table.to_csv(written[0], index=False)
    shown = ["dataset", "model", "elpd_loo", "elpd_loo_se", "n_pareto_k_high"]
    shown += [c for c in ("test_rmse", "test_error_rate") if table[c].notna().any()]
    shown += ["converged"] if table["converged"].eq(False).any() else []
    with pd.option_context("display.max_rows", 500):
        print(_table_text(table[shown].set_index(["dataset", "model"])))
    if not args.no_plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from bayes_rvm.plots import plot_study

        fig = plot_study(table)
        written.append(config.output / "study.png")
        fig.savefig(written[-1], dpi=120, bbox_inches="tight")
        plt.close(fig)
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def _table_text(table, digits: int = 3) -> str:
    """A table as text for a terminal: numbers rounded to ``digits`` decimals, never wrapped."""
    import pandas as pd

    shown = table.copy()
    for column in shown.columns:
        if pd.api.types.is_float_dtype(shown[column]):
            # -0.000 and 1.7e-16 both print as 0.000: a weight of zero is zero.
            shown[column] = shown[column].round(digits) + 0.0
    with pd.option_context("display.width", 10_000, "display.max_columns", None):
        return shown.to_string(float_format=f"{{:.{digits}f}}".format)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    # One line per warning, without the source location: a user of the command has no use for
    # the path of the library (or of this script) that raised it.
    text = " ".join(str(message).split())
    if "sampler_config=" in text or "thin=" in text:
        # The remedies are written for Python; these are the same settings here.
        text += (
            " (On the command line: sampler_config's draws, tune, chains and mcmc_basis are "
            "--draws, --tune, --chains and --mcmc-basis; thin=k is --thin k.)"
        )
    if "likelihood_params=" in text:
        text += " (The command line has no flag for a fixed noise: fit RVR in Python for that.)"
    print(f"bayes-rvm: warning: {text}", file=sys.stderr if file is None else file, flush=True)


def _stdout_closed() -> bool:
    """Whether standard output is a pipe whose reader has gone (a broken pipe of another
    connection, a sampler's or a cluster's, is an error to report)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # captured or replaced: not a pipe of ours
        return False
    if not hasattr(select, "poll"):  # Windows: report it as any other error
        return False
    poll = select.poll()
    poll.register(fd, select.POLLOUT)
    return any(event & (select.POLLERR | select.POLLHUP) for _, event in poll.poll(0))


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help"):
        argv = ["fit", *argv]
    args = _parser().parse_args(argv)
    args.given = {token.split("=")[0] for token in argv if token.startswith("--")}
    command = {"predict": _predict, "compare": _compare, "study": _study}.get(args.command, _fit)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            return command(args)
    except SystemExit as exc:
        if isinstance(exc.code, str):  # our own messages: keep them on one line
            raise SystemExit(" ".join(exc.code.split())) from None
        raise
    except KeyboardInterrupt:
        if args.traceback:
            raise
        print("bayes-rvm: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.traceback:
            raise
        if isinstance(exc, BrokenPipeError) and _stdout_closed():
            # The reader of the output left (``bayes-rvm predict ... | head``): stop quietly,
            # with the status of a process ended by SIGPIPE, as other Unix tools do. Standard
            # output goes to /dev/null so that the interpreter's last flush does not fail again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141  # 128 + SIGPIPE
        # The notes say where (a study's "study fit of model 'x' on data set 'y'").
        text = " ".join([str(exc), *getattr(exc, "__notes__", ())])
        detail = " ".join(text.split()) or type(exc).__name__
        raise SystemExit(f"bayes-rvm: error: {detail} (--traceback shows where)") from None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
