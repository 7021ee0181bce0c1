"""Escaping helpers: each output is checked against GitHub's own Markdown renderer (cmark-gfm)."""

import re
from html import unescape

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options
from perfsleuth.report.escape import html_id, md_cell, md_code, md_fence, md_text, mermaid_label, one_line, shorten
from report_factory import HOSTILE


def gfm(text: str) -> str:
    """GitHub's renderer with raw HTML allowed: whatever survives here would reach the page."""
    return cmarkgfm.github_flavored_markdown_to_html(text, options=Options.CMARK_OPT_UNSAFE)


def cell_count(row: str) -> int:
    return len(re.split(r"(?<!\\)\|", row.strip().strip("|")))


def test_one_line_joins_lines_and_drops_control_characters():
    assert one_line("a\r\nb\tc\x00d\u2028e") == "a b cd e"
    assert one_line(None) == ""


def test_shorten_marks_the_cut():
    assert shorten("abcdef", 4) == "abc…"
    assert shorten("abc", 4) == "abc"
    assert shorten("abcdef", 0) == "abcdef"


@pytest.mark.parametrize("name", list(HOSTILE.values()))
def test_md_text_renders_literally(name):
    html = gfm(md_text(name))
    assert "<script" not in html and "<img" not in html and "<a " not in html
    assert html.startswith("<p>") and html.count("<p>") == 1


def test_md_text_escapes_link_markup_and_autolinks():
    assert md_text("[x](javascript:alert(1))") == r"\[x\](javascript:alert(1))"
    assert md_text("aten::mm at https://x.example www.y.example") == r"aten::mm at https\://x.example www\.y.example"
    assert "<a " not in gfm(md_text("see https://evil.example/a and www.evil.example"))


@pytest.mark.parametrize("text, escaped", [("- x", r"\- x"), ("1. y", r"1\. y"), ("12) z", r"12\) z"),
                                           ("+ a", r"\+ a"), ("# h", r"\# h"), ("a - b 1. c", "a - b 1. c"),
                                           ("---", r"\---"), ("14.65 ms", "14.65 ms"), ("-1.5", "-1.5")])
def test_md_text_defuses_list_and_heading_markers_at_the_start(text, escaped):
    assert md_text(text) == escaped
    html = gfm("- " + md_text(text))
    assert html.count("<li>") == 1 and "<ol" not in html and "<h1" not in html and "<ul>\n<li><ul>" not in html


@pytest.mark.parametrize(
    "name, code",
    [("aten::mm", "`aten::mm`"), ("a`b", "``a`b``"), ("``x", "``` ``x ```"), ("", "` `"), ("x\ny", "`x y`")],
)
def test_md_code_fence_outruns_backticks(name, code):
    assert md_code(name) == code


@pytest.mark.parametrize("name", list(HOSTILE.values()))
def test_md_code_keeps_the_name_inside_one_code_span(name):
    html = gfm(md_code(name))
    assert html.count("<code>") == 1 and "<script" not in html
    inner = re.search(r"<code>(.*)</code>", html, re.S).group(1)
    assert unescape(inner) == one_line(name)


@pytest.mark.parametrize("name", list(HOSTILE.values()))
@pytest.mark.parametrize("code", [False, True])
def test_md_cell_keeps_the_table_shape(name, code):
    row = f"| {md_cell(name, code=code)} | 7 |"
    table = "| name | n |\n|---|---|\n" + row
    assert "\n" not in row and cell_count(row) == 2
    html = gfm(table)
    body = html.split("<tbody>")[1]
    assert body.count("<td") == 2 and "<script" not in html
    assert "<td>7</td>" in body


def test_md_cell_code_pipe_comes_back_as_a_pipe_in_the_code():
    html = gfm("| a |\n|---|\n| " + md_cell("x|y", code=True) + " |")
    assert "<code>x|y</code>" in html


def test_md_fence_cannot_be_closed_by_its_content():
    block = md_fence("a\n````\n<script>", "python")
    assert block.startswith("`````python\n") and block.endswith("\n`````")
    html = gfm(block + "\n\nafter")
    assert html.count("<pre") == 1 and "````\n&lt;script&gt;" in html and "<p>after</p>" in html


@pytest.mark.parametrize("name", list(HOSTILE.values()))
def test_mermaid_label_has_no_special_characters(name):
    label = mermaid_label(name)
    assert re.fullmatch(r"[\w .,/+\-…]+", label), label
    assert '"' not in label and "#" not in label and "%" not in label and ";" not in label and ":" not in label


def test_mermaid_label_values():
    assert mermaid_label('op --> "end" %% #quot;') == "op -- end quot"
    assert mermaid_label("\n\n") == "unnamed"
    assert mermaid_label("x" * 100) == "x" * 39 + "…"


def test_html_id_is_a_safe_fragment():
    assert html_id("num-workers") == "num-workers"
    assert html_id('"><script>') == "script"
    assert html_id(None) == "x"


# GitHub's mention pattern (its MentionFilter): @ then a letter or digit, after the start or a non-word character.
GITHUB_MENTION = re.compile(r"(?:^|\W)@[a-z0-9][a-z0-9-]*", re.IGNORECASE)


def mentions_outside_code(html: str) -> list:
    """What GitHub would turn into mentions: text outside <code>/<pre>, entities decoded."""
    text = re.sub(r"<(code|pre)>.*?</\1>", "", html, flags=re.S)
    return GITHUB_MENTION.findall(unescape(re.sub(r"<[^>]+>", " ", text)))


@pytest.mark.parametrize("name", ["@octocat", "see @org/security-team/train.py(12): step", "cc @a-b, @c",
                                  "NVIDIA @H100", "x@y.com"])
def test_md_text_breaks_github_mentions_and_keeps_the_name_readable(name):
    """Issue 38, class 8: a frame under a folder named @org/security-team/, a device name or a graph-break
    reason in the PR comment notified them on every push. In text a word joiner follows the @; what is shown is
    the same characters otherwise."""
    html = gfm(md_text(name))
    assert mentions_outside_code(html) == []
    assert unescape(re.sub(r"<[^>]+>", "", html)).strip().replace("\u2060", "") == name
    assert mentions_outside_code(gfm(f"plain @octocat")) == [" @octocat"]  # the check itself can fail
    assert mentions_outside_code(gfm(md_code(name))) == []  # a code span is never a mention
