// CPU emulation stand-in (tools/cuda_emu).
#pragma once
#include "emu_cuda.h"
