"""The "Create spec for NAME" code action on a kernel the spec does not describe (``daemon/lsp/create_spec.py``):
a CreateFile that never overwrites, or the table appended to an existing spec; either way the result loads."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from _lsp_support import EXAMPLE, SERVER, apply_edits, line_of, make_client, open_document, replace_document, text_edits
from ptxfactory.protocol import load_spec, parse_spec

CONFIG = ClientServerConfig(server_command=SERVER, client_factory=make_client)
DISABLED_ONLY = types.ClientCapabilities(text_document=types.TextDocumentClientCapabilities(
    code_action=types.CodeActionClientCapabilities(disabled_support=True)))
"""A client that shows disabled actions but declares no resource operations (it cannot create files)."""

ZERO = "\n__global__ void zero(float* y, int n) { y[threadIdx.x] = 0; }\nvoid host(float* y, int n) { zero<<<(n + 127) / 128, 128>>>(y, n); }\n"


@pytest_lsp.fixture(config=CONFIG)
async def disabled_only(lsp_client: LanguageClient, tmp_path: Path):
    await lsp_client.initialize_session(types.InitializeParams(capabilities=DISABLED_ONLY, root_uri=tmp_path.as_uri()))
    yield
    await lsp_client.shutdown_session()


def source_only(tmp_path: Path) -> Path:
    """``rmsnorm.cu`` alone (no spec) in its own folder."""
    work = tmp_path / "nospec"
    work.mkdir()
    shutil.copy(EXAMPLE / "rmsnorm.cu", work / "rmsnorm.cu")
    return work / "rmsnorm.cu"


async def actions_at(client: LanguageClient, uri: str, line: int) -> list[types.CodeAction]:
    position = types.Position(line=line, character=4)
    return await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=types.Range(start=position, end=position),
        context=types.CodeActionContext(diagnostics=[]),
    )) or []


async def test_create_spec_creates_the_file_without_overwriting(client: LanguageClient, tmp_path: Path):
    """No spec: one action whose edit is CreateFile (overwrite and ignoreIfExists false) plus the spec's text;
    applied as an editor would, the spec loads, and then the kernel gets the Optimise lens and no Create action."""
    src = source_only(tmp_path)
    text = src.read_text()
    uri = open_document(client, src, text)
    actions = await actions_at(client, uri, line_of(text, "float sum = 0.0f;"))
    assert [a.title for a in actions] == ["Create spec for rmsnorm"]
    create, insert = actions[0].edit.document_changes
    spec_uri = src.with_name("rmsnorm.cu.toml").as_uri()
    assert isinstance(create, types.CreateFile) and create.uri == spec_uri
    assert create.options.overwrite is False and create.options.ignore_if_exists is False
    assert insert.text_document.uri == spec_uri and len(insert.edits) == 1
    assert insert.edits[0].range.start == types.Position(line=0, character=0)
    assert not src.with_name("rmsnorm.cu.toml").exists()  # the editor writes it, not the server

    src.with_name("rmsnorm.cu.toml").write_text(apply_edits("", insert.edits))
    spec = load_spec(src.with_name("rmsnorm.cu.toml")).kernels["rmsnorm"]
    assert [a.role for a in spec.args] == ["in", "in", "out", "scalar", "scalar", "scalar"]
    assert await actions_at(client, uri, line_of(text, "float sum = 0.0f;")) == []
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    assert [lens.command.title for lens in lenses] == ["Optimise kernel"]


async def test_create_spec_appends_a_kernel_the_spec_lacks(client: LanguageClient, rmsnorm: Path):
    """The spec describes rmsnorm; the buffer (unsaved) adds a kernel: its table is appended at the spec's end,
    the rest untouched; rmsnorm itself gets no Create action."""
    spec_path = rmsnorm.with_name("rmsnorm.cu.toml")
    before = spec_path.read_text()
    text = rmsnorm.read_text() + ZERO
    uri = open_document(client, rmsnorm, text)
    assert not [a for a in await actions_at(client, uri, line_of(text, "float sum = 0.0f;")) if a.title.startswith("Create")]
    actions = await actions_at(client, uri, line_of(text, "void zero("))
    assert [a.title for a in actions] == ["Create spec for zero"]
    edits = text_edits(actions[0].edit, spec_path.as_uri())
    assert len(edits) == 1 and edits[0].range.start == edits[0].range.end  # an insertion, at the end
    after = apply_edits(before, edits)
    assert after.startswith(before)
    kernels = parse_spec(after).kernels
    assert set(kernels) == {"rmsnorm", "zero"} and kernels["zero"].launch.grid == ["cdiv(n, 128)"]


async def test_create_spec_appends_to_the_editors_text_of_an_open_spec(vscode: LanguageClient, rmsnorm: Path):
    """The spec is open with unsaved changes: the edit targets that text and its version."""
    spec_path = rmsnorm.with_name("rmsnorm.cu.toml")
    edited = spec_path.read_text() + "# my unsaved note\n"
    spec_uri = open_document(vscode, spec_path, edited, version=7)
    text = rmsnorm.read_text() + ZERO
    uri = open_document(vscode, rmsnorm, text)
    (action,) = await actions_at(vscode, uri, line_of(text, "void zero("))
    (doc_edit,) = action.edit.document_changes
    assert doc_edit.text_document.uri == spec_uri and doc_edit.text_document.version == 7
    after = apply_edits(edited, doc_edit.edits)
    assert after.startswith(edited) and set(parse_spec(after).kernels) == {"rmsnorm", "zero"}

    # a spec that is not TOML: the action is disabled and says why
    replace_document(vscode, spec_uri, edited + "[kernel.broken\n", version=8)
    (action,) = await actions_at(vscode, uri, line_of(text, "void zero("))
    assert action.edit is None and "rmsnorm.cu.toml: not valid TOML" in action.disabled.reason


async def test_a_client_that_cannot_create_files_is_told_to_run_init(disabled_only: LanguageClient, tmp_path: Path):
    src = source_only(tmp_path)
    text = src.read_text()
    uri = open_document(disabled_only, src, text)
    (action,) = await actions_at(disabled_only, uri, line_of(text, "float sum = 0.0f;"))
    assert action.edit is None and "ptxfactory init rmsnorm.cu --kernel rmsnorm" in action.disabled.reason


async def test_a_client_without_resource_operations_or_disabled_actions_gets_none(plain_client: LanguageClient, tmp_path: Path):
    src = source_only(tmp_path)
    text = src.read_text()
    uri = open_document(plain_client, src, text)
    assert await actions_at(plain_client, uri, line_of(text, "float sum = 0.0f;")) == []
