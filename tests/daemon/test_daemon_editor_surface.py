"""Hover and diagnostics over the daemon: resources, occupancy and the best result on hover; compile errors,
spills and spec errors as diagnostics, published on open and save. Kernels compile with NVRTC (no GPU);
the daemon's backend is simulated and no job runs here."""
from __future__ import annotations

from pathlib import Path

import pytest
from lsprotocol import types

from _daemon_support import EXAMPLE, close, hover, line_of, open_document, unix_client, until

pytestmark = pytest.mark.timeout(60)

HEAVY = r"""// 96 live floats per thread under __launch_bounds__(1024, 2): 32 registers, so ptxas spills
extern "C" __global__ void __launch_bounds__(1024, 2) heavy(const float* x, float* y, int n)
{
    float acc[96];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    #pragma unroll
    for (int k = 0; k < 96; ++k) acc[k] = x[(i + k * 977) % n];
    #pragma unroll
    for (int r = 0; r < 8; ++r) {
        #pragma unroll
        for (int k = 0; k < 96; ++k) acc[k] = acc[k] * acc[(k + r + 1) % 96] + 1.0f;
    }
    float s = 0.0f;
    #pragma unroll
    for (int k = 0; k < 96; ++k) s += acc[k] * (k + 1);
    if (i < n) y[i] = s;
}
"""

HEAVY_SPEC = """[kernel.heavy]
arch = "sm_90a"
args = [
  { name = "x", role = "in",  dtype = "f32", shape = ["N"] },
  { name = "y", role = "out", dtype = "f32", shape = ["N"] },
  { name = "n", role = "scalar", dtype = "i32", value = "N" },
]
launch = { grid = ["cdiv(N, 1024)"], block = [1024] }

[kernel.heavy.check]
sizes = [{ N = 4096 }]

[kernel.heavy.bench]
sizes = [{ N = 1048576 }]
"""


def _kernel_file(folder: Path, name: str, text: str, spec: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.cu.toml").write_text(spec)
    path = folder / f"{name}.cu"
    path.write_text(text)
    return path


async def _wait_published(client, uri: str) -> list[types.Diagnostic]:
    await until(lambda: uri in client.diagnostics, what=f"diagnostics of {uri}")
    return list(client.diagnostics[uri])


async def test_hover_and_diagnostics(start_daemon, tmp_path: Path):
    daemon = start_daemon()
    spec = (EXAMPLE / "rmsnorm.cu.toml").read_text()
    good_text = (EXAMPLE / "rmsnorm.cu").read_text()
    good = _kernel_file(tmp_path / "good", "rmsnorm", good_text, spec)
    bad_text = good_text.replace("sum += v * v;", "sum += v * v")
    bad = _kernel_file(tmp_path / "bad", "rmsnorm", bad_text, spec)
    heavy = _kernel_file(tmp_path / "heavy", "heavy", HEAVY, HEAVY_SPEC)
    broken_spec = _kernel_file(tmp_path / "spec", "rmsnorm", good_text, spec.replace('dtype = "f32"', 'dtype = "float32"'))
    client = await unix_client(daemon.socket, "neovim", tmp_path)
    try:
        # A kernel that compiles cleanly: no diagnostics; hover shows resources, occupancy, no job yet.
        uri = open_document(client, good)
        assert await _wait_published(client, uri) == []
        shown = (await hover(client, uri, line_of(good_text, "__global__ void rmsnorm"))).contents.value
        assert "**rmsnorm**" in shown and "- registers: " in shown and "1024 B static" in shown and "no spills" in shown
        assert "occupancy (sm_90a, theoretical): 100% (8 block(s) of 256 threads" in shown
        assert "best so far: no job yet" in shown
        assert await hover(client, uri, line_of(good_text, "float sum = 0.0f;")) is None  # only on the signature

        # A compile error: at the compiler's line, with its message.
        bad_uri = open_document(client, bad)
        errors = await _wait_published(client, bad_uri)
        assert [(d.severity, d.source) for d in errors] == [(types.DiagnosticSeverity.Error, "ptxfactory")]
        assert errors[0].range.start.line in (line_of(bad_text, "sum += v * v"), line_of(bad_text, "sum += v * v") + 1)
        assert 'expected a ";"' in errors[0].message

        # Fixed in the editor and saved: published again, clean.
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=bad_uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=good_text)]))
        bad.write_text(good_text)
        del client.diagnostics[bad_uri]
        client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=bad_uri)))
        assert await _wait_published(client, bad_uri) == []

        # Spills: a warning on the kernel's name; hover says how much.
        heavy_uri = open_document(client, heavy)
        warnings = await _wait_published(client, heavy_uri)
        spills = [d for d in warnings if d.code == "spills"]
        assert len(spills) == 1 and spills[0].severity == types.DiagnosticSeverity.Warning
        assert spills[0].range.start.line == line_of(HEAVY, "heavy(") and "bytes spill stores" in spills[0].message
        shown = (await hover(client, heavy_uri, line_of(HEAVY, "heavy("))).contents.value
        assert "spill stores" in shown and "- registers: 32 per thread" in shown
        assert "occupancy (sm_90a, theoretical): 100% (2 block(s) of 1024 threads" in shown

        # A kernel template: hover names the instantiation its resources are of.
        template_text = (Path(__file__).resolve().parents[1] / "kernels" / "scale_template.cu").read_text()
        template = _kernel_file(tmp_path / "template", "scale", template_text,
                                HEAVY_SPEC.replace("heavy", "scale").replace('block = [1024] }', 'block = [1024] }\n'
                                                                            'tune = { template = { UNROLL = [4, 1], SCALE = [2] } }'))
        template_uri = open_document(client, template)
        assert await _wait_published(client, template_uri) == []
        shown = (await hover(client, template_uri, line_of(template_text, "__global__ void scale"))).contents.value
        assert "- instantiation: `scale<4, 2>`" in shown and "- registers: " in shown

        # A malformed spec: an error on the spec file, at its line.
        open_document(client, broken_spec)
        spec_uri = broken_spec.with_name("rmsnorm.cu.toml").as_uri()
        spec_errors = await _wait_published(client, spec_uri)
        assert len(spec_errors) == 1 and "kernel.rmsnorm.args[5].dtype" in spec_errors[0].message
        assert spec_errors[0].range.start.line == line_of(broken_spec.with_name("rmsnorm.cu.toml").read_text(), '"float32"')
    finally:
        await close(client)
