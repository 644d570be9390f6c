// The spec parser, document level: YAML (yaml-cpp, typed like PyYAML's safe_load) -> Spec,
// every problem reported at once. spec_point.cc checks each extraction point.
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "io/text_file.h"
#include "probe/spec/spec.h"
#include "probe/spec/spec_point.h"
#include "probe/spec/spec_report.h"
#include "probe/spec/spec_steering.h"
#include "probe/spec/spec_util.h"
#include "probe/spec/spec_yaml.h"

namespace uc::probe {
namespace {

using internal::MapEntry;
using internal::PyQuote;
using internal::Reporter;
using internal::ScalarKind;

// yaml-cpp (0.7) never gets past a ',' outside brackets (a file holding just `,`, or `a\n...\n,`):
// each HandleNextDocument returns one more empty document without consuming the token, so
// LoadAll loops until memory runs out. Such a token is where a document starts at the same
// place as the one before it. Returns its mark, or nullopt when the stream ends. Throws
// YAML::Exception where LoadAll would.
class DocumentStarts : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

  std::vector<YAML::Mark> starts;
};

std::optional<YAML::Mark> FindStuckToken(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts handler;
  while (parser.HandleNextDocument(handler)) {
    const size_t n = handler.starts.size();
    if (n >= 2 && handler.starts[n - 1].pos == handler.starts[n - 2].pos) {
      return handler.starts[n - 1];
    }
  }
  return std::nullopt;
}

const std::vector<std::string_view>& TopKeys() {
  static const std::vector<std::string_view> keys = {"version", "extraction_points", "steering"};
  return keys;
}

// The whole document: top-level keys, every point, then names unique across points.
class SpecParser {
 public:
  explicit SpecParser(const std::string& source) : r_(source) {}

  SpecReport Run(std::string_view text);

 private:
  std::optional<YAML::Node> Load(std::string_view text);
  void ParseTop(const YAML::Node& root, Spec* spec);
  void ParsePoints(const MapEntry& e, Spec* spec);

  Reporter r_;
};

// Byte offset of the first invalid UTF-8 sequence, or npos.
size_t FirstInvalidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t n = 0;
    uint32_t min = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, min = 0x10000;
    } else {
      return i;
    }
    uint32_t cp = c & (0x3F >> n);
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= text.size()) return i;
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += n + 1;
  }
  return std::string_view::npos;
}

std::optional<YAML::Node> SpecParser::Load(std::string_view text) {
  if (const size_t bad = FirstInvalidUtf8(text); bad != std::string_view::npos) {
    const int line = static_cast<int>(std::count(text.begin(), text.begin() + bad, '\n')) + 1;
    r_.Error(line, "", "invalid YAML: not UTF-8 text (byte " + std::to_string(bad) + ")");
    return std::nullopt;
  }
  std::vector<YAML::Node> docs;
  try {
    const std::string owned(text);
    if (const std::optional<YAML::Mark> stuck = FindStuckToken(owned)) {
      const std::string token = stuck->pos >= 0 && static_cast<size_t>(stuck->pos) < owned.size()
                                    ? std::string(1, owned[stuck->pos])
                                    : "token";
      r_.Error(stuck->line + 1, "",
               "invalid YAML: unexpected '" + token + "' (column " +
                   std::to_string(stuck->column + 1) +
                   "). Check the indentation and quoting around that line.");
      return std::nullopt;
    }
    docs = YAML::LoadAll(owned);
  } catch (const YAML::Exception& e) {
    const bool has_mark = !e.mark.is_null() && e.mark.line >= 0;
    r_.Error(has_mark ? e.mark.line + 1 : 0, "",
             "invalid YAML: " + e.msg +
                 (has_mark ? " (column " + std::to_string(e.mark.column + 1) + ")" : "") +
                 ". Check the indentation and quoting around that line.");
    return std::nullopt;
  }
  if (docs.size() > 1) {
    r_.Error(internal::LineOf(docs[1]), "",
             "invalid YAML: expected a single document, but found another document. Keep one "
             "spec per file.");
    return std::nullopt;
  }
  bool bad_yaml = false;
  if (!docs.empty()) {
    for (const internal::YamlProblem& p : internal::FindYamlProblems(docs[0], text)) {
      r_.Error(p.line, "", "invalid YAML: " + p.message);
      bad_yaml = true;
    }
  }
  if (bad_yaml) return std::nullopt;
  if (docs.empty() || !docs[0].IsMap()) {
    const std::string got = docs.empty() || docs[0].IsNull() ? "an empty document"
                            : docs[0].IsSequence()           ? "a list"
                                                             : internal::Describe(docs[0]);
    r_.Error(0, "",
             "expected a YAML mapping with an 'extraction_points' key at the top level, got " +
                 got +
                 ". Start the spec with `extraction_points:` followed by a list of extraction "
                 "points.");
    return std::nullopt;
  }
  return docs[0];
}

void SpecParser::ParsePoints(const MapEntry& e, Spec* spec) {
  if (!e.value.IsSequence()) {
    r_.Error(internal::LineOf(e.key_node), "extraction_points",
             "expected a list of extraction points (got " + internal::Describe(e.value) + ")");
    return;
  }
  std::map<std::string, int> first_index;  // name -> index of its first point
  for (size_t i = 0; i < e.value.size(); ++i) {
    internal::ParsedPoint parsed = internal::ParsePoint(&r_, e.value[i], static_cast<int>(i));
    if (parsed.name.has_value()) {
      const auto [it, inserted] = first_index.emplace(*parsed.name, static_cast<int>(i));
      if (!inserted) {
        r_.Error(parsed.name_line,
                 "extraction_points[" + std::to_string(i) + "] " + PyQuote(*parsed.name) + ".name",
                 "duplicate name " + PyQuote(*parsed.name) + " (also extraction_points[" +
                     std::to_string(it->second) + "]); names must be unique, rename one of them");
      }
    }
    if (parsed.point.has_value()) spec->extraction_points.push_back(std::move(*parsed.point));
  }
}

void SpecParser::ParseTop(const YAML::Node& root, Spec* spec) {
  std::vector<internal::DuplicateKey> duplicates;
  const std::vector<MapEntry> entries = internal::MappingEntries(root, &duplicates);
  for (const internal::DuplicateKey& d : duplicates) {
    r_.Warn(d.line, "",
            "duplicate key " + PyQuote(d.key) + " (first on line " + std::to_string(d.first_line) +
                "); the last value is used");
  }
  bool has_points = false;
  for (const MapEntry& e : entries) {
    if (e.key == "version") {
      if (e.value.IsScalar() && internal::ResolveScalar(e.value).kind == ScalarKind::kString) {
        spec->version = e.value.Scalar();
      } else {
        r_.Error(internal::LineOf(e.key_node), "version",
                 "expected a string (got " + internal::Describe(e.value) +
                     "); quote it: version: \"1\"");
      }
    } else if (e.key == "extraction_points") {
      has_points = true;
      ParsePoints(e, spec);
    } else if (e.key == "steering") {
      internal::ParseSteeringList(&r_, e, spec);
    } else {
      r_.Error(internal::LineOf(e.key_node), "", UnknownKeyMessage(e, TopKeys()));
    }
  }
  if (!has_points) {
    r_.Error(internal::LineOf(root), "",
             "missing required key 'extraction_points'. List the extraction points under it, "
             "or write extraction_points: [] for none.");
  }
  internal::CheckSteeringTriggers(&r_, *spec);
}

SpecReport SpecParser::Run(std::string_view text) {
  SpecReport report;
  Spec spec;
  if (const std::optional<YAML::Node> root = Load(text)) ParseTop(*root, &spec);
  spec.warnings = r_.RenderedWarnings();
  spec.strict_warnings = r_.RenderedStrictWarnings();
  spec.v0_1_deprecations = r_.v0_1_deprecations();
  report.problems = r_.RenderedErrors();
  if (report.problems.empty()) report.spec = std::move(spec);
  return report;
}

// Spec files are kilobytes; anything this large is not one.
constexpr int64_t kMaxSpecFileBytes = int64_t{64} << 20;

// Reads a whole file; nullopt with *why set when it cannot. Only a regular file: a FIFO would
// block and a device like /dev/zero never ends.
std::optional<std::string> ReadFile(const std::filesystem::path& path, std::string* why) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    *why = "is a directory, not a spec file";
    return std::nullopt;
  }
  if (!std::filesystem::exists(path, ec)) {
    *why =
        "file not found; check the path (relative paths are resolved against the current "
        "directory)";
    return std::nullopt;
  }
  StatusOr<std::string> text = io::ReadTextFile(path, kMaxSpecFileBytes, "spec file");
  if (!text.ok()) {
    // The reason alone: callers put the path in front.
    const std::string prefix = "spec file " + path.string() + ": ";
    const std::string& message = text.status().message();
    *why = message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
    return std::nullopt;
  }
  return std::move(text).value();
}

}  // namespace

std::string CombineSpecProblems(const std::vector<std::string>& problems) {
  if (problems.size() == 1) return problems[0];
  std::string out = std::to_string(problems.size()) + " problems in the spec:";
  for (const std::string& p : problems) out += "\n  - " + p;
  return out;
}

SpecReport CheckSpecText(std::string_view text, const std::string& name) {
  return SpecParser(name).Run(text);
}

SpecReport CheckSpecFile(const std::filesystem::path& path, MessageStyle style) {
  const bool ours = style == MessageStyle::kOurs;
  std::string why;
  const std::optional<std::string> text = ReadFile(path, &why);
  if (!text.has_value()) {
    SpecReport report;
    report.problems.push_back(ours ? path.string() + ": " + why : why);
    return report;
  }
  SpecReport report = CheckSpecText(*text, ours ? path.string() : "");
  if (report.spec.has_value()) report.spec->source = path;
  return report;
}

StatusOr<Spec> ParseSpecText(std::string_view text, const std::string& name) {
  SpecReport report = CheckSpecText(text, name);
  if (!report.spec.has_value()) return InvalidArgumentError(CombineSpecProblems(report.problems));
  return std::move(*report.spec);
}

StatusOr<Spec> ParseSpecFile(const std::filesystem::path& path) {
  std::string why;
  const std::optional<std::string> text = ReadFile(path, &why);
  if (!text.has_value()) {
    return NotFoundError("spec file '" + path.string() + "': " + why);
  }
  UC_ASSIGN_OR_RETURN(Spec spec, ParseSpecText(*text, path.string()));
  spec.source = path;
  return spec;
}

}  // namespace uc::probe
