#include "io/gguf/gguf.h"

#include <cstring>
#include <limits>

namespace uc::io {
namespace {

template <typename T>
T Load(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// An integer of GGUF type `type` at `p`; nullopt for non-integers and uint64 > INT64_MAX.
std::optional<int64_t> LoadInt(GgufType type, const std::byte* p) {
  switch (type) {
    case GgufType::kUint8:
      return Load<uint8_t>(p);
    case GgufType::kInt8:
      return Load<int8_t>(p);
    case GgufType::kUint16:
      return Load<uint16_t>(p);
    case GgufType::kInt16:
      return Load<int16_t>(p);
    case GgufType::kUint32:
      return Load<uint32_t>(p);
    case GgufType::kInt32:
      return Load<int32_t>(p);
    case GgufType::kInt64:
      return Load<int64_t>(p);
    case GgufType::kUint64: {
      const uint64_t v = Load<uint64_t>(p);
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(v);
    }
    default:
      return std::nullopt;
  }
}

std::optional<double> LoadFloat(GgufType type, const std::byte* p) {
  if (type == GgufType::kFloat32) return Load<float>(p);
  if (type == GgufType::kFloat64) return Load<double>(p);
  if (type == GgufType::kUint64) return static_cast<double>(Load<uint64_t>(p));
  std::optional<int64_t> i = LoadInt(type, p);
  if (i) return static_cast<double>(*i);
  return std::nullopt;
}

bool IsNumeric(GgufType type) {
  const auto code = static_cast<uint32_t>(type);
  return GgufTypeIsInteger(code) || type == GgufType::kFloat32 || type == GgufType::kFloat64;
}

}  // namespace

// ---- GgufValue ---------------------------------------------------------------------------------

std::string GgufValue::TypeName() const {
  if (!is_array()) return GgufTypeName(static_cast<uint32_t>(type_));
  return "array[" + GgufTypeName(static_cast<uint32_t>(element_type_)) + "]";
}

std::optional<int64_t> GgufValue::AsInt() const { return LoadInt(type_, payload_); }

std::optional<double> GgufValue::AsFloat() const { return LoadFloat(type_, payload_); }

std::optional<bool> GgufValue::AsBool() const {
  if (type_ != GgufType::kBool) return std::nullopt;
  return Load<uint8_t>(payload_) != 0;
}

std::optional<std::string_view> GgufValue::AsString() const {
  if (type_ != GgufType::kString) return std::nullopt;
  return std::string_view(reinterpret_cast<const char*>(payload_), static_cast<size_t>(count_));
}

int64_t GgufValue::IntAt(uint64_t i) const {
  UC_CHECK(is_array() && i < count_ && IsNumeric(element_type_), "IntAt(%llu) on %s",
           static_cast<unsigned long long>(i), TypeName().c_str());
  const std::byte* p = payload_ + i * GgufTypeSize(static_cast<uint32_t>(element_type_));
  if (element_type_ == GgufType::kUint64) return static_cast<int64_t>(Load<uint64_t>(p));
  if (std::optional<int64_t> v = LoadInt(element_type_, p)) return *v;
  return static_cast<int64_t>(*LoadFloat(element_type_, p));
}

double GgufValue::FloatAt(uint64_t i) const {
  UC_CHECK(is_array() && i < count_ && IsNumeric(element_type_), "FloatAt(%llu) on %s",
           static_cast<unsigned long long>(i), TypeName().c_str());
  return *LoadFloat(element_type_,
                    payload_ + i * GgufTypeSize(static_cast<uint32_t>(element_type_)));
}

std::vector<std::string_view> GgufValue::StringViews() const {
  UC_CHECK(is_array() && element_type_ == GgufType::kString, "StringViews() on %s",
           TypeName().c_str());
  std::vector<std::string_view> out;
  out.reserve(static_cast<size_t>(count_));
  const std::byte* p = payload_;
  for (uint64_t i = 0; i < count_; ++i) {  // lengths were bounds-checked by Open()
    const auto length = static_cast<size_t>(Load<uint64_t>(p));
    out.emplace_back(reinterpret_cast<const char*>(p + 8), length);
    p += 8 + length;
  }
  return out;
}

// ---- GgufFile ----------------------------------------------------------------------------------

std::vector<std::string> GgufFile::Keys() const {
  std::vector<std::string> keys;
  keys.reserve(metadata_.size());
  for (const auto& [key, value] : metadata_) keys.push_back(key);
  return keys;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

StatusOr<const GgufValue*> GgufFile::FindTyped(std::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) {
    return NotFoundError(path() + ": metadata key '" + std::string(key) + "' missing");
  }
  return value;
}

Status GgufFile::TypeMismatch(std::string_view key, const GgufValue& value,
                              std::string_view expected) const {
  return InvalidArgumentError(path() + ": metadata key '" + std::string(key) + "' is " +
                              value.TypeName() + ", expected " + std::string(expected));
}

StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  UC_ASSIGN_OR_RETURN(const GgufValue* value, FindTyped(key));
  std::optional<std::string_view> text = value->AsString();
  if (!text) return TypeMismatch(key, *value, "string");
  return std::string(*text);
}

StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  UC_ASSIGN_OR_RETURN(const GgufValue* value, FindTyped(key));
  if (value->is_array() || !GgufTypeIsInteger(static_cast<uint32_t>(value->type()))) {
    return TypeMismatch(key, *value, "an integer");
  }
  std::optional<int64_t> i = value->AsInt();
  if (!i) {
    return InvalidArgumentError(path() + ": metadata key '" + std::string(key) +
                                "' has a uint64 value that does not fit int64");
  }
  return *i;
}

StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  UC_ASSIGN_OR_RETURN(const GgufValue* value, FindTyped(key));
  std::optional<double> f = value->AsFloat();
  if (!f) return TypeMismatch(key, *value, "a number");
  return *f;
}

StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  UC_ASSIGN_OR_RETURN(const GgufValue* value, FindTyped(key));
  std::optional<bool> b = value->AsBool();
  if (!b) return TypeMismatch(key, *value, "bool");
  return *b;
}

StatusOr<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  UC_ASSIGN_OR_RETURN(const GgufValue* value, FindTyped(key));
  if (!value->is_array() || value->element_type() != GgufType::kString) {
    return TypeMismatch(key, *value, "array[string]");
  }
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(value->count()));
  for (std::string_view s : value->StringViews()) out.emplace_back(s);
  return out;
}

StatusOr<std::vector<float>> GgufFile::GetFloatArray(std::string_view key) const {
  UC_ASSIGN_OR_RETURN(const GgufValue* value, FindTyped(key));
  if (!value->is_array() || !IsNumeric(value->element_type())) {
    return TypeMismatch(key, *value, "an array of numbers");
  }
  std::vector<float> out(static_cast<size_t>(value->count()));
  for (uint64_t i = 0; i < value->count(); ++i) out[i] = static_cast<float>(value->FloatAt(i));
  return out;
}

StatusOr<std::vector<int32_t>> GgufFile::GetInt32Array(std::string_view key) const {
  UC_ASSIGN_OR_RETURN(const GgufValue* value, FindTyped(key));
  if (!value->is_array() || !GgufTypeIsInteger(static_cast<uint32_t>(value->element_type()))) {
    return TypeMismatch(key, *value, "an array of integers");
  }
  std::vector<int32_t> out(static_cast<size_t>(value->count()));
  for (uint64_t i = 0; i < value->count(); ++i) {
    const int64_t v = value->IntAt(i);
    const bool unsigned_big = value->element_type() == GgufType::kUint64 && v < 0;
    if (unsigned_big || v < std::numeric_limits<int32_t>::min() ||
        v > std::numeric_limits<int32_t>::max()) {
      return InvalidArgumentError(path() + ": metadata key '" + std::string(key) + "': element " +
                                  std::to_string(i) + " does not fit int32");
    }
    out[i] = static_cast<int32_t>(v);
  }
  return out;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

StatusOr<Tensor> GgufFile::Get(std::string_view name) const {
  const GgufTensorInfo* info = FindTensor(name);
  if (info == nullptr) return TensorNotFoundError(*this, name);
  const std::optional<DType> dtype = DTypeFromGgml(info->ggml_type);
  if (!dtype) {
    return UnimplementedError(
        path() + ": tensor '" + info->name + "' has ggml type " + GgmlTypeName(info->ggml_type) +
        " (" + std::to_string(info->ggml_type) +
        "), which is not supported (supported: " + SupportedGgmlTypeNames() + ")");
  }
  const std::byte* data = file_->data() + data_offset_ + info->offset;
  Tensor tensor = Tensor::Borrow(data, info->shape, *dtype, file_);
  // Valid files keep every tensor aligned; a file with general.alignment 1 may not, and kernels
  // must not read misaligned floats, so such a tensor is copied.
  const size_t natural =
      *dtype == DType::kF32 || *dtype == DType::kI32 || *dtype == DType::kQ8_K ? 4 : 2;
  if (reinterpret_cast<uintptr_t>(data) % natural != 0) return tensor.Clone();
  return tensor;
}

std::vector<std::string> GgufFile::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(tensor_index_.size());
  for (const auto& [name, index] : tensor_index_) names.push_back(name);
  return names;
}

}  // namespace uc::io
