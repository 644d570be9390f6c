#include "base/huge_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <utility>

#include "base/check.h"

namespace uc {
namespace {

size_t RoundUp(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace

// kChunkBytes of zeroed memory, 2 MiB-aligned and advised huge; unmapped with the last buffer.
struct HugePageBuffer::Chunk {
  Chunk() : memory(kChunkBytes) {}
  HugePageBuffer memory;
};

namespace {

// Where small buffers are carved: the newest chunk while any buffer of it lives, and the offset
// of its first unused byte.
struct ChunkPool {
  std::mutex mu;
  std::weak_ptr<HugePageBuffer::Chunk> current;
  size_t used = 0;
};

ChunkPool& GetChunkPool() {
  static ChunkPool* pool = new ChunkPool();  // never destroyed: buffers may outlive statics
  return *pool;
}

}  // namespace

HugePageBuffer::HugePageBuffer(size_t bytes) {
  UC_CHECK(bytes > 0, "HugePageBuffer: zero bytes");
  if (bytes < kHugePageBytes) {
    ChunkPool& pool = GetChunkPool();
    std::lock_guard<std::mutex> lock(pool.mu);
    chunk_ = pool.current.lock();
    size_t start = RoundUp(pool.used, 64);
    if (chunk_ == nullptr || start + bytes > kChunkBytes) {
      chunk_ = std::make_shared<Chunk>();
      pool.current = chunk_;
      start = 0;
    }
    data_ = chunk_->memory.data() + start;
    size_ = bytes;
    pool.used = start + bytes;
    advised_ = chunk_->memory.advised_bytes() > 0 ? bytes : 0;
    return;
  }
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  size_ = bytes;
  // Map 2 MiB more than needed, so that a 2 MiB-aligned start fits inside.
  mapping_size_ = RoundUp(bytes, page) + kHugePageBytes;
  void* addr =
      ::mmap(nullptr, mapping_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  UC_CHECK(addr != MAP_FAILED, "out of memory mapping %zu bytes: %s", bytes, std::strerror(errno));
  mapping_ = addr;
  const auto start = reinterpret_cast<uintptr_t>(addr);
  data_ = reinterpret_cast<std::byte*>(RoundUp(start, kHugePageBytes));
#if defined(MADV_HUGEPAGE)
  // Only whole 2 MiB pages can be huge; the tail keeps small pages.
  const size_t whole = bytes / kHugePageBytes * kHugePageBytes;
  if (::madvise(data_, whole, MADV_HUGEPAGE) == 0) advised_ = whole;
#endif
}

HugePageBuffer::~HugePageBuffer() { Release(); }

HugePageBuffer::HugePageBuffer(HugePageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      chunk_(std::move(other.chunk_)),
      mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_size_(std::exchange(other.mapping_size_, 0)),
      advised_(std::exchange(other.advised_, 0)) {}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    chunk_ = std::move(other.chunk_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_size_ = std::exchange(other.mapping_size_, 0);
    advised_ = std::exchange(other.advised_, 0);
  }
  return *this;
}

void HugePageBuffer::Release() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
  chunk_.reset();
  mapping_ = nullptr;
  data_ = nullptr;
  size_ = mapping_size_ = advised_ = 0;
}

}  // namespace uc
