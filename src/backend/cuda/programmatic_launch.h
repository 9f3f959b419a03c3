#pragma once
// Whether the backend's kernels use programmatic dependent launch (programmatic_launch.cuh has the kernels'
// side of it).

namespace nanovllm::cuda {

// True on sm_90+ devices unless the environment sets NANOVLLM_PDL=0 (ordinary launches, for A/B runs and
// as a way out should a driver misbehave). Decided once per process, from the device current at first use.
bool programmatic_launch_enabled();

// Where programmatic launch is on, every kernel of a decode step asks for the same split of each SM's unified L1 /
// shared memory, this much shared: an SM re-splits only when idle, so a kernel let in early beside CTAs of another
// split ran with the wrong one (the decode GEMV, which rereads its input through L1, with a few KiB of it beside
// the tensor-core decode attention). 120 KiB holds one CTA of that attention (two with FP8 codes) and leaves the
// rest of the SM's 256 KiB as L1 (the driver picks one of the SM's fixed splits at least this large; which one
// was not read back).
inline constexpr int kStepSharedMemoryBytes = 120 << 10;

// The carveout (percent of the device's shared memory per SM) that asks for kStepSharedMemoryBytes, or -1 where
// programmatic launch is off (no preference then). Decided once per process, like programmatic_launch_enabled().
int step_shared_carveout_percent();

}  // namespace nanovllm::cuda
