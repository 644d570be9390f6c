#include "engine/prompts_file.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/did_you_mean.h"
#include "base/fingerprint.h"
#include "io/text_file.h"

namespace uc::engine {
namespace {

using nlohmann::json;

constexpr const char* kFields[] = {
    "id",    "prompt", "prompt_ids", "max_tokens", "temperature",    "top_k",     "top_p",
    "min_p", "seed",   "stop",       "label",      "stop_token_ids", "ignore_eos"};

std::string Suggest(const std::string& key) {
  return DidYouMean(key, std::vector<std::string>(std::begin(kFields), std::end(kFields)));
}

// Reads one line's object into `request`; appends problems to `errors` prefixed by `where`.
void ParseObject(const json& obj, const std::string& where, GenerateRequest& request,
                 std::vector<std::string>& errors) {
  auto fail = [&](const std::string& field, const std::string& message) {
    errors.push_back(where + ": field '" + field + "': " + message);
  };
  for (const auto& [key, value] : obj.items()) {
    if (std::find_if(std::begin(kFields), std::end(kFields),
                     [&key = key](const char* f) { return key == f; }) == std::end(kFields)) {
      errors.push_back(where + ": unknown field '" + key + "'" + Suggest(key));
    }
  }
  if (!obj.contains("id")) {
    errors.push_back(where + ": missing field 'id'");
  } else if (obj["id"].is_string()) {
    request.id = obj["id"].get<std::string>();
    if (request.id.empty()) fail("id", "must not be empty");
  } else if (obj["id"].is_number_integer()) {
    request.id = std::to_string(obj["id"].get<int64_t>());
  } else {
    fail("id", "must be a string or an integer");
  }
  const bool has_text = obj.contains("prompt"), has_ids = obj.contains("prompt_ids");
  if (has_text == has_ids) {
    errors.push_back(where + ": give exactly one of 'prompt' (text) and 'prompt_ids'");
  } else if (has_text) {
    if (obj["prompt"].is_string()) {
      request.prompt = Prompt::Text(obj["prompt"].get<std::string>());
    } else {
      fail("prompt", "must be a string");
    }
  } else {
    const json& ids = obj["prompt_ids"];
    std::vector<int32_t> values;
    bool ok = ids.is_array();
    for (const json& v : ids) {
      ok = ok && v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX;
      if (ok) values.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
    if (ok) {
      request.prompt = Prompt::Ids(std::move(values));
    } else {
      fail("prompt_ids", "must be an array of non-negative token ids");
    }
  }
  worker::SamplingParams& p = request.params;
  auto number = [&](const char* field, auto& target) {
    if (!obj.contains(field)) return;
    const json& v = obj[field];
    using T = std::decay_t<decltype(target)>;
    if constexpr (std::is_integral_v<T>) {
      if (!v.is_number_integer()) return fail(field, "must be an integer");
      target = static_cast<T>(v.get<int64_t>());
    } else {
      if (!v.is_number()) return fail(field, "must be a number");
      target = v.get<T>();
    }
  };
  number("max_tokens", p.max_tokens);
  number("temperature", p.temperature);
  number("top_k", p.top_k);
  number("top_p", p.top_p);
  number("min_p", p.min_p);
  if (obj.contains("seed")) {
    if (obj["seed"].is_number_unsigned()) {
      p.seed = obj["seed"].get<uint64_t>();
    } else {
      fail("seed", "must be a non-negative integer");
    }
  }
  if (obj.contains("stop")) {
    const json& v = obj["stop"];
    p.stop.clear();
    if (v.is_string()) {
      p.stop.push_back(v.get<std::string>());
    } else if (v.is_array() &&
               std::all_of(v.begin(), v.end(), [](const json& s) { return s.is_string(); })) {
      for (const json& s : v) p.stop.push_back(s.get<std::string>());
    } else {
      fail("stop", "must be a string or an array of strings");
    }
  }
  if (obj.contains("stop_token_ids")) {
    const json& v = obj["stop_token_ids"];
    p.stop_token_ids.clear();
    if (v.is_array() &&
        std::all_of(v.begin(), v.end(), [](const json& s) { return s.is_number_integer(); })) {
      for (const json& s : v) p.stop_token_ids.push_back(s.get<int32_t>());
    } else {
      fail("stop_token_ids", "must be an array of token ids");
    }
  }
  if (obj.contains("ignore_eos")) {
    if (obj["ignore_eos"].is_boolean()) {
      p.ignore_eos = obj["ignore_eos"].get<bool>();
    } else {
      fail("ignore_eos", "must be true or false");
    }
  }
}

}  // namespace

StatusOr<std::vector<GenerateRequest>> ParsePrompts(std::string_view text, const std::string& name,
                                                    const worker::SamplingParams& defaults) {
  std::vector<GenerateRequest> requests;
  std::vector<std::string> errors;
  std::set<std::string> seen;
  std::istringstream in{std::string(text)};
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (std::all_of(line.begin(), line.end(), [](unsigned char c) { return std::isspace(c); })) {
      continue;
    }
    const std::string where = name + ":" + std::to_string(number);
    const json obj = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (obj.is_discarded()) {
      errors.push_back(where + ": not valid JSON");
      continue;
    }
    if (!obj.is_object()) {
      errors.push_back(where + ": expected a JSON object with 'id' and 'prompt'");
      continue;
    }
    GenerateRequest request{"", Prompt::Text(""), defaults};
    const size_t before = errors.size();
    ParseObject(obj, where, request, errors);
    if (errors.size() == before && !seen.insert(request.id).second) {
      errors.push_back(where + ": id '" + request.id + "' appears more than once");
    }
    requests.push_back(std::move(request));
  }
  if (!errors.empty()) {
    std::string message = std::to_string(errors.size()) + " problem" +
                          (errors.size() == 1 ? "" : "s") + " in the prompts file:";
    for (const std::string& e : errors) message += "\n  " + e;
    return InvalidArgumentError(message);
  }
  if (requests.empty()) return InvalidArgumentError(name + ": no prompts (the file is empty)");
  return requests;
}

StatusOr<std::vector<GenerateRequest>> ReadPromptsFile(const std::filesystem::path& path,
                                                       const worker::SamplingParams& defaults) {
  UC_ASSIGN_OR_RETURN(const std::string text,
                      io::ReadTextFile(path, kMaxPromptsFileBytes, "prompts file"));
  return ParsePrompts(text, path.string(), defaults);
}

StatusOr<int64_t> ParseByteSize(std::string_view text) {
  std::string s(text);
  size_t used = 0;
  double value = 0.0;
  try {
    value = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = s.substr(used);
  std::transform(unit.begin(), unit.end(), unit.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  double scale = 0.0;
  if (unit.empty() || unit == "b") scale = 1;
  if (unit == "k" || unit == "kib" || unit == "kb") scale = 1024.0;
  if (unit == "m" || unit == "mib" || unit == "mb") scale = 1024.0 * 1024;
  if (unit == "g" || unit == "gib" || unit == "gb") scale = 1024.0 * 1024 * 1024;
  if (used == 0 || scale == 0.0 || !(value > 0) || !std::isfinite(value * scale) ||
      value * scale > 9.0e18) {
    return InvalidArgumentError("'" + s + "' is not a size; write e.g. 512MiB or 2GiB");
  }
  return static_cast<int64_t>(value * scale);
}

StatusOr<PromptSet> ReadPromptSet(const std::string& path, const worker::SamplingParams& defaults) {
  // A FIFO or a device (/dev/urandom) is refused at once, a huge file by its size.
  UC_ASSIGN_OR_RETURN(const std::string text,
                      io::ReadTextFile(path, kMaxPromptsFileBytes, "prompts file"));
  PromptSet set;
  UC_ASSIGN_OR_RETURN(set.requests, ParsePrompts(text, path, defaults));
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (std::all_of(line.begin(), line.end(), [](unsigned char c) { return std::isspace(c); })) {
      continue;
    }
    const json obj = json::parse(line, nullptr, /*allow_exceptions=*/false);
    set.labels.push_back(obj.is_object() ? obj.value("label", json()) : json());
  }
  set.hash = Fnv1a64(text);
  // A sampled prompt without a seed gets one from its id: a rerun regenerates the same tokens.
  for (GenerateRequest& r : set.requests) {
    if (!r.params.greedy() && !r.params.seed.has_value()) r.params.seed = Fnv1a64(r.id);
  }
  return set;
}

}  // namespace uc::engine
