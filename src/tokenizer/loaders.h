// File: loaders.h
// -----------------------------------------------------------------------------
// Factories that build a Tokenizer from the files models ship with:
//
//   * LoadSentencePieceModel: a SentencePiece `tokenizer.model` (BPE models only), parsed
//     without libprotobuf; SentencePiece's normalization and decoding rules.
//   * LoadLlama2cTokenizer: llama2.c's `tok*.bin` (vocab size comes from the model), with
//     llama2.c's encoder semantics: dummy-prefix space, no whitespace collapsing.
//   * LoadGgufTokenizer: the `tokenizer.ggml.*` metadata of a GGUF file ("llama" -> SentencePiece
//     BPE, "gpt2" -> byte-level BPE with the pre-tokenizer named by tokenizer.ggml.pre),
//     following llama.cpp's conventions; Gemma files (general.architecture gemma/gemma2/gemma3)
//     as transformers builds them instead: ranked BPE with merges in vocabulary order, space
//     runs merged from "▁" rather than matched as user-defined tokens. Metadata only: tensor
//     types do not matter.
//   * LoadHfTokenizer: a Hugging Face `tokenizer.json` (BPE model: byte-level GPT-2 / Llama 3 /
//     Qwen2 / SmolLM2 layouts, or Llama-2-style with byte_fallback and a "▁" normalizer or
//     Metaspace), plus tokenizer_config.json and generation_config.json beside it if present.
//   * LoadTokenizer: picks one of the above for a model directory or file.
//
// Every error names the file and the field at fault. Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "io/gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace uc::tokenizer {

// From a SentencePiece ModelProto. Unimplemented for non-BPE models (unigram, word, char).
StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceModel(const std::filesystem::path& path);
// The same from bytes already in memory; `source` names them in errors.
StatusOr<TokenizerSpec> ParseSentencePieceModel(std::string_view bytes, std::string source);

// From a llama2.c tokenizer file holding `vocab_size` tokens. Ids 0, 1, 2 are <unk>, BOS, EOS.
StatusOr<std::unique_ptr<Tokenizer>> LoadLlama2cTokenizer(const std::filesystem::path& path,
                                                          int32_t vocab_size);

// From GGUF metadata. NotFound if the file has no tokenizer.
StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const io::GgufFile& gguf);
StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const std::filesystem::path& path);

// `path` is a tokenizer.json file or a directory holding one.
StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizer(const std::filesystem::path& path);

// A directory: tokenizer.json if present, else tokenizer.model. A file: by extension (.gguf,
// .json, .model) or the GGUF magic. llama2.c .bin files need LoadLlama2cTokenizer.
StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::filesystem::path& path);

}  // namespace uc::tokenizer
