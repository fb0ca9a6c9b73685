//! Template of the ptxfactory "rowwise" family (search/generators/rowwise.py). Dollar-brace
//! placeholders are filled in by string.Template; lines starting with //! are dropped. The knobs are
//! the template parameters of ptxf_rowwise (TPR threads per row, RPB rows per block, MV cached
//! 16-byte vectors per thread, LAYER, CL blocks per row), the block size ${BLOCK}, ${STAGE}, ${WPRE} and ${PIPE}.
// ptxfactory "rowwise" family: row-wise normalisation of x[R, C] into y[R, C] (RMSNorm, LayerNorm).
//   rms:   y = x * rsqrt(mean(x^2) + eps) [* w]                      (fp32 math, one rounding)
//   layer: y = (x - mean(x)) * rsqrt(mean((x - mean(x))^2) + eps) [* w] [+ b]
// Variants (the helpers above say which this instance has): x + res in place of x (a residual added
// first, in fp32), that sum stored to h in the last pass; per-row statistics stored by the row's
// first thread; y of another float type than x.
// LayerNorm takes two passes over the register-cached row (the mean, then the squared deviations
// from it: no mean(x^2) - mean^2 cancellation for rows with a large mean), so two reductions.
//
// One block holds RPB consecutive rows; it handles them in steps of BLOCK / TPR rows, each row by
// TPR threads (a multiple of 32, or a power of two below it: an aligned part of one warp). The first MV 16-byte vectors
// of each thread's share of the row stay in registers between the reduction and the write; the
// rest of a longer row is read again from global memory (L1/L2). Rows whose length is not a
// multiple of the vector width, or misaligned pointers, take a scalar path for the whole launch.
// A row too long for one block's register cache may be split over S of the CL blocks of a thread block
// cluster (sm_90+, ${CLUSTER_NOTE}; S, a power of two up to CL, the fewest blocks whose caches hold the row, chosen
// at launch from its length: a cluster holds CL / S rows): block k of a row's S holds vectors (i * S + k) * TPR + t,
// the blocks' partial sums meet in distributed shared memory, and the row is still read once: one thread a peer stores
// this block's sum into that peer's slot with st.async, counted on the peer's mbarrier, and each block waits on its
// own (S remote stores a block; only the row's blocks wait on each other).
// Staged (sm_80+, ${STAGE_NOTE}): the cache is dynamic shared memory sized at launch from the row length
// (vector i of thread T at stage[i * BLOCK + T]), filled by cp.async: every load in flight at once without a
// register each, so the registers, and with them the blocks per SM, no longer grow with the longest row. Where a
// thread caches at most ${STAGE_REGS} vectors (short rows) they stay in registers: the trip through shared memory
// would only add latency there (and the launch asks for no shared memory).
// Preloaded w (${WPRE_NOTE}): the cached vectors' w (and b) are read into registers before the first step's loads of x
// (a staged cache's: all MV of them, the registers its x does not take), once for every row the thread takes: their
// latency no longer follows the reduction (and a split row's wait on its cluster).
// Pipelined (${PIPE_NOTE}): a persistent grid (the launch sizes it from the SM count: each block takes groups of
// BLOCK / TPR rows blockIdx.x, blockIdx.x + gridDim.x, ...) whose threads issue the next group's loads into a second
// register cache before this group's reduction and stores: a row's loads are always in flight, even while the rows
// before it are reduced and written, and no block pays its start and end more than once.
${CONVERT}${CLUSTER_HELPERS}
// Sums acc[0 .. NV) over the TPR threads of each row (TPR < 32: an aligned group of lanes of one warp); every thread
// of the row gets the same sums.
template <int TPR, int NV>
static __device__ __forceinline__ void ptxf_row_reduce(float (&acc)[2], float* __restrict__ red)
{
#pragma unroll
    for (int k = 0; k < NV; ++k) {
#pragma unroll
        for (int o = (TPR < 32 ? TPR : 32) / 2; o > 0; o >>= 1) acc[k] += __shfl_xor_sync(0xffffffffu, acc[k], o);
    }
    if constexpr (TPR > 32) {  // several warps per row: combine their sums through shared memory
        constexpr int WPR = TPR / 32;
        const int warp = threadIdx.x / 32;
        if (threadIdx.x % 32 == 0) {
#pragma unroll
            for (int k = 0; k < NV; ++k) red[warp * NV + k] = acc[k];
        }
        __syncthreads();
        const int first = warp / WPR * WPR;  // this row's first warp
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            float s = 0.f;
#pragma unroll
            for (int i = 0; i < WPR; ++i) s += red[(first + i) * NV + k];
            acc[k] = s;  // same order in every thread of the row: identical results
        }
    }
}

// fn(u, v, i) for each cached vector u of a thread (v: its vector index in the row, i: its index in the thread's
// cache): the NR in registers (xs, i a constant once unrolled), or with STAGED the nc staged in shared memory (xsm,
// BLOCK apart); guarded: only those inside the row (false: the zeros standing for vectors past it too, which a sum may
// take). Without STAGED the shared-memory branch is not compiled at all.
// NS > 0 (a staged cache whose w is preloaded into registers, NS its size): the staged loop unrolled whole, i a constant.
template <bool STAGED, int NR, int NS = 0, class F>
static __device__ __forceinline__ void ptxf_each_cached(bool regs, const ptxf_xv (&xs)[NR], const ptxf_xv* xsm, int nc, ${IDX} v0,
                                                        int stride, ${IDX} nvec, bool active, bool guarded, F&& fn)
{
    if (!STAGED || regs) {
#pragma unroll
        for (int i = 0; i < NR; ++i) {
            const ${IDX} v = v0 + i * stride;
            if (!guarded || (active && v < nvec)) fn(xs[i], v, i);
        }
    } else if constexpr (STAGED && NS > 0) {
#pragma unroll
        for (int i = 0; i < NS; ++i) {
            const ${IDX} v = v0 + i * stride;
            if (i < nc && active && v < nvec) fn(xsm[i * ${BLOCK}], v, i);
        }
    } else if constexpr (STAGED) {
#pragma unroll 4
        for (int i = 0; i < nc; ++i) {                          // (4 at a time: their loads of w in flight together)
            const ${IDX} v = v0 + i * stride;
            if (active && v < nvec) fn(xsm[i * ${BLOCK}], v, i);
        }
    }
}

template <bool LONG> struct ptxf_step_type { using type = int; };   // a block's trip count: pipelined, 64-bit
template <> struct ptxf_step_type<true> { using type = long long; };

// The NR register-cached vectors of this thread (first v0, STRIDE apart) of the row starting at element base of x (and
// of the residual); zeros past the row, all zeros where base < 0 (no row): all loads first, NR in flight.
template <int NR>
static __device__ __forceinline__ void ptxf_load_row(ptxf_xv (&xs)[NR], const ${TX}* __restrict__ x, const ${TX}* res, long long base,
                                                     ${IDX} v0, int stride, ${IDX} nvec)
{
    const ${TX}* __restrict__ xr = x + (base < 0 ? 0 : base);
    const ${TX}* rr = res ? res + (base < 0 ? 0 : base) : nullptr;
#pragma unroll
    for (int i = 0; i < NR; ++i) {
        const ${IDX} v = v0 + i * stride;
        xs[i] = (base >= 0 && v < nvec) ? ptxf_load_xv(xr, rr, v) : ptxf_xv{};
    }
}

template <int TPR, int RPB, int MV, bool LAYER, int CL = 1>
static __device__ __forceinline__ void ptxf_rowwise(const ${TX}* __restrict__ x, const ${TW}* __restrict__ w,
                                                    const ${TB}* __restrict__ b, ${TY}* __restrict__ y, long long R, ${IDX} C,
                                                    float eps, float* __restrict__ red, bool ptxf_vec,
                                                    const ${TX}* res, ${TH}* h, ${TS0}* __restrict__ s0, ${TS1}* __restrict__ s1, float* cl,
                                                    ptxf_xv* stage, int split)
{
    static_assert((TPR % 32 == 0 || 32 % TPR == 0) && TPR <= ${BLOCK} && ${BLOCK} % TPR == 0 && MV >= 1, "bad rowwise configuration");
    static_assert(CL == 1 || (TPR == ${BLOCK} && RPB == 1), "a row split over a cluster takes whole blocks");
    constexpr int GROUPS = ${BLOCK} / TPR;                          // rows in flight per step
    constexpr int STEPS = RPB > GROUPS ? RPB / GROUPS : 1;          // uniform trip count: barriers stay aligned
    static_assert(RPB <= GROUPS || RPB % GROUPS == 0, "rows per block must be a multiple of rows per step");
    const int t = threadIdx.x % TPR;
    const int S = CL > 1 ? split : 1;                                // blocks per row (S divides CL)
    const int rank = CL > 1 ? (int)(blockIdx.x % S) : 0;            // this block's rank among its row's blocks
    const int first = CL > 1 ? (int)(blockIdx.x % CL) - rank : 0;   // their first block's rank in the cluster
    const ${IDX} nvec = C / ${VEC};
    const ${IDX} v0 = (${IDX})rank * TPR + t;                        // first vector (element) of this thread
    const int STRIDE = S * TPR;                                      // between one thread's vectors
    constexpr bool STAGE = ${STAGE};                                 // the cache in shared memory (else registers)
    constexpr int NR = STAGE ? ${STAGE_REGS} : MV;                   // vectors a thread may hold in registers
    constexpr bool WPRE = ${WPRE};                                   // w (and b) of the cached vectors read once, first
    constexpr int NW = !WPRE ? 1 : STAGE ? MV : NR;                   // (staged: w of every cached vector in registers)
    constexpr int NS = WPRE && STAGE ? MV : 0;                       // (so the staged loops index wbs with constants)
    constexpr bool PIPE = ${PIPE} && CL == 1;                       // persistent, the next group's loads in flight
    static_assert(!PIPE || !STAGE, "a pipelined cache is in registers");
    if constexpr (CL > 1) ptxf_cluster_start(cl);                    // barriers set; started: the peers may store here
    // cached vectors a thread: MV, or staged, what the launch's shared memory holds (the launch computes the same)
    const int nc = STAGE ? (int)(nvec < (${IDX})MV * STRIDE ? (nvec + STRIDE - 1) / STRIDE : (${IDX})MV) : MV;
    const bool regs = !STAGE || nc <= NR;                            // (uniform) the cache in registers at this length
    ptxf_wb wbs[NW];                                                 // the same vectors of w (b) at every step
    if constexpr (WPRE) {
#pragma unroll
        for (int i = 0; i < NW; ++i) {                               // in flight with the first step's loads of x
            const ${IDX} v = v0 + i * STRIDE;
            if (ptxf_vec && v < nvec) wbs[i] = ptxf_load_wb(w, b, v);
        }
    }
    // pipelined: groups of GROUPS rows blockIdx.x, + gridDim.x, ... (a trip count uniform in the block); else STEPS
    const long long ngroups = (R + GROUPS - 1) / GROUPS;
    using step_t = typename ptxf_step_type<PIPE>::type;             // (a 32-bit count where it is at most STEPS)
    const step_t nsteps = !PIPE ? (step_t)STEPS : (long long)blockIdx.x < ngroups ? (ngroups - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    const long long hop = (long long)gridDim.x * GROUPS;             // pipelined: rows between a thread's two groups
    ptxf_xv xs[NR];                                                  // the cache (pipelined: loaded a group ahead)
    if constexpr (PIPE) {
        const long long row0 = (long long)blockIdx.x * GROUPS + threadIdx.x / TPR;
        if (ptxf_vec) ptxf_load_row(xs, x, res, row0 < R ? row0 * (long long)C : -1, v0, STRIDE, nvec);
    }
#pragma unroll 1
    for (step_t step = 0; step < nsteps; ++step) {
        const int r = PIPE ? threadIdx.x / TPR : (int)step * GROUPS + threadIdx.x / TPR;  // row within the block('s group)
        const long long row = CL > 1 ? (long long)(blockIdx.x / S)
                            : PIPE ? (long long)blockIdx.x * GROUPS + step * hop + r : (long long)blockIdx.x * RPB + r;
        const bool active = (PIPE || r < RPB) && row < R;           // inactive threads still reach every barrier
        const long long base = active ? row * (long long)C : 0;
        const ${TX}* __restrict__ xr = x + base;
        const ${TX}* rr = res ? res + base : nullptr;               // the residual's row (none: nullptr)
        ${TH}* hr = h ? h + base : nullptr;                         // where x + res goes (none: nullptr)
        ${TY}* __restrict__ yr = y + base;
        float acc[2] = {0.f, 0.f};                                  // rms: sum(x^2); layer: sum(x), then sum((x - mean)^2)
        ptxf_xv xn[PIPE ? NR : 1];                                  // pipelined: the next group's vectors
        ptxf_xv* const xsm = stage + threadIdx.x;                   // staged: this thread's vector i at xsm[i * BLOCK]
        const ${IDX} rest = v0 + (regs ? NR : MV) * STRIDE;         // the first vector past the cache (re-read)
        if (ptxf_vec) {
            if constexpr (PIPE) {                                   // the next group's loads, before this one's sums
                const long long rown = row + hop;
                ptxf_load_row(xn, x, res, step + 1 < nsteps && rown < R ? rown * (long long)C : -1, v0, STRIDE, nvec);
            } else if (regs) {
                ptxf_load_row(xs, x, res, active ? base : -1, v0, STRIDE, nvec);
            } else {                                                // every vector in flight, then one wait
                for (int i = 0; i < nc; ++i) {
                    const ${IDX} v = v0 + i * STRIDE;
                    if (active && v < nvec) ptxf_stage_xv(xsm + i * ${BLOCK}, xr, rr, v);
                }
                ptxf_stage_wait();                                  // a thread reads back only what it staged
            }
            ptxf_each_cached<STAGE, NR, NS>(regs, xs, xsm, nc, v0, STRIDE, nvec, active, false, [&](const ptxf_xv& u, ${IDX}, int) {
                float f[${VEC}];
                ptxf_unpack_xv(u, f);
#pragma unroll
                for (int k = 0; k < ${VEC}; ++k) acc[0] += LAYER ? f[k] : f[k] * f[k];
            });
            for (${IDX} v = rest; active && v < nvec; v += STRIDE) {  // row longer than the cache
                float f[${VEC}];
                ptxf_unpack_xv(ptxf_reload_xv(xr, rr, v), f);
#pragma unroll
                for (int k = 0; k < ${VEC}; ++k) acc[0] += LAYER ? f[k] : f[k] * f[k];
            }
        } else {
            for (${IDX} j = v0; active && j < C; j += STRIDE) {
                const float f = ptxf_x1(xr, rr, j);
                acc[0] += LAYER ? f : f * f;
            }
        }
        // reductions alternate between two buffers (rms: one per step, layer: two per step): no trailing barrier
        ptxf_row_reduce<TPR, 1>(acc, red + (LAYER ? 0 : (step & 1)) * (${BLOCK} / 32) * 2);
        if constexpr (CL > 1) ptxf_cluster_wait();                 // every block of the cluster has started
        if constexpr (CL > 1) ptxf_cluster_sum(acc, cl, 0, first, S, rank);
        const float mean = LAYER ? acc[0] / (float)C : 0.f;
        if constexpr (LAYER) {                                      // second pass: squared deviations from the mean
            acc[0] = 0.f;
            if (ptxf_vec) {
                ptxf_each_cached<STAGE, NR, NS>(regs, xs, xsm, nc, v0, STRIDE, nvec, active, true, [&](const ptxf_xv& u, ${IDX}, int) {
                    float f[${VEC}];
                    ptxf_unpack_xv(u, f);
#pragma unroll
                    for (int k = 0; k < ${VEC}; ++k) { const float d = f[k] - mean; acc[0] += d * d; }
                });
                for (${IDX} v = rest; active && v < nvec; v += STRIDE) {
                    float f[${VEC}];
                    ptxf_unpack_xv(ptxf_reload_xv(xr, rr, v), f);
#pragma unroll
                    for (int k = 0; k < ${VEC}; ++k) { const float d = f[k] - mean; acc[0] += d * d; }
                }
            } else {
                for (${IDX} j = v0; active && j < C; j += STRIDE) { const float d = ptxf_x1(xr, rr, j) - mean; acc[0] += d * d; }
            }
            ptxf_row_reduce<TPR, 1>(acc, red + (${BLOCK} / 32) * 2);
            if constexpr (CL > 1) ptxf_cluster_sum(acc, cl, 1, first, S, rank);
        }
        const float scale = rsqrtf(acc[0] / (float)C + eps);        // rms: mean(x^2); layer: the variance
        if (active && t == 0 && rank == 0) ptxf_store_stats(s0, s1, row, mean, acc[0] / (float)C, scale, eps);  // one thread per row
        if (ptxf_vec) {
            ptxf_each_cached<STAGE, NR, NS>(regs, xs, xsm, nc, v0, STRIDE, nvec, active, true, [&](const ptxf_xv& u, ${IDX} v, int i) {
                float f[${VEC}];
                ptxf_unpack_xv(u, f);
                ptxf_store_h(hr, v, f);
                if constexpr (WPRE) ptxf_norm_store_wb(yr, v, f, wbs[i], mean, scale);
                else ptxf_norm_store(yr, v, f, w, b, mean, scale);
            });
            for (${IDX} v = rest; active && v < nvec; v += STRIDE) {
                float f[${VEC}];
                ptxf_unpack_xv(ptxf_reload_xv(xr, rr, v), f);
                ptxf_store_h(hr, v, f);
                ptxf_norm_store(yr, v, f, w, b, mean, scale);
            }
        } else {
            for (${IDX} j = v0; active && j < C; j += STRIDE) {
                const float xj = ptxf_x1(xr, rr, j);
                ptxf_store_h1(hr, j, xj);
                const float o = (xj - mean) * scale;
                yr[j] = ptxf_f2y(${W_SCALAR});
            }
        }
        if constexpr (PIPE) {
#pragma unroll
            for (int i = 0; i < NR; ++i) xs[i] = xn[i];             // the next group's vectors become the cache
        }
    }
}

${LINKAGE}__global__ void ${CLUSTER_DIMS}__launch_bounds__(${BLOCK}, ${MINB}) ${KERNEL}(${PARAMS})
{
    __shared__ float ptxf_red[2 * (${BLOCK} / 32) * 2];${CLUSTER_DECL}${STAGE_DECL}
    const bool ptxf_vec = (${C} % ${VEC} == 0) && ptxf_aligned(${X}, 16) && ptxf_aligned(${Y}, ${Y_ALIGN})${W_ALIGNED}${B_ALIGNED}${EXTRA_ALIGNED};
${DISPATCH}
}
