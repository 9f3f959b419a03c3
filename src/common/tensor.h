#pragma once
// A non-owning view of a dense, row-major array that lives in one backend's memory (host for the CPU
// backend, device for CUDA). Ownership stays with a Buffer; views are cheap to copy and slice.
#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>

#include "common/dtype.h"
#include "common/error.h"

namespace nanovllm {

struct Tensor {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::F32;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};

  Tensor() = default;
  Tensor(void* ptr, DType type, std::initializer_list<int64_t> dims) : data(ptr), dtype(type) {
    if (dims.size() > kMaxDims) throw EngineError("Tensor: more than 4 dimensions");
    for (int64_t d : dims) shape[ndim++] = d;
  }

  int64_t dim(int i) const { return shape[i < 0 ? ndim + i : i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  bool empty() const { return data == nullptr; }

  template <class T>
  T* as() const {
    return static_cast<T*>(data);
  }

  // Elements per index of dimension 0.
  int64_t row_elems() const { return ndim == 0 ? 1 : numel() / shape[0]; }

  // Rows [begin, begin + count) of dimension 0.
  Tensor rows(int64_t begin, int64_t count) const {
    Tensor t = *this;
    t.data = static_cast<char*>(data) + begin * row_elems() * static_cast<int64_t>(dtype_size(dtype));
    t.shape[0] = count;
    return t;
  }

  // Same bytes, another shape with the same element count.
  Tensor reshaped(std::initializer_list<int64_t> dims) const {
    Tensor t(data, dtype, dims);
    if (t.numel() != numel()) throw EngineError("Tensor::reshaped: element count changes");
    return t;
  }

  std::string shape_string() const {
    std::string s = "[";
    for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
  }
};

// Owned memory of one backend; the deleter knows how it was allocated (free, cudaFree, munmap...) and may carry
// context (which device, whose byte count).
class Buffer {
 public:
  using Deleter = std::function<void(void*)>;
  Buffer() = default;
  Buffer(void* ptr, size_t bytes, Deleter deleter) : ptr_(ptr, std::move(deleter)), bytes_(bytes) {}

  void* data() const { return ptr_.get(); }
  size_t bytes() const { return bytes_; }

  Tensor view(DType dtype, std::initializer_list<int64_t> dims) const {
    Tensor t(data(), dtype, dims);
    if (t.bytes() > bytes_) throw EngineError("Buffer::view " + t.shape_string() + " exceeds the buffer");
    return t;
  }

 private:
  std::unique_ptr<void, Deleter> ptr_{nullptr, Deleter([](void*) {})};
  size_t bytes_ = 0;
};

}  // namespace nanovllm
