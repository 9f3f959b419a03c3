#pragma once
// Python's `random` module for integer draws: random.seed(n) followed by random.randint(a, b) gives the same
// numbers here as in CPython, so workloads defined by a Python script are reproduced without shipping them.
#include <cstdint>
#include <random>

namespace nanovllm::cli {

class PythonRandom {
 public:
  // random.seed(seed) for a seed below 2^32.
  explicit PythonRandom(uint32_t seed);
  // random.randint(low, high): uniform in [low, high], both ends included.
  int randint(int low, int high);

 private:
  // random.getrandbits(bits) for bits in 1..32.
  uint32_t getrandbits(int bits);

  std::mt19937 engine_;  // CPython's generator is MT19937 too; only its seeding differs
};

}  // namespace nanovllm::cli
