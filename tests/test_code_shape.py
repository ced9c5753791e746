"""The package stays readable, measured on the package itself.

- the layers are folders, and imports flow downwards only (:data:`LAYERS`, lowest first): a module
  never imports one of a higher layer, imports inside functions included;
- no function over 80 code lines (docstrings, comments and blank lines do not count), none over
  8 positional parameters;
- no private name (one leading underscore, not a dunder) of one ``bayes_rvm`` module imported by
  another, imports inside functions included;
- no import circle between ``bayes_rvm`` modules (a strongly connected component of the import
  graph with more than one module, or a module importing itself).

Each check names today's offenders in a ``KNOWN_*`` allowlist (empty now). A check fails on a new
offender *and* on an allowlisted name that no longer offends: the lists only shrink, and whoever
fixes an offender deletes its entry.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bayes_rvm"
MAX_FUNCTION_LINES = 80
MAX_POSITIONAL = 8
MAX_TOP_LEVEL_MODULES = 15

#: The layers, lowest first: each entry names the modules (or packages, with every module under
#: them) of one layer. A module may import its own layer and those below it, never one above.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundation",
        (
            "bayes_rvm._warnings",
            "bayes_rvm.dims",
            "bayes_rvm.families",
            "bayes_rvm.threads",
            "bayes_rvm.memory",
            "bayes_rvm.datasets",
            "bayes_rvm._optional",
            "bayes_rvm.progress",
        ),
    ),
    ("basis", ("bayes_rvm.basis",)),
    ("evidence", ("bayes_rvm.evidence",)),
    ("posterior", ("bayes_rvm.posterior",)),
    ("models", ("bayes_rvm.models",)),
    ("inference", ("bayes_rvm.inference",)),
    ("io", ("bayes_rvm.io",)),
    ("estimators", ("bayes_rvm.estimators",)),
    ("studies", ("bayes_rvm.studies",)),
    ("interface", ("bayes_rvm.plots", "bayes_rvm.cli", "bayes_rvm")),
]

# Offenders allowed for now: none. A name added here is debt, to be named in the issue note.
KNOWN_LONG_FUNCTIONS: set[str] = set()
KNOWN_MANY_POSITIONAL: set[str] = set()
# "importer imports module.name"
KNOWN_PRIVATE_IMPORTS: set[str] = set()
# each circle as the sorted modules of its strongly connected component, joined by " <-> "
KNOWN_CIRCLES: set[str] = set()


# -- measures ----------------------------------------------------------------------------------


def _docstring_lines(tree: ast.AST) -> set[int]:
    """Line numbers of every module, class and function docstring in ``tree``."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


class Source:
    """One parsed module: its dotted name, text and tree, and a code-line counter."""

    def __init__(self, name: str, text: str, is_package: bool = False) -> None:
        self.name = name
        self.is_package = is_package
        self.lines = text.splitlines()
        self.tree = ast.parse(text)
        docs = _docstring_lines(self.tree)
        stripped = (line.strip() for line in self.lines)
        # a code line: not blank, not only a comment, not part of a docstring
        self.code = [
            bool(s) and not s.startswith("#") and i not in docs
            for i, s in enumerate(stripped, start=1)
        ]

    def code_lines(self, first: int = 1, last: int | None = None) -> int:
        """Code lines between ``first`` and ``last`` (1-based, inclusive)."""
        return sum(self.code[first - 1 : last if last is not None else len(self.code)])


def _sources(root: Path = PACKAGE) -> list[Source]:
    out = []
    for path in sorted(root.rglob("*.py")):
        parts = path.with_suffix("").relative_to(root.parent).parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        out.append(Source(name, path.read_text(encoding="utf-8"), is_package))
    return out


def _functions(source: Source):
    """(qualified name, node) of every function and method, nested ones included."""

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}.{child.name}"
                if not isinstance(child, ast.ClassDef):
                    yield name, child
                yield from walk(child, name)
            else:
                yield from walk(child, prefix)

    yield from walk(source.tree, source.name)


def _function_lines(source: Source, node: ast.AST) -> int:
    """Code lines of a function body (the signature and decorators not counted)."""
    return source.code_lines(node.body[0].lineno, node.end_lineno)


def _positional(node) -> int:
    names = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
    return len(names) - (names[:1] in (["self"], ["cls"]))


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _imports(source: Source):
    """(module, imported name or None) of every project import, inside functions too."""
    package = source.name if source.is_package else source.name.rpartition(".")[0]
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "bayes_rvm":
                    yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] != "bayes_rvm":
                continue
            for alias in node.names:
                yield module, alias.name


def _private_imports(sources: list[Source]) -> set[str]:
    found = set()
    for source in sources:
        for module, name in _imports(source):
            if name is not None and _is_private(name) and module != source.name:
                found.add(f"{source.name} imports {module}.{name}")
    return found


def _import_graph(sources: list[Source]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (``from pkg import submodule`` included)."""
    known = {s.name for s in sources}
    graph: dict[str, set[str]] = {s.name: set() for s in sources}
    for source in sources:
        for module, name in _imports(source):
            submodule = f"{module}.{name}"
            target = submodule if name is not None and submodule in known else module
            if target in known:
                graph[source.name].add(target)
    return graph


def _circles(graph: dict[str, set[str]]) -> set[str]:
    """The strongly connected components with a circle in them (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[str] = set()
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    found.add(" <-> ".join(sorted(component)))
    return found


# -- what the package measures today -----------------------------------------------------------


def _layer(module: str) -> int:
    """The index in :data:`LAYERS` of ``module`` (the longest matching prefix wins; the root
    package ``bayes_rvm`` names its ``__init__`` alone)."""
    best, depth = None, -1
    for i, (_, members) in enumerate(LAYERS):
        for member in members:
            inside = "." in member and module.startswith(member + ".")
            if (module == member or inside) and member.count(".") > depth:
                best, depth = i, member.count(".")
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS")
    return best


def _upward_imports(sources):
    """``"importer (layer) imports module (layer)"`` for every import of a higher layer."""
    found = set()
    for source, targets in _import_graph(sources).items():
        for target in targets:
            if _layer(target) > _layer(source):
                found.add(
                    f"{source} ({LAYERS[_layer(source)][0]}) imports "
                    f"{target} ({LAYERS[_layer(target)][0]})"
                )
    return found


def _long_functions(sources):
    return {
        name
        for s in sources
        for name, node in _functions(s)
        if _function_lines(s, node) > MAX_FUNCTION_LINES
    }


def _many_positional(sources):
    return {
        name for s in sources for name, node in _functions(s) if _positional(node) > MAX_POSITIONAL
    }


def _check(found: set[str], known: set[str], what: str) -> None:
    new, fixed = sorted(found - known), sorted(known - found)
    assert not new, f"new {what}: {new} (fix them; the allowlist is for today's offenders only)"
    assert not fixed, f"no longer {what}: {fixed} -- delete them from the allowlist"


@pytest.fixture(scope="module")
def sources():
    return _sources()


def test_the_package_has_modules_functions_and_imports(sources):
    # the walk must not silently find nothing
    assert len(sources) > 30
    assert sum(1 for s in sources for _ in _functions(s)) > 300
    graph = _import_graph(sources)
    assert "bayes_rvm.estimators.base" in graph["bayes_rvm.estimators.regressor"]
    assert "bayes_rvm.evidence.gaussian" in graph["bayes_rvm.evidence.sequential"]


@pytest.mark.parametrize(
    ("measure", "known", "what"),
    [
        (_upward_imports, set(), "imports of a higher layer"),
        (_long_functions, KNOWN_LONG_FUNCTIONS, f"functions over {MAX_FUNCTION_LINES} code lines"),
        (_many_positional, KNOWN_MANY_POSITIONAL, f"over {MAX_POSITIONAL} positional parameters"),
        (_private_imports, KNOWN_PRIVATE_IMPORTS, "private names imported across modules"),
        (lambda s: _circles(_import_graph(s)), KNOWN_CIRCLES, "import circles"),
    ],
    ids=["layers", "function-length", "positional", "private-imports", "circles"],
)
def test_the_package_meets_its_targets(sources, measure, known, what):
    _check(measure(sources), known, what)


# -- the measures catch what they should -------------------------------------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> list[Source]:
    for rel, text in files.items():
        path = tmp_path / "bayes_rvm" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return _sources(tmp_path / "bayes_rvm")


def test_every_module_is_in_a_layer_and_the_top_level_is_small(sources):
    for source in sources:
        _layer(source.name)
    top = [s.name for s in sources if s.name.count(".") == 1 and not s.is_package]
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def test_the_layer_measure_catches_what_it_should(tmp_path):
    sources = _package(
        tmp_path,
        {
            "__init__.py": "",
            "dims.py": "",
            "evidence/__init__.py": "",
            "evidence/a.py": (
                "from bayes_rvm.dims import X\ndef f():\n    from bayes_rvm.models import g\n"
            ),
            "models/__init__.py": "from bayes_rvm.evidence.a import f\n",
        },
    )
    assert _layer("bayes_rvm.evidence.a") == 2
    assert _layer("bayes_rvm.cli") == len(LAYERS) - 1
    assert _upward_imports(sources) == {
        "bayes_rvm.evidence.a (evidence) imports bayes_rvm.models (models)"
    }
    with pytest.raises(AssertionError, match="in no layer"):
        _layer("bayes_rvm.nowhere")


def test_the_length_measures_catch_what_they_should(tmp_path):
    body = "    x = 1\n    # a comment\n\n" * 81  # 81 code lines, 162 that do not count
    long_function = f"def f(a, b, c, d, e, f, g, h, i):\n    '''doc\n\n    more'''\n{body}"
    methods = "class C:\n    def m(self, a):\n        '''doc'''\n        pass\n"
    sources = _package(
        tmp_path,
        {
            "__init__.py": '"""pkg"""\n',
            "big.py": '"""mod\n\ndoc"""\n' + "y = 1\n# c\n" * 601,
            "fun.py": long_function + methods,
        },
    )
    by_name = {s.name: s for s in sources}
    assert by_name["bayes_rvm.big"].code_lines() == 601
    fun = by_name["bayes_rvm.fun"]
    lengths = {name: _function_lines(fun, node) for name, node in _functions(fun)}
    assert lengths == {"bayes_rvm.fun.f": 81, "bayes_rvm.fun.C.m": 1}
    assert _long_functions(sources) == {"bayes_rvm.fun.f"}
    assert _many_positional(sources) == {"bayes_rvm.fun.f"}  # 9 > 8; `self` does not count


def test_the_import_measures_catch_what_they_should(tmp_path):
    sources = _package(
        tmp_path,
        {
            "__init__.py": "from .a import public\n",
            "a.py": "from .b import _private, fine\npublic = 1\n",
            "b.py": "def g():\n    from bayes_rvm.sub.c import _hidden\n\nfine = __name__\n",
            "sub/__init__.py": "",
            "sub/c.py": "from .. import a\nfrom ..a import __all__\n_hidden = 1\n",
            "sub/d.py": "import bayes_rvm.sub.c\nfrom . import _e\n",
            "sub/_e.py": "from .d import x\n",
        },
    )
    assert _private_imports(sources) == {
        "bayes_rvm.a imports bayes_rvm.b._private",
        "bayes_rvm.b imports bayes_rvm.sub.c._hidden",  # inside a function: still counted
        "bayes_rvm.sub.d imports bayes_rvm.sub._e",  # a private module is a private name too
    }
    graph = _import_graph(sources)
    assert graph["bayes_rvm.sub.c"] == {"bayes_rvm.a"}  # `from .. import a`: the submodule
    assert graph["bayes_rvm.sub.d"] == {"bayes_rvm.sub.c", "bayes_rvm.sub._e"}
    # a -> b -> sub.c -> a is one circle; d <-> _e another; the package __init__ is in none
    assert _circles(graph) == {
        "bayes_rvm.a <-> bayes_rvm.b <-> bayes_rvm.sub.c",
        "bayes_rvm.sub._e <-> bayes_rvm.sub.d",
    }
    assert _circles({"m": {"m"}, "n": set()}) == {"m"}
    _check({"x"}, {"x"}, "offenders")
    with pytest.raises(AssertionError, match="new offenders"):
        _check({"x", "y"}, {"x"}, "offenders")
    with pytest.raises(AssertionError, match="no longer offenders"):
        _check(set(), {"x"}, "offenders")
