"""Sphinx configuration for the trio-batch documentation (MyST Markdown, autodoc, furo)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

from trio_batch import __version__  # noqa: E402

project = "trio-batch"
author = "The trio-batch developers"
copyright = "2026, The trio-batch developers"
version = release = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinxarg.ext",
    "trio_batch_reference",
]
myst_enable_extensions = ["colon_fence", "deflist", "fieldlist"]
myst_heading_anchors = 3
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "reference/_generated"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": False}


html_theme = "furo"
html_title = f"trio-batch {release}"
html_static_path: list[str] = []
