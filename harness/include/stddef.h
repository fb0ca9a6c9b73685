// ptxfactory's shim for NVRTC, which has no C++ standard library: <stddef.h> from libcu++ (cuda/std/cstddef).
// Given to NVRTC only (after the toolkit's own include folders); nvcc uses the host compiler's.
#pragma once
#include <cuda/std/cstddef>
