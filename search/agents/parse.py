"""Reading models' replies: ideas, a kernel, its launch, a one-line lesson, whatever the chatter around them.

Nothing here raises on a bad reply: each reader returns None (or an empty list) when the reply has
nothing it can use, and the agent records that as a failed turn without a lesson.
"""
from __future__ import annotations

import json
import re

from ptxfactory.protocol import LaunchConfig
from ptxfactory.protocol.expr import ExprError, symbols_in

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:^[ \t]*\1[ \t]*$|\Z)", re.S | re.M)
_IDEA = re.compile(r"^\s*(?:IDEA\s*\d*\s*[:.)-]|\d+\s*[.)]|[-*]\s+)\s*(.+)$", re.I)
_LESSON = re.compile(r"^\s*\**\s*LESSON\s*\**\s*:\s*\**\s*(.+)$", re.I | re.M)
_LAUNCH = re.compile(r"^\s*\**\s*LAUNCH\s*\**\s*:\s*(\{.*\})\s*$", re.I | re.M)


def code_blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced block as (language, body), in order; an unterminated last fence (a reply cut short) runs to the end."""
    return [(m.group(2).lower(), m.group(3)) for m in _FENCE.finditer(text or "")]


def _defines(code: str, kernel: str) -> bool:
    return bool(re.search(r"__global__[^;{]*?\b" + re.escape(kernel) + r"\s*\(", code, re.S))


def kernel_code(text: str, kernel: str) -> str | None:
    """The code that defines ``kernel`` (``__global__ ... kernel(``): the last fenced block that does (a reply that
    restates its fix puts the final version last), else the reply's bare text from the first line of the
    definition (or the helpers before it) when it has no fences; None when no definition is there."""
    for _, body in reversed(code_blocks(text)):
        if _defines(body, kernel):
            return body.strip("\n") + "\n"
    if "```" in (text or "") or not _defines(text or "", kernel):
        return None
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if _defines("\n".join(lines[i:]), kernel) and not _defines("\n".join(lines[i + 1:]), kernel))
    # take the helpers and qualifiers just above the definition too (template, extern "C", __device__ functions)
    while start > 0 and re.match(r"\s*(template|extern|__device__|__forceinline__|#|static|constexpr|}|{|$|//|\w+.*[;{]$)", lines[start - 1]):
        start -= 1
    return "\n".join(lines[start:]).strip("\n") + "\n"


def launch(text: str) -> LaunchConfig | None:
    """A launch the reply states: a ``LAUNCH: {"grid": [...], "block": [...], "shared_mem": ...}`` line, or a
    fenced JSON block with ``grid`` and ``block``; None when there is none or it does not parse (bad
    JSON, unknown fields, expressions that are not the spec's safe integer expressions)."""
    found = [m.group(1) for m in _LAUNCH.finditer(text or "")]
    found += [body for lang, body in code_blocks(text) if lang in ("json", "") and '"grid"' in body]
    for raw in reversed(found):
        try:
            data = json.loads(raw)
            cfg = LaunchConfig.model_validate(data)
            for value in [*cfg.grid, *cfg.block, cfg.shared_mem]:
                if isinstance(value, str):
                    symbols_in(value)
        except (ValueError, TypeError, ExprError):
            continue
        return cfg
    return None


def ideas(text: str, limit: int) -> list[str]:
    """Up to ``limit`` distinct ideas: lines ``IDEA: ...`` (or ``IDEA 2: ...``) if any, else numbered or bulleted
    items; each one line, at most 300 characters. Text inside code fences is ignored."""
    prose = _FENCE.sub("", text or "")
    lines = prose.splitlines()
    tagged = [m.group(1) for line in lines if re.match(r"\s*IDEA\b", line, re.I) and (m := _IDEA.match(line))]
    items = tagged or [m.group(1) for line in lines if (m := _IDEA.match(line))]
    out: list[str] = []
    for item in items:
        item = re.sub(r"\s+", " ", item.strip(" *`")).strip()[:300]
        if len(item) >= 8 and item.lower() not in {o.lower() for o in out}:
            out.append(item)
        if len(out) >= limit:
            break
    return out


def lesson(text: str) -> str | None:
    """The reply's ``LESSON: ...`` line (the first), one line of at most 200 characters; None without one."""
    m = _LESSON.search(_FENCE.sub("", text or ""))
    if not m:
        return None
    line = re.sub(r"\s+", " ", m.group(1).strip(" *`")).strip()
    return line[:200] or None
