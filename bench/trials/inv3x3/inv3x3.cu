// Batched 3x3 matrix inverse by the adjugate, one thread per matrix. A and Ainv are [batch, 3, 3] row-major.
__global__ void batched_inverse3x3(const float* A, float* Ainv, int batch)
{
    int m = blockIdx.x * blockDim.x + threadIdx.x;
    if (m >= batch) return;
    const float* a = A + m * 9;
    float* r = Ainv + m * 9;
    float a00 = a[0], a01 = a[1], a02 = a[2];
    float a10 = a[3], a11 = a[4], a12 = a[5];
    float a20 = a[6], a21 = a[7], a22 = a[8];
    float c00 = a11 * a22 - a12 * a21;
    float c01 = a12 * a20 - a10 * a22;
    float c02 = a10 * a21 - a11 * a20;
    float det = a00 * c00 + a01 * c01 + a02 * c02;
    float inv_det = 1.0f / det;
    r[0] = c00 * inv_det;
    r[1] = (a02 * a21 - a01 * a22) * inv_det;
    r[2] = (a01 * a12 - a02 * a11) * inv_det;
    r[3] = c01 * inv_det;
    r[4] = (a00 * a22 - a02 * a20) * inv_det;
    r[5] = (a02 * a10 - a00 * a12) * inv_det;
    r[6] = c02 * inv_det;
    r[7] = (a01 * a20 - a00 * a21) * inv_det;
    r[8] = (a00 * a11 - a01 * a10) * inv_det;
}

void inverse3x3(const float* A, float* Ainv, int batch)
{
    batched_inverse3x3<<<(batch + 127) / 128, 128>>>(A, Ainv, batch);
}
