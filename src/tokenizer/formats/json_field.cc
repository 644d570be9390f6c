#include "tokenizer/formats/json_field.h"

namespace uc::tokenizer {
namespace {

const nlohmann::json& NullJson() {
  static const nlohmann::json null_value;
  return null_value;
}

}  // namespace

JsonField JsonField::operator[](std::string_view key) const {
  std::string path = path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  if (!value_->is_object()) return JsonField(NullJson(), std::move(path), *source_);
  const auto it = value_->find(key);
  const nlohmann::json& member = it == value_->end() ? NullJson() : *it;
  return JsonField(member, std::move(path), *source_);
}

JsonField JsonField::at(size_t i) const {
  return JsonField((*value_)[i], path_ + "[" + std::to_string(i) + "]", *source_);
}

Status JsonField::Error(std::string_view message) const {
  return InvalidArgumentError(*source_ + ": field '" + path_ + "' " + std::string(message));
}

Status JsonField::TypeError(std::string_view expected) const {
  const std::string got = value_->is_null() ? "missing or null" : value_->type_name();
  return Error("must be " + std::string(expected) + " (got " + got + ")");
}

StatusOr<std::string> JsonField::String() const {
  if (!value_->is_string()) return TypeError("a string");
  return value_->get<std::string>();
}

StatusOr<std::string> JsonField::StringOr(std::string_view fallback) const {
  if (value_->is_null()) return std::string(fallback);
  return String();
}

StatusOr<bool> JsonField::BoolOr(bool fallback) const {
  if (value_->is_null()) return fallback;
  if (!value_->is_boolean()) return TypeError("a boolean");
  return value_->get<bool>();
}

StatusOr<int64_t> JsonField::Int() const {
  if (!value_->is_number_integer()) return TypeError("an integer");
  return value_->get<int64_t>();
}

Status JsonField::ExpectObject() const {
  return value_->is_object() ? OkStatus() : TypeError("an object");
}

Status JsonField::ExpectArray() const {
  return value_->is_array() ? OkStatus() : TypeError("an array");
}

}  // namespace uc::tokenizer
