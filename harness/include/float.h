// ptxfactory's shim for NVRTC, which has no C++ standard library: <float.h> from libcu++ (cuda/std/cfloat).
// Given to NVRTC only (after the toolkit's own include folders); nvcc uses the host compiler's.
#pragma once
#include <cuda/std/cfloat>
