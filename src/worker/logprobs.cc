#include "worker/logprobs.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "worker/byte_codec.h"

namespace uc::worker {
namespace {

using internal::ByteReader;
using internal::ByteWriter;

constexpr uint32_t kLogprobsMagic = 0x55434c50;  // "UCLP"

void PutEntry(ByteWriter& w, const TokenLogprob& t) {
  w.Put(t.token);
  w.Put(t.logprob);
  w.Put(t.rank);
}

bool GetEntry(ByteReader& r, TokenLogprob& t) {
  return r.Get(t.token) && r.Get(t.logprob) && r.Get(t.rank);
}

void PutPosition(ByteWriter& w, const PositionLogprobs& p) {
  PutEntry(w, p.chosen);
  w.Put<uint32_t>(static_cast<uint32_t>(p.top.size()));
  for (const TokenLogprob& t : p.top) PutEntry(w, t);
}

bool GetPosition(ByteReader& r, PositionLogprobs& p) {
  uint32_t n = 0;
  if (!GetEntry(r, p.chosen) || !r.Get(n) || n > static_cast<uint32_t>(kMaxLogprobs)) return false;
  p.top.resize(n);
  for (TokenLogprob& t : p.top) {
    if (!GetEntry(r, t)) return false;
  }
  return true;
}

}  // namespace

PositionLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int k) {
  UC_CHECK(!logits.empty() && token >= 0 && static_cast<size_t>(token) < logits.size() && k >= 0,
           "ComputeLogprobs: token %d of a row of %zu, k %d", token, logits.size(), k);
  float max_logit = logits[0];
  for (float x : logits) max_logit = std::max(max_logit, x);
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x - max_logit));
  const double log_sum = std::log(sum);
  auto logprob = [&](int32_t id) {
    return static_cast<float>(static_cast<double>(logits[id] - max_logit) - log_sum);
  };
  auto rank = [&](int32_t id) {
    int32_t above = 0;
    for (float x : logits) above += x > logits[id] ? 1 : 0;
    return above + 1;
  };
  PositionLogprobs out;
  out.chosen = {token, logprob(token), rank(token)};
  const size_t keep = std::min(static_cast<size_t>(k), logits.size());
  if (keep == 0) return out;
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::partial_sort(
      ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(keep), ids.end(),
      [&](int32_t a, int32_t b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; });
  // Sorted: an entry's rank is its index + 1, or its predecessor's on a tie.
  for (size_t i = 0; i < keep; ++i) {
    const bool tie = i > 0 && logits[ids[i]] == logits[ids[i - 1]];
    const int32_t r = tie ? out.top.back().rank : static_cast<int32_t>(i) + 1;
    out.top.push_back({ids[i], logprob(ids[i]), r});
  }
  return out;
}

std::string SerializeLogprobs(const std::vector<SequenceLogprobs>& logprobs) {
  ByteWriter w;
  w.Put(kLogprobsMagic);
  w.Put<uint32_t>(static_cast<uint32_t>(logprobs.size()));
  for (const SequenceLogprobs& s : logprobs) {
    w.Put(s.seq_id);
    w.Put(s.first_prompt_position);
    w.Put<uint32_t>(static_cast<uint32_t>(s.prompt.size()));
    for (const PositionLogprobs& p : s.prompt) PutPosition(w, p);
    w.Put<uint8_t>(s.has_sampled);
    if (s.has_sampled) PutPosition(w, s.sampled);
  }
  return w.Take();
}

StatusOr<std::vector<SequenceLogprobs>> ParseLogprobs(const std::string& bytes) {
  ByteReader r(bytes);
  uint32_t magic = 0, n = 0;
  if (!r.Get(magic) || magic != kLogprobsMagic || !r.Get(n)) {
    return InvalidArgumentError("malformed logprobs (header)");
  }
  std::vector<SequenceLogprobs> out;
  for (uint32_t i = 0; i < n; ++i) {
    SequenceLogprobs s;
    uint32_t positions = 0;
    uint8_t has_sampled = 0;
    if (!r.Get(s.seq_id) || !r.Get(s.first_prompt_position) || !r.Get(positions)) {
      return InvalidArgumentError("malformed logprobs (sequence)");
    }
    for (uint32_t j = 0; j < positions; ++j) {
      PositionLogprobs p;
      if (!GetPosition(r, p)) return InvalidArgumentError("malformed logprobs (position)");
      s.prompt.push_back(std::move(p));
    }
    if (!r.Get(has_sampled) || (has_sampled != 0 && !GetPosition(r, s.sampled))) {
      return InvalidArgumentError("malformed logprobs (sampled)");
    }
    s.has_sampled = has_sampled != 0;
    out.push_back(std::move(s));
  }
  if (!r.done()) return InvalidArgumentError("malformed logprobs (trailing bytes)");
  return out;
}

}  // namespace uc::worker
