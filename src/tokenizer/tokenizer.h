// The tokenizer: text <-> token ids for the Hunyuan model families (see docs MODEL.md, "Tokenizer").
//
// Encode: special tokens written literally are cut out first (longest match, leftmost); each stretch of
// text between them is normalised (if asked), split by the model's split rule (pretokenize.h) and each
// piece is byte-pair encoded (bpe.h). Decode concatenates the raw bytes of the tokens.
// Loaders: hy.tiktoken, HF tokenizer.json, or a TokenizerSpec filled by another loader (GGUF).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenize.h"

namespace hymt {

// Unicode normalisation applied to text before splitting (the `--normalize` option).
enum class Normalization { kNone, kNfc };
const char* NormalizationName(Normalization normalization);  // "none", "nfc"
// Parses "none" or "nfc"; throws Error(kInvalidArgument) naming the accepted values otherwise.
Normalization ParseNormalization(std::string_view name);

// GPT-2's byte-level spelling of raw bytes (bytes_to_unicode), used by tokenizer.json and GGUF
// vocabularies: each byte is one character, printable Latin-1 bytes standing for themselves.
std::string EncodeByteLevel(std::string_view bytes);
// The bytes that byte-level `text` stands for; false (and *bytes unspecified) when a character is
// outside the 256-character alphabet or `text` is not valid UTF-8.
bool DecodeByteLevel(std::string_view text, std::string* bytes);

// Everything that defines a tokenizer, whatever file it came from; the GGUF loader fills one of these.
struct TokenizerSpec {
  struct AddedToken {
    int32_t id;
    bool special;  // special: matched in text only when Encode's parse_special; others always
  };
  std::string source;               // the file, for error messages
  std::vector<std::string> tokens;  // [n_tokens] bytes of every id; an added token holds its text
  std::vector<AddedToken> added_tokens;
  BpeModel::Rule merge_rule = BpeModel::Rule::kRanks;       // kRanks: the id of an ordinary token is its rank
  std::vector<std::pair<std::string, std::string>> merges;  // kMergeList: byte strings, in priority order
  bool ignore_merges = false;  // kMergeList: a piece that is a token is taken whole
  SplitRule split_rule = SplitRule::kHunyuan;
  Normalization normalization = Normalization::kNone;
  BpeModel::Where where;  // optional: where token `id` is defined ("line 12"), for error messages
};

class Tokenizer {
 public:
  // hy.tiktoken: "base64(token) rank" per line, ranks 0..n-1 each exactly once; the Hunyuan special
  // tokens follow in MODEL.md's order (<|endoftext|> = n, <|startoftext|>, <|bos|>, <|eos|>, <|pad|>,
  // <|extra_0|> .. <|extra_204|>). Split rule kHunyuan, no normalisation.
  // Throws Error (kNotFound, kCorruptData) naming the file and line.
  static Tokenizer FromTiktokenFile(const std::string& path);
  // The same from the file's bytes; `source` names it in errors (for tests and fuzzers).
  static Tokenizer FromTiktokenText(std::string_view data, const std::string& source);

  // HF tokenizer.json with a byte-level BPE model: vocab, merges ("a b" strings or [a, b] pairs),
  // added_tokens, the pre_tokenizer (must be one of the Split rules above followed by ByteLevel) and the
  // normalizer (none, NFC, or a Sequence of those). The post_processor and decoder are not used: Encode
  // never adds BOS/EOS (the chat template does). Throws Error naming the file and field; kUnsupported for
  // a valid file that asks for something hymt does not implement.
  static Tokenizer FromTokenizerJson(const std::string& path);
  // The same from the file's text; `source` names it in errors (for tests and fuzzers).
  static Tokenizer FromTokenizerJsonText(std::string_view text, const std::string& source);

  // A model folder: tokenizer.json when present (it declares its split rule and normalizer), else
  // hy.tiktoken. Throws Error(kNotFound) when it holds neither.
  static Tokenizer FromModelDir(const std::string& dir);

  // From parts (see TokenizerSpec). Throws Error(kCorruptData) naming spec.source when the parts are
  // inconsistent: an id out of range, two tokens with the same bytes, an empty token, a merge of
  // bytes that are not tokens.
  static Tokenizer FromSpec(TokenizerSpec spec);

  // Token ids of `text`. With parse_special, special tokens written literally in the text become their
  // ids; without, their text is encoded as ordinary text. `text` may be any bytes: a byte that is not
  // part of valid UTF-8 becomes a piece of its own (its single-byte token), and Decode(Encode(text))
  // == text whenever normalisation is off. Thread-safe: each thread keeps its own piece cache (up to
  // about 4 MB for each of the last 4 tokenizers it used).
  // Throws Error(kInvalidArgument) only when the vocabulary lacks a byte the text needs.
  std::vector<int32_t> Encode(std::string_view text, bool parse_special = true) const;

  // The bytes of the ids concatenated (not necessarily valid UTF-8: a character may be split across
  // tokens; see StreamDecoder). Throws Error(kInvalidArgument) for an id outside [0, n_tokens()).
  std::string Decode(std::span<const int32_t> ids) const;

  // The id of the added or special token whose text is `name`, else of the ordinary token whose bytes
  // are `name`; nullopt when there is none. Look specials up by name, never by a fixed id.
  std::optional<int32_t> TokenId(std::string_view name) const;

  int32_t n_tokens() const;
  // True for special tokens (control tokens such as <|eos|>), false for ordinary and other added ones.
  bool IsSpecial(int32_t id) const;
  // The bytes of token `id`; requires 0 <= id < n_tokens().
  const std::string& TokenBytes(int32_t id) const;

  SplitRule split_rule() const;
  const std::string& source() const;
  Normalization normalization() const { return normalization_; }
  // Overrides the normalisation the file declared (the --normalize option).
  void SetNormalization(Normalization normalization) { normalization_ = normalization; }

 private:
  struct Impl;
  explicit Tokenizer(std::shared_ptr<const Impl> impl, Normalization normalization)
      : impl_(std::move(impl)), normalization_(normalization) {}

  void EncodeText(std::string_view text, std::vector<int32_t>* ids) const;

  std::shared_ptr<const Impl> impl_;  // immutable, shared by copies
  Normalization normalization_;
};

// Turns generated ids into text as they arrive without ever emitting part of a UTF-8 character: an
// incomplete sequence at the end is held back until its next bytes arrive. Every returned chunk is
// valid UTF-8; bytes that cannot be part of valid UTF-8 come out as U+FFFD (one per byte). The
// tokenizer must outlive the decoder.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}

  // Text completed by token `id` (possibly empty). Throws Error(kInvalidArgument) for an id out of range.
  std::string Push(int32_t id);
  // The rest: an incomplete sequence still held back becomes U+FFFD. The decoder is then empty.
  std::string Finish();

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;  // bytes received but not yet emitted (at most an incomplete sequence)
};

}  // namespace hymt
