"""Pages of the tenbin site generated from the build, so that they cannot
drift from what was built:

- ``{tenbin-cli}``: the reference of every ``tenbin`` command, from the
  built tool's own ``--help``, one section per command.
- ``{cpp-header} NAME.hpp``: breathe's reference of every public class,
  function, enum, type and constant Doxygen found in ``include/tenbin/NAME.hpp``
  (from its XML), in the header's order. A header with public declarations
  that no page shows is a warning (an error in the docs test).

Both directives write MyST text and parse it in place.
"""
from __future__ import annotations

import os
import re
import subprocess
import xml.etree.ElementTree as ET

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)


def _help(tool: str, *args: str) -> str:
    run = subprocess.run([tool, *args, "--help"], capture_output=True, text=True, timeout=30)
    if run.returncode != 0:
        raise RuntimeError(f"{tool} {' '.join(args)} --help exited {run.returncode}: {run.stderr}")
    return run.stdout.rstrip()


def _commands(top_help: str) -> list[tuple[str, str]]:
    """(name, summary) of each line of CLI11's "Subcommands:" list."""
    found, inside = [], False
    for line in top_help.splitlines():
        if line.strip() == "Subcommands:":
            inside = True
        elif inside and not line.strip():
            break
        elif inside:
            name, _, summary = line.strip().partition(" ")
            found.append((name, summary.strip()))
    return found


def _fence(text: str, lang: str = "text") -> list[str]:
    # A fence longer than any run of backticks in the text.
    ticks = "`" * max(3, max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    return [ticks + lang, *text.splitlines(), ticks]


class TenbinCli(SphinxDirective):
    """One section per command of the tool: its summary and its --help."""

    def run(self):
        tool = self.config.tenbin_tool
        if not tool or not os.access(tool, os.X_OK):
            raise self.error(f"tenbin-cli: no tenbin tool at {tool!r} (tenbin_tool in conf.py)")
        self.env.note_dependency(os.path.abspath(tool))
        top = _help(tool)
        commands = _commands(top)
        if not commands:
            raise self.error("tenbin-cli: `tenbin --help` lists no commands")
        lines = ["### tenbin", "", *_fence(top), ""]
        for name, summary in commands:
            lines += [f"### tenbin {name}", "", summary + ".", "", *_fence(_help(tool, name)), ""]
        holder = nodes.Element()
        self.state.nested_parse(StringList(lines, source=f"tenbin --help ({tool})"), self.content_offset,
                                holder, match_titles=True)
        return holder.children


def _location(element) -> str:
    return os.path.basename(element.find("location").get("file"))


def _header_index(xml_dir: str) -> dict[str, list[tuple[str, str, str | None]]]:
    """header -> [(kind, qualified name, argsstring)] of the classes,
    concepts and members of namespace tenbin and the macros, in the
    header's order."""
    root = ET.parse(os.path.join(xml_dir, "namespacetenbin.xml")).getroot().find("compounddef")
    found: dict[str, list[tuple[int, str, str, str | None]]] = {}
    for inner in root.findall("innerclass") + root.findall("innerconcept"):
        compound = ET.parse(os.path.join(xml_dir, inner.get("refid") + ".xml")).getroot().find("compounddef")
        where = compound.find("location")
        found.setdefault(_location(compound), []).append(
            (int(where.get("line", 0)), compound.get("kind"), compound.findtext("compoundname"), None))
    for section in root.findall("sectiondef"):
        for member in section.findall("memberdef"):
            where = member.find("location")
            found.setdefault(_location(member), []).append(
                (int(where.get("line", 0)), member.get("kind"), "tenbin::" + member.findtext("name"),
                 member.findtext("argsstring")))
    # Macros: members of the header's own compound.
    for entry in ET.parse(os.path.join(xml_dir, "index.xml")).getroot().findall("compound[@kind='file']"):
        compound = ET.parse(os.path.join(xml_dir, entry.get("refid") + ".xml")).getroot().find("compounddef")
        for member in compound.findall("sectiondef[@kind='define']/memberdef"):
            found.setdefault(_location(member), []).append(
                (int(member.find("location").get("line", 0)), "define", member.findtext("name"), None))
    return {header: [item[1:] for item in sorted(items)] for header, items in found.items()}


class CppHeader(SphinxDirective):
    """Breathe's reference of one public header's declarations."""

    required_arguments = 1

    def run(self):
        header = self.arguments[0]
        index = self.env.app.tenbin_headers
        if header not in index:
            raise self.error(f"cpp-header: {header} declares nothing public in namespace tenbin "
                             f"(headers that do: {', '.join(sorted(index))})")
        self.env.tenbin_documented_headers = getattr(self.env, "tenbin_documented_headers", set()) | {header}
        # Doxygen links a header's name in a comment to its file ("zmq.hpp");
        # here that is this section.
        file_id = header.replace(".", "_8")
        lines = [f"({file_id})=", f"({file_id}_source)=", ""]
        for kind, name, args in index[header]:
            if kind in ("class", "struct"):
                lines += [f"```{{doxygen{kind}}} {name}", ":members:", ":undoc-members:", "```", ""]
            elif kind == "function":
                # The parameters pick one overload; qualifiers after them are not part of the match.
                params = re.sub(r"\)[^)]*$", ")", args or "()")
                lines += [f"```{{doxygenfunction}} {name}{params}", "```", ""]
            elif kind in ("enum", "typedef", "variable", "concept", "define"):
                lines += [f"```{{doxygen{kind}}} {name}", "```", ""]
            else:
                raise self.error(f"cpp-header: {name} in {header} is a {kind}, which this directive cannot show")
        holder = nodes.Element()
        self.state.nested_parse(StringList(lines, source=f"Doxygen XML of {header}"), self.content_offset, holder)
        return holder.children


def _load_headers(app):
    app.tenbin_headers = _header_index(app.config.breathe_projects[app.config.breathe_default_project])


def _check_headers(app, env):
    shown = getattr(env, "tenbin_documented_headers", set())
    for header in sorted(set(app.tenbin_headers) - shown):
        logger.warning(f"{header} declares public API that no page shows: add a {{cpp-header}} {header} "
                       "section to a page of docs/api/")


def _merge(app, env, docnames, other):
    env.tenbin_documented_headers = (getattr(env, "tenbin_documented_headers", set())
                                     | getattr(other, "tenbin_documented_headers", set()))


def setup(app):
    app.add_config_value("tenbin_tool", "", "env")
    app.add_directive("tenbin-cli", TenbinCli)
    app.add_directive("cpp-header", CppHeader)
    app.connect("builder-inited", _load_headers)
    app.connect("env-check-consistency", _check_headers)
    app.connect("env-merge-info", _merge)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
