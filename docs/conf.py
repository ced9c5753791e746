"""Sphinx configuration of the bayes_rvm documentation (myst-nb renders the notebooks)."""

project = "bayes_rvm"
author = "bayes_rvm developers"
copyright = "2026, bayes_rvm developers"

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "sphinx.ext.intersphinx",
    "numpydoc",
]
myst_enable_extensions = ["dollarmath", "amsmath"]
# The notebooks are committed executed; CI re-executes them in the test suite, so the docs
# render the stored outputs instead of running them a second time.
nb_execution_mode = "off"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
html_theme = "pydata_sphinx_theme"
html_title = "bayes_rvm"
intersphinx_mapping = {}
suppress_warnings = ["mystnb.unknown_mime_type"]
html_static_path = ["_static"]
# The equations must render without a network: MathJax is served from the built site (MathJax
# 3.2.2, Apache-2.0, see docs/_static/mathjax/LICENSE and README.txt: es5/tex-chtml-full.js,
# which carries every TeX extension, and its woff-v2 fonts, from the npm package "mathjax"). The
# notebooks' maths goes through the same Sphinx math nodes (myst-nb).
mathjax_path = "mathjax/tex-chtml-full.js"
