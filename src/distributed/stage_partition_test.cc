#include "distributed/stage_partition.h"

#include <gtest/gtest.h>

namespace uc::distributed {
namespace {

using Ranges = std::vector<std::pair<int, int>>;

Ranges Even(int num_layers, int pp_size) {
  StatusOr<Ranges> r = PartitionLayers(num_layers, pp_size, "");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : Ranges{};
}

TEST(PartitionLayersTest, EvenSplitsMatchVllm) {
  EXPECT_EQ(Even(5, 1), (Ranges{{0, 5}}));
  EXPECT_EQ(Even(6, 2), (Ranges{{0, 3}, {3, 6}}));
  EXPECT_EQ(Even(5, 5), (Ranges{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}}));
}

TEST(PartitionLayersTest, RemainderGoesToTheStagesBeforeTheLast) {
  EXPECT_EQ(Even(5, 2), (Ranges{{0, 3}, {3, 5}}));
  EXPECT_EQ(Even(5, 3), (Ranges{{0, 2}, {2, 4}, {4, 5}}));
  EXPECT_EQ(Even(5, 4), (Ranges{{0, 1}, {1, 2}, {2, 4}, {4, 5}}));
  EXPECT_EQ(Even(30, 4), (Ranges{{0, 7}, {7, 15}, {15, 23}, {23, 30}}));
  EXPECT_EQ(Even(22, 8),
            (Ranges{{0, 2}, {2, 5}, {5, 8}, {8, 11}, {11, 14}, {14, 17}, {17, 20}, {20, 22}}));
}

TEST(PartitionLayersTest, OverrideGivesPerStageCounts) {
  StatusOr<Ranges> r = PartitionLayers(5, 2, "3,2");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (Ranges{{0, 3}, {3, 5}}));
  r = PartitionLayers(5, 3, " 1, 1 ,3 ");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (Ranges{{0, 1}, {1, 2}, {2, 5}}));
}

TEST(PartitionLayersTest, InvalidOverridesNameTheVariableAndValues) {
  for (const char* bad :
       {"3,3", "5", "1,2,2", "0,5", "-1,6", "a,2", "3,", ",3", "3;2", "2.5,2.5"}) {
    StatusOr<Ranges> r = PartitionLayers(5, 2, bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("UNDERCURRENT_PP_LAYER_PARTITION"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
  }
  EXPECT_NE(PartitionLayers(5, 2, "3,3").status().message().find("sum to 6"), std::string::npos);
  EXPECT_NE(PartitionLayers(5, 2, "5").status().message().find("pipeline_parallel_size is 2"),
            std::string::npos);
}

TEST(PartitionLayersTest, RejectsMoreStagesThanLayers) {
  EXPECT_EQ(PartitionLayers(2, 3, "").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PartitionLayers(5, 0, "").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace uc::distributed
