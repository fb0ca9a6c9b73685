// ptxfactory's shim for NVRTC, which has no C++ standard library: <float.h> from libcu++ (cuda/std/cfloat).
// Given to NVRTC only (after the toolkit's own include folders); nvcc uses the host compiler's.
#pragma once
#include <cuda/std/cfloat>
// libcu++'s <cuda/std/cfloat> leaves the C macros undefined under NVRTC: the values of IEEE 754 binary32 and binary64.
#ifndef FLT_MAX
#define FLT_RADIX 2
#define FLT_MANT_DIG 24
#define DBL_MANT_DIG 53
#define FLT_DIG 6
#define DBL_DIG 15
#define FLT_MIN_EXP (-125)
#define DBL_MIN_EXP (-1021)
#define FLT_MAX_EXP 128
#define DBL_MAX_EXP 1024
#define FLT_MAX 3.40282347e+38F
#define DBL_MAX 1.7976931348623157e+308
#define FLT_MIN 1.17549435e-38F
#define DBL_MIN 2.2250738585072014e-308
#define FLT_EPSILON 1.19209290e-07F
#define DBL_EPSILON 2.2204460492503131e-16
#define FLT_TRUE_MIN 1.40129846e-45F
#define DBL_TRUE_MIN 4.9406564584124654e-324
#endif
