__global__ void embedding(const int* ids, const float* table, const float* pos, float* out,
                          int T, int S, int C) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    int id = ids[t];
    int p = t % S;
    for (int c = 0; c < C; c++) {
        out[t * C + c] = table[id * C + c] + pos[p * C + c];
    }
}
