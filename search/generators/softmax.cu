//! Template of the ptxfactory "softmax" family (search/generators/softmax.py). Dollar-brace
//! placeholders are filled in by string.Template; lines starting with //! are dropped. The knobs are
//! the template parameters of ptxf_softmax (TPR threads per row, RPB rows per block, MV cached
//! 16-byte vectors per thread, RAW cache kind), the block size ${BLOCK} and the exp function.
// ptxfactory "softmax" family: row softmax of x[R, C] into y[R, C], fp32 math, one rounding.
//   y[r, i] = exp(x[r, i] - m_r) / sum_j exp(x[r, j] - m_r),   m_r = max_j x[r, j]
//
// One block holds RPB consecutive rows; it takes them in steps of BLOCK / TPR rows, each row by TPR
// threads (a multiple of 32: one warp never spans two rows). A row is split into a head of at most
// VEC-1 elements (up to the first 16-byte boundary of the row), a body of 16-byte vectors and a
// tail of at most VEC-1 elements, so every row length and row start takes the vector path as long
// as x and y have the same alignment modulo 16 (a scalar path otherwise, for the whole launch).
//
// Each thread first reduces its own share of the row to a partial state (m, s): its maximum m (in
// exp units: times log2(e) for exp2) and s = sum exp(x - m). The first MV vectors of its share stay
// in registers: as exp(x - m) in fp32 (RAW = false: exp evaluated once per element) or as the raw
// 16-byte vectors (RAW = true: half the registers for 2-byte dtypes, exp evaluated again when
// writing). Longer rows stream the rest in chunks from global memory (online: the running sum is
// rescaled when the maximum grows) and read it again, mostly from L2, for the write. One reduction
// (warp shuffles, then shared memory across the warps of a row) merges the partial states into the
// row's (M, S); then every element is y = exp(x - M) * (1 / S), one reciprocal per thread. Per-row
// outputs (the max, the sum, the log-sum-exp), where the kernel has them, are stored by the row's first thread.
${CONVERT}
// e^d (expf) or 2^d (exp2: arguments are in log2 units, the inputs prescaled by K = log2(e)).
static __device__ __forceinline__ float ptxf_ex(float d) { ${EX_BODY} }

// Merges partial softmax state (mo, so) into (m, s). Symmetric in its two operands, so both lanes of
// a butterfly exchange compute bit-identical results; a state with m = -inf (no elements) has s = 0.
static __device__ __forceinline__ void ptxf_merge(float& m, float& s, float mo, float so)
{
    const float mn = fmaxf(m, mo);
    const float a = (m == mn) ? s : s * ptxf_ex(m - mn);
    const float b = (mo == mn) ? so : so * ptxf_ex(mo - mn);
    m = mn;
    s = a + b;
}

// Adds VEC values (raw units, -inf for none) to the state (m, s) in exp units (online softmax).
static __device__ __forceinline__ void ptxf_online(float& m, float& s, const float (&f)[${VEC}])
{
    float vm = f[0];
#pragma unroll
    for (int k = 1; k < ${VEC}; ++k) vm = fmaxf(vm, f[k]);
    const float mn = fmaxf(m, vm * ${K});
    const float ms = (mn == ptxf_neg_inf()) ? 0.f : mn;  // no element yet: any finite reference keeps exp(-inf) = 0
    float acc = s * ptxf_ex(m - ms);
#pragma unroll
    for (int k = 0; k < ${VEC}; ++k) acc += ptxf_ex(fmaf(f[k], ${K}, -ms));
    m = mn;
    s = acc;
}

// Merges the partial states of the TPR threads of each row; every thread of the row gets the same (m, s).
// red: 2 floats per warp of the block.
template <int TPR>
static __device__ __forceinline__ void ptxf_row_reduce(float& m, float& s, float* __restrict__ red)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float mo = __shfl_xor_sync(0xffffffffu, m, o), so = __shfl_xor_sync(0xffffffffu, s, o);
        ptxf_merge(m, s, mo, so);
    }
    if constexpr (TPR > 32) {  // several warps per row: combine their states through shared memory
        constexpr int WPR = TPR / 32;
        const int warp = threadIdx.x / 32;
        if (threadIdx.x % 32 == 0) {
            red[2 * warp] = m;
            red[2 * warp + 1] = s;
        }
        __syncthreads();
        const int first = warp / WPR * WPR;  // this row's first warp
        float mm = red[2 * first];
#pragma unroll
        for (int i = 1; i < WPR; ++i) mm = fmaxf(mm, red[2 * (first + i)]);
        float ss = 0.f;
#pragma unroll 4
        for (int i = 0; i < WPR; ++i) {  // one exp per warp; an empty warp (m = -inf) adds s = 0
            const float mi = red[2 * (first + i)], si = red[2 * (first + i) + 1];
            ss += (mi == mm) ? si : si * ptxf_ex(mi - mm);
        }
        m = mm;  // same order in every thread of the row: identical results
        s = ss;
    }
}

// Loads N vectors of the row body (vector indices v0 + i * TPR, i < N) into q, -inf vectors past nb;
// HINT: with the family's load hint (__ldg or evict-first __ldcs), else __ldg (kept in L2 for a second read).
template <int N, int TPR, bool HINT>
static __device__ __forceinline__ void ptxf_load(uint4 (&q)[N], const uint4* __restrict__ xb, int v0, int nb, bool active)
{
#pragma unroll
    for (int i = 0; i < N; ++i) {
        const int v = v0 + (int)i * TPR;
        if (active && v < nb) q[i] = HINT ? ${LOAD_X}(xb + v) : __ldg(xb + v);
        else q[i] = make_uint4(${NEG_WORD}, ${NEG_WORD}, ${NEG_WORD}, ${NEG_WORD});
    }
}

// One tier of the dispatch. __noinline__: each tier gets its own register allocation (inlined into one
// kernel, the tiers together spilled where none did alone).
template <int TPR, int RPB, int MV, bool RAW>
static __device__ __noinline__ void ptxf_softmax(const ${TX}* __restrict__ x, ${TX}* __restrict__ y, long long R, ${IDX} C,
                                                 ${TS0}* __restrict__ s0, ${TS1}* __restrict__ s1)
{
    static_assert(TPR % 32 == 0 && TPR <= ${BLOCK} && ${BLOCK} % TPR == 0 && MV >= 1, "bad softmax configuration");
    static_assert(TPR >= ${VEC}, "head and tail need one thread per element");
    constexpr int GROUPS = ${BLOCK} / TPR;                          // rows in flight per step
    constexpr int STEPS = RPB > GROUPS ? RPB / GROUPS : 1;          // uniform trip count: barriers stay aligned
    static_assert(RPB <= GROUPS || RPB % GROUPS == 0, "rows per block must be a multiple of rows per step");
    constexpr int RCH = RAW ? 2 : (MV < ${RCH} ? MV : ${RCH});                // vectors per thread per chunk past the cache
    const int t = threadIdx.x % TPR;
    const float NEG = ptxf_neg_inf();
    __shared__ float red[2 * (${BLOCK} / 32) * 2];                  // (m, s) per warp, two buffers
    // the vector path needs x and y congruent modulo 16 bytes (then every row's head has the same length in both)
    // and rows shorter than 2^31 elements (32-bit indices within a row)
    const bool ptxf_vec = ((reinterpret_cast<unsigned long long>(x) ^ reinterpret_cast<unsigned long long>(y)) & 15u) == 0
                          && ptxf_aligned(x, sizeof(${TX})) && (long long)C <= 2147483647LL;
#pragma unroll 1
    for (int step = 0; step < STEPS; ++step) {
        const int r = step * GROUPS + threadIdx.x / TPR;           // row within the block
        const long long row = (long long)blockIdx.x * RPB + r;
        const bool active = r < RPB && row < R;                     // inactive threads still reach every barrier
        const long long base = active ? row * (long long)C : 0;
        const ${TX}* __restrict__ xr = x + base;
        ${TX}* __restrict__ yr = y + base;
        float* __restrict__ rb = red + (step & 1) * (${BLOCK} / 32) * 2;  // double-buffered: no trailing barrier
        if (ptxf_vec) {
            // head (to the first 16-byte boundary), body of nb vectors, tail
            const int Ci = (int)C;                                  // the vector path has C <= INT_MAX: 32-bit indices in a row
            const int head = min(Ci, (int)(((16u - (unsigned)(reinterpret_cast<unsigned long long>(xr) & 15u)) & 15u) / sizeof(${TX})));
            const int nb = (Ci - head) / ${VEC};
            const int tail0 = head + nb * ${VEC};
            const uint4* __restrict__ xb = reinterpret_cast<const uint4*>(xr + head);
            uint4* __restrict__ yb = reinterpret_cast<uint4*>(yr + head);
            const bool has_h = active && t < head, has_t = active && t < Ci - tail0;
            float hv = has_h ? ptxf_x2f(xr[t]) : NEG;                 // RAW: x; else exp(x - mc) once known
            float tv = has_t ? ptxf_x2f(xr[tail0 + t]) : NEG;
            uint4 xs[MV];
            ptxf_load<MV, TPR, true>(xs, xb, t, nb, active);        // all loads first: MV in flight
            // past the cache first, while the cache is still raw (4 registers per vector): online, in chunks
            float m = ptxf_neg_inf(), s = 0.f;
            for (int v0 = t + (int)MV * TPR; active && v0 < nb; v0 += (int)RCH * TPR) {
                uint4 q[RCH];
                ptxf_load<RCH, TPR, false>(q, xb, v0, nb, true);
#pragma unroll
                for (int i = 0; i < RCH; ++i) {
                    float f[${VEC}];
                    ptxf_unpack_x(q[i], f);
                    ptxf_online(m, s, f);
                }
            }
            float mc = 0.f;                                          // reference of the cached exps
            float e[RAW ? 1 : MV][${VEC}];
            if constexpr (RAW) {
                const float mh = fmaxf(hv, tv) * ${K};
                const float ms = (mh == NEG) ? 0.f : mh;
                ptxf_merge(m, s, mh, ptxf_ex(fmaf(hv, ${K}, -ms)) + ptxf_ex(fmaf(tv, ${K}, -ms)));
#pragma unroll
                for (int i = 0; i < MV; ++i) {
                    float f[${VEC}];
                    ptxf_unpack_x(xs[i], f);
                    ptxf_online(m, s, f);
                }
            } else {
                float mx = fmaxf(hv, tv);
#pragma unroll
                for (int i = 0; i < MV; ++i) {
                    ptxf_unpack_x(xs[i], e[i]);
#pragma unroll
                    for (int k = 0; k < ${VEC}; ++k) mx = fmaxf(mx, e[i][k]);
                }
                const float mcs = mx * ${K};
                mc = (mcs == NEG) ? 0.f : mcs;
                hv = ptxf_ex(fmaf(hv, ${K}, -mc));
                tv = ptxf_ex(fmaf(tv, ${K}, -mc));
                float sc = hv + tv;
#pragma unroll
                for (int i = 0; i < MV; ++i) {
#pragma unroll
                    for (int k = 0; k < ${VEC}; ++k) {
                        e[i][k] = ptxf_ex(fmaf(e[i][k], ${K}, -mc));
                        sc += e[i][k];
                    }
                }
                ptxf_merge(m, s, mcs, sc);
            }
            ptxf_row_reduce<TPR>(m, s, rb);
            if (active && t == 0) ptxf_store_stats(s0, s1, row, m, s, ${K});  // per-row outputs: one thread per row
            const float inv = 1.f / s;                               // s >= 1 for a real row: the maximum adds exp(0)
            const float g = RAW ? 0.f : ptxf_ex(mc - m) * inv;        // cached exps: exp(x - mc) * exp(mc - M) / S
            if (has_h) yr[t] = ptxf_f2y(RAW ? ptxf_ex(fmaf(hv, ${K}, -m)) * inv : hv * g);
            if (has_t) yr[tail0 + t] = ptxf_f2y(RAW ? ptxf_ex(fmaf(tv, ${K}, -m)) * inv : tv * g);
#pragma unroll
            for (int i = 0; i < MV; ++i) {
                const int v = t + (int)i * TPR;
                if (active && v < nb) {
                    float o[${VEC}];
                    if constexpr (RAW) {
                        float f[${VEC}];
                        ptxf_unpack_x(xs[i], f);
#pragma unroll
                        for (int k = 0; k < ${VEC}; ++k) o[k] = ptxf_ex(fmaf(f[k], ${K}, -m)) * inv;
                    } else {
#pragma unroll
                        for (int k = 0; k < ${VEC}; ++k) o[k] = e[i][k] * g;
                    }
                    ptxf_store_y(yb + v, ptxf_pack(o));
                }
            }
            for (int v0 = t + (int)MV * TPR; active && v0 < nb; v0 += (int)RCH * TPR) {  // past the cache: read again
                uint4 q[RCH];
                ptxf_load<RCH, TPR, true>(q, xb, v0, nb, true);
#pragma unroll
                for (int i = 0; i < RCH; ++i) {
                    const int v = v0 + (int)i * TPR;
                    if (v < nb) {
                        float f[${VEC}], o[${VEC}];
                        ptxf_unpack_x(q[i], f);
#pragma unroll
                        for (int k = 0; k < ${VEC}; ++k) o[k] = ptxf_ex(fmaf(f[k], ${K}, -m)) * inv;
                        ptxf_store_y(yb + v, ptxf_pack(o));
                    }
                }
            }
        } else {
            float mx = NEG;
            for (long long j = t; active && j < C; j += TPR) mx = fmaxf(mx, ptxf_x2f(xr[j]));
            float m = mx * ${K};
            const float ms = (m == NEG) ? 0.f : m;
            float s = 0.f;
            for (long long j = t; active && j < C; j += TPR) s += ptxf_ex(fmaf(ptxf_x2f(xr[j]), ${K}, -ms));
            ptxf_row_reduce<TPR>(m, s, rb);
            if (active && t == 0) ptxf_store_stats(s0, s1, row, m, s, ${K});  // per-row outputs: one thread per row
            const float inv = 1.f / s;
            for (long long j = t; active && j < C; j += TPR) yr[j] = ptxf_f2y(ptxf_ex(fmaf(ptxf_x2f(xr[j]), ${K}, -m)) * inv);
        }
    }
}

${LINKAGE}__global__ void __launch_bounds__(${BLOCK}, ${MINB}) ${KERNEL}(${PARAMS})
{
${DISPATCH}
}
