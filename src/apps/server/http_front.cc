#include "apps/server/http_front.h"

#include <malloc.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <exception>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/logging.h"

namespace uc::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string HttpRequest::Header(const std::string& name) const {
  for (const auto& [key, value] : headers) {
    if (beast::iequals(key, name)) return value;
  }
  return "";
}

std::string DecodeTargetPath(const std::string& target) {
  const std::string path = target.substr(0, target.find('?'));
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%' && i + 2 < path.size() && hex(path[i + 1]) >= 0 && hex(path[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(path[i + 1]) * 16 + hex(path[i + 2])));
      i += 2;
    } else {
      out.push_back(path[i]);
    }
  }
  return out;
}

namespace {

using Clock = std::chrono::steady_clock;

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::clamp(s, 0.001, 1e6)));
}

// Lingering close after an error: how long and how much of a client's unread request is read
// and dropped so that the client sees the answer instead of a connection reset.
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr size_t kLingerBytes = size_t{64} << 20;
// A request body at least this large (as read, or decoded) gives the free heap back to the
// system once it is released: a burst of large requests must not leave the process large.
constexpr size_t kTrimAfterBytes = size_t{1} << 20;
// The open-file limit must leave at least this many connections, else Bind refuses.
constexpr int kMinConnections = 16;

// Returns free heap memory to the system (every malloc arena). One trim runs at a time: a
// caller that finds one running leaves a request, and the running one trims again for it.
void ReturnFreeMemory() {
#ifdef __GLIBC__
  static std::mutex mu;
  static std::atomic<int> requested{0};
  requested.fetch_add(1);
  while (requested.load() > 0) {
    std::unique_lock<std::mutex> lock(mu, std::try_to_lock);
    if (!lock.owns_lock()) return;
    requested.store(0);
    malloc_trim(0);
  }
#endif
}

// The connection's read buffer: a request head must fit (max_header_bytes), a body streams
// through it.
constexpr size_t kReadBufferBytes = size_t{256} << 10;

std::string TrimLower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") + 1 - b);
}

enum class Decoded { kOk, kTooLarge, kCorrupt, kUnsupported };

// True for the content codings the front end undoes ("" is none).
bool KnownEncoding(const std::string& encoding) {
  return encoding.empty() || encoding == "identity" || encoding == "gzip" || encoding == "x-gzip" ||
         encoding == "deflate";
}

// Undoes the Content-Encoding of `*body` in place, producing at most `max_bytes`.
Decoded DecodeContent(const std::string& header, std::string* body, int64_t max_bytes) {
  const std::string encoding = TrimLower(header);
  if (!KnownEncoding(encoding)) return Decoded::kUnsupported;
  if (encoding.empty() || encoding == "identity") return Decoded::kOk;
  if (body->size() > UINT_MAX) return Decoded::kTooLarge;
  z_stream zs{};
  // 15 + 32: zlib or gzip framing, detected from the header (what "deflate" means in practice).
  if (inflateInit2(&zs, 15 + 32) != Z_OK) return Decoded::kCorrupt;
  zs.next_in = reinterpret_cast<Bytef*>(body->data());
  zs.avail_in = static_cast<uInt>(body->size());
  std::string out;
  char chunk[64 << 10];
  Decoded result = Decoded::kOk;
  for (;;) {
    zs.next_out = reinterpret_cast<Bytef*>(chunk);
    zs.avail_out = sizeof(chunk);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      result = Decoded::kCorrupt;  // also a truncated stream (Z_BUF_ERROR: no progress)
      break;
    }
    const size_t n = sizeof(chunk) - zs.avail_out;
    if (static_cast<int64_t>(out.size() + n) > max_bytes) {
      result = Decoded::kTooLarge;
      break;
    }
    out.append(chunk, n);
    if (rc == Z_STREAM_END) break;
  }
  inflateEnd(&zs);
  if (result == Decoded::kOk) body->swap(out);
  return result;
}

using RequestParser = http::request_parser<http::string_body>;

void ConfigureParser(RequestParser& parser, const HttpFrontOptions& options) {
  parser.header_limit(static_cast<std::uint32_t>(
      std::clamp<int64_t>(options.max_header_bytes, 256, kReadBufferBytes / 2)));
  parser.body_limit(static_cast<std::uint64_t>(std::max<int64_t>(0, options.max_body_bytes)));
}

// The status that answers a read error of the parser, or 0 when the connection should just
// close (the client went away, or a timeout with nothing to answer).
int StatusForReadError(beast::error_code ec, bool reading_body) {
  if (ec == http::error::header_limit || ec == http::error::buffer_overflow) return 431;
  if (ec == http::error::body_limit) return 413;
  if (ec == beast::error::timeout) return reading_body ? 408 : 0;
  if (ec.category() == http::make_error_code(http::error::end_of_stream).category() &&
      ec != http::error::end_of_stream && ec != http::error::partial_message) {
    return 400;  // malformed
  }
  return 0;
}

std::vector<std::pair<std::string, std::string>> HeaderList(const http::request_header<>& head) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& field : head) {
    out.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  return out;
}

// Checks a parsed head against the limits the parser does not know: 0 when acceptable.
int CheckHead(const http::request_header<>& head, const HttpFrontOptions& options) {
  int fields = 0;
  for (auto it = head.begin(); it != head.end(); ++it) ++fields;
  if (fields > options.max_header_fields) return 431;
  if (const int status = CheckFraming(HeaderList(head))) return status;
  if (!KnownEncoding(TrimLower(std::string(head[http::field::content_encoding])))) return 415;
  return 0;
}

// The request's head as the application sees it (no body).
void CopyHead(const http::request_header<>& head, HttpRequest* out) {
  out->method = std::string(head.method_string());
  out->target = std::string(head.target());
  out->path = DecodeTargetPath(out->target);
  out->headers = HeaderList(head);
}

// Moves a parsed message into `*out`, undoing its content coding: 0, or the status to answer.
int ToRequest(http::request<http::string_body>&& msg, const HttpFrontOptions& options,
              HttpRequest* out) {
  CopyHead(msg.base(), out);
  out->body = std::move(msg.body());
  switch (DecodeContent(std::string(msg[http::field::content_encoding]), &out->body,
                        options.max_body_bytes)) {
    case Decoded::kOk:
      return 0;
    case Decoded::kTooLarge:
      return 413;
    case Decoded::kCorrupt:
      return 400;
    case Decoded::kUnsupported:
      return 415;
  }
  return 400;
}

}  // namespace

int CheckFraming(const std::vector<std::pair<std::string, std::string>>& headers) {
  bool has_transfer_encoding = false;
  bool has_content_length = false;
  std::vector<std::string> codings;
  for (const auto& [name, value] : headers) {
    if (beast::iequals(name, "Content-Length")) has_content_length = true;
    if (!beast::iequals(name, "Transfer-Encoding")) continue;
    has_transfer_encoding = true;
    size_t start = 0;
    for (;;) {
      const size_t comma = value.find(',', start);
      const std::string coding = TrimLower(value.substr(start, comma - start));
      if (!coding.empty()) codings.push_back(coding);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  if (!has_transfer_encoding) return 0;
  // Only `chunked` is a transfer coding this server decodes; anything else (identity, gzip,
  // chunked twice, chunked then another) cannot be framed, and a Content-Length beside it is
  // the classic smuggling pair.
  if (codings.size() != 1 || codings[0] != "chunked" || has_content_length) return 400;
  return 0;
}

class HttpConnection;

class HttpFront::Impl {
 public:
  Impl(HttpFrontOptions options, Handler handler, ErrorResponder error_responder,
       ResponseHook on_response)
      : options_(std::move(options)),
        handler_(std::move(handler)),
        error_responder_(std::move(error_responder)),
        on_response_(std::move(on_response)),
        acceptor_(ioc_),
        accept_retry_(ioc_) {}
  ~Impl() { Stop(); }

  Status Bind();
  void Start();
  void BeginShutdown();
  void Stop();
  int connections() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(connections_.size());
  }
  int port() const { return port_; }

  const HttpFrontOptions& options() const { return options_; }
  bool shutting_down() const { return shutting_down_.load(); }
  void set_head_check(HeadCheck check) { head_check_ = std::move(check); }
  // The head check's verdict (0: go on); an exception is a 500.
  int CheckRequestHead(const HttpRequest& head) const;
  // Runs the handler on the handler pool (or the light pool, for a GET of a light path); `done`
  // gets the response (never throws).
  void Handle(std::shared_ptr<HttpRequest> request, std::function<void(HttpResponse)> done);
  HttpResponse Error(int status, const std::string& method, const std::string& path) const;
  void Responded(const std::string& path, int status) const {
    if (on_response_) on_response_(path, status);
  }
  void Register(const std::shared_ptr<HttpConnection>& c, const std::string& peer);
  void Unregister(const HttpConnection* c, const std::string& peer);

 private:
  void Accept();
  void OnAccept(beast::error_code ec, tcp::socket socket);
  // Answers 503 on a socket that is not admitted and closes it.
  void Refuse(tcp::socket& socket);
  void RunIo();
  // Raises the open-file limit so that max_connections sockets fit, or lowers the limit;
  // FailedPrecondition when it leaves fewer than kMinConnections.
  Status FitFileLimit();

  HttpFrontOptions options_;
  const Handler handler_;
  const ErrorResponder error_responder_;
  const ResponseHook on_response_;
  HeadCheck head_check_;
  int port_ = 0;
  std::atomic<bool> shutting_down_{false};
  bool started_ = false;
  bool stopped_ = false;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<const HttpConnection*, std::weak_ptr<HttpConnection>> connections_;  // mu_
  std::unordered_map<std::string, int> per_client_;  // open connections by peer address; mu_

  // Destroyed before the registry above: pending handlers own connections.
  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  asio::steady_timer accept_retry_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::unique_ptr<asio::thread_pool> handlers_;
  std::unique_ptr<asio::thread_pool> light_;  // light_paths
  std::vector<std::thread> io_threads_;
};

// One client connection. Every member function runs on the connection's strand, except the
// constructor, Post* and the destructor.
class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  HttpConnection(tcp::socket socket, HttpFront::Impl* front, std::string peer)
      : stream_(std::move(socket)),
        front_(front),
        peer_(std::move(peer)),
        buffer_(kReadBufferBytes),
        tick_(stream_.get_executor()) {}
  ~HttpConnection() { front_->Unregister(this, peer_); }

  void Start() {
    front_->Register(shared_from_this(), peer_);
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->ReadRequest(); });
  }
  void PostBeginShutdown() {
    asio::post(stream_.get_executor(), [self = shared_from_this()] {
      if (self->phase_ == Phase::kIdle || self->phase_ == Phase::kHeader ||
          self->phase_ == Phase::kBody) {
        self->Close();
      }
    });
  }
  void PostClose() {
    asio::post(stream_.get_executor(), [self = shared_from_this()] { self->Close(); });
  }

 private:
  enum class Phase { kIdle, kHeader, kBody, kHandling, kWriting, kLinger, kClosed };

  const HttpFrontOptions& options() const { return front_->options(); }

  void ReadRequest() {
    if (phase_ == Phase::kClosed) return;
    if (front_->shutting_down() && requests_ > 0) return Close();
    parser_.emplace();
    ConfigureParser(*parser_, options());
    method_.clear();
    path_.clear();
    if (requests_ == 0 || buffer_.size() > 0) return ReadHeader();
    // Kept alive: wait (idle timeout) for the first byte of the next request.
    phase_ = Phase::kIdle;
    stream_.expires_after(Seconds(options().idle_timeout_seconds));
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              if (ec) return self->Close();
                              self->buffer_.commit(n);
                              self->ReadHeader();
                            });
  }

  void ReadHeader() {
    if (phase_ == Phase::kClosed) return;
    phase_ = Phase::kHeader;
    stream_.expires_after(Seconds(options().header_timeout_seconds));
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (phase_ == Phase::kClosed) return;
    if (ec) return OnReadError(ec);
    const auto& req = parser_->get();
    method_ = std::string(req.method_string());
    path_ = DecodeTargetPath(std::string(req.target()));
    if (const int status = CheckHead(req.base(), options())) return Fail(status);
    {
      HttpRequest head;
      CopyHead(req.base(), &head);
      if (const int status = front_->CheckRequestHead(head)) return Fail(status);
    }
    if (!parser_->is_done() && beast::iequals(req[http::field::expect], "100-continue")) {
      phase_ = Phase::kWriting;
      stream_.expires_after(Seconds(options().write_timeout_seconds));
      auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_,
                                                                     req.version());
      return http::async_write(stream_, *cont,
                               [self = shared_from_this(), cont](beast::error_code ec, size_t) {
                                 if (ec) return self->Close();
                                 self->ReadBody();
                               });
    }
    ReadBody();
  }

  void ReadBody() {
    if (phase_ == Phase::kClosed) return;
    if (parser_->is_done()) return OnRequest();
    phase_ = Phase::kBody;
    stream_.expires_after(Seconds(options().body_timeout_seconds));
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (self->phase_ == Phase::kClosed) return;
                       if (ec) return self->OnReadError(ec);
                       self->OnRequest();
                     });
  }

  void OnReadError(beast::error_code ec) {
    const int status = StatusForReadError(ec, phase_ == Phase::kBody);
    // 0: the client went away, or its head never came (a slow client): just close.
    if (status == 0) return Close();
    Fail(status);
  }

  void OnRequest() {
    auto request = std::make_shared<HttpRequest>();
    http::request<http::string_body> msg = parser_->release();
    parser_.reset();
    keep_alive_ = msg.keep_alive();
    version_ = msg.version();
    if (const int status = ToRequest(std::move(msg), options(), request.get())) {
      return Fail(status);
    }
    ++requests_;
    phase_ = Phase::kHandling;
    stream_.expires_never();
    front_->Handle(std::move(request), [self = shared_from_this()](HttpResponse response) {
      asio::post(self->stream_.get_executor(), [self, response = std::move(response)]() mutable {
        self->Respond(std::move(response));
      });
    });
  }

  // Answers an error found here and closes the connection (after a lingering read).
  void Fail(int status) {
    if (parser_.has_value()) {
      const size_t read = parser_->get().body().size();
      parser_.reset();
      if (read >= kTrimAfterBytes) ReturnFreeMemory();
    }
    HttpResponse response = front_->Error(status, method_, path_);
    response.close = true;
    if (version_ == 0) version_ = 11;
    Respond(std::move(response));
  }

  template <typename Head>
  void FillHead(Head& head, const HttpResponse& response, bool close) {
    head.result(static_cast<unsigned>(response.status));
    head.version(version_ == 10 ? 10 : 11);
    if (!response.content_type.empty()) head.set(http::field::content_type, response.content_type);
    for (const auto& [name, value] : response.headers) head.set(name, value);
    head.keep_alive(!close);
  }

  void Respond(HttpResponse response) {
    if (phase_ == Phase::kClosed) return;
    close_after_ = response.close || !keep_alive_ || front_->shutting_down();
    phase_ = Phase::kWriting;
    status_ = response.status;
    stream_.expires_after(Seconds(options().write_timeout_seconds));
    if (response.stream == nullptr) {
      auto msg = std::make_shared<http::response<http::string_body>>();
      FillHead(*msg, response, close_after_);
      msg->body() = std::move(response.body);
      msg->prepare_payload();
      http::async_write(stream_, *msg,
                        [self = shared_from_this(), msg](beast::error_code ec, size_t) {
                          if (ec) return self->Close();
                          self->front_->Responded(self->path_, self->status_);
                          self->ResponseDone();
                        });
      return;
    }
    body_ = std::move(response.stream);
    // HTTP/1.0 has no chunked coding: the body is sent as is and ends with the connection.
    chunked_ = version_ != 10;
    if (!chunked_) close_after_ = true;
    head_.emplace();
    FillHead(*head_, response, close_after_);
    head_->chunked(chunked_);
    serializer_.emplace(*head_);
    http::async_write_header(stream_, *serializer_,
                             [self = shared_from_this()](beast::error_code ec, size_t) {
                               if (ec) return self->Close();
                               self->front_->Responded(self->path_, self->status_);
                               std::weak_ptr<HttpConnection> weak = self;
                               self->body_->SetNotifier([weak] {
                                 if (auto c = weak.lock()) {
                                   asio::post(c->stream_.get_executor(), [c] { c->Pump(); });
                                 }
                               });
                               self->Pump();
                             });
  }

  // Writes what the response stream has ready; arms the tick when it has nothing.
  void Pump() {
    if (phase_ != Phase::kWriting || body_ == nullptr) return;
    if (writing_) {
      pump_again_ = true;
      return;
    }
    std::string out;
    bool done = false;
    try {
      done = body_->Poll(&out);
    } catch (const std::exception& e) {
      UC_LOG(ERROR) << "response stream failed: " << e.what();
      return Close();
    }
    if (out.empty() && !done) {
      tick_.expires_after(Seconds(options().stream_tick_seconds));
      tick_.async_wait([self = shared_from_this()](beast::error_code ec) {
        if (!ec) self->Pump();
      });
      return;
    }
    writing_ = true;
    chunk_ = std::move(out);
    stream_.expires_after(Seconds(options().write_timeout_seconds));
    const auto after = [self = shared_from_this(), done](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec) return self->Close();
      if (done) return self->FinishStream();
      if (self->pump_again_) {
        self->pump_again_ = false;
        return self->Pump();
      }
      // Nothing notified meanwhile: poll again at the next tick (or on notification).
      self->tick_.expires_after(Seconds(self->options().stream_tick_seconds));
      self->tick_.async_wait([self](beast::error_code ec) {
        if (!ec) self->Pump();
      });
    };
    if (chunk_.empty()) return after({}, 0);
    if (!chunked_) return asio::async_write(stream_, asio::buffer(chunk_), after);
    asio::async_write(stream_, http::make_chunk(asio::buffer(chunk_)), after);
  }

  void FinishStream() {
    if (!chunked_) {
      body_.reset();
      serializer_.reset();
      head_.reset();
      return ResponseDone();
    }
    stream_.expires_after(Seconds(options().write_timeout_seconds));
    asio::async_write(stream_, http::make_chunk_last(),
                      [self = shared_from_this()](beast::error_code ec, size_t) {
                        if (ec) return self->Close();
                        self->body_.reset();
                        self->serializer_.reset();
                        self->head_.reset();
                        self->ResponseDone();
                      });
  }

  void ResponseDone() {
    tick_.cancel();
    if (close_after_) return Linger();
    ReadRequest();
  }

  // Ends our side, then reads and drops what the client still sends for a while, so that it
  // reads our answer before the connection goes.
  void Linger() {
    if (phase_ == Phase::kClosed) return;
    phase_ = Phase::kLinger;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return Close();
    stream_.expires_after(kLingerTime);
    LingerRead();
  }
  void LingerRead() {
    buffer_.consume(buffer_.size());
    stream_.async_read_some(buffer_.prepare(16 << 10),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              self->lingered_ += n;
                              if (ec || self->lingered_ > kLingerBytes) return self->Close();
                              self->LingerRead();
                            });
  }

  void Close() {
    if (phase_ == Phase::kClosed) return;
    phase_ = Phase::kClosed;
    tick_.cancel();
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
    body_.reset();  // the application learns the response ended early
  }

  beast::tcp_stream stream_;
  HttpFront::Impl* const front_;
  const std::string peer_;  // the client's address
  beast::flat_buffer buffer_;
  asio::steady_timer tick_;
  Phase phase_ = Phase::kIdle;
  int64_t requests_ = 0;
  std::optional<RequestParser> parser_;
  std::string method_;
  std::string path_;
  unsigned version_ = 0;
  bool keep_alive_ = false;
  bool close_after_ = false;
  int status_ = 0;
  // A streamed response.
  std::shared_ptr<ResponseStream> body_;
  std::optional<http::response<http::empty_body>> head_;
  std::optional<http::response_serializer<http::empty_body>> serializer_;
  std::string chunk_;
  bool chunked_ = true;
  bool writing_ = false;
  bool pump_again_ = false;
  size_t lingered_ = 0;
};

Status HttpFront::Impl::Bind() {
  const std::string where = options_.host + ":" + std::to_string(options_.port);
  beast::error_code ec;
  tcp::resolver resolver(ioc_);
  const auto endpoints =
      resolver.resolve(options_.host, std::to_string(options_.port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) {
    return UnavailableError("cannot listen on " + where + ": " +
                            (ec ? ec.message() : "no such address"));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    acceptor_.close();
    return UnavailableError("cannot listen on " + where + " (" + ec.message() +
                            "; address in use, or not an address of this machine)");
  }
  port_ = acceptor_.local_endpoint().port();
  if (Status fits = FitFileLimit(); !fits.ok()) {
    acceptor_.close(ec);
    return fits;
  }
  if (options_.max_connections_per_client < 0) {
    options_.max_connections_per_client = std::max(1, options_.max_connections / 2);
  }
  return OkStatus();
}

Status HttpFront::Impl::FitFileLimit() {
  // Sockets, plus the model's and the sinks' files and the process's own.
  constexpr rlim_t kReserve = 256;
  options_.max_connections = std::max(1, options_.max_connections);
  const rlim_t want = static_cast<rlim_t>(options_.max_connections) + kReserve;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return OkStatus();
  if (limit.rlim_cur < want) {
    rlimit raised = limit;
    raised.rlim_cur = std::min(want, limit.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  if (limit.rlim_cur >= want) return OkStatus();
  // A small limit keeps half for the process's own files (at most kReserve).
  const rlim_t reserve = std::min(kReserve, limit.rlim_cur / 2);
  const rlim_t fit = limit.rlim_cur - reserve;
  if (fit < static_cast<rlim_t>(kMinConnections)) {
    return FailedPreconditionError(
        "the open-file limit (" + std::to_string(limit.rlim_cur) + ", hard limit " +
        std::to_string(limit.rlim_max) + ") leaves room for only " + std::to_string(fit) +
        " connections; raise it to at least " + std::to_string(want) +
        " with `ulimit -n` (or --max-connections " + std::to_string(kMinConnections) +
        " with `ulimit -n " + std::to_string(kMinConnections * 2) + "`)");
  }
  UC_LOG(WARNING) << "the open-file limit (" << limit.rlim_cur << ") allows only " << fit
                  << " connections, not " << options_.max_connections << "; raise it to " << want
                  << " with `ulimit -n`";
  options_.max_connections = static_cast<int>(fit);
  return OkStatus();
}

void HttpFront::Impl::Start() {
  UC_CHECK(acceptor_.is_open(), "HttpFront::Start before a successful Bind");
  UC_CHECK(!started_, "HttpFront::Start called twice");
  started_ = true;
#ifdef __GLIBC__
  // Process-wide: blocks of kTrimAfterBytes and more (request bodies, a parsed body's arrays)
  // get mappings of their own, unmapped when freed. Left dynamic, glibc raises the threshold
  // after the first such free (up to 32 MiB) and later large blocks land in the handler
  // threads' arenas, whose top chunks malloc_trim does not return.
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(kTrimAfterBytes));
#endif
  work_.emplace(ioc_.get_executor());
  handlers_ = std::make_unique<asio::thread_pool>(std::max(1, options_.handler_threads));
  light_ = std::make_unique<asio::thread_pool>(1);
  Accept();
  for (int i = 0; i < std::max(1, options_.io_threads); ++i) {
    io_threads_.emplace_back([this] { RunIo(); });
  }
}

void HttpFront::Impl::RunIo() {
  for (;;) {
    try {
      ioc_.run();
      return;
    } catch (const std::exception& e) {
      UC_LOG(ERROR) << "HTTP I/O: " << e.what();
    }
  }
}

void HttpFront::Impl::Accept() {
  acceptor_.async_accept(asio::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
    OnAccept(ec, std::move(socket));
  });
}

void HttpFront::Impl::OnAccept(beast::error_code ec, tcp::socket socket) {
  if (!acceptor_.is_open()) return;
  if (ec) {
    // Out of file descriptors (or a connection reset before accept): try again shortly
    // instead of spinning.
    accept_retry_.expires_after(std::chrono::milliseconds(50));
    accept_retry_.async_wait([this](beast::error_code wait_ec) {
      if (!wait_ec) Accept();
    });
    return;
  }
  beast::error_code peer_ec;
  asio::ip::address address = socket.remote_endpoint(peer_ec).address();
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    address = asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6());
  }
  const std::string peer = peer_ec ? std::string() : address.to_string();
  bool admitted = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = per_client_.find(peer);
    const int from_peer = it == per_client_.end() ? 0 : it->second;
    admitted = static_cast<int>(connections_.size()) < options_.max_connections &&
               (options_.max_connections_per_client <= 0 ||
                from_peer < options_.max_connections_per_client);
  }
  if (admitted) {
    std::make_shared<HttpConnection>(std::move(socket), this, peer)->Start();
  } else {
    Refuse(socket);
  }
  Accept();
}

void HttpFront::Impl::Refuse(tcp::socket& socket) {
  HttpResponse busy = Error(503, "", "");
  const std::string text =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: " + busy.content_type +
      "\r\nContent-Length: " + std::to_string(busy.body.size()) + "\r\nConnection: close\r\n\r\n" +
      busy.body;
  ::send(socket.native_handle(), text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  beast::error_code ignored;
  socket.shutdown(tcp::socket::shutdown_both, ignored);
  socket.close(ignored);
  Responded("", 503);
}

int HttpFront::Impl::CheckRequestHead(const HttpRequest& head) const {
  if (!head_check_) return 0;
  try {
    return head_check_(head);
  } catch (...) {
    return 500;
  }
}

void HttpFront::Impl::Handle(std::shared_ptr<HttpRequest> request,
                             std::function<void(HttpResponse)> done) {
  const bool light = request->method == "GET" &&
                     std::find(options_.light_paths.begin(), options_.light_paths.end(),
                               request->path) != options_.light_paths.end();
  asio::post(light ? *light_ : *handlers_,
             [this, request = std::move(request), done = std::move(done)]() mutable {
               HttpResponse response;
               try {
                 response = handler_(*request);
               } catch (const std::exception& e) {
                 UC_LOG(ERROR) << "handler for " << request->method << " " << request->target
                               << " failed: " << e.what();
                 response = Error(500, request->method, request->path);
               } catch (...) {
                 response = Error(500, request->method, request->path);
               }
               done(std::move(response));
               const size_t body_bytes = request->body.size();
               request.reset();
               if (body_bytes >= kTrimAfterBytes) ReturnFreeMemory();
             });
}

HttpResponse HttpFront::Impl::Error(int status, const std::string& method,
                                    const std::string& path) const {
  try {
    return error_responder_(status, method, path);
  } catch (...) {
    HttpResponse r;
    r.status = status;
    r.content_type = "text/plain";
    r.body = "HTTP error " + std::to_string(status) + "\n";
    return r;
  }
}

void HttpFront::Impl::Register(const std::shared_ptr<HttpConnection>& c, const std::string& peer) {
  std::lock_guard<std::mutex> lock(mu_);
  connections_.emplace(c.get(), c);
  ++per_client_[peer];
}

void HttpFront::Impl::Unregister(const HttpConnection* c, const std::string& peer) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    connections_.erase(c);
    const auto it = per_client_.find(peer);
    if (it != per_client_.end() && --it->second <= 0) per_client_.erase(it);
  }
  cv_.notify_all();
}

void HttpFront::Impl::BeginShutdown() {
  shutting_down_ = true;
  std::vector<std::shared_ptr<HttpConnection>> open;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [ptr, weak] : connections_) {
      if (auto c = weak.lock()) open.push_back(std::move(c));
    }
  }
  for (auto& c : open) c->PostBeginShutdown();
}

void HttpFront::Impl::Stop() {
  if (stopped_) return;
  stopped_ = true;
  shutting_down_ = true;
  if (!started_) {
    beast::error_code ignored;
    acceptor_.close(ignored);
    return;
  }
  // The acceptor belongs to the I/O threads: close it on one of them.
  std::promise<void> closed;
  asio::post(ioc_, [this, &closed] {
    beast::error_code ignored;
    acceptor_.close(ignored);
    accept_retry_.cancel();
    closed.set_value();
  });
  closed.get_future().wait();
  {
    std::vector<std::shared_ptr<HttpConnection>> open;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [ptr, weak] : connections_) {
        if (auto c = weak.lock()) open.push_back(std::move(c));
      }
    }
    for (auto& c : open) c->PostClose();
  }
  // Connections end once their pending operations completed with an error; a handler still
  // running holds its connection until it returns (handlers are bounded).
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(2), [this] { return connections_.empty(); });
  }
  handlers_->join();
  light_->join();
  work_.reset();
  ioc_.stop();
  for (std::thread& t : io_threads_) t.join();
  io_threads_.clear();
}

int ParseHttpRequest(std::string_view bytes, const HttpFrontOptions& options, HttpRequest* out) {
  RequestParser parser;
  ConfigureParser(parser, options);
  parser.eager(true);
  beast::error_code ec;
  size_t used = 0;
  bool head_checked = false;
  while (!ec && !parser.is_done()) {
    const size_t n = parser.put(asio::buffer(bytes.data() + used, bytes.size() - used), ec);
    used += n;
    if (ec == http::error::need_more) {
      if (used < bytes.size() && n > 0) {
        ec = {};
        continue;
      }
      ec = {};
      parser.put_eof(ec);
      if (!ec && !parser.is_done()) ec = http::error::partial_message;
      break;
    }
    if (!ec && !head_checked && parser.is_header_done()) {
      head_checked = true;
      if (const int status = CheckHead(parser.get().base(), options)) return status;
    }
    if (!ec && n == 0 && !parser.is_done()) {
      parser.put_eof(ec);
      if (!ec && !parser.is_done()) ec = http::error::partial_message;
    }
  }
  if (ec) {
    const int status = StatusForReadError(ec, parser.is_header_done());
    return status != 0 ? status : 400;
  }
  if (!head_checked) {
    if (const int status = CheckHead(parser.get().base(), options)) return status;
  }
  return ToRequest(parser.release(), options, out);
}

HttpFront::HttpFront(HttpFrontOptions options, Handler handler, ErrorResponder error_responder,
                     ResponseHook on_response)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler),
                                   std::move(error_responder), std::move(on_response))) {}
HttpFront::~HttpFront() = default;
void HttpFront::set_head_check(HeadCheck check) { impl_->set_head_check(std::move(check)); }
Status HttpFront::Bind() { return impl_->Bind(); }
int HttpFront::port() const { return impl_->port(); }
void HttpFront::Start() { impl_->Start(); }
void HttpFront::BeginShutdown() { impl_->BeginShutdown(); }
void HttpFront::Stop() { impl_->Stop(); }
int HttpFront::connections() const { return impl_->connections(); }

}  // namespace uc::server
