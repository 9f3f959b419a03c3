#pragma once
// Counter-based random numbers shared by the CPU and CUDA samplers, so a seeded request draws the same noise
// on either backend: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3").
#include <cstdint>

#include "common/host_device.h"

namespace nanovllm {

NANOVLLM_HOST_DEVICE void philox_round(uint32_t (&c)[4], uint32_t k0, uint32_t k1) {
  const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c[0];
  const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  const uint32_t n0 = hi1 ^ c[1] ^ k0;
  const uint32_t n2 = hi0 ^ c[3] ^ k1;
  c[0] = n0;
  c[1] = lo1;
  c[2] = n2;
  c[3] = lo0;
}

// Uniform in (0, 1), never 0 or 1, for (seed, step, token).
NANOVLLM_HOST_DEVICE float philox_uniform(uint64_t seed, uint32_t step, uint32_t token) {
  uint32_t c[4] = {token, step, 0u, 0u};
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    philox_round(c, k0, k1);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  // 23 bits, so (2^23 - 1 + 0.5) / 2^23 is still exactly representable below 1.
  return (static_cast<float>(c[0] >> 9) + 0.5f) * (1.0f / 8388608.0f);
}

}  // namespace nanovllm
