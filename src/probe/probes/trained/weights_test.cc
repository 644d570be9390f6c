#include "probe/probes/trained/weights.h"

#include <gtest/gtest.h>

#include <cstring>

#include "io/io_test_util.h"
#include "io/safetensors/safetensors_writer.h"
#include "probe/probes/trained/weights_test_util.h"

namespace uc::probe {
namespace {

using io::testing::IsError;
using io::testing::TempDir;
using io::testing::WriteBytes;
using testing::Npy;
using testing::NpyF4;

TEST(NpyTest, ReadsFloat32AndFloat64Vectors) {
  StatusOr<std::vector<float>> f4 = ParseNpyVector(NpyF4({1.5f, -2.0f, 3.25f}, "(3,)"), "a.npy");
  ASSERT_TRUE(f4.ok()) << f4.status().ToString();
  EXPECT_EQ(*f4, std::vector<float>({1.5f, -2.0f, 3.25f}));

  const double values[] = {0.5, -0.125};
  std::string data(sizeof(values), '\0');
  std::memcpy(data.data(), values, sizeof(values));
  StatusOr<std::vector<float>> f8 = ParseNpyVector(Npy("<f8", "(1, 2)", data), "b.npy");
  ASSERT_TRUE(f8.ok()) << f8.status().ToString();
  EXPECT_EQ(*f8, std::vector<float>({0.5f, -0.125f}));
}

TEST(NpyTest, AcceptsVersion2HeadersColumnVectorsAndFortranOrder) {
  EXPECT_TRUE(ParseNpyVector(NpyF4({1, 2}, "(2,)", /*major=*/2), "v2.npy").ok());
  EXPECT_TRUE(ParseNpyVector(NpyF4({1, 2}, "(2, 1)"), "col.npy").ok());
  std::string fortran = NpyF4({1, 2}, "(1, 2)");
  const size_t at = fortran.find("False");
  fortran.replace(at, 5, "True ");
  EXPECT_EQ(*ParseNpyVector(fortran, "f.npy"), std::vector<float>({1, 2}));
}

TEST(NpyTest, RejectsWhatIsNotAFloatVector) {
  EXPECT_TRUE(IsError(ParseNpyVector("not numpy at all", "x.npy").status(),
                      StatusCode::kInvalidArgument, {"x.npy", "bad magic"}));
  EXPECT_TRUE(IsError(ParseNpyVector(Npy(">f4", "(1,)", std::string(4, '\0')), "be.npy").status(),
                      StatusCode::kInvalidArgument, {"be.npy", "dtype '>f4' not supported"}));
  EXPECT_TRUE(IsError(ParseNpyVector(Npy("<i8", "(1,)", std::string(8, '\0')), "i.npy").status(),
                      StatusCode::kInvalidArgument, {"dtype '<i8'"}));
  EXPECT_TRUE(IsError(ParseNpyVector(NpyF4({1, 2, 3, 4}, "(2, 2)"), "m.npy").status(),
                      StatusCode::kInvalidArgument, {"m.npy", "shape [2, 2], expected a vector"}));
  EXPECT_TRUE(IsError(ParseNpyVector(NpyF4({1}, "()"), "s.npy").status(),
                      StatusCode::kInvalidArgument, {"shape []"}));
  std::string truncated = NpyF4({1, 2, 3}, "(3,)");
  truncated.pop_back();
  EXPECT_TRUE(IsError(ParseNpyVector(truncated, "t.npy").status(), StatusCode::kInvalidArgument,
                      {"t.npy", "data holds 11 bytes, expected 12"}));
  EXPECT_TRUE(
      IsError(ParseNpyVector(std::string("\x93NUMPY\x01\x00\xff\x00", 10), "h.npy").status(),
              StatusCode::kInvalidArgument, {"truncated .npy header"}));
}

TEST(LoadVectorWeightsTest, ReadsAllThreeFormats) {
  TempDir dir;
  io::SafetensorsWriter writer;
  ASSERT_TRUE(writer.Add("weight", Tensor::FromVector({1, 2, 3}, {1, 3})).ok());
  ASSERT_TRUE(writer.Add("bias", Tensor::FromVector({0.5f}, {1})).ok());
  ASSERT_TRUE(writer.WriteFile(dir.path() / "w.safetensors").ok());
  WriteBytes(dir.path() / "w.npy", NpyF4({1, 2, 3}, "(3,)"));
  WriteBytes(dir.path() / "w.json", R"({"weight": [[1, 2, 3]], "bias": [0.5]})");
  WriteBytes(dir.path() / "plain.json", "[1, 2, 3]");
  for (const char* name : {"w.safetensors", "w.npy", "w.json", "plain.json"}) {
    StatusOr<VectorWeights> w = LoadVectorWeights(dir.path() / name);
    ASSERT_TRUE(w.ok()) << name << ": " << w.status().ToString();
    EXPECT_EQ(w->weight, std::vector<float>({1, 2, 3})) << name;
    const bool has_bias = std::string(name) == "w.safetensors" || std::string(name) == "w.json";
    EXPECT_EQ(w->bias.has_value(), has_bias) << name;
    if (has_bias) {
      EXPECT_EQ(*w->bias, 0.5) << name;
    }
  }
}

TEST(LoadVectorWeightsTest, ErrorsNameTheFileAndTensor) {
  TempDir dir;
  io::SafetensorsWriter writer;
  ASSERT_TRUE(writer.Add("w", Tensor::FromVector({1, 2}, {2})).ok());
  ASSERT_TRUE(writer.Add("bias", Tensor::FromVector({1, 2}, {2})).ok());
  ASSERT_TRUE(writer.WriteFile(dir.path() / "a.safetensors").ok());
  EXPECT_TRUE(IsError(LoadVectorWeights(dir.path() / "a.safetensors").status(),
                      StatusCode::kInvalidArgument,
                      {"a.safetensors", "no tensor 'weight'", "tensors in the file: bias, w"}));
  EXPECT_TRUE(IsError(LoadVectorWeights(dir.path() / "a.safetensors", {"w"}).status(),
                      StatusCode::kInvalidArgument,
                      {"a.safetensors", "tensor 'bias' has shape [2], expected a scalar"}));
  WriteBytes(dir.path() / "b.json", R"({"weights": [1, 2]})");
  EXPECT_TRUE(IsError(LoadVectorWeights(dir.path() / "b.json").status(),
                      StatusCode::kInvalidArgument, {"b.json", "no key 'weight'"}));
  WriteBytes(dir.path() / "c.json", R"({"weight": [1, "x"]})");
  EXPECT_TRUE(IsError(LoadVectorWeights(dir.path() / "c.json").status(),
                      StatusCode::kInvalidArgument, {"c.json", "'weight' must be an array"}));
  WriteBytes(dir.path() / "d.pt", "x");
  EXPECT_TRUE(IsError(LoadVectorWeights(dir.path() / "d.pt").status(), StatusCode::kInvalidArgument,
                      {"d.pt", "unsupported weights format '.pt'"}));
}

TEST(ReadDenseTest, ReadsLayersAndChecksBiasShape) {
  TempDir dir;
  io::SafetensorsWriter writer;
  ASSERT_TRUE(writer.Add("fc1.weight", Tensor::FromVector({1, 2, 3, 4, 5, 6}, {2, 3})).ok());
  ASSERT_TRUE(writer.Add("fc1.bias", Tensor::FromVector({7, 8}, {2})).ok());
  ASSERT_TRUE(writer.Add("fc2.weight", Tensor::FromVector({1, 1}, {2})).ok());
  ASSERT_TRUE(writer.Add("fc3.weight", Tensor::FromVector({1, 1}, {1, 2})).ok());
  ASSERT_TRUE(writer.Add("fc3.bias", Tensor::FromVector({1, 1}, {2})).ok());
  ASSERT_TRUE(writer.WriteFile(dir.path() / "m.safetensors").ok());
  auto file = io::SafetensorsFile::Open(dir.path() / "m.safetensors");
  ASSERT_TRUE(file.ok());
  StatusOr<DenseWeights> fc1 = ReadDense(**file, "fc1");
  ASSERT_TRUE(fc1.ok()) << fc1.status().ToString();
  EXPECT_EQ(fc1->out_features, 2);
  EXPECT_EQ(fc1->in_features, 3);
  EXPECT_EQ(fc1->bias, std::vector<float>({7, 8}));
  StatusOr<DenseWeights> fc2 = ReadDense(**file, "fc2");
  ASSERT_TRUE(fc2.ok());
  EXPECT_EQ(fc2->out_features, 1);
  EXPECT_EQ(fc2->bias, std::vector<float>({0}));  // absent: zero
  EXPECT_TRUE(IsError(ReadDense(**file, "fc3").status(), StatusCode::kInvalidArgument,
                      {"tensor 'fc3.bias' has shape [2], expected [1]"}));
  EXPECT_TRUE(IsError(ReadDense(**file, "head").status(), StatusCode::kInvalidArgument,
                      {"no tensor 'head.weight'"}));
}

}  // namespace
}  // namespace uc::probe
