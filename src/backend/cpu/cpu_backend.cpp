// Construction, memory and host transfers of the CPU backend; the ops live one concept per file beside it.
#include "backend/cpu/cpu_backend.h"

#include <cblas.h>
#include <omp.h>

#include <cstdlib>
#include <cstring>

#include "backend/cpu/checks.h"
#include "common/half_float.h"
#include "common/host_memory.h"

namespace nanovllm {

namespace {
constexpr size_t kAlignment = 64;  // a cache line, and enough for any SIMD load
}

CpuBackend::CpuBackend() : num_threads_(omp_get_max_threads()) {}

CpuBackend::CpuBackend(int num_threads) : CpuBackend() {
  if (num_threads > 0) {
    num_threads_ = num_threads;
    openblas_set_num_threads(num_threads);
  }
}

Buffer CpuBackend::allocate(size_t bytes) {
  if (bytes == 0) return Buffer(nullptr, 0, std::free);
  // Linux overcommits: without this check a huge size succeeds here and the OOM killer ends the process later.
  require_host_memory(bytes, "cpu backend: a buffer");
  // aligned_alloc wants a size that is a multiple of the alignment.
  const size_t padded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* ptr = std::aligned_alloc(kAlignment, padded);
  if (ptr == nullptr) throw EngineError("cpu allocate: out of memory for " + std::to_string(bytes) + " bytes");
  return Buffer(ptr, bytes, std::free);
}

void CpuBackend::upload(const void* host, void* dst, size_t bytes) {
  if (bytes != 0) std::memcpy(dst, host, bytes);
}

void CpuBackend::upload_ranges(const void* host, void* dst, std::span<const CopyRange> ranges,
                               const DeviceIdSource& from) {
  check_upload_ranges("cpu upload_ranges", ranges, from);
  for (const CopyRange& r : ranges)
    upload(static_cast<const char*>(host) + r.offset, static_cast<char*>(dst) + r.offset, r.bytes);
  if (from.ids == nullptr) return;
  const CopyRange& r = ranges[static_cast<size_t>(from.range)];
  auto* words = reinterpret_cast<int32_t*>(static_cast<char*>(dst) + r.offset);
  for (size_t i = 0; i < r.bytes / 4; ++i)
    if (words[i] < 0) words[i] = from.ids[-1 - words[i]];
}

void CpuBackend::download(const void* src, void* host, size_t bytes) {
  if (bytes != 0) std::memcpy(host, src, bytes);
}

namespace {
// Every op has run when it returns: a mark has nothing to wait for.
class RanMark final : public QueueMark {
 public:
  void record() override {}
  void wait() override {}
};
}  // namespace

std::unique_ptr<QueueMark> CpuBackend::create_mark() { return std::make_unique<RanMark>(); }

void CpuBackend::upload_converted(const void* host_src, DType src_dtype, void* dst, int64_t numel) {
  float* out = static_cast<float*>(dst);
  switch (src_dtype) {
    case DType::F32:
      upload(host_src, dst, static_cast<size_t>(numel) * sizeof(float));
      return;
    case DType::BF16: {
      const uint16_t* in = static_cast<const uint16_t*>(host_src);
#pragma omp parallel for num_threads(num_threads_) schedule(static) if (numel > (1 << 16))
      for (int64_t i = 0; i < numel; ++i) out[i] = bf16_to_float(in[i]);
      return;
    }
    case DType::F16: {
      const uint16_t* in = static_cast<const uint16_t*>(host_src);
#pragma omp parallel for num_threads(num_threads_) schedule(static) if (numel > (1 << 16))
      for (int64_t i = 0; i < numel; ++i) out[i] = f16_to_float(in[i]);
      return;
    }
    default:
      cpu::fail("upload_converted", std::string("cannot convert ") + dtype_name(src_dtype) + " to F32");
  }
}

}  // namespace nanovllm
