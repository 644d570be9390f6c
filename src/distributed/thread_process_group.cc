#include "distributed/thread_process_group.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>
#include <tuple>
#include <vector>

#include "base/check.h"

namespace uc::distributed {

struct ThreadGroupState::Impl {
  // What each rank published for the collective in progress; read only between the two
  // rendezvous of that collective, so a rank racing ahead cannot overwrite it too early.
  struct Post {
    const char* op = nullptr;
    int64_t bytes = 0;
    const void* ptr = nullptr;
  };
  // A NewGroup call being matched across the member threads.
  struct PendingSplit {
    std::shared_ptr<ThreadGroupState> state;
    int remaining = 0;
  };

  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  int64_t generation = 0;
  std::vector<Post> posts;
  std::map<std::tuple<int, int, int>, std::deque<std::vector<std::byte>>> mail;  // src,dst,tag
  std::map<std::pair<int64_t, std::vector<int>>, PendingSplit> splits;
};

ThreadGroupState::ThreadGroupState(int size) : size_(size), impl_(std::make_unique<Impl>()) {
  UC_CHECK(size >= 1, "ThreadGroupState size %d", size);
  impl_->posts.resize(static_cast<size_t>(size));
}

ThreadGroupState::~ThreadGroupState() = default;

namespace {

// Waits on `cv` until pred() holds, consulting `observer` every 10 ms.
template <typename Pred>
void WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, Pred pred,
               const WaitObserver& observer, const char* op, int rank) {
  const auto start = std::chrono::steady_clock::now();
  while (!pred()) {
    cv.wait_for(lock, std::chrono::milliseconds(10));
    if (pred() || !observer) continue;
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    lock.unlock();
    const bool keep_waiting = observer(op, waited);
    lock.lock();
    UC_CHECK(keep_waiting, "[rank %d] %s abandoned after %.3f s by the wait observer", rank, op,
             waited);
  }
}

}  // namespace

ThreadProcessGroup::ThreadProcessGroup(std::shared_ptr<ThreadGroupState> state, int rank)
    : state_(std::move(state)), rank_(rank) {
  UC_CHECK(state_ != nullptr && rank >= 0 && rank < state_->size(),
           "ThreadProcessGroup rank %d of a group of %d", rank, state_ ? state_->size() : 0);
}

void ThreadProcessGroup::WaitAll(const char* op) {
  ThreadGroupState::Impl& s = *state_->impl_;
  std::unique_lock<std::mutex> lock(s.mu);
  const int64_t generation = s.generation;
  if (++s.arrived == size()) {
    s.arrived = 0;
    ++s.generation;
    s.cv.notify_all();
    return;
  }
  WaitUntil(
      lock, s.cv, [&] { return s.generation != generation; }, observer_, op, rank_);
}

void ThreadProcessGroup::Arrive(const char* op, int64_t bytes, const void* ptr) {
  ThreadGroupState::Impl& s = *state_->impl_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.posts[rank_] = {op, bytes, ptr};
  }
  WaitAll(op);
  for (int r = 0; r < size(); ++r) {
    const ThreadGroupState::Impl::Post& p = s.posts[r];
    UC_CHECK(std::strcmp(p.op, op) == 0 && p.bytes == bytes,
             "[rank %d] collective mismatch: this rank called %s(%lld bytes), rank %d called "
             "%s(%lld bytes)",
             rank_, op, static_cast<long long>(bytes), r, p.op, static_cast<long long>(p.bytes));
  }
}

void ThreadProcessGroup::AllReduceSum(float* data, int64_t count) {
  if (size() == 1) return;
  Arrive("AllReduceSum", count * static_cast<int64_t>(sizeof(float)), data);
  // Every rank sums in rank order, so the results are bitwise identical everywhere.
  std::vector<float> sum(static_cast<size_t>(count));
  const auto& posts = state_->impl_->posts;
  std::memcpy(sum.data(), posts[0].ptr, sum.size() * sizeof(float));
  for (int r = 1; r < size(); ++r) {
    const float* src = static_cast<const float*>(posts[r].ptr);
    for (int64_t i = 0; i < count; ++i) sum[i] += src[i];
  }
  WaitAll("AllReduceSum");  // nobody reads `data` any more
  std::memcpy(data, sum.data(), sum.size() * sizeof(float));
}

void ThreadProcessGroup::AllGather(const void* send, int64_t bytes, void* recv) {
  Arrive("AllGather", bytes, send);
  const auto& posts = state_->impl_->posts;
  for (int r = 0; r < size(); ++r) {
    std::memcpy(static_cast<std::byte*>(recv) + r * bytes, posts[r].ptr,
                static_cast<size_t>(bytes));
  }
  WaitAll("AllGather");
}

void ThreadProcessGroup::Broadcast(void* data, int64_t bytes, int root) {
  UC_CHECK(root >= 0 && root < size(), "Broadcast root %d of a group of %d", root, size());
  if (size() == 1) return;
  Arrive("Broadcast", bytes, data);
  const void* src = state_->impl_->posts[root].ptr;
  if (rank_ != root) std::memcpy(data, src, static_cast<size_t>(bytes));
  WaitAll("Broadcast");
}

void ThreadProcessGroup::Send(const void* data, int64_t bytes, int dst, int tag) {
  UC_CHECK(dst >= 0 && dst < size(), "Send to rank %d of a group of %d", dst, size());
  ThreadGroupState::Impl& s = *state_->impl_;
  const std::byte* begin = static_cast<const std::byte*>(data);
  std::vector<std::byte> message(begin, begin + bytes);
  std::lock_guard<std::mutex> lock(s.mu);
  s.mail[{rank_, dst, tag}].push_back(std::move(message));
  s.cv.notify_all();
}

void ThreadProcessGroup::Recv(void* data, int64_t bytes, int src, int tag) {
  UC_CHECK(src >= 0 && src < size(), "Recv from rank %d of a group of %d", src, size());
  ThreadGroupState::Impl& s = *state_->impl_;
  std::unique_lock<std::mutex> lock(s.mu);
  auto& queue = s.mail[{src, rank_, tag}];
  WaitUntil(
      lock, s.cv, [&] { return !queue.empty(); }, observer_, "Recv", rank_);
  std::vector<std::byte> message = std::move(queue.front());
  queue.pop_front();
  lock.unlock();
  UC_CHECK(static_cast<int64_t>(message.size()) == bytes,
           "[rank %d] Recv of %lld bytes from rank %d (tag %d) got a %zu-byte message", rank_,
           static_cast<long long>(bytes), src, tag, message.size());
  std::memcpy(data, message.data(), message.size());
}

void ThreadProcessGroup::Barrier() { WaitAll("Barrier"); }

ThreadBackend::ThreadBackend(std::shared_ptr<ThreadGroupState> world, int world_rank)
    : world_(std::move(world)), world_rank_(world_rank) {
  UC_CHECK(world_ != nullptr && world_rank >= 0 && world_rank < world_->size(),
           "ThreadBackend rank %d", world_rank);
}

StatusOr<std::unique_ptr<ProcessGroup>> ThreadBackend::NewGroup(std::span<const int> ranks) {
  UC_RETURN_IF_ERROR(ValidateGroupRanks(ranks, world_rank_, world_size()));
  ThreadGroupState::Impl& s = *world_->impl_;
  std::shared_ptr<ThreadGroupState> state;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto key = std::make_pair(num_splits_++, std::vector<int>(ranks.begin(), ranks.end()));
    auto it = s.splits.find(key);
    if (it == s.splits.end()) {
      const int n = static_cast<int>(ranks.size());
      it = s.splits
               .emplace(
                   key,
                   ThreadGroupState::Impl::PendingSplit{std::make_shared<ThreadGroupState>(n), n})
               .first;
    }
    state = it->second.state;
    if (--it->second.remaining == 0) s.splits.erase(it);
  }
  int rank_in_group = 0;
  while (ranks[rank_in_group] != world_rank_) ++rank_in_group;
  return std::unique_ptr<ProcessGroup>(
      std::make_unique<ThreadProcessGroup>(std::move(state), rank_in_group));
}

void RunOnThreads(int world_size, const std::function<void(int rank)>& fn) {
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r) threads.emplace_back(fn, r);
  for (std::thread& t : threads) t.join();
}

void RunWithThreadGroup(int size, const std::function<void(GroupCoordinator& group)>& fn) {
  auto state = std::make_shared<ThreadGroupState>(size);
  std::vector<int> ranks(static_cast<size_t>(size));
  std::iota(ranks.begin(), ranks.end(), 0);
  RunOnThreads(size, [&](int rank) {
    GroupCoordinator group(ranks, rank, rank, std::make_unique<ThreadProcessGroup>(state, rank),
                           "tp");
    fn(group);
  });
}

}  // namespace uc::distributed
