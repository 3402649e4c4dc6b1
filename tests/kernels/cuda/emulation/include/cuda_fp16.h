#pragma once
#include "tests/kernels/cuda/emulation/cuda_emulation.h"
