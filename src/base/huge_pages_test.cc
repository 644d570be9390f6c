#include "base/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <utility>

namespace uc {
namespace {

bool AllZero(const HugePageBuffer& b) {
  for (size_t i = 0; i < b.size(); ++i) {
    if (b.data()[i] != std::byte{0}) return false;
  }
  return true;
}

TEST(HugePageBufferTest, SmallBufferIsZeroedAlignedMemory) {
  HugePageBuffer b(1000);
  ASSERT_NE(b.data(), nullptr);
  EXPECT_EQ(b.size(), 1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  EXPECT_TRUE(AllZero(b));
  b.data()[999] = std::byte{7};
  EXPECT_EQ(b.data()[999], std::byte{7});
}

// Small buffers are carved one after another from a shared huge-page chunk: adjacent, disjoint,
// zeroed, and alive after the others are gone.
TEST(HugePageBufferTest, SmallBuffersShareAChunkWithoutOverlapping) {
  auto a = std::make_unique<HugePageBuffer>(300 * 1024 + 5);
  HugePageBuffer b(300 * 1024);
  HugePageBuffer c(100);
  const auto pa = reinterpret_cast<uintptr_t>(a->data());
  const auto pb = reinterpret_cast<uintptr_t>(b.data());
  const auto pc = reinterpret_cast<uintptr_t>(c.data());
  // The same chunk unless `a` filled the previous one (then b and c start the next).
  if (pb > pa && pb - pa < HugePageBuffer::kChunkBytes) {
    EXPECT_GE(pb, pa + a->size());
    EXPECT_LT(pb - pa, a->size() + 64);
  }
  EXPECT_GE(pc, pb + b.size());
  EXPECT_LT(pc - pb, b.size() + 64);
  EXPECT_EQ(pb % 64, 0u);
  EXPECT_EQ(pc % 64, 0u);
  if (std::filesystem::exists("/sys/kernel/mm/transparent_hugepage/enabled")) {
    EXPECT_EQ(b.advised_bytes(), b.size());
  }
  EXPECT_TRUE(AllZero(*a) && AllZero(b) && AllZero(c));
  std::memset(a->data(), 0xAB, a->size());
  a.reset();  // the chunk stays: b and c still use it
  std::memset(b.data(), 1, b.size());
  EXPECT_TRUE(AllZero(c));
  EXPECT_EQ(b.data()[b.size() - 1], std::byte{1});
}

TEST(HugePageBufferTest, LargeBufferStartsOnAHugePageAndAdvisesOnlyWholeOnes) {
  const size_t bytes = 2 * HugePageBuffer::kHugePageBytes + 12345;
  HugePageBuffer b(bytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % HugePageBuffer::kHugePageBytes, 0u);
  EXPECT_EQ(b.size(), bytes);
  EXPECT_TRUE(AllZero(b));
  // Linux built with transparent huge pages has this file and accepts the advice.
  if (std::filesystem::exists("/sys/kernel/mm/transparent_hugepage/enabled")) {
    EXPECT_EQ(b.advised_bytes(), 2 * HugePageBuffer::kHugePageBytes);
  }
  for (size_t i = 0; i < bytes; i += 4096) b.data()[i] = std::byte{1};
  b.data()[bytes - 1] = std::byte{2};
  EXPECT_EQ(b.data()[bytes - 1], std::byte{2});
}

TEST(HugePageBufferTest, MoveTransfersOwnership) {
  HugePageBuffer a(HugePageBuffer::kHugePageBytes);
  std::byte* const data = a.data();
  data[5] = std::byte{9};
  HugePageBuffer b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(b.data()[5], std::byte{9});
  HugePageBuffer c(64);
  c = std::move(b);
  EXPECT_EQ(c.data(), data);
  EXPECT_EQ(c.size(), HugePageBuffer::kHugePageBytes);
  EXPECT_EQ(b.data(), nullptr);
}

}  // namespace
}  // namespace uc
