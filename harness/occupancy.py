"""Theoretical occupancy of a kernel from its resources and block size (the CUDA occupancy calculator's rules).

Per-architecture limits from the CUDA C++ Programming Guide's "Technical Specifications" table;
an arch it does not know uses sm_90's. Register allocation: per warp, rounded up to 256; shared
memory: per block, plus 1 KiB the driver reserves, rounded up to 128 bytes.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SmLimits:
    max_warps: int
    max_blocks: int
    regs: int = 65536
    smem: int = 228 * 1024  # usable shared memory per SM, bytes
    smem_per_block: int = 227 * 1024
    warp_reg_unit: int = 256
    smem_reserved: int = 1024


LIMITS = {
    "sm_70": SmLimits(64, 32, smem=96 * 1024, smem_per_block=96 * 1024, smem_reserved=0),
    "sm_75": SmLimits(32, 16, smem=64 * 1024, smem_per_block=64 * 1024, smem_reserved=0),
    "sm_80": SmLimits(64, 32, smem=164 * 1024, smem_per_block=163 * 1024),
    "sm_86": SmLimits(48, 16, smem=100 * 1024, smem_per_block=99 * 1024),
    "sm_87": SmLimits(48, 16, smem=164 * 1024, smem_per_block=163 * 1024),
    "sm_89": SmLimits(48, 24, smem=100 * 1024, smem_per_block=99 * 1024),
    "sm_90": SmLimits(64, 32),
    "sm_100": SmLimits(64, 32),
    "sm_103": SmLimits(64, 32),
    "sm_120": SmLimits(48, 32, smem=100 * 1024, smem_per_block=99 * 1024),
}


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int
    warps_per_sm: int
    max_warps: int
    limited_by: str

    @property
    def fraction(self) -> float:
        return self.warps_per_sm / self.max_warps

    def describe(self, threads: int) -> str:
        if self.blocks_per_sm == 0:
            return f"0%: a block of {threads} threads does not fit on an SM ({self.limited_by})"
        return (f"{self.fraction:.0%} ({self.blocks_per_sm} block(s) of {threads} threads, "
                f"{self.warps_per_sm}/{self.max_warps} warps per SM; limited by {self.limited_by})")


def limits_for(arch: str) -> SmLimits:
    base = arch.rstrip("af")
    return LIMITS.get(base, LIMITS["sm_90"])


def occupancy(arch: str, threads_per_block: int, registers: int, shared_bytes: int) -> Occupancy:
    """Blocks and warps per SM for ``threads_per_block`` threads using ``registers`` per thread and ``shared_bytes`` per block."""
    lim = limits_for(arch)
    warps = -(-threads_per_block // 32)
    by: dict[str, int] = {"blocks per SM": lim.max_blocks, "warps per SM": lim.max_warps // max(warps, 1)}
    if registers:
        per_warp = -(-registers * 32 // lim.warp_reg_unit) * lim.warp_reg_unit
        by["registers"] = lim.regs // (per_warp * warps) if per_warp * warps else lim.max_blocks
    if shared_bytes:
        per_block = -(-(shared_bytes + lim.smem_reserved) // 128) * 128
        by["shared memory"] = 0 if shared_bytes > lim.smem_per_block else lim.smem // per_block
    limited_by, blocks = min(by.items(), key=lambda kv: kv[1])
    return Occupancy(blocks_per_sm=blocks, warps_per_sm=blocks * warps, max_warps=lim.max_warps, limited_by=limited_by)
