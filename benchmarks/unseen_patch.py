"""Edits of a COPY of a program's source, for benchmarks/unseen.py's independent A/B: the fix as a user
would type it, not through perfsleuth's run-time patching.

- `set_call_kwarg(src, names, kw, value)`: every call whose function is named one of `names`
  (`DataLoader(...)`, `torch.optim.SGD(...)`, `optim.Adam(...)`) gets `kw=value`, replacing the
  keyword's value when the call already has it;
- `prepend(src, code)`: `code` as the first statement (after the module docstring and any
  `from __future__` imports), e.g. `import torch; torch.set_num_threads(1)`.

Both parse the source with `ast` and edit its text by the nodes' positions, so the rest of the file
stays byte for byte; an edit that matches nothing raises PatchError (a fix that did not apply must
not be measured as if it had).
"""

from __future__ import annotations

import ast


class PatchError(ValueError):
    pass


def _offsets(data: bytes) -> list:
    starts = [0]
    for i, b in enumerate(data):
        if b == 0x0A:
            starts.append(i + 1)
    return starts


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def set_call_kwarg(src: str, names, kw: str, value: str) -> tuple:
    """The source with `kw=value` in every call of a function named in `names`; and how many calls."""
    names = set(names)
    data = src.encode()
    starts = _offsets(data)
    pos = lambda line, col: starts[line - 1] + col  # noqa: E731  (ast columns are UTF-8 byte offsets)
    edits = []
    for node in ast.walk(ast.parse(src)):
        if not isinstance(node, ast.Call) or _name(node.func) not in names:
            continue
        old = next((k for k in node.keywords if k.arg == kw), None)
        if old is not None:
            edits.append((pos(old.value.lineno, old.value.col_offset),
                          pos(old.value.end_lineno, old.value.end_col_offset), value.encode()))
            continue
        close = pos(node.end_lineno, node.end_col_offset) - 1  # the call's ")"
        before = data[:close].rstrip()
        empty = before.endswith(b"(")
        sep = b"" if empty else b" " if before.endswith(b",") else b", "
        edits.append((close, close, sep + f"{kw}={value}".encode()))
    if not edits:
        raise PatchError(f"no call of {' / '.join(sorted(names))} to give {kw}={value}")
    for a, b, text in sorted(edits, reverse=True):
        data = data[:a] + text + data[b:]
    out = data.decode()
    ast.parse(out)
    return out, len(edits)


def prepend(src: str, code: str) -> str:
    """`code` on its own line before the module's first statement that is neither its docstring nor a
    `from __future__` import."""
    body = ast.parse(src).body
    i = 0
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        i = 1
    while i < len(body) and isinstance(body[i], ast.ImportFrom) and body[i].module == "__future__":
        i += 1
    lines = src.splitlines(keepends=True)
    at = len(lines)
    if i < len(body):
        node = body[i]
        at = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
    out = "".join(lines[:at]) + code.rstrip("\n") + "\n" + "".join(lines[at:])
    ast.parse(out)
    return out
