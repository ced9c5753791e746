"""Build the docs as CI does, warnings as errors, and check what a reader's browser needs.

Usage (from the repository root)::

    .venv/bin/python scripts/build_docs.py [OUTDIR]     # default: a temporary folder

Exits 1 when Sphinx warns or fails, when the equations would need a network (MathJax from a
CDN rather than the site's own copy) or when a page title holds LaTeX, which a browser tab
cannot typeset.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def problems(html: Path) -> list[str]:
    """What is wrong with a built site at ``html`` (an empty list when nothing is)."""
    found = []
    theory = (html / "theory.html").read_text()
    if "_static/mathjax/tex-chtml-full.js" not in theory or "cdn.jsdelivr" in theory:
        found.append("theory.html does not load MathJax from the site's own _static/mathjax")
    if not (html / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").is_dir():
        found.append("_static/mathjax lacks its fonts")
    for page in sorted(html.rglob("*.html")):
        title = re.search(r"<title>(.*?)</title>", page.read_text(), re.S)
        if title and ("\\(" in title.group(1) or "$" in title.group(1)):
            found.append(f"{page.name}: LaTeX in the title {title.group(1)!r}")
    return found


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with tempfile.TemporaryDirectory() as tmp:
        html = Path(argv[0]) if argv else Path(tmp) / "html"
        cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
        result = subprocess.run([*cmd, str(ROOT / "docs"), str(html)], check=False)
        if result.returncode != 0:
            print("build_docs: Sphinx failed or warned (above)", file=sys.stderr)
            return 1
        found = problems(html)
    for line in found:
        print(f"build_docs: {line}", file=sys.stderr)
    print("build_docs: " + ("ok" if not found else f"{len(found)} problem(s)"))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
