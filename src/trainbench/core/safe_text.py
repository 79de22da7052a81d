"""Logged text made safe for where it is shown: a terminal, a Markdown table cell, Markdown prose, HTML.

Everything a run logs (its name, tags such as ``device`` or ``error``, params, a rerun's original
overrides) is written by whoever could write to the tracking store: on a shared MLflow server, anyone.
Such text is data. Before it reaches a console, ``report.md`` or an HTML page it goes through one of
these functions, chosen by where it goes:

- :func:`term`: terminal control characters (ANSI CSI and OSC sequences such as "clear screen" or "set
  the window title", every other C0/C1 control and the DEL character) are shown as visible ``\\xNN``
  escapes, and so are Unicode's invisible format characters (the bidi controls U+202A-U+202E,
  U+2066-U+2069, U+200E, U+200F, U+061C that reorder what a terminal, an editor or a browser shows,
  zero-width characters, the line and paragraph separators, tag characters: category Cf, Zl, Zp) and
  lone surrogates (which a terminal cannot encode), as ``\\uNNNN`` / ``\\UNNNNNNNN``; newlines become
  ``\\n`` unless ``keep_newlines``;
- :func:`md_cell`: one Markdown table cell: :func:`md_text`, plus ``|`` escaped and newlines as spaces,
  so a value can neither add a column nor end the row;
- :func:`md_text`: Markdown prose (a heading, a list item): HTML-escaped (``<script>``, ``<img
  onerror=...>`` become text), Markdown's inline markup characters backslash-escaped, a line that would
  start a heading, a quote or a list is neutralised, and control characters as in :func:`term`;
- :func:`md_code`: text inside an inline code span, which Markdown does not interpret (backticks removed);
- :func:`html`: an HTML text node or attribute value (:func:`html.escape` with quotes).

The ground floor: no torch, no MLflow.
"""

from __future__ import annotations

import html as _html
import re
from typing import Any

#: Unicode's format characters (category Cf: bidi controls, zero-width characters, the BOM, tag
#: characters), the line and paragraph separators (Zl, Zp) and the surrogates (Cs), as of Unicode 16;
#: tests/core/test_safe_text.py checks the list against the running Python's unicodedata.
_FORMAT = ("\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u2028-\u202e"
           "\u2060-\u2064\u2066-\u206f\ud800-\udfff\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
           "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f")
# Every C0 control but tab and newline, DEL and the C1 controls (0x9b is a one-byte CSI): with ESC and CSI
# shown as text, no ANSI (CSI) or OSC sequence can start; and the format characters above.
_CONTROL = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_FORMAT}]")
_MD_INLINE = re.compile(r"([\\`*_\[\]{}()#!~|])")


def _visible(m: re.Match[str]) -> str:
    return "".join(f"\\x{ord(c):02x}" if ord(c) <= 0xFF else f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF
                   else f"\\U{ord(c):08x}" for c in m.group(0))


def term(value: Any, keep_newlines: bool = False) -> str:
    """``value`` as text that a terminal shows but does not act on (no escape sequence reaches it raw)."""
    s = "" if value is None else str(value)
    s = _CONTROL.sub(_visible, s.replace("\r\n", "\n") if keep_newlines else s)
    if not keep_newlines:
        s = s.replace("\n", "\\n").replace("\t", " ")
    return s


def html(value: Any) -> str:
    """``value`` as an HTML text node or a quoted attribute value."""
    return _html.escape(term(value), quote=True)


def md_text(value: Any) -> str:
    """``value`` inside Markdown prose: no HTML, no markup, no block structure (heading, quote, list)."""
    s = term(value)  # one line: a newline cannot start a heading or a new block
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")  # entities render as the characters
    s = _MD_INLINE.sub(r"\\\1", s)
    # a leading "-", "+", "=", a number followed by "." would start a list or underline a heading
    s = re.sub(r"^(\s*)([-+=])", r"\1\\\2", s)
    return re.sub(r"^(\s*\d+)([.)])", r"\1\\\2", s)


def md_cell(value: Any) -> str:
    """``value`` in one cell of a Markdown table: :func:`md_text` (which escapes ``|`` too)."""
    return md_text(value)


def md_code(value: Any) -> str:
    """``value`` inside an inline code span (`` `...` ``): Markdown leaves the inside alone, so only the
    backtick that would close the span, and control characters, are taken out."""
    return term(value).replace("`", "'")
