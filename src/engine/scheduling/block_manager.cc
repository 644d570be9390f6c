#include "engine/scheduling/block_manager.h"

#include "base/check.h"

namespace uc::engine {
namespace {

// splitmix64's finalizer: a strong 64-bit mixer.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

uint64_t Lane(uint64_t seed, const std::optional<BlockHash>& parent,
              std::span<const int32_t> tokens, uint64_t key, uint64_t parent_lane) {
  uint64_t h = Mix(seed ^ (parent.has_value() ? parent_lane : 0x9e3779b97f4a7c15ull));
  h = Mix(h ^ key);
  h = Mix(h ^ tokens.size());
  for (const int32_t t : tokens) h = Mix(h ^ static_cast<uint32_t>(t));
  return h;
}

}  // namespace

BlockHash HashBlock(const std::optional<BlockHash>& parent, std::span<const int32_t> tokens,
                    const BlockHash& key) {
  const BlockHash p = parent.value_or(BlockHash{});
  return {Lane(0x243f6a8885a308d3ull, parent, tokens, key.a, p.a),
          Lane(0x13198a2e03707344ull, parent, tokens, key.b, p.b)};
}

BlockManager::BlockManager(int num_blocks, int block_size)
    : num_blocks_(num_blocks), block_size_(block_size) {
  UC_CHECK(num_blocks >= 1, "num_blocks is %d; the KV cache needs at least one block", num_blocks);
  UC_CHECK(block_size >= 1, "block_size is %d; a block needs at least one slot", block_size);
  refs_.assign(num_blocks, 0);
  hash_.assign(num_blocks, std::nullopt);
  free_pos_.resize(num_blocks);
  for (int32_t id = 0; id < num_blocks; ++id) free_pos_[id] = free_.insert(free_.end(), id);
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

void BlockManager::Take(int32_t id) {
  if (refs_[id]++ > 0) return;
  free_.erase(free_pos_[id]);
}

bool BlockManager::Allocate(std::vector<int32_t>& table, int num_tokens) {
  if (!CanAllocate(table, num_tokens)) return false;
  const size_t needed = static_cast<size_t>(BlocksFor(num_tokens));
  while (table.size() < needed) {
    const int32_t id = free_.front();
    Take(id);
    if (hash_[id].has_value()) {  // evicted: its prefix is no longer served
      cached_.erase(*hash_[id]);
      hash_[id].reset();
    }
    table.push_back(id);
  }
  return true;
}

void BlockManager::Release(int32_t id) {
  UC_CHECK(id >= 0 && id < num_blocks_, "freeing block %d of a cache of %d blocks", id,
           num_blocks_);
  UC_CHECK(refs_[id] > 0, "double free of KV block %d", id);
  if (--refs_[id] == 0) free_pos_[id] = free_.insert(free_.end(), id);
}

void BlockManager::Free(std::vector<int32_t>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) {
    if (*it != kNoBlock) Release(*it);
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

int BlockManager::Match(std::span<const BlockHash> hashes, std::vector<int32_t>& table) {
  UC_CHECK(table.empty(), "Match into a table of %zu blocks", table.size());
  for (const BlockHash& h : hashes) {
    const auto it = cached_.find(h);
    if (it == cached_.end()) break;
    Take(it->second);
    table.push_back(it->second);
  }
  return static_cast<int>(table.size());
}

void BlockManager::Register(int32_t id, const BlockHash& hash) {
  UC_CHECK(id >= 0 && id < num_blocks_ && refs_[id] > 0, "registering unreferenced block %d", id);
  if (hash_[id].has_value() || cached_.count(hash) != 0) return;
  hash_[id] = hash;
  cached_[hash] = id;
}

}  // namespace uc::engine
