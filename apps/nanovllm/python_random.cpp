#include "python_random.h"

#include <array>
#include <bit>
#include <sstream>
#include <stdexcept>

namespace nanovllm::cli {

namespace {
constexpr size_t kStateWords = std::mt19937::state_size;

// CPython seeds with MT19937's init_by_array over the seed's 32-bit words (one word, 0 included, for seeds
// below 2^32), not with the single-word init_genrand that std::mt19937(seed) uses.
std::array<uint32_t, kStateWords> init_by_array(uint32_t key) {
  std::array<uint32_t, kStateWords> mt{};
  mt[0] = 19650218u;
  for (uint32_t i = 1; i < kStateWords; ++i) mt[i] = 1812433253u * (mt[i - 1] ^ (mt[i - 1] >> 30)) + i;
  size_t i = 1;
  const auto advance = [&] {
    if (++i >= kStateWords) {
      mt[0] = mt[kStateWords - 1];
      i = 1;
    }
  };
  for (size_t k = kStateWords; k > 0; --k) {  // the key has one word, so j (its index) stays 0
    mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525u)) + key;
    advance();
  }
  for (size_t k = kStateWords - 1; k > 0; --k) {
    mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941u)) - static_cast<uint32_t>(i);
    advance();
  }
  mt[0] = 0x80000000u;
  return mt;
}
}  // namespace

PythonRandom::PythonRandom(uint32_t seed) {
  // An engine's textual form is its state words; read back, the next draw starts a fresh twist, exactly
  // where CPython's generator stands after seeding.
  std::stringstream state;
  for (uint32_t word : init_by_array(seed)) state << word << ' ';
  state >> engine_;
}

uint32_t PythonRandom::getrandbits(int bits) { return static_cast<uint32_t>(engine_()) >> (32 - bits); }

int PythonRandom::randint(int low, int high) {
  const int64_t width = static_cast<int64_t>(high) - low + 1;
  if (width < 1 || width > (int64_t{1} << 31)) throw std::invalid_argument("randint: range must hold 1 to 2^31 values");
  // CPython's _randbelow: draw bit_length(n) bits until the value falls below n.
  const auto n = static_cast<uint32_t>(width);
  const int bits = std::bit_width(n);
  uint32_t r = getrandbits(bits);
  while (r >= n) r = getrandbits(bits);
  return low + static_cast<int>(r);
}

}  // namespace nanovllm::cli
