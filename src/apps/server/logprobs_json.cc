#include "apps/server/logprobs_json.h"

namespace uc::server {
namespace {

using json = nlohmann::json;

json Bytes(const std::string& s) {
  json out = json::array();
  for (char c : s) out.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return out;
}

size_t TopCount(const worker::PositionLogprobs& p, int top) {
  return std::min(p.top.size(), static_cast<size_t>(std::max(0, top)));
}

}  // namespace

json CompletionLogprobsJson(const std::vector<int32_t>& tokens,
                            const std::vector<const worker::PositionLogprobs*>& entries, int top,
                            const TokenText& text, size_t text_offset) {
  json out = {{"tokens", json::array()},
              {"token_logprobs", json::array()},
              {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string piece = text(tokens[i]);
    out["tokens"].push_back(piece);
    out["text_offset"].push_back(text_offset);
    text_offset += piece.size();
    const worker::PositionLogprobs* p = i < entries.size() ? entries[i] : nullptr;
    if (p == nullptr) {
      out["token_logprobs"].push_back(nullptr);
      out["top_logprobs"].push_back(nullptr);
      continue;
    }
    out["token_logprobs"].push_back(p->chosen.logprob);
    // Keys are texts: when two tokens share one, the larger logprob stays.
    json dict = json::object();
    auto put = [&](const worker::TokenLogprob& t) {
      const std::string key = text(t.token);
      auto it = dict.find(key);
      if (it == dict.end() || it->get<float>() < t.logprob) dict[key] = t.logprob;
    };
    for (size_t k = 0; k < TopCount(*p, top); ++k) put(p->top[k]);
    put(p->chosen);
    out["top_logprobs"].push_back(std::move(dict));
  }
  return out;
}

json ChatLogprobsContent(const std::vector<worker::PositionLogprobs>& generated, int top,
                         const TokenText& text) {
  json content = json::array();
  for (const worker::PositionLogprobs& p : generated) {
    const std::string piece = text(p.chosen.token);
    json tops = json::array();
    for (size_t k = 0; k < TopCount(p, top); ++k) {
      const std::string t = text(p.top[k].token);
      tops.push_back({{"token", t}, {"logprob", p.top[k].logprob}, {"bytes", Bytes(t)}});
    }
    content.push_back({{"token", piece},
                       {"logprob", p.chosen.logprob},
                       {"bytes", Bytes(piece)},
                       {"top_logprobs", std::move(tops)}});
  }
  return content;
}

json PromptLogprobsJson(const std::vector<std::optional<worker::PositionLogprobs>>& prompt, int top,
                        const TokenText& text) {
  json out = json::array();
  for (const std::optional<worker::PositionLogprobs>& p : prompt) {
    if (!p.has_value()) {
      out.push_back(nullptr);
      continue;
    }
    json entry = json::object();
    auto put = [&](const worker::TokenLogprob& t) {
      entry[std::to_string(t.token)] = {
          {"logprob", t.logprob}, {"rank", t.rank}, {"decoded_token", text(t.token)}};
    };
    for (size_t k = 0; k < TopCount(*p, top); ++k) put(p->top[k]);
    put(p->chosen);
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace uc::server
