"""``ptxfactory.optimise`` end to end: progress on a server-created token, then "Apply candidate" code actions.

Every test here runs the server with ``--backend simulated``: the SimulatedDevice never runs a
kernel and never verifies; its timings are a model. These tests check the LSP flow, not kernels.
"""
from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from ptxfactory.harness.compile import Compiled, compile_candidate
from ptxfactory.harness.source import find_kernel, find_kernels
from ptxfactory.protocol import Candidate, LaunchConfig

from _lsp_support import (
    MISSING_GENERATORS, apply_edits, line_of, open_document, progress_ended, replace_document, text_edits, until,
)

needs_generators = pytest.mark.skipif(
    bool(MISSING_GENERATORS), reason=f"generator module(s) not written yet: {', '.join(MISSING_GENERATORS)}",
)


async def execute(client: LanguageClient, command: str, *arguments) -> dict:
    return await client.workspace_execute_command_async(types.ExecuteCommandParams(command=command, arguments=list(arguments)))


async def code_actions(client: LanguageClient, uri: str, line: int) -> list[types.CodeAction]:
    position = types.Position(line=line, character=4)
    return await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=types.Range(start=position, end=position),
        context=types.CodeActionContext(diagnostics=[]),
    )) or []


@needs_generators
async def test_optimise_then_apply_the_preferred_candidate(client: LanguageClient, rmsnorm: Path):
    """Lens command → job id at once → begin/report/end on the server-created token → one action per faster
    candidate, the best preferred → its edit, applied, leaves a file that defines rmsnorm and compiles (NVRTC).
    Simulated backend: the speedups are modelled, not measured."""
    text = rmsnorm.read_text()
    uri = open_document(client, rmsnorm, text)
    lens = (await client.text_document_code_lens_async(types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))))[0]

    started = await execute(client, lens.command.command, *lens.command.arguments)

    assert set(started) >= {"job_id", "token"} and not started.get("already_running")
    token = started["token"]
    assert token in client.progress_reports  # created by the server through window/workDoneProgress/create
    values = await until(lambda: progress_ended(client, token), what="the job's progress to end")
    begin, *reports, end = values
    assert isinstance(begin, types.WorkDoneProgressBegin) and begin.title == "Optimising rmsnorm"
    assert reports and all(isinstance(r, types.WorkDoneProgressReport) for r in reports)
    percentages = [r.percentage for r in reports]
    assert percentages == sorted(percentages) and percentages[-1] > 0
    assert re.search(r"best: \d+\.\d\dx faster \(simulated\)", end.message), end.message

    actions = await code_actions(client, uri, line_of(text, "float sum = 0.0f;"))

    assert actions, "no code action for a finished job with faster candidates"
    assert all(a.kind == "refactor.rewrite.ptxfactory" and "x faster" in a.title and a.title.endswith("(simulated)") for a in actions)
    speedups = [float(re.search(r"(\d+\.\d+)x faster", a.title).group(1)) for a in actions]
    # the job's best first (the first evaluated of those within 1% of the fastest: one notion of best), then fastest first
    assert speedups[1:] == sorted(speedups[1:], reverse=True) and speedups[0] * 1.01 >= max(speedups) and speedups[-1] >= 1.0
    assert f"best: {speedups[0]:.2f}x faster" in end.message  # the end message names the preferred candidate
    preferred = [a for a in actions if a.is_preferred]
    assert len(preferred) == 1 and preferred[0] is actions[0]
    assert re.match(r"Apply candidate \d+: \d+\.\d\dx faster, \d+\.\d\d TB/s \(\d+% of copy\) \(simulated\)$", preferred[0].title)

    edits = text_edits(preferred[0].edit, uri)
    new_text = apply_edits(text, edits)

    assert len(edits) == 1
    inserted = edits[0].new_text
    assert inserted in new_text and new_text != text
    assert new_text.startswith(text[: text.index('extern "C"')])  # what precedes the kernel is kept
    assert [k.name for k in find_kernels(inserted)] == ["rmsnorm"]
    assert find_kernel(new_text, "rmsnorm").text != find_kernel(text, "rmsnorm").text
    if inserted.startswith("// ptxfactory:"):  # a free launch: the needed launch is stated
        assert "Launch it with grid=(" in inserted.splitlines()[0]
    candidate = Candidate(
        kernel_name="rmsnorm", source=new_text, kernel_text=find_kernel(new_text, "rmsnorm").text,
        launch=LaunchConfig(grid=["M"], block=[256]),
    )
    compiled = await asyncio.to_thread(compile_candidate, candidate, "sm_90a")
    assert isinstance(compiled, Compiled), getattr(compiled, "log", "")

    # The editor applied it: the job's results no longer describe this kernel.
    replace_document(client, uri, new_text, version=2)
    stale = await code_actions(client, uri, line_of(new_text, "rmsnorm("))
    if client.capabilities.text_document.code_action.disabled_support:
        assert stale and all(a.disabled and "changed" in a.disabled.reason and not a.is_preferred for a in stale)
    else:
        assert stale == []

    # The kernel is gone from the buffer: nothing to apply; rmsnorm_v2 has no spec table, so only "Create spec".
    gone = new_text.replace("rmsnorm(", "rmsnorm_v2(")
    replace_document(client, uri, gone, version=3)
    assert [a.title for a in await code_actions(client, uri, line_of(gone, "rmsnorm_v2("))] == ["Create spec for rmsnorm_v2"]


async def test_malformed_spec_is_shown_with_file_and_line(vscode: LanguageClient, rmsnorm: Path):
    """A bad dtype in the spec: the progress ends and window/showMessage (Error) names file, line and key;
    no code action appears. Simulated backend (never reached)."""
    spec = rmsnorm.with_name("rmsnorm.cu.toml")
    lines = spec.read_text().splitlines(keepends=True)
    bad = next(i for i, line in enumerate(lines) if 'name = "eps"' in line)
    lines[bad] = lines[bad].replace('dtype = "f32"', 'dtype = "float32"')
    spec.write_text("".join(lines))
    text = rmsnorm.read_text()
    uri = open_document(vscode, rmsnorm, text)

    started = await execute(vscode, "ptxfactory.optimise", {"uri": uri, "kernel": "rmsnorm"})

    begin, *_, end = await until(lambda: progress_ended(vscode, started["token"]), what="the progress end")
    errors = await until(lambda: [m for m in vscode.messages if m.type == types.MessageType.Error], what="window/showMessage")
    assert f"rmsnorm.cu.toml:{bad + 1}: kernel.rmsnorm.args[5].dtype" in errors[0].message
    assert str(spec) in errors[0].message
    assert f"rmsnorm.cu.toml:{bad + 1}" in end.message
    assert await code_actions(vscode, uri, line_of(text, "float sum = 0.0f;")) == []


async def test_unknown_kernel_is_reported(vscode: LanguageClient, rmsnorm: Path):
    """A kernel the spec does not describe: JobError, shown as an error naming the spec. Simulated backend (never reached)."""
    uri = open_document(vscode, rmsnorm)

    started = await execute(vscode, "ptxfactory.optimise", {"uri": uri, "kernel": "softmax"})

    await until(lambda: progress_ended(vscode, started["token"]), what="the progress end")
    errors = await until(lambda: [m for m in vscode.messages if m.type == types.MessageType.Error], what="window/showMessage")
    assert "no [kernel.softmax] table" in errors[0].message


@pytest.mark.parametrize("arguments, complaint", [
    ([{"uri": "file:///tmp/x.cu"}], "kernel"),
    ([], "one argument object"),
    ([{"uri": "file:///tmp/x.py", "kernel": "k"}], "not a file: URI of a .cu"),
])
async def test_bad_arguments_are_invalid_params(vscode: LanguageClient, arguments, complaint):
    """Malformed ``ptxfactory.optimise`` arguments are refused at once with InvalidParams. Simulated backend (never reached)."""
    with pytest.raises(Exception, match=re.escape(complaint)):
        await execute(vscode, "ptxfactory.optimise", *arguments)
    assert vscode.progress_reports == {}


@needs_generators
async def test_cancel_from_the_progress_ui(vscode: LanguageClient, rmsnorm: Path):
    """window/workDoneProgress/cancel on the token stops the job between candidates; the progress ends "cancelled".
    Simulated backend."""
    uri = open_document(vscode, rmsnorm)
    started = await execute(vscode, "ptxfactory.optimise", {"uri": uri, "kernel": "rmsnorm"})
    token = started["token"]
    await until(lambda: len(vscode.progress_reports.get(token, [])) >= 3, what="the first candidates")

    vscode.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))

    *_, last, end = await until(lambda: progress_ended(vscode, token), what="the progress end")
    assert "cancelled" in end.message
    assert last.percentage < 90  # stopped early, not run to completion
    again = await execute(vscode, "ptxfactory.cancel", {"job_id": started["job_id"]})
    assert again == {"job_id": started["job_id"], "cancelled": False, "state": "cancelled"}


@needs_generators
async def test_cancel_command_without_work_done_progress(plain_client: LanguageClient, rmsnorm: Path):
    """A client without window.workDoneProgress gets ptxfactory/progress notifications (no $/progress);
    ptxfactory.cancel stops the job and the last notification is an end saying "cancelled". Simulated backend."""
    uri = open_document(plain_client, rmsnorm)
    started = await execute(plain_client, "ptxfactory.optimise", {"uri": uri, "kernel": "rmsnorm"})
    await until(lambda: len(plain_client.ptx_progress) >= 3, what="ptxfactory/progress reports")

    cancelled = await execute(plain_client, "ptxfactory.cancel", {"job_id": started["job_id"]})

    assert cancelled["cancelled"] is True
    await until(lambda: plain_client.ptx_progress[-1]["kind"] == "end", what="the end notification")
    notes = plain_client.ptx_progress
    assert [n["kind"] for n in notes][0] == "begin" and [n["kind"] for n in notes].count("end") == 1
    assert all(n["token"] == started["token"] and n["job_id"] == started["job_id"] for n in notes)
    assert "cancelled" in notes[-1]["message"]
    assert plain_client.progress_reports == {}
