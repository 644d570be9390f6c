#include "probe/runtime/probe_sets.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <set>
#include <utility>

#include "base/check.h"
#include "base/did_you_mean.h"
#include "base/logging.h"

namespace uc::probe {

// One loaded version of one set. The session is declared last so that it goes first: its
// result callback refers to the fields above it.
struct ProbeSets::Version {
  std::string name;
  std::filesystem::path file;
  int64_t number = 0;
  std::shared_ptr<const Spec> spec;
  std::shared_ptr<const engine::RequestSteering> steering;  // null: none
  prometheus::Counter* requests = nullptr;
  // Guarded by ProbeSets::mu_:
  int live = 0;     // requests the engine added and has not finished
  int pending = 0;  // assigned, not yet added
  bool current = true;
  std::unique_ptr<ProbingSession> session;
};

StatusOr<std::unique_ptr<ProbeSets>> ProbeSets::Create(std::vector<ProbeSetSource> sources,
                                                       std::string default_set,
                                                       const ProbeRegistry& registry,
                                                       const models::ModelConfig& config,
                                                       ProbingOptions options) {
  if (sources.empty()) return InvalidArgumentError("no probe set given");
  std::set<std::string> names;
  for (const ProbeSetSource& s : sources) {
    if (s.name.empty()) {
      return InvalidArgumentError("probe set file '" + s.file.string() + "' has an empty name");
    }
    if (!names.insert(s.name).second) {
      return InvalidArgumentError("probe set '" + s.name + "' is given twice");
    }
  }
  if (default_set.empty()) default_set = sources.front().name;
  if (names.count(default_set) == 0) {
    std::vector<std::string> known(names.begin(), names.end());
    return InvalidArgumentError("default probe set '" + default_set + "' is not one of " +
                                JoinQuoted(known, " and ") + DidYouMean(default_set, known));
  }
  std::unique_ptr<ProbeSets> sets(new ProbeSets());
  sets->sources_ = std::move(sources);
  sets->default_set_ = std::move(default_set);
  sets->registry_ = &registry;
  sets->config_ = config;
  if (options.metrics == nullptr) {
    sets->owned_metrics_ = std::make_unique<Metrics>();
    options.metrics = sets->owned_metrics_.get();
  }
  sets->metrics_ = options.metrics;
  sets->options_ = std::move(options);

  prometheus::Registry& r = *sets->metrics_->registry();
  sets->reloads_family_ = &prometheus::BuildCounter()
                               .Name("undercurrent_probe_set_reloads_total")
                               .Help("Probe set reloads, by outcome (a failed one changes nothing)")
                               .Register(r);
  sets->reloads_ok_ = &sets->reloads_family_->Add({{"outcome", "ok"}});
  sets->reloads_failed_ = &sets->reloads_family_->Add({{"outcome", "failed"}});
  sets->version_family_ = &prometheus::BuildGauge()
                               .Name("undercurrent_probe_set_version")
                               .Help("The version new requests of a probe set get")
                               .Register(r);
  sets->requests_family_ = &prometheus::BuildCounter()
                                .Name("undercurrent_probe_set_requests_total")
                                .Help("Requests probed by a probe set")
                                .Register(r);

  for (const ProbeSetSource& source : sets->sources_) {
    StatusOr<std::shared_ptr<Version>> v = sets->Load(source, 1);
    if (!v.ok()) return v.status();
    sets->current_[source.name] = std::move(v).value();
  }
  sets->version_ = 1;
  sets->stats_.version = 1;
  for (const auto& [name, v] : sets->current_) {
    sets->version_family_->Add({{"probe_set", name}}).Set(1);
  }
  sets->reaper_ = std::thread([s = sets.get()] { s->ReaperLoop(); });
  return sets;
}

StatusOr<std::shared_ptr<ProbeSets::Version>> ProbeSets::Load(const ProbeSetSource& source,
                                                              int64_t number) {
  // Spec and registration messages start with FILE:LINE.
  const std::string where = "probe set '" + source.name + "': ";
  StatusOr<Spec> spec = ParseSpecFile(source.file);
  if (!spec.ok()) return InvalidArgumentError(where + spec.status().message());
  StatusOr<std::unique_ptr<ProbingSession>> session =
      ProbingSession::Create(*spec, *registry_, config_, options_);
  if (!session.ok()) return InvalidArgumentError(where + session.status().message());
  auto v = std::make_shared<Version>();
  v->name = source.name;
  v->file = source.file;
  v->number = number;
  v->spec = std::make_shared<const Spec>(std::move(spec).value());
  const engine::RequestSteering& steering = (*session)->steering();
  if (steering.config != nullptr && !steering.config->empty()) {
    v->steering = std::make_shared<const engine::RequestSteering>(steering);
  }
  v->requests = &requests_family_->Add({{"probe_set", source.name}});
  v->session = std::move(session).value();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (wake_) v->session->SetWakeup(wake_);
  }
  Version* raw = v.get();
  v->session->SetResultCallback([this, raw](RequestProbeResults results) {
    results.probe_set = raw->name;
    results.probe_set_version = raw->number;
    results.spec = raw->spec;
    if (on_result_) on_result_(std::move(results));
  });
  return v;
}

void ProbeSets::AttachTo(engine::LLMEngine& engine) {
  if (options_.tokenizer == nullptr) options_.tokenizer = &engine.tokenizer();
  engine.SetObserver(this);
}

void ProbeSets::SetWakeup(std::function<void()> wake) {
  std::lock_guard<std::mutex> lock(mu_);
  wake_ = wake;
  for (const auto& [name, v] : current_) v->session->SetWakeup(wake);
  for (const auto& [seq, v] : by_seq_) v->session->SetWakeup(wake);
}

ProbeSets::~ProbeSets() { Shutdown(/*wait=*/false, /*timeout_seconds=*/5.0); }

StatusOr<ProbeSetAssignment> ProbeSets::Assign(const std::vector<std::string>& request_ids,
                                               const std::string& set) {
  const std::string& name = set.empty() ? default_set_ : set;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = current_.find(name);
  if (it == current_.end()) {
    std::vector<std::string> known;
    for (const auto& [n, v] : current_) known.push_back(n);
    return NotFoundError("Unknown probe_set '" + name + "'" + DidYouMean(name, known) +
                         " (this server has " + JoinQuoted(known, " and ") + ").");
  }
  for (const std::string& id : request_ids) {
    if (assigned_.count(id) != 0) {
      return InvalidArgumentError("request id '" + id + "' is already assigned");
    }
  }
  const std::shared_ptr<Version>& v = it->second;
  for (const std::string& id : request_ids) {
    ++v->pending;
    assigned_[id] = v;
  }
  return ProbeSetAssignment{v->name, v->number, v->steering};
}

void ProbeSets::Unassign(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = assigned_.find(request_id);
  if (it == assigned_.end()) return;
  std::shared_ptr<Version> v = std::move(it->second);
  assigned_.erase(it);
  --v->pending;
  if (!v->current && v->live == 0 && v->pending == 0) RetireLocked(std::move(v));
}

StatusOr<int64_t> ProbeSets::Reload() {
  std::lock_guard<std::mutex> reload_lock(reload_mu_);
  int64_t next = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return FailedPreconditionError("the probe sets are shut down");
    next = version_ + 1;
  }
  // Everything is built before anything changes; a failure drops what was built.
  std::vector<std::shared_ptr<Version>> fresh;
  for (const ProbeSetSource& source : sources_) {
    StatusOr<std::shared_ptr<Version>> v = Load(source, next);
    if (!v.ok()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.reloads_failed;
        stats_.last_error = v.status().message();
      }
      reloads_failed_->Increment();
      UC_LOG(WARNING) << "probe set reload failed, nothing changed: " << v.status().message();
      return Status(v.status().code(), "reload failed, nothing changed: " + v.status().message());
    }
    fresh.push_back(std::move(v).value());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (std::shared_ptr<Version>& v : fresh) {
      std::shared_ptr<Version>& slot = current_[v->name];
      std::shared_ptr<Version> old = std::move(slot);
      slot = v;
      version_family_->Add({{"probe_set", v->name}}).Set(static_cast<double>(next));
      old->current = false;
      if (old->live == 0 && old->pending == 0) RetireLocked(std::move(old));
    }
    version_ = next;
    stats_.version = next;
    ++stats_.reloads_ok;
    stats_.last_error.clear();
  }
  reloads_ok_->Increment();
  UC_LOG(INFO) << "probe sets reloaded: version " << next;
  return next;
}

void ProbeSets::RetireLocked(std::shared_ptr<Version> version) {
  retiring_.push_back(std::move(version));
  reaper_cv_.notify_one();
}

void ProbeSets::ReaperLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    reaper_cv_.wait(lock, [this] { return reaper_stop_ || !retiring_.empty(); });
    if (retiring_.empty()) return;  // stopping, nothing left
    std::shared_ptr<Version> v = std::move(retiring_.front());
    retiring_.pop_front();
    lock.unlock();
    // Its requests all ended: the queues drain and every result is delivered.
    v->session->Shutdown(/*wait=*/true);
    v.reset();
    lock.lock();
    ++stats_.retired;
  }
}

std::vector<ProbeSetInfo> ProbeSets::Describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ProbeSetInfo> out;
  for (const ProbeSetSource& source : sources_) {
    const Version& v = *current_.at(source.name);
    ProbeSetInfo info;
    info.name = source.name;
    info.file = source.file;
    info.version = v.number;
    info.is_default = source.name == default_set_;
    for (const ExtractionPoint& p : v.spec->extraction_points) info.points.push_back(p.name);
    out.push_back(std::move(info));
  }
  return out;
}

ProbeSetStats ProbeSets::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

bool ProbeSets::has_set(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_.count(name) != 0;
}

void ProbeSets::Shutdown(bool wait, double timeout_seconds) {
  std::vector<std::shared_ptr<Version>> versions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    reaper_stop_ = true;
  }
  reaper_cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();  // retires what was queued first
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [name, v] : current_) versions.push_back(v);
    for (auto& [seq, v] : by_seq_) versions.push_back(v);
    for (auto& [id, v] : assigned_) versions.push_back(v);
  }
  std::sort(versions.begin(), versions.end());
  versions.erase(std::unique(versions.begin(), versions.end()), versions.end());
  for (const std::shared_ptr<Version>& v : versions) v->session->Shutdown(wait, timeout_seconds);
}

void ProbeSets::OnRequestAdded(uint64_t seq_id, const std::string& request_id,
                               std::span<const int32_t> prompt_ids) {
  std::shared_ptr<Version> v;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = assigned_.find(request_id);
    if (it != assigned_.end()) {
      v = std::move(it->second);
      assigned_.erase(it);
      --v->pending;
    } else {
      v = current_.at(default_set_);
    }
    ++v->live;
  }
  v->requests->Increment();
  auto& entry = live_[{v->number, v->name}];
  if (entry.first == nullptr) entry.first = v;
  ++entry.second;
  by_seq_[seq_id] = v;
  v->session->OnRequestAdded(seq_id, request_id, prompt_ids);
}

std::vector<worker::CaptureItem> ProbeSets::PlanCapture(const worker::SchedulerOutput& plan) {
  std::vector<worker::CaptureItem> items;
  step_parts_.clear();
  for (auto& [key, entry] : live_) {
    std::vector<worker::CaptureItem> part = entry.first->session->PlanCapture(plan);
    step_parts_.push_back({entry.first.get(), part.size()});
    for (worker::CaptureItem& item : part) items.push_back(std::move(item));
  }
  return items;
}

std::vector<engine::StopRequest> ProbeSets::OnStepExecuted(const worker::SchedulerOutput& plan,
                                                           const std::vector<Tensor>& captured) {
  std::vector<engine::StopRequest> stops;
  size_t offset = 0;
  for (const auto& [version, count] : step_parts_) {
    UC_CHECK(offset + count <= captured.size(), "capture came back with %zu items, planned more",
             captured.size());
    std::vector<Tensor> part(captured.begin() + static_cast<std::ptrdiff_t>(offset),
                             captured.begin() + static_cast<std::ptrdiff_t>(offset + count));
    offset += count;
    for (engine::StopRequest& s : version->session->OnStepExecuted(plan, part)) {
      stops.push_back(std::move(s));
    }
    for (engine::SteeringSwitch& s : version->session->TakeSteeringSwitches()) {
      switches_.push_back(s);
    }
    for (uint64_t seq : version->session->TakeHolds()) holds_.push_back(seq);
  }
  step_parts_.clear();
  return stops;
}

std::vector<engine::SteeringSwitch> ProbeSets::TakeSteeringSwitches() {
  std::vector<engine::SteeringSwitch> out;
  out.swap(switches_);
  return out;
}

std::vector<uint64_t> ProbeSets::TakeHolds() {
  std::vector<uint64_t> out;
  out.swap(holds_);
  return out;
}

std::vector<engine::HoldDecision> ProbeSets::TakeHoldDecisions() {
  // A request belongs to one version: the versions' decisions never concern the same one.
  std::vector<engine::HoldDecision> out;
  for (auto& [key, entry] : live_) {
    for (engine::HoldDecision& d : entry.first->session->TakeHoldDecisions()) {
      out.push_back(std::move(d));
    }
  }
  return out;
}

bool ProbeSets::WantsPromptActivations(uint64_t seq_id) {
  auto it = by_seq_.find(seq_id);
  return it == by_seq_.end() || it->second->session->WantsPromptActivations(seq_id);
}

bool ProbeSets::WantsFinalToken(uint64_t seq_id, int64_t num_generated) {
  auto it = by_seq_.find(seq_id);
  return it != by_seq_.end() && it->second->session->WantsFinalToken(seq_id, num_generated);
}

void ProbeSets::OnRequestFinished(uint64_t seq_id, int64_t num_generated, bool aborted) {
  auto it = by_seq_.find(seq_id);
  if (it == by_seq_.end()) return;
  std::shared_ptr<Version> v = std::move(it->second);
  by_seq_.erase(it);
  v->session->OnRequestFinished(seq_id, num_generated, aborted);
  auto live = live_.find({v->number, v->name});
  if (live != live_.end() && --live->second.second == 0) live_.erase(live);
  std::lock_guard<std::mutex> lock(mu_);
  --v->live;
  if (!v->current && v->live == 0 && v->pending == 0 && !shut_down_) RetireLocked(std::move(v));
}

}  // namespace uc::probe
