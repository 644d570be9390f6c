#include "apps/server/http_front.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace uc::server {
namespace {

std::string Gzip(const std::string& data) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, data.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string Post(const std::string& body, const std::string& extra = "") {
  return "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + extra +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

TEST(HttpFrontTest, DecodesTargetPaths) {
  EXPECT_EQ(DecodeTargetPath("/v1/models/a%20b?x=%41"), "/v1/models/a b");
  EXPECT_EQ(DecodeTargetPath("/%ff%C3%28"), "/\xff\xc3(");
  EXPECT_EQ(DecodeTargetPath("/50%"), "/50%");      // a lone percent stays
  EXPECT_EQ(DecodeTargetPath("/%zz%4"), "/%zz%4");  // as do bad escapes
  EXPECT_EQ(DecodeTargetPath("/a+b"), "/a+b");
}

TEST(HttpFrontTest, ParsesHeadersAndBodies) {
  HttpFrontOptions options;
  HttpRequest r;
  ASSERT_EQ(ParseHttpRequest(Post("{\"a\": 1}", "X-Key: v\r\n"), options, &r), 0);
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.path, "/v1/completions");
  EXPECT_EQ(r.body, "{\"a\": 1}");
  EXPECT_EQ(r.Header("x-key"), "v");
  EXPECT_EQ(r.Header("absent"), "");

  // Chunked transfer coding, then gzip content coding.
  HttpRequest chunked;
  ASSERT_EQ(ParseHttpRequest("POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                             "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
                             options, &chunked),
            0);
  EXPECT_EQ(chunked.body, "abcde");
  const std::string text(100000, 'q');
  HttpRequest gz;
  ASSERT_EQ(ParseHttpRequest(Post(Gzip(text), "Content-Encoding: gzip\r\n"), options, &gz), 0);
  EXPECT_EQ(gz.body, text);
}

TEST(HttpFrontTest, RefusesWhatIsOverTheLimitsOrMalformed) {
  HttpFrontOptions options;
  options.max_body_bytes = 1000;
  HttpRequest r;
  EXPECT_EQ(ParseHttpRequest(Post(std::string(1001, 'a')), options, &r), 413);
  EXPECT_EQ(ParseHttpRequest(Post(std::string(1000, 'a')), options, &r), 0);
  // Small as sent, too large decoded.
  EXPECT_EQ(ParseHttpRequest(Post(Gzip(std::string(5000, 'a')), "Content-Encoding: gzip\r\n"),
                             options, &r),
            413);
  // Chunked past the limit.
  std::string chunks;
  for (int i = 0; i < 20; ++i) chunks += "64\r\n" + std::string(100, 'b') + "\r\n";
  EXPECT_EQ(ParseHttpRequest("POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
                                 chunks + "0\r\n\r\n",
                             options, &r),
            413);
  std::string fields;
  for (int i = 0; i <= options.max_header_fields; ++i) fields += "a: b\r\n";
  EXPECT_EQ(ParseHttpRequest("GET / HTTP/1.1\r\n" + fields + "\r\n", options, &r), 431);
  EXPECT_EQ(ParseHttpRequest("GET / HTTP/1.1\r\nX: " + std::string(40 << 10, 'x') + "\r\n\r\n",
                             options, &r),
            431);
  EXPECT_EQ(ParseHttpRequest(Post("x", "Content-Encoding: br\r\n"), options, &r), 415);
  EXPECT_EQ(ParseHttpRequest(Post("not gzip", "Content-Encoding: gzip\r\n"), options, &r), 400);
  EXPECT_EQ(ParseHttpRequest("GARBAGE\r\n\r\n", options, &r), 400);
  EXPECT_EQ(ParseHttpRequest("GET / HTTP/1.1\r\nHost: x\r\n", options, &r), 400);  // cut short
  EXPECT_EQ(ParseHttpRequest(Post("{}").substr(0, 60), options, &r), 400);
}

// RFC 9112 §6.1/§6.3: a Transfer-Encoding that is not exactly `chunked`, or one beside a
// Content-Length, cannot be framed safely: 400 (the connection then closes). `CHUNKED` in any
// case is chunked.
TEST(HttpFrontTest, RefusesAmbiguousFraming) {
  HttpFrontOptions options;
  HttpRequest r;
  const std::string body = "{\"prompt\": \"x\"}";
  for (const std::string te : {"identity", "gzip", "chunked, identity", "identity, chunked",
                               "chunked, chunked", "chunked", "x-custom", ""}) {
    SCOPED_TRACE(te);
    // A smuggled second request follows the Content-Length framed body.
    EXPECT_EQ(ParseHttpRequest(Post(body, "Transfer-Encoding: " + te + "\r\n") +
                                   "GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
                               options, &r),
              400);
  }
  // Two Transfer-Encoding lines that add up to more than `chunked`.
  EXPECT_EQ(ParseHttpRequest("POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n"
                             "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
                             options, &r),
            400);
  for (const std::string te : {"chunked", "CHUNKED", "Chunked", " chunked "}) {
    SCOPED_TRACE(te);
    HttpRequest ok;
    ASSERT_EQ(ParseHttpRequest("POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: " + te +
                                   "\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
                               options, &ok),
              0);
    EXPECT_EQ(ok.body, "abc");
  }
  EXPECT_EQ(CheckFraming({{"Content-Length", "3"}}), 0);
  EXPECT_EQ(CheckFraming({{"transfer-encoding", "Chunked"}}), 0);
  EXPECT_EQ(CheckFraming({{"Transfer-Encoding", "chunked"}, {"Content-Length", "3"}}), 400);
}

// One request over loopback: everything the server sent until it closed (or `seconds` passed).
std::string Exchange(int port, const std::string& request, double seconds = 10) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int>(seconds * 1000));
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

// /health waits for no handler: with every handler thread busy on a slow request, 50 liveness
// probes over loopback answer with a p99 under 100 ms (they used to queue behind the handlers,
// 15-27 s). The real front end on a loopback port; the slow handler sleeps, using no CPU.
TEST(HttpFrontTest, LightPathsAnswerWhileEveryHandlerIsBusy) {
  HttpFrontOptions options;
  options.port = 0;
  options.handler_threads = 2;
  options.light_paths = {"/health"};
  std::atomic<int> busy{0};
  std::atomic<int> finished{0};
  HttpFront front(
      options,
      [&](const HttpRequest& req) {
        HttpResponse r;
        r.content_type = "text/plain";
        if (req.path == "/slow") {
          ++busy;
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          ++finished;
          r.body = "slow";
        } else {
          r.body = "ok";
        }
        return r;
      },
      [](int status, const std::string&, const std::string&) {
        HttpResponse r;
        r.status = status;
        return r;
      },
      nullptr);
  ASSERT_TRUE(front.Bind().ok());
  front.Start();
  const int port = front.port();
  std::vector<std::thread> slow;
  for (int i = 0; i < 2; ++i) {
    slow.emplace_back(
        [port] { Exchange(port, "GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); });
  }
  while (busy < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::vector<double> ms;
  for (int i = 0; i < 50; ++i) {
    const auto started = std::chrono::steady_clock::now();
    const std::string r =
        Exchange(port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 5);
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
            .count());
    EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;
  }
  std::sort(ms.begin(), ms.end());
  EXPECT_LT(ms[48], 100.0) << "p99 ms; max " << ms.back();
  EXPECT_EQ(finished.load(), 0) << "the probes ran while both handlers were still busy";
  for (std::thread& t : slow) t.join();
  front.Stop();
}

}  // namespace
}  // namespace uc::server
