#include "io/mapped_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "base/file_pages.h"
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

TEST(MappedFileTest, ReleasedPagesLeaveTheResidentSetAndReadBackUnchanged) {
  TempDir dir;
  constexpr size_t kSize = size_t{32} << 20;
  std::string bytes(kSize, '\0');
  for (size_t i = 0; i < kSize; ++i) bytes[i] = static_cast<char>((i * 131) >> 7);
  testing::WriteBytes(dir.File("w.bin"), bytes);
  StatusOr<std::shared_ptr<const MappedFile>> file = MappedFile::Open(dir.File("w.bin"));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const std::byte* data = (*file)->data();
  ASSERT_EQ(std::memcmp(data, bytes.data(), kSize), 0);  // every page resident
  const size_t before = ResidentSetBytes();
  // An unaligned range: the partial pages at its ends stay.
  const size_t released = ReleaseFilePages(data + 100, kSize - 200);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  EXPECT_EQ(released, kSize - 2 * page);
  EXPECT_GE(before - ResidentSetBytes(), kSize / 2) << "the pages are still resident";
  EXPECT_EQ(std::memcmp(data, bytes.data(), kSize), 0);  // read back from the file
  // A range reaching past the mapping, and heap memory, are left alone.
  EXPECT_EQ(ReleaseFilePages(data + kSize - page, 2 * page), 0u);
  std::vector<char> heap(kSize, 'x');
  EXPECT_EQ(ReleaseFilePages(heap.data(), heap.size()), 0u);
  EXPECT_EQ(heap[kSize / 2], 'x');
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
