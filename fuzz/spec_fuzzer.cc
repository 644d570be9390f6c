// Fuzzes the probe spec parser: YAML (or JSON) text -> Spec, with every validation rule.
// Problems must come back as Status / report lines; a spec that parses must survive the
// canonical writer's round trip (ParseSpecText(WriteSpecYaml(s)) gives the same spec).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "probe/spec/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  uc::StatusOr<uc::probe::Spec> spec = uc::probe::ParseSpecText(text, "fuzz.yaml");
  const uc::probe::SpecReport report = uc::probe::CheckSpecText(text, "fuzz.yaml");
  UC_FUZZ_ASSERT(spec.ok() == report.spec.has_value(), "ParseSpecText and CheckSpecText agree");
  UC_FUZZ_ASSERT(report.spec.has_value() == report.problems.empty(),
                 "a report has a spec exactly when it has no problems");
  if (!spec.ok()) {
    UC_FUZZ_ASSERT(!spec.status().message().empty(), "an error says what is wrong");
    return 0;
  }
  const std::string canonical = uc::probe::WriteSpecYaml(*spec);
  uc::StatusOr<uc::probe::Spec> again = uc::probe::ParseSpecText(canonical, "canonical.yaml");
  if (!again.ok()) {
    std::fprintf(stderr, "canonical spec:\n%s\nerror: %s\n", canonical.c_str(),
                 again.status().ToString().c_str());
  }
  UC_FUZZ_ASSERT(again.ok(), "the canonical YAML of a valid spec parses");
  UC_FUZZ_ASSERT(uc::probe::WriteSpecYaml(*again) == canonical,
                 "the canonical YAML is a fixed point");
  return 0;
}
