// Batched matmul, bf16 in/out, fp32 accumulation: C[b] = A[b] @ B[b], A [B, M, K], B [B, K, N].
// One thread per flat output index (b, i, j).
#include <cuda_bf16.h>

__global__ void bmm_bf16(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                         __nv_bfloat16* __restrict__ C, int batch, int M, int N, int K)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= batch * M * N) return;
    int b = idx / (M * N);
    int i = (idx / N) % M;
    int j = idx % N;
    const __nv_bfloat16* a = A + (size_t)b * M * K + (size_t)i * K;
    const __nv_bfloat16* bb = B + (size_t)b * K * N + j;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc += __bfloat162float(a[k]) * __bfloat162float(bb[(size_t)k * N]);
    C[idx] = __float2bfloat16(acc);
}

void launch_bmm_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                     int batch, int M, int N, int K)
{
    int total = batch * M * N;
    bmm_bf16<<<(total + 255) / 256, 256>>>(A, B, C, batch, M, N, K);
}
