#include "io/mapped_file.h"

#include <gtest/gtest.h>

#include <cstring>

#include "io/io_test_util.h"

namespace uc::io {
namespace {

using testing::IsError;
using testing::TempDir;

TEST(MappedFileTest, MapsTheWholeFile) {
  TempDir dir;
  testing::WriteBytes(dir.File("a.bin"), "hello world");
  StatusOr<std::shared_ptr<const MappedFile>> file = MappedFile::Open(dir.File("a.bin"));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->size(), 11u);
  EXPECT_EQ((*file)->path(), dir.File("a.bin"));
  EXPECT_EQ(std::memcmp((*file)->data(), "hello world", 11), 0);
}

TEST(MappedFileTest, EmptyFileHasNoBytes) {
  TempDir dir;
  testing::WriteBytes(dir.File("empty"), "");
  StatusOr<std::shared_ptr<const MappedFile>> file = MappedFile::Open(dir.File("empty"));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->size(), 0u);
  EXPECT_EQ((*file)->data(), nullptr);
}

TEST(MappedFileTest, MissingFileIsNotFoundWithErrnoText) {
  TempDir dir;
  StatusOr<std::shared_ptr<const MappedFile>> file = MappedFile::Open(dir.File("nope.bin"));
  EXPECT_TRUE(IsError(file.status(), StatusCode::kNotFound,
                      {dir.File("nope.bin"), "No such file or directory"}));
}

TEST(MappedFileTest, DirectoryIsRejected) {
  TempDir dir;
  StatusOr<std::shared_ptr<const MappedFile>> file = MappedFile::Open(dir.path());
  EXPECT_TRUE(IsError(file.status(), StatusCode::kInvalidArgument,
                      {dir.path().string(), "not a regular file"}));
}

}  // namespace
}  // namespace uc::io
