#pragma once
// Sizes that come from settings or files are checked against the memory there is before anything is
// allocated: a clear message instead of std::bad_alloc, or of the OOM killer after overcommit said yes.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "common/error.h"

namespace nanovllm {

// MemAvailable from /proc/meminfo (what can be allocated without swapping); total physical memory where
// that file is unreadable.
inline uint64_t available_host_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// "1.5 GiB"
inline std::string gib_string(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
  return text;
}

// Throws InvalidInput "<what> needs X GiB of memory, but only Y GiB is available" when bytes exceed what is
// available. Small requests are not checked (reading /proc costs more than they do).
inline void require_host_memory(uint64_t bytes, const std::string& what) {
  constexpr uint64_t kAlwaysAllowed = 64ull << 20;
  if (bytes <= kAlwaysAllowed) return;
  const uint64_t available = available_host_memory_bytes();
  if (bytes > available)
    throw InvalidInput(what + " needs " + gib_string(bytes) + " of memory, but only " + gib_string(available) +
                       " is available");
}

}  // namespace nanovllm
