#pragma once
// Whether the backend's kernels use programmatic dependent launch (programmatic_launch.cuh has the kernels'
// side of it).

namespace nanovllm::cuda {

// True on sm_90+ devices unless the environment sets NANOVLLM_PDL=0 (ordinary launches, for A/B runs and
// as a way out should a driver misbehave). Decided once per process, from the device current at first use.
bool programmatic_launch_enabled();

}  // namespace nanovllm::cuda
