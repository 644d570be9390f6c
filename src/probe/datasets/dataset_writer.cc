#include "probe/datasets/dataset_writer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "base/check.h"
#include "io/file_sink.h"
#include "io/safetensors/safetensors_writer.h"
#include "io/text_file.h"
#include "tensor/tensor.h"

namespace uc::probe {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

constexpr const char* kFormat = "undercurrent-activations";
constexpr int kVersion = 1;
constexpr const char* kManifest = "manifest.json";
constexpr const char* kIndex = "index.ndjson";

std::string ShardStem(int number) {
  char name[32];
  std::snprintf(name, sizeof(name), "shard-%05d", number);
  return name;
}

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Names this writer creates (and so may delete): the manifest, the index, shards and their
// indexes, and the temporaries of all of them.
bool IsDatasetFile(std::string name) {
  if (EndsWith(name, ".tmp")) name.resize(name.size() - 4);
  if (name == kManifest || name == kIndex) return true;
  return name.rfind("shard-", 0) == 0 &&
         (EndsWith(name, ".safetensors") || EndsWith(name, ".ndjson"));
}

std::string DTypeSpelling(DType dtype) { return dtype == DType::kBF16 ? "BF16" : "F32"; }

StatusOr<std::string> ReadWholeFile(const fs::path& path) {
  // Bounded, and never a FIFO or a device: a dataset's manifest and indexes are small files.
  return io::ReadTextFile(path, int64_t{1} << 30, "dataset file");
}

// A short rendering of a fingerprint member for messages; long ones (the spec) are elided.
std::string Brief(const json& value) {
  const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
  return text.size() <= 80 ? text : "";
}

// `text` as a JSON string literal; bytes that are not UTF-8 become U+FFFD (a token may be
// part of a character). ASCII without quotes, backslashes or control characters is the
// common case and is copied as is.
std::string JsonString(const std::string& text) {
  const bool plain = std::all_of(text.begin(), text.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x20 && u < 0x80 && c != '"' && c != '\\';
  });
  if (!plain) return json(text).dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  out += text;
  out += '"';
  return out;
}

// The rejections of prompts before `next_prompt` (later ones are not committed yet).
ordered_json Committed(const std::vector<json>& rejected, int64_t next_prompt) {
  ordered_json out = ordered_json::array();
  for (const json& r : rejected) {
    if (r.value("prompt_index", int64_t{0}) < next_prompt) out.push_back(ordered_json(r));
  }
  return out;
}

}  // namespace

struct DatasetWriter::Shard {
  int number = 0;
  int64_t first_row = 0;
  int64_t rows = 0;
  struct Data {
    int64_t rows = 0;
    int64_t width = 0;             // values per row
    std::vector<std::byte> bytes;  // [rows, width] in the dataset dtype
  };
  std::map<std::string, Data> tensors;  // by tensor name
  std::string index;                    // NDJSON lines, row order
};

DatasetWriter::~DatasetWriter() = default;

StatusOr<std::unique_ptr<DatasetWriter>> DatasetWriter::Open(const fs::path& dir,
                                                             DatasetOptions options) {
  if (options.hidden_size <= 0) return InvalidArgumentError("dataset: hidden_size must be > 0");
  for (const auto& [point, width] : options.point_widths) {
    if (width <= 0) return InvalidArgumentError("dataset: point_widths." + point + " must be > 0");
  }
  if (options.dtype != DType::kF32 && options.dtype != DType::kBF16) {
    return InvalidArgumentError("dataset: dtype must be F32 or BF16");
  }
  if (options.shard_bytes <= 0) return InvalidArgumentError("dataset: shard size must be > 0");
  std::unique_ptr<DatasetWriter> w(new DatasetWriter());
  w->dir_ = dir;
  w->options_ = std::move(options);
  w->row_bytes_ = Tensor::BytesFor({w->options_.hidden_size}, w->options_.dtype);
  w->rows_per_shard_ = std::max<int64_t>(1, w->options_.shard_bytes / w->row_bytes_);

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    return FailedPreconditionError(dir.string() + ": cannot create the output directory" +
                                   (ec ? ": " + ec.message() : ""));
  }
  const fs::path manifest_path = dir / kManifest;
  if (fs::exists(manifest_path)) {
    UC_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(manifest_path));
    json manifest = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (manifest.is_discarded() || !manifest.is_object() ||
        manifest.value("format", "") != kFormat) {
      return FailedPreconditionError(manifest_path.string() +
                                     ": not the manifest of an activation dataset; choose another "
                                     "--out directory");
    }
    UC_RETURN_IF_ERROR(w->Resume(manifest));
  } else {
    for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
      if (!IsDatasetFile(entry.path().filename().string())) {
        return FailedPreconditionError(
            dir.string() +
            ": not empty and holds no activation dataset (no manifest.json; found '" +
            entry.path().filename().string() + "'); choose an empty or new --out directory");
      }
    }
    UC_RETURN_IF_ERROR(w->WriteManifest());
  }
  UC_RETURN_IF_ERROR(w->RemoveUnlisted());
  w->expected_prompt_ = w->committed_.next_prompt;
  w->shard_ = std::make_unique<Shard>();
  w->shard_->number = w->committed_.num_shards;
  w->shard_->first_row = w->committed_.num_rows;
  return w;
}

Status DatasetWriter::Resume(const json& manifest) {
  const std::string where = (dir_ / kManifest).string();
  if (manifest.value("version", 0) != kVersion) {
    return FailedPreconditionError(where + ": dataset format version " +
                                   manifest.value("version", json()).dump() + ", expected " +
                                   std::to_string(kVersion));
  }
  const json stored = manifest.value("fingerprint", json::object());
  std::set<std::string> keys;
  for (const auto& [key, value] : stored.items()) keys.insert(key);
  for (const auto& [key, value] : options_.fingerprint.items()) keys.insert(key);
  for (const std::string& key : keys) {
    const json before = stored.value(key, json());
    const json now = options_.fingerprint.value(key, json());
    if (before == now) continue;
    std::string detail;
    if (before.is_object() && now.is_object()) {  // name the members that differ
      for (const auto& [member, value] : now.items()) {
        const json old_value = before.value(member, json());
        if (old_value == value) continue;
        detail += (detail.empty() ? " (" : "; ") + member + ": the dataset has " +
                  old_value.dump() + ", this run " + value.dump();
      }
      if (!detail.empty()) detail += ")";
    } else if (!Brief(before).empty() && !Brief(now).empty()) {
      detail = " (the dataset has " + Brief(before) + ", this run " + Brief(now) + ")";
    }
    return FailedPreconditionError(dir_.string() + " holds the dataset of another capture: its " +
                                   key + " differs" + detail +
                                   "; capture into a new --out directory, or delete this one to "
                                   "start over");
  }
  try {
    committed_.next_prompt = manifest.at("next_prompt").get<int64_t>();
    committed_skip_rows_ = manifest.at("next_prompt_rows_committed").get<int64_t>();
    committed_.num_rows = manifest.at("num_rows").get<int64_t>();
    committed_.complete = manifest.at("complete").get<bool>();
    for (const json& shard : manifest.at("shards")) shards_.push_back(shard);
    for (const json& r : manifest.at("rejected")) rejected_.push_back(r);
  } catch (const json::exception& e) {
    return FailedPreconditionError(where + ": malformed manifest: " + e.what());
  }
  committed_.num_shards = static_cast<int>(shards_.size());
  for (const json& shard : shards_) {
    for (const char* file_key : {"file", "index"}) {
      const fs::path path = dir_ / shard.value(file_key, "");
      const int64_t want =
          shard.value(std::string(file_key) == "file" ? "bytes" : "index_bytes", int64_t{-1});
      std::error_code ec;
      const auto size = fs::file_size(path, ec);
      if (ec || static_cast<int64_t>(size) != want) {
        return FailedPreconditionError(
            where + ": committed file " + path.string() +
            (ec ? " is missing" : " has the wrong size") +
            "; the dataset is damaged, capture into a new --out directory");
      }
    }
  }
  return OkStatus();
}

Status DatasetWriter::RemoveUnlisted() const {
  std::set<std::string> listed = {kManifest};
  if (committed_.complete) listed.insert(kIndex);
  for (const json& shard : shards_) {
    listed.insert(shard.value("file", ""));
    listed.insert(shard.value("index", ""));
  }
  for (const fs::directory_entry& entry : fs::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    if (!IsDatasetFile(name) || listed.count(name) != 0) continue;
    std::error_code ec;
    fs::remove(entry.path(), ec);
    if (ec) {
      return FailedPreconditionError(entry.path().string() +
                                     ": cannot remove an uncommitted file: " + ec.message());
    }
  }
  return OkStatus();
}

Status DatasetWriter::Append(DatasetPrompt prompt) {
  UC_CHECK(!committed_.complete, "dataset: Append after the dataset is complete");
  UC_CHECK(prompt.index == expected_prompt_, "dataset: prompt %lld appended, expected %lld",
           static_cast<long long>(prompt.index), static_cast<long long>(expected_prompt_));
  // Only the prompt the last commit stopped inside has rows on disk already.
  const int64_t skip = prompt.index == committed_.next_prompt ? committed_skip_rows_ : 0;
  if (static_cast<int64_t>(prompt.rows.size()) < skip) {
    return FailedPreconditionError(
        "prompt '" + prompt.id + "' gave " + std::to_string(prompt.rows.size()) +
        " rows on this run but " + std::to_string(skip) +
        " were already committed: the capture is not reproducible; capture into a new --out "
        "directory");
  }
  if (!prompt.error.empty()) {
    rejected_.push_back(
        {{"prompt_index", prompt.index}, {"id", prompt.id}, {"error", prompt.error}});
  }
  prompt_rows_done_ = skip;
  const PromptJson prompt_json{JsonString(prompt.id),
                               prompt.label.dump(-1, ' ', false, json::error_handler_t::replace)};
  for (size_t i = static_cast<size_t>(skip); i < prompt.rows.size(); ++i) {
    UC_RETURN_IF_ERROR(AppendRow(prompt, prompt_json, prompt.rows[i], i + 1 == prompt.rows.size()));
  }
  ++expected_prompt_;
  return OkStatus();
}

Status DatasetWriter::AppendRow(const DatasetPrompt& prompt, const PromptJson& prompt_json,
                                DatasetRow& row, bool last_of_prompt) {
  const int width = options_.WidthOf(row.point);
  UC_CHECK(static_cast<int>(row.values.size()) == width,
           "dataset: point %s: a row of %zu values, width %d", row.point.c_str(), row.values.size(),
           width);
  const std::string tensor = row.point + "/" + std::to_string(row.layer);
  Shard::Data& data = shard_->tensors[tensor];
  data.width = width;
  const int64_t row_bytes = Tensor::BytesFor({width}, options_.dtype);
  const size_t offset = data.bytes.size();
  data.bytes.resize(offset + static_cast<size_t>(row_bytes));
  if (options_.dtype == DType::kF32) {
    std::memcpy(data.bytes.data() + offset, row.values.data(), static_cast<size_t>(row_bytes));
  } else {
    auto* out = reinterpret_cast<uint16_t*>(data.bytes.data() + offset);
    for (size_t i = 0; i < row.values.size(); ++i) out[i] = F32ToBf16(row.values[i]);
  }
  // The index line, built by hand: it is most of a small model's capture cost otherwise.
  std::string& line = shard_->index;
  line += "{\"row\":" + std::to_string(shard_->first_row + shard_->rows);
  line += ",\"prompt_index\":" + std::to_string(prompt.index);
  line += ",\"prompt_id\":" + prompt_json.id;
  line += ",\"label\":" + prompt_json.label;
  line += ",\"point\":" + JsonString(row.point);
  line += ",\"layer\":" + std::to_string(row.layer);
  line += ",\"tensor_type\":\"" + std::string(Name(row.tensor_type)) + '"';
  line += ",\"token_pos\":" + std::to_string(row.token_pos);
  line += row.is_generated ? ",\"is_generated\":true" : ",\"is_generated\":false";
  line += ",\"generated_index\":" +
          (row.is_generated ? std::to_string(row.generated_index) : std::string("null"));
  line += ",\"token_id\":" + std::to_string(row.token_id);
  line += ",\"token_text\":" + JsonString(row.token_text);
  line += ",\"shard\":\"" + ShardStem(shard_->number) + ".safetensors\"";
  line += ",\"tensor\":" + JsonString(tensor);
  line += ",\"tensor_row\":" + std::to_string(data.rows) + "}\n";
  ++data.rows;
  ++shard_->rows;
  ++rows_appended_;
  ++prompt_rows_done_;
  if (shard_->rows < rows_per_shard_) return OkStatus();
  buffered_next_prompt_ = last_of_prompt ? prompt.index + 1 : prompt.index;
  buffered_skip_rows_ = last_of_prompt ? 0 : prompt_rows_done_;
  return FlushShard();
}

Status DatasetWriter::FlushShard() {
  const std::string stem = ShardStem(shard_->number);
  io::SafetensorsWriter writer;
  json tensors = json::object();
  for (auto& [name, data] : shard_->tensors) {
    UC_RETURN_IF_ERROR(writer.Add(
        name, Tensor::Borrow(data.bytes.data(), {data.rows, data.width}, options_.dtype)));
    tensors[name] = data.rows;
  }
  writer.SetMetadata("format", kFormat);
  writer.SetMetadata("first_row", std::to_string(shard_->first_row));
  const fs::path file = dir_ / (stem + ".safetensors");
  const fs::path index = dir_ / (stem + ".ndjson");
  UC_RETURN_IF_ERROR(writer.WriteFile(file, /*durable=*/true));
  UC_RETURN_IF_ERROR(io::WriteFileAtomically(index, shard_->index, /*durable=*/true));
  json entry = {{"file", file.filename().string()},
                {"index", index.filename().string()},
                {"first_row", shard_->first_row},
                {"rows", shard_->rows},
                {"bytes", static_cast<int64_t>(fs::file_size(file))},
                {"index_bytes", static_cast<int64_t>(shard_->index.size())},
                {"tensors", std::move(tensors)}};
  shards_.push_back(std::move(entry));
  committed_.next_prompt = buffered_next_prompt_;
  committed_skip_rows_ = buffered_skip_rows_;
  committed_.num_rows += shard_->rows;
  committed_.num_shards = static_cast<int>(shards_.size());
  UC_RETURN_IF_ERROR(WriteManifest());
  auto next = std::make_unique<Shard>();
  next->number = shard_->number + 1;
  next->first_row = shard_->first_row + shard_->rows;
  shard_ = std::move(next);
  return OkStatus();
}

Status DatasetWriter::Finish() {
  if (committed_.complete) return OkStatus();
  UC_CHECK(expected_prompt_ == options_.num_prompts, "dataset: Finish after %lld of %lld prompts",
           static_cast<long long>(expected_prompt_), static_cast<long long>(options_.num_prompts));
  buffered_next_prompt_ = options_.num_prompts;
  buffered_skip_rows_ = 0;
  if (shard_->rows > 0) UC_RETURN_IF_ERROR(FlushShard());
  UC_ASSIGN_OR_RETURN(std::unique_ptr<io::FileSink> sink, io::FileSink::Create(dir_ / kIndex));
  for (const json& shard : shards_) {
    UC_ASSIGN_OR_RETURN(std::string lines, ReadWholeFile(dir_ / shard.value("index", "")));
    UC_RETURN_IF_ERROR(sink->Write(lines.data(), lines.size()));
  }
  UC_RETURN_IF_ERROR(sink->Commit(/*durable=*/true));
  committed_.next_prompt = options_.num_prompts;
  committed_skip_rows_ = 0;
  committed_.complete = true;
  return WriteManifest();
}

Status DatasetWriter::WriteManifest() const {
  ordered_json manifest = {
      {"format", kFormat},
      {"version", kVersion},
      {"complete", committed_.complete},
      {"hidden_size", options_.hidden_size},
      {"point_widths", ordered_json(options_.point_widths)},
      {"dtype", DTypeSpelling(options_.dtype)},
      {"row_bytes", row_bytes_},
      {"rows_per_shard", rows_per_shard_},
      {"num_prompts", options_.num_prompts},
      {"num_rows", committed_.num_rows},
      {"next_prompt", committed_.next_prompt},
      {"next_prompt_rows_committed", committed_skip_rows_},
      {"index", committed_.complete ? ordered_json(kIndex) : ordered_json()},
      {"points", ordered_json(options_.points)},
      {"shards", ordered_json(shards_)},
      {"rejected", Committed(rejected_, committed_.next_prompt)},
      {"fingerprint", ordered_json(options_.fingerprint)},
  };
  const std::string text =
      manifest.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n";
  return io::WriteFileAtomically(dir_ / kManifest, text, /*durable=*/true);
}

}  // namespace uc::probe
