#include "engine/stop_matcher.h"

#include <algorithm>

namespace uc::engine {
namespace {

// Largest n <= limit such that s[0, n) ends on a UTF-8 character boundary.
size_t Utf8Boundary(std::string_view s, size_t limit) {
  size_t n = std::min(limit, s.size());
  while (n > 0 && n < s.size() && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

}  // namespace

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string& s : stops_) max_stop_ = std::max(max_stop_, s.size());
}

std::string StopMatcher::Push(std::string_view text) {
  if (stopped_) return "";
  pending_.append(text);
  size_t cut = std::string::npos;
  for (const std::string& stop : stops_) {
    const size_t at = pending_.find(stop);
    if (at != std::string::npos && at < cut) {
      cut = at;
      matched_ = stop;
    }
  }
  std::string out;
  if (cut != std::string::npos) {
    stopped_ = true;
    out = pending_.substr(0, cut);
    pending_.clear();
  } else {
    // Hold back the longest suffix that is a proper prefix of some stop string.
    size_t hold = 0;
    for (const std::string& stop : stops_) {
      for (size_t len = std::min(stop.size() - 1, pending_.size()); len > hold; --len) {
        if (pending_.compare(pending_.size() - len, len, stop, 0, len) == 0) {
          hold = len;
          break;
        }
      }
    }
    const size_t emit = Utf8Boundary(pending_, pending_.size() - hold);
    out = pending_.substr(0, emit);
    pending_.erase(0, emit);
  }
  released_ += out;
  return out;
}

std::string StopMatcher::Flush() {
  if (stopped_) return "";
  std::string out;
  out.swap(pending_);
  released_ += out;
  return out;
}

}  // namespace uc::engine
