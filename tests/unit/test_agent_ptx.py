"""The agent generator on a kernel written in PTX (examples/rowsum_ptx): its prompts (the entry's PTX, the ``.param``
list, the module's header; a CUDA kernel's prompts unchanged), reply parsing (a new ``.entry`` checked against the
original's name and ``.param`` list), and a whole job whose replies are replayed from a recorded transcript (the
``replay`` provider): the agent's new entries are spliced into the module, assembled by ptxas for sm_90a and appear as
rows of generator "agent" beside the PTX passes' and tuning's."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import ptxfactory.harness.cuda_paths as cuda_paths
from ptxfactory.harness.ptx import entry_of, ptx_route
from ptxfactory.harness.simulated import SimulatedDevice
from ptxfactory.harness.source import find_kernel
from ptxfactory.protocol import CompileFailed, Measured, load_spec, spec_path_for
from ptxfactory.search.agents import evidence, parse, prompts
from ptxfactory.search.agents.generator import coder_prompt, planner_prompt, reviewer_prompt
from ptxfactory.search.agents.loopback import Rule, ScriptedServer, Step
from ptxfactory.search.lessons import LessonStore
from ptxfactory.search.strategy import DEFAULT_GENERATORS, optimise, original_candidate

from _agent_support import CHATTY, CODER, KEY, PLANNER, REVIEWER, write_config

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rowsum_ptx" / "rowsum_ptx.ptx"
K = "rowsum_ptx"
HAS_PTXAS = ptx_route().compiler == "ptxas"
HAS_DISASSEMBLER = cuda_paths.tool_path("nvdisasm") is not None or cuda_paths.tool_path("cuobjdump") is not None

ORIGINAL = EXAMPLE.read_text()
ENTRY = find_kernel(ORIGINAL, K).text  # the original .entry, linkage to closing brace
HEADER = ".version 8.0\n.target sm_90a\n.address_size 64\n"

# one warp per row: lanes stride the row, shfl.sync.down adds the lanes' sums; block 128 = 4 rows
WARP_ENTRY = """.visible .entry rowsum_ptx(
    .param .u64 .ptr .global .align 4 x,
    .param .u64 .ptr .global .align 4 s,
    .param .u32 M,
    .param .u32 N
)
{
    .reg .pred  %p<4>;
    .reg .b32   %r<12>;
    .reg .f32   %f<4>;
    .reg .b64   %rd<12>;

    ld.param.u64        %rd1, [x];
    ld.param.u64        %rd2, [s];
    ld.param.u32        %r1, [M];
    ld.param.u32        %r2, [N];
    mov.u32             %r3, %ctaid.x;
    mov.u32             %r4, %tid.x;
    shr.u32             %r5, %r4, 5;
    and.b32             %r6, %r4, 31;
    shl.b32             %r7, %r3, 2;
    add.s32             %r8, %r7, %r5;
    setp.ge.u32         %p1, %r8, %r1;
    @%p1 bra            DONE;
    cvta.to.global.u64  %rd3, %rd1;
    cvta.to.global.u64  %rd4, %rd2;
    mul.wide.u32        %rd5, %r8, %r2;
    shl.b64             %rd6, %rd5, 2;
    add.s64             %rd7, %rd3, %rd6;
    mul.wide.u32        %rd8, %r6, 4;
    add.s64             %rd7, %rd7, %rd8;
    mov.f32             %f1, 0f00000000;
    mov.u32             %r9, %r6;
    setp.ge.u32         %p2, %r9, %r2;
    @%p2 bra            REDUCE;
LOOP:
    ld.global.nc.f32    %f2, [%rd7];
    add.f32             %f1, %f1, %f2;
    add.s64             %rd7, %rd7, 128;
    add.s32             %r9, %r9, 32;
    setp.lt.u32         %p2, %r9, %r2;
    @%p2 bra            LOOP;
REDUCE:
    shfl.sync.down.b32  %f3, %f1, 16, 31, 0xffffffff;
    add.f32             %f1, %f1, %f3;
    shfl.sync.down.b32  %f3, %f1, 8, 31, 0xffffffff;
    add.f32             %f1, %f1, %f3;
    shfl.sync.down.b32  %f3, %f1, 4, 31, 0xffffffff;
    add.f32             %f1, %f1, %f3;
    shfl.sync.down.b32  %f3, %f1, 2, 31, 0xffffffff;
    add.f32             %f1, %f1, %f3;
    shfl.sync.down.b32  %f3, %f1, 1, 31, 0xffffffff;
    add.f32             %f1, %f1, %f3;
    setp.ne.u32         %p3, %r6, 0;
    @%p3 bra            DONE;
    mul.wide.u32        %rd9, %r8, 4;
    add.s64             %rd10, %rd4, %rd9;
    st.global.f32       [%rd10], %f1;
DONE:
    ret;
}"""


def _edit(old: str, new: str, text: str = ENTRY) -> str:
    assert old in text
    return text.replace(old, new)


# the loop counts N down to zero (other machine code than the original and every PTX pass's)
COUNTDOWN_ENTRY = _edit("mov.u32             %r7, 0;", "mov.u32             %r7, %r2;",
                        _edit("add.s32             %r7, %r7, 1;\n    setp.lt.s32         %p2, %r7, %r2;",
                              "sub.s32             %r7, %r7, 1;\n    setp.ne.s32         %p2, %r7, 0;"))
BROKEN_ENTRY = _edit("add.f32             %f1, %f1, %f2;", "add.f32             %f1, %f1, %f9;", COUNTDOWN_ENTRY)

GOOD = f"""One warp per row, the lanes' sums added with shfl.sync:
```ptx
// rowsum, a warp per row
{HEADER}
{WARP_ENTRY}
```
LAUNCH: {{"grid": ["cdiv(M, 4)"], "block": [128], "shared_mem": 0}}
"""
BROKEN = f"```ptx\n{BROKEN_ENTRY}\n```\n"
# a chatty fix with two blocks: the bad line quoted first, then the whole entry in a plain fence
FIXED = f"""The accumulator was misspelt:
```ptx
    add.f32             %f1, %f1, %f9;
```
Here is the whole entry again, fixed:
```
{COUNTDOWN_ENTRY}
```
"""
RENAMED = f"```ptx\n{_edit('.entry rowsum_ptx(', '.entry rowsum_fast(', WARP_ENTRY)}\n```\n"
REPARAM = f"```ptx\n{_edit('.param .u32 N', '.param .u64 N', WARP_ENTRY)}\n```\n"
IDEAS = """The loop is latency bound: one thread per row, uncoalesced loads.
IDEA: one warp per row with shfl.sync reductions
IDEA: count the loop down to zero
IDEA: rename the entry to something faster
IDEA: think harder about the cache hierarchy
"""


def _spec():
    return load_spec(spec_path_for(EXAMPLE)).kernels[K]


# -- parsing ---------------------------------------------------------------------------------------------------

def test_a_ptx_block_gives_the_entry_without_the_module_header():
    got = parse.ptx_entry(GOOD, entry_of(find_kernel(ORIGINAL, K)))
    assert got.why is None and got.code.startswith("// rowsum, a warp per row\n")
    assert ".version" not in got.code and ".target" not in got.code and ".address_size" not in got.code
    assert got.code.rstrip().endswith("}") and "shfl.sync.down.b32" in got.code
    assert parse.launch(GOOD).grid == ["cdiv(M, 4)"]


def test_a_chatty_reply_with_two_blocks_takes_the_one_holding_the_entry():
    got = parse.ptx_entry(FIXED, entry_of(find_kernel(ORIGINAL, K)))
    assert got.code == COUNTDOWN_ENTRY + "\n"  # the plain ``` block, not the quoted line
    draft = f"A first draft:\n```ptx\n{ENTRY}\n```\nand the final one:\n```ptx\n{WARP_ENTRY}\n```\n"
    assert parse.ptx_entry(draft, entry_of(find_kernel(ORIGINAL, K))).code == WARP_ENTRY + "\n"  # the last
    bare = f"Sure, here it is.\n{WARP_ENTRY}\nThis should be faster."
    assert parse.ptx_entry(bare, entry_of(find_kernel(ORIGINAL, K))).code == WARP_ENTRY + "\n"  # no fences: the entry alone


def test_another_name_or_param_list_is_refused_with_a_reason():
    original = entry_of(find_kernel(ORIGINAL, K))
    renamed = parse.ptx_entry(RENAMED, original)
    assert renamed.code is None and renamed.outcome == "bad_signature"
    assert "rowsum_fast" in renamed.why and "not rowsum_ptx" in renamed.why
    reparam = parse.ptx_entry(REPARAM, original)
    assert reparam.code is None and reparam.outcome == "bad_signature"
    assert ".u64 N" in reparam.why and ".u32 N" in reparam.why and ".param list must stay" in reparam.why


def test_a_reply_without_code_or_cut_short_is_a_lesson_free_failure_not_a_crash():
    original = entry_of(find_kernel(ORIGINAL, K))
    for reply in (CHATTY, "", None, "```ptx\nadd.f32 %f1, %f1, %f2;\n```", "```cuda\n__global__ void rowsum_ptx() {}\n```"):
        got = parse.ptx_entry(reply, original)
        assert got.code is None and got.outcome == "no_code" and got.why
    cut = f"```ptx\n{WARP_ENTRY[:600]}"  # a reply cut short inside the body
    got = parse.ptx_entry(cut, original)
    assert got.code is None and got.outcome == "no_code" and "cut short" in got.why


# -- prompts ---------------------------------------------------------------------------------------------------

def test_ptx_prompts_show_the_entry_and_say_ptx():
    spec = _spec()
    parent = original_candidate(spec, ORIGINAL)
    kernel = find_kernel(ORIGINAL, K)
    coder = coder_prompt(parent, spec, "sm_90a", "one warp per row")
    assert "PTX kernel `rowsum_ptx` on sm_90a" in coder and f"```ptx\n{ENTRY}\n```" in coder
    assert "- .param .u64 .ptr .global .align 4 x\n" in coder and "- .param .u32 N\n" in coder
    assert ".version 8.0; .target sm_90a; .address_size 64" in coder  # the header the candidate keeps
    assert "LAUNCH:" in coder and "```cuda" not in coder and "__global__" not in coder
    planner = planner_prompt(kernel, ORIGINAL, spec, "sm_90a", 3, resources="R", roofline="F", sass="S", counters="C",
                             rejected="none", kernel_class="c", lessons="none yet")
    assert "written in PTX" in planner and "```ptx\n" in planner and "ld.global.f32       %f2, [%rd7];" in planner
    assert "// ptxfactory: hot loop begins" in planner  # the entry's innermost loop marked
    cand = parent.model_copy(update={"kernel_text": BROKEN_ENTRY, "source": ORIGINAL.replace(ENTRY, BROKEN_ENTRY)})
    reviewer = reviewer_prompt(cand, spec, "sm_90a", "count down", "compile error:\nUnknown symbol '%f9'")
    assert "PTX kernel `rowsum_ptx`" in reviewer and f"```ptx\n{BROKEN_ENTRY}\n```" in reviewer
    assert "- .param .u32 M\n" in reviewer and "then the LAUNCH line" in reviewer
    assert "PTX" in prompts.system("ptx") and "CUDA C++" in prompts.system("cuda")


SCALE_CU = """extern "C" __global__ void scale(const float* x, float* y, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""
SCALE_TOML = """[kernel.scale]
arch = "sm_90a"
args = [
  { name = "x", role = "in", dtype = "f32", shape = ["n"] },
  { name = "y", role = "out", dtype = "f32", shape = ["n"] },
  { name = "a", role = "scalar", dtype = "f32", value = 2.0 },
  { name = "n", role = "scalar", dtype = "i32", value = "n" },
]
launch = { grid = ["cdiv(n, 256)"], block = [256], shared_mem = 0 }

[kernel.scale.check]
sizes = [{ n = 1000 }]

[kernel.scale.bench]
sizes = [{ n = 1048576 }]
"""
# SHA-256 of the CUDA prompts below as rendered before PTX kernels had prompts of their own (the templates and the
# generator's rendering at commit b121d1d): a CUDA job's requests (and so its replay transcripts) are unchanged.
CUDA_PROMPTS = {
    "system": "8473164bccc6945b39a37d9b2a30eb65372d46e1f18218f80228d53f8961bb47",
    "coder": "1488f732455e0e97705fcfd917afc43e495453aa55c37cab703be2003af6d0ba",
    "planner": "aacac0da7ba436ed5d2f68351abac89e7b042ffbe95828971acc2aeccb71e0f1",
    "reviewer": "a51d8631b1708283da60032f69c53c1bb44fd54d8219a71f16e2839d7a4c34dc",
}


def test_cuda_prompts_are_unchanged(tmp_path):
    src = tmp_path / "scale.cu"
    src.write_text(SCALE_CU)
    (tmp_path / "scale.cu.toml").write_text(SCALE_TOML)
    spec = load_spec(spec_path_for(src)).kernels["scale"]
    parent = original_candidate(spec, SCALE_CU)
    kernel = find_kernel(SCALE_CU, "scale")
    idea = "four elements per thread with float4 loads"
    rendered = {
        "system": prompts.system(),
        "coder": coder_prompt(parent, spec, "sm_90a", idea),
        "planner": planner_prompt(kernel, SCALE_CU, spec, "sm_90a", 3, resources="RES", roofline="ROOF", sass="SASS",
                                  counters="COUNTERS", rejected="REJ", kernel_class="generic/x", lessons="LESSONS"),
        "reviewer": reviewer_prompt(parent, spec, "sm_90a", idea, "compile error:\nFAIL"),
    }
    assert "```cuda\n" + SCALE_CU + "```" in rendered["coder"] and "(const float* x, float* y, float a, int n)" in rendered["coder"]
    assert {k: hashlib.sha256(v.encode()).hexdigest() for k, v in rendered.items()} == CUDA_PROMPTS
    assert evidence.kernel_listing(kernel) == kernel.text  # no loop marks in a CUDA kernel's listing


# -- a whole job, replayed -------------------------------------------------------------------------------------

def _script() -> list[Rule]:
    def step(text: str) -> list[Step]:
        return [Step(text, input_tokens=100, output_tokens=50)]
    return [
        Rule(PLANNER, step(IDEAS)),
        Rule((CODER, "IDEA: one warp per row"), step(GOOD)),
        Rule((CODER, "IDEA: count the loop down"), step(BROKEN)),
        Rule((CODER, "IDEA: rename the entry"), step(RENAMED)),
        Rule((CODER, "IDEA: think harder"), step(CHATTY)),
        Rule((REVIEWER, "IDEA: count the loop down"), step(FIXED)),
    ]


async def _job(tmp_path: Path, generators, job_id: str):
    store = await LessonStore.open(tmp_path / f"{job_id}.sqlite")
    messages: list[str] = []
    try:
        summary = await optimise(EXAMPLE, K, backend=SimulatedDevice(delay_s=0), store=store, generators=generators,
                                 job_id=job_id, on_progress=lambda p: messages.append(p.message), max_candidates=400,
                                 patience=None)
        lessons = await store.agent_lessons(summary.kernel_class, "sm_90a")
    finally:
        await store.close()
    return summary, messages, lessons


@pytest.mark.skipif(not HAS_PTXAS, reason="no ptxas on this machine")
async def test_a_replayed_ptx_job_gets_agent_rows_assembled_by_ptxas(monkeypatch, tmp_path):
    """Record the agents' replies of a PTX job against a loopback endpoint, then replay the transcript (the endpoint
    gone) in a job with the default generators: the agent is offered to the PTX job, its entries replace the
    original's in the module and are assembled by ptxas; a broken one is fixed by the reviewer, one with another name
    refused, one without code a lesson-free failure."""
    transcript = tmp_path / "transcript.json"
    monkeypatch.setenv("PTXF_TEST_KEY", KEY)
    with ScriptedServer(_script()) as srv:
        monkeypatch.setenv("PTXFACTORY_CONFIG", str(write_config(tmp_path / "openai.toml", "openai", srv.openai_url)))
        monkeypatch.setenv("PTXFACTORY_AGENT_RECORD", str(transcript))
        await _job(tmp_path, ("agent",), "record")
        users = [u for _, u in srv.requests]
    monkeypatch.delenv("PTXFACTORY_AGENT_RECORD")
    planner = next(u for u in users if PLANNER in u)
    assert "written in PTX" in planner and "ld.global.f32       %f2, [%rd7];" in planner and "```ptx" in planner
    assert "registers/thread" in planner  # the evidence of a PTX kernel: ptxas's resource report, the cubin's SASS
    if HAS_DISASSEMBLER:
        assert "innermost loop" in planner.split("## Hot loop SASS")[1].split("## ")[0]
    assert len(users) == 6 and len(json.loads(transcript.read_text())["replies"]) == 6

    (tmp_path / "replay.toml").write_text(
        "[agents]\nconcurrency = 2\nbudget_tokens = 100000\nideas = 4\nrounds = 1\n"
        f'[agents.providers.rec]\nkind = "replay"\ntranscript = "{transcript}"\n')
    monkeypatch.setenv("PTXFACTORY_CONFIG", str(tmp_path / "replay.toml"))
    summary, messages, lessons = await _job(tmp_path, DEFAULT_GENERATORS, "replay")

    assert summary.state == "finished"
    gens = {r.candidate.generator for r in summary.rows}
    assert {"original", "agent", "ptx_transform", "ptx_tune"} <= gens and "transform" not in gens and "tune" not in gens
    rows = {r.candidate.description: r for r in summary.rows if r.candidate.generator == "agent"}
    assert set(rows) == {"agent: one warp per row with shfl.sync reductions", "agent: count the loop down to zero",
                         "agent fix: count the loop down to zero"}
    good = rows["agent: one warp per row with shfl.sync reductions"]
    assert isinstance(good.result, Measured) and good.result.compiler == "ptxas" and good.resources.registers > 0
    assert good.candidate.launch.grid == ["cdiv(M, 4)"] and good.candidate.launch.block == [128]
    src = good.candidate.source
    assert src.count(".version") == 1 and src.startswith(ORIGINAL[: ORIGINAL.index(ENTRY)])  # the module's header kept
    assert "shfl.sync.down.b32" in src and ENTRY not in src and entry_of(find_kernel(src, K)).params == entry_of(find_kernel(ORIGINAL, K)).params
    broken = rows["agent: count the loop down to zero"]
    assert isinstance(broken.result, CompileFailed) and broken.result.compiler == "ptxas"
    assert "rowsum_ptx.ptx(" in broken.result.log and "%f9" in broken.result.log  # ptxas's error at its line
    fixed = rows["agent fix: count the loop down to zero"]
    assert isinstance(fixed.result, Measured) and fixed.result.compiler == "ptxas" and COUNTDOWN_ENTRY in fixed.candidate.source
    assert any("not rowsum_ptx" in m for m in messages)  # the renamed entry refused, with the reason

    by_idea = {lesson["idea"]: lesson for lesson in lessons}
    assert by_idea["rename the entry to something faster"]["outcome"] == "bad_signature"
    assert by_idea["think harder about the cache hierarchy"]["outcome"] == "no_code"
    assert by_idea["think harder about the cache hierarchy"]["lesson"] is None
    assert by_idea["one warp per row with shfl.sync reductions"]["outcome"] in ("faster", "slower")
    spend = summary.agent_spend
    assert len(spend.calls) == 6 and all(c.ok for c in spend.calls)
