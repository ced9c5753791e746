"""The notebooks as a reader sees them: executed in order, every figure stored, no clutter.

The stored outputs are what the docs show. ``scripts/execute_notebooks.py`` executes the notebooks
and holds the check (:func:`problems`) that runs here on the committed files; ``.ci/run`` executes
every notebook afresh with reduced settings and builds the docs (``scripts/build_docs.py``) as
steps of their own, after this suite.
"""

import importlib.util
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

_spec = importlib.util.spec_from_file_location(
    "execute_notebooks", ROOT / "scripts" / "execute_notebooks.py"
)
execute_notebooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(execute_notebooks)

#: Notebooks whose stored outputs predate scripts/execute_notebooks.py (missing figures, rich's
#: ipywidgets warning, Pareto-k warnings with library paths). They pass once re-executed with
#: ``python scripts/execute_notebooks.py``; the strict xfail then fails, to have them removed here.
NOT_YET_REEXECUTED: set[str] = set()


def _stored(path):
    marks = ()
    if path.stem in NOT_YET_REEXECUTED:
        marks = pytest.mark.xfail(
            strict=True,
            reason="stored outputs predate scripts/execute_notebooks.py; re-execute it, then "
            "remove the notebook from NOT_YET_REEXECUTED",
        )
    return pytest.param(path, id=path.stem, marks=marks)


@pytest.mark.parametrize("path", [_stored(p) for p in NOTEBOOKS])
def test_stored_notebook_shows_what_a_reader_needs(path):
    nb = nbformat.read(path, as_version=4)
    assert execute_notebooks.problems(nb) == []


def _code_cell(source, outputs, count):
    return nbformat.v4.new_code_cell(source, outputs=outputs, execution_count=count)


def test_problems_finds_missing_figures_paths_noise_and_order():
    stream = nbformat.v4.new_output
    png = stream("display_data", data={"image/png": "iVBOR", "text/plain": "<Figure>"})
    nb = nbformat.v4.new_notebook(
        cells=[
            _code_cell("import matplotlib.pyplot as plt", [], 1),
            _code_cell("fig, ax = plt.subplots()\nax.plot([1, 2])", [png], 2),
            _code_cell("az.plot_forest(fits);", [], 4),  # no figure, and out of order
            _code_cell(
                "compare(fits)",
                [stream("stream", name="stderr", text="/home/u/x.py:3: UserWarning: k\n")],
                5,
            ),
            _code_cell(
                "idata = ppc(idata)", [stream("stream", name="stderr", text="Sampling: [y]")], 6
            ),
        ]
    )
    found = execute_notebooks.problems(nb)
    assert found[0] == "execution counts are [1, 2, 4, 5, 6], not 1..5 in order"
    assert found[1] == "cell 2 ('az.plot_forest(fits);') plots but has no image/png output"
    assert found[2:] == [
        "cell 3 ('compare(fits)') shows '/home/'",
        "cell 4 ('idata = ppc(idata)') shows 'Sampling: ['",
    ]
    nb.cells = nb.cells[:2]
    assert execute_notebooks.problems(nb) == []


def test_prose_numbers_must_be_shown_by_the_outputs_or_declared():
    md = nbformat.v4.new_markdown_cell
    out = nbformat.v4.new_output("stream", name="stdout", text="max R-hat 1.572, ESS 7.125, 0.35\n")
    nb = nbformat.v4.new_notebook(
        cells=[
            _code_cell("fit(draws=1000)", [out], 1),
            md(
                "R-hat 1.57 (rounded), ESS 7, 35% of draws, `1.016` in code, $1.2$ in maths, "
                "1000 draws (a setting), Tipping 2001."
            ),
        ]
    )
    assert execute_notebooks.prose_numbers(nb) == []
    nb.cells[1].source += " R-hat 1.016 and ESS about 470."
    found = execute_notebooks.prose_numbers(nb)
    assert [line.split(",")[0] for line in found] == [
        "markdown cell 1 quotes 1.016",
        "markdown cell 1 quotes 470",
    ]
    # 1.58 is not 1.572 to two places; a declared number passes, a stale declaration is reported
    nb.cells[1].source = "R-hat 1.58; Tipping reports 9.3%."
    nb.metadata[execute_notebooks.PROSE_NUMBERS_KEY] = {"9.3": "Tipping (2001)", "470": "gone"}
    found = execute_notebooks.prose_numbers(nb)
    assert found[0].startswith("markdown cell 1 quotes 1.58,")
    assert found[1:] == [
        f"metadata {execute_notebooks.PROSE_NUMBERS_KEY!r} lists 470, which the prose no longer "
        "quotes"
    ]
    assert any("quotes 1.58" in line for line in execute_notebooks.problems(nb))
    assert not any("quotes" in line for line in execute_notebooks.problems(nb, prose=False))


def test_normalise_strips_warning_locations_timings_and_empty_outputs():
    site = "/opt/env/lib/python3.12/site-packages/arviz_stats/loo/loo_helper.py"
    text = (
        f"{site}:1169: UserWarning: Estimated shape parameter of Pareto distribution\n"
        "  warnings.warn(\n"
        "elpd 90.1\n"
        f"{execute_notebooks.ROOT}/notebooks/data.csv\n"
    )
    out = nbformat.v4.new_output("stream", name="stderr", text=text)
    # rich's final render of a live display in a kernel
    empty = nbformat.v4.new_output(
        "display_data",
        data={"text/html": "<pre style='white-space:pre'></pre>\n", "text/plain": ""},
    )
    cell = _code_cell("x", [out, empty], 1)
    cell.metadata["execution"] = {"iopub.status.busy": "2026-11-24T19:00:00Z"}
    nb = execute_notebooks.normalise(nbformat.v4.new_notebook(cells=[cell]))
    (only,) = nb.cells[0].outputs
    assert only.text == (
        "UserWarning: Estimated shape parameter of Pareto distribution\n"
        "elpd 90.1\n"
        "notebooks/data.csv\n"
    )
    assert "execution" not in nb.cells[0].metadata


_docs_spec = importlib.util.spec_from_file_location(
    "build_docs", ROOT / "scripts" / "build_docs.py"
)
build_docs = importlib.util.module_from_spec(_docs_spec)
_docs_spec.loader.exec_module(build_docs)


def test_build_docs_finds_a_cdn_missing_fonts_and_latex_titles(tmp_path):
    fonts = tmp_path / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2"
    (tmp_path / "theory.html").write_text(
        '<title>Theory</title><script src="_static/mathjax/tex-chtml-full.js"></script>'
    )
    assert build_docs.problems(tmp_path) == ["_static/mathjax lacks its fonts"]
    fonts.mkdir(parents=True)
    assert build_docs.problems(tmp_path) == []
    (tmp_path / "eq.html").write_text("<title>The $\\alpha$ update</title>")
    (tmp_path / "theory.html").write_text('<script src="https://cdn.jsdelivr.net/x.js"></script>')
    assert build_docs.problems(tmp_path) == [
        "theory.html does not load MathJax from the site's own _static/mathjax",
        "eq.html: LaTeX in the title 'The $\\\\alpha$ update'",
    ]
