"""Every ```python block of the README and the docs runs as written.

A page's blocks run in order in one namespace (as a reader runs them, in a notebook or pasted into
one script), in a fresh interpreter in a scratch folder. The large-data examples run with their
sizes cut down (the substitutions below, each of which must still match its page); blocks that
need outside infrastructure carry the comment ``<!-- not run by the tests: why -->`` on the line
above. The Dask example of the large-data page also runs on its own as a script, which needs its
``if __name__ == "__main__":`` guard.
"""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))]
NOT_RUN = "<!-- not run by the tests:"
#: Sizes cut down for the test, per page: (as written, as run).
SMALLER = {
    "docs/large_data.md": [
        ("size=(1_000_000, 2)", "size=(6_000, 2)"),
        (
            'centres=("random", 2000), chunk_rows=100_000',
            'centres=("random", 60), chunk_rows=2_000',
        ),
        ('centres=("random", 500), chunk_rows=16_000', 'centres=("random", 40), chunk_rows=2_000'),
        ("size=(2_000_000, 2), chunks=(100_000, 2)", "size=(8_000, 2), chunks=(2_000, 2)"),
        ("size=2_000_000, chunks=100_000", "size=8_000, chunks=2_000"),
        ('centres=("random", 1000)', 'centres=("random", 50)'),
        ("X[:10_000]", "X[:1_000]"),
    ],
}
#: What runs only with an extra installed.
NEEDS = {"docs/large_data.md": "distributed", "docs/studies.md": "distributed"}


def code_blocks(page: str) -> tuple[list[str], list[str]]:
    """The page's python blocks to run, and the reasons of those left out."""
    text = (ROOT / page).read_text()
    run, left_out = [], []
    for match in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
        above = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        (left_out if above.startswith(NOT_RUN) else run).append(
            above if above.startswith(NOT_RUN) else match.group(1)
        )
    return run, left_out


def smaller(page: str, code: str, *, every: bool = False) -> str:
    """``code`` with the page's sizes cut down; ``every``: each cut must apply (the whole page)."""
    for old, new in SMALLER.get(page, []):
        assert old in code or not every, f"{page} no longer contains {old!r}: update SMALLER"
        code = code.replace(old, new)
    return code


RUNNER = textwrap.dedent(
    """
    import json, sys

    if __name__ == "__main__":  # Dask's worker processes import this file again
        import matplotlib

        matplotlib.use("Agg")
        page, blocks = json.load(open(sys.argv[1]))
        namespace = {"__name__": "__main__"}
        for i, code in enumerate(blocks, 1):
            print(f"--- {page}, block {i}", flush=True)
            exec(compile(code, f"{page}, block {i}", "exec"), namespace)
    """
)


def _run(argv, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    return subprocess.run(
        [sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_every_page_has_runnable_blocks_that_compile():
    """Fast: the blocks parse, the pages with code are the ones the slow test runs, and a block
    left out says why."""
    with_code = []
    for page in PAGES:
        run, left_out = code_blocks(page)
        for i, code in enumerate(run, 1):
            compile(code, f"{page}, block {i}", "exec")
        smaller(page, "\n\n".join(run), every=True)  # every cut still matches its page
        assert all(len(reason) > len(NOT_RUN) + 5 for reason in left_out)
        if run:
            with_code.append(page)
    assert {"README.md", "docs/getting_started.md", "docs/large_data.md"} <= set(with_code)


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if code_blocks(p)[0]])
def test_the_code_blocks_of_a_page_run_in_order(page, tmp_path):
    if page in NEEDS:
        pytest.importorskip(NEEDS[page])
    run, _ = code_blocks(page)
    blocks = [smaller(page, code) for code in run]
    (tmp_path / "blocks.json").write_text(json.dumps([page, blocks]))
    (tmp_path / "runner.py").write_text(RUNNER)
    result = _run(["runner.py", "blocks.json"], tmp_path, timeout=1200)
    assert result.returncode == 0, f"{page}:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    assert result.stdout.count(f"--- {page}, block") == len(blocks)


@pytest.mark.slow
def test_the_dask_example_runs_as_a_script(tmp_path):
    """The large-data page's cluster example, alone in a file run by ``python example.py``: the
    worker processes import it again, which its ``__main__`` guard makes harmless."""
    pytest.importorskip("distributed")
    page = "docs/large_data.md"
    (script,) = [code for code in code_blocks(page)[0] if "LocalCluster" in code]
    (tmp_path / "example.py").write_text(smaller(page, script))
    result = _run(["example.py"], tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-6000:]
    values = [float(v) for v in re.findall(r"-?\d+\.\d+(?:e-?\d+)?", result.stdout)]
    assert len(values) == 5 and all(abs(v) < 1.5 for v in values)  # sin x cos y, in [-1, 1]
