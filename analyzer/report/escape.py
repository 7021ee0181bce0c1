"""Escaping for names that come from traces: kernel and op names, file paths, rule text.

Everything a trace can name is data, never markup. HTML escaping is Jinja2's autoescape; this module
covers the contexts autoescape does not know: GitHub-flavoured Markdown (inline text, inline code,
table cells) and mermaid labels.
"""

from __future__ import annotations

import re

# Characters CommonMark lets us backslash-escape that could start markup inline: emphasis, code,
# links and images, raw HTML, entities, table pipes, strikethrough. GFM's autolinks are stopped by
# escaping the `:` of `://` and the `.` of `www.`. (GFM still turns a name@host.tld into a mailto:
# link after any escaping; that is a link, never code.)
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>#!|~&])")
# A list or heading marker where the text starts a line (a bullet item's text, a table cell).
_LEADING = re.compile(r"^(\s*)(?:([-+=])(?=[\s\-=]|$)|(\d+)([.)])(?=\s|$))")
_AUTOLINK = re.compile(r"(?:(?<=www)\.|:(?=//))", re.IGNORECASE)
# GitHub turns @user and @org/team in text (not in code) into mentions that notify them, after any
# backslash escaping. A word joiner (U+2060, invisible) after the @ breaks its pattern, which needs a
# letter or digit there; names in code spans are never mentions.
_MENTION = re.compile(r"@(?=[A-Za-z0-9])")
MENTION_BREAK = "@\u2060"
_NEWLINES = re.compile(r"[\r\n\t\v\f\u2028\u2029\x85]+")
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")
_BACKTICK_RUN = re.compile(r"`+")
# Mermaid labels keep letters, digits, spaces and a few harmless marks; everything else
# (quotes, `#` entity codes, `%%` comments, `;`, `:` separators, brackets, `<>`, backticks) goes.
_MERMAID_UNSAFE = re.compile(r"[^\w .,/+\-]", re.UNICODE)
_SPACES = re.compile(r"\s{2,}")


# Characters that reorder or hide text (bidi embeddings, overrides and isolates, directional marks,
# zero-width joiners and spaces, the BOM): `evil\u202etxt.exe` displays as `evilexe.txt`. They are
# shown as <U+202E> wherever a name is displayed (HTML, Markdown, terminal) and escaped in the JSON.
_INVISIBLE = re.compile("[\u00ad\u061c\u115f\u1160\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f"
                        "\u3164\ufeff\ufff9-\ufffb]")
# What a terminal must never receive from data: C0 and C1 controls, DEL (escape sequences start there).
_TERMINAL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def visible(text: object) -> str:
    """`text` with every bidi control and invisible format character shown as <U+XXXX>."""
    s = "" if text is None else str(text)
    return _INVISIBLE.sub(lambda m: f"<U+{ord(m.group(0)):04X}>", s)


def terminal(text: object, keep_newlines: bool = False) -> str:
    """`text` safe to print: control characters escaped as \\x1b, \\n ... (newlines kept when asked),
    bidi and invisible characters shown as <U+XXXX>. Nothing a file name or a trace holds can move
    the cursor, set the window title or reorder what is shown."""
    def esc(m: re.Match) -> str:
        ch = m.group(0)
        if keep_newlines and ch in "\n\t":
            return ch
        return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(ch) or (
            f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"<U+{ord(ch):04X}>")

    return _TERMINAL.sub(esc, visible(text))


def json_text(text: str) -> str:
    """JSON text with the bidi and invisible characters of its strings written as \\uXXXX escapes:
    the same data, displayed safely by editors and viewers (JSON structure itself is ASCII)."""
    return _INVISIBLE.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


def one_line(text: object) -> str:
    """`text` as a single line: newlines and tabs become one space, control characters go, bidi and
    invisible characters are shown as <U+XXXX>."""
    s = "" if text is None else str(text)
    return visible(_CONTROL.sub("", _NEWLINES.sub(" ", s)))


def shorten(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, with an ellipsis when cut."""
    if limit < 1 or len(text) <= limit:
        return text
    return text[: limit - 1] + "…"


def md_text(text: object, limit: int = 0) -> str:
    """Inline Markdown text that renders literally: no emphasis, links, HTML, or table breaks."""
    escaped = _MD_SPECIAL.sub(r"\\\1", shorten(one_line(text), limit))
    escaped = _LEADING.sub(_defuse_marker, escaped)
    escaped = _MENTION.sub(MENTION_BREAK, escaped)
    return _AUTOLINK.sub(lambda m: "\\" + m.group(0), escaped)


def _defuse_marker(m: re.Match) -> str:
    if m.group(2):
        return f"{m.group(1)}\\{m.group(2)}"
    return f"{m.group(1)}{m.group(3)}\\{m.group(4)}"


def md_code(text: object, limit: int = 0, *, in_table: bool = False) -> str:
    """An inline code span holding `text` literally, whatever backticks it contains.

    The fence is one backtick longer than the longest run inside. In a table cell (`in_table`)
    pipes are escaped as `\\|`, which GFM turns back into `|` inside the code span.
    """
    s = shorten(one_line(text), limit)
    if not s:
        return "` `"
    runs = _BACKTICK_RUN.findall(s)
    fence = "`" * (max((len(r) for r in runs), default=0) + 1)
    if s.startswith("`") or s.endswith("`") or (s.startswith(" ") and s.endswith(" ")):
        s = f" {s} "
    if in_table:
        s = s.replace("|", "\\|")
    return f"{fence}{s}{fence}"


def md_cell(text: object, limit: int = 0, *, code: bool = False) -> str:
    """One Markdown table cell: a single line whose pipes cannot split the row."""
    if code:
        return md_code(text, limit, in_table=True)
    return md_text(text, limit) or " "


def md_fence(code: str, info: str = "") -> str:
    """A fenced code block that `code` cannot close early (fence longer than any backtick run)."""
    runs = _BACKTICK_RUN.findall(code)
    fence = "`" * max(3, max((len(r) for r in runs), default=0) + 1)
    info = re.sub(r"[^\w+\-.]", "", info)
    body = visible(_CONTROL.sub("", code.replace("\r\n", "\n").replace("\r", "\n"))).rstrip("\n")
    return f"{fence}{info}\n{body}\n{fence}"


def mermaid_label(text: object, limit: int = 40) -> str:
    """A label safe inside a mermaid `"..."` string: no quotes, entity codes, comments or brackets."""
    s = _MERMAID_UNSAFE.sub(" ", one_line(text))
    s = _SPACES.sub(" ", s).strip()
    return shorten(s, limit) or "unnamed"


def html_id(text: object) -> str:
    """A fragment identifier made of `[a-z0-9-]` only (for anchors built from rule slugs)."""
    s = re.sub(r"[^a-z0-9]+", "-", one_line(text).lower()).strip("-")
    return s or "x"
