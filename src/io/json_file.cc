#include "io/json_file.h"

#include <algorithm>
#include <string>

#include "io/mapped_file.h"

namespace uc::io {
namespace {

// nlohmann's message without its "[json.exception...] parse error at line L, column C: " prefix.
std::string ParseErrorDetail(const char* what) {
  std::string_view text(what);
  const size_t column = text.find(", column ");
  const size_t colon = column == std::string_view::npos ? text.find("] ") : text.find(": ", column);
  if (colon == std::string_view::npos) return std::string(text);
  return std::string(text.substr(colon + 2));
}

Status ParseError(std::string_view text, std::string_view source,
                  const nlohmann::json::parse_error& e) {
  // e.byte is the 1-based index of the last character read (size + 1 at end of input).
  const size_t pos = std::min<size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
  const std::string_view before = text.substr(0, pos);
  const size_t line = 1 + static_cast<size_t>(std::count(before.begin(), before.end(), '\n'));
  const size_t line_start = before.rfind('\n');
  const size_t column = line_start == std::string_view::npos ? pos + 1 : pos - line_start;
  return InvalidArgumentError(std::string(source) + ": JSON parse error at line " +
                              std::to_string(line) + ", column " + std::to_string(column) +
                              " (byte " + std::to_string(pos) + "): " + ParseErrorDetail(e.what()));
}

}  // namespace

size_t JsonDepthExceededAt(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::string_view::npos;
}

StatusOr<nlohmann::json> ParseJson(std::string_view text, std::string_view source) {
  if (JsonDepthExceededAt(text) != std::string_view::npos) {
    return InvalidArgumentError(std::string(source) + ": JSON nested deeper than " +
                                std::to_string(kMaxJsonDepth) + " levels");
  }
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    return ParseError(text, source, e);
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError(std::string(source) + ": invalid JSON: " + e.what());
  }
}

StatusOr<nlohmann::json> ReadJsonFile(const std::filesystem::path& path) {
  UC_ASSIGN_OR_RETURN(std::shared_ptr<const MappedFile> file, MappedFile::Open(path));
  const std::string_view text(reinterpret_cast<const char*>(file->data()), file->size());
  return ParseJson(text, file->path());
}

}  // namespace uc::io
