// One PageRank iteration, pull style, over the CSR of in-edges.
#include <cuda_runtime.h>

__global__ void pagerank_pull(const int* in_ptr, const int* in_src, const int* out_degree,
                              const float* rank, float* new_rank, int num_vertices, float damping)
{
    int v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= num_vertices) return;
    float sum = 0.0f;
    for (int e = in_ptr[v]; e < in_ptr[v + 1]; e++) {
        int u = in_src[e];
        sum += rank[u] / out_degree[u];
    }
    new_rank[v] = (1.0f - damping) / num_vertices + damping * sum;
}

void pagerank_step(const int* d_in_ptr, const int* d_in_src, const int* d_out_degree,
                   const float* d_rank, float* d_new_rank, int n)
{
    int threads = 256;
    int blocks = (n + threads - 1) / threads;
    pagerank_pull<<<blocks, threads>>>(d_in_ptr, d_in_src, d_out_degree, d_rank, d_new_rank, n, 0.85f);
}
