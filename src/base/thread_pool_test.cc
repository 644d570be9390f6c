#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace uc {
namespace {

TEST(ThreadPoolTest, CoversRangeExactlyOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      for (int rep = 0; rep < 50; ++rep) {
        pool.ParallelFor(n, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
        });
      }
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 50) << "n=" << n << " i=" << i;
    }
  }
}

TEST(ThreadPoolTest, MinChunkLimitsSplits) {
  ThreadPool pool(4);
  std::atomic<int> calls{0};
  pool.ParallelFor(
      10, [&](int64_t b, int64_t e) { calls.fetch_add(1); }, /*min_chunk=*/8);
  EXPECT_EQ(calls.load(), 1);
}

TEST(ThreadPoolTest, DynamicCoversRangeExactlyOnceInGrainChunks) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 1000}) {
      for (int64_t grain : {1, 3, 64}) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int> bad_chunks{0};
        for (int rep = 0; rep < 20; ++rep) {
          pool.ParallelForDynamic(
              n,
              [&](int64_t b, int64_t e) {
                // Whole chunks [i * grain, min(n, (i + 1) * grain)), or [0, n) when run inline.
                const bool whole = b % grain == 0 && e == std::min(n, b + grain);
                if (!whole && !(b == 0 && e == n)) bad_chunks.fetch_add(1);
                for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
              },
              grain);
        }
        EXPECT_EQ(bad_chunks.load(), 0) << "threads=" << threads << " n=" << n;
        for (int64_t i = 0; i < n; ++i) {
          EXPECT_EQ(hits[i].load(), 20) << "threads=" << threads << " n=" << n << " i=" << i;
        }
      }
    }
  }
}

// A worker held back (here: sleeping in its first chunk) leaves the remaining chunks to the
// others, which the static split cannot do.
TEST(ThreadPoolTest, DynamicChunksGoToThreadsThatAreFree) {
  ThreadPool pool(2);
  std::atomic<int> started{0};
  std::atomic<int> ran_by_caller{0};
  std::atomic<bool> worker_slept{false};
  const auto caller = std::this_thread::get_id();
  pool.ParallelForDynamic(
      16,
      [&](int64_t, int64_t) {
        started.fetch_add(1);
        if (std::this_thread::get_id() == caller) {
          ran_by_caller.fetch_add(1);
        } else if (!worker_slept.exchange(true)) {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
      },
      1);
  EXPECT_EQ(started.load(), 16);
  EXPECT_GE(ran_by_caller.load(), 14);
}

TEST(ThreadPoolTest, GuidedCoversRangeExactlyOnceInShrinkingChunks) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 1000}) {
      for (int64_t min_chunk : {1, 3, 64}) {
        std::mutex mu;
        std::vector<std::pair<int64_t, int64_t>> chunks;
        pool.ParallelForGuided(
            n,
            [&](int64_t b, int64_t e) {
              std::lock_guard<std::mutex> lock(mu);
              chunks.emplace_back(b, e);
            },
            min_chunk);
        std::sort(chunks.begin(), chunks.end());
        const std::string where = "threads=" + std::to_string(threads) + " n=" + std::to_string(n) +
                                  " min=" + std::to_string(min_chunk);
        ASSERT_FALSE(chunks.empty()) << where;
        EXPECT_EQ(chunks.front().first, 0) << where;
        EXPECT_EQ(chunks.back().second, n) << where;
        for (size_t i = 0; i < chunks.size(); ++i) {
          const int64_t size = chunks[i].second - chunks[i].first;
          if (i + 1 < chunks.size()) {
            EXPECT_EQ(chunks[i].second, chunks[i + 1].first) << where;  // no gap, no overlap
            EXPECT_GE(size, min_chunk) << where << " chunk " << i;      // only the last is short
          }
          if (i > 0 && i + 1 < chunks.size()) {
            EXPECT_LE(size, chunks[i - 1].second - chunks[i - 1].first) << where;  // shrinking
          }
        }
        if (threads > 1 && n == 1000 && min_chunk == 1) {
          // A grab takes the items left over twice the thread count: 1000 / 4 first at 2 threads,
          // and the chunks end at one item.
          EXPECT_EQ(chunks.front().second, (n + 2 * threads - 1) / (2 * threads)) << where;
          EXPECT_EQ(chunks.back().second - chunks.back().first, 1) << where;
        }
      }
    }
  }
}

// As with the dynamic split, a worker held back leaves what is left to the others.
TEST(ThreadPoolTest, GuidedChunksGoToThreadsThatAreFree) {
  ThreadPool pool(2);
  std::atomic<int64_t> caller_items{0};
  std::atomic<bool> worker_slept{false};
  const auto caller = std::this_thread::get_id();
  pool.ParallelForGuided(
      1000,
      [&](int64_t b, int64_t e) {
        if (std::this_thread::get_id() == caller) {
          caller_items.fetch_add(e - b);
          // The caller's first chunk waits (up to 10 s) for the worker to have taken one.
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          while (!worker_slept.load() && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::yield();
          }
        } else if (!worker_slept.exchange(true)) {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
      },
      1);
  ASSERT_TRUE(worker_slept.load());
  // The worker's first grab is at most a quarter of the items: the caller runs the rest.
  EXPECT_GE(caller_items.load(), 1000 - 250);
  EXPECT_LT(caller_items.load(), 1000);
}

TEST(ThreadPoolTest, NestedCallRunsInline) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  pool.ParallelFor(4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      pool.ParallelFor(3, [&](int64_t b2, int64_t e2) { sum.fetch_add(e2 - b2); });
    }
  });
  EXPECT_EQ(sum.load(), 12);
}

}  // namespace
}  // namespace uc
