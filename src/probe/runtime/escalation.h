// File: escalation.h
// -----------------------------------------------------------------------------
// Escalator: asks external classifiers (a spec point's `escalation:` block, spec.h) whether a
// held request goes on, over HTTP, off the engine thread. One JSON POST per escalation; the
// answer {"decision": "continue" | "abort"} (HTTP 2xx) is the classifier's word. Anything else
// is kTimeout (no answer within timeout_ms: connect, send and read are each bounded by it) or
// kError (refused or unreachable, an HTTP error status, a body that is not such JSON), with a
// detail saying which; the caller then applies on_timeout. Answers are read at most 64 KiB deep.
//
// The caller enforces its own deadline too (ProbingSession decides at timeout_ms whatever the
// call is doing); a late answer is then ignored.
//
// Thread-safety: Submit from any thread; `done` runs on a worker thread, exactly once per
// submitted call, unless the Escalator is destroyed first (queued calls are then dropped
// without `done`; calls under way are cut short — their sockets shut — and end as errors).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "probe/spec/spec.h"

namespace httplib {
class Client;
}  // namespace httplib

namespace uc::probe {

struct EscalationAnswer {
  enum class Outcome { kContinue, kAbort, kTimeout, kError };
  Outcome outcome = Outcome::kError;
  std::string detail;  // for kTimeout / kError: what went wrong, complete on its own
};

// "continue", "abort", "timeout", "error".
std::string_view Name(EscalationAnswer::Outcome outcome);

// POSTs `body` (JSON) to config.url and reads the decision; blocking, bounded by timeout_ms.
EscalationAnswer PostEscalation(const EscalationConfig& config, const std::string& body);

class Escalator {
 public:
  explicit Escalator(int threads);
  ~Escalator();
  Escalator(const Escalator&) = delete;
  Escalator& operator=(const Escalator&) = delete;

  void Submit(EscalationConfig config, std::string body,
              std::function<void(EscalationAnswer)> done);

 private:
  struct Call {
    EscalationConfig config;
    std::string body;
    std::function<void(EscalationAnswer)> done;
  };
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Call> calls_;
  bool stop_ = false;
  std::vector<httplib::Client*> active_;  // of each call under way
  std::vector<std::thread> workers_;
};

}  // namespace uc::probe
