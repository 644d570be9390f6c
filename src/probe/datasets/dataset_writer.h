// File: dataset_writer.h
// -----------------------------------------------------------------------------
// DatasetWriter: the on-disk activation dataset of `undercurrent capture`, written so that
// Python reads it with numpy alone and a crashed or interrupted capture resumes into exactly
// the dataset an uninterrupted run writes.
//
// A dataset is a directory:
//   manifest.json           what the dataset is (points, dtype, hidden_size, point_widths (the
//                           points whose rows are not hidden_size wide), the fingerprint of
//                           the spec, model, prompts and sampling that made it), the committed
//                           shards and where to resume. Rewritten atomically after every shard;
//                           the commit point of everything else.
//   shard-NNNNN.safetensors one 2-D tensor per (point, layer) that has rows in the shard, named
//                           "POINT/LAYER", [rows, width], F32 or BF16; width is the
//                           point's entry in point_widths (router_logits and expert_weights:
//                           num_experts), else hidden_size.
//   shard-NNNNN.ndjson      the shard's rows, one JSON object per line in row order:
//                           row (global), prompt_index, prompt_id, label, point, layer,
//                           tensor_type, token_pos, is_generated, generated_index (null for a
//                           prompt token), token_id, token_text, shard, tensor, tensor_row.
//   index.ndjson            every shard's lines in order; written when the dataset is complete.
//
// Rows are ordered by prompt (file order), then as each prompt's rows are given (the capture
// command gives them in (token_pos, layer, point) order). A shard holds exactly
// rows_per_shard = max(1, shard_bytes / row_bytes) rows (the last one fewer; row_bytes is that
// of a hidden_size row, the widest a model has), so shard
// boundaries depend only on the row sequence: a resumed run cuts them where an uninterrupted
// one does. Every file is written as NAME.tmp, fsynced and renamed; a shard and its index are
// renamed before the manifest that lists them, so a crash at any point leaves the previous
// manifest valid, and Open() deletes whatever it does not list.
//
// Not thread-safe: one writer, one thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "probe/spec/spec.h"
#include "tensor/dtype.h"

namespace uc::probe {

// One captured activation and what the index says about it.
struct DatasetRow {
  std::string point;  // extraction point name
  int layer = 0;
  TensorType tensor_type = TensorType::kResidualStream;
  int64_t token_pos = 0;
  bool is_generated = false;
  int64_t generated_index = -1;  // -1 for a prompt token
  int32_t token_id = -1;
  std::string token_text;     // the token's bytes (invalid UTF-8 is replaced in the index)
  std::vector<float> values;  // [width of the point: DatasetOptions::WidthOf]
};

// What one prompt contributed.
struct DatasetPrompt {
  int64_t index = 0;  // position in the prompts file, 0-based
  std::string id;
  nlohmann::json label;  // null when the prompt has none
  std::vector<DatasetRow> rows;
  std::string error;  // set when the engine rejected the prompt (then no rows)
};

struct DatasetOptions {
  int hidden_size = 0;
  // Points whose rows have another width than hidden_size (router_logits / expert_weights:
  // num_experts), by point name; each > 0.
  std::map<std::string, int> point_widths;
  int WidthOf(const std::string& point) const {
    auto it = point_widths.find(point);
    return it == point_widths.end() ? hidden_size : it->second;
  }
  DType dtype = DType::kF32;                        // kF32 or kBF16
  int64_t shard_bytes = int64_t{64} << 20;          // tensor bytes per shard at most (>= one row)
  int64_t num_prompts = 0;                          // prompts the finished dataset will cover
  nlohmann::json points = nlohmann::json::array();  // stored in the manifest as given
  // What makes two runs produce the same dataset (spec, model, prompts, sampling, dtype, shard
  // size): an object whose members are compared one by one when a directory is reopened.
  nlohmann::json fingerprint = nlohmann::json::object();
};

// Resume position and totals, as committed in the manifest.
struct DatasetProgress {
  int64_t next_prompt = 0;  // prompts before it are wholly in committed shards
  int64_t num_rows = 0;     // committed rows
  int num_shards = 0;
  bool complete = false;
};

class DatasetWriter {
 public:
  // Opens `dir` for writing: creates it (or adopts an empty directory), or resumes the dataset
  // it holds. FailedPrecondition naming the directory and the differing fingerprint member
  // (e.g. "spec") when it holds another capture's dataset, or when it is not empty and holds no
  // dataset, or when a committed shard is missing or has the wrong size. Files the
  // manifest does not list (temporaries, shards written after the last commit) are removed.
  static StatusOr<std::unique_ptr<DatasetWriter>> Open(const std::filesystem::path& dir,
                                                       DatasetOptions options);
  ~DatasetWriter();

  // Where the committed dataset ends; the caller skips prompts before next_prompt.
  DatasetProgress committed() const { return committed_; }
  int64_t rows_per_shard() const { return rows_per_shard_; }
  // Rows appended by this writer (committed or buffered), for progress reports.
  int64_t rows_appended() const { return rows_appended_; }

  // Adds one prompt's rows; writes and commits a shard whenever one fills. The first prompt
  // appended must be committed().next_prompt (its rows already committed are dropped), then
  // each next index in turn. REQUIRES: not complete; rows of WidthOf(point) values.
  Status Append(DatasetPrompt prompt);
  // Writes the last, partial shard, index.ndjson and the final manifest (complete: true).
  // REQUIRES: every prompt up to num_prompts appended.
  Status Finish();

  struct Shard;

 private:
  DatasetWriter() = default;
  Status Resume(const nlohmann::json& manifest);
  Status RemoveUnlisted() const;
  struct PromptJson {  // a prompt's fields as they appear in every index line of its rows
    std::string id;
    std::string label;
  };
  Status AppendRow(const DatasetPrompt& prompt, const PromptJson& prompt_json, DatasetRow& row,
                   bool last_of_prompt);
  Status FlushShard();
  Status WriteManifest() const;

  std::filesystem::path dir_;
  DatasetOptions options_;
  int64_t row_bytes_ = 0;
  int64_t rows_per_shard_ = 1;
  DatasetProgress committed_;
  int64_t committed_skip_rows_ = 0;       // rows of prompt next_prompt already committed
  std::vector<nlohmann::json> shards_;    // committed shard entries (manifest "shards")
  std::vector<nlohmann::json> rejected_;  // {prompt_index, id, error}, in prompt order

  // Appending.
  int64_t expected_prompt_ = 0;
  int64_t rows_appended_ = 0;
  int64_t prompt_rows_done_ = 0;      // rows of the prompt being appended, incl. committed ones
  int64_t buffered_next_prompt_ = 0;  // commit position once the buffered rows are written
  int64_t buffered_skip_rows_ = 0;
  std::unique_ptr<Shard> shard_;  // the shard being filled
};

}  // namespace uc::probe
