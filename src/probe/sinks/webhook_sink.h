// File: webhook_sink.h
// -----------------------------------------------------------------------------
// WebhookSink: POSTs each record as JSON to an HTTP(S) endpoint (Undercurrent v0.1's
// WebhookLogSink, fixed where it loses records).
//
//   Write()  redacts nothing itself and never blocks: it appends the record to a bounded
//            in-memory queue. When the queue is full the record goes straight to the
//            dead-letter file (or, without one, is dropped) — counted either way.
//   Sender   one thread POSTs records in queue order (Content-Type: application/json,
//            optional `Authorization: Bearer` from an environment variable). A 2xx answer is
//            delivery; a connection error, a timeout (per attempt) or any other status is a
//            failure, retried after backoff_base * 2^n seconds (capped at backoff_max) with
//            "equal jitter" (half fixed, half uniform random). After max_retries retries the
//            record is dead-lettered: appended to the dead-letter NDJSON file with a
//            `dead_letter` object {reason, attempts, error, url}.
//   Close()  a flush: records already queued are still delivered, until the timeout; what is
//            left then is dead-lettered (not lost). Writes after Close are dead-lettered.
//
// Redaction (redaction.h) runs on every record before it is sent or dead-lettered: by
// default the prompt-text keys are redacted; include_prompt_text turns that off.
//
// Accounting: every record written ends as exactly one of delivered, dead_lettered or dropped
// (dropped only when there is no dead-letter file, or writing it failed); see stats().
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "probe/sinks/metrics.h"
#include "probe/sinks/ndjson_file_sink.h"
#include "probe/sinks/redaction.h"
#include "probe/sinks/sink.h"

namespace uc::probe {

// The most of a receiver's response body read (its status is all that matters); the rest is
// not read, so an endless answer cannot grow memory.
inline constexpr size_t kMaxWebhookResponseBytes = 64 << 10;

struct WebhookOptions {
  std::string url;                    // http://host[:port][/path] or https://...
  int max_retries = 2;                // retries after the first attempt
  double backoff_base_seconds = 0.1;  // sleep after failed attempt n: base * 2^n, jittered
  double backoff_max_seconds = 30.0;
  double request_timeout_seconds = 5.0;    // per attempt (connect, write, read)
  std::filesystem::path dead_letter_path;  // empty: records that fail are dropped (counted)
  size_t queue_max = 1000;
  std::string bearer_token_env;  // name of an environment variable holding the token
  RedactionOptions redaction;    // default: prompt text redacted
  uint64_t jitter_seed = 0;      // 0: seeded from the clock
};

struct WebhookStats {
  int64_t written = 0;        // Write calls
  int64_t delivered = 0;      // 2xx
  int64_t attempts = 0;       // POSTs tried
  int64_t retries = 0;        // attempts after a failure
  int64_t dead_lettered = 0;  // in the dead-letter file
  int64_t dropped = 0;        // lost, counted (no dead-letter file, or it failed)
  int64_t queued = 0;         // waiting or in flight
};

class WebhookSink : public Sink {
 public:
  // InvalidArgument for a bad URL, an unset token variable, bad numbers or redaction keys;
  // the dead-letter file's directory must exist. Starts the sender thread and logs one line
  // with the scheme and host (never the path or token) and the redaction policy.
  static StatusOr<std::shared_ptr<WebhookSink>> Open(WebhookOptions options,
                                                     Metrics* metrics = nullptr);
  ~WebhookSink() override;  // Close(10 s) if not closed

  void Write(const nlohmann::json& record) override;
  Status Close(double timeout_seconds) override;
  std::string name() const override { return "webhook"; }
  WebhookStats stats() const;

 private:
  struct Item {
    nlohmann::json record;  // redacted
  };
  struct Target;
  explicit WebhookSink(WebhookOptions options);
  void SenderLoop();
  // One POST; empty when delivered, else what went wrong.
  std::string Post(const std::string& body);
  void DeadLetter(nlohmann::json record, const std::string& reason, int attempts,
                  const std::string& error);
  double Backoff(int failed_attempt);

  WebhookOptions options_;
  Redactor redactor_;
  std::unique_ptr<Target> target_;
  std::shared_ptr<NdjsonFileSink> dead_letters_;
  SinkMetrics* metrics_ = nullptr;
  std::string bearer_token_;

  mutable std::mutex mu_;
  std::condition_variable cv_;       // sender: work or closing
  std::condition_variable idle_cv_;  // Close: queue empty and nothing in flight
  std::deque<Item> queue_;
  bool in_flight_ = false;
  bool closing_ = false;  // no more records accepted into the queue
  bool abandon_ = false;  // Close timed out: stop retrying, dead-letter the rest
  bool closed_ = false;
  WebhookStats stats_;
  std::mt19937_64 rng_;
  std::thread sender_;
};

}  // namespace uc::probe
