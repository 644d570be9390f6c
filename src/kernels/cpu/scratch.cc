#include "kernels/cpu/scratch.h"

#include <cstdlib>

#include "base/check.h"

namespace uc::kernels::cpu {

ThreadScratch::~ThreadScratch() { std::free(data_); }

std::byte* ThreadScratch::Get(size_t bytes) {
  if (bytes > capacity_) {
    std::free(data_);
    data_ = nullptr;
    capacity_ = (bytes + 63) / 64 * 64;
    data_ = static_cast<std::byte*>(std::aligned_alloc(64, capacity_));
    UC_CHECK(data_ != nullptr, "kernel scratch: out of memory (%zu bytes)", capacity_);
  }
  return data_;
}

}  // namespace uc::kernels::cpu
