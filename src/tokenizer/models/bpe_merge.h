// File: bpe_merge.h
// -----------------------------------------------------------------------------
// The merge loop shared by both BPE flavours: a word starts as a sequence of symbols (spans of
// the word, usually one character each); the adjacent pair with the highest priority is
// merged, leftmost first on ties, until no adjacent pair can merge. SentencePiece BPE uses the
// score of the merged piece as priority; ranked BPE (GPT-2, tokenizer.json) uses -rank, or for
// Gemma the merged piece's id and the left part's length (bpe_model.h).
//
// A priority queue with lazy invalidation keeps this O(n log n) in the word length, instead
// of the O(n^2) rescan of a naive loop; results are identical because the queue orders by
// (priority, left position) exactly like the rescan does.
//
//   std::vector<BpeSymbol> symbols = ...;  // one per character, linked in order
//   MergeSymbols(&symbols, [&](const BpeSymbol& l, const BpeSymbol& r) { return Lookup(l, r); });
//
// Header-only template; stateless.
#pragma once

#include <cstdint>
#include <optional>
#include <queue>
#include <vector>

namespace uc::tokenizer {

// A span [begin, begin + length) of the word with the token it currently is (-1: the span
// is not a token). `prev`/`next` link live symbols; -1 ends the chain. A merged-away symbol
// has length 0.
struct BpeSymbol {
  int32_t id;
  uint32_t begin;
  uint32_t length;
  int32_t prev;
  int32_t next;
};

// The result of merging two adjacent symbols: the new token and its priority.
struct BpeMerge {
  int32_t id;
  double priority;
};

// Links symbols[i] to its neighbours i - 1 and i + 1 (the initial chain).
inline void LinkSymbols(std::vector<BpeSymbol>* symbols) {
  const auto n = static_cast<int32_t>(symbols->size());
  for (int32_t i = 0; i < n; ++i) {
    (*symbols)[i].prev = i - 1;
    (*symbols)[i].next = i + 1 < n ? i + 1 : -1;
  }
}

// Runs the merge loop in place. `lookup(left, right)` returns the merge of two adjacent
// symbols or nullopt when they cannot merge. Afterwards the live symbols (length > 0), in
// chain order from index 0, are the result.
template <typename Lookup>
void MergeSymbols(std::vector<BpeSymbol>* symbols, Lookup&& lookup) {
  struct Candidate {
    double priority;
    int32_t left;
    int32_t right;
    uint32_t length;  // left.length + right.length when queued; detects stale entries
    int32_t id;
    bool operator<(const Candidate& o) const {
      if (priority != o.priority) return priority < o.priority;
      return left > o.left;
    }
  };
  std::vector<BpeSymbol>& s = *symbols;
  std::priority_queue<Candidate> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const std::optional<BpeMerge> merge = lookup(s[left], s[right]);
    if (!merge) return;
    queue.push({merge->priority, left, right, s[left].length + s[right].length, merge->id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(s.size()); ++i) try_add(i, i + 1);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    BpeSymbol& left = s[top.left];
    BpeSymbol& right = s[top.right];
    if (left.length == 0 || right.length == 0 || left.next != top.right ||
        left.length + right.length != top.length) {
      continue;  // one side changed since this candidate was queued
    }
    left.length += right.length;
    left.id = top.id;
    left.next = right.next;
    if (right.next >= 0) s[right.next].prev = top.left;
    right.length = 0;
    try_add(left.prev, top.left);
    try_add(top.left, left.next);
  }
}

}  // namespace uc::tokenizer
