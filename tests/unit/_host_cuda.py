"""What the CPU emulations of a kernel's text share (tests that compile a candidate with g++ and run it on the host):
a block of threads as std::threads with barriers, ``__syncthreads``, a warp's ``__shfl_xor_sync`` through a shared
slot per lane, and ``launch(grid, block, f)``. It expects ``threadIdx``/``blockIdx`` (``thread_local``) declared
before it; each test's own shim supplies the rest (loads, conversions, its main)."""

HOST_BLOCKS = r"""struct Block { std::unique_ptr<std::barrier<>> all; std::vector<std::unique_ptr<std::barrier<>>> warps; std::vector<float> slots; };
thread_local Block* g_block;
inline void __syncthreads() { g_block->all->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int o) {
    int tid = threadIdx.x, w = tid / 32;
    g_block->slots[tid] = v;
    g_block->warps[w]->arrive_and_wait();
    float r = g_block->slots[w * 32 + ((tid % 32) ^ o)];
    g_block->warps[w]->arrive_and_wait();
    return r;
}
template <class F> void launch(int grid, int block, F f) {
    for (int b = 0; b < grid; ++b) {
        Block blk;
        blk.all = std::make_unique<std::barrier<>>(block);
        for (int w = 0; w < block / 32; ++w) blk.warps.push_back(std::make_unique<std::barrier<>>(32));
        blk.slots.resize(block);
        std::vector<std::thread> ts;
        for (int t = 0; t < block; ++t) ts.emplace_back([&, t, b] { threadIdx.x = t; blockIdx.x = b; g_block = &blk; f(); });
        for (auto& th : ts) th.join();
    }
}
"""

# The serial emulation's prelude: a kernel's text compiles as a C++ function once __global__ is gone, its builtins
# plain globals that the test's loops set before each call (one thread at a time, in any order the test picks).
SERIAL_PRELUDE = r"""#include <cstdio>
#include <cstring>
#include <algorithm>
#define __global__
struct ptxf_dim { unsigned x, y, z; };
ptxf_dim threadIdx, blockIdx, blockDim, gridDim;
"""


def run_host(program: str, tmp_path, std: str = "c++17") -> str:
    """``program`` built with g++ (``-O1``, no fp contraction: the kernels' own order) and run for at most 120 s; its
    stdout and stderr, stripped. Fails the test (assert) when it does not build or exits non-zero."""
    import subprocess

    cpp, exe = tmp_path / "emu.cpp", tmp_path / "emu"
    cpp.write_text(program)
    build = subprocess.run(["g++", f"-std={std}", "-O1", "-w", "-ffp-contract=off", str(cpp), "-o", str(exe)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    return (run.stdout + run.stderr).strip()


def host_ok(program: str, tmp_path) -> None:
    """Build and run ``program`` (the kernels emulated on the host and a main printing "ok ..." when the original and
    the rewrite agree) through :func:`run_host`; fails with the compiler's or the program's output otherwise."""
    out = run_host(program, tmp_path)
    assert out.startswith("ok"), out
