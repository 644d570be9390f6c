#include "probe/sinks/webhook_sink.h"

#include <httplib.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>

#include <chrono>
#include <cstdlib>

#include "base/logging.h"

namespace uc::probe {

using nlohmann::json;

// Where records go: scheme://host:port and the path.
struct WebhookSink::Target {
  std::string scheme_host_port;
  std::string path;
  std::unique_ptr<httplib::Client> client;
};

namespace {

struct ParsedUrl {
  std::string scheme;
  std::string host_port;
  std::string path;
};

StatusOr<ParsedUrl> ParseUrl(const std::string& url) {
  const size_t sep = url.find("://");
  if (sep == std::string::npos) {
    return InvalidArgumentError("webhook url '" + url +
                                "' has no scheme; write it as http://HOST[:PORT]/PATH");
  }
  ParsedUrl out;
  out.scheme = url.substr(0, sep);
  if (out.scheme != "http" && out.scheme != "https") {
    return InvalidArgumentError("webhook url '" + url + "': scheme '" + out.scheme +
                                "' is not supported; use http or https");
  }
  const std::string rest = url.substr(sep + 3);
  const size_t slash = rest.find('/');
  out.host_port = rest.substr(0, slash);
  out.path = slash == std::string::npos ? "/" : rest.substr(slash);
  if (out.host_port.empty()) {
    return InvalidArgumentError("webhook url '" + url + "' has no host");
  }
  if (out.host_port.find('@') != std::string::npos) {
    return InvalidArgumentError("webhook url '" + url +
                                "': credentials in the URL are not supported; pass a bearer "
                                "token through --webhook-token-env");
  }
  return out;
}

void SetTimeouts(httplib::Client& client, double seconds) {
  const auto sec = static_cast<time_t>(seconds);
  const auto usec = static_cast<time_t>((seconds - static_cast<double>(sec)) * 1e6);
  client.set_connection_timeout(sec, usec);
  client.set_read_timeout(sec, usec);
  client.set_write_timeout(sec, usec);
}

}  // namespace

StatusOr<std::shared_ptr<WebhookSink>> WebhookSink::Open(WebhookOptions options, Metrics* metrics) {
  UC_ASSIGN_OR_RETURN(ParsedUrl url, ParseUrl(options.url));
  if (options.max_retries < 0 || options.backoff_base_seconds < 0 ||
      options.request_timeout_seconds <= 0 || options.queue_max == 0) {
    return InvalidArgumentError(
        "webhook: max_retries and backoff must be >= 0, the request timeout > 0 and the queue "
        "size >= 1");
  }
  std::shared_ptr<WebhookSink> sink(new WebhookSink(options));
  UC_ASSIGN_OR_RETURN(sink->redactor_, Redactor::Create(options.redaction));
  if (!options.bearer_token_env.empty()) {
    const char* token = std::getenv(options.bearer_token_env.c_str());
    if (token == nullptr || *token == '\0') {
      return InvalidArgumentError("webhook: environment variable " + options.bearer_token_env +
                                  " (the bearer token) is not set");
    }
    sink->bearer_token_ = token;
  }
  if (!options.dead_letter_path.empty()) {
    UC_ASSIGN_OR_RETURN(sink->dead_letters_,
                        NdjsonFileSink::Open(options.dead_letter_path, {}, nullptr));
  }
  sink->target_ = std::make_unique<Target>();
  sink->target_->scheme_host_port = url.scheme + "://" + url.host_port;
  sink->target_->path = url.path;
  sink->target_->client = std::make_unique<httplib::Client>(sink->target_->scheme_host_port);
  if (!sink->target_->client->is_valid()) {
    return InvalidArgumentError("webhook url '" + options.url + "' is not a valid endpoint");
  }
  SetTimeouts(*sink->target_->client, options.request_timeout_seconds);
  sink->target_->client->set_keep_alive(true);
  if (metrics != nullptr) sink->metrics_ = &metrics->Sink("webhook");
  sink->rng_.seed(
      options.jitter_seed != 0
          ? options.jitter_seed
          : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  UC_LOG(INFO) << "webhook sink: posting to " << sink->target_->scheme_host_port << " ("
               << sink->redactor_.Describe() << "; dead letters: "
               << (options.dead_letter_path.empty() ? std::string("none, failures are dropped")
                                                    : options.dead_letter_path.string())
               << ")";
  sink->sender_ = std::thread([s = sink.get()] { s->SenderLoop(); });
  return sink;
}

WebhookSink::WebhookSink(WebhookOptions options) : options_(std::move(options)) {}

WebhookSink::~WebhookSink() { (void)Close(10.0); }

WebhookStats WebhookSink::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void WebhookSink::Write(const json& record) {
  json redacted = redactor_.Apply(record);
  const char* reason = "queue_full";
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.written;
    if (!closing_ && queue_.size() < options_.queue_max) {
      queue_.push_back(Item{std::move(redacted)});
      ++stats_.queued;
      if (metrics_ != nullptr) metrics_->queue_depth->Increment();
      cv_.notify_one();
      return;
    }
    if (closing_) reason = "written_after_close";
  }
  DeadLetter(std::move(redacted), reason, 0, "");
}

double WebhookSink::Backoff(int failed_attempt) {
  const double full = std::min(options_.backoff_max_seconds,
                               options_.backoff_base_seconds * std::pow(2.0, failed_attempt));
  std::uniform_real_distribution<double> half(0.0, full / 2);
  return full / 2 + half(rng_);
}

std::string WebhookSink::Post(const std::string& body) {
  httplib::Request req;
  req.method = "POST";
  req.path = target_->path;
  if (!bearer_token_.empty()) req.headers.emplace("Authorization", "Bearer " + bearer_token_);
  req.headers.emplace("Content-Type", "application/json");
  req.body = body;
  // The receiver's answer is read at most kMaxWebhookResponseBytes deep: only its status
  // matters, and an endpoint that streams an endless body must not grow our memory.
  int status = 0;
  size_t received = 0;
  bool cut = false;
  req.response_handler = [&status](const httplib::Response& response) {
    status = response.status;
    return true;
  };
  req.content_receiver = [&received, &cut](const char*, size_t n, uint64_t, uint64_t) {
    received += n;
    cut = received > kMaxWebhookResponseBytes;
    return !cut;
  };
  httplib::Result res = target_->client->send(req);
  if (!res && !(cut && status != 0)) return "request failed: " + httplib::to_string(res.error());
  if (status == 0 && res) status = res->status;
  if (status >= 200 && status < 300) return "";
  return "HTTP " + std::to_string(status);
}

void WebhookSink::DeadLetter(json record, const std::string& reason, int attempts,
                             const std::string& error) {
  record["dead_letter"] = {
      {"reason", reason}, {"attempts", attempts}, {"error", error}, {"url", options_.url}};
  Status status =
      dead_letters_ == nullptr
          ? UnavailableError("no dead-letter file is configured")
          : dead_letters_->AppendLine(record.dump(-1, ' ', false, json::error_handler_t::replace));
  std::lock_guard<std::mutex> lock(mu_);
  if (status.ok()) {
    ++stats_.dead_lettered;
    if (metrics_ != nullptr) metrics_->dead_lettered->Increment();
    if (stats_.dead_lettered == 1 || stats_.dead_lettered % 1000 == 0) {
      UC_LOG(WARNING) << "webhook sink: " << stats_.dead_lettered << " record(s) dead-lettered to "
                      << options_.dead_letter_path.string() << " (last: " << reason
                      << (error.empty() ? "" : ", " + error) << ", url " << options_.url << ")";
    }
  } else {
    ++stats_.dropped;
    if (metrics_ != nullptr) metrics_->dropped->Increment();
    if (stats_.dropped == 1 || stats_.dropped % 1000 == 0) {
      UC_LOG(ERROR) << "webhook sink: " << stats_.dropped << " record(s) lost (" << reason
                    << (error.empty() ? "" : ", " + error) << "; " << status.message() << ")";
    }
  }
}

void WebhookSink::SenderLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return closing_ || !queue_.empty(); });
    if (queue_.empty()) break;  // closing and flushed
    Item item = std::move(queue_.front());
    queue_.pop_front();
    in_flight_ = true;
    if (metrics_ != nullptr) metrics_->queue_depth->Decrement();
    const bool abandoned = abandon_;
    lock.unlock();
    const std::string body = item.record.dump(-1, ' ', false, json::error_handler_t::replace);
    std::string error = abandoned ? "the sink was closed before it could be sent" : "";
    int attempts = 0;
    bool delivered = false;
    for (int n = 0; n <= options_.max_retries && !abandoned; ++n) {
      if (n > 0) {
        std::unique_lock<std::mutex> sleep_lock(mu_);
        ++stats_.retries;
        if (metrics_ != nullptr) metrics_->retries->Increment();
      }
      ++attempts;
      {
        std::lock_guard<std::mutex> count_lock(mu_);
        ++stats_.attempts;
      }
      error = Post(body);
      if (error.empty()) {
        delivered = true;
        break;
      }
      if (n == options_.max_retries) break;
      std::unique_lock<std::mutex> sleep_lock(mu_);
      const auto pause = std::chrono::duration<double>(Backoff(n));
      if (cv_.wait_for(sleep_lock, pause, [this] { return abandon_; })) break;
    }
    if (delivered) {
      std::lock_guard<std::mutex> count_lock(mu_);
      ++stats_.delivered;
      if (metrics_ != nullptr) metrics_->delivered->Increment();
    } else {
      DeadLetter(std::move(item.record), abandoned ? "closed_before_delivery" : "retries_exhausted",
                 attempts, error);
    }
    lock.lock();
    in_flight_ = false;
    --stats_.queued;
    idle_cv_.notify_all();
  }
  idle_cv_.notify_all();
}

Status WebhookSink::Close(double timeout_seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  if (closed_) return OkStatus();
  closing_ = true;
  cv_.notify_all();
  auto idle = [this] { return queue_.empty() && !in_flight_; };
  bool flushed = true;
  if (timeout_seconds < 0) {
    idle_cv_.wait(lock, idle);
  } else {
    flushed = idle_cv_.wait_for(lock, std::chrono::duration<double>(timeout_seconds), idle);
  }
  if (!flushed) {
    abandon_ = true;  // the sender dead-letters what is left, without further attempts
    cv_.notify_all();
  }
  lock.unlock();
  if (sender_.joinable()) sender_.join();
  lock.lock();
  closed_ = true;
  if (!flushed) {
    return UnavailableError("webhook sink: not flushed within " + std::to_string(timeout_seconds) +
                            " s; the rest went to the dead-letter file");
  }
  return OkStatus();
}

}  // namespace uc::probe
