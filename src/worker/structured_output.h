// File: structured_output.h
// -----------------------------------------------------------------------------
// Structured output: sampling constrained by a grammar, so that a request's output parses as
// JSON, validates against a JSON schema, matches a regex or is one of a list of choices
// (an EBNF alternation). The
// grammar engine is xgrammar's C++ core (third_party/xgrammar): a grammar is compiled once
// against the tokenizer's vocabulary (GrammarBackend, cached by content), and each constrained
// sequence owns one GrammarConstraint (an xgrammar matcher) that yields the bitmask of the tokens
// allowed next and accepts each sampled token.
//
// Flow in a step (worker.cc): the result rank starts FillMask() of every constrained sequence
// it will sample on a helper thread before the forward pass and joins it after, so the mask costs
// no step time while it is shorter than the forward; ApplyMask() sets the disallowed logits to
// -inf before the sampler runs; Accept() feeds the sampled token back. When the grammar is
// complete only the stop tokens (the model's EOS ids) are allowed, so the request ends with
// finish_reason "stop".
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "worker/sampling_params.h"

namespace xgrammar {
class CompiledGrammar;
class GrammarCompiler;
class GrammarMatcher;
}  // namespace xgrammar

namespace uc::worker {

// The compiled form of a GrammarSpec; shared by every sequence that uses it. Immutable.
class CompiledGrammar {
 public:
  explicit CompiledGrammar(std::unique_ptr<xgrammar::CompiledGrammar> grammar);
  ~CompiledGrammar();
  const xgrammar::CompiledGrammar& get() const { return *grammar_; }

 private:
  std::unique_ptr<xgrammar::CompiledGrammar> grammar_;
};

// Compiles grammars against one vocabulary. The xgrammar compiler (its token tables take a
// fraction of a second to build for a large vocabulary) is built on the first Compile. Compiled
// grammars are cached by content, so compiling the same spec again (the server validating a
// request, then the worker starting its sequence) is a lookup. Thread-safe.
class GrammarBackend {
 public:
  // decoded_vocab[id]: the bytes token `id` contributes to the text (empty for control tokens);
  // vocab_size: the width of the logits (>= decoded_vocab.size()); stop_ids: the ids that end a
  // request (the grammar allows them once it is complete).
  GrammarBackend(std::vector<std::string> decoded_vocab, int vocab_size,
                 std::vector<int32_t> stop_ids);
  ~GrammarBackend();

  // InvalidArgument (the grammar engine's message, without a field name: the caller knows which
  // field carried the spec) for an invalid schema, regex or grammar, an unsupported schema
  // feature.
  StatusOr<std::shared_ptr<const CompiledGrammar>> Compile(const GrammarSpec& spec);

  int vocab_size() const { return vocab_size_; }
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }

 private:
  xgrammar::GrammarCompiler& compiler();  // REQUIRES: mu_ held

  std::vector<std::string> decoded_vocab_;
  int vocab_size_ = 0;
  std::vector<int32_t> stop_ids_;
  std::mutex mu_;  // guards compiler_ creation (the compiler itself is thread-safe)
  std::unique_ptr<xgrammar::GrammarCompiler> compiler_;
};

// The EBNF grammar (GrammarSpec::Kind::kEbnf) whose language is exactly the strings of
// `choices`. REQUIRES: choices is not empty.
std::string ChoiceGrammar(const std::vector<std::string>& choices);

// One sequence's position in its grammar. Thread-compatible: FillMask may run on another thread
// than ApplyMask/Accept as long as the calls do not overlap.
class GrammarConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const CompiledGrammar> grammar, int vocab_size);
  ~GrammarConstraint();

  // Computes the bitmask of the tokens allowed next (all, once the matcher has terminated).
  void FillMask();
  // logits: [vocab_size]; sets every token the last FillMask disallowed to -inf.
  void ApplyMask(std::span<float> logits) const;
  // Advances past `token`. False when the grammar does not allow it (the sampler picked a
  // token the mask forbade; cannot happen after ApplyMask unless every token was masked).
  bool Accept(int32_t token);
  // The grammar has accepted a stop token.
  bool terminated() const;

 private:
  std::shared_ptr<const CompiledGrammar> grammar_;
  std::unique_ptr<xgrammar::GrammarMatcher> matcher_;
  int vocab_size_ = 0;
  std::vector<int32_t> bitmask_;  // ceil(vocab_size / 32) words; bit i of word w: token 32w + i
  bool mask_all_ = false;         // the last FillMask found the matcher terminated
};

}  // namespace uc::worker
