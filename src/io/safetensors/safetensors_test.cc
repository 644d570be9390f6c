#include "io/safetensors/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "io/io_test_util.h"
#include "io/safetensors/safetensors_writer.h"

namespace uc::io {
namespace {

using testing::IsError;
using testing::TempDir;

// A safetensors file: 8-byte little-endian header length, header, data.
std::string Safetensors(const std::string& header, const std::string& data) {
  const uint64_t length = header.size();
  std::string out(reinterpret_cast<const char*>(&length), 8);
  return out + header + data;
}

std::string Floats(std::initializer_list<float> values) {
  std::string out(values.size() * 4, '\0');
  std::memcpy(out.data(), values.begin(), out.size());
  return out;
}

class SafetensorsBadFileTest : public ::testing::Test {
 protected:
  Status OpenBytes(const std::string& bytes) {
    testing::WriteBytes(path_, bytes);
    return SafetensorsFile::Open(path_).status();
  }
  Status OpenWithHeader(const std::string& header, const std::string& data) {
    return OpenBytes(Safetensors(header, data));
  }

  TempDir dir_;
  std::string path_ = dir_.File("model.safetensors");
};

TEST(SafetensorsTest, ReadsStories260K) {
  auto file = SafetensorsFile::Open(testing::TestData("stories260K-hf/model.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->TensorNames().size(), 1u + 5 * 9 + 1);
  EXPECT_FALSE((*file)->Has("lm_head.weight"));
  const struct {
    const char* name;
    Shape shape;
  } kExpected[] = {{"model.embed_tokens.weight", {512, 64}},
                   {"model.layers.0.self_attn.k_proj.weight", {32, 64}},
                   {"model.layers.4.mlp.down_proj.weight", {64, 172}},
                   {"model.layers.2.mlp.up_proj.weight", {172, 64}},
                   {"model.norm.weight", {64}}};
  for (const auto& e : kExpected) {
    StatusOr<Tensor> t = (*file)->Get(e.name);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->shape(), e.shape) << e.name;
    EXPECT_EQ(t->dtype(), DType::kF32);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->raw()) % 4, 0u);
  }
}

TEST(SafetensorsTest, MissingTensorIsNotFound) {
  const std::string path = testing::TestData("stories260K-hf/model.safetensors");
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE(IsError((*file)->Get("lm_head.weight").status(), StatusCode::kNotFound,
                      {path + ": tensor 'lm_head.weight' not found"}));
  EXPECT_TRUE(IsError(GetWithShape(**file, "model.norm.weight", {65}).status(),
                      StatusCode::kInvalidArgument, {"'model.norm.weight'", "[64]", "[65]"}));
}

TEST(SafetensorsTest, CheckpointOpensDirectoryOrFile) {
  const std::string dir = testing::TestData("stories260K-hf");
  auto from_dir = SafetensorsCheckpoint::Open(dir);
  ASSERT_TRUE(from_dir.ok()) << from_dir.status().ToString();
  auto from_file = SafetensorsCheckpoint::Open(dir + "/model.safetensors");
  ASSERT_TRUE(from_file.ok()) << from_file.status().ToString();
  EXPECT_EQ((*from_dir)->TensorNames(), (*from_file)->TensorNames());
  EXPECT_TRUE((*from_dir)->Has("model.layers.3.self_attn.o_proj.weight"));
  EXPECT_TRUE(IsError((*from_dir)->Get("nope").status(), StatusCode::kNotFound, {"'nope'"}));
}

TEST(SafetensorsTest, CheckpointInEmptyDirectoryIsNotFound) {
  TempDir dir;
  EXPECT_TRUE(IsError(SafetensorsCheckpoint::Open(dir.path()).status(), StatusCode::kNotFound,
                      {dir.path().string(), "model.safetensors"}));
}

TEST(SafetensorsTest, WriterRoundTrip) {
  TempDir dir;
  const Tensor a = Tensor::FromVector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor half = Tensor::Empty({3}, DType::kF16);
  Tensor brain = Tensor::Empty({1, 3}, DType::kBF16);
  for (int i = 0; i < 3; ++i) {
    half.data<uint16_t>()[i] = F32ToF16(0.5f * static_cast<float>(i));
    brain.data<uint16_t>()[i] = F32ToBf16(-2.0f * static_cast<float>(i));
  }
  SafetensorsWriter writer;
  ASSERT_TRUE(writer.Add("b.half", half).ok());
  ASSERT_TRUE(writer.Add("c.brain", brain).ok());
  ASSERT_TRUE(writer.Add("a.float", a).ok());
  int produced = 0;
  ASSERT_TRUE(writer
                  .AddLazy("d.lazy", DType::kF32, {2},
                           [&produced]() -> StatusOr<Tensor> {
                             ++produced;
                             return Tensor::FromVector({7, 8}, {2});
                           })
                  .ok());
  writer.SetMetadata("format", "pt");
  ASSERT_TRUE(writer.WriteFile(dir.File("out.safetensors")).ok());
  EXPECT_EQ(produced, 1);
  EXPECT_FALSE(std::filesystem::exists(dir.File("out.safetensors.tmp")));

  auto file = SafetensorsFile::Open(dir.File("out.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->data_offset() % 8, 0u);
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  EXPECT_EQ((*file)->TensorNames(),
            (std::vector<std::string>{"a.float", "b.half", "c.brain", "d.lazy"}));
  for (const auto& [name, expected] : {std::pair<std::string, Tensor>{"a.float", a},
                                       {"b.half", half},
                                       {"c.brain", brain},
                                       {"d.lazy", Tensor::FromVector({7, 8}, {2})}}) {
    StatusOr<Tensor> t = (*file)->Get(name);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->dtype(), expected.dtype()) << name;
    EXPECT_EQ(t->shape(), expected.shape()) << name;
    EXPECT_EQ(t->ToFloatVector(), expected.ToFloatVector()) << name;
  }
}

TEST(SafetensorsTest, WriterRejectsBadInput) {
  TempDir dir;
  SafetensorsWriter writer;
  EXPECT_TRUE(IsError(writer.Add("q", Tensor::Zeros({1, 32}, DType::kQ8_0)),
                      StatusCode::kInvalidArgument, {"'q'", "Q8_0"}));
  ASSERT_TRUE(writer.Add("x", Tensor::Zeros({2}, DType::kF32)).ok());
  EXPECT_TRUE(IsError(writer.Add("x", Tensor::Zeros({2}, DType::kF32)),
                      StatusCode::kInvalidArgument, {"'x'", "twice"}));
  EXPECT_FALSE(writer.Add("__metadata__", Tensor::Zeros({2}, DType::kF32)).ok());
  ASSERT_TRUE(writer
                  .AddLazy("lazy", DType::kF32, {3},
                           []() -> StatusOr<Tensor> { return Tensor::Zeros({4}, DType::kF32); })
                  .ok());
  EXPECT_TRUE(IsError(writer.WriteFile(dir.File("bad.safetensors")), StatusCode::kInvalidArgument,
                      {dir.File("bad.safetensors"), "'lazy'", "[4]", "[3]"}));
  EXPECT_FALSE(std::filesystem::exists(dir.File("bad.safetensors")));
  EXPECT_FALSE(std::filesystem::exists(dir.File("bad.safetensors.tmp")));
}

// Two shards and an index, written with the writer.
class ShardedCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SafetensorsWriter first;
    ASSERT_TRUE(first.Add("model.embed_tokens.weight", Tensor::FromVector({1, 2}, {1, 2})).ok());
    ASSERT_TRUE(first.WriteFile(dir_.File("model-00001-of-00002.safetensors")).ok());
    SafetensorsWriter second;
    ASSERT_TRUE(second.Add("model.norm.weight", Tensor::FromVector({3, 4}, {2})).ok());
    ASSERT_TRUE(second.WriteFile(dir_.File("model-00002-of-00002.safetensors")).ok());
  }
  void WriteIndex(const std::string& weight_map) {
    testing::WriteBytes(index_, "{\"metadata\": {}, \"weight_map\": " + weight_map + "}");
  }

  TempDir dir_;
  std::string index_ = dir_.File("model.safetensors.index.json");
};

TEST_F(ShardedCheckpointTest, ReadsTensorsFromEveryShard) {
  WriteIndex(R"({"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                 "model.norm.weight": "model-00002-of-00002.safetensors"})");
  auto ckpt = SafetensorsCheckpoint::Open(dir_.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ((*ckpt)->shards().size(), 2u);
  EXPECT_EQ((*ckpt)->TensorNames(),
            (std::vector<std::string>{"model.embed_tokens.weight", "model.norm.weight"}));
  StatusOr<Tensor> norm = (*ckpt)->Get("model.norm.weight");
  ASSERT_TRUE(norm.ok());
  EXPECT_EQ(norm->ToFloatVector(), (std::vector<float>{3, 4}));
  StatusOr<Tensor> embed = (*ckpt)->Get("model.embed_tokens.weight");
  ASSERT_TRUE(embed.ok());
  EXPECT_EQ(embed->ToFloatVector(), (std::vector<float>{1, 2}));
  EXPECT_TRUE(IsError((*ckpt)->Get("lm_head.weight").status(), StatusCode::kNotFound,
                      {dir_.path().string(), "'lm_head.weight'"}));
}

TEST_F(ShardedCheckpointTest, MissingShardNamesIndexShardAndTensor) {
  WriteIndex(R"({"model.norm.weight": "model-00003-of-00003.safetensors"})");
  EXPECT_TRUE(IsError(SafetensorsCheckpoint::Open(dir_.path()).status(), StatusCode::kNotFound,
                      {index_, "'model-00003-of-00003.safetensors'", "'model.norm.weight'"}));
}

TEST_F(ShardedCheckpointTest, TensorAbsentFromItsShardNamesBoth) {
  WriteIndex(R"({"model.norm.weight": "model-00001-of-00002.safetensors"})");
  EXPECT_TRUE(IsError(SafetensorsCheckpoint::Open(dir_.path()).status(), StatusCode::kNotFound,
                      {index_, "'model.norm.weight'", "'model-00001-of-00002.safetensors'"}));
}

TEST_F(ShardedCheckpointTest, MalformedIndexIsRejected) {
  testing::WriteBytes(index_, R"({"metadata": {}})");
  EXPECT_TRUE(IsError(SafetensorsCheckpoint::Open(dir_.path()).status(),
                      StatusCode::kInvalidArgument, {index_, "weight_map"}));
  WriteIndex(R"({"model.norm.weight": "../elsewhere/model.safetensors"})");
  EXPECT_TRUE(IsError(SafetensorsCheckpoint::Open(dir_.path()).status(),
                      StatusCode::kInvalidArgument, {index_, "'model.norm.weight'"}));
  testing::WriteBytes(index_, "{\"weight_map\": ");
  EXPECT_TRUE(IsError(SafetensorsCheckpoint::Open(dir_.path()).status(),
                      StatusCode::kInvalidArgument, {index_, "line 1"}));
}

TEST_F(SafetensorsBadFileTest, TooShortForTheLength) {
  EXPECT_TRUE(IsError(OpenBytes("abc"), StatusCode::kInvalidArgument, {path_, "too short"}));
}

TEST_F(SafetensorsBadFileTest, HeaderLengthPastTheEnd) {
  std::string bytes = Safetensors("{}", "");
  bytes[0] = 100;
  EXPECT_TRUE(
      IsError(OpenBytes(bytes), StatusCode::kOutOfRange, {path_, "header length 100", "size 10"}));
  const uint64_t huge = ~uint64_t{0};
  std::memcpy(bytes.data(), &huge, 8);
  EXPECT_TRUE(IsError(OpenBytes(bytes), StatusCode::kOutOfRange, {path_, "header length"}));
}

TEST_F(SafetensorsBadFileTest, HeaderLengthAboveTheLimit) {
  // A sparse file just large enough to hold the claimed header.
  const uint64_t length = kMaxSafetensorsHeaderBytes;
  testing::WriteBytes(path_, std::string(reinterpret_cast<const char*>(&length), 8));
  std::filesystem::resize_file(path_, 8 + length);
  EXPECT_TRUE(IsError(SafetensorsFile::Open(path_).status(), StatusCode::kInvalidArgument,
                      {path_, "100 MB"}));
}

TEST_F(SafetensorsBadFileTest, HeaderIsNotJson) {
  EXPECT_TRUE(IsError(OpenWithHeader("{\"a\": nope}", ""), StatusCode::kInvalidArgument,
                      {path_, "header", "line 1, column 8", "byte 7"}));
  EXPECT_TRUE(IsError(OpenWithHeader("[1, 2]", ""), StatusCode::kInvalidArgument,
                      {path_, "not a JSON object"}));
}

TEST_F(SafetensorsBadFileTest, EntryFieldsAreRequired) {
  EXPECT_TRUE(IsError(OpenWithHeader(R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", "abcd"),
                      StatusCode::kInvalidArgument, {path_, "tensor 'w'", "dtype"}));
  EXPECT_TRUE(IsError(OpenWithHeader(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", "abcd"),
                      StatusCode::kInvalidArgument, {path_, "tensor 'w'", "shape"}));
  EXPECT_TRUE(IsError(OpenWithHeader(R"({"w": {"dtype": "F32", "shape": [1]}})", "abcd"),
                      StatusCode::kInvalidArgument, {path_, "tensor 'w'", "data_offsets"}));
  EXPECT_TRUE(IsError(
      OpenWithHeader(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", "abcd"),
      StatusCode::kInvalidArgument, {path_, "tensor 'w'", "shape", "-1"}));
  EXPECT_TRUE(IsError(
      OpenWithHeader(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, -4]}})", "abcd"),
      StatusCode::kInvalidArgument, {path_, "tensor 'w'", "data_offsets"}));
  EXPECT_TRUE(IsError(OpenWithHeader(R"({"w": 3})", ""), StatusCode::kInvalidArgument,
                      {path_, "tensor 'w'", "not an object"}));
  EXPECT_TRUE(IsError(OpenWithHeader(R"({"__metadata__": {"a": 1}})", ""),
                      StatusCode::kInvalidArgument, {path_, "__metadata__", "'a'"}));
}

TEST_F(SafetensorsBadFileTest, OffsetsPastTheEnd) {
  const std::string name = "model.layers.0.mlp.up_proj.weight";
  const std::string header =
      R"({")" + name + R"(": {"dtype": "F32", "shape": [100], "data_offsets": [0, 400]}})";
  EXPECT_TRUE(IsError(OpenWithHeader(header, Floats({1, 2})), StatusCode::kOutOfRange,
                      {path_, "tensor '" + name + "'", "data_offsets [0, 400) end past the file"}));
  EXPECT_TRUE(
      IsError(OpenWithHeader(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})",
                             Floats({1, 2})),
              StatusCode::kInvalidArgument, {path_, "tensor 'w'", "begin > end"}));
}

TEST_F(SafetensorsBadFileTest, SizeDisagreesWithShape) {
  EXPECT_TRUE(
      IsError(OpenWithHeader(R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}})",
                             Floats({1, 2, 3, 4})),
              StatusCode::kInvalidArgument,
              {path_, "tensor 'w'", "holds 12 bytes", "F32 [2, 2] needs 16"}));
  const std::string overflow =
      R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 8], "data_offsets": [0, 0]}})";
  EXPECT_TRUE(IsError(OpenWithHeader(overflow, ""), StatusCode::kInvalidArgument,
                      {path_, "tensor 'w'", "overflows"}));
}

TEST_F(SafetensorsBadFileTest, UnsupportedDtypeFailsOnlyWhenRequested) {
  const std::string header =
      R"({"ids": {"dtype": "I8", "shape": [4], "data_offsets": [0, 4]},
          "pos": {"dtype": "F64", "shape": [1], "data_offsets": [4, 12]},
          "w": {"dtype": "F32", "shape": [1], "data_offsets": [12, 16]}})";
  ASSERT_TRUE(OpenWithHeader(header, std::string(12, '\0') + Floats({2.5f})).ok());
  auto file = SafetensorsFile::Open(path_);
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE(IsError((*file)->Get("ids").status(), StatusCode::kUnimplemented,
                      {path_, "tensor 'ids'", "I8"}));
  EXPECT_TRUE(IsError((*file)->Get("pos").status(), StatusCode::kUnimplemented,
                      {path_, "tensor 'pos'", "F64"}));
  StatusOr<Tensor> w = (*file)->Get("w");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->ToFloatVector(), (std::vector<float>{2.5f}));
  // F64 sizes are still checked.
  EXPECT_TRUE(
      IsError(OpenWithHeader(R"({"pos": {"dtype": "F64", "shape": [1], "data_offsets": [0, 4]}})",
                             Floats({1})),
              StatusCode::kInvalidArgument, {"tensor 'pos'", "F64 [1] needs 8"}));
}

// U8 tensors (MXFP4 blocks and scales) are read as bytes by GetU8, at any offset; GetU8 on
// another dtype names it, and Get on U8 is Unimplemented as before.
TEST_F(SafetensorsBadFileTest, U8TensorsAreReadAsBytes) {
  const std::string header =
      R"({"b": {"dtype": "U8", "shape": [2, 3], "data_offsets": [1, 7]},
          "w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})";
  ASSERT_TRUE(
      OpenWithHeader(header, std::string("x\x01\x02\x03\xfd\xfe\xff", 7) + "y" + Floats({2.5f}))
          .ok());
  auto file = SafetensorsFile::Open(path_);
  ASSERT_TRUE(file.ok());
  StatusOr<U8View> b = (*file)->GetU8("b");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->shape, (Shape{2, 3}));
  EXPECT_EQ(std::vector<uint8_t>(b->bytes.begin(), b->bytes.end()),
            (std::vector<uint8_t>{1, 2, 3, 0xfd, 0xfe, 0xff}));
  EXPECT_TRUE(IsError((*file)->GetU8("w").status(), StatusCode::kInvalidArgument,
                      {path_, "tensor 'w'", "F32", "expected U8"}));
  EXPECT_TRUE(IsError((*file)->GetU8("none").status(), StatusCode::kNotFound, {"'none'"}));
  EXPECT_TRUE(IsError((*file)->Get("b").status(), StatusCode::kUnimplemented, {"U8"}));
}

TEST_F(SafetensorsBadFileTest, MisalignedDataIsCopied) {
  // The data section starts 8-byte aligned; a tensor at data offset 1 is misaligned.
  std::string header = R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [1, 9]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  ASSERT_TRUE(OpenWithHeader(header, "x" + Floats({1.5f, -2.0f})).ok());
  auto file = SafetensorsFile::Open(path_);
  ASSERT_TRUE(file.ok());
  StatusOr<Tensor> w = (*file)->Get("w");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w->raw()) % 4, 0u);
  EXPECT_EQ(w->ToFloatVector(), (std::vector<float>{1.5f, -2.0f}));
}

TEST_F(SafetensorsBadFileTest, RandomCorruptionNeverCrashes) {
  SafetensorsWriter writer;
  ASSERT_TRUE(writer.Add("a", Tensor::FromVector({1, 2, 3}, {3})).ok());
  ASSERT_TRUE(writer.Add("b", Tensor::Zeros({2, 2}, DType::kBF16)).ok());
  writer.SetMetadata("format", "pt");
  ASSERT_TRUE(writer.WriteFile(path_).ok());
  const std::string original = testing::ReadBytes(path_);
  std::mt19937 rng(99);
  std::uniform_int_distribution<size_t> position(0, original.size() - 1);
  const char kBytes[] = {'0', '9', '-', '"', '[', ']', '{', '}', ',', '\xff', '\0', 'e'};
  for (int iteration = 0; iteration < 1000; ++iteration) {
    std::string bytes = original;
    for (int i = 0; i <= iteration % 3; ++i) bytes[position(rng)] = kBytes[rng() % sizeof(kBytes)];
    testing::WriteBytes(path_, bytes);
    auto file = SafetensorsFile::Open(path_);
    if (!file.ok()) {
      ASSERT_NE(file.status().message().find(path_), std::string::npos) << file.status().ToString();
      continue;
    }
    for (const std::string& name : (*file)->TensorNames()) {
      StatusOr<Tensor> t = (*file)->Get(name);
      if (t.ok() && t->numel() > 0) (void)t->ToFloatVector();
    }
  }
}

}  // namespace
}  // namespace uc::io
