"""The HTML page's sentences: their inline Markdown rendered by markdown-it-py (CommonMark)
where a regex did it before, compared with that regex on every sentence of a report built
from a harness run, and on the cases a regex gets wrong."""

from __future__ import annotations

import html
import re

import pytest
from markupsafe import escape

from ring.report import build_report, collect_inputs, render


def _regex_inline_html(text: str) -> str:
    """The hand-written renderer markdown-it-py replaced: escape, then `code`, **bold**
    and *emphasis* by regular expressions."""
    out = str(escape(text))
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    out = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)
    return re.sub(r"(?<![\w*])\*([^*]+)\*(?![\w*])", r"<em>\1</em>", out)


def _same_page(old: str, new: str) -> bool:
    """The same tags in the same places and the same text: entities may be spelled apart
    (``&#39;`` and ``'``, ``&#34;`` and ``&quot;``)."""
    return html.unescape(old) == html.unescape(new) and re.findall(r"<[^>]+>", old) == re.findall(
        r"<[^>]+>", new
    )


@pytest.mark.slow
def test_every_sentence_of_a_built_report_renders_as_before(results, tmp_path, monkeypatch):
    seen: list[str] = []
    real = render._inline_html
    monkeypatch.setattr(render, "_inline_html", lambda text: seen.append(text) or real(text))
    chosen = collect_inputs(results=results)
    build_report(
        chosen["sweeps"],
        profiles=chosen["profiles"],
        figures_dir=tmp_path / "figures",
        out_dir=tmp_path / "report",
    )
    assert len(seen) > 10
    assert any("<code>" in str(real(t)) for t in seen)  # the run's sentences carry Markdown
    differ = [t for t in seen if not _same_page(_regex_inline_html(t), str(real(t)))]
    assert differ == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "**bold** and *em* and `a*b*c`",
            "<strong>bold</strong> and <em>em</em> and <code>a*b*c</code>",
        ),
        ('`<tag> & "q"`', "<code>&lt;tag&gt; &amp; &quot;q&quot;</code>"),
        ("<script>x</script>", "&lt;script&gt;x&lt;/script&gt;"),  # never raw HTML
        ("2 * 3 * 4 bytes", "2 * 3 * 4 bytes"),
        ("``a `b` c``", "<code>a `b` c</code>"),  # a code span holding backticks
        ("ring_segmented_block", "ring_segmented_block"),  # no emphasis inside a word
    ],
)
def test_inline_markdown_renders_as_commonmark_says(text, expected):
    assert str(render._inline_html(text)) == expected


def test_the_regex_it_replaced_got_code_spans_with_backticks_wrong():
    text = "``a `b` c``"
    assert str(render._inline_html(text)) == "<code>a `b` c</code>"
    assert _regex_inline_html(text) != "<code>a `b` c</code>"
