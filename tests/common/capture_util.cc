#include "common/capture_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "common/test_util.h"
#include "io/safetensors/safetensors.h"
#include "tensor/dtype.h"

namespace uc::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string Slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

CliRun RunCapture(const std::string& args, const std::string& env) {
  CliRun run;
  const std::string prefix = env.empty() ? "" : "env " + env + " ";
  run.exit_code =
      RunCommand(prefix + "'" + CliBinary().string() + "' capture " + args, &run.output);
  return run;
}

LoadedDataset LoadDataset(const fs::path& dir) {
  LoadedDataset d;
  d.manifest = LoadJson(dir / "manifest.json");
  EXPECT_TRUE(d.manifest.is_object() && d.manifest.value("complete", false))
      << dir << " is not a complete dataset";
  if (!d.manifest.is_object()) return d;
  std::istringstream lines(Slurp(dir / "index.ndjson"));
  std::map<std::string, std::shared_ptr<const io::SafetensorsFile>> shards;
  for (std::string line; std::getline(lines, line);) {
    d.index_lines.push_back(line);
    json row = json::parse(line);
    const std::string shard = row["shard"];
    if (shards.count(shard) == 0) {
      auto file = io::SafetensorsFile::Open(dir / shard);
      EXPECT_TRUE(file.ok()) << file.status().message();
      if (!file.ok()) return d;
      shards[shard] = *file;
    }
    StatusOr<Tensor> t = shards[shard]->Get(row["tensor"].get<std::string>());
    EXPECT_TRUE(t.ok()) << t.status().message();
    if (!t.ok()) return d;
    const int64_t r = row["tensor_row"].get<int64_t>();
    const int64_t width = t->dim(1);  // hidden_size, or the point's entry in point_widths
    std::vector<float> values(static_cast<size_t>(width));
    for (int64_t k = 0; k < width; ++k) {
      const int64_t i = r * width + k;
      values[static_cast<size_t>(k)] =
          t->dtype() == DType::kBF16 ? Bf16ToF32(t->data<uint16_t>()[i]) : t->data<float>()[i];
    }
    d.values.push_back(std::move(values));
    d.index.push_back(std::move(row));
  }
  EXPECT_EQ(static_cast<int64_t>(d.index.size()), d.manifest["num_rows"].get<int64_t>());
  return d;
}

std::string CompareDatasets(const LoadedDataset& a, const LoadedDataset& b, double tolerance,
                            double* max_rel, double* max_abs) {
  double worst_rel = 0.0, worst_abs = 0.0;
  std::string problem;
  if (a.index_lines.size() != b.index_lines.size()) {
    problem = "row counts differ: " + std::to_string(a.index_lines.size()) + " vs " +
              std::to_string(b.index_lines.size());
  }
  for (size_t i = 0; problem.empty() && i < a.index_lines.size(); ++i) {
    if (a.index_lines[i] != b.index_lines[i]) {
      problem = "index row " + std::to_string(i) + " differs:\n  " + a.index_lines[i] + "\n  " +
                b.index_lines[i];
      break;
    }
    double scale = 0.0, diff = 0.0;
    for (size_t k = 0; k < a.values[i].size(); ++k) {
      scale = std::max(scale, static_cast<double>(std::fabs(b.values[i][k])));
      diff = std::max(diff, static_cast<double>(std::fabs(a.values[i][k] - b.values[i][k])));
    }
    const double rel = scale > 0 ? diff / scale : diff;
    worst_rel = std::max(worst_rel, rel);
    worst_abs = std::max(worst_abs, diff);
    if (rel > tolerance) {
      problem = "row " + std::to_string(i) + " (" + a.index_lines[i] + ") differs by " +
                std::to_string(rel) + " relative";
    }
  }
  if (max_rel != nullptr) *max_rel = worst_rel;
  if (max_abs != nullptr) *max_abs = worst_abs;
  return problem;
}

std::map<std::string, std::string> DirectoryFiles(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file()) files[entry.path().filename().string()] = Slurp(entry.path());
  }
  return files;
}

int RunPythonCompare(const fs::path& a, const fs::path& b, double tolerance, std::string* output) {
  const fs::path script = fs::path(UC_SOURCE_DIR) / "tests" / "integration" / "compare_datasets.py";
  std::ostringstream command;
  command << "'" << UC_TEST_PYTHON << "' '" << script.string() << "' '" << a.string() << "' '"
          << b.string() << "' --tolerance " << tolerance;
  return RunCommand(command.str(), output);
}

}  // namespace uc::testing
