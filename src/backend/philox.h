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

// The four words of counter (group, step) under key `seed`: word q is the draw of token 4 * group + q, so a
// sampler that holds four consecutive tokens evaluates the rounds once for them.
NANOVLLM_HOST_DEVICE void philox4(uint64_t seed, uint32_t step, uint32_t group, uint32_t (&c)[4]) {
  c[0] = group;
  c[1] = step;
  c[2] = 0u;
  c[3] = 0u;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    philox_round(c, k0, k1);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

// A word as a uniform in (0, 1), never 0 or 1: 23 bits, so (2^23 - 1 + 0.5) / 2^23 is still exactly representable
// below 1.
NANOVLLM_HOST_DEVICE float philox_word_uniform(uint32_t word) {
  return (static_cast<float>(word >> 9) + 0.5f) * (1.0f / 8388608.0f);
}

// Uniform in (0, 1), never 0 or 1, for (seed, step, token).
NANOVLLM_HOST_DEVICE float philox_uniform(uint64_t seed, uint32_t step, uint32_t token) {
  uint32_t c[4];
  philox4(seed, step, token >> 2, c);
  // Selects rather than c[token & 3], which a GPU compiler would put in local memory.
  const uint32_t low = (token & 1u) != 0 ? c[1] : c[0], high = (token & 1u) != 0 ? c[3] : c[2];
  return philox_word_uniform((token & 2u) != 0 ? high : low);
}

}  // namespace nanovllm
