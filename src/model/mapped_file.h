#pragma once
// A read-only memory mapping of a whole file; unmapped when the last owner goes away.
#include <cstddef>
#include <filesystem>

namespace nanovllm {

class MappedFile {
 public:
  // Throws InvalidInput when the file cannot be opened or mapped. An empty file maps to size 0.
  static MappedFile open(const std::filesystem::path& path);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  MappedFile(const std::byte* data, size_t size) : data_(data), size_(size) {}
  void unmap() noexcept;

  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace nanovllm
