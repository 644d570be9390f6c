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
// Prefix caching (vLLM's automatic prefix caching): a full block whose KV is computed can be
// registered under a BlockHash, a chained hash of everything its KV depends on (the previous
// block's hash, its token ids, and the sequence's cache key: steering during prefill, salt).
// Blocks are reference counted: Match hands a registered block to another sequence (one more
// reference) instead of a fresh one. A block whose last reference goes keeps its hash on the
// free list and can still be matched; it is evicted (its hash forgotten) only when allocation
// reuses it, least recently freed first. Without prefix caching nothing is ever registered and
// every block has at most one reference.
//
// Pure bookkeeping: no tensors, testable without a model. Thread-compatible (the scheduler
// owns it and runs on one thread).
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace uc::engine {

// A 128-bit chained block hash (two independent 64-bit lanes, so a collision, which would
// serve another prefix's KV, needs both to collide).
struct BlockHash {
  uint64_t a = 0;
  uint64_t b = 0;
  bool operator==(const BlockHash&) const = default;
};

// The hash of a block holding `tokens` after the block hashed `parent` (nullopt for the first
// block), for sequences with cache key `key`.
BlockHash HashBlock(const std::optional<BlockHash>& parent, std::span<const int32_t> tokens,
                    const BlockHash& key);

class BlockManager {
 public:
  // A table entry whose block was given back (FreeLeading): no position in it is ever read.
  static constexpr int32_t kNoBlock = -1;

  // REQUIRES: num_blocks >= 1, block_size >= 1.
  BlockManager(int num_blocks, int block_size);

  int num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  // Blocks no sequence references (cached ones included: they are reusable).
  int num_free_blocks() const { return static_cast<int>(free_.size()); }
  int num_used_blocks() const { return num_blocks_ - num_free_blocks(); }
  // Registered blocks (held or free).
  int num_cached_blocks() const { return static_cast<int>(cached_.size()); }

  // Blocks a sequence needs to hold `num_tokens` KV entries: ceil(num_tokens / block_size).
  int BlocksFor(int num_tokens) const;
  // True when `table` can grow to cover `num_tokens` tokens with the free blocks left.
  bool CanAllocate(const std::vector<int32_t>& table, int num_tokens) const;
  // Appends blocks to `table` until it covers `num_tokens` tokens. Returns false and changes
  // nothing when there are not enough free blocks.
  bool Allocate(std::vector<int32_t>& table, int num_tokens);
  // Drops one reference to every block of `table` and clears it (kNoBlock entries skipped);
  // blocks left without references return to the free list, the table's last block first (so
  // a prefix's tail is evicted before its head).
  // REQUIRES: every other id in `table` is referenced (a double free is a checked error).
  void Free(std::vector<int32_t>& table);
  // Returns the blocks of table[0, count) still held to the free list and marks their entries
  // kNoBlock; the table keeps its length. Returns how many blocks were freed.
  // REQUIRES: 0 <= count <= table.size().
  int FreeLeading(std::vector<int32_t>& table, int count);

  // Prefix caching. Appends to the empty `table` the registered blocks of hashes[0],
  // hashes[1], ... up to the first that is not registered, taking a reference to each; returns
  // how many. REQUIRES: table is empty.
  int Match(std::span<const BlockHash> hashes, std::vector<int32_t>& table);
  // Registers referenced block `id`, whose KV is computed, under `hash`. No-op when the hash is
  // already registered (to this block or another) or the block already has a hash.
  void Register(int32_t id, const BlockHash& hash);

 private:
  struct HashOf {
    size_t operator()(const BlockHash& h) const { return static_cast<size_t>(h.a ^ (h.b << 1)); }
  };
  void Release(int32_t id);
  void Take(int32_t id);  // off the free list, one reference; evicts its hash if it had one

  int num_blocks_;
  int block_size_;
  std::list<int32_t> free_;
  std::vector<std::list<int32_t>::iterator> free_pos_;  // [num_blocks], valid when ref 0
  std::vector<int> refs_;                               // [num_blocks]
  std::vector<std::optional<BlockHash>> hash_;          // [num_blocks]
  std::unordered_map<BlockHash, int32_t, HashOf> cached_;
};

}  // namespace uc::engine
