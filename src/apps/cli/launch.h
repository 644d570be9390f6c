// File: launch.h
// -----------------------------------------------------------------------------
// Multi-process launch for the CLI. The primary form is SPMD under an MPI launcher
// (`mpirun -np N [--hostfile H] undercurrent ...`, or `srun`): every rank runs the same command
// and world rank 0 drives. On one machine, a command asking for T×P > 1 ranks that was started
// without a launcher re-executes itself under mpirun with the flags a user would otherwise have
// to know (ReexecUnderMpirun). T = P = 1 never touches MPI.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace uc::cli {

// The mpirun command line that runs `argv` (this program's arguments, argv[0] excluded) on
// `world_size` ranks of this machine: --bind-to none (default binding pins every rank to one
// core), --oversubscribe when ranks exceed cores, short TCP keep-alives so a lost peer is
// noticed in seconds. Pure function, for tests and for ReexecUnderMpirun.
std::vector<std::string> MpirunCommand(int world_size, const std::string& self,
                                       const std::vector<std::string>& args);

// Replaces this process with mpirun running this program on `world_size` ranks; sets the
// run-as-root variables when uid is 0. Returns only on failure (mpirun not found, or this
// process was already re-executed once and still sees no launcher).
Status ReexecUnderMpirun(int world_size, int argc, char** argv);

// True when this process prints for the job: rank 0 under MPI, or the only process.
bool IsDriverRank();

// Ends MPI (when this process started it) and passes `code` through: how a command that may run
// under mpirun returns from its handler.
int FinishMpi(int code);

// Prints "error: MESSAGE" on the driver rank only, then FinishMpi(kExitFailure).
int FailOnDriver(const std::string& message);

}  // namespace uc::cli
