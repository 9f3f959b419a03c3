#pragma once
// One case for Backend::upload_ranges on any backend: a host area of patterned bytes, ranges of odd word counts
// (a 16-byte vector tail), an empty one and one of several blocks' worth, device ids for the negative words of the
// first range, and the bytes the destination must then hold (a sentinel outside the ranges).
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/backend.h"

namespace nanovllm::test {

struct UploadRangesCase {
  static constexpr size_t kBytes = 300 * 1024;
  static constexpr uint8_t kSentinel = 0xAB;
  std::vector<uint8_t> host = std::vector<uint8_t>(kBytes);
  std::vector<CopyRange> ranges = {{64, 4 * 7}, {1024, 4 * 5}, {4096, 0}, {8192, 4 * 3}, {16384, 200 * 1024 + 12}};
  std::vector<int32_t> device_ids = {901, 902, 903, 904, 905, 906};

  UploadRangesCase() {
    for (size_t i = 0; i < kBytes; ++i) host[i] = static_cast<uint8_t>(i * 131 + 7);
    const int32_t first_range[7] = {11, -1 - 4, 12, -1 - 0, -1 - 5, 13, -1 - 4};  // rows 4, 0, 5, 4 of the ids
    std::memcpy(host.data() + 64, first_range, sizeof(first_range));
  }
  // With the ids taken (from.ids set) or the words copied as they are.
  std::vector<uint8_t> expected(bool with_ids) const {
    std::vector<uint8_t> out(kBytes, kSentinel);
    for (const CopyRange& r : ranges) std::memcpy(out.data() + r.offset, host.data() + r.offset, r.bytes);
    if (with_ids) {
      for (size_t i = 0; i < 7; ++i) {
        int32_t v;
        std::memcpy(&v, out.data() + 64 + 4 * i, 4);
        if (v < 0) std::memcpy(out.data() + 64 + 4 * i, &device_ids[static_cast<size_t>(-1 - v)], 4);
      }
    }
    return out;
  }
};

}  // namespace nanovllm::test
