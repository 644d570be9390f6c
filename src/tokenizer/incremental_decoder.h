// File: incremental_decoder.h
// -----------------------------------------------------------------------------
// IncrementalDecoder: streaming detokenization for generation. Fed one id at a time, it
// returns only text that is complete: bytes of a character split across tokens (emoji as
// <0xF0><0x9F><0x99><0x82> byte tokens, or byte-level pieces) are held back until the
// character is whole, so the output never contains a broken UTF-8 sequence. Invalid bytes
// become U+FFFD as soon as they are known to be invalid; Flush() ends the stream and turns a
// dangling partial character into U+FFFD.
//
// It applies the tokenizer's LeadingSpace rule (the dummy-prefix space is dropped at the start
// and, for llama2.c-style models, after BOS) and skips control tokens. The concatenation of
// all Add() results and Flush() equals Tokenizer::Decode() of the same ids.
//
//   IncrementalDecoder decoder(*tokenizer);
//   for (int32_t id : generated) std::cout << decoder.Add(id);
//   std::cout << decoder.Flush();
//
// Borrows the Tokenizer, which must outlive it. Not thread-safe: one per stream.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace uc::tokenizer {

class IncrementalDecoder {
 public:
  // `at_sequence_start`: the first id fed starts the token sequence (BOS or the first prompt
  // token), so a dummy-prefix space is stripped. Pass false when feeding only the tokens that
  // follow ids this decoder never saw (e.g. generated tokens after a prompt).
  explicit IncrementalDecoder(const Tokenizer& tokenizer, bool at_sequence_start = true);

  // Text completed by `id` (possibly empty).
  std::string Add(int32_t id);
  // Remaining held-back bytes, repaired with U+FFFD; the decoder can then be fed again.
  std::string Flush();
  // True while bytes of an unfinished character are held back.
  bool has_pending() const { return !pending_.empty(); }

 private:
  // Applies the LeadingSpace rule to the bytes of a non-control token.
  std::string_view StripLeadingSpace(int32_t id, std::string_view bytes);

  const Tokenizer& tokenizer_;
  std::string pending_;  // bytes of an incomplete character
  bool strip_armed_;     // the next text token may lose a leading space
};

}  // namespace uc::tokenizer
