"""``textDocument/codeAction``: "Apply candidate N" for each verified candidate faster than the original
(and, on a kernel the spec does not describe, "Create spec for NAME": see :mod:`.create_spec`).

Offered at a range inside a kernel whose latest job (the engine's, whichever session started
it; while it runs, the candidates so far) has results, best first (the best one preferred). The edit replaces the kernel's whole definition, located in the document's current
text, with the candidate's ``kernel_text``; a candidate that needs another launch configuration
or other compile options says which in a comment above it. When the kernel was edited since the job ran, the actions are
disabled (or, for clients without ``disabledSupport``, not offered); when it is gone, none are.
Clients with ``disabledSupport`` also see each rejected candidate as a disabled action whose
reason is the verifier's (e.g. ``correctness: held-out size {...}: 12 of 4000 elements wrong``).
"""
from __future__ import annotations

from lsprotocol import types

from ptxfactory.protocol import CandidateRow, Measured
from ptxfactory.protocol.lsp import CODE_ACTION_KIND
from ptxfactory.search.strategy import kernel_fingerprint

from ..jobs import path_key
from .create_spec import create_spec_actions
from .session import PtxServer
from .text import EOL, cuda_path, kernel_at

STALE = "the kernel changed since the job ran: optimise it again"


def register(server: PtxServer) -> None:
    options = types.CodeActionOptions(code_action_kinds=[CODE_ACTION_KIND], resolve_provider=False)
    server.feature(types.TEXT_DOCUMENT_CODE_ACTION, options)(code_action)


async def code_action(ls: PtxServer, params: types.CodeActionParams) -> list[types.CodeAction] | None:
    uri = params.text_document.uri
    if cuda_path(uri) is None or not _kind_requested(params.context.only):
        return None
    doc = ls.workspace.get_text_document(uri)
    found = kernel_at(doc.source, params.range, ls.position_encoding)
    if found is None:
        return None
    kernel, kernel_range = found
    create = await create_spec_actions(ls, uri, doc.source, kernel.name)
    if create is not None:  # the spec does not describe this kernel: "Create spec for NAME" (create_spec.py)
        return create
    job = await ls.engine.latest(path_key(uri), kernel.name)
    if job is None or not job.rows:
        return None
    rows = list(job.rows)
    baseline = job.baseline()
    stale = baseline is None or kernel_fingerprint(baseline.candidate.kernel_text) != kernel_fingerprint(kernel.text)
    if stale and not _client_supports_disabled(ls):
        return None
    number = job.numbers()
    indent = _indent_before(doc.source, kernel_range.start)
    actions = []
    for i, row in enumerate(job.faster()):
        new_text = replacement(row, baseline, indent)
        actions.append(types.CodeAction(
            title=title(number[row.key], row),
            kind=CODE_ACTION_KIND,
            is_preferred=(i == 0 and not stale) or None,
            disabled=types.CodeActionDisabled(reason=STALE) if stale else None,
            edit=_edit(ls, uri, doc.version, types.TextEdit(range=kernel_range, new_text=new_text)),
        ))
    if _client_supports_disabled(ls):
        actions += rejected_actions(rows, number)
    return actions


MAX_REJECTED_SHOWN = 20


def rejected_actions(rows: list[CandidateRow], number: dict[str, int]) -> list[types.CodeAction]:
    """A disabled action per candidate that was not verified, its reason the verifier's (at most 20)."""
    out = []
    for row in rows:
        if row.verified or row.result.outcome == "not_run":
            continue
        out.append(types.CodeAction(
            title=f"Candidate {number[row.key]} rejected: {row.candidate.description}",
            kind=CODE_ACTION_KIND,
            disabled=types.CodeActionDisabled(reason=row.reason),
        ))
    return out[:MAX_REJECTED_SHOWN]


def title(number: int, row: CandidateRow) -> str:
    """E.g. ``Apply candidate 3: 2.41x faster, 3.71 TB/s (88% of copy)``, figures at the largest bench size."""
    result = row.result
    assert isinstance(result, Measured)
    largest = max(result.timings, key=lambda t: t.bytes_moved)
    text = f"Apply candidate {number}: {result.speedup:.2f}x faster, {largest.gbps / 1000:.2f} TB/s ({largest.pct_of_copy:.0f}% of copy)"
    return text + (" (simulated)" if result.simulated else "")


def replacement(row: CandidateRow, baseline: CandidateRow | None, indent: str = "") -> str:
    """The candidate's kernel text, after a comment stating its launch, its template instantiation and its
    compile options when they differ from the original's (options such as ``-DTILE=64`` or
    ``-maxrregcount=64``, and the ``k<64>`` of a launch, live outside the kernel's text)."""
    cand = row.candidate
    notes = []
    if baseline is not None and cand.launch != baseline.candidate.launch:
        notes.append(f"Launch it with {cand.launch.describe()} (the original used {baseline.candidate.launch.describe()}).")
    if baseline is not None and cand.template_args != baseline.candidate.template_args:
        notes.append(f"Instantiate it as {cand.name_expression} (the original used {baseline.candidate.name_expression}).")
    if baseline is not None and sorted(cand.options) != sorted(baseline.candidate.options):
        notes.append(f"Compile with {' '.join(cand.options) or 'no extra options'}.")
    if not notes:
        return cand.kernel_text
    return f"// ptxfactory: {cand.description}. {' '.join(notes)}\n{indent}{cand.kernel_text}"


def _edit(ls: PtxServer, uri: str, version: int | None, edit: types.TextEdit) -> types.WorkspaceEdit:
    caps = ls.client_capabilities.workspace
    if caps and caps.workspace_edit and caps.workspace_edit.document_changes:
        doc = types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version)
        return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(text_document=doc, edits=[edit])])
    return types.WorkspaceEdit(changes={uri: [edit]})


def _kind_requested(only: list[str] | None) -> bool:
    return not only or any(CODE_ACTION_KIND == k or CODE_ACTION_KIND.startswith(k + ".") for k in only)


def _client_supports_disabled(ls: PtxServer) -> bool:
    td = ls.client_capabilities.text_document
    return bool(td and td.code_action and td.code_action.disabled_support)


def _indent_before(text: str, start: types.Position) -> str:
    """The whitespace before the kernel on its first line ('' when anything else precedes it)."""
    lines = EOL.split(text)
    prefix = lines[start.line][: start.character] if start.line < len(lines) else ""
    return prefix if prefix.isspace() else ""
