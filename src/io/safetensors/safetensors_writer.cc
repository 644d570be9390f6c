#include "io/safetensors/safetensors_writer.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace uc::io {
namespace {

std::string SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    default:
      return "";
  }
}

// Data order: larger elements first (keeps every tensor aligned), then by name.
std::vector<const PendingTensor*> DataOrder(const std::vector<PendingTensor>& tensors) {
  std::vector<const PendingTensor*> order;
  for (const PendingTensor& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const PendingTensor* a, const PendingTensor* b) {
    const int64_t sa = DTypeBlockBytes(a->dtype);
    const int64_t sb = DTypeBlockBytes(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });
  return order;
}

}  // namespace

Status SafetensorsWriter::Check(const std::string& name, DType dtype) const {
  if (SafetensorsDTypeName(dtype).empty()) {
    return InvalidArgumentError("tensor '" + name + "': dtype " + std::string(DTypeName(dtype)) +
                                " cannot be stored in safetensors (only F32, F16, BF16)");
  }
  if (name.empty() || name == "__metadata__") {
    return InvalidArgumentError("tensor name '" + name + "' is reserved");
  }
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) return InvalidArgumentError("tensor '" + name + "' added twice");
  }
  return OkStatus();
}

Status SafetensorsWriter::Add(std::string name, Tensor tensor) {
  UC_RETURN_IF_ERROR(Check(name, tensor.dtype()));
  const DType dtype = tensor.dtype();
  Shape shape = tensor.shape();
  tensors_.push_back({std::move(name), dtype, std::move(shape), std::move(tensor), nullptr});
  return OkStatus();
}

Status SafetensorsWriter::AddLazy(std::string name, DType dtype, Shape shape,
                                  TensorProducer produce) {
  UC_RETURN_IF_ERROR(Check(name, dtype));
  tensors_.push_back({std::move(name), dtype, std::move(shape), Tensor(), std::move(produce)});
  return OkStatus();
}

void SafetensorsWriter::SetMetadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

Status SafetensorsWriter::WriteFile(const std::filesystem::path& path, bool durable) const {
  const std::vector<const PendingTensor*> order = DataOrder(tensors_);
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const PendingTensor* t : order) {
    const auto bytes = static_cast<uint64_t>(t->nbytes());
    header[t->name] = {{"dtype", SafetensorsDTypeName(t->dtype)},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t length = text.size();

  UC_ASSIGN_OR_RETURN(std::unique_ptr<FileSink> sink, FileSink::Create(path));
  UC_RETURN_IF_ERROR(sink->Write(&length, sizeof(length)));
  UC_RETURN_IF_ERROR(sink->Write(text.data(), text.size()));
  for (const PendingTensor* t : order) {
    StatusOr<Tensor> tensor = t->Materialize();
    if (!tensor.ok()) return tensor.status().Annotate(path.string());
    UC_RETURN_IF_ERROR(sink->Write(tensor->raw(), static_cast<size_t>(t->nbytes())));
  }
  return sink->Commit(durable);
}

}  // namespace uc::io
