#include "io/gguf/gguf.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

#include "io/gguf/gguf_test_util.h"
#include "io/gguf/gguf_writer.h"
#include "io/io_test_util.h"

namespace uc::io {
namespace {

using testing::IsError;
using testing::OffsetAfter;
using testing::Patch;
using testing::TempDir;

TEST(GgufTest, ReadsStories260KMetadata) {
  auto gguf = GgufFile::Open(testing::TestData("stories260K/stories260K.gguf"));
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  const GgufFile& f = **gguf;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset(), 14176u);
  EXPECT_EQ(f.Keys().size(), 19u);
  EXPECT_EQ(f.Keys().front(), "tokenizer.ggml.tokens");
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(*f.GetInt("llama.block_count"), 5);
  EXPECT_EQ(*f.GetInt("llama.context_length"), 128);
  EXPECT_EQ(*f.GetInt("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(*f.GetInt("tokenizer.ggml.padding_token_id"), 4294967295);
  EXPECT_NEAR(*f.GetFloat("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-12);
  EXPECT_EQ(*f.GetFloat("llama.block_count"), 5.0);
  const std::vector<std::string> tokens = *f.GetStringArray("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(tokens[3], "<0x00>");
  const std::vector<float> scores = *f.GetFloatArray("tokenizer.ggml.scores");
  ASSERT_EQ(scores.size(), 512u);
  const std::vector<int32_t> types = *f.GetInt32Array("tokenizer.ggml.token_type");
  ASSERT_EQ(types.size(), 512u);
  EXPECT_EQ(types[0], 2);
  EXPECT_EQ(types[1], 3);
  EXPECT_EQ(types[3], 6);
  const GgufValue* value = f.Find("tokenizer.ggml.tokens");
  ASSERT_NE(value, nullptr);
  EXPECT_EQ(value->TypeName(), "array[string]");
  EXPECT_EQ(f.Find("no.such.key"), nullptr);
}

TEST(GgufTest, ReadsStories260KTensors) {
  auto gguf = GgufFile::Open(testing::TestData("stories260K/stories260K.gguf"));
  ASSERT_TRUE(gguf.ok());
  EXPECT_EQ((*gguf)->TensorNames().size(), 48u);
  EXPECT_EQ((*gguf)->tensor_infos().front().name, "token_embd.weight");
  const struct {
    const char* name;
    Shape shape;
  } kExpected[] = {{"token_embd.weight", {512, 64}},
                   {"blk.0.attn_k.weight", {32, 64}},
                   {"blk.2.ffn_down.weight", {64, 172}},
                   {"blk.2.ffn_up.weight", {172, 64}},
                   {"output_norm.weight", {64}}};
  for (const auto& e : kExpected) {
    StatusOr<Tensor> t = (*gguf)->Get(e.name);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->shape(), e.shape) << e.name;
    EXPECT_EQ(t->dtype(), DType::kF32);
  }
}

TEST(GgufTest, TensorsOutliveTheFile) {
  StatusOr<Tensor> t = Tensor();
  std::vector<float> expected;
  {
    auto gguf = GgufFile::Open(testing::TestData("stories260K/stories260K.gguf"));
    ASSERT_TRUE(gguf.ok());
    t = (*gguf)->Get("output_norm.weight");
    ASSERT_TRUE(t.ok());
    expected = t->ToFloatVector();
  }
  EXPECT_EQ(t->ToFloatVector(), expected);
}

TEST(GgufTest, MetadataErrorsNameFileAndKey) {
  const std::string path = testing::TestData("stories260K/stories260K.gguf");
  auto gguf = GgufFile::Open(path);
  ASSERT_TRUE(gguf.ok());
  const GgufFile& f = **gguf;
  EXPECT_TRUE(IsError(f.GetInt("llama.nope").status(), StatusCode::kNotFound,
                      {path + ": metadata key 'llama.nope' missing"}));
  EXPECT_TRUE(IsError(f.GetInt("general.name").status(), StatusCode::kInvalidArgument,
                      {path, "'general.name'", "is string", "expected an integer"}));
  EXPECT_TRUE(IsError(f.GetString("llama.block_count").status(), StatusCode::kInvalidArgument,
                      {"'llama.block_count'", "is uint32"}));
  EXPECT_TRUE(IsError(f.GetBool("llama.block_count").status(), StatusCode::kInvalidArgument,
                      {"expected bool"}));
  EXPECT_TRUE(IsError(f.GetStringArray("tokenizer.ggml.scores").status(),
                      StatusCode::kInvalidArgument, {"is array[float32]", "array[string]"}));
  EXPECT_TRUE(IsError(f.GetInt32Array("tokenizer.ggml.scores").status(),
                      StatusCode::kInvalidArgument, {"'tokenizer.ggml.scores'"}));
  EXPECT_TRUE(IsError(f.GetFloatArray("general.name").status(), StatusCode::kInvalidArgument,
                      {"'general.name'"}));
  EXPECT_TRUE(IsError(f.Get("blk.9.attn_q.weight").status(), StatusCode::kNotFound,
                      {path + ": tensor 'blk.9.attn_q.weight' not found"}));
}

TEST(GgufTest, F16FileMatchesF32WithinRounding) {
  auto f32 = GgufFile::Open(testing::TestData("stories260K/stories260K.gguf"));
  auto f16 = GgufFile::Open(testing::TestData("stories260K/stories260K-F16.gguf"));
  ASSERT_TRUE(f32.ok() && f16.ok());
  EXPECT_EQ(*(*f16)->GetInt("general.file_type"), 1);
  ASSERT_EQ((*f32)->TensorNames(), (*f16)->TensorNames());
  int num_f16 = 0;
  for (const std::string& name : (*f32)->TensorNames()) {
    Tensor a = *(*f32)->Get(name);
    Tensor b = *(*f16)->Get(name);
    ASSERT_EQ(a.shape(), b.shape()) << name;
    const std::vector<float> x = a.ToFloatVector();
    const std::vector<float> y = b.ToFloatVector();
    if (b.dtype() == DType::kF32) {  // norms stay F32
      EXPECT_EQ(x, y) << name;
      continue;
    }
    ++num_f16;
    ASSERT_EQ(b.dtype(), DType::kF16) << name;
    for (size_t i = 0; i < x.size(); ++i) {
      // Half an f16 ulp relative (2^-11), or the subnormal spacing near zero.
      ASSERT_LE(std::fabs(x[i] - y[i]), std::max(std::fabs(x[i]) * 0x1p-11f, 0x1p-25f))
          << name << "[" << i << "]";
    }
  }
  EXPECT_EQ(num_f16, 2 + 5 * 7);
}

TEST(GgufTest, VocabLlamaSpm) {
  auto gguf = GgufFile::Open(testing::TestData("vocab/ggml-vocab-llama-spm.gguf"));
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  EXPECT_TRUE((*gguf)->TensorNames().empty());
  const std::vector<std::string> tokens = *(*gguf)->GetStringArray("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 32000u);
  EXPECT_EQ(tokens[0], "<unk>");
  EXPECT_EQ(tokens[2], "</s>");
  EXPECT_EQ((*gguf)->GetFloatArray("tokenizer.ggml.scores")->size(), 32000u);
  EXPECT_EQ((*gguf)->GetInt32Array("tokenizer.ggml.token_type")->size(), 32000u);
  EXPECT_TRUE(*(*gguf)->GetBool("tokenizer.ggml.add_bos_token"));
  EXPECT_FALSE(*(*gguf)->GetBool("tokenizer.ggml.add_eos_token"));
  EXPECT_EQ(*(*gguf)->GetString("tokenizer.ggml.pre"), "default");
}

TEST(GgufTest, VocabGpt2) {
  auto gguf = GgufFile::Open(testing::TestData("vocab/ggml-vocab-gpt-2.gguf"));
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  const std::vector<std::string> tokens = *(*gguf)->GetStringArray("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 50257u);
  EXPECT_EQ(tokens[0], "!");
  const std::vector<std::string> merges = *(*gguf)->GetStringArray("tokenizer.ggml.merges");
  ASSERT_EQ(merges.size(), 50000u);
  EXPECT_EQ(merges[0], "\xC4\xA0 t");  // "Ġ t"
  EXPECT_EQ(*(*gguf)->GetInt("tokenizer.ggml.eos_token_id"), 50256);
  EXPECT_EQ((*gguf)->Find("tokenizer.ggml.merges")->StringViews()[2], "h e");
}

TEST(GgufTest, WriterRoundTripsEveryType) {
  TempDir dir;
  const std::string path = dir.File("all.gguf");
  testing::WriteAllTypesGguf(path, 64);
  auto gguf = GgufFile::Open(path);
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  const GgufFile& f = **gguf;
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(*f.GetInt("general.alignment"), 64);
  EXPECT_EQ(*f.GetInt("k.u8"), 200);
  EXPECT_EQ(*f.GetInt("k.i8"), -100);
  EXPECT_EQ(*f.GetInt("k.u16"), 60000);
  EXPECT_EQ(*f.GetInt("k.i16"), -30000);
  EXPECT_EQ(*f.GetInt("k.u32"), 4000000000);
  EXPECT_EQ(*f.GetInt("k.i32"), -2000000000);
  EXPECT_EQ(*f.GetInt("k.u64"), 10000000000);
  EXPECT_EQ(*f.GetInt("k.i64"), -10000000000);
  EXPECT_EQ(*f.GetFloat("k.f32"), 0.25);
  EXPECT_EQ(*f.GetFloat("k.f64"), -1e300);
  EXPECT_TRUE(*f.GetBool("k.bool"));
  EXPECT_EQ(*f.GetString("k.str"), "héllo");
  EXPECT_EQ(f.Find("k.u16")->type(), GgufType::kUint16);
  EXPECT_EQ(f.Find("k.f64")->type(), GgufType::kFloat64);
  EXPECT_EQ(*f.GetInt32Array("a.i32"), (std::vector<int32_t>{1, -2, 3}));
  EXPECT_EQ(*f.GetInt32Array("a.u8"), (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(f.Find("a.i64")->IntAt(0), int64_t{1} << 40);
  EXPECT_EQ(*f.GetFloatArray("a.f32"), (std::vector<float>{0.5f, 1.5f}));
  EXPECT_EQ(*f.GetFloatArray("a.f64"), (std::vector<float>{2.25f}));
  EXPECT_EQ(*f.GetFloatArray("a.i32"), (std::vector<float>{1, -2, 3}));
  EXPECT_EQ(f.Find("a.bool")->TypeName(), "array[bool]");
  EXPECT_EQ(*f.GetStringArray("a.str"), (std::vector<std::string>{"a", "", "long string"}));
  EXPECT_TRUE(f.GetStringArray("a.empty")->empty());
  for (auto& [name, expected] : testing::AllTypeTensors()) {
    StatusOr<Tensor> t = f.Get(name);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->dtype(), expected.dtype()) << name;
    EXPECT_EQ(t->shape(), expected.shape()) << name;
    EXPECT_EQ(std::memcmp(t->raw(), expected.raw(), expected.nbytes()), 0) << name;
    const auto offset = static_cast<const std::byte*>(t->raw()) -
                        static_cast<const std::byte*>(f.Get("t.f32")->raw());
    EXPECT_EQ(offset % 64, 0) << name;
  }
}

// SetValue copies every metadata value as stored: re-writing a file's keys and tensors gives
// the same bytes.
TEST(GgufTest, WriterSetValueCopiesValuesVerbatim) {
  TempDir dir;
  const std::string path = dir.File("all.gguf");
  testing::WriteAllTypesGguf(path, 64);
  auto gguf = GgufFile::Open(path);
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  const GgufFile& f = **gguf;
  GgufWriter copy(64);
  for (const std::string& key : f.Keys()) copy.SetValue(key, *f.Find(key));
  for (const GgufTensorInfo& info : f.tensor_infos()) {
    ASSERT_TRUE(copy.Add(info.name, *f.Get(info.name)).ok()) << info.name;
  }
  const std::string copy_path = dir.File("copy.gguf");
  ASSERT_TRUE(copy.WriteFile(copy_path).ok());
  auto read = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  };
  const std::string original = read(path);
  EXPECT_FALSE(original.empty());
  EXPECT_TRUE(read(copy_path) == original) << "the copy's bytes differ";
}

// Files written by gguf-py's GGUFWriter (tools/reference/make_quant_fixtures.py, the GGUF fuzz
// seeds): one [2, block size] tensor per ggml block type holding the first two blocks of
// tests/testdata/quant/<TYPE>.blocks, at alignment 32 and 1 (odd offsets: copied on Get).
TEST(GgufTest, ReadsGgufPyBlockTypes) {
  for (const char* file : {"kquant_tensors.gguf", "kquant_tensors_align1.gguf"}) {
    auto gguf = GgufFile::Open(std::string(UC_SOURCE_DIR "/fuzz/corpus/gguf/") + file);
    ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
    EXPECT_EQ((*gguf)->tensor_infos().size(), 10u);
    for (DType dtype : {DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL, DType::kQ2_K, DType::kQ3_K,
                        DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K, DType::kMXFP4}) {
      std::string name = "t." + std::string(DTypeName(dtype));
      for (char& c : name) c = static_cast<char>(std::tolower(c));
      StatusOr<Tensor> t = (*gguf)->Get(name);
      ASSERT_TRUE(t.ok()) << file << ": " << t.status().ToString();
      EXPECT_EQ(t->dtype(), dtype) << file << " " << name;
      EXPECT_EQ(t->shape(), (Shape{2, DTypeBlockSize(dtype)})) << file << " " << name;
      // Q8_K's d is a float; MXFP4 has no field wider than a byte.
      const uintptr_t natural = dtype == DType::kQ8_K ? 4 : dtype == DType::kMXFP4 ? 1 : 2;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t->raw()) % natural, 0u) << file << " " << name;
      const std::string blocks = testing::ReadBytes(
          testing::TestData("quant/" + std::string(DTypeName(dtype)) + ".blocks"));
      ASSERT_GE(blocks.size(), static_cast<size_t>(t->nbytes()));
      EXPECT_EQ(std::memcmp(t->raw(), blocks.data(), t->nbytes()), 0) << file << " " << name;
    }
  }
}

TEST(GgufTest, IntegerRangeErrors) {
  TempDir dir;
  GgufWriter w;
  w.Set<uint64_t>("big", std::numeric_limits<uint64_t>::max());
  w.SetArray<int64_t>("wide", {int64_t{1} << 40});
  ASSERT_TRUE(w.WriteFile(dir.File("r.gguf")).ok());
  auto gguf = GgufFile::Open(dir.File("r.gguf"));
  ASSERT_TRUE(gguf.ok());
  EXPECT_TRUE(IsError((*gguf)->GetInt("big").status(), StatusCode::kInvalidArgument,
                      {"'big'", "does not fit"}));
  EXPECT_EQ(*(*gguf)->GetFloat("big"), 18446744073709551615.0);
  EXPECT_TRUE(IsError((*gguf)->GetInt32Array("wide").status(), StatusCode::kInvalidArgument,
                      {"'wide'", "element 0"}));
}

TEST(GgufTest, WriterRejectsBadTensors) {
  GgufWriter w;
  EXPECT_TRUE(IsError(w.AddLazy("q", DType::kQ4_0, {2, 40}, nullptr), StatusCode::kInvalidArgument,
                      {"'q'", "40", "block size 32"}));
  ASSERT_TRUE(w.Add("x", Tensor::Zeros({2}, DType::kF32)).ok());
  EXPECT_TRUE(IsError(w.Add("x", Tensor::Zeros({2}, DType::kF32)), StatusCode::kInvalidArgument,
                      {"'x'", "twice"}));
  EXPECT_FALSE(w.Add("r5", Tensor::Zeros({1, 1, 1, 1, 1}, DType::kF32)).ok());
}

// Corruptions of the all-types file, one field at a time.
class GgufBadFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteAllTypesGguf(path_);
    bytes_ = testing::ReadBytes(path_);
    ASSERT_TRUE(GgufFile::Open(path_).ok());
  }
  Status Open(const std::string& bytes) {
    testing::WriteBytes(path_, bytes);
    return GgufFile::Open(path_).status();
  }
  // Offset of a tensor info's n_dims field.
  size_t InfoOffset(const std::string& name) { return OffsetAfter(bytes_, name); }

  TempDir dir_;
  std::string path_ = dir_.File("bad.gguf");
  std::string bytes_;
};

TEST_F(GgufBadFileTest, WrongMagic) {
  std::string bytes = bytes_;
  bytes.replace(0, 4,
                "\x7f"
                "ELF");
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kInvalidArgument,
                      {path_, "not a GGUF file (magic \"\\x7fELF\""}));
  EXPECT_TRUE(IsError(Open("GG"), StatusCode::kInvalidArgument, {path_, "not a GGUF file"}));
}

TEST_F(GgufBadFileTest, Versions) {
  std::string bytes = bytes_;
  Patch<uint32_t>(&bytes, 4, 2);
  testing::WriteBytes(path_, bytes);
  auto v2 = GgufFile::Open(path_);
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  EXPECT_EQ((*v2)->version(), 2u);
  Patch<uint32_t>(&bytes, 4, 1);
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kUnimplemented, {path_, "version 1"}));
  Patch<uint32_t>(&bytes, 4, 0x03000000);
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kUnimplemented, {path_, "big-endian"}));
}

TEST_F(GgufBadFileTest, AbsurdCounts) {
  std::string bytes = bytes_;
  Patch<uint64_t>(&bytes, 8, uint64_t{1} << 60);
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kInvalidArgument,
                      {path_, "tensor count 1152921504606846976 is impossible"}));
  bytes = bytes_;
  Patch<uint64_t>(&bytes, 16, ~uint64_t{0});
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kInvalidArgument, {path_, "metadata count"}));
}

TEST_F(GgufBadFileTest, StringLengthPastTheEnd) {
  std::string bytes = bytes_;
  Patch<uint64_t>(&bytes, OffsetAfter(bytes, "k.str") + 4, uint64_t{1} << 50);
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kOutOfRange, {path_, "'k.str'", "string value"}));
  bytes = bytes_;
  Patch<uint64_t>(&bytes, OffsetAfter(bytes, "k.str") - 5 - 8, ~uint64_t{0});  // the key length
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kOutOfRange, {path_, "key"}));
}

TEST_F(GgufBadFileTest, BadArrays) {
  std::string bytes = bytes_;
  const size_t array = OffsetAfter(bytes, "a.str") + 4;  // element type, then count
  Patch<uint64_t>(&bytes, array + 4, uint64_t{1} << 61);
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kOutOfRange, {path_, "'a.str'", "array of"}));
  bytes = bytes_;
  Patch<uint32_t>(&bytes, array, static_cast<uint32_t>(GgufType::kArray));
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kUnimplemented, {path_, "'a.str'", "arrays of"}));
  Patch<uint32_t>(&bytes, array, 13);
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kInvalidArgument, {"'a.str'", "element type 13"}));
  bytes = bytes_;
  Patch<uint32_t>(&bytes, OffsetAfter(bytes, "k.u8"), 99);
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kInvalidArgument, {"'k.u8'", "value type 99"}));
}

TEST_F(GgufBadFileTest, DuplicateKeyAndTensor) {
  std::string bytes = bytes_;
  bytes.replace(OffsetAfter(bytes, "k.i16") - 5, 5, "k.u16");
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kInvalidArgument, {path_, "'k.u16'", "duplicate"}));
  bytes = bytes_;
  bytes.replace(OffsetAfter(bytes, "t.f16") - 5, 5, "t.f32");
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kInvalidArgument, {"'t.f32'", "duplicate"}));
}

TEST_F(GgufBadFileTest, BadAlignment) {
  std::string bytes = bytes_;
  GgufWriter w(64);
  ASSERT_TRUE(w.Add("x", Tensor::Zeros({4}, DType::kF32)).ok());
  ASSERT_TRUE(w.WriteFile(path_).ok());
  const std::string aligned = testing::ReadBytes(path_);
  const size_t value = OffsetAfter(aligned, "general.alignment") + 4;
  for (uint32_t bad : {0u, 3u, 48u}) {
    bytes = aligned;
    Patch<uint32_t>(&bytes, value, bad);
    EXPECT_TRUE(IsError(Open(bytes), StatusCode::kInvalidArgument,
                        {path_, "general.alignment", std::to_string(bad), "power of two"}));
  }
  bytes = aligned;
  Patch<uint32_t>(&bytes, value - 4, static_cast<uint32_t>(GgufType::kFloat32));
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kInvalidArgument,
                      {"general.alignment", "expected an integer"}));
  // A tensor offset that is not a multiple of the alignment.
  bytes = bytes_;
  const size_t info = InfoOffset("t.f16");  // n_dims 1, ne[1], type, offset
  Patch<uint64_t>(&bytes, info + 4 + 8 + 4, 36);
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kInvalidArgument,
                      {path_, "tensor 't.f16'", "offset 36", "alignment 32"}));
}

TEST_F(GgufBadFileTest, TensorInfoErrors) {
  std::string bytes = bytes_;
  const size_t info = InfoOffset("t.f32");  // n_dims 2
  Patch<uint32_t>(&bytes, info, 5);
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kInvalidArgument,
                      {path_, "tensor 't.f32'", "dimensions 5"}));
  bytes = bytes_;
  Patch<uint64_t>(&bytes, info + 4, uint64_t{1} << 62);
  Patch<uint64_t>(&bytes, info + 12, 8);
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kInvalidArgument, {"'t.f32'", "overflow"}));
  bytes = bytes_;
  Patch<uint64_t>(&bytes, InfoOffset("t.q8_0") + 4, 33);  // ne[0]: the row length
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kInvalidArgument,
                      {path_, "tensor 't.q8_0'", "33", "Q8_0 block size 32"}));
  bytes = bytes_;
  Patch<uint64_t>(&bytes, InfoOffset("t.i32") + 4 + 8 + 4, 1 << 20);
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kOutOfRange,
                      {path_, "tensor 't.i32'", "past the end of the file"}));
}

TEST_F(GgufBadFileTest, TensorDataPastTheEnd) {
  std::string bytes = bytes_;
  // The last tensor (t.i32, 12 bytes) is padded to 32; cutting into it must fail.
  bytes.resize(bytes.size() - 32 + 11);
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kOutOfRange,
                      {path_, "tensor 't.i32'", "past the end of the file (size"}));
}

TEST_F(GgufBadFileTest, UnsupportedTypeFailsOnlyWhenRequested) {
  std::string bytes = bytes_;
  Patch<uint32_t>(&bytes, InfoOffset("t.f32") + 4 + 2 * 8, 16);  // IQ2_XXS
  Patch<uint32_t>(&bytes, InfoOffset("t.f16") + 4 + 8, 77);      // unknown
  testing::WriteBytes(path_, bytes);
  auto gguf = GgufFile::Open(path_);
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  EXPECT_TRUE((*gguf)->Has("t.f32"));
  EXPECT_TRUE(IsError((*gguf)->Get("t.f32").status(), StatusCode::kUnimplemented,
                      {path_, "tensor 't.f32'", "IQ2_XXS (16)",
                       "(supported: F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, "
                       "Q5_K, Q6_K, Q8_K, IQ4_NL, I32, BF16, MXFP4)"}));
  EXPECT_TRUE(IsError((*gguf)->Get("t.f16").status(), StatusCode::kUnimplemented,
                      {"tensor 't.f16'", "type 77"}));
  EXPECT_TRUE((*gguf)->Get("t.q4_1").ok());
}

}  // namespace
}  // namespace uc::io
