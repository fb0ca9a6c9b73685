"""The "Create spec for NAME" code action, on a kernel that ``FILE.toml`` does not describe.

Part of ``textDocument/codeAction`` (:mod:`.code_actions` asks :func:`create_spec_actions` first). The
spec is scaffolded from the editor's text of the ``.cu`` file by :mod:`ptxfactory.harness.scaffold`
(the same code as ``ptxfactory init``). The action's edit never overwrites anything:

- no ``FILE.toml``: a ``CreateFile`` (``overwrite`` and ``ignoreIfExists`` both false, so the whole edit
  fails if the file appeared meanwhile, rather than writing into it) and the spec's text inserted into it;
  offered to clients that declare the ``create`` resource operation, else (with ``disabledSupport``) shown
  disabled with the ``ptxfactory init`` command to run instead;
- a ``FILE.toml`` without the kernel's table: the table appended at its end (the editor's text when
  the spec is open there, else the file's); one that is not TOML gets a disabled action saying so.
"""
from __future__ import annotations

import asyncio
import functools
import re
from pathlib import Path

from lsprotocol import types
from pygls import uris

from ptxfactory.harness.scaffold import ScaffoldError, SpecAddition, described_in, plan_spec, read_spec_text
from ptxfactory.protocol import spec_path_for
from ptxfactory.protocol.lsp import CODE_ACTION_KIND

from .session import PtxServer
from .text import cuda_path, position_at

_TABLE = re.compile(r"^\s*\[\s*kernel\.([A-Za-z_]\w*)\s*[\].]", re.M)


def title(kernel: str) -> str:
    """``Create spec for rmsnorm``."""
    return f"Create spec for {kernel}"


async def create_spec_actions(ls: PtxServer, uri: str, source: str, kernel: str) -> list[types.CodeAction] | None:
    """The "Create spec for ``kernel``" action for the ``.cu`` document ``uri`` whose text is ``source``.

    None when the spec already has a ``[kernel.NAME]`` table (the other code actions apply); else a list
    of one action (enabled, or disabled with the reason), or empty for a client that can show neither.
    The scaffold is made on a thread (tree-sitter and validation: ~0.3 s for a 3000-line file) and cached
    per (text, kernel, spec text), since editors ask for code actions at every cursor move.
    """
    path = cuda_path(uri)
    if path is None:
        return None
    spec_path = spec_path_for(path)
    spec_uri = uris.from_fs_path(str(spec_path)) or spec_path.as_uri()
    try:
        existing, version = _spec_text(ls, spec_uri, spec_path)
    except ScaffoldError as exc:
        return _disabled(ls, kernel, str(exc))
    if existing is not None and kernel in _described(existing):
        return None
    addition = await asyncio.to_thread(_plan, source, str(path), kernel, existing)
    if isinstance(addition, str):
        return _disabled(ls, kernel, addition)
    if addition.create:
        if not _can_create(ls):
            return _disabled(ls, kernel, f"this editor cannot create files from a code action: run "
                                         f"`ptxfactory init {path.name} --kernel {kernel}`")
        ops: list = [
            types.CreateFile(uri=spec_uri, options=types.CreateFileOptions(overwrite=False, ignore_if_exists=False)),
            types.TextDocumentEdit(
                text_document=types.OptionalVersionedTextDocumentIdentifier(uri=spec_uri, version=None),
                edits=[types.TextEdit(range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0)),
                                      new_text=addition.text)],
            ),
        ]
        edit = types.WorkspaceEdit(document_changes=ops)
    else:
        end = position_at(existing, len(existing.encode()), ls.position_encoding)
        text_edit = types.TextEdit(range=types.Range(start=end, end=end), new_text=addition.text)
        if _document_changes(ls):
            doc = types.OptionalVersionedTextDocumentIdentifier(uri=spec_uri, version=version)
            edit = types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(text_document=doc, edits=[text_edit])])
        else:
            edit = types.WorkspaceEdit(changes={spec_uri: [text_edit]})
    return [types.CodeAction(title=title(kernel), kind=CODE_ACTION_KIND, edit=edit)]


@functools.lru_cache(maxsize=16)
def _plan(source: str, path: str, kernel: str, existing: str | None) -> SpecAddition | str:
    """:func:`plan_spec` for one kernel, or the message of its :class:`ScaffoldError`."""
    try:
        return plan_spec(source, Path(path), [kernel], existing)
    except ScaffoldError as exc:
        return str(exc)


def _spec_text(ls: PtxServer, spec_uri: str, spec_path: Path) -> tuple[str | None, int | None]:
    """The spec's text and version: the editor's when it has the file open, else the file's (version None)."""
    doc = ls.workspace.text_documents.get(spec_uri)
    if doc is not None:
        return doc.source, doc.version
    return read_spec_text(spec_path), None


def _described(text: str) -> set[str]:
    """Kernels the spec text has tables for; for text that is not TOML, the table headers it has."""
    try:
        return described_in(text)
    except ScaffoldError:
        return set(_TABLE.findall(text))


def _can_create(ls: PtxServer) -> bool:
    """Whether the client applies ``CreateFile`` operations (which only exist in ``documentChanges``)."""
    caps = ls.client_capabilities.workspace
    edit = caps.workspace_edit if caps else None
    return bool(edit and edit.resource_operations and types.ResourceOperationKind.Create in edit.resource_operations)


def _document_changes(ls: PtxServer) -> bool:
    caps = ls.client_capabilities.workspace
    return bool(caps and caps.workspace_edit and caps.workspace_edit.document_changes)


def _disabled(ls: PtxServer, kernel: str, reason: str) -> list[types.CodeAction]:
    td = ls.client_capabilities.text_document
    if not (td and td.code_action and td.code_action.disabled_support):
        return []
    return [types.CodeAction(title=title(kernel), kind=CODE_ACTION_KIND, disabled=types.CodeActionDisabled(reason=reason))]
