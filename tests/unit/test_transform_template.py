"""A kernel template whose spec fixes its type parameter (``tune.template = { T = ["float"] }``): the passes that read
or write elements by type (cache hints, vectorize) see ``const T*`` as ``const float*`` (a new user's templated scale
kernel got none of them); a parameter with several values stays unknown, since ``tune`` may change it."""
from __future__ import annotations

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.protocol import Candidate, LaunchConfig
from ptxfactory.protocol.spec import parse_spec
from ptxfactory.search.generators.transform import PASSES, TransformGenerator, unit_from_context

from test_transform import make_ctx

SCALE = """
template <typename T>
__global__ void scale_kernel(const T* __restrict__ x, T* __restrict__ y, T alpha, int n)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) y[idx] = alpha * x[idx];
}
"""


def ctx_for(values: str, args: list[str]):
    spec = parse_spec(f"""
[kernel.scale_kernel]
args = [
  {{ name = "x", role = "in", dtype = "f32", shape = ["n"] }},
  {{ name = "y", role = "out", dtype = "f32", shape = ["n"] }},
  {{ name = "alpha", role = "scalar", dtype = "f32", value = 1.5 }},
  {{ name = "n", role = "scalar", dtype = "i32", value = "n" }},
]
launch = {{ grid = ["cdiv(n, 256)"], block = [256], policy = "free" }}
[kernel.scale_kernel.check]
sizes = [{{ n = 1001 }}]
[kernel.scale_kernel.bench]
sizes = [{{ n = 16777216 }}]
[kernel.scale_kernel.tune]
template = {{ T = {values} }}
""").kernels["scale_kernel"]
    original = Candidate(kernel_name="scale_kernel", source=SCALE, kernel_text=SCALE, template_args=args,
                         launch=LaunchConfig(grid=spec.launch.grid, block=spec.launch.block))
    return make_ctx(SCALE, spec, original)


def test_a_fixed_type_parameter_lets_the_typed_passes_apply():
    ctx = ctx_for('["float"]', ["float"])
    u = unit_from_context(ctx)
    assert u.notes["template_types"] == {"T": "float"} and u.pointers["x"].base == "float"
    applied = {p.name for p in PASSES if p.applies(u)}
    assert {"ldg", "stream", "vectorize"} <= applied
    cands = TransformGenerator().propose(ctx)
    chosen = [c for c in cands if "pass:vectorize" in c.params][:1] + [c for c in cands if c.params.get("hint") == "ldg"][:1]
    assert len(chosen) == 2
    for c in chosen:
        assert c.template_args == ["float"]
        r = compile_candidate(c, "sm_90a")
        assert not isinstance(r, CompileFailed), r.log


def test_a_type_parameter_tune_may_change_stays_unknown():
    u = unit_from_context(ctx_for('["float", "double"]', ["float"]))
    assert "template_types" not in u.notes and u.pointers["x"].base == "T"
    assert not {"ldg", "stream", "vectorize"} & {p.name for p in PASSES if p.applies(u)}


def test_the_scale_bias_example_instantiated_for_bf16_gets_the_hints():
    import dataclasses

    from test_transform import example_ctx
    ctx = example_ctx("scale_bias")
    ctx = dataclasses.replace(ctx, original=ctx.original.model_copy(update={"template_args": ["__nv_bfloat16"]}))
    u = unit_from_context(ctx)
    assert u.notes["template_types"] == {"T": "__nv_bfloat16"} and {"ldg", "stream"} <= {p.name for p in PASSES if p.applies(u)}
    hinted = [c for c in TransformGenerator().propose(ctx) if c.params.get("hint")][:3]
    assert hinted
    for c in hinted:
        r = compile_candidate(c, "sm_90a")
        assert not isinstance(r, CompileFailed), r.log
