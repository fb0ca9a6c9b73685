// MaxPool1d(kernel_size=2, stride=2) over the last dim of x [N, C, L] -> y [N, C, L_out]
#include <cfloat>

#define KSIZE 2
#define STRIDE 2

__global__ void maxpool1d_k2s2(const float* input, float* output, int N, int C, int L, int L_out)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = N * C * L_out;
    if (idx < total) {
        int o = idx % L_out;
        int nc = idx / L_out;
        float m = -FLT_MAX;
        for (int k = 0; k < KSIZE; k++) {
            float v = input[nc * L + o * STRIDE + k];
            if (v > m) m = v;
        }
        output[idx] = m;
    }
}

void launch_maxpool1d(const float* input, float* output, int N, int C, int L)
{
    int L_out = (L - KSIZE) / STRIDE + 1;
    int total = N * C * L_out;
    int threads = 256;
    int blocks = (total + threads - 1) / threads;
    maxpool1d_k2s2<<<blocks, threads>>>(input, output, N, C, L, L_out);
}
