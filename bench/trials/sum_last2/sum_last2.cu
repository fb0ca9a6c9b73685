// out[b] = sum over h, w of in[b, h, w]; in: [B, H, W]. One thread per b, two nested loops.
__global__ void sum_last2(const float* in, float* out, int B, int H, int W)
{
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b < B) {
        float s = 0.0f;
        for (int h = 0; h < H; h++) {
            for (int w = 0; w < W; w++) {
                s += in[b * H * W + h * W + w];
            }
        }
        out[b] = s;
    }
}

void launch_sum_last2(const float* in, float* out, int B, int H, int W)
{
    sum_last2<<<(B + 127) / 128, 128>>>(in, out, B, H, W);
}
