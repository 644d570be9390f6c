// Parsing and validation of the GGUF layout (GgufFile::Open); see gguf.h.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>

#include "io/byte_reader.h"
#include "io/gguf/gguf.h"

namespace uc::io {
namespace {

uint32_t LoadU32(const std::byte* p) {
  uint32_t value;
  std::memcpy(&value, p, sizeof(value));
  return value;
}

// The magic's four bytes, printable ones as is and others as \xHH.
std::string EscapeMagic(const std::byte* p, size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(p[i]);
    if (std::isprint(c)) {
      out += static_cast<char>(c);
    } else {
      out += {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
    }
  }
  return out;
}

}  // namespace

// Reads a mapped file into a GgufFile; every check of the layout lives here.
class GgufParser {
 public:
  explicit GgufParser(GgufFile* out)
      : out_(out), reader_(out->file_->bytes(), out->file_->path()) {}

  Status Parse() {
    UC_RETURN_IF_ERROR(ParseHeader());
    UC_RETURN_IF_ERROR(ParseMetadata());
    UC_RETURN_IF_ERROR(ParseAlignment());
    UC_RETURN_IF_ERROR(ParseTensorInfos());
    out_->data_offset_ =
        (reader_.offset() + out_->alignment_ - 1) / out_->alignment_ * out_->alignment_;
    for (const GgufTensorInfo& info : out_->tensors_) UC_RETURN_IF_ERROR(CheckTensorData(info));
    return OkStatus();
  }

 private:
  Status Invalid(const std::string& message) const {
    return reader_.Error(StatusCode::kInvalidArgument, message);
  }

  Status ParseHeader();
  Status CheckCount(uint64_t count, uint64_t min_bytes, const char* what) const;
  Status ParseMetadata();
  StatusOr<GgufValue> ParseValue(uint32_t type);
  StatusOr<GgufValue> ParseArray();
  Status ParseAlignment();
  Status ParseTensorInfos();
  StatusOr<GgufTensorInfo> ParseTensorInfo();
  Status CheckTensorData(const GgufTensorInfo& info) const;

  GgufFile* out_;
  ByteReader reader_;
  uint64_t tensor_count_ = 0;
  uint64_t kv_count_ = 0;
};

Status GgufParser::ParseHeader() {
  const MappedFile& file = *out_->file_;
  if (file.size() < 4 || LoadU32(file.data()) != kGgufMagic) {
    const size_t n = std::min<size_t>(file.size(), 4);
    return InvalidArgumentError(file.path() + ": not a GGUF file (magic \"" +
                                EscapeMagic(file.data(), n) + "\", expected \"GGUF\")");
  }
  reader_.set_context("header");
  UC_RETURN_IF_ERROR(reader_.Skip(4, "magic"));
  UC_RETURN_IF_ERROR(reader_.Read(&out_->version_, "version"));
  const uint32_t version = out_->version_;
  if (version == 0x02000000 || version == 0x03000000) {
    return reader_.Error(StatusCode::kUnimplemented, "big-endian GGUF files are not supported");
  }
  if (version != 2 && version != 3) {
    return reader_.Error(
        StatusCode::kUnimplemented,
        "GGUF version " + std::to_string(version) + " is not supported (only versions 2 and 3)");
  }
  UC_RETURN_IF_ERROR(reader_.Read(&tensor_count_, "tensor count"));
  UC_RETURN_IF_ERROR(reader_.Read(&kv_count_, "metadata count"));
  // Smallest possible entries: a key/name length, a type code and one byte / the dims and offset.
  UC_RETURN_IF_ERROR(CheckCount(kv_count_, 8 + 4 + 1, "metadata count"));
  return CheckCount(tensor_count_, 8 + 4 + 8 + 4 + 8, "tensor count");
}

Status GgufParser::CheckCount(uint64_t count, uint64_t min_bytes, const char* what) const {
  if (count <= reader_.remaining() / min_bytes) return OkStatus();
  return Invalid(std::string(what) + " " + std::to_string(count) + " is impossible for a file of " +
                 std::to_string(out_->file_->size()) + " bytes");
}

Status GgufParser::ParseMetadata() {
  for (uint64_t i = 0; i < kv_count_; ++i) {
    reader_.set_context("metadata key #" + std::to_string(i));
    std::string_view key;
    UC_RETURN_IF_ERROR(reader_.ReadString(&key, "key"));
    reader_.set_context("metadata key #" + std::to_string(i) + " '" + std::string(key) + "'");
    uint32_t type = 0;
    UC_RETURN_IF_ERROR(reader_.Read(&type, "value type"));
    UC_ASSIGN_OR_RETURN(GgufValue value, ParseValue(type));
    if (!out_->metadata_index_.emplace(std::string(key), out_->metadata_.size()).second) {
      return Invalid("duplicate key");
    }
    out_->metadata_.emplace_back(std::string(key), value);
  }
  return OkStatus();
}

StatusOr<GgufValue> GgufParser::ParseValue(uint32_t type) {
  const auto gguf_type = static_cast<GgufType>(type);
  if (gguf_type == GgufType::kArray) return ParseArray();
  if (gguf_type == GgufType::kString) {
    std::string_view text;
    UC_RETURN_IF_ERROR(reader_.ReadString(&text, "string value"));
    return GgufValue(gguf_type, gguf_type, text.size(),
                     reinterpret_cast<const std::byte*>(text.data()));
  }
  const uint32_t size = GgufTypeSize(type);
  if (size == 0) return Invalid("unknown value type " + std::to_string(type));
  const std::byte* payload = reader_.current();
  UC_RETURN_IF_ERROR(reader_.Skip(size, "value"));
  return GgufValue(gguf_type, gguf_type, 1, payload);
}

StatusOr<GgufValue> GgufParser::ParseArray() {
  uint32_t element_type = 0;
  uint64_t count = 0;
  UC_RETURN_IF_ERROR(reader_.Read(&element_type, "array element type"));
  UC_RETURN_IF_ERROR(reader_.Read(&count, "array length"));
  const auto type = static_cast<GgufType>(element_type);
  const std::byte* payload = reader_.current();
  if (type == GgufType::kArray) {
    return reader_.Error(StatusCode::kUnimplemented, "arrays of arrays are not supported");
  }
  const uint32_t size = type == GgufType::kString ? 8 : GgufTypeSize(element_type);
  if (size == 0) return Invalid("unknown array element type " + std::to_string(element_type));
  if (count > reader_.remaining() / size) {
    return reader_.Error(StatusCode::kOutOfRange, "array of " + std::to_string(count) + " " +
                                                      GgufTypeName(element_type) +
                                                      " runs past the end of the file (size " +
                                                      std::to_string(out_->file_->size()) + ")");
  }
  if (type != GgufType::kString) {
    UC_RETURN_IF_ERROR(reader_.Skip(count * size, "array elements"));
  } else {
    std::string_view element;
    for (uint64_t i = 0; i < count; ++i) {
      UC_RETURN_IF_ERROR(reader_.ReadString(&element, "array string element"));
    }
  }
  return GgufValue(GgufType::kArray, type, count, payload);
}

Status GgufParser::ParseAlignment() {
  const GgufValue* value = out_->Find("general.alignment");
  if (value == nullptr) return OkStatus();
  reader_.set_context("metadata key 'general.alignment'");
  const std::optional<int64_t> alignment = value->AsInt();
  if (!alignment) return Invalid("is " + value->TypeName() + ", expected an integer");
  if (*alignment <= 0 || *alignment > (int64_t{1} << 30) || (*alignment & (*alignment - 1))) {
    return Invalid("alignment " + std::to_string(*alignment) +
                   " is not a power of two in [1, 2^30]");
  }
  out_->alignment_ = static_cast<uint64_t>(*alignment);
  return OkStatus();
}

Status GgufParser::ParseTensorInfos() {
  for (uint64_t i = 0; i < tensor_count_; ++i) {
    reader_.set_context("tensor info #" + std::to_string(i));
    UC_ASSIGN_OR_RETURN(GgufTensorInfo info, ParseTensorInfo());
    if (!out_->tensor_index_.emplace(info.name, out_->tensors_.size()).second) {
      return Invalid("duplicate tensor name");
    }
    out_->tensors_.push_back(std::move(info));
  }
  return OkStatus();
}

StatusOr<GgufTensorInfo> GgufParser::ParseTensorInfo() {
  constexpr uint32_t kMaxDims = 4;  // ggml's limit
  GgufTensorInfo info;
  std::string_view name;
  UC_RETURN_IF_ERROR(reader_.ReadString(&name, "tensor name"));
  info.name = std::string(name);
  reader_.set_context("tensor '" + info.name + "'");
  uint32_t num_dims = 0;
  UC_RETURN_IF_ERROR(reader_.Read(&num_dims, "number of dimensions"));
  if (num_dims == 0 || num_dims > kMaxDims) {
    return Invalid("number of dimensions " + std::to_string(num_dims) + " is not in [1, 4]");
  }
  info.shape.resize(num_dims);
  int64_t numel = 1;
  for (uint32_t d = 0; d < num_dims; ++d) {
    uint64_t extent = 0;
    UC_RETURN_IF_ERROR(reader_.Read(&extent, "dimension"));
    int64_t product = 0;
    if (extent > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        __builtin_mul_overflow(numel, static_cast<int64_t>(extent), &product)) {
      return Invalid("dimensions overflow 64 bits (dimension " + std::to_string(d) + " is " +
                     std::to_string(extent) + ")");
    }
    numel = product;
    info.shape[num_dims - 1 - d] = static_cast<int64_t>(extent);
  }
  UC_RETURN_IF_ERROR(reader_.Read(&info.ggml_type, "ggml type"));
  UC_RETURN_IF_ERROR(reader_.Read(&info.offset, "data offset"));
  return info;
}

Status GgufParser::CheckTensorData(const GgufTensorInfo& info) const {
  const std::string& path = out_->file_->path();
  const std::string prefix = path + ": tensor '" + info.name + "': ";
  if (info.offset % out_->alignment_ != 0) {
    return InvalidArgumentError(prefix + "data offset " + std::to_string(info.offset) +
                                " is not a multiple of the alignment " +
                                std::to_string(out_->alignment_));
  }
  const std::optional<DType> dtype = DTypeFromGgml(info.ggml_type);
  if (!dtype) return OkStatus();  // size unknown; Get() reports the type
  const int64_t last = info.shape.back();
  const int64_t block = DTypeBlockSize(*dtype);
  if (last % block != 0) {
    return InvalidArgumentError(prefix + "innermost dimension " + std::to_string(last) +
                                " is not a multiple of the " + std::string(DTypeName(*dtype)) +
                                " block size " + std::to_string(block));
  }
  const int64_t rows = last == 0 ? 0 : ShapeNumel(info.shape) / last;
  const auto row_blocks = static_cast<uint64_t>(last / block);
  const auto block_bytes = static_cast<uint64_t>(DTypeBlockBytes(*dtype));
  uint64_t row_bytes = 0;
  uint64_t bytes = 0;
  uint64_t begin = 0;
  uint64_t end = 0;
  if (__builtin_mul_overflow(row_blocks, block_bytes, &row_bytes) ||
      __builtin_mul_overflow(static_cast<uint64_t>(rows), row_bytes, &bytes) ||
      __builtin_add_overflow(out_->data_offset_, info.offset, &begin) ||
      __builtin_add_overflow(begin, bytes, &end) || end > out_->file_->size()) {
    return OutOfRangeError(prefix + "data at offset " + std::to_string(info.offset) + " (" +
                           GgmlTypeName(info.ggml_type) + " " + ShapeToString(info.shape) +
                           ") runs past the end of the file (size " +
                           std::to_string(out_->file_->size()) + ")");
  }
  return OkStatus();
}

// ---- GgufFile ----------------------------------------------------------------------------------

StatusOr<std::shared_ptr<const GgufFile>> GgufFile::Open(const std::filesystem::path& path) {
  UC_ASSIGN_OR_RETURN(std::shared_ptr<const MappedFile> file, MappedFile::Open(path));
  std::shared_ptr<GgufFile> gguf(new GgufFile(std::move(file)));
  GgufParser parser(gguf.get());
  UC_RETURN_IF_ERROR(parser.Parse());
  return std::shared_ptr<const GgufFile>(std::move(gguf));
}

}  // namespace uc::io
