"""Reading models' replies: ideas, a kernel (CUDA C++, or a PTX ``.entry``: :func:`ptx_entry`), its launch, a one-line
lesson, whatever the chatter around them.

Nothing here raises on a bad reply: each reader returns None (or an empty list) when the reply has
nothing it can use, and the agent records that as a failed turn without a lesson.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

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


# --- PTX replies (a kernel written in PTX: the reply is a new ``.entry``) --------------------------------------

_PTX_HEADER = re.compile(r"^[ \t]*\.(?:version|target|address_size)\b[^\n]*(?:\n|\Z)", re.M)
_PTX_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$%][\w$]*)\s*\(")


@dataclass(frozen=True)
class PtxCode:
    """What a reply holds for a PTX kernel: ``code`` (the new entry, with the ``.func`` helpers and module-level
    declarations written before it in its block; no module header), or None with ``why`` and the ``outcome`` to
    record (``"no_code"``: no complete entry; ``"bad_signature"``: an entry of another name or ``.param`` list)."""

    code: str | None
    why: str | None = None
    outcome: str | None = None


def _param_list(params) -> str:
    return ", ".join(f".{p.type} {p.name}" + (f"[{p.array}]" if p.array is not None else "") for p in params)


def ptx_entry(text: str, original) -> PtxCode:
    """The new ``.entry`` a reply writes for the PTX kernel whose parsed entry is ``original``
    (:class:`ptxfactory.harness.ptx.PtxEntry`), checked against it: the same name and the same ``.param`` list
    (names, types and aggregates in order; the ``.ptr``/``.align`` attributes are the spec's to judge).

    Read from the last fenced block (```ptx, a plain ``` or any other) that holds an ``.entry`` of that name, else the
    reply's bare text when it has no fences. The module header (``.version``, ``.target``, ``.address_size``) is
    dropped: the candidate keeps its module's, as every PTX candidate does; another entry in the same block before
    it is left out. Never raises: a reply without a usable entry is a :class:`PtxCode` whose ``code`` is None."""
    from ptxfactory.harness.ptx import PtxSyntaxError, blank_comments, parse_entries

    text = text or ""
    blocks = [body for _, body in code_blocks(text)]
    if not blocks and "```" not in text:
        blocks = [text]  # bare text: the entry alone is taken below (the prose before it is not PTX)
        bare = True
    else:
        bare = False
    found: PtxCode | None = None  # the latest refusal, for the reason given when no block is usable
    for body in reversed(blocks):
        if not _PTX_ENTRY.search(blank_comments(body)):
            continue
        try:
            entries = parse_entries(body)
        except PtxSyntaxError as exc:
            found = found or PtxCode(None, f"the reply's PTX cannot be read ({exc}): an entry cut short?", "no_code")
            continue
        mine = [e for e in entries if e.name == original.name]
        if not mine:
            names = ", ".join(e.name for e in entries) or "none complete"
            found = found or PtxCode(None, f"the reply's .entry is named {names}, not {original.name}", "bad_signature")
            continue
        entry = mine[-1]
        wanted, got = [(p.name, p.type, p.array) for p in original.params], [(p.name, p.type, p.array) for p in entry.params]
        if got != wanted:
            return PtxCode(None, f"the reply's .entry {original.name} takes ({_param_list(entry.params)}), the original "
                                 f"({_param_list(original.params)}): the .param list must stay", "bad_signature")
        before = [e for e in entries if e.end <= entry.start]
        start = entry.start if bare else (before[-1].end if before else 0)
        code = _PTX_HEADER.sub("", body[start:entry.end]).strip("\n")
        return PtxCode(code + "\n")
    if found is not None:
        return found
    return PtxCode(None, f"the reply had no .entry {original.name}", "no_code")
