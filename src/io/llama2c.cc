#include "io/llama2c.h"

#include <array>
#include <cstring>
#include <limits>

namespace uc::io {
namespace {

constexpr uint64_t kHeaderBytes = 7 * sizeof(int32_t);
constexpr uint32_t kVersion1Magic = 0x616b3432;  // "ak42", the newer llama2.c exports

// Fields in file order, with their llama2.c names for messages.
constexpr std::array<const char*, 7> kFieldNames = {
    "dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};

Status ValidateHeader(const std::string& path, const std::array<int32_t, 7>& raw) {
  for (size_t i = 0; i < raw.size(); ++i) {
    const bool ok =
        i == 5 ? raw[i] != 0 && raw[i] != std::numeric_limits<int32_t>::min() : raw[i] > 0;
    if (!ok) {
      return InvalidArgumentError(path + ": llama2.c header field " + kFieldNames[i] + " is " +
                                  std::to_string(raw[i]) + "; it must be positive");
    }
  }
  if (raw[0] % raw[3] != 0) {
    return InvalidArgumentError(path + ": llama2.c header: dim " + std::to_string(raw[0]) +
                                " is not a multiple of n_heads " + std::to_string(raw[3]));
  }
  if (raw[3] % raw[4] != 0) {
    return InvalidArgumentError(path + ": llama2.c header: n_heads " + std::to_string(raw[3]) +
                                " is not a multiple of n_kv_heads " + std::to_string(raw[4]));
  }
  return OkStatus();
}

// Floats of the two unused legacy RoPE tables, [seq_len][head_size / 2] each.
uint64_t LegacyRopeFloats(const Llama2cHeader& h) {
  return 2 * static_cast<uint64_t>(h.max_position_embeddings) *
         static_cast<uint64_t>(h.head_dim() / 2);
}

// The exact file size the header implies. Fields are below 2^31, so 128 bits cannot overflow.
unsigned __int128 ExpectedFileBytes(const Llama2cHeader& h) {
  using U = unsigned __int128;
  const U dim = static_cast<U>(h.hidden_size);
  const U kv_dim = static_cast<U>(h.num_key_value_heads) * static_cast<U>(h.head_dim());
  const U hidden = static_cast<U>(h.intermediate_size);
  const U per_layer = 2 * dim + 2 * dim * dim + 2 * kv_dim * dim + 3 * hidden * dim;
  const U embeddings = static_cast<U>(h.vocab_size) * dim * (h.tie_word_embeddings ? 1 : 2);
  const U floats =
      embeddings + static_cast<U>(h.num_hidden_layers) * per_layer + dim + LegacyRopeFloats(h);
  return kHeaderBytes + floats * sizeof(float);
}

std::string U128ToString(unsigned __int128 value) {
  std::string digits;
  do {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(value % 10)));
    value /= 10;
  } while (value != 0);
  return digits;
}

std::string HeaderText(const std::array<int32_t, 7>& raw) {
  std::string text;
  for (size_t i = 0; i < raw.size(); ++i) {
    text += std::string(i ? ", " : "") + kFieldNames[i] + " " + std::to_string(raw[i]);
  }
  return text;
}

}  // namespace

StatusOr<std::shared_ptr<const Llama2cCheckpoint>> Llama2cCheckpoint::Open(
    const std::filesystem::path& path) {
  UC_ASSIGN_OR_RETURN(std::shared_ptr<const MappedFile> file, MappedFile::Open(path));
  const std::string& name = file->path();
  if (file->size() < kHeaderBytes) {
    return InvalidArgumentError(name + ": " + std::to_string(file->size()) +
                                " bytes is too short for the 28-byte llama2.c header");
  }
  std::array<int32_t, 7> raw{};
  std::memcpy(raw.data(), file->data(), kHeaderBytes);
  if (static_cast<uint32_t>(raw[0]) == kVersion1Magic) {
    return UnimplementedError(name +
                              ": llama2.c version 1/2 export (magic \"ak42\") is not "
                              "supported; export with the legacy (version 0) format");
  }
  UC_RETURN_IF_ERROR(ValidateHeader(name, raw));
  std::shared_ptr<Llama2cCheckpoint> ckpt(new Llama2cCheckpoint(std::move(file)));
  Llama2cHeader& h = ckpt->header_;
  h.hidden_size = raw[0];
  h.intermediate_size = raw[1];
  h.num_hidden_layers = raw[2];
  h.num_attention_heads = raw[3];
  h.num_key_value_heads = raw[4];
  h.vocab_size = raw[5] < 0 ? -static_cast<int64_t>(raw[5]) : raw[5];
  h.max_position_embeddings = raw[6];
  h.tie_word_embeddings = raw[5] > 0;
  const uint64_t actual = ckpt->file_->size();
  const unsigned __int128 expected = ExpectedFileBytes(h);
  if (expected != actual) {
    const bool longer = actual > expected;
    const auto diff = static_cast<uint64_t>(longer ? actual - expected : expected - actual);
    return InvalidArgumentError(name + ": file is " + std::to_string(actual) +
                                " bytes, but the llama2.c header (" + HeaderText(raw) +
                                ") implies " + U128ToString(expected) + " bytes (" +
                                std::to_string(diff) + (longer ? " extra)" : " missing)"));
  }
  ckpt->BuildSlots();
  return std::shared_ptr<const Llama2cCheckpoint>(std::move(ckpt));
}

void Llama2cCheckpoint::BuildSlots() {
  const Llama2cHeader& h = header_;
  const int64_t dim = h.hidden_size;
  const int64_t hidden = h.intermediate_size;
  const int64_t kv_dim = h.num_key_value_heads * h.head_dim();
  uint64_t offset = kHeaderBytes;
  // Lays out `count` tensors of `shape` back to back, named name_of(0..count-1).
  auto add = [&](int64_t count, const Shape& shape, auto name_of) {
    for (int64_t i = 0; i < count; ++i) {
      slots_[name_of(i)] = Slot{offset, shape};
      offset += static_cast<uint64_t>(ShapeNumel(shape)) * sizeof(float);
    }
  };
  auto layer = [](const char* suffix) {
    return [suffix](int64_t i) { return "model.layers." + std::to_string(i) + "." + suffix; };
  };
  auto fixed = [](const char* name) { return [name](int64_t) { return std::string(name); }; };
  const int64_t num_layers = h.num_hidden_layers;
  add(1, {h.vocab_size, dim}, fixed("model.embed_tokens.weight"));
  add(num_layers, {dim}, layer("input_layernorm.weight"));
  add(num_layers, {dim, dim}, layer("self_attn.q_proj.weight"));
  add(num_layers, {kv_dim, dim}, layer("self_attn.k_proj.weight"));
  add(num_layers, {kv_dim, dim}, layer("self_attn.v_proj.weight"));
  add(num_layers, {dim, dim}, layer("self_attn.o_proj.weight"));
  add(num_layers, {dim}, layer("post_attention_layernorm.weight"));
  add(num_layers, {hidden, dim}, layer("mlp.gate_proj.weight"));
  add(num_layers, {dim, hidden}, layer("mlp.down_proj.weight"));
  add(num_layers, {hidden, dim}, layer("mlp.up_proj.weight"));
  add(1, {dim}, fixed("model.norm.weight"));
  offset += LegacyRopeFloats(h) * sizeof(float);
  if (!h.tie_word_embeddings) add(1, {h.vocab_size, dim}, fixed("lm_head.weight"));
  UC_CHECK(offset == file_->size(), "llama2.c layout disagrees with the size check");
}

bool Llama2cCheckpoint::Has(std::string_view name) const {
  return slots_.find(name) != slots_.end();
}

StatusOr<Tensor> Llama2cCheckpoint::Get(std::string_view name) const {
  auto it = slots_.find(name);
  if (it == slots_.end()) return TensorNotFoundError(*this, name);
  return Tensor::Borrow(file_->data() + it->second.offset, it->second.shape, DType::kF32, file_);
}

std::vector<std::string> Llama2cCheckpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(slots_.size());
  for (const auto& [name, slot] : slots_) names.push_back(name);
  return names;
}

}  // namespace uc::io
