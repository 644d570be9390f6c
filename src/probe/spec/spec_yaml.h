// File: spec_yaml.h
// -----------------------------------------------------------------------------
// YAML reading for the spec parser (internal to probe/). yaml-cpp keeps every scalar as text;
// these helpers give scalars the types Undercurrent v0.1 sees through PyYAML's safe_load
// (YAML 1.1 implicit resolution: `yes`/`off` are booleans, `0x1F` and `017` are ints, `1e3`
// without a dot is a string, quoted scalars are always strings), apply `<<` merge keys, and
// convert nodes to JSON for probe_args.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace uc::probe::internal {

enum class ScalarKind { kNull, kBool, kInt, kFloat, kString, kTimestamp, kInvalid };

struct Scalar {
  ScalarKind kind = ScalarKind::kNull;
  std::string text;                          // the scalar as written (after YAML unescaping)
  bool boolean = false;                      // kBool
  int64_t integer = 0;                       // kInt, when !int_overflow
  bool int_overflow = false;                 // kInt outside int64
  std::optional<uint64_t> unsigned_integer;  // kInt >= 0 that fits in uint64
  double real = 0.0;                         // kFloat (and kInt as a double)
  std::string error;                         // kInvalid: why (e.g. an !!int tag on a non-integer)
};

// The typed value of a scalar or null node. REQUIRES: node is a scalar or null.
Scalar ResolveScalar(const YAML::Node& node);

// How a plain (unquoted, untagged) scalar with this text resolves.
ScalarKind PlainScalarKind(const std::string& text);

// 1-based line of a node (0 when unknown).
int LineOf(const YAML::Node& node);

// The value as Python would show it in an error message: None, True, 5, 3.5, 'text',
// "a dict", "a list".
std::string Describe(const YAML::Node& node);

struct MapEntry {
  std::string key;  // the key's text
  YAML::Node key_node;
  YAML::Node value;
};

struct DuplicateKey {
  std::string key;
  int first_line = 0;
  int line = 0;  // of the occurrence that wins (the last)
};

// The entries of a mapping in file order, as PyYAML builds the dict: `<<` merge keys
// (a mapping or a list of mappings, earlier ones winning) fill in keys the mapping does not
// set itself, and of duplicate keys the last one wins (each reported in `duplicates`).
std::vector<MapEntry> MappingEntries(const YAML::Node& map, std::vector<DuplicateKey>* duplicates);

// A problem with the YAML itself that safe_load would refuse: a tag it has no constructor for,
// a scalar that contradicts its explicit tag, a bad `<<` merge, or a quoted scalar that is never
// closed (yaml-cpp 0.7 takes one running to the end of a file that ends in a newline).
struct YamlProblem {
  int line = 0;
  std::string message;
};
// Every such problem in the document parsed from `text`.
std::vector<YamlProblem> FindYamlProblems(const YAML::Node& root, std::string_view text);

// A JSON value with the same meaning (mapping keys as their text; timestamps as strings).
// `budget`, when given, is decremented per value; at 0 the conversion stops early (aliases can
// make a small file expand into billions of values).
nlohmann::json ToJson(const YAML::Node& node, size_t* budget = nullptr);

}  // namespace uc::probe::internal
