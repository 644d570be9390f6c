#include "worker/structured_output.h"

#include <dlpack/dlpack.h>
#include <xgrammar/xgrammar.h>

#include <cstdio>
#include <exception>
#include <limits>

#include "base/check.h"

namespace uc::worker {

CompiledGrammar::CompiledGrammar(std::unique_ptr<xgrammar::CompiledGrammar> grammar)
    : grammar_(std::move(grammar)) {}
CompiledGrammar::~CompiledGrammar() = default;

GrammarBackend::GrammarBackend(std::vector<std::string> decoded_vocab, int vocab_size,
                               std::vector<int32_t> stop_ids)
    : decoded_vocab_(std::move(decoded_vocab)),
      vocab_size_(vocab_size),
      stop_ids_(std::move(stop_ids)) {
  UC_CHECK(vocab_size_ >= static_cast<int>(decoded_vocab_.size()), "vocab %d < %zu tokens",
           vocab_size_, decoded_vocab_.size());
}

GrammarBackend::~GrammarBackend() = default;

xgrammar::GrammarCompiler& GrammarBackend::compiler() {
  if (compiler_ == nullptr) {
    // RAW: the strings are the tokens' bytes as they appear in the text.
    const xgrammar::TokenizerInfo info(decoded_vocab_, xgrammar::VocabType::RAW, vocab_size_,
                                       stop_ids_);
    // Two compile threads: the machine's cores belong to the forward pass.
    compiler_ = std::make_unique<xgrammar::GrammarCompiler>(info, /*max_threads=*/2,
                                                            /*cache_enabled=*/true,
                                                            /*max_memory_bytes=*/256 << 20);
  }
  return *compiler_;
}

StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarBackend::Compile(const GrammarSpec& spec) {
  xgrammar::GrammarCompiler* c = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    c = &compiler();
  }
  try {
    std::unique_ptr<xgrammar::CompiledGrammar> g;
    switch (spec.kind) {
      case GrammarSpec::Kind::kNone:
        return InvalidArgumentError("no grammar to compile");
      case GrammarSpec::Kind::kJsonObject:
        // Compact separators: a small model allowed free whitespace can emit it until
        // max_tokens runs out.
        g = std::make_unique<xgrammar::CompiledGrammar>(
            c->CompileJSONSchema(R"({"type": "object"})", /*any_whitespace=*/false));
        break;
      case GrammarSpec::Kind::kJsonSchema:
        g = std::make_unique<xgrammar::CompiledGrammar>(
            c->CompileJSONSchema(spec.text, /*any_whitespace=*/false));
        break;
      case GrammarSpec::Kind::kRegex:
        g = std::make_unique<xgrammar::CompiledGrammar>(c->CompileRegex(spec.text));
        break;
      case GrammarSpec::Kind::kEbnf:
        g = std::make_unique<xgrammar::CompiledGrammar>(c->CompileGrammar(spec.text, "root"));
        break;
      case GrammarSpec::Kind::kStructuralTag:
        g = std::make_unique<xgrammar::CompiledGrammar>(c->CompileStructuralTag(spec.text));
        break;
    }
    return std::shared_ptr<const CompiledGrammar>(std::make_shared<CompiledGrammar>(std::move(g)));
  } catch (const std::exception& e) {
    std::string message = e.what();
    // xgrammar's messages may carry a source location and a trailing newline.
    while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) {
      message.pop_back();
    }
    if (message.size() > 1024) message.resize(1024);
    return InvalidArgumentError(message);
  }
}

std::string ChoiceGrammar(const std::vector<std::string>& choices) {
  UC_CHECK(!choices.empty(), "no choices");
  std::string ebnf = "root ::= ";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) ebnf += " | ";
    ebnf += '"';
    for (unsigned char ch : choices[i]) {
      if (ch == '"' || ch == '\\') {
        ebnf += '\\';
        ebnf += static_cast<char>(ch);
      } else if (ch < 0x20 || ch == 0x7f) {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "\\x%02x", ch);
        ebnf += hex;
      } else {
        ebnf += static_cast<char>(ch);
      }
    }
    ebnf += '"';
  }
  return ebnf + "\n";
}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const CompiledGrammar> grammar, int vocab_size)
    : grammar_(std::move(grammar)),
      matcher_(std::make_unique<xgrammar::GrammarMatcher>(grammar_->get())),
      vocab_size_(vocab_size),
      bitmask_(static_cast<size_t>(xgrammar::GetBitmaskSize(vocab_size)), 0) {}

GrammarConstraint::~GrammarConstraint() = default;

void GrammarConstraint::FillMask() {
  mask_all_ = matcher_->IsTerminated();
  if (mask_all_) return;
  int64_t shape[1] = {static_cast<int64_t>(bitmask_.size())};
  DLTensor t{};
  t.data = bitmask_.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = DLDataType{kDLInt, 32, 1};
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  matcher_->FillNextTokenBitmask(&t);
}

void GrammarConstraint::ApplyMask(std::span<float> logits) const {
  if (mask_all_) return;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const size_t n = std::min(logits.size(), static_cast<size_t>(vocab_size_));
  for (size_t w = 0; w * 32 < n; ++w) {
    const uint32_t bits = static_cast<uint32_t>(bitmask_[w]);
    if (bits == 0xffffffffu) continue;
    const size_t end = std::min(n, w * 32 + 32);
    for (size_t i = w * 32; i < end; ++i) {
      if (((bits >> (i - w * 32)) & 1u) == 0) logits[i] = neg_inf;
    }
  }
  for (size_t i = n; i < logits.size(); ++i) logits[i] = neg_inf;
}

bool GrammarConstraint::Accept(int32_t token) {
  if (matcher_->IsTerminated()) return true;
  return matcher_->AcceptToken(token);
}

bool GrammarConstraint::terminated() const { return matcher_->IsTerminated(); }

}  // namespace uc::worker
