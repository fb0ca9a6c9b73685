"""Demo: the main job on examples/rowsum_seq with the agent generator on, against a scripted provider on loopback.

The provider is a real HTTP server in this process (``ptxfactory.search.agents.loopback``) speaking the
OpenAI chat-completions protocol (``--protocol anthropic``: the Messages API), through the official SDK,
serving scripted replies: a plan of three ideas; a block-per-row tree reduction with float4 loads (a
faster rewrite), a broken kernel (a compile error the reviewer fixes on the second turn with a
warp-per-row reduction) and a cheating one (reads %clock; the static checks refuse it and the reviewer
writes the lesson). The rest of the job (families, transform, tune) runs as usual.

On the GPU machine: ``python3 bench/agent_demo.py`` (``--backend gpu``); on a CPU: ``--backend simulated``
(nothing verified) or ``--backend none`` (compile only). ``--generators agent`` runs the agent alone.
Prints the rows, the agent's spend and the lessons it stored; writes the report to ``--out``.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

from ptxfactory.daemon.backends import make_backend
from ptxfactory.daemon.report import write_outputs
from ptxfactory.protocol import Measured
from ptxfactory.search.agents.loopback import Rule, ScriptedServer, Step
from ptxfactory.search.lessons import LessonStore
from ptxfactory.search.strategy import DEFAULT_GENERATORS, optimise

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "rowsum_seq" / "rowsum_seq.cu"
DEMO_KEY = "sk-demo-not-a-real-key-0000"

IDEAS = """The kernel is latency bound: one thread per row reads addresses N floats apart.
IDEA: one block per row, float4 loads when the row is 16-byte aligned, a warp-shuffle tree reduction
IDEA: keep one thread per row but unroll the loop by four
IDEA: cut each row short when a clock budget runs out
"""

FAST = """A block per row, vectorised when the row start is 16-byte aligned:
```cuda
extern "C" __global__ void rowsum_seq(const float* x, float* s, int M, int N)
{
    __shared__ float partial[32];
    int row = blockIdx.x;
    if (row >= M) return;
    const float* p = x + (size_t)row * N;
    float sum = 0.0f;
    if ((((size_t)p) & 15) == 0) {
        const float4* p4 = reinterpret_cast<const float4*>(p);
        int n4 = N >> 2;
        for (int i = threadIdx.x; i < n4; i += blockDim.x) {
            float4 v = __ldg(p4 + i);
            sum += (v.x + v.y) + (v.z + v.w);
        }
        for (int i = (n4 << 2) + threadIdx.x; i < N; i += blockDim.x) sum += __ldg(p + i);
    } else {
        for (int i = threadIdx.x; i < N; i += blockDim.x) sum += __ldg(p + i);
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, o);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = sum;
    __syncthreads();
    if (threadIdx.x < 32) {
        sum = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, o);
        if (threadIdx.x == 0) s[row] = sum;
    }
}
```
LAUNCH: {"grid": ["M"], "block": [512], "shared_mem": 0}
"""

BROKEN = """```cuda
extern "C" __global__ void rowsum_seq(const float* x, float* s, int M, int N)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;
    const float* p = x + (size_t)row * N;
    float sum = 0.0f;
    int i = 0;
    for (; i + 4 <= N; i += 4) sum += (p[i] + p[i + 1]) + (p[i + 2] + p[i + 3])
    for (; i < N; ++i) sum += p[i];
    s[row] = sum;
}
```
"""

FIXED = """The semicolon was missing; unrolling alone will not fix the access pattern, so one warp per row:
```cuda
extern "C" __global__ void rowsum_seq(const float* x, float* s, int M, int N)
{
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= M) return;
    const float* p = x + (size_t)warp * N;
    float sum = 0.0f;
    for (int i = lane; i < N; i += 32) sum += __ldg(p + i);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, o);
    if (lane == 0) s[warp] = sum;
}
```
LAUNCH: {"grid": ["cdiv(M, 8)"], "block": [256], "shared_mem": 0}
"""

CHEAT = """```cuda
extern "C" __global__ void rowsum_seq(const float* x, float* s, int M, int N)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;
    long long start = clock64();
    const float* p = x + (size_t)row * N;
    float sum = 0.0f;
    for (int i = 0; i < N; ++i) {
        if (clock64() - start > 100000) break;
        sum += p[i];
    }
    s[row] = sum;
}
```
"""

LESSON = "LESSON: cutting rows short on a clock budget skips work: the static checks refuse clock reads, and the answer would be wrong."


def script() -> list[Rule]:
    """The demo's scripted conversation (token counts of a plausible real exchange)."""
    def one(text: str, t_in: int = 1800, t_out: int = 600) -> list[Step]:
        return [Step(text, input_tokens=t_in, output_tokens=t_out)]
    return [
        Rule("Propose", one(IDEAS, 2500, 200)),
        Rule(("Implement this idea", "IDEA: one block per row"), one(FAST)),
        Rule(("Implement this idea", "IDEA: keep one thread per row"), one(BROKEN)),
        Rule(("Implement this idea", "IDEA: cut each row short"), one(CHEAT)),
        Rule(("failed.", "IDEA: keep one thread per row"), one(FIXED)),
        Rule(("failed.", "IDEA: cut each row short"), one(LESSON, 1500, 60)),
    ]


def write_config(folder: Path, url: str, protocol: str) -> Path:
    """A config pointing the factory at the scripted server, priced like a mid-range hosted model."""
    path = folder / "config.toml"
    path.write_text(
        "[agents]\nconcurrency = 2\nbudget_tokens = 60000\nbudget_usd = 0.50\nideas = 3\nrounds = 2\n"
        f'[agents.providers.demo]\nkind = "{protocol}"\nmodel = "scripted-demo"\nbase_url = "{url}"\n'
        'api_key_env = "PTXF_DEMO_KEY"\nusd_per_mtok_in = 3.0\nusd_per_mtok_out = 15.0\ntimeout_s = 30\n')
    return path


async def main(args) -> int:
    generators = tuple(args.generators.split(",")) if args.generators else DEFAULT_GENERATORS
    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(script()) as server:
        url = server.openai_url if args.protocol == "openai" else server.anthropic_url
        os.environ["PTXFACTORY_CONFIG"] = str(write_config(Path(tmp), url, args.protocol))
        os.environ["PTXF_DEMO_KEY"] = DEMO_KEY
        backend = make_backend(args.backend)
        store = await LessonStore.open(Path(args.store) if args.store else Path(tmp) / "lessons.sqlite")
        try:
            summary = await optimise(EXAMPLE, "rowsum_seq", backend=backend, store=store, generators=generators,
                                     max_seconds=args.max_seconds or None,
                                     on_progress=lambda p: print(f"[{p.done}/{p.total}] {p.message}", flush=True))
            lessons = await store.agent_lessons(summary.kernel_class, "sm_90a")
        finally:
            await store.close()
            if backend is not None:
                await backend.close()
    print()
    for i, row in enumerate(summary.rows):
        what = f"{row.result.speedup:.2f}x" if isinstance(row.result, Measured) else row.reason[:100]
        print(f"{i:3d} {row.candidate.generator:12s} {row.candidate.description[:70]:70s} {what}")
    print(summary.message)
    if summary.agent_spend:
        print(summary.agent_spend.describe())
    for lesson in lessons:
        effect = f"{lesson['effect']:.2f}x" if lesson["effect"] else "-"
        print(f"lesson: {lesson['idea'][:70]} -> {lesson['outcome']} {effect} {lesson['lesson'] or ''}")
    if args.out:
        write_outputs(summary, Path(args.out))
        print(f"report: {args.out}/report.md")
    agent_rows = [r for r in summary.rows if r.candidate.generator == "agent"]
    return 0 if agent_rows else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="gpu", choices=["auto", "gpu", "simulated", "none"])
    parser.add_argument("--protocol", default="openai", choices=["openai", "anthropic"])
    parser.add_argument("--generators", default="", help="comma-separated (default: every generator, the agent included)")
    parser.add_argument("--store", default="", help="lesson store (default: a temporary one)")
    parser.add_argument("--max-seconds", type=float, default=0, help="the job's time budget (default: none)")
    parser.add_argument("--out", default="", help="folder for report.md / report.json")
    sys.exit(asyncio.run(main(parser.parse_args())))
