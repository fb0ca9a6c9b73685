//! The "attention" family's skeleton (search/generators/attention.py fills the ${...} fields): attention forward,
//! out[bh, i, :] = sum_j softmax_j(scale * q[bh, i, :] . k[bh, j, :]) v[bh, j, :], keys j <= i only when causal.
//! A block takes BR queries of one (batch, head) row, TPQ adjacent threads a query, each thread D / TPQ of the
//! head dimension: its part of the query (prescaled) and of the output accumulator in registers. The keys and
//! values come through shared memory in tiles of BC rows, each tile read once from global memory for the block's
//! BR queries (a naive kernel reads every key once per query). A query's scores take its threads' partial dot
//! products summed by shuffles; the softmax is online over chunks of CH keys: the chunk's scores, their max, one
//! rescale of the accumulator, then p * v for the chunk. Compute in fp32 whatever the storage type.
#define PTXF_D ${D}
#define PTXF_BR ${BR}
#define PTXF_BC ${BC}
#define PTXF_TPQ ${TPQ}
#define PTXF_CH ${CH}
#define PTXF_DP (PTXF_D / PTXF_TPQ)

static __device__ __forceinline__ float ptxf_ld(const ${T}* p) { return ${LOAD}; }
static __device__ __forceinline__ void ptxf_st(${TO}* p, float v) { *p = ${STORE}; }

${LINKAGE}__global__ void __launch_bounds__(PTXF_BR * PTXF_TPQ) ${KERNEL}(${PARAMS})
{
    __shared__ __align__(16) float ptxf_ks[PTXF_BC][PTXF_D];
    __shared__ __align__(16) float ptxf_vs[PTXF_BC][PTXF_D];
    const long long ptxf_t = (long long)(${SEQ});                 // keys and queries of a row
    const long long ptxf_qblocks = (ptxf_t + PTXF_BR - 1) / PTXF_BR;
    const long long ptxf_bh = (long long)blockIdx.x / ptxf_qblocks;  // the (batch, head) row
    const long long ptxf_q0 = ((long long)blockIdx.x % ptxf_qblocks) * PTXF_BR;
    const long long ptxf_heads = (long long)(${HEADS});
    const long long ptxf_tstride = ${TSTRIDE};                    // elements between consecutive positions
    const long long ptxf_base = ${BASE};                          // the row's first element
    const int ptxf_tid = threadIdx.x;
    const int ptxf_part = ptxf_tid % PTXF_TPQ;                    // which D / TPQ channels this thread holds
    const long long ptxf_i = ptxf_q0 + ptxf_tid / PTXF_TPQ;      // this thread's query
    const bool ptxf_live = ptxf_i < ptxf_t;
    const float ptxf_scale = ${SCALE};

    float ptxf_q[PTXF_DP], ptxf_acc[PTXF_DP];
#pragma unroll
    for (int d = 0; d < PTXF_DP; ++d) {
        ptxf_q[d] = ptxf_live ? ptxf_ld(${Q} + ptxf_base + ptxf_i * ptxf_tstride + ptxf_part * PTXF_DP + d) * ptxf_scale : 0.0f;
        ptxf_acc[d] = 0.0f;
    }
    float ptxf_m = -INFINITY, ptxf_l = 0.0f;
    // the keys the block's queries see: all of them, or (causal) up to its last query
    const long long ptxf_end = ${CAUSAL} ? min(ptxf_t, ptxf_q0 + PTXF_BR) : ptxf_t;
    for (long long ptxf_j0 = 0; ptxf_j0 < ptxf_end; ptxf_j0 += PTXF_BC) {
        __syncthreads();  // the previous tile is no longer read
        for (int e = ptxf_tid; e < PTXF_BC * PTXF_D; e += PTXF_BR * PTXF_TPQ) {
            const int c = e / PTXF_D, d = e % PTXF_D;
            const long long j = ptxf_j0 + c;
            const bool in = j < ptxf_t;
            ptxf_ks[c][d] = in ? ptxf_ld(${K} + ptxf_base + j * ptxf_tstride + d) : 0.0f;
            ptxf_vs[c][d] = in ? ptxf_ld(${V} + ptxf_base + j * ptxf_tstride + d) : 0.0f;
        }
        __syncthreads();
        for (int c0 = 0; c0 < PTXF_BC; c0 += PTXF_CH) {
            float s[PTXF_CH];
            float mx = ptxf_m;
#pragma unroll
            for (int c = 0; c < PTXF_CH; ++c) {
                float dot = 0.0f;
                const float4* kr = reinterpret_cast<const float4*>(&ptxf_ks[c0 + c][ptxf_part * PTXF_DP]);
#pragma unroll
                for (int d4 = 0; d4 < PTXF_DP / 4; ++d4) {
                    const float4 kv = kr[d4];
                    dot = fmaf(ptxf_q[4 * d4], kv.x, dot);
                    dot = fmaf(ptxf_q[4 * d4 + 1], kv.y, dot);
                    dot = fmaf(ptxf_q[4 * d4 + 2], kv.z, dot);
                    dot = fmaf(ptxf_q[4 * d4 + 3], kv.w, dot);
                }
#pragma unroll
                for (int o = PTXF_TPQ / 2; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
                const long long j = ptxf_j0 + c0 + c;
                s[c] = (j < ptxf_t && (!${CAUSAL} || j <= ptxf_i)) ? dot : -INFINITY;
                mx = fmaxf(mx, s[c]);
            }
            if (mx == -INFINITY) continue;  // (every key of the chunk masked, and none before it)
            const float corr = expf(ptxf_m - mx);
            ptxf_l *= corr;
#pragma unroll
            for (int d = 0; d < PTXF_DP; ++d) ptxf_acc[d] *= corr;
            ptxf_m = mx;
#pragma unroll
            for (int c = 0; c < PTXF_CH; ++c) {
                const float p = expf(s[c] - mx);
                ptxf_l += p;
                const float4* vr = reinterpret_cast<const float4*>(&ptxf_vs[c0 + c][ptxf_part * PTXF_DP]);
#pragma unroll
                for (int d4 = 0; d4 < PTXF_DP / 4; ++d4) {
                    const float4 vv = vr[d4];
                    ptxf_acc[4 * d4] = fmaf(p, vv.x, ptxf_acc[4 * d4]);
                    ptxf_acc[4 * d4 + 1] = fmaf(p, vv.y, ptxf_acc[4 * d4 + 1]);
                    ptxf_acc[4 * d4 + 2] = fmaf(p, vv.z, ptxf_acc[4 * d4 + 2]);
                    ptxf_acc[4 * d4 + 3] = fmaf(p, vv.w, ptxf_acc[4 * d4 + 3]);
                }
            }
        }
    }
    if (!ptxf_live) return;
    const float inv = 1.0f / ptxf_l;
#pragma unroll
    for (int d = 0; d < PTXF_DP; ++d)
        ptxf_st(${O} + ptxf_base + ptxf_i * ptxf_tstride + ptxf_part * PTXF_DP + d, ptxf_acc[d] * inv);
}
#undef PTXF_D
#undef PTXF_BR
#undef PTXF_BC
#undef PTXF_TPQ
#undef PTXF_CH
#undef PTXF_DP
