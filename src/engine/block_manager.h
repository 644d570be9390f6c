// File: block_manager.h
// -----------------------------------------------------------------------------
// BlockManager: the paged KV cache's bookkeeping (vLLM's block pool). The cache is
// `num_blocks` fixed-size blocks of `block_size` token slots on every rank; a sequence owns a
// block table (block ids in position order) and token p of it lives in slot
// block_table[p / block_size] * block_size + p % block_size. Free blocks sit on a free list;
// allocation takes from its front, freeing returns to its back, so reuse is predictable.
// With sliding-window attention a sequence's oldest blocks can be given back while it runs
// (FreeLeading): their table entries become kNoBlock, so the table stays indexed by position.
//
// Pure bookkeeping: no tensors, testable without a model. Thread-compatible (the scheduler
// owns it and runs on one thread).
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

namespace uc::engine {

class BlockManager {
 public:
  // A table entry whose block was given back (FreeLeading): no position in it is ever read.
  static constexpr int32_t kNoBlock = -1;

  // REQUIRES: num_blocks >= 1, block_size >= 1.
  BlockManager(int num_blocks, int block_size);

  int num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  int num_free_blocks() const { return static_cast<int>(free_.size()); }
  int num_used_blocks() const { return num_blocks_ - num_free_blocks(); }

  // Blocks a sequence needs to hold `num_tokens` KV entries: ceil(num_tokens / block_size).
  int BlocksFor(int num_tokens) const;
  // True when `table` can grow to cover `num_tokens` tokens with the free blocks left.
  bool CanAllocate(const std::vector<int32_t>& table, int num_tokens) const;
  // Appends blocks to `table` until it covers `num_tokens` tokens. Returns false and changes
  // nothing when there are not enough free blocks.
  bool Allocate(std::vector<int32_t>& table, int num_tokens);
  // Returns every block of `table` to the free list and clears it (kNoBlock entries skipped).
  // REQUIRES: every other id in `table` is in use (a double free is a checked error).
  void Free(std::vector<int32_t>& table);
  // Returns the blocks of table[0, count) still held to the free list and marks their entries
  // kNoBlock; the table keeps its length. Returns how many blocks were freed.
  // REQUIRES: 0 <= count <= table.size().
  int FreeLeading(std::vector<int32_t>& table, int count);

 private:
  void Release(int32_t id);

  int num_blocks_;
  int block_size_;
  std::deque<int32_t> free_;
  std::vector<bool> in_use_;  // [num_blocks]
};

}  // namespace uc::engine
