import numpy as np

F32 = np.float32
CR, CG, CB = (float(F32(c)) for c in (0.299, 0.587, 0.114))  # the kernel's float constants, exactly


def _f32(x):
    return x.astype(F32).astype(np.float64)  # one rounding to float32 (round to nearest even)


def rgb_to_gray(rgb, gray, *, H, W):
    # the kernel's float32 arithmetic as NVRTC contracts it: t = fl(G * 0.587f); t = fma(R, 0.299f, t);
    # v = fma(B, 0.114f, t); gray = v rounded to nearest, ties to even (__float2uint_rn). Each product of a float32
    # constant (24 bits) and a byte (8 bits) and each sum with a float32 below 256 is exact in float64 (<= 33
    # significant bits), so one rounding to float32 after each step is the fp32 operation exactly
    p = rgb.reshape(H, W, 3).astype(np.float64)
    r, g, b = p[..., 0], p[..., 1], p[..., 2]
    t = _f32(g * CG)
    t = _f32(r * CR + t)
    v = _f32(b * CB + t)
    return np.rint(v).astype(np.uint8)  # np.rint: ties to even; 0 <= v <= 255.0 (v(255, 255, 255) rounds to 255)
