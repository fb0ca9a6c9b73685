// Segment sum, CSR-style: out[s] = sum(values[offsets[s] .. offsets[s+1])). One thread per segment.
__global__ void segment_sum(const int* offsets, const float* values, float* out, int num_segments) {
    int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s < num_segments) {
        int start = offsets[s];
        int end = offsets[s + 1];
        float sum = 0.0f;
        for (int j = start; j < end; j++) {
            sum += values[j];
        }
        out[s] = sum;
    }
}

void launch(const int* offsets, const float* values, float* out, int num_segments) {
    int threads = 256;
    int blocks = (num_segments + threads - 1) / threads;
    segment_sum<<<blocks, threads>>>(offsets, values, out, num_segments);
}
