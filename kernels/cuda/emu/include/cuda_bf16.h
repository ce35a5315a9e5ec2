// Emulator stand-in for the CUDA header of this name (see kernels/cuda/emu/emu.h).
#pragma once
#include "kernels/cuda/emu/runtime.h"
