"""``mma_tile``: a thread-per-output inner-product loop on the tensor cores (``mma.sync``), operands staged in shared memory.

What it reads is :mod:`.smem_tile`'s (a naive GEMM, a batched GEMM, a convolution as an implicit GEMM, also written
one thread per flat output; the same proofs, refusals and operand fetches), narrowed to what a matrix multiply-add
computes: a ``float`` sum whose term is the product of exactly two loads, one of the row's operand and one of the
column's (``acc += A[row * K + k] * B[k * N + col];``, or ``acc = fmaf(A[...], B[...], acc);``, times factors
the same for every term, ``alpha * A[...] * B[...]``, applied once to the sum; each factor may go through a conversion to float,
``__bfloat162float``, ``__half2float`` or a cast, or through a local declared in the loop from one), both of
``__nv_bfloat16``, both of ``__half``, or both of ``float``. Then, for a 16 x 16 block of threads (eight warps)
computing a ``TM x TN`` tile of outputs:

- each step of ``TK = 32`` values of k, every thread fetches its share of both operands' tiles from global memory
  into registers one step ahead (smem_tile's fetch: 16 bytes at a time along the coordinate whose stride is 1 where
  the 16 bytes are in bounds and aligned, else element by element; zeros outside the guard, past the loop's end and
  where a padded convolution's condition masks the element) and stores them into shared memory contiguous along
  that same coordinate: ``[TM][TK + pad]`` for ``A[row * K + k]``, ``[TK][TM + pad]`` for ``A[k * M + row]`` (B
  likewise), so a 16-byte fetch is one 16-byte store (the padding puts the fragment reads of one instruction in
  distinct banks);
- each warp computes a ``TM / WM x TN / WN`` part of the tile as ``16 x 8`` accumulator fragments: for 16-bit
  operands, the fragments by ``ldmatrix`` (``.trans`` from a tile whose rows are k), then ``mma.sync.m16n8k16``
  (bf16 or f16 in, fp32 accumulate: every product exact, as in the original);
  for ``float`` operands ``mma.sync.m16n8k8.tf32`` three times per product, ``a_hi b_hi + a_hi b_lo + a_lo b_hi``
  with ``hi = tf32(v)`` and ``lo = tf32(v - hi)`` (the "3xTF32" split: about fp32's accuracy), or, in the
  ``_tf32`` variant and only where the spec's ``rtol`` is at least :data:`TF32_RTOL`, once on the rounded inputs;
- after the loop, each output the thread holds runs the original's epilogue under its guard, the accumulator
  declared as its initial value plus the fragment's sum.

Not exact (the k order of the sum changes, and the tensor cores round their accumulation their own way): refused
where the spec asks for (nearly) exact results (``rtol`` and ``atol`` both under :data:`NEAR_EXACT`). A 16-bit
operand must be converted to float before the product (``__half2float(a) * __half2float(b)``, a cast, a float
local): a product of two halves is rounded to a half, which the tensor cores do not do. Infinite inputs are not the
original's function: 3xTF32's cross terms give ``inf * 0 = NaN`` where the original gives an infinity, and a term a
padded convolution's condition skips becomes ``0 * x``, NaN where the other operand is infinite (the verifier's
inputs are finite; a red team found both, 2026-12-04). Variants (:data:`CONFIGS`): 128 x 128, 64 x 128, 128 x 64 and
64 x 64 outputs a block; the lessons order them.
"""
from __future__ import annotations

from ptxfactory.protocol import LaunchConfig

from . import syntax as sx
from .base import Unit
from .rowpar import Refused
from .smem_tile import CONVERSION_CALLS, THREADS, SmemTilePass, _dedent, _Operand, _Plan, _sum_products
from .syntax import Node

WARPS = THREADS * THREADS // 32  # eight warps a block
TK = 32  # values of k a step
# outputs a block: 16 R x 16 C (128 x 128: 156 registers for bf16, 178 for 3xTF32 with NVRTC 13.0 for sm_90a, no
# spills, since the fetches are 16 bytes and the fragments ldmatrix's; it spilled at 255 with element fetches)
CONFIGS = ((8, 8), (4, 8), (8, 4), (4, 4))
TF32_CONFIGS = ((8, 8), (4, 8), (4, 4))  # the single-TF32 variant's tiles
# the cp.async variants (rm, rn, stages): every operand fetched 16 bytes at a time, the tiles of several steps in
# flight in dynamic shared memory, one barrier a step
ASYNC_CONFIGS = ((8, 8, 3), (4, 8, 3), (8, 4, 3))
ASYNC_SHARED_LIMIT = 112 * 1024  # bytes of the stages: two blocks an SM fit beside each other (228 KiB)
TF32_RTOL = 5e-4  # a single TF32 product is off by up to 2^-10 of it: proposed only above this relative tolerance
HALF_TYPES = {"__nv_bfloat16": "bf16", "nv_bfloat16": "bf16", "__half": "f16", "half": "f16"}
CONVERSIONS = CONVERSION_CALLS  # calls that convert a 16-bit load to float
NEAR_EXACT = 1e-6  # rtol and atol both below this: the spec is taken as asking for the original's bits
# elements after each shared row, by element kind and the tile's contiguous coordinate: a fragment read's 32 words in
# 32 banks (float: a k-contiguous row 36 words, an m-contiguous one a multiple of 32 plus 8), an ldmatrix's 8 rows of
# 16 bytes in 8 distinct 16-byte bank groups (an odd multiple of 16 bytes a row)
PAD = {("float", "k"): 4, ("float", "m"): 8, ("half", "k"): 8, ("half", "m"): 8}


class MmaTilePass(SmemTilePass):
    """A thread per output -> eight warps per block on ``mma.sync``, a ``16 rm x 16 rn`` tile of outputs per block
    (see the module docstring); ``single_tf32``: float operands rounded to TF32 once (the ``_tf32`` variant)."""

    group = "grid"
    exact = False

    def __init__(self, rm: int, rn: int, single_tf32: bool = False, stages: int = 1):
        super().__init__(rm, rn, TK)
        self.single_tf32 = single_tf32
        self.stages = stages  # > 1: the tiles of that many steps in flight through cp.async (dynamic shared memory)
        self.name = f"mma_tile_{self.tm}x{self.tn}" + ("_tf32" if single_tf32 else "") + (f"_s{stages}" if stages > 1 else "")
        self.wm = 4 if self.tm > self.tn else 2  # warps along the rows
        self.wn = WARPS // self.wm
        self.mt, self.nt = self.tm // self.wm // 16, self.tn // self.wn // 8  # fragments per warp, each side
        if self.mt < 1 or self.nt < 2 or self.nt % 2:  # (B's fragments loaded two at a time)
            raise ValueError(f"mma_tile: {self.tm} x {self.tn} outputs do not cover {self.wm} x {self.wn} warps")

    # -- precondition -------------------------------------------------------------------------------------

    def _plan(self, unit: Unit) -> _Plan:
        p = super()._plan(unit)  # the GEMM-class loop first: what a kernel without one lacks is said first
        try:
            return self._narrow(unit, p)
        except Refused as e:
            e.late = True  # read as a GEMM, refused by the tensor cores' own terms: the reason a report should give
            raise

    def _narrow(self, unit: Unit, p: _Plan) -> _Plan:
        """``p`` (smem_tile's reading) where the tensor cores take it, else :class:`Refused` with the reason."""
        spec = unit.spec
        if spec.check.rtol < NEAR_EXACT and spec.check.atol < NEAR_EXACT:
            raise Refused(f"the spec asks for (nearly) exact results (rtol {spec.check.rtol:g}, atol {spec.check.atol:g}): "
                          "the tensor cores sum in another order")
        if p.more:
            raise Refused(f"the loop carries {len(p.accs)} accumulations ({', '.join(a[0] for a in p.accs)}): one "
                          "fragment set a block (smem_tile takes several)")
        if p.acc_type != "float":
            raise Refused(f"the accumulator is {p.acc_type}, not float (the tensor cores accumulate in fp32)")
        sides = sorted(o.side for o in p.operands)
        if sides != ["x", "y"]:
            what = {("y", "y"): "both of the row's operand", ("x", "x"): "both of the column's operand"}.get(tuple(sides))
            raise Refused(f"{len(p.operands)} distinct loads in the loop" + (f", {what}" if what else "")
                          + " (two wanted: one of the row's operand, one of the column's)")
        kinds = {self._kind(o) for o in p.operands}
        if len(kinds) != 1 or None in kinds:
            raise Refused("the operands are " + " and ".join(sorted({o.ctype for o in p.operands}))
                          + " (both float, both bf16 or both f16 wanted)")
        if self.single_tf32:
            if kinds != {"float"}:
                raise Refused("16-bit operands: the single-TF32 variant is for float ones")
            if spec.check.rtol < TF32_RTOL:
                raise Refused(f"rtol {spec.check.rtol:g} is below {TF32_RTOL:g}: a single TF32 product is off by up to 2^-10")
        self._check_product(p, unit)
        if self.stages > 1:
            scalar = [o.ptr for o in p.operands if o.vector == 1]
            if scalar:
                raise Refused(f"{scalar[0]} is fetched element by element (no 16-byte run along k or its side, or a mask): "
                              "the cp.async stages copy 16 bytes at a time")
            if self._stage_layout(p.operands)[1] * self.stages > ASYNC_SHARED_LIMIT:
                raise Refused(f"{self.stages} stages of the tiles take over {ASYNC_SHARED_LIMIT} bytes of shared memory")
        return p

    @staticmethod
    def _kind(o: _Operand) -> str | None:
        return "float" if o.ctype == "float" else HALF_TYPES.get(o.ctype)

    def _check_product(self, p: _Plan, unit: Unit) -> list[str]:
        """The loop adds exactly ``conv(row load) * conv(column load)`` to the accumulator, times scale factors the
        same for every k and every output (number literals, scalar arguments the kernel never writes: ``alpha * a *
        b``, applied once to the sum; returned as their texts), nothing else: each factor a
        load, or a load converted to float (a cast to float or double, ``__bfloat162float``, ``__half2float``, a local
        of one of those types or of the load's own type declared from it at the body's top level before the product
        and read only there); 16-bit loads must be converted (a product of two halves rounds to a half: not what the
        tensor cores compute)."""
        body = p.loop.child_by_field_name("body")
        term, products = _sum_products(body, p.acc)
        factors = [f for t in products for f in _factors(t)]
        loads = {n.id: o for o in p.operands for n in o.nodes}
        written = sx.written_names(unit.body)
        uniform = {a.name for a in unit.spec.args if a.role == "scalar"} - written
        sides, scale = [], []
        for f in factors:
            node, converted = _unconvert(f)
            if node is not None and (sx.is_number(node) or (sx.is_ident(node) and sx.text(node) in uniform)):
                scale.append(sx.text(f))
                continue
            if sx.is_ident(node):
                node, converted = self._through_local(body, node, loads, converted)
            if node is None or node.id not in loads:
                raise Refused(f"the term {sx.text(term)!r} is not a product of a row load and a column load")
            if self._kind(loads[node.id]) != "float" and not converted:
                raise Refused(f"the factor {sx.text(f)!r} is a 16-bit product's operand, not converted to float (the "
                              "product is rounded to 16 bits there; the tensor cores keep it exact)")
            sides.append(loads[node.id].side)
        if sorted(sides) != ["x", "y"]:
            raise Refused(f"the term {sx.text(term)!r} is not a product of one row load and one column load")
        return scale

    @staticmethod
    def _through_local(body: Node, use: Node, loads: dict, converted: bool) -> tuple[Node | None, bool]:
        """The load a local factor holds (``float a = A[...]; ... a * b``), and whether it went through a conversion to
        float: declared once at the body's top level before ``use``, of float, double or the load's own type, and read
        nowhere else (no reference or pointer to it)."""
        name = sx.text(use)
        stmts = sx.statements(body) if body.type == "compound_statement" else []
        decls = [(s, d) for s in stmts if s.type == "declaration" and s.end_byte <= use.start_byte
                 for d in s.children_by_field_name("declarator")
                 if d.type == "init_declarator" and sx.is_ident(d.child_by_field_name("declarator"), name)]
        occurrences = [n for n in sx.walk(body) if n.type == "identifier" and sx.text(n) == name]
        if len(decls) != 1 or len(occurrences) != 2:
            return None, converted
        stmt, d = decls[0]
        ctype = sx.type_text(stmt.child_by_field_name("type")).replace("const ", "")
        node, conv = _unconvert(d.child_by_field_name("value"))
        if node is None or node.id not in loads:
            return None, converted
        if ctype in ("float", "double"):
            return node, True
        if ctype == loads[node.id].ctype:
            return node, converted or conv
        return None, converted

    def _check_shared(self, operands: list[_Operand]) -> None:
        total = self._stage_layout(operands)[1]
        if self.stages == 1 and total > 48 * 1024:
            raise Refused(f"{total} bytes of shared tiles (over 48 KiB)")

    def _stage_layout(self, operands: list[_Operand]) -> tuple[list[int], int]:
        """Each operand's tile's byte offset in a stage, and a stage's bytes (each tile 128-byte aligned)."""
        offsets, total = [], 0
        for o in operands:
            offsets.append(total)
            total += -(-self._tile_rows(o) * self._tile_pitch(o) * (4 if o.ctype == "float" else 2) // 128) * 128
        return offsets, total

    def _tile_contiguous(self, o: _Operand) -> str:
        """An operand's tile is contiguous along the coordinate its global memory is: k (``A[row * K + k]``: rows of
        the tile are its rows, read by ``ldmatrix``) or its side (``B[k * N + col]``: rows of the tile are k, read by
        ``ldmatrix.trans``), so that a 16-byte fetch is one 16-byte store."""
        return "k" if o.k_fastest else "m"

    def _tile_at(self, o: _Operand, kk: str = "ptxf_kk", m: str = "ptxf_m") -> str:
        return f"[{m}][{kk}]" if self._tile_contiguous(o) == "k" else f"[{kk}][{m}]"

    def _tile_rows(self, o: _Operand) -> int:
        return (self.tm if o.side == "y" else self.tn) if self._tile_contiguous(o) == "k" else self.tk

    def _tile_pitch(self, o: _Operand) -> int:
        along = self._tile_contiguous(o)
        inner = self.tk if along == "k" else (self.tm if o.side == "y" else self.tn)
        return inner + PAD["float" if o.ctype == "float" else "half", along]

    # -- rewrite ------------------------------------------------------------------------------------------

    def apply(self, unit: Unit) -> Unit:
        unit, p = self._read(unit)
        data = unit.data
        ind = "    "
        half = self._kind(p.operands[0]) != "float"
        ks = 16 if half else 8
        a = next(n for n, o in enumerate(p.operands) if o.side == "y")
        b = next(n for n, o in enumerate(p.operands) if o.side == "x")
        how = ("m16n8k16." + self._kind(p.operands[a])) if half else ("m16n8k8.tf32" + ("" if self.single_tf32 else " x3 (hi/lo split)"))
        out = [f"{{   // mma_tile (transform): {self.tm} x {self.tn} outputs per {THREADS} x {THREADS} block, {self.wm} x {self.wn} "
               f"warps of {self.mt} x {self.nt} fragments, mma.sync.{how}, k in steps of {self.tk}"]
        for s in p.uniform_stmts:
            out.append(ind + sx.text(s))
        if half:
            ptype = {"bf16": "bf16.bf16", "f16": "f16.f16"}[self._kind(p.operands[a])]
            op = f"mma.sync.aligned.m16n8k16.row.col.f32.{ptype}.f32"
        else:
            op = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
        out.append(f"{ind}auto ptxf_mma = [](float* ptxf_d, const unsigned* ptxf_p, const unsigned* ptxf_q) {{ asm(\"{op} {{%0, %1, %2, %3}}, "
                   "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\" : \"+f\"(ptxf_d[0]), \"+f\"(ptxf_d[1]), \"+f\"(ptxf_d[2]), \"+f\"(ptxf_d[3]) : "
                   "\"r\"(ptxf_p[0]), \"r\"(ptxf_p[1]), \"r\"(ptxf_p[2]), \"r\"(ptxf_p[3]), \"r\"(ptxf_q[0]), \"r\"(ptxf_q[1])); };")
        if not half:
            out.append(f"{ind}auto ptxf_tf32 = [](float ptxf_v) {{ unsigned ptxf_r; asm(\"cvt.rna.tf32.f32 %0, %1;\" : \"=r\"(ptxf_r) : \"f\"(ptxf_v)); return ptxf_r; }};")
        else:  # four 8 x 8 matrices of 16-bit elements from shared memory, each lane one row's address
            for name, trans in (("ptxf_ldm", ""), ("ptxf_ldmt", ".trans")):
                out.append(f"{ind}auto {name} = [](unsigned* ptxf_r, const void* ptxf_s) {{ asm volatile(\"ldmatrix.sync.aligned.m8n8.x4{trans}"
                           ".shared.b16 {%0, %1, %2, %3}, [%4];\" : \"=r\"(ptxf_r[0]), \"=r\"(ptxf_r[1]), \"=r\"(ptxf_r[2]), \"=r\"(ptxf_r[3]) : "
                           "\"r\"((unsigned)__cvta_generic_to_shared(ptxf_s))); };")
        if self.stages > 1:
            out.append(f"{ind}extern __shared__ __align__(128) unsigned char ptxf_smem[];  // {self.stages} steps' tiles")
            out += [f"{ind}auto ptxf_cp16 = [](void* ptxf_s, const void* ptxf_g) {{ asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\" "
                    ":: \"r\"((unsigned)__cvta_generic_to_shared(ptxf_s)), \"l\"(ptxf_g) : \"memory\"); };",
                    f"{ind}auto ptxf_commit = [] {{ asm volatile(\"cp.async.commit_group;\" ::: \"memory\"); }};",
                    f"{ind}auto ptxf_wait = [] {{ asm volatile(\"cp.async.wait_group {self.stages - 2};\" ::: \"memory\"); }};"]
        for n, o in enumerate(p.operands):
            if self.stages > 1:
                break
            what = "rows" if o.side == "y" else "columns"
            out.append(f"{ind}__shared__ __align__(16) {o.ctype} ptxf_s{n}[{self._tile_rows(o)}][{self._tile_pitch(o)}];  "
                       + (f"// {what} of the tile, k contiguous" if self._tile_contiguous(o) == "k" else f"// k of the tile, {what} contiguous"))
            out.append(f"{ind}{self._fetch_registers(n, o)}")
        out += [f"{ind}const int ptxf_tid = threadIdx.y * {THREADS} + threadIdx.x;",
                f"{ind}const long long ptxf_y0 = (long long)blockIdx.y * {self.tm}, ptxf_x0 = (long long)blockIdx.x * {self.tn};",
                f"{ind}const int ptxf_lane = ptxf_tid % 32, ptxf_g = ptxf_lane / 4, ptxf_t = ptxf_lane % 4;",
                f"{ind}const int ptxf_wm = (ptxf_tid / 32) / {self.wn} * {self.tm // self.wm}, "
                f"ptxf_wn = (ptxf_tid / 32) % {self.wn} * {self.tn // self.wn};  // the warp's part of the tile",
                f"{ind}float ptxf_c[{self.mt}][{self.nt}][4];",
                "#pragma unroll", f"{ind}for (int ptxf_i = 0; ptxf_i < {self.mt}; ++ptxf_i)",
                "#pragma unroll", f"{ind}    for (int ptxf_j = 0; ptxf_j < {self.nt}; ++ptxf_j)",
                "#pragma unroll", f"{ind}        for (int ptxf_e = 0; ptxf_e < 4; ++ptxf_e) ptxf_c[ptxf_i][ptxf_j][ptxf_e] = 0.0f;"]
        fragments = [f"{ind}    " + line if not line.startswith("#") else line
                     for line in self._fragments(a, b, p.operands[a], p.operands[b], half, ks)]
        if self.stages > 1:
            out += self._async_pipeline(p, ind, fragments)
        else:
            out += self._pipeline(p, ind) + fragments + [f"{ind}    __syncthreads();", f"{ind}}}"]
        out += self._outputs(p, unit, ind)
        out.append("}")
        text = sx.apply_edits(data, [(unit.body.start_byte, unit.body.end_byte, "\n".join(out).encode())])
        shared = self._stage_layout(p.operands)[1] * self.stages if self.stages > 1 else p.launch.shared_mem
        return unit.with_text(text, launch=LaunchConfig(grid=p.launch.grid, block=p.launch.block, shared_mem=shared))

    def _async_pipeline(self, p: _Plan, ind: str, fragments: list[str]) -> list[str]:
        """The k loop with ``stages`` steps' tiles in flight: the first ``stages - 1`` steps fetched before it (one
        cp.async group each); each step waits for its own group, one barrier (its tiles visible, and every warp done
        with the step before, whose stage the next fetch overwrites), fetches the step ``stages - 1`` ahead into that
        stage (a group, empty past the loop's end), then the step's arithmetic (``fragments``) on its stage."""
        s, tk, kt = self.stages, self.tk, p.k_type
        out = self._pipeline_head(p, ind)
        out += ["#pragma unroll", f"{ind}for (int ptxf_sf = 0; ptxf_sf < {s - 1}; ++ptxf_sf) {{"]
        out += self._async_fetch(p, f"({p.k_from}) + ptxf_sf * {tk}", "ptxf_sf", ind + "    ")
        out += [f"{ind}    ptxf_commit();", f"{ind}}}", f"{ind}int ptxf_st = 0;  // the stage holding this step's tiles",
                f"{ind}for ({kt} ptxf_kb = {p.k_from}; ptxf_kb < ptxf_kend; ptxf_kb += {tk}) {{",
                f"{ind}    ptxf_wait();", f"{ind}    __syncthreads();"]
        out += self._async_fetch(p, f"ptxf_kb + {(s - 1) * tk}", f"(ptxf_st + {s - 1}) % {s}", ind + "    ")
        out += [f"{ind}    ptxf_commit();"]
        out += [f"{ind}    {line}" for line in self._stage_tiles(p, "ptxf_st")]
        out += fragments
        out += [f"{ind}    ptxf_st = ptxf_st == {s - 1} ? 0 : ptxf_st + 1;", f"{ind}}}"]
        return out

    def _stage_tiles(self, p: _Plan, stage: str) -> list[str]:
        """``ptxf_s{n}``: each operand's tile in stage ``stage`` of the dynamic shared memory, as a 2-D array."""
        offsets, size = self._stage_layout(p.operands)
        out = []
        for n, o in enumerate(p.operands):
            pitch = self._tile_pitch(o)
            out.append(f"{o.ctype} (*ptxf_s{n})[{pitch}] = reinterpret_cast<{o.ctype} (*)[{pitch}]>(ptxf_smem + ({stage}) * {size}"
                       f" + {offsets[n]});")
        return out

    def _async_fetch(self, p: _Plan, kb: str, stage: str, ind: str) -> list[str]:
        """Every operand's share of the step at ``kb`` into stage ``stage``: 16 aligned bytes in bounds by cp.async,
        else the packed elements (zeros out of bounds) by a 16-byte shared store; nothing past the loop's end."""
        out = [f"{ind}{{", f"{ind}    const {p.k_type} ptxf_kf = {kb};", f"{ind}    if (ptxf_kf < ptxf_kend) {{"]
        out += [f"{ind}        {line}" for line in self._stage_tiles(p, stage)]
        for n, o in enumerate(p.operands):
            total, each = self._share(o)
            hm, hk = self._slot(o, "m"), self._slot(o, "k")
            at = f"ptxf_s{n}{self._tile_at(o)}"
            inner = self._vector_fetch(p, n, o, hm, hk, fast=lambda a, at=at: f"ptxf_cp16(&{at}, {a});",
                                       slow=lambda v, at=at: f"*reinterpret_cast<uint4*>(&{at}) = {v};")
            out += ["#pragma unroll", f"{ind}        for (int ptxf_u = 0; ptxf_u < {each}; ++ptxf_u) {{",
                    f"{ind}            const int ptxf_e = {self._first(o)};", f"{ind}            {self._element(o)}",
                    f"{ind}            if (ptxf_e < {total}) {{", *(f"{ind}                {line}" for line in inner),
                    f"{ind}            }}", f"{ind}        }}"]
        return out + [f"{ind}    }}", f"{ind}}}"]

    def _fragments(self, a: int, b: int, oa: _Operand, ob: _Operand, half: bool, ks: int) -> list[str]:
        """One step's k on the tensor cores: for each ``ks`` slice, the warp's A and B fragments from shared memory, then
        one ``mma`` per (A, B) fragment pair (three for the 3xTF32 split). 16-bit fragments by ``ldmatrix`` (``.trans``
        from a tile whose rows are k): A's four 8 x 8 matrices (rows 0-7 and 8-15 at k 0-7, then at k 8-15) are its
        registers 0-3; two of B's fragments (columns 0-7 at k 0-7 and 8-15, then columns 8-15) per load."""
        sa, sb = f"ptxf_s{a}", f"ptxf_s{b}"
        rows = [f"ptxf_wm + ptxf_i * 16 + ptxf_g", f"ptxf_wm + ptxf_i * 16 + ptxf_g + 8"]
        col = "ptxf_wn + ptxf_j * 8 + ptxf_g"
        out = ["#pragma unroll", f"for (int ptxf_ks = 0; ptxf_ks < {self.tk}; ptxf_ks += {ks}) {{"]
        if half:
            # lane l addresses row l % 8 of matrix l / 8
            a_at = self._tile_at(oa, "ptxf_ks + (ptxf_lane >> 4) * 8" + ("" if oa.k_fastest else " + (ptxf_lane & 7)"),
                                 "ptxf_wm + ptxf_i * 16 + ((ptxf_lane >> 3) & 1) * 8" + (" + (ptxf_lane & 7)" if oa.k_fastest else ""))
            b_at = self._tile_at(ob, "ptxf_ks + ((ptxf_lane >> 3) & 1) * 8" + ("" if ob.k_fastest else " + (ptxf_lane & 7)"),
                                 "ptxf_wn + ptxf_j * 8 + (ptxf_lane >> 4) * 8" + (" + (ptxf_lane & 7)" if ob.k_fastest else ""))
            lda, ldb = ("ptxf_ldm" if o.k_fastest else "ptxf_ldmt" for o in (oa, ob))
            out += [f"    unsigned ptxf_a[{self.mt}][4], ptxf_b[{self.nt}][2];", "#pragma unroll",
                    f"    for (int ptxf_i = 0; ptxf_i < {self.mt}; ++ptxf_i) {lda}(ptxf_a[ptxf_i], &{sa}{a_at});",
                    "#pragma unroll",
                    f"    for (int ptxf_j = 0; ptxf_j < {self.nt}; ptxf_j += 2) {ldb}(&ptxf_b[ptxf_j][0], &{sb}{b_at});",
                    "#pragma unroll", f"    for (int ptxf_i = 0; ptxf_i < {self.mt}; ++ptxf_i)", "#pragma unroll",
                    f"        for (int ptxf_j = 0; ptxf_j < {self.nt}; ++ptxf_j) ptxf_mma(ptxf_c[ptxf_i][ptxf_j], ptxf_a[ptxf_i], ptxf_b[ptxf_j]);",
                    "}"]
            return out
        k0, k1 = "ptxf_ks + ptxf_t", "ptxf_ks + ptxf_t + 4"
        a_at = [self._tile_at(oa, k, r) for r, k in ((rows[0], k0), (rows[1], k0), (rows[0], k1), (rows[1], k1))]
        b_at = [self._tile_at(ob, k, col) for k in (k0, k1)]
        if self.single_tf32:
            out += [f"    unsigned ptxf_a[{self.mt}][4], ptxf_b[{self.nt}][2];", "#pragma unroll",
                    f"    for (int ptxf_i = 0; ptxf_i < {self.mt}; ++ptxf_i) {{",
                    *(f"        ptxf_a[ptxf_i][{q}] = ptxf_tf32({sa}{at});" for q, at in enumerate(a_at)), "    }",
                    "#pragma unroll", f"    for (int ptxf_j = 0; ptxf_j < {self.nt}; ++ptxf_j) {{",
                    *(f"        ptxf_b[ptxf_j][{q}] = ptxf_tf32({sb}{at});" for q, at in enumerate(b_at)), "    }",
                    "#pragma unroll", f"    for (int ptxf_i = 0; ptxf_i < {self.mt}; ++ptxf_i)", "#pragma unroll",
                    f"        for (int ptxf_j = 0; ptxf_j < {self.nt}; ++ptxf_j) ptxf_mma(ptxf_c[ptxf_i][ptxf_j], ptxf_a[ptxf_i], ptxf_b[ptxf_j]);",
                    "}"]
            return out
        split = lambda arr, q, s, at: [  # noqa: E731  hi = tf32(v), lo = tf32(v - hi)
            f"        {{ const float ptxf_v = {s}{at}; {arr}h[{q}] = ptxf_tf32(ptxf_v); "
            f"{arr}l[{q}] = ptxf_tf32(ptxf_v - __uint_as_float({arr}h[{q}])); }}"]
        out += [f"    unsigned ptxf_bh[{self.nt}][2], ptxf_bl[{self.nt}][2];",  # B's fragments, then one row of A's at a time
                "#pragma unroll", f"    for (int ptxf_j = 0; ptxf_j < {self.nt}; ++ptxf_j) {{",
                *(line for q, at in enumerate(b_at) for line in split("ptxf_b", f"ptxf_j][{q}", sb, at)), "    }",
                "#pragma unroll", f"    for (int ptxf_i = 0; ptxf_i < {self.mt}; ++ptxf_i) {{",
                "        unsigned ptxf_ah[4], ptxf_al[4];",
                *(line for q, at in enumerate(a_at) for line in split("ptxf_a", f"{q}", sa, at)),
                "#pragma unroll", f"        for (int ptxf_j = 0; ptxf_j < {self.nt}; ++ptxf_j) {{  // the small products first",
                "            ptxf_mma(ptxf_c[ptxf_i][ptxf_j], ptxf_al, ptxf_bh[ptxf_j]);",
                "            ptxf_mma(ptxf_c[ptxf_i][ptxf_j], ptxf_ah, ptxf_bl[ptxf_j]);",
                "            ptxf_mma(ptxf_c[ptxf_i][ptxf_j], ptxf_ah, ptxf_bh[ptxf_j]);",
                "        }", "    }", "}"]
        return out

    def _outputs(self, p: _Plan, unit: Unit, ind: str) -> list[str]:
        """Each output the thread's fragments hold (``c0, c1``: row g, columns 2t and 2t + 1 of the fragment; ``c2, c3``:
        row g + 8): its row and column declared, then under the guard the original's declarations, the accumulator's
        now its initial value plus the fragment's sum, and the epilogue."""
        init = p.acc_decl.child_by_field_name("value")
        scale = self._check_product(p, unit)
        mine = "ptxf_c[ptxf_i][ptxf_j][ptxf_e]" if not scale else f"({' * '.join(scale)}) * ptxf_c[ptxf_i][ptxf_j][ptxf_e]"
        lines = [f"    if ({self._guard_text(p)}) {{"]
        for s in p.pre:
            text = sx.render(s, unit.data, lambda n: f"({sx.text(init)}) + {mine}".encode() if n.id == init.id else None)
            lines.append("        " + text.decode())
        for s in p.post:
            lines += ["        " + line for line in _dedent(sx.text(s), unit.data, s)]
        lines.append("    }")
        return ["#pragma unroll", f"{ind}for (int ptxf_i = 0; ptxf_i < {self.mt}; ++ptxf_i) {{", "#pragma unroll",
                f"{ind}    for (int ptxf_j = 0; ptxf_j < {self.nt}; ++ptxf_j) {{", "#pragma unroll",
                f"{ind}        for (int ptxf_e = 0; ptxf_e < 4; ++ptxf_e) {{",
                f"{ind}            const {p.y.ctype} {p.y.name} = ({p.y.ctype})(ptxf_y0 + ptxf_wm + ptxf_i * 16 + ptxf_g + (ptxf_e / 2) * 8);",
                f"{ind}            const {p.x.ctype} {p.x.name} = ({p.x.ctype})(ptxf_x0 + ptxf_wn + ptxf_j * 8 + 2 * ptxf_t + ptxf_e % 2);",
                *(ind * 3 + line for line in lines), f"{ind}        }}", f"{ind}    }}", f"{ind}}}"]


FLOAT_CASTS = frozenset({"float", "double"})


def _factors(term: Node) -> list[Node]:
    """The operands of ``term``'s product, parentheses and casts to float or double opened (``(float)(a * b)``); a cast
    to another type (``(int)(a * b)``) ends the walk: that factor is the cast."""
    node = sx.unparen(term)
    inner = node
    while inner is not None and inner.type == "cast_expression" and _cast_type(inner) in FLOAT_CASTS:
        inner = sx.unparen(inner.child_by_field_name("value"))
    if inner is not None and inner.type == "binary_expression" and sx.operator(inner) == "*":
        return _factors(inner.child_by_field_name("left")) + _factors(inner.child_by_field_name("right"))
    return [node]  # a leaf keeps its cast: _unconvert reads it as a conversion


def _cast_type(node: Node) -> str:
    return sx.type_text(node.child_by_field_name("type")).replace("const ", "")


def _unconvert(node: Node | None) -> tuple[Node | None, bool]:
    """``node`` without parentheses, casts to float or double and conversion calls to float (``__bfloat162float(v)`` ->
    ``v``), and whether a conversion was opened. A cast to another type (``(int)A[i]``) is not opened."""
    converted = False
    while node is not None:
        node = sx.unparen(node)
        if node.type == "cast_expression" and _cast_type(node) in FLOAT_CASTS:
            node, converted = node.child_by_field_name("value"), True
        elif node.type == "call_expression" and sx.call_name(node) in CONVERSIONS and len(sx.call_args(node)) == 1:
            node, converted = sx.call_args(node)[0], True
        else:
            break
    return node, converted
