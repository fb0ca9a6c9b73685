// 4-D tensor times matrix: C[b, i, j, k] = sum_l A[b, i, j, l] * B[l, k]  (torch.einsum("bijl,lk->bijk")).
// A [Bt, I, J, L], B [L, K], C [Bt, I, J, K]. One thread per output, flat index taken apart into four digits.
__global__ void tensor4d_matmul(const float* A, const float* B, float* C, int Bt, int I, int J, int L, int K)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = Bt * I * J * K;
    if (idx >= total) return;
    int k = idx % K;
    int j = (idx / K) % J;
    int i = (idx / (K * J)) % I;
    int b = idx / (K * J * I);
    float sum = 0.0f;
    for (int l = 0; l < L; l++) {
        sum += A[((b * I + i) * J + j) * L + l] * B[l * K + k];
    }
    C[idx] = sum;
}

void launch_tensor4d_matmul(const float* A, const float* B, float* C, int Bt, int I, int J, int L, int K)
{
    int total = Bt * I * J * K;
    int threads = 256;
    tensor4d_matmul<<<(total + threads - 1) / threads, threads>>>(A, B, C, Bt, I, J, L, K);
}
