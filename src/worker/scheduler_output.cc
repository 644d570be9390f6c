#include "worker/scheduler_output.h"

#include "worker/byte_codec.h"

namespace uc::worker {
namespace {

using internal::ByteReader;
using internal::ByteWriter;

constexpr uint32_t kSchedulerOutputMagic = 0x55435330;  // "UCS0"

void PutParams(ByteWriter& w, const SamplingParams& p) {
  w.Put(p.temperature);
  w.Put(p.top_k);
  w.Put(p.top_p);
  w.Put(p.min_p);
  w.Put<uint8_t>(p.seed.has_value());
  w.Put<uint64_t>(p.seed.value_or(0));
  w.Put<int32_t>(p.logprobs.value_or(-1));
  w.Put<int32_t>(p.prompt_logprobs.value_or(-1));
  w.Put<uint8_t>(static_cast<uint8_t>(p.grammar.kind));
  w.PutString(p.grammar.text);
}

bool GetParams(ByteReader& r, SamplingParams& p) {
  uint8_t has_seed = 0;
  uint64_t seed = 0;
  int32_t logprobs = -1, prompt_logprobs = -1;
  uint8_t grammar_kind = 0;
  if (!(r.Get(p.temperature) && r.Get(p.top_k) && r.Get(p.top_p) && r.Get(p.min_p) &&
        r.Get(has_seed) && r.Get(seed) && r.Get(logprobs) && r.Get(prompt_logprobs) &&
        r.Get(grammar_kind) && r.GetString(p.grammar.text))) {
    return false;
  }
  if (grammar_kind > static_cast<uint8_t>(GrammarSpec::Kind::kStructuralTag)) return false;
  p.grammar.kind = static_cast<GrammarSpec::Kind>(grammar_kind);
  if (has_seed) p.seed = seed;
  if (logprobs >= 0) p.logprobs = logprobs;
  if (prompt_logprobs >= 0) p.prompt_logprobs = prompt_logprobs;
  return true;
}

void PutIds(ByteWriter& w, const std::vector<uint64_t>& ids) {
  w.Put<uint32_t>(static_cast<uint32_t>(ids.size()));
  for (uint64_t id : ids) w.Put(id);
}

bool GetIds(ByteReader& r, std::vector<uint64_t>& ids) {
  uint32_t n = 0;
  if (!r.Get(n)) return false;
  ids.resize(0);
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t id = 0;
    if (!r.Get(id)) return false;
    ids.push_back(id);
  }
  return true;
}

}  // namespace

int32_t SchedulerOutput::total_tokens() const {
  int32_t total = 0;
  for (const ScheduledSequence& s : scheduled) total += s.num_tokens();
  return total;
}

bool SchedulerOutput::wants_logprobs() const {
  for (const ScheduledSequence& s : scheduled) {
    if (s.wants_logprobs()) return true;
  }
  return false;
}

int32_t SchedulerOutput::num_sampled() const {
  int32_t n = 0;
  for (const ScheduledSequence& s : scheduled) n += s.sample ? 1 : 0;
  return n;
}

std::string SchedulerOutput::Serialize() const {
  ByteWriter w;
  w.Put(kSchedulerOutputMagic);
  w.Put(step);
  w.Put<uint32_t>(static_cast<uint32_t>(scheduled.size()));
  for (const ScheduledSequence& s : scheduled) {
    w.Put(s.seq_id);
    w.PutInts(s.token_ids);
    w.Put(s.start_pos);
    w.PutInts(s.block_table);
    w.Put(s.num_prompt_tokens);
    w.Put<uint8_t>(s.sample);
    w.Put<uint8_t>(s.new_params.has_value());
    if (s.new_params.has_value()) PutParams(w, *s.new_params);
    w.Put(s.steering_id);
    w.PutInts(s.steering_windows);
    w.Put(s.num_logprobs);
    w.Put(s.num_prompt_logprobs);
    w.Put(s.next_prompt_token);
  }
  PutIds(w, finished_seq_ids);
  PutIds(w, preempted_seq_ids);
  w.Put<uint32_t>(static_cast<uint32_t>(new_steering.size()));
  for (const SteeringRegistration& reg : new_steering) {
    w.Put(reg.id);
    w.PutString(reg.config);
  }
  w.Put<uint32_t>(static_cast<uint32_t>(dropped_steering.size()));
  for (uint32_t id : dropped_steering) w.Put(id);
  w.Put<uint32_t>(static_cast<uint32_t>(capture.size()));
  for (const CaptureItem& c : capture) {
    w.Put(c.layer);
    w.Put(c.site);
    w.PutInts(c.rows);
  }
  w.Put<uint8_t>(compare_tp_replicas);
  return w.Take();
}

StatusOr<SchedulerOutput> SchedulerOutput::Parse(const std::string& bytes) {
  SchedulerOutput out;
  ByteReader r(bytes);
  uint32_t magic = 0, n = 0;
  if (!r.Get(magic) || magic != kSchedulerOutputMagic || !r.Get(out.step) || !r.Get(n)) {
    return InvalidArgumentError("malformed scheduler output (header)");
  }
  for (uint32_t i = 0; i < n; ++i) {
    ScheduledSequence s;
    uint8_t sample = 0, has_params = 0;
    bool ok = r.Get(s.seq_id) && r.GetInts(s.token_ids) && r.Get(s.start_pos) &&
              r.GetInts(s.block_table) && r.Get(s.num_prompt_tokens) && r.Get(sample) &&
              r.Get(has_params);
    if (ok && has_params) {
      s.new_params.emplace();
      ok = GetParams(r, *s.new_params);
    }
    ok = ok && r.Get(s.steering_id) && r.GetInts(s.steering_windows) && r.Get(s.num_logprobs) &&
         r.Get(s.num_prompt_logprobs) && r.Get(s.next_prompt_token);
    if (!ok) return InvalidArgumentError("malformed scheduler output (sequence)");
    s.sample = sample != 0;
    out.scheduled.push_back(std::move(s));
  }
  if (!GetIds(r, out.finished_seq_ids) || !GetIds(r, out.preempted_seq_ids)) {
    return InvalidArgumentError("malformed scheduler output (ids)");
  }
  uint32_t registrations = 0, drops = 0;
  if (!r.Get(registrations)) return InvalidArgumentError("malformed scheduler output (steering)");
  for (uint32_t i = 0; i < registrations; ++i) {
    SteeringRegistration reg;
    if (!r.Get(reg.id) || !r.GetString(reg.config)) {
      return InvalidArgumentError("malformed scheduler output (steering)");
    }
    out.new_steering.push_back(std::move(reg));
  }
  if (!r.Get(drops)) return InvalidArgumentError("malformed scheduler output (steering)");
  for (uint32_t i = 0; i < drops; ++i) {
    uint32_t id = 0;
    if (!r.Get(id)) return InvalidArgumentError("malformed scheduler output (steering)");
    out.dropped_steering.push_back(id);
  }
  uint32_t items = 0;
  if (!r.Get(items)) return InvalidArgumentError("malformed scheduler output (capture)");
  for (uint32_t i = 0; i < items; ++i) {
    CaptureItem c;
    if (!r.Get(c.layer) || !r.Get(c.site) || !r.GetInts(c.rows)) {
      return InvalidArgumentError("malformed scheduler output (capture)");
    }
    out.capture.push_back(std::move(c));
  }
  uint8_t compare = 0;
  if (!r.Get(compare) || !r.done()) return InvalidArgumentError("malformed scheduler output");
  out.compare_tp_replicas = compare != 0;
  return out;
}

}  // namespace uc::worker
