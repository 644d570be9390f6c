#include "probe/runtime/escalation.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>

namespace uc::probe {
namespace {

constexpr size_t kMaxAnswerBytes = 64 * 1024;

using Outcome = EscalationAnswer::Outcome;

struct Endpoint {
  std::string base;  // scheme://host:port
  std::string path;
};

std::optional<Endpoint> Split(const std::string& url) {
  const size_t sep = url.find("://");
  if (sep == std::string::npos) return std::nullopt;
  const size_t slash = url.find('/', sep + 3);
  return Endpoint{url.substr(0, slash), slash == std::string::npos ? "/" : url.substr(slash)};
}

// One POST on `client` (set up for config.url).
EscalationAnswer Post(httplib::Client& client, const std::string& path,
                      const EscalationConfig& config, const std::string& body) {
  const auto timeout = std::chrono::milliseconds(config.timeout_ms);
  client.set_connection_timeout(timeout);
  client.set_read_timeout(timeout);
  client.set_write_timeout(timeout);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers.emplace("Content-Type", "application/json");
  req.body = body;
  std::string answer;
  bool too_long = false;
  int status = 0;
  req.response_handler = [&status](const httplib::Response& response) {
    status = response.status;
    return true;
  };
  req.content_receiver = [&answer, &too_long](const char* data, size_t n, uint64_t, uint64_t) {
    too_long = answer.size() + n > kMaxAnswerBytes;
    if (!too_long) answer.append(data, n);
    return !too_long;
  };
  const auto start = std::chrono::steady_clock::now();
  httplib::Result res = client.send(req);
  if (too_long) {
    return {Outcome::kError,
            "the classifier's answer is longer than " + std::to_string(kMaxAnswerBytes) + " bytes"};
  }
  if (!res) {
    const auto elapsed = std::chrono::steady_clock::now() - start;
    // A refused connection fails at once; a silent peer runs into one of the timeouts.
    if (elapsed >= timeout * 9 / 10) {
      return {Outcome::kTimeout, "no answer from " + config.url + " within " +
                                     std::to_string(config.timeout_ms) + " ms"};
    }
    return {Outcome::kError,
            "classifier " + config.url + " unreachable: " + httplib::to_string(res.error())};
  }
  if (status == 0) status = res->status;
  if (status < 200 || status >= 300) {
    return {Outcome::kError,
            "classifier " + config.url + " answered HTTP " + std::to_string(status)};
  }
  const nlohmann::json parsed = nlohmann::json::parse(answer, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object()) {
    const auto decision = parsed.find("decision");
    if (decision != parsed.end() && *decision == "continue") return {Outcome::kContinue, ""};
    if (decision != parsed.end() && *decision == "abort") return {Outcome::kAbort, ""};
  }
  return {Outcome::kError,
          "classifier " + config.url +
              " answered without a decision of 'continue' or 'abort': " + answer.substr(0, 120)};
}

}  // namespace

std::string_view Name(EscalationAnswer::Outcome outcome) {
  switch (outcome) {
    case Outcome::kContinue:
      return "continue";
    case Outcome::kAbort:
      return "abort";
    case Outcome::kTimeout:
      return "timeout";
    case Outcome::kError:
      return "error";
  }
  return "error";
}

EscalationAnswer PostEscalation(const EscalationConfig& config, const std::string& body) {
  const std::optional<Endpoint> endpoint = Split(config.url);
  if (!endpoint.has_value()) return {Outcome::kError, "url '" + config.url + "' has no scheme"};
  httplib::Client client(endpoint->base);
  if (!client.is_valid()) return {Outcome::kError, "url '" + config.url + "' is not usable"};
  return Post(client, endpoint->path, config, body);
}

Escalator::Escalator(int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) workers_.emplace_back([this] { Run(); });
}

Escalator::~Escalator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    calls_.clear();
    // Calls under way end now (their sockets shut), not at their timeout.
    for (httplib::Client* client : active_) client->stop();
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void Escalator::Submit(EscalationConfig config, std::string body,
                       std::function<void(EscalationAnswer)> done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    calls_.push_back({std::move(config), std::move(body), std::move(done)});
  }
  cv_.notify_one();
}

void Escalator::Run() {
  while (true) {
    Call call;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !calls_.empty(); });
      if (calls_.empty()) return;
      call = std::move(calls_.front());
      calls_.pop_front();
    }
    const std::optional<Endpoint> endpoint = Split(call.config.url);
    if (!endpoint.has_value()) {
      if (call.done) call.done({Outcome::kError, "url '" + call.config.url + "' has no scheme"});
      continue;
    }
    httplib::Client client(endpoint->base);
    if (!client.is_valid()) {
      if (call.done) call.done({Outcome::kError, "url '" + call.config.url + "' is not usable"});
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      active_.push_back(&client);
    }
    EscalationAnswer answer = Post(client, endpoint->path, call.config, call.body);
    {
      std::lock_guard<std::mutex> lock(mu_);
      active_.erase(std::find(active_.begin(), active_.end(), &client));
    }
    if (call.done) call.done(std::move(answer));
  }
}

}  // namespace uc::probe
