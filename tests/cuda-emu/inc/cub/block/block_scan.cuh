/* dcps tests — stand-in for CUB's header: cub::BlockScan is defined in
 * tests/cuda-emu/emu.h, force-included before the kernel source. */
