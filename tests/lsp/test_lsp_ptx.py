"""A ``.ptx`` file in the editor: lens, "Create spec", ptxas diagnostics at their line, the job, "Apply candidate",
and ``ptxfactory.show`` (the PTX and SASS views as ``ptxfactory:`` documents). Server: simulated backend."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from _lsp_support import JOB_TIMEOUT, apply_edits, line_of, open_document, text_edits, until

from ptxfactory.harness.cuda_paths import tool_path
from ptxfactory.harness.ptx import is_ptx, parse_entries

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rowsum_ptx"
pytestmark = pytest.mark.skipif(tool_path("ptxas") is None, reason="no ptxas: PTX files cannot be assembled here")


@pytest.fixture
def rowsum_ptx(tmp_path: Path) -> Path:
    """A copy of examples/rowsum_ptx (the .ptx, its spec and ref.py); returns the .ptx's path."""
    work = tmp_path / "src"
    work.mkdir()
    for name in ("rowsum_ptx.ptx", "rowsum_ptx.ptx.toml", "ref.py"):
        shutil.copy(EXAMPLE / name, work / name)
    return work / "rowsum_ptx.ptx"


async def lenses(client: LanguageClient, uri: str) -> list[types.CodeLens]:
    return await client.text_document_code_lens_async(types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))) or []


async def actions_at(client: LanguageClient, uri: str, line: int) -> list[types.CodeAction]:
    pos = types.Position(line=line, character=4)
    return await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=types.Range(start=pos, end=pos),
        context=types.CodeActionContext(diagnostics=[]),
    )) or []


async def execute(client: LanguageClient, command: str, *arguments) -> dict:
    return await client.workspace_execute_command_async(types.ExecuteCommandParams(command=command, arguments=list(arguments)))


async def test_entry_without_spec_offers_create_spec_then_gets_the_lens(vscode: LanguageClient, rowsum_ptx: Path):
    """No spec: no lens, "Create spec for rowsum_ptx" inside the entry, whose edit creates a spec that validates;
    with the example's spec the lens sits on the .entry line."""
    spec = rowsum_ptx.with_name("rowsum_ptx.ptx.toml")
    spec.unlink()
    text = rowsum_ptx.read_text()
    uri = open_document(vscode, rowsum_ptx)
    assert await lenses(vscode, uri) == []

    actions = await actions_at(vscode, uri, line_of(text, "ld.global.f32"))
    assert [a.title for a in actions] == ["Create spec for rowsum_ptx"]

    shutil.copy(EXAMPLE / "rowsum_ptx.ptx.toml", spec)
    found = await lenses(vscode, uri)
    assert [(lens.range.start.line, lens.command.title) for lens in found] == [(line_of(text, ".entry rowsum_ptx"), "Optimise kernel")]


async def test_malformed_ptx_gets_the_ptxas_error_at_its_line(vscode: LanguageClient, rowsum_ptx: Path):
    """An unknown register in one instruction: the diagnostic is ptxas's message on that line, nothing else breaks
    (the lens is still there)."""
    text = rowsum_ptx.read_text().replace("add.f32             %f1, %f1, %f2;", "add.f32             %f1, %f1, %bogus;")
    rowsum_ptx.write_text(text)
    uri = open_document(vscode, rowsum_ptx)

    diagnostics = await until(lambda: vscode.diagnostics.get(uri), what="diagnostics")

    assert any(d.range.start.line == line_of(text, "%bogus") and "ptxas" in d.message and "bogus" in d.message for d in diagnostics), \
        [(d.range.start.line, d.message) for d in diagnostics]
    assert [lens.command.title for lens in await lenses(vscode, uri)] == ["Optimise kernel"]


async def test_job_on_ptx_then_apply_and_show_ptx_and_sass(vscode: LanguageClient, rowsum_ptx: Path):
    """The job runs the PTX generators only; "Apply candidate" replaces the entry with PTX that still parses;
    "Show PTX"/"Show SASS" lenses appear; ptxfactory.show answers both views with the hot loop marked, opens
    them with window/showDocument, and serves them by workspace/textDocumentContent."""
    text = rowsum_ptx.read_text()
    uri = open_document(vscode, rowsum_ptx)
    info = await execute(vscode, "ptxfactory.optimise", {"uri": uri, "kernel": "rowsum_ptx", "wait": True})
    assert info["state"] == "finished", info

    jobs = (await execute(vscode, "ptxfactory.jobs", {}))["jobs"]
    job_id = jobs[0]["job_id"]
    titles = [lens.command.title for lens in await lenses(vscode, uri)]
    assert titles[0] == "Optimise kernel" and "Show PTX" in titles and "Show SASS" in titles

    actions = await actions_at(vscode, uri, line_of(text, "ld.global.f32"))
    applicable = [a for a in actions if a.title.startswith("Apply candidate") and a.edit is not None]
    assert applicable, [a.title for a in actions]
    edited = apply_edits(text, text_edits(applicable[0].edit, uri))
    assert is_ptx(edited) and [e.name for e in parse_entries(edited)] == ["rowsum_ptx"] and edited != text

    for view, marker in (("ptx", "ld.global"), ("sass", "LDG")):
        if view == "sass" and tool_path("nvdisasm") is None and tool_path("cuobjdump") is None:
            continue
        shown = await execute(vscode, "ptxfactory.show", {"job_id": job_id, "candidate": 1, "view": view})
        assert shown["candidate"] == 1 and shown["uri"].startswith("ptxfactory://show/") and shown["uri"].endswith(f".{view}")
        for key in ("text", "original_text"):
            assert "ptxfactory: hot loop begins" in shown[key] and marker in shown[key], shown[key][:400]
        assert "of the original of rowsum_ptx" in shown["original_text"] and "of candidate 1 of rowsum_ptx" in shown["text"]
        assert [d.uri for d in vscode.shown_documents[-2:]] == [shown["original_uri"], shown["uri"]]
        served = await vscode.workspace_text_document_content_async(types.TextDocumentContentParams(uri=shown["uri"]))
        assert served.text == shown["text"]


async def test_show_refuses_unknown_jobs_and_uris(vscode: LanguageClient, rowsum_ptx: Path):
    """An unknown job, and a ptxfactory: URI this session never made, are InvalidParams."""
    with pytest.raises(Exception, match="no job"):
        await execute(vscode, "ptxfactory.show", {"job_id": "nope"})
    with pytest.raises(Exception, match="unknown here"):
        await vscode.workspace_text_document_content_async(types.TextDocumentContentParams(uri="ptxfactory://show/x/0/k.ptx"))
