// Sobel gradient magnitude of a batch of float images [N, H, W], replicate (clamped) borders, one thread per pixel
// on a flat 1-D launch. The gx and gy passes each declare their own dy, dx and v (written 2026-12-05 after a
// helper's new-user trial of the same shape).
#include <cuda_runtime.h>

__global__ void sobel3x3(const float* img, float* mag, int N, int H, int W)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * H * W) return;
    int x = idx % W;
    int y = (idx / W) % H;
    int n = idx / (H * W);
    const float* plane = img + (size_t)n * H * W;

    float gx = 0.0f;
    for (int dy = -1; dy <= 1; dy++) {
        for (int dx = -1; dx <= 1; dx++) {
            int yy = min(max(y + dy, 0), H - 1);
            int xx = min(max(x + dx, 0), W - 1);
            float v = plane[yy * W + xx];
            gx += v * dx * (dy == 0 ? 2.0f : 1.0f);
        }
    }
    float gy = 0.0f;
    for (int dy = -1; dy <= 1; dy++) {
        for (int dx = -1; dx <= 1; dx++) {
            int yy = min(max(y + dy, 0), H - 1);
            int xx = min(max(x + dx, 0), W - 1);
            float v = plane[yy * W + xx];
            gy += v * dy * (dx == 0 ? 2.0f : 1.0f);
        }
    }
    mag[idx] = sqrtf(gx * gx + gy * gy);
}

void launch_sobel3x3(const float* img, float* mag, int N, int H, int W, cudaStream_t stream)
{
    int total = N * H * W;
    sobel3x3<<<(total + 255) / 256, 256, 0, stream>>>(img, mag, N, H, W);
}
