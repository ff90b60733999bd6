"""Sphinx configuration of omnitensor's API reference (built by `tox -e docs`, warnings as errors)."""

project = "omnitensor"
author = "omnitensor contributors"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # signatures show the names; the docstrings say the types
autodoc_default_options = {"members": True, "undoc-members": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # dataclass fields are members too: no duplicate descriptions
default_role = "code"
html_theme = "alabaster"
suppress_warnings = ["myst.header"]
