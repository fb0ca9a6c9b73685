import numpy as np


def pagerank_pull(in_ptr, in_src, out_degree, rank, new_rank, *, num_vertices, damping):
    lo = in_ptr[:-1].astype(np.int64)
    hi = in_ptr[1:].astype(np.int64)
    src = in_src[: int(hi[-1])].astype(np.int64)
    contrib = rank[src] / out_degree[src].astype(np.float64)
    prefix = np.concatenate(([0.0], np.cumsum(contrib)))
    s = prefix[hi] - prefix[lo]
    # the kernel computes (1 - d) / n in float32: d arrives as its float32 value
    return (1.0 - damping) / num_vertices + damping * s
