#include "io/json_file.h"

#include <gtest/gtest.h>

#include "io/io_test_util.h"

namespace uc::io {
namespace {

using testing::IsError;
using testing::TempDir;

TEST(JsonFileTest, ReadsConfig) {
  StatusOr<nlohmann::json> config = ReadJsonFile(testing::TestData("stories260K-hf/config.json"));
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ((*config)["hidden_size"], 64);
  EXPECT_EQ((*config)["num_key_value_heads"], 4);
  EXPECT_TRUE((*config)["tie_word_embeddings"].get<bool>());
}

TEST(JsonFileTest, ParseErrorNamesFileLineAndColumn) {
  TempDir dir;
  testing::WriteBytes(dir.File("config.json"), "{\n  \"a\": 1,\n  \"b\": x\n}\n");
  StatusOr<nlohmann::json> config = ReadJsonFile(dir.File("config.json"));
  EXPECT_TRUE(IsError(config.status(), StatusCode::kInvalidArgument,
                      {dir.File("config.json"), "line 3, column 8", "byte 19"}));
}

TEST(JsonFileTest, EmptyFileIsAnError) {
  TempDir dir;
  testing::WriteBytes(dir.File("empty.json"), "");
  EXPECT_TRUE(IsError(ReadJsonFile(dir.File("empty.json")).status(), StatusCode::kInvalidArgument,
                      {dir.File("empty.json"), "line 1, column 1"}));
}

TEST(JsonFileTest, MissingFileIsNotFound) {
  TempDir dir;
  EXPECT_TRUE(IsError(ReadJsonFile(dir.File("none.json")).status(), StatusCode::kNotFound,
                      {dir.File("none.json")}));
}

TEST(JsonFileTest, DeepNestingIsRejectedWithoutRecursing) {
  const std::string text(1'000'000, '[');
  EXPECT_TRUE(IsError(ParseJson(text, "deep.json").status(), StatusCode::kInvalidArgument,
                      {"deep.json", "nested deeper than"}));
  // Brackets inside strings do not count.
  const std::string quoted = "[\"" + std::string(1000, '[') + "\\\"\"]";
  EXPECT_TRUE(ParseJson(quoted, "quoted.json").ok());
}

}  // namespace
}  // namespace uc::io
