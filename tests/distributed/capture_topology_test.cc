// `undercurrent capture` of 200 prompts at TP 1 and at TP×PP 2×2 (the CLI re-executes itself
// under mpirun with four ranks) writes the same dataset: the same index, row for row, and every
// activation within 1e-5 relative to its row; and numpy alone (examples/undercurrent_dataset.py,
// which parses the safetensors header itself) loads both and agrees.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/capture_util.h"
#include "common/test_util.h"

namespace uc {
namespace {

namespace fs = std::filesystem;

TEST(CaptureTopologyTest, TpByPpTwoByTwoWritesTheSingleProcessDataset) {
  const fs::path source = UC_SOURCE_DIR;
  const fs::path work = testing::ScratchDir("capture_topology");
  const std::string common =
      "--model '" + (source / "models" / "stories260K").string() + "' --spec '" +
      (source / "tests" / "testdata" / "capture" / "capture_spec.yaml").string() + "' --prompts '" +
      (source / "examples" / "data" / "animals_train.jsonl").string() +
      "' --temperature 0 --max-tokens 6 --shard-size 64KiB --progress lines --json --out ";
  const fs::path single = work / "tp1";
  const fs::path parallel = work / "tp2_pp2";
  const testing::CliRun one = testing::RunCapture(common + "'" + single.string() + "'");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const testing::CliRun four =
      testing::RunCapture(common + "'" + parallel.string() + "' --tp 2 --pp 2");
  ASSERT_EQ(four.exit_code, 0) << four.output;

  const testing::LoadedDataset a = testing::LoadDataset(single);
  const testing::LoadedDataset b = testing::LoadDataset(parallel);
  ASSERT_EQ(a.manifest["num_prompts"].get<int>(), 200);
  ASSERT_GT(a.index.size(), 3000u);
  ASSERT_GT(a.manifest["shards"].size(), 1u);
  double max_rel = 0, max_abs = 0;
  EXPECT_EQ(testing::CompareDatasets(b, a, 1e-5, &max_rel, &max_abs), "");
  std::printf("TP1 vs TP2xPP2: %zu rows, max relative difference %.3g, max absolute %.3g\n",
              a.index.size(), max_rel, max_abs);
  EXPECT_EQ(a.manifest["shards"], b.manifest["shards"]);  // same shards, tensors and sizes

  std::string python;
  EXPECT_EQ(testing::RunPythonCompare(single, parallel, 1e-5, &python), 0) << python;
  std::printf("numpy reader: %s", python.c_str());
}

}  // namespace
}  // namespace uc
