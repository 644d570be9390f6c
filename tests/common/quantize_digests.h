// File: quantize_digests.h
// -----------------------------------------------------------------------------
// Per-tensor comparison of a GGUF file with digests recorded by
// tools/reference/make_quantize_reference.py (tests/testdata/quantize/*_llamacpp.json): for
// every recorded tensor, the same ggml type name and the same sha256 of its data bytes.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "common/sha256.h"
#include "io/gguf/gguf.h"
#include "io/gguf/gguf_types.h"

namespace uc::testing {

// name -> (ggml type name, sha256 of the data) of every tensor of the GGUF file at `path`.
inline std::map<std::string, std::pair<std::string, std::string>> TensorDigests(
    const std::filesystem::path& path) {
  std::map<std::string, std::pair<std::string, std::string>> out;
  const StatusOr<std::shared_ptr<const io::GgufFile>> file = io::GgufFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  if (!file.ok()) return out;
  for (const io::GgufTensorInfo& info : (*file)->tensor_infos()) {
    const StatusOr<Tensor> t = (*file)->Get(info.name);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    if (!t.ok()) continue;
    Sha256 sha;
    sha.Update(t->raw(), static_cast<size_t>(t->nbytes()));
    out[info.name] = {io::GgmlTypeName(info.ggml_type), sha.HexDigest()};
  }
  return out;
}

// Expects the tensors of `path` to be exactly those of `want` (a list of {name, type, sha256});
// `what` labels the failures.
inline void ExpectDigests(const std::filesystem::path& path, const nlohmann::json& want,
                          const std::string& what) {
  const auto got = TensorDigests(path);
  EXPECT_EQ(got.size(), want.size()) << what;
  int type_mismatches = 0, byte_mismatches = 0;
  for (const auto& t : want) {
    const std::string name = t["name"].get<std::string>();
    auto it = got.find(name);
    if (it == got.end()) {
      ADD_FAILURE() << what << ": tensor " << name << " missing";
      continue;
    }
    if (it->second.first != t["type"].get<std::string>()) {
      if (++type_mismatches <= 5) {
        ADD_FAILURE() << what << " " << name << ": type " << it->second.first << ", llama.cpp "
                      << t["type"].get<std::string>();
      }
    } else if (it->second.second != t["sha256"].get<std::string>()) {
      if (++byte_mismatches <= 5) ADD_FAILURE() << what << " " << name << ": bytes differ";
    }
  }
  EXPECT_EQ(type_mismatches, 0) << what;
  EXPECT_EQ(byte_mismatches, 0) << what;
}

}  // namespace uc::testing
