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
