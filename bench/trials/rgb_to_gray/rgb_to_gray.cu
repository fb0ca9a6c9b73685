// RGB to grayscale: rgb [H, W, 3] interleaved 8-bit (R, G, B per pixel, row-major), gray [H, W] 8-bit =
// 0.299 R + 0.587 G + 0.114 B rounded to nearest. One thread per pixel, 2-D launch (x: column, y: row).
extern "C" __global__ void rgb_to_gray(const unsigned char* rgb, unsigned char* gray, int H, int W)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H) return;

    int p = y * W + x;
    float r = rgb[3 * p + 0];
    float g = rgb[3 * p + 1];
    float b = rgb[3 * p + 2];
    float v = 0.299f * r + 0.587f * g + 0.114f * b;
    gray[p] = (unsigned char)__float2uint_rn(v);
}
