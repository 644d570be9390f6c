#include "apps/cli/commands/schema_command.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include "apps/cli/exit_codes.h"
#include "probe/spec/spec.h"

namespace uc::cli {
namespace {

int RunSchema(const std::string& output) {
  const std::string text = probe::SpecJsonSchemaText();
  if (output.empty()) {
    std::cout << text;
    std::cout.flush();
    return kExitOk;
  }
  std::ofstream out(output, std::ios::binary);
  out << text;
  out.close();
  if (!out) {
    std::fprintf(stderr, "error: cannot write the schema to '%s'\n", output.c_str());
    return kExitFailure;
  }
  std::fprintf(stderr, "wrote %s\n", output.c_str());
  return kExitOk;
}

}  // namespace

void AddSchemaCommand(CLI::App& app) {
  auto output = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "schema", "Print the JSON Schema (Draft 2020-12) of probe-spec files, for editors and tools");
  cmd->add_option("-o,--output", *output, "Write the schema to FILE instead of stdout")
      ->option_text("FILE");
  cmd->callback([output] { throw CLI::RuntimeError(RunSchema(*output)); });
}

}  // namespace uc::cli
