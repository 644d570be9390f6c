#include "io/gguf/gguf_writer.h"

namespace uc::io {
namespace {

template <typename T>
void Append(std::string* out, T value) {
  const size_t at = out->size();
  out->resize(at + sizeof(T));
  std::memcpy(out->data() + at, &value, sizeof(T));
}

void AppendString(std::string* out, std::string_view text) {
  Append<uint64_t>(out, text.size());
  out->append(text);
}

}  // namespace

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  UC_CHECK(alignment != 0 && (alignment & (alignment - 1)) == 0,
           "GGUF alignment %u is not a power of two", alignment);
  if (alignment != kGgufDefaultAlignment) Set<uint32_t>("general.alignment", alignment);
}

void GgufWriter::SetString(std::string key, std::string_view value) {
  std::string payload;
  AppendString(&payload, value);
  SetRaw(std::move(key), static_cast<uint32_t>(GgufType::kString), std::move(payload));
}

void GgufWriter::SetStringArray(std::string key, const std::vector<std::string>& values) {
  std::string payload = ArrayHeader(GgufType::kString, values.size());
  for (const std::string& value : values) AppendString(&payload, value);
  SetRaw(std::move(key), static_cast<uint32_t>(GgufType::kArray), std::move(payload));
}

void GgufWriter::SetValue(std::string key, const GgufValue& value) {
  std::string payload;
  const auto* bytes = reinterpret_cast<const char*>(value.payload());
  if (value.is_array()) {
    payload = ArrayHeader(value.element_type(), value.count());
    if (value.element_type() == GgufType::kString) {
      for (std::string_view s : value.StringViews()) AppendString(&payload, s);
    } else {
      const uint64_t size = GgufTypeSize(static_cast<uint32_t>(value.element_type()));
      payload.append(bytes, static_cast<size_t>(size * value.count()));
    }
  } else if (value.type() == GgufType::kString) {
    AppendString(&payload, *value.AsString());
  } else {
    payload.append(bytes, GgufTypeSize(static_cast<uint32_t>(value.type())));
  }
  SetRaw(std::move(key), static_cast<uint32_t>(value.type()), std::move(payload));
}

std::string GgufWriter::ArrayHeader(GgufType element_type, uint64_t count) {
  std::string header;
  Append<uint32_t>(&header, static_cast<uint32_t>(element_type));
  Append<uint64_t>(&header, count);
  return header;
}

void GgufWriter::SetRaw(std::string key, uint32_t type, std::string payload) {
  for (Entry& entry : metadata_) {
    if (entry.key == key) {
      entry.type = type;
      entry.payload = std::move(payload);
      return;
    }
  }
  metadata_.push_back({std::move(key), type, std::move(payload)});
}

Status GgufWriter::Check(const std::string& name, DType dtype, const Shape& shape) const {
  const int64_t block = DTypeBlockSize(dtype);
  if (!shape.empty() && shape.back() % block != 0) {
    return InvalidArgumentError("tensor '" + name + "': last dimension " +
                                std::to_string(shape.back()) + " is not a multiple of the " +
                                std::string(DTypeName(dtype)) + " block size " +
                                std::to_string(block));
  }
  if (shape.size() > 4) {
    return InvalidArgumentError("tensor '" + name + "': GGUF holds at most 4 dimensions, not " +
                                std::to_string(shape.size()));
  }
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) return InvalidArgumentError("tensor '" + name + "' added twice");
  }
  return OkStatus();
}

Status GgufWriter::Add(std::string name, Tensor tensor) {
  UC_RETURN_IF_ERROR(Check(name, tensor.dtype(), tensor.shape()));
  const DType dtype = tensor.dtype();
  Shape shape = tensor.shape();
  tensors_.push_back({std::move(name), dtype, std::move(shape), std::move(tensor), nullptr});
  return OkStatus();
}

Status GgufWriter::AddLazy(std::string name, DType dtype, Shape shape, TensorProducer produce) {
  UC_RETURN_IF_ERROR(Check(name, dtype, shape));
  tensors_.push_back({std::move(name), dtype, std::move(shape), Tensor(), std::move(produce)});
  return OkStatus();
}

// Everything before the data section: header, metadata and tensor infos (unpadded).
std::string GgufWriter::EncodeHeader() const {
  std::string out;
  Append<uint32_t>(&out, kGgufMagic);
  Append<uint32_t>(&out, 3);
  Append<uint64_t>(&out, tensors_.size());
  Append<uint64_t>(&out, metadata_.size());
  for (const Entry& entry : metadata_) {
    AppendString(&out, entry.key);
    Append<uint32_t>(&out, entry.type);
    out += entry.payload;
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    AppendString(&out, t.name);
    const Shape ne = t.shape.empty() ? Shape{1} : Shape(t.shape.rbegin(), t.shape.rend());
    Append<uint32_t>(&out, static_cast<uint32_t>(ne.size()));
    for (int64_t extent : ne) Append<uint64_t>(&out, static_cast<uint64_t>(extent));
    Append<uint32_t>(&out, GgmlTypeFromDType(t.dtype));
    Append<uint64_t>(&out, offset);
    offset = Align(offset + static_cast<uint64_t>(t.nbytes()));
  }
  return out;
}

Status GgufWriter::WriteFile(const std::filesystem::path& path) const {
  const std::string header = EncodeHeader();
  UC_ASSIGN_OR_RETURN(std::unique_ptr<FileSink> sink, FileSink::Create(path));
  UC_RETURN_IF_ERROR(sink->Write(header.data(), header.size()));
  UC_RETURN_IF_ERROR(sink->WriteZeros(Align(header.size()) - header.size()));
  for (const PendingTensor& t : tensors_) {
    StatusOr<Tensor> tensor = t.Materialize();
    if (!tensor.ok()) return tensor.status().Annotate(path.string());
    const auto bytes = static_cast<uint64_t>(t.nbytes());
    UC_RETURN_IF_ERROR(sink->Write(tensor->raw(), bytes));
    UC_RETURN_IF_ERROR(sink->WriteZeros(Align(bytes) - bytes));
  }
  return sink->Commit();
}

}  // namespace uc::io
