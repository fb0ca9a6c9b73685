import numpy as np


def quantize_rows(x, q, scales, *, M, N):
    amax = np.abs(x).max(axis=1)
    scale = np.where(amax == 0, 1.0, amax / 127.0)
    # q is defined against the scale as stored (f32): dequantisation is q * scales[row], so the f32 value of
    # absmax / 127 is what q must be rounded against; the quotient and the rounding are then exact in float64
    scale = scale.astype(np.float32).astype(np.float64)
    qv = np.clip(np.rint(x / scale[:, None]), -127, 127)  # np.rint: ties to even, like __float2int_rn
    return qv.astype(np.int8), scale
