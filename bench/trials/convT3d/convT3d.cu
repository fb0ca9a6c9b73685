// ConvTranspose3d, NCDHW, weight [Cin, Cout, K, K, K] (torch layout), bias [Cout].
// Gather form: one thread per output voxel; a tap contributes when (o + pad - k) is a multiple of stride.
__global__ void conv_transpose3d_kernel(const float* input, const float* weight, const float* bias,
                                        float* output,
                                        int batch, int in_channels, int out_channels,
                                        int in_d, int in_h, int in_w,
                                        int out_d, int out_h, int out_w,
                                        int kernel_size, int stride, int padding)
{
    int index = blockIdx.x * blockDim.x + threadIdx.x;
    int total = batch * out_channels * out_d * out_h * out_w;
    if (index < total) {
        int ow = index % out_w;
        int oh = (index / out_w) % out_h;
        int od = (index / (out_w * out_h)) % out_d;
        int oc = (index / (out_w * out_h * out_d)) % out_channels;
        int b = index / (out_w * out_h * out_d * out_channels);

        float value = bias[oc];
        for (int kd = 0; kd < kernel_size; ++kd) {
            int td = od + padding - kd;
            if (td % stride != 0) continue;
            int id = td / stride;
            if (id < 0 || id >= in_d) continue;
            for (int kh = 0; kh < kernel_size; ++kh) {
                int th = oh + padding - kh;
                if (th % stride != 0) continue;
                int ih = th / stride;
                if (ih < 0 || ih >= in_h) continue;
                for (int kw = 0; kw < kernel_size; ++kw) {
                    int tw = ow + padding - kw;
                    if (tw % stride != 0) continue;
                    int iw = tw / stride;
                    if (iw < 0 || iw >= in_w) continue;
                    for (int ic = 0; ic < in_channels; ++ic) {
                        int in_idx = (((b * in_channels + ic) * in_d + id) * in_h + ih) * in_w + iw;
                        int w_idx = (((ic * out_channels + oc) * kernel_size + kd) * kernel_size + kh) * kernel_size + kw;
                        value += input[in_idx] * weight[w_idx];
                    }
                }
            }
        }
        output[index] = value;
    }
}

void conv_transpose3d_cuda(const float* input, const float* weight, const float* bias, float* output,
                           int batch, int in_channels, int out_channels, int in_d, int in_h, int in_w)
{
    const int kernel_size = 4;
    const int stride = 2;
    const int padding = 1;
    int out_d = (in_d - 1) * stride - 2 * padding + kernel_size;
    int out_h = (in_h - 1) * stride - 2 * padding + kernel_size;
    int out_w = (in_w - 1) * stride - 2 * padding + kernel_size;
    int total = batch * out_channels * out_d * out_h * out_w;
    const int block_size = 256;
    const int num_blocks = (total + block_size - 1) / block_size;
    conv_transpose3d_kernel<<<num_blocks, block_size>>>(input, weight, bias, output,
        batch, in_channels, out_channels, in_d, in_h, in_w, out_d, out_h, out_w,
        kernel_size, stride, padding);
}
