#include "engine/scheduling/block_manager.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace uc::engine {
namespace {

using Table = std::vector<int32_t>;

TEST(BlockManagerTest, StartsWithEveryBlockFree) {
  BlockManager blocks(/*num_blocks=*/5, /*block_size=*/4);
  EXPECT_EQ(blocks.num_blocks(), 5);
  EXPECT_EQ(blocks.block_size(), 4);
  EXPECT_EQ(blocks.num_free_blocks(), 5);
  EXPECT_EQ(blocks.num_used_blocks(), 0);
}

TEST(BlockManagerTest, BlocksForRoundsUp) {
  BlockManager blocks(8, 4);
  EXPECT_EQ(blocks.BlocksFor(0), 0);
  EXPECT_EQ(blocks.BlocksFor(1), 1);
  EXPECT_EQ(blocks.BlocksFor(4), 1);
  EXPECT_EQ(blocks.BlocksFor(5), 2);
  EXPECT_EQ(blocks.BlocksFor(8), 2);
  EXPECT_EQ(blocks.BlocksFor(9), 3);
  BlockManager single_slot(8, 1);
  EXPECT_EQ(single_slot.BlocksFor(7), 7);
}

TEST(BlockManagerTest, AllocateGrowsATableOnlyAsFarAsNeeded) {
  BlockManager blocks(8, 4);
  Table table;
  ASSERT_TRUE(blocks.Allocate(table, 3));
  EXPECT_EQ(table, (Table{0}));
  ASSERT_TRUE(blocks.Allocate(table, 4));  // still fits in block 0
  EXPECT_EQ(table, (Table{0}));
  ASSERT_TRUE(blocks.Allocate(table, 9));
  EXPECT_EQ(table, (Table{0, 1, 2}));
  ASSERT_TRUE(blocks.Allocate(table, 2));  // never shrinks
  EXPECT_EQ(table, (Table{0, 1, 2}));
  EXPECT_EQ(blocks.num_used_blocks(), 3);
  EXPECT_EQ(blocks.num_free_blocks(), 5);
}

// Allocation takes from the front of the free list and Free returns to the back (a table's
// last block first, so a cached prefix's tail is evicted before its head), so the blocks
// freed last are reused last.
TEST(BlockManagerTest, FreeListIsFirstInFirstOut) {
  BlockManager blocks(4, 2);
  Table a, b;
  ASSERT_TRUE(blocks.Allocate(a, 3));  // blocks 0, 1
  ASSERT_TRUE(blocks.Allocate(b, 1));  // block 2
  EXPECT_EQ(a, (Table{0, 1}));
  EXPECT_EQ(b, (Table{2}));
  blocks.Free(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(blocks.num_free_blocks(), 3);
  Table c;
  ASSERT_TRUE(blocks.Allocate(c, 6));  // free list is 3, 1, 0
  EXPECT_EQ(c, (Table{3, 1, 0}));
  EXPECT_EQ(blocks.num_free_blocks(), 0);
}

TEST(BlockManagerTest, CanAllocateCountsOnlyTheMissingBlocks) {
  BlockManager blocks(3, 4);
  Table a;
  ASSERT_TRUE(blocks.Allocate(a, 8));  // 2 blocks, 1 free
  EXPECT_TRUE(blocks.CanAllocate(a, 8));
  EXPECT_TRUE(blocks.CanAllocate(a, 12));
  EXPECT_FALSE(blocks.CanAllocate(a, 13));
  Table empty;
  EXPECT_TRUE(blocks.CanAllocate(empty, 0));
  EXPECT_TRUE(blocks.CanAllocate(empty, 4));
  EXPECT_FALSE(blocks.CanAllocate(empty, 5));
}

TEST(BlockManagerTest, FailedAllocateChangesNothing) {
  BlockManager blocks(4, 4);
  Table a, b;
  ASSERT_TRUE(blocks.Allocate(a, 8));
  ASSERT_TRUE(blocks.Allocate(b, 4));
  EXPECT_FALSE(blocks.Allocate(b, 13));  // needs 3 more, 1 free
  EXPECT_EQ(b, (Table{2}));
  EXPECT_EQ(blocks.num_free_blocks(), 1);
  ASSERT_TRUE(blocks.Allocate(b, 8));  // the free block is still there
  EXPECT_EQ(b, (Table{2, 3}));
  EXPECT_EQ(blocks.num_free_blocks(), 0);
}

TEST(BlockManagerTest, FreeingAnEmptyTableIsANoOp) {
  BlockManager blocks(2, 4);
  Table empty;
  blocks.Free(empty);
  EXPECT_EQ(blocks.num_free_blocks(), 2);
}

TEST(BlockManagerTest, FreeLeadingGivesBackTheOldestBlocksAndKeepsPositions) {
  BlockManager blocks(5, 2);
  Table a;
  ASSERT_TRUE(blocks.Allocate(a, 8));  // blocks 0..3
  EXPECT_EQ(blocks.FreeLeading(a, 2), 2);
  EXPECT_EQ(a, (Table{BlockManager::kNoBlock, BlockManager::kNoBlock, 2, 3}));
  EXPECT_EQ(blocks.num_free_blocks(), 3);
  EXPECT_EQ(blocks.FreeLeading(a, 3), 1);  // the first two are already back
  EXPECT_EQ(a, (Table{BlockManager::kNoBlock, BlockManager::kNoBlock, BlockManager::kNoBlock, 3}));
  // The table keeps growing by position: 12 tokens need two more blocks, taken from the front
  // of the free list (4, then the first one given back).
  ASSERT_TRUE(blocks.Allocate(a, 12));
  EXPECT_EQ(
      a, (Table{BlockManager::kNoBlock, BlockManager::kNoBlock, BlockManager::kNoBlock, 3, 4, 0}));
  blocks.Free(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(blocks.num_free_blocks(), 5);
}

TEST(BlockManagerDeathTest, DoubleFreeIsACheckedError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  BlockManager blocks(4, 4);
  Table a;
  ASSERT_TRUE(blocks.Allocate(a, 4));
  Table copy = a;
  blocks.Free(a);
  EXPECT_DEATH(blocks.Free(copy), "double free of KV block 0");
  Table duplicated = {1, 1};
  EXPECT_DEATH(blocks.Free(duplicated), "double free");
  Table out_of_range = {7};
  EXPECT_DEATH(blocks.Free(out_of_range), "freeing block 7 of a cache of 4 blocks");
}

TEST(BlockManagerTest, ChainedHashesDependOnParentTokensAndKey) {
  const std::vector<int32_t> a = {1, 2, 3, 4}, b = {1, 2, 3, 5};
  const BlockHash h = HashBlock(std::nullopt, a, {});
  EXPECT_EQ(h, HashBlock(std::nullopt, a, {}));
  EXPECT_NE(h, HashBlock(std::nullopt, b, {}));
  EXPECT_NE(h, HashBlock(std::nullopt, a, BlockHash{7, 9}));  // steered, or salted
  EXPECT_NE(HashBlock(h, a, {}), HashBlock(HashBlock(std::nullopt, b, {}), a, {}));
  EXPECT_NE(HashBlock(h, a, {}), h);
}

TEST(BlockManagerTest, RegisteredBlocksAreSharedAndSurviveUntilEvicted) {
  BlockManager blocks(4, 2);
  const BlockHash h0 = HashBlock(std::nullopt, std::vector<int32_t>{1, 2}, {});
  const BlockHash h1 = HashBlock(h0, std::vector<int32_t>{3, 4}, {});
  Table first;
  ASSERT_TRUE(blocks.Allocate(first, 5));  // blocks 0, 1, 2
  blocks.Register(first[0], h0);
  blocks.Register(first[1], h1);
  EXPECT_EQ(blocks.num_cached_blocks(), 2);
  // A second sequence with the same prefix shares both blocks (one more reference each).
  Table second;
  EXPECT_EQ(blocks.Match(std::vector<BlockHash>{h0, h1}, second), 2);
  EXPECT_EQ(second, (Table{0, 1}));
  EXPECT_EQ(blocks.num_free_blocks(), 1);
  blocks.Free(first);
  EXPECT_EQ(blocks.num_free_blocks(), 2);  // block 2; 0 and 1 are still referenced
  blocks.Free(second);
  EXPECT_EQ(blocks.num_free_blocks(), 4);
  // Freed, they keep their hashes: a third sequence still matches them.
  Table third;
  EXPECT_EQ(blocks.Match(std::vector<BlockHash>{h0, h1}, third), 2);
  blocks.Free(third);
  // Allocation reuses the least recently freed first (block 3, then 2, then the tail of the
  // prefix, block 1): the prefix's head outlives its tail.
  Table other;
  ASSERT_TRUE(blocks.Allocate(other, 5));
  EXPECT_EQ(other, (Table{3, 2, 1}));
  EXPECT_EQ(blocks.num_cached_blocks(), 1);  // h1 evicted
  Table fourth;
  EXPECT_EQ(blocks.Match(std::vector<BlockHash>{h0, h1}, fourth), 1);
  EXPECT_EQ(fourth, (Table{0}));
  // A hash registers once: a second block with the same contents is not registered.
  blocks.Register(other[0], h0);
  EXPECT_EQ(blocks.num_cached_blocks(), 1);
  blocks.Free(fourth);
  blocks.Free(other);
  EXPECT_EQ(blocks.num_free_blocks(), 4);
}

}  // namespace
}  // namespace uc::engine
