#include "tokenizer/formats/hf_components.h"

#include "base/logging.h"

namespace uc::tokenizer {
namespace {

StatusOr<std::string> TypeOf(const JsonField& field) { return field["type"].String(); }

Status Unsupported(const JsonField& field, std::string_view kind, std::string_view type) {
  return UnimplementedError(field.Error("").message() + "has " + std::string(kind) + " type '" +
                            std::string(type) + "', which is not supported");
}

// Backslash-escapes everything but ASCII letters, digits and non-ASCII bytes.
std::string EscapeRegex(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    const bool plain =
        (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || u >= 0x80;
    if (!plain) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

StatusOr<SplitBehavior> ParseBehavior(const JsonField& field) {
  UC_ASSIGN_OR_RETURN(std::string name, field.String());
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return field.Error("has unknown split behavior '" + name + "'");
}

Status ParseSplit(const JsonField& field, TokenizerSpec* spec) {
  const JsonField pattern = field["pattern"];
  std::string regex;
  if (!pattern["Regex"].is_null()) {
    UC_ASSIGN_OR_RETURN(regex, pattern["Regex"].String());
  } else if (!pattern["String"].is_null()) {
    UC_ASSIGN_OR_RETURN(std::string literal, pattern["String"].String());
    regex = EscapeRegex(literal);
  } else {
    return pattern.Error("must hold a 'Regex' or a 'String'");
  }
  UC_ASSIGN_OR_RETURN(SplitBehavior behavior, ParseBehavior(field["behavior"]));
  UC_ASSIGN_OR_RETURN(bool invert, field["invert"].BoolOr(false));
  const Status status = spec->pre_tokenizer.AddSplit(regex, behavior, invert);
  return status.ok() ? status : field.Error(status.message());
}

Status ParseByteLevel(const JsonField& field, TokenizerSpec* spec) {
  spec->byte_level = true;
  UC_ASSIGN_OR_RETURN(bool add_prefix_space, field["add_prefix_space"].BoolOr(false));
  UC_ASSIGN_OR_RETURN(bool use_regex, field["use_regex"].BoolOr(true));
  if (add_prefix_space) spec->pre_tokenizer.AddPrefixSpace();
  if (use_regex)
    UC_RETURN_IF_ERROR(spec->pre_tokenizer.AddSplit(kGpt2Pattern, SplitBehavior::kIsolated));
  return OkStatus();
}

// Metaspace's prepend scheme: "always" / "first" / "never", or the older add_prefix_space.
StatusOr<std::string> MetaspaceScheme(const JsonField& field) {
  if (!field["prepend_scheme"].is_null()) return field["prepend_scheme"].String();
  UC_ASSIGN_OR_RETURN(bool add_prefix_space, field["add_prefix_space"].BoolOr(true));
  return std::string(add_prefix_space ? "always" : "never");
}

Status ParseMetaspace(const JsonField& field, TokenizerSpec* spec) {
  UC_ASSIGN_OR_RETURN(std::string replacement, field["replacement"].StringOr(kSpaceMarker));
  if (replacement != kSpaceMarker) return field["replacement"].Error("must be \"▁\"");
  UC_ASSIGN_OR_RETURN(std::string scheme, MetaspaceScheme(field));
  if (scheme != "always" && scheme != "first" && scheme != "never") {
    return field["prepend_scheme"].Error("must be always, first or never");
  }
  NormalizerOptions& n = spec->normalizer;
  n.escape_whitespaces = true;
  n.add_dummy_prefix = scheme != "never";
  n.prefix_scheme = scheme == "first" ? PrefixScheme::kFirst : PrefixScheme::kAlways;
  n.prefix_unless_leading_space = true;
  UC_ASSIGN_OR_RETURN(bool split, field["split"].BoolOr(true));
  if (split) {
    UC_RETURN_IF_ERROR(spec->pre_tokenizer.AddSplit(kSpaceMarker, SplitBehavior::kMergedWithNext));
  }
  return OkStatus();
}

Status ParsePreTokenizerStep(const JsonField& field, TokenizerSpec* spec) {
  UC_ASSIGN_OR_RETURN(std::string type, TypeOf(field));
  if (type == "Sequence") {
    const JsonField list = field["pretokenizers"];
    UC_RETURN_IF_ERROR(list.ExpectArray());
    for (size_t i = 0; i < list.json().size(); ++i) {
      UC_RETURN_IF_ERROR(ParsePreTokenizerStep(list.at(i), spec));
    }
    return OkStatus();
  }
  if (type == "ByteLevel") return ParseByteLevel(field, spec);
  if (type == "Split") return ParseSplit(field, spec);
  if (type == "Metaspace") return ParseMetaspace(field, spec);
  if (type == "Digits") {
    UC_ASSIGN_OR_RETURN(bool individual, field["individual_digits"].BoolOr(false));
    return spec->pre_tokenizer.AddSplit(individual ? kSingleDigitPattern : kDigitRunPattern,
                                        SplitBehavior::kIsolated);
  }
  return Unsupported(field, "pre-tokenizer", type);
}

Status ParseNormalizerStep(const JsonField& field, TokenizerSpec* spec) {
  UC_ASSIGN_OR_RETURN(std::string type, TypeOf(field));
  if (type == "Sequence") {
    const JsonField list = field["normalizers"];
    UC_RETURN_IF_ERROR(list.ExpectArray());
    for (size_t i = 0; i < list.json().size(); ++i) {
      UC_RETURN_IF_ERROR(ParseNormalizerStep(list.at(i), spec));
    }
    return OkStatus();
  }
  if (type == "Prepend") {
    UC_ASSIGN_OR_RETURN(std::string prepend, field["prepend"].String());
    if (prepend != kSpaceMarker) return field["prepend"].Error("must be \"▁\"");
    spec->normalizer.add_dummy_prefix = true;
    return OkStatus();
  }
  if (type == "Replace") {
    UC_ASSIGN_OR_RETURN(std::string pattern, field["pattern"]["String"].String());
    UC_ASSIGN_OR_RETURN(std::string content, field["content"].String());
    if (pattern != " " || content != kSpaceMarker) {
      return field.Error("is a Replace other than \" \" -> \"▁\", which is not supported");
    }
    spec->normalizer.escape_whitespaces = true;
    return OkStatus();
  }
  if (type == "NFC") {
    spec->normalizer.nfc = true;
    return OkStatus();
  }
  if (type == "NFKC" || type == "NFD" || type == "NFKD") {
    UC_LOG(DEBUG) << field.path() << ": Unicode " << type << " normalization is not applied";
    return OkStatus();
  }
  return Unsupported(field, "normalizer", type);
}

}  // namespace

Status ParseHfNormalizer(const JsonField& field, TokenizerSpec* spec) {
  if (field.is_null()) return OkStatus();
  UC_RETURN_IF_ERROR(ParseNormalizerStep(field, spec));
  if (spec->normalizer.add_dummy_prefix && !spec->normalizer.escape_whitespaces) {
    return field.Error("prepends \"▁\" without replacing spaces by \"▁\"; not supported");
  }
  return OkStatus();
}

Status ParseHfPreTokenizer(const JsonField& field, TokenizerSpec* spec) {
  if (field.is_null()) return OkStatus();
  return ParsePreTokenizerStep(field, spec);
}

Status ParseHfDecoder(const JsonField& field, TokenizerSpec* spec) {
  if (field.is_null()) return OkStatus();
  UC_ASSIGN_OR_RETURN(std::string type, TypeOf(field));
  if (type == "Sequence") {
    const JsonField list = field["decoders"];
    UC_RETURN_IF_ERROR(list.ExpectArray());
    for (size_t i = 0; i < list.json().size(); ++i) {
      UC_RETURN_IF_ERROR(ParseHfDecoder(list.at(i), spec));
    }
  } else if (type == "Strip") {
    UC_ASSIGN_OR_RETURN(std::string content, field["content"].StringOr(" "));
    UC_ASSIGN_OR_RETURN(int64_t start, field["start"].Int());
    if (content == " " && start > 0) spec->leading_space = LeadingSpace::kStripOnce;
  } else if (type == "Metaspace") {
    UC_ASSIGN_OR_RETURN(std::string scheme, MetaspaceScheme(field));
    if (scheme != "never") spec->leading_space = LeadingSpace::kStripOnce;
  } else if (type == "ByteLevel") {
    spec->byte_level = true;
  }
  return OkStatus();
}

StatusOr<HfTemplate> ParseHfPostProcessor(const JsonField& field) {
  HfTemplate result;
  if (field.is_null()) return result;
  UC_ASSIGN_OR_RETURN(std::string type, TypeOf(field));
  if (type == "Sequence") {
    const JsonField list = field["processors"];
    UC_RETURN_IF_ERROR(list.ExpectArray());
    for (size_t i = 0; i < list.json().size(); ++i) {
      UC_ASSIGN_OR_RETURN(HfTemplate part, ParseHfPostProcessor(list.at(i)));
      if (!part.bos_text.empty()) result.bos_text = part.bos_text;
      if (!part.eos_text.empty()) result.eos_text = part.eos_text;
    }
    return result;
  }
  if (type != "TemplateProcessing") return result;
  const JsonField single = field["single"];
  UC_RETURN_IF_ERROR(single.ExpectArray());
  const size_t n = single.json().size();
  for (size_t i = 0; i < n; ++i) {
    const JsonField special = single.at(i)["SpecialToken"];
    if (special.is_null() || (i != 0 && i + 1 != n)) continue;
    UC_ASSIGN_OR_RETURN(std::string text, special["id"].String());
    (i == 0 ? result.bos_text : result.eos_text) = text;
  }
  return result;
}

}  // namespace uc::tokenizer
