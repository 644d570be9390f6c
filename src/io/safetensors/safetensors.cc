#include "io/safetensors/safetensors.h"

#include <cstring>
#include <limits>

#include "io/json_file.h"

namespace uc::io {
namespace {

using nlohmann::json;

// Element size of a safetensors dtype name; 0 for names this reader does not know.
uint64_t SafetensorsElementSize(std::string_view dtype) {
  static const std::map<std::string_view, uint64_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

std::optional<DType> SupportedDType(std::string_view dtype) {
  if (dtype == "F32") return DType::kF32;
  if (dtype == "F16") return DType::kF16;
  if (dtype == "BF16") return DType::kBF16;
  return std::nullopt;
}

bool IsUnsigned(const json& value) { return value.is_number_unsigned(); }

}  // namespace

// Validates the header of a mapped file and fills a SafetensorsFile.
class SafetensorsParser {
 public:
  explicit SafetensorsParser(SafetensorsFile* out) : out_(out), path_(out->file_->path()) {}

  Status Parse() {
    UC_ASSIGN_OR_RETURN(json header, ReadHeader());
    if (!header.is_object()) return Invalid("header is not a JSON object");
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        UC_RETURN_IF_ERROR(ParseMetadata(entry));
      } else {
        UC_RETURN_IF_ERROR(ParseEntry(name, entry));
      }
    }
    return OkStatus();
  }

 private:
  Status Invalid(const std::string& message) const {
    return InvalidArgumentError(path_ + ": " + message);
  }
  Status InvalidTensor(const std::string& name, const std::string& message) const {
    return Invalid("tensor '" + name + "': " + message);
  }

  StatusOr<json> ReadHeader();
  Status ParseMetadata(const json& entry);
  Status ParseEntry(const std::string& name, const json& entry);
  StatusOr<Shape> ParseShape(const std::string& name, const json& entry) const;
  Status CheckOffsets(const std::string& name, const SafetensorsTensorInfo& info) const;

  SafetensorsFile* out_;
  const std::string& path_;
  uint64_t data_size_ = 0;
};

StatusOr<json> SafetensorsParser::ReadHeader() {
  const MappedFile& file = *out_->file_;
  if (file.size() < 8) {
    return Invalid("too short for a safetensors file (" + std::to_string(file.size()) +
                   " bytes; the header length alone takes 8)");
  }
  uint64_t length = 0;
  std::memcpy(&length, file.data(), sizeof(length));
  if (length > file.size() - 8) {
    return OutOfRangeError(path_ + ": header length " + std::to_string(length) +
                           " runs past the end of the file (size " + std::to_string(file.size()) +
                           ")");
  }
  if (length >= kMaxSafetensorsHeaderBytes) {
    return Invalid("header length " + std::to_string(length) + " is not below the 100 MB limit");
  }
  out_->data_offset_ = 8 + length;
  data_size_ = file.size() - out_->data_offset_;
  const std::string_view text(reinterpret_cast<const char*>(file.data() + 8), length);
  return ParseJson(text, path_ + ": header (JSON from file offset 8)");
}

Status SafetensorsParser::ParseMetadata(const json& entry) {
  if (!entry.is_object()) return Invalid("__metadata__ is not an object");
  for (const auto& [key, value] : entry.items()) {
    if (!value.is_string()) return Invalid("__metadata__ '" + key + "' is not a string");
    out_->metadata_.emplace(key, value.get<std::string>());
  }
  return OkStatus();
}

Status SafetensorsParser::ParseEntry(const std::string& name, const json& entry) {
  if (!entry.is_object()) return InvalidTensor(name, "entry is not an object");
  auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string()) {
    return InvalidTensor(name, "missing string field 'dtype'");
  }
  SafetensorsTensorInfo info;
  info.dtype_name = dtype->get<std::string>();
  info.dtype = SupportedDType(info.dtype_name);
  UC_ASSIGN_OR_RETURN(info.shape, ParseShape(name, entry));
  auto offsets = entry.find("data_offsets");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 ||
      !IsUnsigned((*offsets)[0]) || !IsUnsigned((*offsets)[1])) {
    return InvalidTensor(name, "'data_offsets' must be two non-negative integers [begin, end]");
  }
  info.begin = (*offsets)[0].get<uint64_t>();
  info.end = (*offsets)[1].get<uint64_t>();
  UC_RETURN_IF_ERROR(CheckOffsets(name, info));
  out_->tensors_.emplace(name, std::move(info));
  return OkStatus();
}

StatusOr<Shape> SafetensorsParser::ParseShape(const std::string& name, const json& entry) const {
  auto shape_json = entry.find("shape");
  if (shape_json == entry.end() || !shape_json->is_array()) {
    return InvalidTensor(name, "missing array field 'shape'");
  }
  Shape shape;
  for (const json& extent : *shape_json) {
    if (!IsUnsigned(extent) ||
        extent.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return InvalidTensor(
          name, "'shape' holds " + extent.dump() + ", not a non-negative 64-bit integer");
    }
    shape.push_back(extent.get<int64_t>());
  }
  return shape;
}

Status SafetensorsParser::CheckOffsets(const std::string& name,
                                       const SafetensorsTensorInfo& info) const {
  const std::string range =
      "data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) + ")";
  if (info.begin > info.end) return InvalidTensor(name, range + " has begin > end");
  if (info.end > data_size_) {
    return OutOfRangeError(path_ + ": tensor '" + name + "': " + range +
                           " end past the file (size " + std::to_string(out_->file_->size()) +
                           ", data section " + std::to_string(data_size_) + " bytes)");
  }
  const uint64_t element_size = SafetensorsElementSize(info.dtype_name);
  if (element_size == 0) return OkStatus();  // unknown dtype: Get() reports it
  uint64_t bytes = element_size;
  for (int64_t extent : info.shape) {
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(extent), &bytes)) {
      return InvalidTensor(name, "shape " + ShapeToString(info.shape) + " overflows 64 bits");
    }
  }
  if (info.end - info.begin != bytes) {
    return InvalidTensor(name, range + " holds " + std::to_string(info.end - info.begin) +
                                   " bytes, but " + info.dtype_name + " " +
                                   ShapeToString(info.shape) + " needs " + std::to_string(bytes));
  }
  return OkStatus();
}

// ---- SafetensorsFile ---------------------------------------------------------------------------

StatusOr<std::shared_ptr<const SafetensorsFile>> SafetensorsFile::Open(
    const std::filesystem::path& path) {
  UC_ASSIGN_OR_RETURN(std::shared_ptr<const MappedFile> file, MappedFile::Open(path));
  std::shared_ptr<SafetensorsFile> result(new SafetensorsFile(std::move(file)));
  SafetensorsParser parser(result.get());
  UC_RETURN_IF_ERROR(parser.Parse());
  return std::shared_ptr<const SafetensorsFile>(std::move(result));
}

const SafetensorsTensorInfo* SafetensorsFile::FindTensor(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

StatusOr<Tensor> SafetensorsFile::Get(std::string_view name) const {
  const SafetensorsTensorInfo* info = FindTensor(name);
  if (info == nullptr) return TensorNotFoundError(*this, name);
  if (!info->dtype) {
    return UnimplementedError(path() + ": tensor '" + std::string(name) + "' has dtype " +
                              info->dtype_name + ", which is not supported (F32, F16, BF16)");
  }
  const std::byte* data = file_->data() + data_offset_ + info->begin;
  Tensor tensor = Tensor::Borrow(data, info->shape, *info->dtype, file_);
  // The format does not promise aligned data; kernels must not read misaligned elements, so a
  // misaligned tensor (rare: writers pad the header to 8 bytes) is copied.
  const uintptr_t element = static_cast<uintptr_t>(DTypeBlockBytes(*info->dtype));
  if (reinterpret_cast<uintptr_t>(data) % element != 0) return tensor.Clone();
  return tensor;
}

StatusOr<U8View> SafetensorsFile::GetU8(std::string_view name) const {
  const SafetensorsTensorInfo* info = FindTensor(name);
  if (info == nullptr) return TensorNotFoundError(*this, name);
  if (info->dtype_name != "U8") {
    return InvalidArgumentError(path() + ": tensor '" + std::string(name) + "' has dtype " +
                                info->dtype_name + ", expected U8");
  }
  const auto* data = reinterpret_cast<const uint8_t*>(file_->data() + data_offset_ + info->begin);
  return U8View{info->shape, {data, static_cast<size_t>(info->end - info->begin)}};
}

std::vector<std::string> SafetensorsFile::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, info] : tensors_) names.push_back(name);
  return names;
}

// ---- SafetensorsCheckpoint ---------------------------------------------------------------------

StatusOr<std::shared_ptr<const SafetensorsCheckpoint>> SafetensorsCheckpoint::Open(
    const std::filesystem::path& path) {
  std::error_code ec;
  const std::filesystem::path index = path / "model.safetensors.index.json";
  if (std::filesystem::is_directory(path, ec) && std::filesystem::exists(index, ec)) {
    return OpenIndex(path, index);
  }
  const bool is_dir = std::filesystem::is_directory(path, ec);
  const std::filesystem::path single = is_dir ? path / "model.safetensors" : path;
  if (is_dir && !std::filesystem::exists(single, ec)) {
    return NotFoundError(path.string() +
                         ": neither model.safetensors nor model.safetensors.index.json found");
  }
  UC_ASSIGN_OR_RETURN(std::shared_ptr<const SafetensorsFile> file, SafetensorsFile::Open(single));
  std::shared_ptr<SafetensorsCheckpoint> ckpt(new SafetensorsCheckpoint());
  ckpt->description_ = file->path();
  for (const std::string& name : file->TensorNames()) ckpt->shard_of_.emplace(name, 0);
  ckpt->shards_.push_back(std::move(file));
  return std::shared_ptr<const SafetensorsCheckpoint>(std::move(ckpt));
}

StatusOr<std::shared_ptr<const SafetensorsCheckpoint>> SafetensorsCheckpoint::OpenIndex(
    const std::filesystem::path& dir, const std::filesystem::path& index) {
  const std::string where = index.string();
  UC_ASSIGN_OR_RETURN(json doc, ReadJsonFile(index));
  auto weight_map = doc.find("weight_map");
  if (!doc.is_object() || weight_map == doc.end() || !weight_map->is_object()) {
    return InvalidArgumentError(where + ": missing object 'weight_map'");
  }
  std::shared_ptr<SafetensorsCheckpoint> ckpt(new SafetensorsCheckpoint());
  ckpt->description_ = dir.string();
  std::map<std::string, size_t> shard_index;  // shard file name -> index in shards_
  for (const auto& [tensor, shard_json] : weight_map->items()) {
    const std::string shard = shard_json.is_string() ? shard_json.get<std::string>() : "";
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "..") {
      return InvalidArgumentError(where + ": tensor '" + tensor + "': shard " + shard_json.dump() +
                                  " is not a file name in the directory");
    }
    auto [it, inserted] = shard_index.emplace(shard, ckpt->shards_.size());
    if (inserted) {
      StatusOr<std::shared_ptr<const SafetensorsFile>> file = SafetensorsFile::Open(dir / shard);
      if (!file.ok()) {
        return file.status().Annotate(where + ": shard '" + shard + "' (listed for tensor '" +
                                      tensor + "')");
      }
      ckpt->shards_.push_back(*std::move(file));
    }
    if (!ckpt->shards_[it->second]->Has(tensor)) {
      return NotFoundError(where + " lists tensor '" + tensor + "' in shard '" + shard +
                           "', but the shard has no such tensor");
    }
    ckpt->shard_of_.emplace(tensor, it->second);
  }
  return std::shared_ptr<const SafetensorsCheckpoint>(std::move(ckpt));
}

bool SafetensorsCheckpoint::Has(std::string_view name) const {
  return shard_of_.find(name) != shard_of_.end();
}

StatusOr<Tensor> SafetensorsCheckpoint::Get(std::string_view name) const {
  auto it = shard_of_.find(name);
  if (it == shard_of_.end()) return TensorNotFoundError(*this, name);
  return shards_[it->second]->Get(name);
}

StatusOr<U8View> SafetensorsCheckpoint::GetU8(std::string_view name) const {
  auto it = shard_of_.find(name);
  if (it == shard_of_.end()) return TensorNotFoundError(*this, name);
  return shards_[it->second]->GetU8(name);
}

std::vector<std::string> SafetensorsCheckpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(shard_of_.size());
  for (const auto& [name, shard] : shard_of_) names.push_back(name);
  return names;
}

}  // namespace uc::io
