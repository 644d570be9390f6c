// File: probing_util.h
// -----------------------------------------------------------------------------
// Probes for tests that look at what the router delivers, and a helper that runs requests
// through an engine with a spec. Registered into a registry by RegisterTestProbes:
//   recorder              single_shot: keeps every record it gets (in the global log)
//   trajectory_recorder   the same, trajectory kind
//   always_abort          single_shot: ABORT (confidence 1) on every record; args {layer}
//                         and {request} restrict it to one layer / one request id
//   always_escalate       single_shot: ESCALATE (confidence 0.75), args as always_abort
//   slow_recorder         trajectory: sleeps args {ms} per record; its verdict lists the
//                         positions and layers it saw and counts records of other requests
//   sleepy                single_shot: sleeps args {ms} then continues; throws when args
//                         {throw: true}, or for the first {fail_first} calls of the type
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/llm.h"
#include "probe/probes/registry.h"
#include "probe/runtime/probing_session.h"

namespace uc::testing {

// Every record the recorder probes saw, in routing order (all requests).
class RecordLog {
 public:
  static RecordLog& Get();
  void Add(const probe::ActivationRecord& record, const std::string& probe);
  std::vector<probe::ActivationRecord> Take();
  // Records of one request, in routing order.
  static std::vector<probe::ActivationRecord> Of(const std::vector<probe::ActivationRecord>& all,
                                                 const std::string& request_id);

 private:
  std::mutex mu_;
  std::vector<probe::ActivationRecord> records_;
};

void RegisterTestProbes(probe::ProbeRegistry& registry);

struct ProbedRun {
  std::vector<engine::GenerateResult> results;                // input order
  std::map<std::string, probe::RequestProbeResults> probing;  // by request id
  std::vector<probe::ActivationRecord> records;               // recorder probes, routing order
  probe::ProbingStats stats;
};

// Runs `requests` through `llm` with `session` installed (taking the recorder log).
ProbedRun RunProbed(engine::LLM& llm, probe::ProbingSession& session,
                    const std::vector<engine::GenerateRequest>& requests);

// A session for `yaml` over `config`, with the test probes; fails the test on error.
std::unique_ptr<probe::ProbingSession> MakeSession(const std::string& yaml,
                                                   const models::ModelConfig& config,
                                                   probe::ProbingOptions options = {});

// max_i |a_i - b_i| / max_i |b_i|: the largest difference relative to the record's scale.
double RelativeDiff(const probe::ActivationRecord& a, const probe::ActivationRecord& b);

}  // namespace uc::testing
