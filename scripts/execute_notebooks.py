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
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
from jupyter_client.manager import KernelManager
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
    """Run one notebook in a fresh kernel and return it, executed and normalised.

    The kernel talks over Unix sockets in a folder of its own: two kernels started at once on
    TCP could pick the same free port, and the one that lost the race left its client waiting
    (a CI run's heartbeat "Address already in use").
    """
    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory(prefix="nb-kernel-") as sockets:
        km = KernelManager(kernel_name="python3", transport="ipc", ip=f"{sockets}/kernel")
        client = NotebookClient(
            nb,
            km=km,
            timeout=timeout,
            record_timing=False,
            resources={"metadata": {"path": str(path.parent)}},
        )
        try:
            client.execute(env=kernel_env(fast=fast))
        finally:
            # A kernel manager given to the client is the caller's to stop: else every kernel
            # would live, with its notebook's memory, until the script exits.
            if km.has_kernel:
                km.shutdown_kernel(now=True)
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


#: A number in prose: an integer or a decimal (thousands may be grouped by spaces), not part of a
#: word, a version or a path; a percentage with its sign.
_PROSE_NUMBER = re.compile(
    r"(?<![\w.^/])(\d{1,3}(?:[ \u202f]\d{3})+|\d+(?:\.\d+)?(?:e[+-]?\d+)?)(?![\w.]*\d)(%?)"
)
#: A number in an output or in code, as Python prints it.
_OUTPUT_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[+-]?\d+)?")
#: What prose numbers are not read in: code spans, maths, link targets, comments.
_NOT_PROSE = re.compile(r"`[^`]*`|\$\$.*?\$\$|\$[^$]*\$|\]\([^)]*\)|<!--.*?-->", re.DOTALL)
#: Where a notebook lists the numbers of its prose that come from elsewhere, with the reason.
PROSE_NUMBERS_KEY = "prose_numbers_not_from_outputs"


def _quoted(text: str, number: str, percent: bool) -> bool:
    """Whether ``text`` shows a number that reads as ``number`` to the digits it is quoted to."""
    value = float(number)
    mantissa, _, exponent = number.partition("e")
    decimals = len(mantissa.partition(".")[2]) - int(exponent or 0)
    half = 0.5 * 10.0**-decimals * (1 + 1e-9)
    for token in _OUTPUT_NUMBER.findall(text):
        shown = float(token)
        if abs(shown - value) <= half or (percent and abs(100 * shown - value) <= half):
            return True
    return False


def prose_numbers(nb: nbformat.NotebookNode) -> list[str]:
    """Numbers a notebook's markdown quotes that its outputs and code do not show, one line each.

    The prose of a notebook quotes its results; when a re-execution changes them, the prose
    must follow. A number in the markdown passes when an output shows it (to the digits quoted:
    ``1.57`` for an output ``1.572``, ``35%`` for ``0.35`` or ``35.2%``), when the code holds it
    (a setting such as ``draws=1000``) or when it is a year (1900-2099, as in a citation). Any
    other number (a published figure, a difference of two outputs, a threshold) is listed in
    the notebook's metadata under :data:`PROSE_NUMBERS_KEY`, mapped to where it comes from; an
    entry that the prose no longer quotes is reported too.
    """
    outputs = "\n".join(
        _output_text(out) for c in nb.cells if c.cell_type == "code" for out in c.outputs
    )
    code = set(
        _OUTPUT_NUMBER.findall("\n".join(c.source for c in nb.cells if c.cell_type == "code"))
    )
    declared = dict(nb.metadata.get(PROSE_NUMBERS_KEY, {}))
    found, quoted = [], set()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        prose = _NOT_PROSE.sub(" ", cell.source)
        for match in _PROSE_NUMBER.finditer(prose):
            number = re.sub(r"[ \u202f]", "", match.group(1))
            quoted.add(number)
            if (
                number in declared
                or number in code
                or (number.isdigit() and len(number) == 4 and 1900 <= int(number) < 2100)
                or _quoted(outputs, number, bool(match.group(2)))
            ):
                continue
            context = prose[max(0, match.start() - 30) : match.end() + 10].replace("\n", " ")
            found.append(
                f"markdown cell {i} quotes {number}, which no output shows (...{context}...); "
                f"correct it, or list it under metadata {PROSE_NUMBERS_KEY!r} with its source"
            )
    for number in sorted(set(declared) - quoted):
        found.append(
            f"metadata {PROSE_NUMBERS_KEY!r} lists {number}, which the prose no longer quotes"
        )
    return found


def problems(nb: nbformat.NotebookNode, *, prose: bool = True) -> list[str]:
    """What a reader of the stored notebook would miss or should not see, one line each.

    Every code cell executed, in order from 1; no error; every cell that calls a plotting
    function carries its figure (``image/png``); no output shows a machine path or library
    noise (:data:`FORBIDDEN`); with ``prose``, no number in the markdown that the outputs do not
    show (:func:`prose_numbers`; off for the reduced settings of ``--fast``, whose outputs are
    not the ones the prose describes).
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
    if prose:
        found += prose_numbers(nb)
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
    found = problems(nb, prose=not args.fast)
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
