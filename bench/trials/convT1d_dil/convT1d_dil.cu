// ConvTranspose1d(Cin, Cout, kernel_size=3, stride=2, padding=1, dilation=2) with bias, NCL layout,
// weight [Cin, Cout, K] (torch's layout). One thread per output, gather form.
// y[n, oc, o] = b[oc] + sum_{ic, k} x[n, ic, i] * w[ic, oc, k]  where  o = i * stride - pad + k * dil
__global__ void conv_transpose1d(const float* x, const float* w, const float* bias, float* y,
                                 int N, int Cin, int Cout, int L, int Lout,
                                 int K, int stride, int pad, int dil)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * Cout * Lout) return;
    int o = idx % Lout;
    int oc = (idx / Lout) % Cout;
    int n = idx / (Lout * Cout);
    float acc = bias[oc];
    for (int ic = 0; ic < Cin; ic++) {
        for (int k = 0; k < K; k++) {
            int t = o + pad - k * dil;
            if (t < 0) continue;
            if (t % stride != 0) continue;
            int i = t / stride;
            if (i >= L) continue;
            acc += x[(n * Cin + ic) * L + i] * w[(ic * Cout + oc) * K + k];
        }
    }
    y[idx] = acc;
}

void launch_conv_transpose1d(const float* x, const float* w, const float* bias, float* y,
                             int N, int Cin, int Cout, int L)
{
    int K = 3, stride = 2, pad = 1, dil = 2;
    int Lout = (L - 1) * stride - 2 * pad + dil * (K - 1) + 1;
    int total = N * Cout * Lout;
    int threads = 256;
    int blocks = (total + threads - 1) / threads;
    conv_transpose1d<<<blocks, threads>>>(x, w, bias, y, N, Cin, Cout, L, Lout, K, stride, pad, dil);
}
