// A rank that dies or stops mid-generation ends the whole job with a non-zero exit and a
// message naming the rank, in seconds — never a hang. Drives the real CLI, which re-executes
// itself under mpirun with two ranks (TP 2), and signals the rank-1 process.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/test_util.h"

namespace uc {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// PID of the process whose environment says it is MPI world rank `rank` of a job carrying
// `marker` in its environment; -1 if none (yet).
pid_t FindRank(const std::string& marker, int rank) {
  const std::string want_rank = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "environ", std::ios::binary);
    std::stringstream buf;
    buf << in.rdbuf();
    const std::string env = buf.str();
    bool has_rank = false, has_marker = false;
    for (size_t start = 0; start < env.size();) {
      const size_t end = env.find('\0', start);
      const std::string var = env.substr(start, end - start);
      has_rank |= var == want_rank;
      has_marker |= var == marker;
      if (end == std::string::npos) break;
      start = end + 1;
    }
    if (has_rank && has_marker) return static_cast<pid_t>(std::stol(name));
  }
  return -1;
}

struct Outcome {
  int exit_code = 0;
  double seconds = 0;
  std::string output;
};

// Starts a long TP=2 generation, sends `signal` to rank 1 once it is generating, and waits.
Outcome RunAndSignal(int signal, const std::string& test_name) {
  const std::string marker = "UC_FAILURE_TEST=" + test_name;
  const fs::path log = testing::ScratchDir("failure/" + test_name) / "output.txt";
  const std::string command =
      "env " + marker + " " + testing::CliBinary().string() + " generate --model " +
      (fs::path(UC_SOURCE_DIR) / "models" / "stories260K").string() +
      " --prompt 'Once upon a time' --max-tokens 200000 --max-model-len 200008" +
      " --ignore-eos --temperature 0" +
      " --tensor-parallel-size 2 --threads 1 --step-timeout 3 > " + log.string() + " 2>&1";
  const auto start = Clock::now();
  const pid_t child = fork();
  if (child == 0) {
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  pid_t victim = -1;
  while (victim < 0 && Clock::now() - start < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    victim = FindRank(marker, 1);
  }
  EXPECT_GT(victim, 0) << "rank 1 never appeared";
  std::this_thread::sleep_for(std::chrono::seconds(3));  // let it generate for a while
  if (victim > 0) kill(victim, signal);
  const auto signalled = Clock::now();
  int status = 0;
  Outcome out;
  while (true) {
    const pid_t done = waitpid(child, &status, WNOHANG);
    if (done == child) break;
    if (Clock::now() - signalled > std::chrono::seconds(60)) {
      kill(victim, SIGKILL);
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      ADD_FAILURE() << "the job did not end within 60 s of the signal";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - signalled).count();
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(log);
  std::stringstream buf;
  buf << in.rdbuf();
  out.output = buf.str();
  if (victim > 0) kill(victim, SIGKILL);  // a stopped rank mpirun did not reap
  return out;
}

TEST(FailureTest, KilledRankEndsTheJobNamingIt) {
  const Outcome out = RunAndSignal(SIGKILL, "kill");
  EXPECT_NE(out.exit_code, 0) << out.output;
  EXPECT_LT(out.seconds, 20.0);
  EXPECT_NE(out.output.find("rank 1"), std::string::npos) << out.output;
  std::printf("killed rank: job ended %.1f s later with exit code %d\n", out.seconds,
              out.exit_code);
}

TEST(FailureTest, StoppedRankIsCaughtByTheStepWatchdog) {
  const Outcome out = RunAndSignal(SIGSTOP, "stop");
  EXPECT_NE(out.exit_code, 0) << out.output;
  EXPECT_LT(out.seconds, 20.0);
  EXPECT_NE(out.output.find("rank 1 (pp stage 0, tp rank 1"), std::string::npos) << out.output;
  std::printf("stopped rank: job ended %.1f s later with exit code %d\n", out.seconds,
              out.exit_code);
}

}  // namespace
}  // namespace uc
