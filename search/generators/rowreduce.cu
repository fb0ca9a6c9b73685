//! Template of the ptxfactory "rowreduce" family (search/generators/rowreduce.py). Dollar-brace
//! placeholders are filled in by string.Template; lines starting with //! are dropped. The knobs are
//! the block size ${BLOCK}, the vector width (${VB} bytes = ${VE} elements of A), the unroll
//! (template parameter U), the load hint of A and the threads per row (template parameter TPR,
//! chosen per launch from K by the dispatch in the kernel).
//! SCALE is empty for a row sum (or GEMV), " * (1.0f / (float)K)" for a row mean (the store's value divided by K).
// ptxfactory "rowreduce" family: y[r] = sum_k A[r, k] * v[k] (or sum_k A[r, k] without v), fp32 accumulation.
//
// A block holds ${BLOCK} / TPR rows, each taken by TPR threads (a multiple of 32: one warp never spans
// two rows). A row is read in three parts: a head up to the first ${VB}-byte boundary of the row
// (fewer than ${VE} elements; fewer than 2 * ${VE} when v itself is misaligned), a body of ${VB}-byte vector loads (U independent loads in flight per
// thread), and a tail of fewer than 2 * ${VE} elements; head and tail are one scalar element per
// thread. So rows whose start is not ${VB}-byte aligned (K not a multiple of ${VE}) still read their
// body by vector. v[k] is read through the read-only path (it stays in L1/L2: every row reads it);
// when v + head is not aligned like the vector of A (D elements past a boundary), each vector of v
// is assembled from two aligned vector loads (D is a template parameter: a switch per row picks it).
// Reduction: warp shuffles, then shared memory across the warps of one row, summed in a fixed order
// by the row's first thread (deterministic: no atomics); one store per row.
${CONVERT}
// U vectors of the body, at i, i + TPR, ..: all U loads of A issued before any is used. CHECK: some may
// lie past the end (nv) and are skipped.
template <int TPR, int U, int D, bool CHECK>
static __device__ __forceinline__ float ptxf_batch(const ${TA}* __restrict__ a, const ${TV}* __restrict__ vh, ${IDX} nv, ${IDX} i)
{
    ptxf_avec q[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const ${IDX} j = i + (${IDX})u * TPR;
        q[u] = (!CHECK || j < nv) ? ptxf_load_a(a, j) : ptxf_avec();
    }
    float acc = 0.f;
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const ${IDX} j = i + (${IDX})u * TPR;
        if (!CHECK || j < nv) {
            float f[${VE}];
            ptxf_unpack_a(q[u], f);
            float s = 0.f;
${BODY_DOT}
            acc += s;
        }
    }
    return acc;
}

// Dot product (or sum) of the body of one row: nv vectors of ${VB} bytes at a (aligned), v at vh (= v + head).
template <int TPR, int U, int D>
static __device__ __forceinline__ float ptxf_row_body(const ${TA}* __restrict__ a, const ${TV}* __restrict__ vh, ${IDX} nv, int t)
{
    float acc = 0.f;
    ${IDX} i = t;
#pragma unroll 1
    for (; i + (${IDX})(U - 1) * TPR < nv; i += (${IDX})U * TPR) acc += ptxf_batch<TPR, U, D, false>(a, vh, nv, i);
    if (i < nv) acc += ptxf_batch<TPR, U, D, true>(a, vh, nv, i);   // the last, partial batch
    return acc;
}

template <int TPR, int U>
static __device__ __forceinline__ void ptxf_rowreduce(const ${TA}* __restrict__ A, const ${TV}* __restrict__ v,
                                                      ${TY}* __restrict__ y, long long R, ${IDX} K, float* __restrict__ red)
{
    static_assert(TPR % 32 == 0 && TPR <= ${BLOCK} && ${BLOCK} % TPR == 0 && U >= 1, "bad rowreduce configuration");
    constexpr int GROUPS = ${BLOCK} / TPR;                          // rows per block
    const int t = threadIdx.x % TPR;
    const long long row = (long long)blockIdx.x * GROUPS + threadIdx.x / TPR;
    float acc = 0.f;
    {   // rows past the end (last block) sum row R - 1 again and store nothing: every thread reaches the barrier,
        // and no predicate stays live across the row (ptxas would rather spill it than take one more register)
        const ${TA}* __restrict__ a = A + min(row, R - 1) * (long long)K;
        const unsigned mis = (unsigned)(reinterpret_cast<unsigned long long>(a) % ${VB}u) / (unsigned)sizeof(${TA});
        ${IDX} head = mis ? (${IDX})(${VE} - mis) : (${IDX})0;    // elements before the first aligned vector
${ALIGN_V}
        if (head > K) head = K;
        ${IDX} nv = (K - head) / ${VE};                             // aligned body vectors
${DISPATCH_D}
        const ${IDX} tail = head + nv * ${VE};                      // fewer than 2 * ${VE} elements from here on
        if ((${IDX})t < head) acc += ${HEAD_TERM};                  // head and tail: fewer than 2 * ${VE} <= 32 <= TPR elements
        if (tail + t < K) acc += ${TAIL_TERM};
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if constexpr (TPR > 32) {                                        // several warps per row: combine through shared memory
        constexpr int WPR = TPR / 32;
        const int warp = threadIdx.x / 32;
        if (threadIdx.x % 32 == 0) red[warp] = acc;
        __syncthreads();
        if (t == 0) {
            float s = 0.f;
#pragma unroll
            for (int i = 0; i < WPR; ++i) s += red[warp + i];        // this row's warps, in order
            acc = s;
        }
    }
    if (t == 0 && row < R) y[row] = ptxf_f2y(acc${SCALE});
}

${LINKAGE}__global__ void __launch_bounds__(${BLOCK}, ${MINB}) ${KERNEL}(${PARAMS})
{
    __shared__ float ptxf_red[${BLOCK} / 32];
    if (${R} <= 0) return;                                           // no rows (the grid would be empty too)
${DISPATCH}
}
