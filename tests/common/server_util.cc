#include "common/server_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <regex>
#include <sstream>
#include <thread>

#include "common/test_util.h"

namespace uc::testing {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

ServeProcess::ServeProcess(const std::vector<std::string>& args, double timeout_seconds,
                           int open_file_limit) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return;
  const std::string binary = CliBinary().string();
  std::vector<std::string> argv = {binary, "serve", "--port", "0"};
  argv.insert(argv.end(), args.begin(), args.end());
  pid_ = fork();
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test, whatever ends it
    dup2(pipe_fds[1], 1);
    dup2(pipe_fds[1], 2);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    if (open_file_limit > 0) {
      const rlimit limit{static_cast<rlim_t>(open_file_limit),
                         static_cast<rlim_t>(open_file_limit)};
      if (setrlimit(RLIMIT_NOFILE, &limit) != 0) _exit(126);
    }
    std::vector<char*> c_args;
    for (std::string& a : argv) c_args.push_back(a.data());
    c_args.push_back(nullptr);
    execv(binary.c_str(), c_args.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  out_fd_ = pipe_fds[0];
  fcntl(out_fd_, F_SETFL, fcntl(out_fd_, F_GETFL) | O_NONBLOCK);
  const std::regex listening(R"(listening on http://[^:\s]+:(\d+))");
  const auto start = Clock::now();
  while (SecondsSince(start) < timeout_seconds) {
    Drain(0.1);
    std::smatch m;
    if (std::regex_search(log_, m, listening)) {
      port_ = std::stoi(m[1]);
      return;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {  // exited before listening
      exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      Drain(0.1);
      return;
    }
  }
}

ServeProcess::~ServeProcess() {
  if (pid_ > 0 && exit_status_ < 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (out_fd_ >= 0) close(out_fd_);
}

void ServeProcess::Drain(double timeout_seconds) {
  pollfd p{out_fd_, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout_seconds * 1000)) <= 0) return;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(out_fd_, buf, sizeof(buf));
    if (n <= 0) return;
    log_.append(buf, static_cast<size_t>(n));
  }
}

std::string ServeProcess::log() {
  Drain(0);
  return log_;
}

void ServeProcess::Signal(int signal) {
  if (pid_ > 0 && exit_status_ < 0) kill(pid_, signal);
}

int ServeProcess::Wait(double timeout_seconds) {
  if (exit_status_ >= 0 || pid_ <= 0) return exit_status_;
  const auto start = Clock::now();
  for (;;) {
    Drain(0.05);
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      Drain(0.05);
      return exit_status_;
    }
    if (SecondsSince(start) > timeout_seconds) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      exit_status_ = 128 + SIGKILL;
      return exit_status_;
    }
  }
}

nlohmann::json HttpResult::Json() const {
  return nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
}

namespace {

httplib::Client MakeClient(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(300, 0);
  client.set_write_timeout(60, 0);
  client.set_connection_timeout(10, 0);
  return client;
}

}  // namespace

HttpResult HttpPost(int port, const std::string& path, const std::string& body,
                    const std::vector<std::pair<std::string, std::string>>& headers) {
  httplib::Client client = MakeClient(port);
  httplib::Headers h;
  for (const auto& [k, v] : headers) h.emplace(k, v);
  HttpResult r;
  if (auto res = client.Post(path.c_str(), h, body, "application/json")) {
    r.status = res->status;
    r.body = res->body;
    r.content_type = res->get_header_value("Content-Type");
  }
  return r;
}

HttpResult HttpGet(int port, const std::string& path) { return HttpGetWithHeaders(port, path, {}); }

HttpResult HttpGetWithHeaders(int port, const std::string& path,
                              const std::vector<std::pair<std::string, std::string>>& headers) {
  httplib::Client client = MakeClient(port);
  httplib::Headers h;
  for (const auto& [name, value] : headers) h.emplace(name, value);
  HttpResult r;
  if (auto res = client.Get(path.c_str(), h)) {
    r.status = res->status;
    r.body = res->body;
    r.content_type = res->get_header_value("Content-Type");
  }
  return r;
}

StreamResult HttpStream(int port, const std::string& path, const std::string& body,
                        const std::function<bool(const SseEvent&)>& on_event,
                        const std::vector<std::pair<std::string, std::string>>& headers) {
  httplib::Client client = MakeClient(port);
  StreamResult result;
  std::string buffer;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  for (const auto& [name, value] : headers) req.set_header(name, value);
  req.response_handler = [&](const httplib::Response& res) {
    result.status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    buffer.append(data, size);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
      const std::string block = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      SseEvent event;
      std::istringstream lines(block);
      for (std::string line; std::getline(lines, line);) {
        if (line.rfind("event: ", 0) == 0) event.event = line.substr(7);
        if (line.rfind("data: ", 0) == 0) event.data += line.substr(6);
      }
      if (event.data.empty()) continue;  // a comment (heartbeat)
      result.events.push_back(event);
      if (on_event && !on_event(event)) {
        result.cancelled = true;
        return false;
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  if (!client.send(req, res, error) && !result.cancelled && result.status < 0) {
    result.error = httplib::to_string(error);
  }
  if (result.status < 0 && res.status > 0) result.status = res.status;
  // A non-streamed error body arrives as one block without a blank line.
  if (result.events.empty() && !buffer.empty()) result.events.push_back({"", buffer});
  return result;
}

int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

std::string RawHttp(int port, const std::string& request, double timeout_seconds) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return "";
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::string response;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_seconds));
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    response.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return response;
}

double MetricValue(const std::string& metrics_text, const std::string& name) {
  std::istringstream lines(metrics_text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  return -1;
}

}  // namespace uc::testing
