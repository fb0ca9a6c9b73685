//! Template of the ptxfactory "elementwise" family (search/generators/elementwise.py). Dollar-brace
//! placeholders are filled in by string.Template; lines starting with //! are dropped. The knobs are
//! BLOCK (threads), UNROLL (rows per thread, one vector each), the vector width VB (bytes; EPV
//! elements), the load/store hints (LOAD_X, STORE_Y) and the epilogue (ptxf_act).
// ptxfactory "elementwise" family: y[R, C] = act(x[R, C] [+ b[C]]) in fp32, rounded once to y's dtype.
//   act: ${ACT_NAME}
//
// Grid: one block per (row group, column chunk), linearised in blockIdx.x (column chunk fastest):
// a row group is ${RPB} rows (${WARPS} warps x ${UNROLL} rows each), a column chunk is 32 vectors of
// ${EPV} elements (${VB} bytes): lane l of a warp owns vector l of the chunk in each of its rows, so
// a warp reads and writes 32 x ${VB} contiguous bytes per row, and no thread divides by C per element.
// Paths, chosen once per launch from C and the pointers (uniform, no divergence):
//   fast:    C % ${EPV} == 0 and x, y ${VB}-byte aligned: row r's vector v is vector r * (C / ${EPV}) + v;
//            b's vector is loaded once per thread (one ${VB}-byte load when b is aligned) and reused
//            for all ${UNROLL} rows.
//   rows:    x and y equally misaligned (odd C): each row has a scalar head (up to ${EPV} - 1 elements
//            before its first aligned vector), aligned vectors, and a scalar tail; b per element (L1).
//   scalar:  x and y misaligned differently: one element at a time, still coalesced.
${HELPERS}
static __device__ __forceinline__ float ptxf_act(float v)
{
${ACT}
}

// One element through the epilogue: act(x + b[j]) in fp32 (j: column).
static __device__ __forceinline__ ${TX} ptxf_one(${TX} xv, const ${TB}* __restrict__ b, long long j)
{
    float f = ptxf_x2f(xv);
    if constexpr (${HAS_B}) f += ptxf_b2f(__ldg(b + j));
    return ptxf_f2x(ptxf_act(f));
}

// fast path: C % EPV == 0, x and y VB-byte aligned; b vector-loaded when bvec (b VB-byte aligned, same dtype).
static __device__ __forceinline__ void ptxf_ew_fast(const ${TX}* __restrict__ x, const ${TB}* __restrict__ b,
                                                    ${TX}* __restrict__ y, long long R, long long C,
                                                    unsigned chunk, long long row0, unsigned lane, bool bvec)
{
    const long long nvec = C / ${EPV};
    const long long v = (long long)chunk * 32 + lane;  // vector index within the row
    if (v >= nvec) return;                              // no barriers in this kernel: early exit is safe
    float bf[${EPV}];
#pragma unroll
    for (int e = 0; e < ${EPV}; ++e) bf[e] = 0.f;
    if constexpr (${HAS_B}) {
        if (bvec) {
${LOAD_B_VEC}
        } else {
#pragma unroll
            for (int e = 0; e < ${EPV}; ++e) bf[e] = ptxf_b2f(__ldg(b + v * ${EPV} + e));
        }
    }
    const long long stride = (long long)${WARPS} * nvec;           // vectors between a thread's rows
    const ${VT}* __restrict__ xv = reinterpret_cast<const ${VT}*>(x) + (row0 * nvec + v);
    ${VT}* __restrict__ yv = reinterpret_cast<${VT}*>(y) + (row0 * nvec + v);
    const long long left = R - row0;                                 // rows left from this thread's first
    const int rows = left < ${UNROLL} * ${WARPS} ? (int)left : ${UNROLL} * ${WARPS};
    ${VT} xs[${UNROLL}];
#pragma unroll
    for (int k = 0; k < ${UNROLL}; ++k)  // all loads first: UNROLL vectors in flight per thread
        xs[k] = k * ${WARPS} < rows ? ${LOAD_X}(xv + k * stride) : ptxf_vzero();
#pragma unroll
    for (int k = 0; k < ${UNROLL}; ++k) {
        if (k * ${WARPS} < rows) {
            float f[${EPV}];
            ptxf_unpack(xs[k], f);
#pragma unroll
            for (int e = 0; e < ${EPV}; ++e) {
                if constexpr (${HAS_B}) f[e] += bf[e];
                f[e] = ptxf_act(f[e]);
            }
            ${STORE_Y}(yv + k * stride, ptxf_pack(f));
        }
    }
}

// rows path: x and y have the same misalignment modulo VB; each row: head (scalar), aligned vectors, tail (scalar).
static __device__ __forceinline__ int ptxf_head(const ${TX}* p, long long C)
{
    // elements before the first VB-byte aligned one (at most C)
    const int h = (int)(((${VB}u - (unsigned)(reinterpret_cast<unsigned long long>(p) % ${VB}u)) % ${VB}u) / sizeof(${TX}));
    return h < C ? h : (int)C;
}

static __device__ __forceinline__ void ptxf_ew_rows(const ${TX}* __restrict__ x, const ${TB}* __restrict__ b,
                                                    ${TX}* __restrict__ y, long long R, long long C,
                                                    unsigned chunk, long long row0, unsigned lane)
{
    const long long v = (long long)chunk * 32 + lane;               // aligned vector index within the row
    const long long stride = (long long)${WARPS} * C;               // elements between a thread's rows
    const ${TX}* __restrict__ xr = x + row0 * C;
    ${TX}* __restrict__ yr = y + row0 * C;
    const long long left = R - row0;
    const int rows = left < ${UNROLL} * ${WARPS} ? (int)left : ${UNROLL} * ${WARPS};
    ${VT} xs[${UNROLL}];
#pragma unroll
    for (int k = 0; k < ${UNROLL}; ++k) {
        const ${TX}* p = xr + k * stride;
        const int h = ptxf_head(p, C);
        xs[k] = (k * ${WARPS} < rows && v < (C - h) / ${EPV}) ? ${LOAD_X}(reinterpret_cast<const ${VT}*>(p + h) + v) : ptxf_vzero();
    }
#pragma unroll
    for (int k = 0; k < ${UNROLL}; ++k) {
        const ${TX}* p = xr + k * stride;
        const int h = ptxf_head(p, C);
        if (k * ${WARPS} < rows && v < (C - h) / ${EPV}) {
            const long long col = h + v * ${EPV};                   // first column of this vector
            float f[${EPV}];
            ptxf_unpack(xs[k], f);
#pragma unroll
            for (int e = 0; e < ${EPV}; ++e) {
                if constexpr (${HAS_B}) f[e] += ptxf_b2f(__ldg(b + col + e));
                f[e] = ptxf_act(f[e]);
            }
            ${STORE_Y}(reinterpret_cast<${VT}*>(yr + k * stride + h) + v, ptxf_pack(f));
        }
    }
    if (chunk == 0) {  // head: lanes [0, EPV); tail: lanes [EPV, 2 EPV) (head and tail are < EPV elements each)
#pragma unroll 1
        for (int k = 0; k < ${UNROLL}; ++k) {
            if (k * ${WARPS} >= rows) break;
            const ${TX}* p = xr + k * stride;
            const int h = ptxf_head(p, C);
            const long long tail0 = h + (C - h) / ${EPV} * ${EPV};
            long long j = -1;
            if ((int)lane < h) j = lane;
            else if (lane >= ${EPV}u && tail0 + (lane - ${EPV}u) < C) j = tail0 + (lane - ${EPV}u);
            if (j >= 0) yr[k * stride + j] = ptxf_one(p[j], b, j);
        }
    }
}

// scalar path: x and y misaligned differently; lane l takes columns chunk * 32 * EPV + l + 32 e.
static __device__ __forceinline__ void ptxf_ew_scalar(const ${TX}* __restrict__ x, const ${TB}* __restrict__ b,
                                                      ${TX}* __restrict__ y, long long R, long long C,
                                                      unsigned chunk, long long row0, unsigned lane)
{
    const long long c0 = (long long)chunk * (32 * ${EPV}) + lane;
#pragma unroll 1
    for (int k = 0; k < ${UNROLL}; ++k) {
        const long long row = row0 + (long long)k * ${WARPS};
        if (row >= R) continue;
#pragma unroll
        for (int e = 0; e < ${EPV}; ++e) {
            const long long j = c0 + 32 * e;
            if (j < C) y[row * C + j] = ptxf_one(x[row * C + j], b, j);
        }
    }
}

${LINKAGE}__global__ void __launch_bounds__(${BLOCK}, ${MINB}) ${KERNEL}(${PARAMS})
{
    const long long ptxf_R = (long long)${R}, ptxf_C = (long long)${C};
    const long long ptxf_nch_ = (ptxf_C + 32 * ${EPV} - 1) / (32 * ${EPV});
    const unsigned ptxf_nch = ptxf_nch_ > 0 ? (unsigned)ptxf_nch_ : 1u;         // column chunks per row
    const unsigned ptxf_chunk = blockIdx.x % ptxf_nch;
    const long long ptxf_row0 = (long long)(blockIdx.x / ptxf_nch) * ${RPB} + threadIdx.x / 32;
    const unsigned ptxf_lane = threadIdx.x % 32;
    const unsigned long long ptxf_xa = reinterpret_cast<unsigned long long>(${X});
    const unsigned long long ptxf_ya = reinterpret_cast<unsigned long long>(${Y});
    if (ptxf_C % ${EPV} == 0 && (ptxf_xa | ptxf_ya) % ${VB} == 0)
        ptxf_ew_fast(${X}, ${B}, ${Y}, ptxf_R, ptxf_C, ptxf_chunk, ptxf_row0, ptxf_lane, ${BVEC});
    else if ((ptxf_xa ^ ptxf_ya) % ${VB} == 0)
        ptxf_ew_rows(${X}, ${B}, ${Y}, ptxf_R, ptxf_C, ptxf_chunk, ptxf_row0, ptxf_lane);
    else
        ptxf_ew_scalar(${X}, ${B}, ${Y}, ptxf_R, ptxf_C, ptxf_chunk, ptxf_row0, ptxf_lane);
}
