#!/usr/bin/env python3
"""Regenerates engine/text/html_entities.inc from Python's html.entities.html5 (the WHATWG table)."""
import html.entities
import pathlib

out = pathlib.Path(__file__).resolve().parent.parent / "engine/text/html_entities.inc"
with out.open("w") as f:
    f.write("// Generated data: the HTML5 named character references of the WHATWG HTML Living Standard\n")
    f.write("// (https://html.spec.whatwg.org/entities.json), as Python 3.11 html.entities.html5 lists them:\n")
    f.write('// name (with or without its ";") -> replacement text (UTF-8). Sorted by name for binary search.\n')
    f.write("// Regenerate: python3 tools/gen_html_entities.py\n")
    for name, val in sorted(html.entities.html5.items()):
        esc = "".join("\\x%02x" % b for b in val.encode("utf-8"))
        f.write('{"%s", "%s"},\n' % (name, esc))
