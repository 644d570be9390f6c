// Fuzzes the safetensors reader: the input is a whole .safetensors file (8-byte header length,
// JSON header, data). SafetensorsFile::Open maps a path, so the bytes go to a scratch file
// first. Open must refuse every inconsistent header with a Status; for a file it accepts,
// every tensor must lie inside the data section and hold exactly its shape's bytes.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "io/safetensors/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const uc::fuzz::ScratchDir scratch("safetensors");  // removed at exit
  const auto path = scratch.Write("model.safetensors", data, size);
  uc::StatusOr<std::shared_ptr<const uc::io::SafetensorsFile>> file =
      uc::io::SafetensorsFile::Open(path);
  if (!file.ok()) return 0;
  const uc::io::SafetensorsFile& st = **file;
  UC_FUZZ_ASSERT(st.data_offset() <= size, "the data section starts inside the file");
  for (const std::string& name : st.TensorNames()) {
    const uc::io::SafetensorsTensorInfo* info = st.FindTensor(name);
    UC_FUZZ_ASSERT(info != nullptr, "every listed tensor is found");
    UC_FUZZ_ASSERT(info->begin <= info->end && info->end <= size - st.data_offset(),
                   "tensor bytes lie in the data section");
    uc::StatusOr<uc::Tensor> tensor = st.Get(name);
    if (!tensor.ok()) continue;  // an unsupported dtype
    UC_FUZZ_ASSERT(static_cast<uint64_t>(tensor->nbytes()) == info->end - info->begin,
                   "a tensor holds exactly numel * element size bytes");
    if (tensor->numel() <= (1 << 16)) {
      const std::vector<float> values = tensor->ToFloatVector();
      UC_FUZZ_ASSERT(static_cast<int64_t>(values.size()) == tensor->numel(), "every value read");
    }
  }
  return 0;
}
