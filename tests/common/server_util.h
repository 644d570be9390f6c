// File: server_util.h
// -----------------------------------------------------------------------------
// Running `undercurrent serve` in tests: start the real binary on a free loopback port, talk to
// it over HTTP (cpp-httplib's client), read server-sent event streams, stop it with a signal
// and collect its exit status.
#pragma once

#include <sys/types.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace uc::testing {

class ServeProcess {
 public:
  // Starts `undercurrent serve --port 0 ARGS...` and waits (up to `timeout_seconds`) for its
  // "listening on" line. Check ok() and log() on failure. A non-zero `open_file_limit` is the
  // process's open-file limit, soft and hard (as `ulimit -n` sets it).
  explicit ServeProcess(const std::vector<std::string>& args, double timeout_seconds = 120,
                        int open_file_limit = 0);
  ~ServeProcess();  // SIGKILLs a process still running

  bool ok() const { return port_ > 0; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  // Everything the process printed so far (stdout and stderr).
  std::string log();

  // Sends `signal`; with wait, waits for the exit (SIGKILL after `timeout_seconds`) and returns
  // the exit status (128 + signal when killed by one).
  void Signal(int signal);
  int Wait(double timeout_seconds = 60);

 private:
  void Drain(double timeout_seconds);
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int port_ = 0;
  int exit_status_ = -1;
  std::string log_;
};

struct HttpResult {
  int status = -1;  // -1: no response (connection failed or cancelled)
  std::string body;
  std::string content_type;
  nlohmann::json Json() const;  // null when the body is not JSON
};

// One request to 127.0.0.1:port. `headers` as {name, value} pairs.
HttpResult HttpPost(int port, const std::string& path, const std::string& body,
                    const std::vector<std::pair<std::string, std::string>>& headers = {});
HttpResult HttpGet(int port, const std::string& path);
HttpResult HttpGetWithHeaders(int port, const std::string& path,
                              const std::vector<std::pair<std::string, std::string>>& headers);

// A streamed response: the data of each server-sent event in order (event name, data).
struct SseEvent {
  std::string event;  // empty for plain data events
  std::string data;
};
struct StreamResult {
  int status = -1;
  std::vector<SseEvent> events;
  bool cancelled = false;
  std::string error;  // why there is no response, when status is -1
};
// POSTs `body` (with `headers`) and reads the event stream. `on_event` (may be null) sees each
// event as it arrives; returning false closes the connection (a client that goes away).
StreamResult HttpStream(int port, const std::string& path, const std::string& body,
                        const std::function<bool(const SseEvent&)>& on_event = nullptr,
                        const std::vector<std::pair<std::string, std::string>>& headers = {});

// A socket connected to 127.0.0.1:port (the caller closes it), or -1.
int ConnectLoopback(int port);

// Sends `request` (raw bytes, e.g. "GET /%ff HTTP/1.1\r\nHost: x\r\n\r\n") on a fresh
// connection to 127.0.0.1:port and returns all the server sent until it closed the connection
// or `timeout_seconds` passed; "" when it could not connect.
std::string RawHttp(int port, const std::string& request, double timeout_seconds = 10);

// The value of an unlabelled sample in Prometheus text (`name value`), or -1.
double MetricValue(const std::string& metrics_text, const std::string& name);

}  // namespace uc::testing
