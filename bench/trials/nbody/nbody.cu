__global__ void nbody(const float* x, const float* y, const float* z, const float* m, float* acc,
                      int N, float eps2) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float xi = x[i];
    float yi = y[i];
    float zi = z[i];
    float ax = 0.0f;
    float ay = 0.0f;
    float az = 0.0f;
    for (int j = 0; j < N; j++) {
        float dx = x[j] - xi;
        float dy = y[j] - yi;
        float dz = z[j] - zi;
        float r2 = dx * dx + dy * dy + dz * dz + eps2;
        float inv = 1.0f / sqrtf(r2);
        float s = m[j] * inv * inv * inv;
        ax += dx * s;
        ay += dy * s;
        az += dz * s;
    }
    acc[i * 3 + 0] = ax;
    acc[i * 3 + 1] = ay;
    acc[i * 3 + 2] = az;
}
