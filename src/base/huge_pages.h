// File: huge_pages.h
// -----------------------------------------------------------------------------
// Memory for large, long-lived buffers that kernels stream through (a model's packed weights),
// backed by 2 MiB transparent huge pages where the kernel grants them.
//
// Why: a decode step reads every weight once, front to back. With 4 KiB pages every page is a
// TLB miss, and the hardware prefetchers stop at each 4 KiB boundary; a read loop over 2 MiB
// pages streams measurably faster (kernels/bandwidth.h reports both). The buffer is an anonymous
// mapping whose 2 MiB-aligned interior is advised MADV_HUGEPAGE, which Linux honours when
// /sys/kernel/mm/transparent_hugepage/enabled is "always" or "madvise". Where it is "never" (or
// on another OS) the buffer is plain memory: only the speed differs. The part that does not fill
// a whole 2 MiB page keeps 4 KiB pages, so no memory is wasted on rounding.
//
// Buffers smaller than a huge page (a mixture of experts' per-expert weights: hundreds of them
// per model, each a few hundred KiB) are carved one after another out of shared 32 MiB chunks
// whose pages are advised huge, so they stream as fast as one large buffer would. A chunk is
// unmapped when the last buffer carved from it is destroyed; the space of a destroyed buffer is
// not reused before that (the buffers are long-lived: weights, workspaces).
#pragma once

#include <cstddef>
#include <memory>

namespace uc {

// A zero-initialised, 64-byte-aligned byte buffer (see above). Move-only; the memory is
// released on destruction. Not thread-safe to move or destroy while other threads read it;
// concurrent reads and writes of distinct bytes are the caller's business, as for any memory.
class HugePageBuffer {
 public:
  // Buffers smaller than this are carved from shared chunks (see above).
  static constexpr size_t kHugePageBytes = size_t{2} << 20;
  // The size of a shared chunk.
  static constexpr size_t kChunkBytes = size_t{32} << 20;

  HugePageBuffer() = default;
  // Maps `bytes` (> 0). Aborts with a message when the system refuses the memory, as
  // Tensor::Empty does.
  explicit HugePageBuffer(size_t bytes);
  ~HugePageBuffer();
  HugePageBuffer(HugePageBuffer&& other) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& other) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  // Bytes of the buffer that were advised to use huge pages (0 where none were; a buffer carved
  // from a chunk counts all its bytes when the chunk was advised). Whether the kernel actually
  // backs them with huge pages is its choice (see /proc/self/smaps).
  size_t advised_bytes() const { return advised_; }

  struct Chunk;  // a shared mapping small buffers are carved from

 private:
  void Release();

  std::byte* data_ = nullptr;  // 2 MiB-aligned when size_ >= kHugePageBytes
  size_t size_ = 0;
  std::shared_ptr<Chunk> chunk_;  // set for a small buffer: its memory is the chunk's
  void* mapping_ = nullptr;       // the whole mapping, from mmap
  size_t mapping_size_ = 0;
  size_t advised_ = 0;
};

}  // namespace uc
