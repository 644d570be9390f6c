// File: serve_command.h
// -----------------------------------------------------------------------------
// `undercurrent serve`: the OpenAI-compatible HTTP server (apps/server) over one engine, with
// the probes of a spec fixed at start-up. With --tp/--pp > 1 it runs under MPI: world rank 0
// loads its share, drives the engine and serves HTTP; the other ranks follow. Started without a
// launcher, the command starts mpirun as a child and supervises it (mpirun would answer a
// SIGTERM by killing the job): a signal reaches rank 0 as EOF on the stdin mpirun forwards.
// Prints "undercurrent serve: listening on http://HOST:PORT" on stdout once ready; SIGTERM or
// SIGINT drains in-flight requests (and async probes) and exits 0; a second signal aborts what
// is still running.
#pragma once

#include <CLI/CLI.hpp>

namespace uc::cli {

void AddServeCommand(CLI::App& app, int argc, char** argv);

}  // namespace uc::cli
