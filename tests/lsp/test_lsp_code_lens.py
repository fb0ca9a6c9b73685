"""``textDocument/codeLens``: "Optimise kernel" above each kernel the spec describes (server: simulated backend)."""
from __future__ import annotations

from pathlib import Path

from lsprotocol import types
from pytest_lsp import LanguageClient

from _lsp_support import line_of, open_document

EXTRA_KERNEL = """
// not in the spec: no lens
__global__ void scale(float* y, const float* x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""


async def lenses(client: LanguageClient, uri: str) -> list[types.CodeLens]:
    return await client.text_document_code_lens_async(types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))) or []


async def test_lens_above_each_described_kernel(client: LanguageClient, rmsnorm: Path):
    """The lens sits on rmsnorm's first line and carries the optimise command; the undescribed kernel has none."""
    text = "// a line the editor added, not saved yet\n" + rmsnorm.read_text() + EXTRA_KERNEL
    uri = open_document(client, rmsnorm, text)

    result = await lenses(client, uri)

    assert len(result) == 1
    lens = result[0]
    assert lens.range.start.line == line_of(text, '__global__ void rmsnorm')  # from the open buffer, not the file
    assert lens.command.title == "Optimise kernel"
    assert lens.command.command == "ptxfactory.optimise"
    assert list(lens.command.arguments) == [{"uri": uri, "kernel": "rmsnorm"}]


async def test_no_lens_without_spec(client: LanguageClient, rmsnorm: Path):
    """A .cu file without ``<file>.toml`` beside it gets no lenses; a non-CUDA file neither."""
    bare = rmsnorm.with_name("bare.cu")
    bare.write_text(rmsnorm.read_text())
    assert await lenses(client, open_document(client, bare)) == []

    notes = rmsnorm.with_name("notes.txt")
    notes.write_text("__global__ void rmsnorm() {}\n")
    assert await lenses(client, open_document(client, notes)) == []


async def test_lens_stays_when_spec_is_malformed(client: LanguageClient, rmsnorm: Path):
    """A spec that fails validation still names its tables: the lens stays so the command can report the error."""
    spec = rmsnorm.with_name("rmsnorm.cu.toml")
    spec.write_text(spec.read_text().replace('dtype = "f32"', 'dtype = "float32"'))
    uri = open_document(client, rmsnorm)

    result = await lenses(client, uri)

    assert [lens.command.arguments[0]["kernel"] for lens in result] == ["rmsnorm"]
