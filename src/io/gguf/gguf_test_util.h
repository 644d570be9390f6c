// File: gguf_test_util.h
// -----------------------------------------------------------------------------
// Builds small GGUF files for the io tests: one metadata key of every type and one tensor of
// every supported DType, plus byte-patching helpers to corrupt them in targeted ways.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <string_view>

#include "io/gguf/gguf_writer.h"

namespace uc::io::testing {

// Tensor `i` of the all-types file: dtype, shape and deterministic bytes.
inline std::vector<std::pair<std::string, Tensor>> AllTypeTensors() {
  std::vector<std::pair<std::string, Tensor>> out;
  const struct {
    const char* name;
    DType dtype;
    Shape shape;
  } kSpecs[] = {{"t.f32", DType::kF32, {2, 3}},     {"t.f16", DType::kF16, {4}},
                {"t.bf16", DType::kBF16, {2, 2}},   {"t.q8_0", DType::kQ8_0, {2, 32}},
                {"t.q4_0", DType::kQ4_0, {1, 32}},  {"t.q4_1", DType::kQ4_1, {1, 2, 64}},
                {"t.q5_0", DType::kQ5_0, {32}},     {"t.q5_1", DType::kQ5_1, {2, 32}},
                {"t.iq4_nl", DType::kIQ4_NL, {32}}, {"t.q2_k", DType::kQ2_K, {256}},
                {"t.q3_k", DType::kQ3_K, {256}},    {"t.q4_k", DType::kQ4_K, {1, 256}},
                {"t.q5_k", DType::kQ5_K, {256}},    {"t.q6_k", DType::kQ6_K, {256}},
                {"t.q8_k", DType::kQ8_K, {256}},    {"t.i32", DType::kI32, {3}}};
  uint8_t next = 1;
  for (const auto& spec : kSpecs) {
    Tensor t = Tensor::Empty(spec.shape, spec.dtype);
    auto* bytes = static_cast<uint8_t*>(t.raw());
    for (int64_t i = 0; i < t.nbytes(); ++i) bytes[i] = next++ % 61;  // small, finite halves
    out.emplace_back(spec.name, std::move(t));
  }
  return out;
}

// Writes a file with one key of every metadata type and AllTypeTensors().
inline void WriteAllTypesGguf(const std::string& path, uint32_t alignment = 32) {
  GgufWriter w(alignment);
  w.Set<uint8_t>("k.u8", 200);
  w.Set<int8_t>("k.i8", -100);
  w.Set<uint16_t>("k.u16", 60000);
  w.Set<int16_t>("k.i16", -30000);
  w.Set<uint32_t>("k.u32", 4000000000u);
  w.Set<int32_t>("k.i32", -2000000000);
  w.Set<uint64_t>("k.u64", 10000000000ull);
  w.Set<int64_t>("k.i64", -10000000000ll);
  w.Set<float>("k.f32", 0.25f);
  w.Set<double>("k.f64", -1e300);
  w.Set<bool>("k.bool", true);
  w.SetString("k.str", "héllo");
  w.SetArray<int32_t>("a.i32", {1, -2, 3});
  w.SetArray<uint8_t>("a.u8", {7, 8});
  w.SetArray<int64_t>("a.i64", {int64_t{1} << 40});
  w.SetArray<float>("a.f32", {0.5f, 1.5f});
  w.SetArray<double>("a.f64", {2.25});
  w.SetArray<bool>("a.bool", {true, false});
  w.SetStringArray("a.str", {"a", "", "long string"});
  w.SetStringArray("a.empty", {});
  for (auto& [name, tensor] : AllTypeTensors()) {
    ASSERT_TRUE(w.Add(name, tensor).ok()) << name;
  }
  ASSERT_TRUE(w.WriteFile(path).ok());
}

// Offset of the first byte after the first occurrence of `needle`.
inline size_t OffsetAfter(const std::string& bytes, std::string_view needle) {
  const size_t at = bytes.find(needle);
  EXPECT_NE(at, std::string::npos) << needle;
  return at == std::string::npos ? 0 : at + needle.size();
}

template <typename T>
void Patch(std::string* bytes, size_t offset, T value) {
  ASSERT_LE(offset + sizeof(T), bytes->size());
  std::memcpy(bytes->data() + offset, &value, sizeof(T));
}

}  // namespace uc::io::testing
