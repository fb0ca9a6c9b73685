// torch.min(x, dim=2).values for x [B, D1, D2] -> out [B, D1], templated on the element type.
// One thread per output, size_t-free int indexing.
#include <cfloat>

template <typename T>
__global__ void min_dim2_tmpl(const T* x, T* out, int B, int D1, int D2)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * D1) {
        int b = idx / D1;
        int i = idx % D1;
        T m = x[(b * D1 + i) * D2];
        for (int k = 1; k < D2; k++) {
            T v = x[(b * D1 + i) * D2 + k];
            m = v < m ? v : m;
        }
        out[idx] = m;
    }
}

void launch_min_dim2(const float* x, float* out, int B, int D1, int D2)
{
    const int threads = 256;
    int blocks = (B * D1 + threads - 1) / threads;
    min_dim2_tmpl<float><<<blocks, threads>>>(x, out, B, D1, D2);
}
