// File: classifier_util.h
// -----------------------------------------------------------------------------
// A local HTTP escalation classifier for tests (probe action `escalate`): a cpp-httplib server
// on a free 127.0.0.1 port that answers every POST /classify with {"decision": DECISION}.
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace uc::testing {

// An HTTP classifier on 127.0.0.1: answers `decision` after `delay_ms` (or earlier, once
// Release() is called), or never (until it is destroyed) when `silent`. Keeps every body it got.
class Classifier {
 public:
  Classifier(std::string decision, int delay_ms, bool silent = false)
      : decision_(std::move(decision)), delay_ms_(delay_ms), silent_(silent) {
    server_.Post("/classify", [this](const httplib::Request& req, httplib::Response& res) {
      std::unique_lock<std::mutex> lock(mu_);
      bodies_.push_back(nlohmann::json::parse(req.body));
      const auto wait =
          silent_ ? std::chrono::milliseconds(60000) : std::chrono::milliseconds(delay_ms_);
      cv_.wait_for(lock, wait, [this] { return closing_ || released_; });
      if (silent_) {
        res.status = 500;
        return;
      }
      res.set_content(nlohmann::json{{"decision", decision_}}.dump(), "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~Classifier() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
    }
    cv_.notify_all();
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/classify"; }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }
  std::vector<nlohmann::json> bodies() {
    std::lock_guard<std::mutex> lock(mu_);
    return bodies_;
  }

 private:
  std::string decision_;
  int delay_ms_;
  bool silent_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool closing_ = false;
  bool released_ = false;
  std::vector<nlohmann::json> bodies_;
};

}  // namespace uc::testing
