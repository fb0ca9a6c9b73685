"""The GPU's facts reach the generators (GenContext.facts, filled by the search from backend.facts()), and
grid_stride's grid cap is read from them: no SM count is built in; without facts the grid stays uncapped."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.harness.source import find_kernel
from ptxfactory.protocol import Candidate, GpuFacts, LaunchConfig, load_spec, parse_spec
from ptxfactory.search.base import GenContext
from ptxfactory.search.generators.transform import unit_from_context
from ptxfactory.search.generators.transform.grid_stride import FACTS_NOTE, GridStridePass, threads_per_sm, wave_blocks
from ptxfactory.search.strategy import _Search

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rmsnorm" / "rmsnorm.cu"

SPEC = parse_spec("""
[kernel.axpy]
args = [
  { name = "a", role = "in", dtype = "f32", shape = ["N"] },
  { name = "b", role = "out", dtype = "f32", shape = ["N"] },
  { name = "n", role = "scalar", dtype = "i32", value = "N" },
]
launch = { grid = ["cdiv(N, 128)"], block = [128], policy = "free" }
check = { sizes = [{ N = 1000 }] }
bench = { sizes = [{ N = 1048576 }] }
""").kernels["axpy"]
KERNEL = """
extern "C" __global__ void axpy(const float* a, float* b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    b[i] = 2.0f * a[i];
}
"""


def facts(sm_count: int, arch: str = "sm_90a", copy_gbps: float = 4000.0) -> GpuFacts:
    return GpuFacts(name="test GPU", arch=arch, sm_count=sm_count, l2_bytes=50 << 20, copy_gbps=copy_gbps, peak_gbps=4800.0)


def ctx(gpu: GpuFacts | None = None) -> GenContext:
    original = Candidate(kernel_name="axpy", source=KERNEL, kernel_text=find_kernel(KERNEL, "axpy").text,
                         launch=LaunchConfig(grid=SPEC.launch.grid, block=SPEC.launch.block))
    return GenContext(spec=SPEC, source=KERNEL, kernel=find_kernel(KERNEL, "axpy"), original=original, facts=gpu)


def unit_on(gpu: GpuFacts | None):
    u = unit_from_context(ctx(gpu))
    return dataclasses.replace(u, notes={**u.notes, FACTS_NOTE: gpu}) if gpu is not None else u


def test_threads_per_sm_from_the_architecture():
    assert threads_per_sm("sm_90a") == 2048 and threads_per_sm("sm_86") == 1536 and threads_per_sm("sm_75") == 1024
    assert threads_per_sm("sm_999") == 2048  # not listed: the largest, so the wave never leaves SMs idle
    assert wave_blocks(facts(132), 128) == 132 * 16 and wave_blocks(facts(84, "sm_86"), 256) == 84 * 6
    assert wave_blocks(facts(10), 1024) == 20 and wave_blocks(facts(10), None) == 10 * 8 and wave_blocks(None, 128) is None


def test_grid_stride_caps_the_grid_by_the_gpus_sm_count():
    for sms in (132, 100, 46):
        v = GridStridePass().apply(unit_on(facts(sms)))
        assert v.launch.grid == [f"min(cdiv(N, 128), {sms * 16})"] and v.notes["grid_cap"] == sms * 16
    v = GridStridePass().apply(unit_on(facts(84, "sm_86")))
    assert v.launch.grid == ["min(cdiv(N, 128), 1008)"]  # 84 SMs x 1536 / 128


def test_grid_stride_is_refused_where_the_grid_fits_one_wave_at_every_bench_size():
    """axpy at N = 1048576: 8192 blocks of 128. One wave of 132 SMs is 2112 blocks: proposed. With 600 SMs (a wave of
    9600 blocks) or a bench size of 2000 elements (16 blocks) the loop would run once per thread: refused."""
    assert GridStridePass().applies(unit_on(facts(132)))
    assert not GridStridePass().applies(unit_on(facts(600)))
    small = dataclasses.replace(unit_on(facts(132)), spec=SPEC.model_copy(update={"bench": SPEC.bench.model_copy(update={"sizes": [{"N": 2000}]})}))
    assert not GridStridePass().applies(small)
    assert GridStridePass().applies(unit_on(None))  # no facts: no cap, nothing to judge by


def test_grid_stride_without_facts_keeps_the_grid_and_compiles():
    u = unit_on(None)
    assert GridStridePass().applies(u)
    v = GridStridePass().apply(u)
    assert v.launch.grid == ["cdiv(N, 128)"] and not v.notes.get("grid_cap")
    assert "i += (int)gridDim.x * (int)blockDim.x" in v.text
    source = KERNEL.replace(find_kernel(KERNEL, "axpy").text, v.text)
    cand = Candidate(kernel_name="axpy", source=source, kernel_text=v.text, launch=v.launch)
    assert not isinstance(compile_candidate(cand, "sm_90a"), CompileFailed)


def test_the_same_gpu_gives_the_same_grid_whatever_was_measured():
    """Only what is fixed for a GPU is read: another measured copy bandwidth changes nothing."""
    a = GridStridePass().apply(unit_on(facts(132, copy_gbps=4000.0)))
    b = GridStridePass().apply(unit_on(facts(132, copy_gbps=3711.5)))
    assert (a.text, a.launch) == (b.text, b.launch)


def test_the_search_gives_its_generators_the_backends_facts():
    spec = load_spec(str(EXAMPLE) + ".toml").kernels["rmsnorm"]
    source = EXAMPLE.read_text()
    original = Candidate(kernel_name="rmsnorm", source=source, kernel_text=find_kernel(source, "rmsnorm").text,
                         launch=LaunchConfig(grid=spec.launch.grid, block=spec.launch.block))
    seen = []

    class Recorder:
        name = "recorder"

        def propose(self, c: GenContext) -> list[Candidate]:
            seen.append(c.facts)
            return []

    gpu = facts(132)
    _Search(spec, original, {"recorder": Recorder()}, None, 4, facts=gpu)._propose(original, ["recorder"])
    _Search(spec, original, {"recorder": Recorder()}, None, 4)._propose(original, ["recorder"])
    assert seen == [gpu, None]


def test_grid_stride_takes_the_gpus_sm_count_through_the_generator():
    import dataclasses

    from ptxfactory.protocol import GpuFacts
    from test_transform import example_ctx

    from ptxfactory.search.generators.transform import TransformGenerator
    facts = GpuFacts(name="test GPU", arch="sm_90a", sm_count=7, l2_bytes=1 << 20, copy_gbps=100.0, peak_gbps=200.0)
    ctx = dataclasses.replace(example_ctx("bias_gelu"), facts=facts)
    cand = next(c for c in TransformGenerator().propose(ctx) if "pass:grid_stride" in c.params)
    assert cand.params["grid_cap"] % 7 == 0 and f"{cand.params['grid_cap']})" in cand.launch.grid[0]
