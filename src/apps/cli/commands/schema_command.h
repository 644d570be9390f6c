// File: schema_command.h
// -----------------------------------------------------------------------------
// `undercurrent schema [-o FILE]`: prints the probe-spec JSON Schema (Draft 2020-12), for
// editors and other tools, or writes it to FILE.
#pragma once

#include <CLI/CLI.hpp>

namespace uc::cli {

// Registers the subcommand on `app`.
void AddSchemaCommand(CLI::App& app);

}  // namespace uc::cli
