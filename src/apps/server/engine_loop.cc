#include "apps/server/engine_loop.h"

#include "base/logging.h"

namespace uc::server {

std::vector<ChannelEvent> RequestChannel::Wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return !events_.empty(); });
  std::vector<ChannelEvent> events;
  events.swap(events_);
  return events;
}

void RequestChannel::Push(ChannelEvent event) {
  std::function<void()> notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
    notify = notify_;
  }
  cv_.notify_one();
  if (notify) notify();
}

void RequestChannel::SetNotifier(std::function<void()> notify) {
  std::lock_guard<std::mutex> lock(mu_);
  notify_ = std::move(notify);
}

EngineLoop::EngineLoop(engine::LLMEngine* engine, probe::ProbeSets* probe_sets)
    : engine_(engine), probe_sets_(probe_sets) {
  stats_ = engine_->stats();
  if (probe_sets_ != nullptr) {
    probe_sets_->SetResultCallback(
        [this](probe::RequestProbeResults results) { OnProbeResults(std::move(results)); });
  }
}

EngineLoop::~EngineLoop() {
  Stop();
  if (probe_sets_ != nullptr) probe_sets_->SetResultCallback(nullptr);
}

void EngineLoop::Start() {
  UC_CHECK(!thread_.joinable(), "EngineLoop::Start called twice");
  thread_ = std::thread([this] { Run(); });
}

void EngineLoop::Stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    stopping_ = true;
  }
  wake_cv_.notify_all();
  thread_.join();
}

void EngineLoop::Run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(wake_mu_);
      wake_ = false;
      if (!engine_->HasUnfinished()) {
        if (stopping_) return;
        // Submit sets wake_ under wake_mu_ after queueing, so no request is missed between
        // the check above and this wait.
        wake_cv_.wait(lock, [this] { return wake_ || stopping_; });
        continue;
      }
    }
    const auto start = std::chrono::steady_clock::now();
    std::vector<engine::RequestOutput> outputs = engine_->Step();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const engine::EngineStats stats = engine_->stats();
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      stats_ = stats;
    }
    if (step_hook_) step_hook_(stats, seconds);
    Dispatch(outputs);
  }
}

void EngineLoop::Dispatch(std::vector<engine::RequestOutput>& outputs) {
  for (engine::RequestOutput& out : outputs) {
    if (out.finished && finish_hook_) finish_hook_(out);
    std::shared_ptr<RequestChannel> channel;
    int index = 0;
    {
      std::lock_guard<std::mutex> lock(routes_mu_);
      auto it = routes_.find(out.request_id);
      if (it == routes_.end()) continue;  // released: the client went away
      channel = it->second.channel.lock();
      index = it->second.index;
      if (out.finished) {
        it->second.finished = true;
        if (probe_sets_ == nullptr || it->second.probed) routes_.erase(it);
      }
    }
    if (channel == nullptr) continue;
    if (!out.new_text.empty() || !out.new_logprobs.empty()) {
      ChannelEvent e;
      e.kind = ChannelEvent::Kind::kText;
      e.index = index;
      e.text = std::move(out.new_text);
      e.logprobs = std::move(out.new_logprobs);
      // The finished event below keeps its own copy.
      if (out.finished) {
        e.prompt_logprobs = out.prompt_logprobs;
      } else {
        e.prompt_logprobs = std::move(out.prompt_logprobs);
      }
      channel->Push(std::move(e));
    }
    if (out.finished) {
      ChannelEvent e;
      e.kind = ChannelEvent::Kind::kFinished;
      e.index = index;
      e.output = std::move(out);
      channel->Push(std::move(e));
    }
  }
}

void EngineLoop::OnProbeResults(probe::RequestProbeResults results) {
  std::shared_ptr<RequestChannel> channel;
  int index = 0;
  {
    std::lock_guard<std::mutex> lock(routes_mu_);
    auto it = routes_.find(results.request_id);
    if (it == routes_.end()) return;
    channel = it->second.channel.lock();
    index = it->second.index;
    it->second.probed = true;
    if (it->second.finished) routes_.erase(it);
  }
  if (channel == nullptr) return;
  ChannelEvent e;
  e.kind = ChannelEvent::Kind::kProbing;
  e.index = index;
  e.probing = std::move(results);
  channel->Push(std::move(e));
}

StatusOr<std::shared_ptr<RequestChannel>> EngineLoop::Submit(std::vector<EngineRequest> requests) {
  std::vector<std::string> ids;
  for (const EngineRequest& r : requests) ids.push_back(r.id);
  auto channel = std::make_shared<RequestChannel>(ids);
  {
    // Routes first: the engine thread may step (and finish a request) right after AddRequest.
    std::lock_guard<std::mutex> lock(routes_mu_);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (routes_.count(ids[i]) != 0) {
        for (size_t j = 0; j < i; ++j) routes_.erase(ids[j]);
        return InvalidArgumentError("request id '" + ids[i] + "' is already in use");
      }
      routes_[ids[i]] = Route{channel, static_cast<int>(i)};
    }
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    const Status status = engine_->AddRequest(requests[i].id, requests[i].prompt,
                                              requests[i].params, requests[i].steering);
    if (!status.ok()) {
      Release(*channel, "rejected");
      return status;
    }
  }
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    wake_ = true;
  }
  wake_cv_.notify_one();
  return channel;
}

void EngineLoop::Release(const RequestChannel& channel, const std::string& why) {
  std::vector<std::string> to_abort;
  {
    std::lock_guard<std::mutex> lock(routes_mu_);
    for (const std::string& id : channel.engine_ids()) {
      auto it = routes_.find(id);
      if (it == routes_.end()) continue;
      if (!it->second.finished) to_abort.push_back(id);
      routes_.erase(it);
    }
  }
  bool aborted = false;
  for (const std::string& id : to_abort) aborted |= engine_->Abort(id, {"client", why});
  if (aborted) {
    {
      std::lock_guard<std::mutex> lock(wake_mu_);
      wake_ = true;
    }
    wake_cv_.notify_one();
  }
}

void EngineLoop::AbortAll(const std::string& why) {
  std::vector<std::string> ids;
  {
    std::lock_guard<std::mutex> lock(routes_mu_);
    for (const auto& [id, route] : routes_) {
      if (!route.finished) ids.push_back(id);
    }
  }
  for (const std::string& id : ids) engine_->Abort(id, {"shutdown", why});
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    wake_ = true;
  }
  wake_cv_.notify_one();
}

engine::EngineStats EngineLoop::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

}  // namespace uc::server
