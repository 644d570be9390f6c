// File: stop_matcher.h
// -----------------------------------------------------------------------------
// Streams generated text while watching for stop strings. Text that could still be the start
// of a stop string is held back; once a stop string appears, everything from it on is
// dropped. Works on bytes but only releases whole UTF-8 characters. Thread-compatible.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace uc::engine {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends `text`; returns the text that is now safe to emit. Sets stopped() when a stop
  // string completed (its text and anything after it are never released).
  std::string Push(std::string_view text);
  // Releases everything held back (call when generation ends without a stop string).
  std::string Flush();

  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }
  // All text released so far.
  const std::string& released() const { return released_; }

 private:
  std::vector<std::string> stops_;
  size_t max_stop_ = 0;
  std::string pending_;
  std::string released_;
  std::string matched_;
  bool stopped_ = false;
};

}  // namespace uc::engine
