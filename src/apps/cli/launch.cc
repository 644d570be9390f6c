#include "apps/cli/launch.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "apps/cli/exit_codes.h"
#include "base/thread_pool.h"
#include "distributed/mpi/mpi_runtime.h"

namespace uc::cli {
namespace {
constexpr char kReexecMarker[] = "UNDERCURRENT_REEXEC";
}  // namespace

std::vector<std::string> MpirunCommand(int world_size, const std::string& self,
                                       const std::vector<std::string>& args) {
  std::vector<std::string> cmd = {"mpirun", "-np", std::to_string(world_size), "--bind-to", "none"};
  if (world_size > ThreadPool::HardwareConcurrency()) cmd.push_back("--oversubscribe");
  for (const char* mca :
       {"oob_tcp_keepalive_time 5", "oob_tcp_keepalive_intvl 2", "oob_tcp_keepalive_probes 3"}) {
    const std::string kv(mca);
    const size_t space = kv.find(' ');
    cmd.insert(cmd.end(), {"--mca", kv.substr(0, space), kv.substr(space + 1)});
  }
  cmd.push_back(self);
  cmd.insert(cmd.end(), args.begin(), args.end());
  return cmd;
}

Status ReexecUnderMpirun(int world_size, int argc, char** argv) {
  if (std::getenv(kReexecMarker) != nullptr) {
    return FailedPreconditionError(
        "re-executed under mpirun but no MPI launcher environment is visible; start the job "
        "with mpirun -np " +
        std::to_string(world_size) + " yourself");
  }
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::vector<std::string> args(argv + 1, argv + argc);
  const std::vector<std::string> cmd =
      MpirunCommand(world_size, ec ? std::string(argv[0]) : self.string(), args);
  setenv(kReexecMarker, "1", 1);
  if (getuid() == 0) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  }
  std::vector<char*> c_args;
  for (const std::string& a : cmd) c_args.push_back(const_cast<char*>(a.c_str()));
  c_args.push_back(nullptr);
  execvp("mpirun", c_args.data());
  return UnavailableError(std::string("cannot run mpirun (install openmpi-bin): ") +
                          std::strerror(errno));
}

bool IsDriverRank() {
  return !distributed::MpiRuntime::initialized() || distributed::MpiRuntime::world_rank() == 0;
}

int FinishMpi(int code) {
  if (distributed::MpiRuntime::initialized()) (void)distributed::MpiRuntime::Finalize();
  return code;
}

int FailOnDriver(const std::string& message) {
  if (IsDriverRank()) std::fprintf(stderr, "error: %s\n", message.c_str());
  return FinishMpi(kExitFailure);
}

}  // namespace uc::cli
