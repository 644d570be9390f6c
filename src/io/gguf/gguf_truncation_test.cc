// Robustness of GgufFile::Open against truncated and corrupted files: every outcome must be a
// clean Status naming the file (the ASan/UBSan build proves no read leaves the mapping).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "io/gguf/gguf.h"
#include "io/gguf/gguf_test_util.h"
#include "io/io_test_util.h"

namespace uc::io {
namespace {

using testing::TempDir;

// Opens `bytes` (written to `path`); on success reads every value and tensor.
void OpenAndTouchEverything(const std::string& path, const std::string& bytes) {
  testing::WriteBytes(path, bytes);
  StatusOr<std::shared_ptr<const GgufFile>> gguf = GgufFile::Open(path);
  if (!gguf.ok()) {
    EXPECT_NE(gguf.status().message().find(path), std::string::npos) << gguf.status().ToString();
    return;
  }
  for (const std::string& key : (*gguf)->Keys()) {
    const GgufValue* value = (*gguf)->Find(key);
    if (value->is_array() && value->element_type() == GgufType::kString) {
      (void)value->StringViews();
    } else if (value->is_array() && value->element_type() != GgufType::kBool) {
      (void)(*gguf)->GetFloatArray(key);
    } else {
      (void)value->AsFloat();
      (void)value->AsString();
    }
  }
  for (const std::string& name : (*gguf)->TensorNames()) {
    StatusOr<Tensor> t = (*gguf)->Get(name);
    if (t.ok() && t->nbytes() > 0) {
      const auto* bytes = static_cast<const volatile uint8_t*>(t->raw());
      (void)bytes[0];
      (void)bytes[t->nbytes() - 1];
    }
  }
}

void ExpectEveryPrefixFails(const std::string& path, const std::string& bytes,
                            const std::vector<size_t>& cuts) {
  for (size_t cut : cuts) {
    ASSERT_LT(cut, bytes.size());
    testing::WriteBytes(path, bytes.substr(0, cut));
    const Status status = GgufFile::Open(path).status();
    ASSERT_FALSE(status.ok()) << "cut at " << cut;
    ASSERT_TRUE(status.code() == StatusCode::kOutOfRange ||
                status.code() == StatusCode::kInvalidArgument)
        << "cut at " << cut << ": " << status.ToString();
    ASSERT_NE(status.message().find(path), std::string::npos) << status.ToString();
  }
}

TEST(GgufTruncationTest, EveryPrefixOfASmallFileFails) {
  TempDir dir;
  const std::string path = dir.File("all.gguf");
  testing::WriteAllTypesGguf(path);
  const std::string bytes = testing::ReadBytes(path);
  // The file ends with padding after the last tensor; cutting that off is harmless.
  auto gguf = GgufFile::Open(path);
  ASSERT_TRUE(gguf.ok());
  size_t data_end = 0;
  for (const GgufTensorInfo& info : (*gguf)->tensor_infos()) {
    const Tensor t = *(*gguf)->Get(info.name);
    data_end = std::max<size_t>(data_end, (*gguf)->data_offset() + info.offset + t.nbytes());
  }
  ASSERT_LT(data_end, bytes.size());
  std::vector<size_t> cuts(data_end);
  for (size_t i = 0; i < cuts.size(); ++i) cuts[i] = i;
  ExpectEveryPrefixFails(path, bytes, cuts);
}

TEST(GgufTruncationTest, PrefixesOfStories260KFail) {
  TempDir dir;
  const std::string bytes = testing::ReadBytes(testing::TestData("stories260K/stories260K.gguf"));
  std::vector<size_t> cuts;
  for (size_t i = 0; i < 256; ++i) cuts.push_back(i);          // header and first keys
  for (size_t i = 256; i < 14200; i += 13) cuts.push_back(i);  // metadata and tensor infos
  for (size_t i = 14200; i < bytes.size(); i += 40009) cuts.push_back(i);  // tensor data
  cuts.push_back(bytes.size() - 1);
  ExpectEveryPrefixFails(dir.File("cut.gguf"), bytes, cuts);
}

TEST(GgufTruncationTest, RandomCorruptionNeverCrashes) {
  TempDir dir;
  const std::string path = dir.File("all.gguf");
  testing::WriteAllTypesGguf(path);
  const std::string original = testing::ReadBytes(path);
  const size_t header_end = original.find("t.i32") + 64;  // metadata and tensor infos
  std::mt19937 rng(1234);
  std::uniform_int_distribution<size_t> position(0, header_end);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int iteration = 0; iteration < 1500; ++iteration) {
    std::string bytes = original;
    const int flips = 1 + iteration % 4;
    for (int i = 0; i < flips; ++i) {
      // Mostly small values and 0xff runs, which make lengths and counts absurd.
      bytes[position(rng)] = static_cast<char>(iteration % 3 == 0 ? 0xff : byte(rng));
    }
    OpenAndTouchEverything(path, bytes);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace uc::io
