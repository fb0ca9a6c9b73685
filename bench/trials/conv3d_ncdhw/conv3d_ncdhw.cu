// Conv3d forward, NCDHW, kernel KS x KS x KS, stride 1, no padding, no bias.
// x [N, C, D, H, W], w [OC, C, KS, KS, KS], y [N, OC, D-KS+1, H-KS+1, W-KS+1].
// Grid: x over the output voxels of one (n, oc), y = output channel, z = batch.
#define KS 3

__global__ void conv3d_ncdhw(const float* x, const float* w, float* y,
                             int N, int C, int D, int H, int W, int OC)
{
    int OD = D - KS + 1;
    int OH = H - KS + 1;
    int OW = W - KS + 1;
    int oc = blockIdx.y;
    int n = blockIdx.z;
    int v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= OD * OH * OW) return;
    int ow = v % OW;
    int oh = (v / OW) % OH;
    int od = v / (OW * OH);

    const float* xn = x + (size_t)n * C * D * H * W;
    const float* wo = w + (size_t)oc * C * KS * KS * KS;
    float acc = 0.0f;
    for (int c = 0; c < C; c++) {
        const float* xc = xn + (size_t)c * D * H * W;
        const float* wc = wo + c * KS * KS * KS;
        for (int kd = 0; kd < KS; kd++)
            for (int kh = 0; kh < KS; kh++)
                for (int kw = 0; kw < KS; kw++)
                    acc += xc[((od + kd) * H + (oh + kh)) * W + (ow + kw)] * wc[(kd * KS + kh) * KS + kw];
    }
    y[(((size_t)n * OC + oc) * OD + od) * OH * OW + oh * OW + ow] = acc;
}

void launch_conv3d(const float* x, const float* w, float* y, int N, int C, int D, int H, int W, int OC)
{
    int vox = (D - KS + 1) * (H - KS + 1) * (W - KS + 1);
    dim3 block(256);
    dim3 grid((vox + 255) / 256, OC, N);
    conv3d_ncdhw<<<grid, block>>>(x, w, y, N, C, D, H, W, OC);
}
