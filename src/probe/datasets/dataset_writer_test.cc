// DatasetWriter: shard boundaries, the files Python reads, resuming from every commit point into
// the same bytes as an uninterrupted run, and the refusals (another capture's dataset, a
// directory that is not a dataset, a damaged one). Also CaptureCollector's canonical order.
#include "probe/datasets/dataset_writer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "io/safetensors/safetensors.h"
#include "probe/runtime/capture.h"

namespace uc::probe {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kHidden = 4;

fs::path Scratch(const std::string& name) {
  const fs::path dir = fs::path(UC_BINARY_DIR) / "test_scratch" / "dataset_writer" / name;
  fs::remove_all(dir);
  fs::create_directories(dir.parent_path());
  return dir;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every file of a directory, name -> bytes.
std::map<std::string, std::string> Files(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    files[entry.path().filename().string()] = ReadFile(entry.path());
  }
  return files;
}

// Prompt i has (i % 4) rows on two points; prompt 5 is rejected.
DatasetPrompt MakePrompt(int64_t i) {
  DatasetPrompt p;
  p.index = i;
  p.id = "p" + std::to_string(i);
  p.label = i % 2 == 0;
  if (i == 5) {
    p.error = "prompt too long";
    return p;
  }
  for (int r = 0; r < i % 4; ++r) {
    DatasetRow row;
    row.point = r % 2 == 0 ? "a" : "b";
    row.layer = r % 2 == 0 ? 1 : 3;
    row.token_pos = r;
    row.token_id = 100 + r;
    row.token_text = r == 2 ? std::string("\xe2\x96", 2) : "tok";  // a partial UTF-8 piece
    for (int k = 0; k < kHidden; ++k)
      row.values.push_back(static_cast<float>(i * 10 + r) + 0.25f * k);
    p.rows.push_back(std::move(row));
  }
  return p;
}

constexpr int64_t kPrompts = 23;

DatasetOptions Options(DType dtype = DType::kF32) {
  DatasetOptions o;
  o.hidden_size = kHidden;
  o.dtype = dtype;
  o.shard_bytes = 5 * kHidden * 4;  // five F32 rows
  o.num_prompts = kPrompts;
  o.points = json::array({{{"name", "a"}}, {{"name", "b"}}});
  o.fingerprint = {{"spec", "points a and b"}, {"dtype", "float32"}};
  return o;
}

// Appends prompts [from, to) and, when `finish`, finishes.
void Write(const fs::path& dir, int64_t to, bool finish, DatasetOptions options = Options()) {
  StatusOr<std::unique_ptr<DatasetWriter>> w = DatasetWriter::Open(dir, std::move(options));
  ASSERT_TRUE(w.ok()) << w.status().message();
  for (int64_t i = (*w)->committed().next_prompt; i < to; ++i) {
    ASSERT_TRUE((*w)->Append(MakePrompt(i)).ok());
  }
  if (finish) {
    ASSERT_TRUE((*w)->Finish().ok());
  }
}

TEST(DatasetWriterTest, ShardsHoldFixedRowCountsAndReadBack) {
  const fs::path dir = Scratch("basic");
  Write(dir, kPrompts, true);
  const json manifest = json::parse(ReadFile(dir / "manifest.json"));
  EXPECT_TRUE(manifest["complete"].get<bool>());
  int64_t total_rows = 0;
  for (int64_t i = 0; i < kPrompts; ++i)
    total_rows += static_cast<int64_t>(MakePrompt(i).rows.size());
  EXPECT_EQ(manifest["num_rows"].get<int64_t>(), total_rows);
  EXPECT_EQ(manifest["rows_per_shard"].get<int64_t>(), 5);
  const json& shards = manifest["shards"];
  ASSERT_EQ(static_cast<int64_t>(shards.size()), (total_rows + 4) / 5);
  for (size_t s = 0; s + 1 < shards.size(); ++s) EXPECT_EQ(shards[s]["rows"].get<int64_t>(), 5);
  ASSERT_EQ(manifest["rejected"].size(), 1u);
  EXPECT_EQ(manifest["rejected"][0]["id"], "p5");

  // index.ndjson is the shards' lines; every line points at its activation.
  std::istringstream index(ReadFile(dir / "index.ndjson"));
  std::string line;
  int64_t row = 0;
  std::map<std::string, std::shared_ptr<const io::SafetensorsFile>> files;
  for (int64_t i = 0; i < kPrompts; ++i) {
    const DatasetPrompt p = MakePrompt(i);
    for (const DatasetRow& expected : p.rows) {
      ASSERT_TRUE(std::getline(index, line));
      const json j = json::parse(line);
      EXPECT_EQ(j["row"].get<int64_t>(), row++);
      EXPECT_EQ(j["prompt_id"], p.id);
      EXPECT_EQ(j["label"], p.label);
      EXPECT_EQ(j["token_pos"].get<int64_t>(), expected.token_pos);
      EXPECT_TRUE(j["generated_index"].is_null());
      const std::string shard = j["shard"];
      if (files.count(shard) == 0) {
        auto opened = io::SafetensorsFile::Open(dir / shard);
        ASSERT_TRUE(opened.ok()) << opened.status().message();
        files[shard] = *opened;
      }
      StatusOr<Tensor> t = files[shard]->Get(j["tensor"].get<std::string>());
      ASSERT_TRUE(t.ok());
      ASSERT_EQ(t->dtype(), DType::kF32);
      const float* values = t->data<float>() + j["tensor_row"].get<int64_t>() * kHidden;
      for (int k = 0; k < kHidden; ++k)
        EXPECT_EQ(values[k], expected.values[static_cast<size_t>(k)]);
    }
  }
  EXPECT_FALSE(std::getline(index, line));
}

TEST(DatasetWriterTest, Bf16RoundsEveryValue) {
  const fs::path dir = Scratch("bf16");
  DatasetOptions o = Options(DType::kBF16);
  o.shard_bytes = 1 << 20;
  Write(dir, kPrompts, true, o);
  auto file = io::SafetensorsFile::Open(dir / "shard-00000.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().message();
  StatusOr<Tensor> a = (*file)->Get("a/1");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->dtype(), DType::kBF16);
  // The first row of a/1 is prompt 1's row 0: values 10, 10.25, 10.5, 10.75 (exact in bf16).
  const auto* bits = a->data<uint16_t>();
  EXPECT_EQ(Bf16ToF32(bits[0]), 10.0f);
  EXPECT_EQ(Bf16ToF32(bits[3]), 10.75f);
}

// A crash after any number of prompts (the writer dropped without Finish: only what the last
// manifest lists survives), with debris of an interrupted shard write, resumes into the same
// bytes as one uninterrupted run.
TEST(DatasetWriterTest, ResumingFromAnyCrashPointGivesTheSameFiles) {
  const fs::path reference = Scratch("reference");
  Write(reference, kPrompts, true);
  const auto want = Files(reference);
  for (int64_t crash_at = 0; crash_at <= kPrompts; ++crash_at) {
    SCOPED_TRACE("crash after prompt " + std::to_string(crash_at));
    const fs::path dir = Scratch("crash" + std::to_string(crash_at));
    Write(dir, crash_at, false);
    const json manifest = json::parse(ReadFile(dir / "manifest.json"));
    const int shards = static_cast<int>(manifest["shards"].size());
    char stem[32];
    std::snprintf(stem, sizeof(stem), "shard-%05d", shards);
    std::ofstream(dir / (std::string(stem) + ".safetensors.tmp")) << "half a shard";
    std::ofstream(dir / (std::string(stem) + ".safetensors")) << "renamed, not committed";
    std::ofstream(dir / "manifest.json.tmp") << "{";
    Write(dir, kPrompts, true);
    EXPECT_EQ(Files(dir), want);
  }
}

TEST(DatasetWriterTest, ReopeningACompleteDatasetChangesNothing) {
  const fs::path dir = Scratch("complete");
  Write(dir, kPrompts, true);
  const auto before = Files(dir);
  StatusOr<std::unique_ptr<DatasetWriter>> w = DatasetWriter::Open(dir, Options());
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE((*w)->committed().complete);
  EXPECT_TRUE((*w)->Finish().ok());
  EXPECT_EQ(Files(dir), before);
}

TEST(DatasetWriterTest, RefusesAnotherCapturesDataset) {
  const fs::path dir = Scratch("other");
  Write(dir, 7, false);
  DatasetOptions o = Options();
  o.fingerprint["dtype"] = "bf16";
  StatusOr<std::unique_ptr<DatasetWriter>> w = DatasetWriter::Open(dir, o);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("dtype differs (the dataset has float32, this run bf16)"),
            std::string::npos)
      << w.status().message();
  o = Options();
  o.fingerprint["spec"] = "another spec";
  w = DatasetWriter::Open(dir, o);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("its spec differs"), std::string::npos);
}

TEST(DatasetWriterTest, RefusesADirectoryThatIsNotADataset) {
  const fs::path dir = Scratch("not_a_dataset");
  fs::create_directories(dir);
  std::ofstream(dir / "notes.txt") << "mine";
  StatusOr<std::unique_ptr<DatasetWriter>> w = DatasetWriter::Open(dir, Options());
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("holds no activation dataset"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir / "notes.txt"));
  std::ofstream(dir / "manifest.json") << "[1, 2]";
  w = DatasetWriter::Open(dir, Options());
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("not the manifest of an activation dataset"),
            std::string::npos);
}

TEST(DatasetWriterTest, RefusesADamagedDataset) {
  const fs::path dir = Scratch("damaged");
  Write(dir, 12, false);
  fs::resize_file(dir / "shard-00000.safetensors", 10);
  StatusOr<std::unique_ptr<DatasetWriter>> w = DatasetWriter::Open(dir, Options());
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("has the wrong size"), std::string::npos);
}

TEST(CaptureCollectorTest, RefusesConcatenatedPointsNamingThem) {
  StatusOr<Spec> spec = ParseSpecText(R"(version: "1"
extraction_points:
  - {name: z, layers: [0, 2], tensor_type: residual_stream, position: "prompt[-1]", probe_type: linear, probe_kind: single_shot}
  - {name: cat, layers: [0, 2], tensor_type: residual_stream, combine: concat, position: "prompt[-1]", probe_type: linear, probe_kind: single_shot}
)",
                                      "spec.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  const Status refused = CheckCapturable(*spec);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("extraction_points[1] 'cat'.combine: capture stores one row"),
            std::string::npos)
      << refused.message();
  spec->extraction_points.pop_back();
  EXPECT_TRUE(CheckCapturable(*spec).ok());
}

TEST(CaptureCollectorTest, TakesRecordsInTokenLayerPointOrder) {
  StatusOr<Spec> spec = ParseSpecText(R"(version: "1"
extraction_points:
  - {name: z, layers: [0, 2], tensor_type: residual_stream, position: "prompt[-1]", probe_type: linear, probe_kind: single_shot}
  - {name: a, layers: [2], tensor_type: mlp_out, position: "generated[*]", probe_type: ema, probe_kind: trajectory, execution_mode: async}
)");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  const Spec capture = CaptureSpec(*spec);
  EXPECT_EQ(capture.extraction_points[0].probe_type, kCaptureSingleShot);
  EXPECT_EQ(capture.extraction_points[1].probe_type, kCaptureTrajectory);
  EXPECT_EQ(capture.extraction_points[1].execution_mode, ExecutionMode::kInline);
  EXPECT_EQ(CapturePointsJson(*spec)[1]["position"], "generated[*]");

  CaptureCollector collector(*spec);
  ProbeRegistry registry;
  ASSERT_TRUE(collector.RegisterProbes(registry).ok());
  StatusOr<std::unique_ptr<ProbeType>> type =
      registry.Create(capture.extraction_points[1], ProbeEnv{});
  ASSERT_TRUE(type.ok()) << type.status().message();
  std::unique_ptr<Probe> probe = (*type)->Spawn();
  auto record = [](std::string point, int layer, int64_t pos) {
    ActivationRecord r;
    r.request_id = "r";
    r.point = std::move(point);
    r.layer = layer;
    r.token_pos = pos;
    return r;
  };
  for (const ActivationRecord& r : {record("a", 2, 1), record("z", 2, 1), record("z", 0, 1),
                                    record("z", 2, 0), record("a", 2, 0)}) {
    EXPECT_FALSE(probe->OnActivation(r).has_value());
  }
  EXPECT_EQ(collector.num_records(), 5);
  const std::vector<ActivationRecord> taken = collector.Take("r");
  std::vector<std::tuple<int64_t, int, std::string>> order;
  for (const ActivationRecord& r : taken) order.emplace_back(r.token_pos, r.layer, r.point);
  EXPECT_EQ(order, (std::vector<std::tuple<int64_t, int, std::string>>{
                       {0, 2, "z"}, {0, 2, "a"}, {1, 0, "z"}, {1, 2, "z"}, {1, 2, "a"}}));
  EXPECT_TRUE(collector.Take("r").empty());
}

}  // namespace
}  // namespace uc::probe
