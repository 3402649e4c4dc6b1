#pragma once
#include "tests/kernels/cuda/emulation/cuda_emulation.h"
// Thread-block clusters are not emulated: the device reports compute
// capability 8.0, so the cluster kernels (compiled for sm_90 only) never run.
