#include "engine/block_manager.h"

#include <cstddef>

#include "base/check.h"

namespace uc::engine {

BlockManager::BlockManager(int num_blocks, int block_size)
    : num_blocks_(num_blocks), block_size_(block_size) {
  UC_CHECK(num_blocks >= 1, "num_blocks is %d; the KV cache needs at least one block", num_blocks);
  UC_CHECK(block_size >= 1, "block_size is %d; a block needs at least one slot", block_size);
  in_use_.assign(num_blocks, false);
  for (int32_t id = 0; id < num_blocks; ++id) free_.push_back(id);
}

int BlockManager::BlocksFor(int num_tokens) const {
  UC_CHECK(num_tokens >= 0, "BlocksFor(%d): a token count cannot be negative", num_tokens);
  // 64-bit so num_tokens near INT_MAX does not overflow before the division.
  return static_cast<int>((int64_t{num_tokens} + block_size_ - 1) / block_size_);
}

bool BlockManager::CanAllocate(const std::vector<int32_t>& table, int num_tokens) const {
  const int64_t missing = int64_t{BlocksFor(num_tokens)} - static_cast<int64_t>(table.size());
  return missing <= num_free_blocks();
}

bool BlockManager::Allocate(std::vector<int32_t>& table, int num_tokens) {
  if (!CanAllocate(table, num_tokens)) return false;
  const size_t needed = static_cast<size_t>(BlocksFor(num_tokens));
  while (table.size() < needed) {
    const int32_t id = free_.front();
    free_.pop_front();
    in_use_[id] = true;
    table.push_back(id);
  }
  return true;
}

void BlockManager::Release(int32_t id) {
  UC_CHECK(id >= 0 && id < num_blocks_, "freeing block %d of a cache of %d blocks", id,
           num_blocks_);
  UC_CHECK(in_use_[id], "double free of KV block %d", id);
  in_use_[id] = false;
  free_.push_back(id);
}

void BlockManager::Free(std::vector<int32_t>& table) {
  for (const int32_t id : table) {
    if (id != kNoBlock) Release(id);
  }
  table.clear();
}

int BlockManager::FreeLeading(std::vector<int32_t>& table, int count) {
  UC_CHECK(count >= 0 && static_cast<size_t>(count) <= table.size(),
           "FreeLeading(%d) of a table of %zu blocks", count, table.size());
  int freed = 0;
  for (int b = 0; b < count; ++b) {
    if (table[b] == kNoBlock) continue;
    Release(table[b]);
    table[b] = kNoBlock;
    ++freed;
  }
  return freed;
}

}  // namespace uc::engine
