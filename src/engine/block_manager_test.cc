#include "engine/block_manager.h"

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

// Allocation takes from the front of the free list and Free returns to the back, so the
// blocks freed last are reused last.
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
  ASSERT_TRUE(blocks.Allocate(c, 6));  // free list is 3, 0, 1
  EXPECT_EQ(c, (Table{3, 0, 1}));
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

}  // namespace
}  // namespace uc::engine
