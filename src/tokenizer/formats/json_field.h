// File: json_field.h
// -----------------------------------------------------------------------------
// JsonField: a read-only view of one value inside a parsed JSON document together with its
// path ("model.vocab", "added_tokens[3].content") and the file it came from, so that every
// accessor can fail with a message naming both:
//
//   "tokenizer.json: field 'model.merges[17]' must be a string or a [left, right] pair"
//
// A missing member reads as null. Borrows the document and the source string. Thread-compatible.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

namespace uc::tokenizer {

class JsonField {
 public:
  JsonField(const nlohmann::json& value, std::string path, const std::string& source)
      : value_(&value), path_(std::move(path)), source_(&source) {}

  const nlohmann::json& json() const { return *value_; }
  const std::string& path() const { return path_; }
  bool is_null() const { return value_->is_null(); }

  // Member `key` (null if absent or if this is not an object).
  JsonField operator[](std::string_view key) const;
  // Element `i`. REQUIRES: json().is_array() && i < json().size().
  JsonField at(size_t i) const;

  StatusOr<std::string> String() const;
  // `fallback` when null.
  StatusOr<std::string> StringOr(std::string_view fallback) const;
  StatusOr<bool> BoolOr(bool fallback) const;
  StatusOr<int64_t> Int() const;
  Status ExpectObject() const;
  Status ExpectArray() const;

  // InvalidArgument "SOURCE: field 'PATH' MESSAGE".
  Status Error(std::string_view message) const;

 private:
  Status TypeError(std::string_view expected) const;

  const nlohmann::json* value_;
  std::string path_;
  const std::string* source_;
};

}  // namespace uc::tokenizer
