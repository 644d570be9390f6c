// undercurrent: activation probing for live LLM inference — command line entry point.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <system_error>

#include "apps/cli/commands/bench_command.h"
#include "apps/cli/commands/calibrate_command.h"
#include "apps/cli/commands/capture_command.h"
#include "apps/cli/commands/generate_command.h"
#include "apps/cli/commands/inspect_model_command.h"
#include "apps/cli/commands/perplexity_command.h"
#include "apps/cli/commands/quantize_command.h"
#include "apps/cli/commands/schema_command.h"
#include "apps/cli/commands/serve_command.h"
#include "apps/cli/commands/steer_vector_command.h"
#include "apps/cli/commands/validate_command.h"
#include "apps/cli/exit_codes.h"

#ifndef UC_VERSION
#define UC_VERSION "0.0.0"
#endif

namespace {

// Ctrl-C ends a command with exit code 130 (128 + SIGINT), as the exit-code table promises;
// a command that must drain first (serve) installs its own handler.
extern "C" void OnInterrupt(int) { std::_Exit(uc::cli::kExitInterrupted); }

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGINT, OnInterrupt);
  CLI::App app{"undercurrent: activation probing for live LLM inference"};
  app.set_version_flag("--version", std::string("undercurrent ") + UC_VERSION);
  app.footer(
      "Every command takes --help. Exit codes: 0 success, 1 reported failure (bad model, spec "
      "or request), 2 usage error, 130 interrupted.");
  app.require_subcommand(1);
  uc::cli::AddGenerateCommand(app, argc, argv);
  uc::cli::AddCaptureCommand(app, argc, argv);
  uc::cli::AddValidateCommand(app);
  uc::cli::AddSchemaCommand(app);
  uc::cli::AddInspectModelCommand(app);
  uc::cli::AddBenchCommand(app);
  uc::cli::AddServeCommand(app, argc, argv);
  uc::cli::AddSteerVectorCommand(app);
  uc::cli::AddCalibrateCommand(app);
  uc::cli::AddPerplexityCommand(app);
  uc::cli::AddQuantizeCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? uc::cli::kExitOk : uc::cli::kExitUsage;
  } catch (const std::system_error& e) {
    // The system refused a thread or another resource (limits, memory): a report, not a crash.
    std::fprintf(stderr, "error: the system refused a resource: %s\n", e.what());
    return uc::cli::kExitFailure;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
    return uc::cli::kExitFailure;
  }
  return uc::cli::kExitOk;
}
