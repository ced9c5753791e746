"""Execute the notebooks in place, as the docs show them, and check what they show.

Usage (from the repository root)::

    .venv/bin/python scripts/execute_notebooks.py                 # every notebook, full settings
    .venv/bin/python scripts/execute_notebooks.py 02 05           # the ones whose names start so
    .venv/bin/python scripts/execute_notebooks.py --fast 02       # CI's reduced settings
    .venv/bin/python scripts/execute_notebooks.py --check         # only check the stored outputs
    .venv/bin/python scripts/execute_notebooks.py --fast --no-write --jobs 2   # what CI runs

Each notebook runs top to bottom in a fresh ``python3`` kernel that imports this checkout's
``bayes_rvm``, with its folder as the working directory and matplotlib's inline backend, so every
figure is stored as ``image/png``. The outputs are then normalised (no timing metadata, no widget
state, no absolute paths in warnings) and checked by :func:`problems`, the same check
``tests/test_notebooks.py`` runs on the committed notebooks. The notebook is written back only
when it executed without an error; the exit status is 1 when any notebook failed or has problems.
BLAS runs one thread per process unless ``OMP_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS`` say
otherwise: nutpie's chains already take the cores, and the timings the notebooks print are
measured that way.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"

#: A call that draws: ``az.plot_*``, ``plot_study``, ``plt.subplots``, ``ax.plot``, ...
PLOT_CALL = re.compile(r"\bplot_\w+\(|\bplt\.(?!close\b|rcParams\b|style\b)\w+|\.plot\(")
#: What must never reach a reader: machine paths and the noise of libraries.
FORBIDDEN = (
    "/work/",
    "/home/",
    "/root/",
    "/tmp/ipykernel",
    "site-packages",
    "ipywidgets",
    "warnings.warn(",
    "Sampling: [",
    "Estimated shape parameter of Pareto",
)
# "path/to/file.py:123: SomeWarning: message" -> "SomeWarning: message", and the echo of the
# source line that Python prints after it.
_WARNING_LOCATION = re.compile(r"^[^\n]*\.py:\d+: (\w*Warning): ", re.MULTILINE)
_WARNING_SOURCE = re.compile(r"^\s+warnings\.warn\([^\n]*\n", re.MULTILINE)


def kernel_env(*, fast: bool) -> dict[str, str]:
    """Environment of the kernel: this checkout's package, inline figures, chosen settings."""
    env = dict(os.environ)
    # the package of this checkout, not whichever one the environment has installed
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("MPLBACKEND", None)  # a non-inline backend (Agg) would keep the figures out
    env.pop("BAYES_RVM_NOTEBOOK_FAST", None)
    if fast:
        env["BAYES_RVM_NOTEBOOK_FAST"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"  # the debugger's note about frozen modules
    return env


def execute(path: Path, *, fast: bool = False, timeout: int = 3600) -> nbformat.NotebookNode:
    """Run one notebook in a fresh kernel and return it, executed and normalised."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute(env=kernel_env(fast=fast))
    return normalise(nb)


def _clean_text(text: str) -> str:
    text = _WARNING_LOCATION.sub(r"\1: ", text)
    text = _WARNING_SOURCE.sub("", text)
    return text.replace(str(ROOT) + os.sep, "")


def _blank(data: dict) -> bool:
    # rich's final render of a live display in a kernel: an empty <pre> whose text is empty
    pictures = [k for k in data if not k.startswith("text/")]
    return not pictures and not data.get("text/plain", "").strip()


def normalise(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Strip what depends on the machine or the session rather than on the notebook."""
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = {
        "display_name": "Python 3",
        "language": "python",
        "name": "python3",
    }
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.metadata.pop("execution", None)
        outputs = []
        for out in cell.outputs:
            if out.output_type == "stream":
                out.text = _clean_text(out.text)
                if not out.text:
                    continue
            elif out.output_type in ("display_data", "execute_result"):
                out.data.pop("application/vnd.jupyter.widget-view+json", None)
                for mime in ("text/plain", "text/html"):
                    if mime in out.data:
                        out.data[mime] = _clean_text(out.data[mime])
                if _blank(out.data):
                    continue
            outputs.append(out)
        cell.outputs = outputs
    return nb


def _output_text(out) -> str:
    if out.output_type == "stream":
        return out.text
    if out.output_type == "error":
        return "\n".join(out.traceback)
    return "\n".join(v for k, v in out.get("data", {}).items() if k.startswith("text/"))


def problems(nb: nbformat.NotebookNode) -> list[str]:
    """What a reader of the stored notebook would miss or should not see, one line each.

    Every code cell executed, in order from 1; no error; every cell that calls a plotting
    function carries its figure (``image/png``); no output shows a machine path or library
    noise (:data:`FORBIDDEN`).
    """
    found = []
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    counts = [c.get("execution_count") for _, c in code]
    if counts != list(range(1, len(code) + 1)):
        found.append(f"execution counts are {counts}, not 1..{len(code)} in order")
    for i, cell in code:
        where = f"cell {i} ({cell.source.splitlines()[0] if cell.source else ''!r})"
        kinds = {o.output_type for o in cell.outputs}
        if "error" in kinds:
            found.append(f"{where} raised an error")
        if PLOT_CALL.search(cell.source) and not any(
            "image/png" in o.get("data", {}) for o in cell.outputs
        ):
            found.append(f"{where} plots but has no image/png output")
        for out in cell.outputs:
            text = _output_text(out)
            for bad in FORBIDDEN:
                if bad in text:
                    found.append(f"{where} shows {bad!r}")
    return list(dict.fromkeys(found))


def _select(names: list[str]) -> list[Path]:
    every = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
    if not names:
        return every
    chosen = []
    for name in names:
        match = [p for p in every if p.name.startswith(name) or p == Path(name).resolve()]
        if not match:
            raise SystemExit(f"execute_notebooks: no notebook matches {name!r}")
        chosen += match
    return list(dict.fromkeys(chosen))


def run_one(path: Path, args: argparse.Namespace) -> tuple[bool, str]:
    """Execute (or read) one notebook, write it back unless told not to; (ok, report)."""
    start = time.perf_counter()
    if args.check:
        nb = nbformat.read(path, as_version=4)
    else:
        print(f"{path.name}: executing ...", file=sys.stderr, flush=True)
        try:
            nb = execute(path, fast=args.fast, timeout=args.timeout)
        except Exception as exc:  # report every notebook, then fail
            detail = str(exc).strip().splitlines()
            return False, f"{path.name}: FAILED, not written: {detail[-1] if detail else exc!r}"
        if not args.no_write:
            nbformat.write(nb, path)
    found = problems(nb)
    status = "ok" if not found else f"{len(found)} problem(s)"
    lines = [f"{path.name}: {status} ({time.perf_counter() - start:.0f} s)"]
    return not found, "\n".join(lines + [f"    {line}" for line in found])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="names or name prefixes (default: all)")
    parser.add_argument("--fast", action="store_true", help="CI's reduced settings")
    parser.add_argument("--check", action="store_true", help="only check the stored outputs")
    parser.add_argument("--no-write", action="store_true", help="execute and check, keep files")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks executed at once")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per cell")
    args = parser.parse_args(argv)
    paths = _select(args.notebooks)
    # Each notebook runs in its own kernel process: a pool of threads only waits on them.
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda p: run_one(p, args), paths))
    for _, report in results:
        print(report, flush=True)
    return 0 if all(ok for ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
