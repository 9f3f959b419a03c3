// Arbitrary bytes as a .safetensors file (8-byte length, JSON header, data) through SafetensorsFile::open
// and every view it hands out. Invariants checked, not only crashes: the only failure is InvalidInput, and
// every tensor's bytes lie inside the file and match its shape and dtype.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/error.h"
#include "model/safetensors.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

// One file per fuzzing process, rewritten for each input (open() maps a path); in memory where /dev/shm is,
// and removed at exit.
struct ScratchFile {
  std::filesystem::path path = (std::filesystem::is_directory("/dev/shm") ? std::filesystem::path("/dev/shm")
                                                                          : std::filesystem::temp_directory_path()) /
                               ("fuzz_safetensors_" + std::to_string(getpid()) + ".safetensors");
  ~ScratchFile() {
    std::error_code ignored;
    std::filesystem::remove(path, ignored);
  }
};

const std::filesystem::path& scratch_file() {
  static const ScratchFile file;
  return file.path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    std::ofstream out(scratch_file(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const nanovllm::SafetensorsFile file = nanovllm::SafetensorsFile::open(scratch_file());
    for (const std::string& name : file.names()) {
      const nanovllm::HostTensorView view = file.get(name);
      const auto* begin = static_cast<const uint8_t*>(view.data);
      check(view.numel() >= 0);
      // The mapping holds the same bytes as `data`: the view must point into it, whole.
      volatile uint8_t sink = 0;
      if (view.bytes() != 0) sink = sink + begin[0] + begin[view.bytes() - 1];
    }
  } catch (const nanovllm::InvalidInput&) {
  }
  return 0;
}
