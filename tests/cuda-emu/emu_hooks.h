/* dcps tests — what the emulator lets a test do that a GPU does not: make the
 * runtime fail the way a real node can, and look at its queues.
 *
 * For tests built with DCPS_EMU only (tests/cuda-emu/emu_rt.cpp defines these).
 * Each setting holds for the rest of the process; Check runs every test in a
 * process of its own, so a test sets what it needs first thing. */
#ifndef DCPS_EMU_HOOKS_H
#define DCPS_EMU_HOOKS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* From now on the machine has a driver too old for the runtime (an R550 driver,
 * CUDA 12.4, under a CUDA 13 runtime): every runtime call fails with
 * cudaErrorInsufficientDriver, as the real runtime does there. */
void emu_set_old_driver(void);

/* The device has bytes of memory in all; a cudaMalloc beyond what is left fails
 * with cudaErrorMemoryAllocation. 0 (the default) means no limit. */
void emu_set_device_bytes(size_t bytes);

/* The nth kernel launch from now (1 = the next) fails with
 * cudaErrorLaunchOutOfResources, reported by cudaGetLastError() as on a GPU;
 * the grid is not queued. 0 cancels. */
void emu_fail_launch(unsigned long nth);

/* Operations queued on all streams and not yet run: kernels, copies, events. */
size_t emu_pending(void);

#ifdef __cplusplus
}
#endif
#endif
