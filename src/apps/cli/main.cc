// undercurrent: activation probing for live LLM inference — command line entry point.
#include <CLI/CLI.hpp>

#include "apps/cli/capture_command.h"
#include "apps/cli/exit_codes.h"
#include "apps/cli/generate_command.h"
#include "apps/cli/schema_command.h"
#include "apps/cli/serve_command.h"
#include "apps/cli/validate_command.h"

#ifndef UC_VERSION
#define UC_VERSION "0.0.0"
#endif

int main(int argc, char** argv) {
  CLI::App app{"undercurrent: activation probing for live LLM inference"};
  app.set_version_flag("--version", std::string("undercurrent ") + UC_VERSION);
  app.require_subcommand(1);
  uc::cli::AddGenerateCommand(app, argc, argv);
  uc::cli::AddCaptureCommand(app, argc, argv);
  uc::cli::AddValidateCommand(app);
  uc::cli::AddSchemaCommand(app);
  uc::cli::AddServeCommand(app, argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? uc::cli::kExitOk : uc::cli::kExitUsage;
  }
  return uc::cli::kExitOk;
}
