"""core/safe_text.py: logged text escaped for the terminal, Markdown tables and prose, code spans and HTML."""

from __future__ import annotations

import re

from trainbench.core.safe_text import html, md_cell, md_code, md_text, term

ANSI = "\x1b[2J\x1b]0;owned\x07\x9b31m\x7f"


def test_terminal_controls_are_shown_not_acted_on():
    out = term(f"a{ANSI}b\r\nc\td")
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", out) and "\n" not in out
    assert out.startswith("a\\x1b[2J\\x1b]0;owned\\x07\\x9b31m\\x7fb")
    assert term("x\ny", keep_newlines=True) == "x\ny" and term(None) == ""


def test_markdown_cells_and_prose_cannot_add_html_markup_rows_or_headings():
    for attack in ("<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "a | b | c", "x\n# Heading",
                   "[link](javascript:alert(1))", "**bold** _it_ `code`", ANSI):
        cell = md_cell(attack)
        assert "<" not in cell and ">" not in cell and "\n" not in cell
        assert not re.search(r"(?<!\\)[|`*_\[\]()]", cell), cell
        assert "\x1b" not in cell and "\x07" not in cell
    assert md_text("# title").startswith("\\#") and md_text("- item").startswith("\\-")
    assert md_text("1. item") == "1\\. item" and md_text("a & b") == "a &amp; b"
    assert md_text("plain text 1.5 ms") == "plain text 1.5 ms"  # ordinary text stays readable


def test_code_spans_and_html():
    assert md_code("a`b") == "a'b" and md_code("tft[reference]") == "tft[reference]"
    assert html('<a href="x">') == "&lt;a href=&quot;x&quot;&gt;" and "\x1b" not in html(ANSI)


BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"


def test_bidi_controls_and_other_invisible_format_characters_are_shown_as_escapes():
    out = term(f"model{BIDI}\u200b\ufeff\u2028x\U000e0041")
    assert out == ("model\\u202a\\u202b\\u202c\\u202d\\u202e\\u2066\\u2067\\u2068\\u2069\\u200e\\u200f\\u061c"
                   "\\u200b\\ufeff\\u2028x\\U000e0041")
    for escaper in (term, md_cell, md_text, md_code, html):
        assert not any(c in escaper(BIDI) for c in BIDI), escaper
    assert term("\udcff") == "\\udcff"  # a lone surrogate (undecodable bytes) would not even print
    assert term("café ü — 東京 🚀") == "café ü — 東京 🚀"  # letters, symbols and emoji stay readable


def test_the_escaped_set_covers_every_format_character_this_python_knows():
    import sys
    import unicodedata

    missed = [f"U+{cp:04X}" for cp in range(sys.maxunicode + 1)
              if unicodedata.category(chr(cp)) in ("Cf", "Zl", "Zp", "Cs") and term(chr(cp)) == chr(cp)]
    assert missed == [], missed
