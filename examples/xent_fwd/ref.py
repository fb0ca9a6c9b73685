"""The Python reference of xent_fwd.cu (spec: check.reference = "python:ref.py:xent_fwd").

Called in a child process with the kernel's buffers in the spec's argument order (logits: [M, V]
float64, target: [M] int32, loss: [M] pre-allocated) and the size symbols as keywords (see
harness/reference.py). Returns loss.
"""
import numpy as np


def xent_fwd(logits, target, loss, *, M, V):
    """loss[r] = logsumexp(logits[r, :]) - logits[r, target[r]], in float64 (max-shifted, so no overflow)."""
    assert logits.shape == (M, V) and target.shape == (M,) and loss.shape == (M,)
    assert target.min(initial=0) >= 0 and target.max(initial=0) < V, "target out of range"
    mx = logits.max(axis=1)
    lse = mx + np.log(np.exp(logits - mx[:, None]).sum(axis=1))
    return lse - logits[np.arange(M), target]
