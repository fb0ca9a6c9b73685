// ptxfactory's prelude for NVRTC (given as --pre-include to a source that names one of these macros): what nvcc's
// implicit <cuda_runtime.h> makes visible to every kernel without an #include (it pulls in the host's <math.h>), so
// that a kernel nvcc compiles as it stands compiles here too. INFINITY and NAN are spelt as libcu++'s <cuda/std/cmath>
// spells them under NVRTC, so a later #include of it redefines them identically (no warning).
#pragma once
#include <cuda/std/limits>
#ifndef INFINITY
#define INFINITY _CUDA_VSTD::numeric_limits<float>::infinity()
#endif
#ifndef NAN
#define NAN      _CUDA_VSTD::numeric_limits<float>::quiet_NaN()
#endif
#ifndef HUGE_VALF
#define HUGE_VALF (::cuda::std::numeric_limits<float>::infinity())
#endif
#ifndef HUGE_VAL
#define HUGE_VAL (::cuda::std::numeric_limits<double>::infinity())
#endif
