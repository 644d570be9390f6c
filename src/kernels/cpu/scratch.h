// File: scratch.h
// -----------------------------------------------------------------------------
// ThreadScratch: memory a kernel keeps between calls on one thread (declared thread_local),
// 64-byte aligned, grown on demand and never shrunk. Plain C++ compiled without any instruction
// set flags, so the SIMD translation units share one definition.
#pragma once

#include <cstddef>
#include <cstdint>

namespace uc::kernels::cpu {

class ThreadScratch {
 public:
  ThreadScratch() = default;
  ThreadScratch(const ThreadScratch&) = delete;
  ThreadScratch& operator=(const ThreadScratch&) = delete;
  ~ThreadScratch();

  // At least `bytes` bytes, 64-byte aligned. The previous contents are lost when the buffer
  // grows; the pointer stays valid until the next call that grows it. Checks for out of memory.
  std::byte* Get(size_t bytes);

  // Get(count * sizeof(T)) as T*.
  template <typename T>
  T* GetAs(int64_t count) {
    return reinterpret_cast<T*>(Get(static_cast<size_t>(count) * sizeof(T)));
  }

 private:
  std::byte* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace uc::kernels::cpu
