// BatchNorm2d training statistics: x [N, C, H, W]; per channel c the mean and the biased variance over
// its N * H * W values. One thread per channel, two passes (mean, then variance).
__global__ void bn_stats_nchw(const float* x, float* mean, float* var, int N, int C, int H, int W)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int HW = H * W;
    float count = (float)N * HW;

    float sum = 0.0f;
    for (int n = 0; n < N; n++) {
        for (int i = 0; i < HW; i++) {
            sum += x[(n * C + c) * HW + i];
        }
    }
    float m = sum / count;

    float sq = 0.0f;
    for (int n = 0; n < N; n++) {
        for (int i = 0; i < HW; i++) {
            float d = x[(n * C + c) * HW + i] - m;
            sq += d * d;
        }
    }
    mean[c] = m;
    var[c] = sq / count;
}

void bn_stats(const float* x, float* mean, float* var, int N, int C, int H, int W)
{
    int threads = 256;
    int blocks = (C + threads - 1) / threads;
    bn_stats_nchw<<<blocks, threads>>>(x, mean, var, N, C, H, W);
}
