// File: generate_command.h
// -----------------------------------------------------------------------------
// `undercurrent generate`: load a model, generate for one prompt, stream the text to stdout
// (or print one JSON object with --json).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

namespace uc::cli {

// Registers the subcommand on `app`. argc/argv are the process's, for re-executing under mpirun.
void AddGenerateCommand(CLI::App& app, int argc, char** argv);

}  // namespace uc::cli
