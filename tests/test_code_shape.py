"""The package stays readable: no function body over 120 lines, none over 8 positional parameters.

Issue 14 replaced a 453-line engine closure with 22 positional parameters by small state objects;
this keeps the whole package from drifting back. Docstrings do not count towards the length.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bayes_rvm"
MAX_LINES = 120
MAX_POSITIONAL = 8


def _functions():
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield path.relative_to(PACKAGE.parent), node


def _body_lines(node) -> int:
    body = node.body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    return node.end_lineno - body[0].lineno + 1


def _positional(node) -> int:
    names = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
    return len(names) - (names[:1] in (["self"], ["cls"]))


def test_the_package_has_functions():
    assert sum(1 for _ in _functions()) > 100  # the walk must not silently find nothing


@pytest.mark.parametrize(
    ("measure", "limit"), [(_body_lines, MAX_LINES), (_positional, MAX_POSITIONAL)]
)
def test_no_function_too_long_or_with_too_many_positional_parameters(measure, limit):
    over = [
        f"{path}:{node.lineno} {node.name}" for path, node in _functions() if measure(node) > limit
    ]
    assert not over, f"over {limit} ({measure.__name__}): {over}"


def test_the_measures_catch_what_they_should():
    src = "def f(a, b, c, d, e, f, g, h, i):\n    '''doc'''\n" + "    x = 1\n" * 121
    node = ast.parse(src).body[0]
    assert _positional(node) == 9 and _body_lines(node) == 121
    method = ast.parse("def m(self, a):\n    pass\n").body[0]
    assert _positional(method) == 1
