#include "base/status.h"

#include <gtest/gtest.h>

namespace uc {
namespace {

StatusOr<int> ParsePositive(int x) {
  if (x <= 0) return InvalidArgumentError("x must be positive, got " + std::to_string(x));
  return x;
}

Status UsesMacros(int x, int* out) {
  UC_ASSIGN_OR_RETURN(int v, ParsePositive(x));
  *out = v * 2;
  return OkStatus();
}

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(OkStatus().ok());
  EXPECT_EQ(OkStatus().ToString(), "OK");
  const Status s = NotFoundError("tensor 'w' missing");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NotFound: tensor 'w' missing");
  EXPECT_EQ(s.Annotate("model.gguf").message(), "model.gguf: tensor 'w' missing");
  EXPECT_TRUE(OkStatus().Annotate("ctx").ok());
}

TEST(StatusTest, StatusOrAndMacros) {
  int out = 0;
  EXPECT_TRUE(UsesMacros(21, &out).ok());
  EXPECT_EQ(out, 42);
  const Status err = UsesMacros(-1, &out);
  EXPECT_EQ(err.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(err.message(), "x must be positive, got -1");
}

TEST(StatusDeathTest, ValueOfErrorAborts) {
  StatusOr<int> bad = InternalError("boom");
  EXPECT_DEATH((void)bad.value(), "boom");
}

}  // namespace
}  // namespace uc
