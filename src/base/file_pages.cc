#include "base/file_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>

namespace uc {
namespace {

struct Registry {
  std::mutex mu;
  std::map<uintptr_t, size_t> mappings;  // begin -> size
};

Registry& GetRegistry() {
  static Registry* registry = new Registry();  // never destroyed: used from static destructors
  return *registry;
}

}  // namespace

void RegisterFileMapping(const void* begin, size_t size) {
  if (begin == nullptr || size == 0) return;
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.mappings[reinterpret_cast<uintptr_t>(begin)] = size;
}

void UnregisterFileMapping(const void* begin) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.mappings.erase(reinterpret_cast<uintptr_t>(begin));
}

size_t ReleaseFilePages(const void* p, size_t n) {
  if (p == nullptr || n == 0) return 0;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t end = begin + n;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = end / page * page;
  if (first >= last) return 0;
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);  // held so the mapping cannot be unmapped meanwhile
  auto it = r.mappings.upper_bound(begin);
  if (it == r.mappings.begin()) return 0;
  it = std::prev(it);
  if (end > it->first + it->second) return 0;
  if (::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) != 0) return 0;
  return last - first;
}

size_t ResidentSetBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages_total = 0, pages_resident = 0;
  if (!(statm >> pages_total >> pages_resident)) return 0;
  return pages_resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace uc
