"""Scripted replies for the agent tests: rowsum_seq rewritten well, broken, cheating, and without code."""
from __future__ import annotations

from pathlib import Path

from ptxfactory.search.agents.loopback import Rule, Step

ROWSUM = Path(__file__).resolve().parents[2] / "examples" / "rowsum_seq" / "rowsum_seq.cu"
KEY = "sk-test-DO-NOT-LEAK-7f3a9c1e5b2d4a6f8e0c"  # the fake key every test sets; no text may ever contain it

GOOD = """```cuda
extern "C" __global__ void rowsum_seq(const float* x, float* s, int M, int N)
{
    __shared__ float partial[32];
    int row = blockIdx.x;
    if (row >= M) return;
    const float* p = x + (size_t)row * N;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) sum += p[i];
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
LAUNCH: {"grid": ["M"], "block": [256], "shared_mem": 0}
"""

BROKEN = """Here is a version that unrolls by four:
```cuda
extern "C" __global__ void rowsum_seq(const float* x, float* s, int M, int N)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;
    const float* p = x + (size_t)row * N;
    float sum = 0.0f
    for (int i = 0; i < N; ++i) sum += p[i];
    s[row] = sum;
}
```
"""

FIXED = """Sorry, a missing semicolon. Fixed, and one warp per row while I am at it:
```cuda
extern "C" __global__ void rowsum_seq(const float* x, float* s, int M, int N)
{
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= M) return;
    const float* p = x + (size_t)warp * N;
    float sum = 0.0f;
    for (int i = lane; i < N; i += 32) sum += p[i];
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
        if (clock64() - start > 100000) break;  // stop when the time is up
        sum += p[i];
    }
    s[row] = sum;
}
```
"""

CHATTY = "Great question! Reductions are fascinating. I would think harder about this one before writing any code."

IDEAS = """Looking at the evidence, the kernel is latency bound. Ideas:
IDEA: one block per row with a shared-memory tree reduction
IDEA: unroll the sequential loop by four
IDEA: stop each row early when a timer expires
IDEA: think harder about the memory hierarchy
"""

LESSON = "LESSON: reading the clock to cut work short is cheating: the verifier and the static checks refuse it."

PLANNER = "Propose"
CODER = "Implement this idea"
REVIEWER = "failed."


def script(tokens: tuple[int, int] = (100, 50)) -> list[Rule]:
    """The scripted conversation of a whole job: a plan of four ideas, a good candidate, a broken one fixed by
    the reviewer, a cheating one the reviewer turns into a lesson, and a reply without code."""
    t_in, t_out = tokens

    def step(text: str) -> list[Step]:
        return [Step(text, input_tokens=t_in, output_tokens=t_out)]

    return [
        Rule(PLANNER, step(IDEAS)),
        Rule((CODER, "IDEA: one block per row"), step(GOOD)),
        Rule((CODER, "IDEA: unroll the sequential"), step(BROKEN)),
        Rule((CODER, "IDEA: stop each row early"), step(CHEAT)),
        Rule((CODER, "IDEA: think harder"), step(CHATTY)),
        Rule((REVIEWER, "IDEA: unroll the sequential"), step(FIXED)),
        Rule((REVIEWER, "IDEA: stop each row early"), step(LESSON)),
    ]


def write_config(path: Path, kind: str, base_url: str, **agents) -> Path:
    """A config file for one provider of ``kind`` at ``base_url`` whose key is in ``$PTXF_TEST_KEY``."""
    settings = {"concurrency": 2, "budget_tokens": 100000, "ideas": 4, "rounds": 1, **agents}
    lines = ["[agents]"] + [f"{k} = {v!r}" if not isinstance(v, str) else f'{k} = "{v}"' for k, v in settings.items()
                             if k not in ("timeout_s", "max_retries", "max_output_tokens")]
    lines += [f"[agents.providers.{kind}]", f'kind = "{kind}"', 'model = "scripted-model"', f'base_url = "{base_url}"',
              'api_key_env = "PTXF_TEST_KEY"', "usd_per_mtok_in = 2.0", "usd_per_mtok_out = 10.0",
              f"timeout_s = {agents.get('timeout_s', 10)}", f"max_retries = {agents.get('max_retries', 2)}",
              f"max_output_tokens = {agents.get('max_output_tokens', 2048)}"]
    path.write_text("\n".join(lines) + "\n")
    return path
