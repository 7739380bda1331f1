"""Sphinx configuration of the documentation site: `make docs` builds it into
docs/_build/html with warnings as errors.

Pages are Markdown (MyST), the notebook is rendered by myst-nb without running
it (tests/test_notebook.py runs it), and the API reference is generated from the
docstrings (autodoc, autosummary).
"""

# The package is imported as installed (`make venv` installs this checkout, editable).

project = "bifocal-jax"
author = "the bifocal-jax authors"
copyright = "the bifocal-jax authors"

extensions = [
    "myst_nb",  # Markdown pages (myst-parser) and notebooks
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",  # the docstrings' Google-style Args/Returns sections
]

source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
exclude_patterns = ["_build", "snippets", "Thumbs.db", ".DS_Store"]

# MyST: GitHub's heading anchors, so `page.md#a-heading` links work on GitHub and here.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

# The notebook is stored without outputs and run by the test suite, not here.
nb_execution_mode = "off"

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autosummary_generate = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# The docstrings write code as `x`: show it as code.
default_role = "code"

html_theme = "sphinx_book_theme"
html_title = "bifocal-jax"
html_theme_options = {"show_toc_level": 2}
