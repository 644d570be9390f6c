#include "apps/server/http_front.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <string>

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

}  // namespace
}  // namespace uc::server
