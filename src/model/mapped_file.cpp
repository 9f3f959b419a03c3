#include "model/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "common/error.h"

namespace nanovllm {
namespace {

// Closes the descriptor on every path out of open(); the mapping stays valid after close.
struct FileDescriptor {
  int fd;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

MappedFile MappedFile::open(const std::filesystem::path& path) {
  FileDescriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) throw InvalidInput(path.string() + ": cannot be opened: " + std::strerror(errno));
  struct stat info {};
  if (::fstat(file.fd, &info) != 0) throw InvalidInput(path.string() + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(info.st_mode)) throw InvalidInput(path.string() + ": is not a regular file");
  const auto size = static_cast<size_t>(info.st_size);
  if (size == 0) return MappedFile(nullptr, 0);
  void* data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, file.fd, 0);
  if (data == MAP_FAILED) throw InvalidInput(path.string() + ": cannot be mapped: " + std::strerror(errno));
  // Weights are read front to back once; start the read-ahead now (a hint: failure is harmless).
  ::madvise(data, size, MADV_WILLNEED);
  return MappedFile(static_cast<const std::byte*>(data), size);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { unmap(); }

void MappedFile::unmap() noexcept {
  if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace nanovllm
