# Sphinx configuration of tenbin's documentation site. Built by
# docs/build.py (`meson compile -C build docs`), which runs Doxygen first and
# passes what the build made through the environment:
#   TENBIN_DOXYGEN_XML  Doxygen's XML of the public headers (for breathe)
#   TENBIN_PYTHONPATH   the built Python package (build/python, for autodoc)
#   TENBIN_TOOL         the built `tenbin` program (for the CLI reference)
#   TENBIN_VERSION      the project's version (meson.build)
import os
import sys

_missing = [v for v in ("TENBIN_DOXYGEN_XML", "TENBIN_PYTHONPATH", "TENBIN_TOOL") if not os.environ.get(v)]
if _missing:
    sys.exit(f"conf.py: {', '.join(_missing)} not set: build the site with docs/build.py "
             "(meson compile -C build docs)")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "_ext"))
sys.path.insert(0, os.environ["TENBIN_PYTHONPATH"])

project = "tenbin"
author = "the tenbin authors"
copyright = author
release = version = os.environ.get("TENBIN_VERSION", "")

extensions = [
    "myst_parser",
    "breathe",
    "sphinx.ext.autodoc",
    "sphinx.ext.graphviz",
    "tenbin_docs",
]

root_doc = "index"
source_suffix = {".md": "markdown"}
exclude_patterns = ["_ext"]
# Every cross-reference must resolve, but to names documented elsewhere (the
# standard library, cppzmq, DLPack, POSIX), to the namespaces themselves
# and to tenbin::detail, which is no API.
nitpicky = True
nitpick_ignore_regex = [
    ("cpp:identifier", r"(std|zmq|tenbin|detail)(::.*)?"),
    ("cpp:identifier", r"u?int(8|16|32|64)_t|size_t|ptrdiff_t|uintptr_t|socklen_t|sockaddr.*"),
    ("cpp:identifier", r"DL[A-Za-z]+"),
    # A concept in a template's parameter list (`template <element T>`),
    # which Sphinx 5's C++ domain does not look up.
    ("cpp:identifier", r"element"),
]

myst_heading_anchors = 3
myst_enable_extensions = ["deflist"]

breathe_projects = {"tenbin": os.environ["TENBIN_DOXYGEN_XML"]}
breathe_default_project = "tenbin"
breathe_domain_by_extension = {"hpp": "cpp"}
breathe_default_members = ()

autodoc_member_order = "bysource"
autodoc_typehints = "none"


def _skip_errc(app, what, name, obj, skip, options):
    # Every error class carries its `errc`; tenbin.Error's docstring says it once.
    return True if name == "errc" else None


def setup(app):
    app.connect("autodoc-skip-member", _skip_errc)


tenbin_tool = os.environ["TENBIN_TOOL"]

graphviz_output_format = "svg"

html_theme = "furo"
html_title = f"tenbin {version}"
html_copy_source = False
html_show_sourcelink = False
html_static_path = []
