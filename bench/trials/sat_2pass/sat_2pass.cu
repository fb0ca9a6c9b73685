// Summed-area table of an H x W image: row scan, then column scan (in place on out).
#include <cuda_runtime.h>

__global__ void sat_rows(const float* img, float* out, int H, int W)
{
    int y = blockIdx.x * blockDim.x + threadIdx.x;
    if (y < H) {
        float s = 0.0f;
        for (int x = 0; x < W; x++) {
            s += img[y * W + x];
            out[y * W + x] = s;
        }
    }
}

__global__ void sat_cols(float* out, int H, int W)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    if (x < W) {
        float s = 0.0f;
        for (int y = 0; y < H; y++) {
            s += out[y * W + x];
            out[y * W + x] = s;
        }
    }
}

void summed_area_table(const float* d_img, float* d_out, int H, int W)
{
    int threads = 256;
    sat_rows<<<(H + threads - 1) / threads, threads>>>(d_img, d_out, H, W);
    sat_cols<<<(W + threads - 1) / threads, threads>>>(d_out, H, W);
}
