#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <set>
#include <unordered_map>

#include "core/status.h"
#include "core/utf8.h"
#include "tokenizer/unicode.h"

namespace hymt {
namespace {

enum TokenKind : uint8_t { kOrdinary, kAdded, kSpecial };

// Pieces longer than this are encoded without the cache: long pieces rarely repeat.
constexpr size_t kMaxCachedPieceBytes = 64;
constexpr size_t kCacheSlots = size_t{1} << 16;           // per table; a cache has two
constexpr size_t kCacheMaxEntries = kCacheSlots / 4 * 3;  // a table is full at this many
// Caches kept per thread, one per tokenizer (the least recently used is replaced).
constexpr int kCachesPerThread = 4;

uint64_t NextInstanceId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

// Piece bytes -> ids, open addressing. Each entry's piece bytes and ids sit together in one record, so
// a hit touches two cache lines: the slot and the record. Emptying is O(1): a slot counts only when
// its generation is the table's current one.
class PieceTable {
 public:
  // Appends the ids of `piece` to *out and returns true when present.
  bool Find(std::string_view piece, uint64_t hash, std::vector<int32_t>* out) const {
    if (slots_.empty()) return false;
    const uint32_t tag = static_cast<uint32_t>(hash >> 32);
    for (size_t i = hash & (kCacheSlots - 1);; i = (i + 1) & (kCacheSlots - 1)) {
      const Slot& s = slots_[i];
      if (s.generation != generation_) return false;
      if (s.tag != tag || s.key_len != piece.size()) continue;
      const char* record = records_.data() + s.offset;
      if (std::memcmp(record, piece.data(), piece.size()) != 0) continue;
      size_t at = out->size();
      out->resize(at + s.n_ids);
      std::memcpy(out->data() + at, record + s.key_len, s.n_ids * sizeof(int32_t));
      return true;
    }
  }

  // Requires !full(), piece.size() <= kMaxCachedPieceBytes and 0 < n_ids < 65536.
  void Insert(std::string_view piece, uint64_t hash, const int32_t* ids, size_t n_ids) {
    if (slots_.empty()) slots_.assign(kCacheSlots, Slot{});
    size_t i = hash & (kCacheSlots - 1);
    while (slots_[i].generation == generation_) i = (i + 1) & (kCacheSlots - 1);
    slots_[i] = {static_cast<uint32_t>(hash >> 32), generation_, static_cast<uint32_t>(records_.size()),
                 static_cast<uint16_t>(piece.size()), static_cast<uint16_t>(n_ids)};
    records_.append(piece);
    records_.append(reinterpret_cast<const char*>(ids), n_ids * sizeof(int32_t));
    ++count_;
  }

  bool full() const { return count_ >= kCacheMaxEntries; }

  void Clear() {
    ++generation_;
    records_.clear();
    count_ = 0;
  }

 private:
  struct Slot {
    uint32_t tag = 0;  // high half of the piece hash (the low half picked the slot)
    uint32_t generation = 0;
    uint32_t offset = 0;  // of the record: piece bytes, then the ids (unaligned int32)
    uint16_t key_len = 0, n_ids = 0;
  };
  std::vector<Slot> slots_;  // [kCacheSlots] once used
  std::string records_;
  size_t count_ = 0;
  uint32_t generation_ = 1;  // slots start at generation 0: empty
};

// The piece cache of one tokenizer: a current table and the one before it. When the current table
// fills up it becomes the previous one and an empty one starts; a hit in the previous table is copied
// forward, so pieces in steady use survive (LRU-like at O(1) cost).
class PieceCache {
 public:
  // Appends the ids of `piece` to *out and returns true when cached.
  bool Lookup(std::string_view piece, uint64_t hash, std::vector<int32_t>* out) {
    if (current_.Find(piece, hash, out)) return true;
    size_t before = out->size();
    if (!previous_.Find(piece, hash, out)) return false;
    Insert(piece, hash, out->data() + before, out->size() - before);
    return true;
  }

  void Insert(std::string_view piece, uint64_t hash, const int32_t* ids, size_t n_ids) {
    if (current_.full()) {
      std::swap(current_, previous_);
      current_.Clear();
    }
    current_.Insert(piece, hash, ids, n_ids);
  }

  void Clear() {
    current_.Clear();
    previous_.Clear();
  }

 private:
  PieceTable current_, previous_;
};

// Per-thread encoding state, so that Encode is const, thread-safe and allocation-free when warm.
struct EncodeState {
  PieceCache caches[kCachesPerThread];
  uint64_t owners[kCachesPerThread] = {};
  uint64_t last_used[kCachesPerThread] = {};
  uint64_t clock = 0;
  PieceCache* cache = nullptr;  // the current tokenizer's
  BpeScratch scratch;
  std::vector<std::string_view> pieces;
  std::string normalized;
};

// This thread's state, its cache switched to `owner`'s (a tokenizer not seen lately takes the least
// recently used cache, emptied).
EncodeState& ThreadEncodeState(uint64_t owner) {
  thread_local EncodeState state;
  int slot = 0;
  for (int i = 0; i < kCachesPerThread; ++i) {
    if (state.owners[i] == owner) {
      slot = i;
      break;
    }
    if (state.last_used[i] < state.last_used[slot]) slot = i;
  }
  if (state.owners[slot] != owner) {
    state.caches[slot].Clear();
    state.owners[slot] = owner;
  }
  state.last_used[slot] = ++state.clock;
  state.cache = &state.caches[slot];
  return state;
}

// True when s[i..] is a proper prefix of a valid UTF-8 sequence: more bytes could complete it.
bool IsIncompleteUtf8(std::string_view s, size_t i) {
  uint8_t b = static_cast<uint8_t>(s[i]);
  size_t need;
  if (b >= 0xc2 && b <= 0xdf) {
    need = 2;
  } else if (b >= 0xe0 && b <= 0xef) {
    need = 3;
  } else if (b >= 0xf0 && b <= 0xf4) {
    need = 4;
  } else {
    return false;
  }
  size_t have = s.size() - i;
  if (have >= need) return false;
  for (size_t k = 1; k < have; ++k) {
    uint8_t c = static_cast<uint8_t>(s[i + k]);
    uint8_t lo = 0x80, hi = 0xbf;
    if (k == 1) {  // the second byte's range excludes overlong forms, surrogates and > U+10FFFF
      if (b == 0xe0) lo = 0xa0;
      if (b == 0xed) hi = 0x9f;
      if (b == 0xf0) lo = 0x90;
      if (b == 0xf4) hi = 0x8f;
    }
    if (c < lo || c > hi) return false;
  }
  return true;
}

constexpr std::string_view kReplacementChar = "\xef\xbf\xbd";

}  // namespace

struct Tokenizer::Impl {
  explicit Impl(TokenizerSpec&& spec);

  struct AddedMatch {
    size_t start = std::string_view::npos, length = 0;
    int32_t id = -1;
  };
  // The leftmost added token at or after pos (the longest one there); start == npos when none.
  AddedMatch FindAdded(std::string_view text, size_t pos, bool parse_special) const;

  std::string source;
  SplitRule split_rule;
  uint64_t instance_id;  // keys this tokenizer's per-thread piece cache
  std::unique_ptr<BpeModel> bpe;
  std::vector<uint8_t> kind;                            // [n_tokens] TokenKind
  std::unordered_map<std::string_view, int32_t> added;  // text -> id; views into bpe's tokens
  std::array<bool, 256> added_first_byte{};
  std::vector<size_t> added_lengths;  // distinct lengths, longest first
};

Tokenizer::Impl::Impl(TokenizerSpec&& spec)
    : source(spec.source), split_rule(spec.split_rule), instance_id(NextInstanceId()) {
  // Validate the added tokens, then build the BPE model over the others.
  const int64_t n = static_cast<int64_t>(spec.tokens.size());
  if (n == 0) Fail(ErrorCode::kCorruptData, source, ": the vocabulary has no tokens");
  if (n > INT32_MAX) Fail(ErrorCode::kCorruptData, source, ": ", n, " tokens is more than ids can hold");
  kind.assign(n, kOrdinary);
  for (const auto& a : spec.added_tokens) {
    if (a.id < 0 || a.id >= n)
      Fail(ErrorCode::kCorruptData, source, ": added token id ", a.id, " is outside [0, ", n, ")");
    if (kind[a.id] != kOrdinary)
      Fail(ErrorCode::kCorruptData, source, ": token id ", a.id, " is listed twice as an added token");
    if (spec.tokens[a.id].empty())
      Fail(ErrorCode::kCorruptData, source, ": added token ", a.id, " has no text");
    kind[a.id] = a.special ? kSpecial : kAdded;
  }
  std::vector<bool> ordinary(n);
  for (int64_t id = 0; id < n; ++id) ordinary[id] = kind[id] == kOrdinary;
  BpeModel::Where where = spec.where ? spec.where : [](int32_t id) { return StrCat("token ", id); };
  try {
    bpe = std::make_unique<BpeModel>(std::move(spec.tokens), ordinary, spec.merge_rule, spec.merges,
                                     spec.ignore_merges, where);
  } catch (const Error& e) {
    Fail(e.code(), source, ": ", e.what());
  }
  // The matcher for added tokens in text: candidates start at a byte some added token starts with, and
  // each distinct length is tried, longest first (there are few: 7 for the Hunyuan specials).
  std::set<size_t, std::greater<size_t>> lengths;
  for (const auto& a : spec.added_tokens) {
    std::string_view text = bpe->token(a.id);
    auto [it, inserted] = added.emplace(text, a.id);
    if (!inserted)
      Fail(ErrorCode::kCorruptData, source, ": added tokens ", it->second, " and ", a.id,
           " have the same text");
    added_first_byte[static_cast<uint8_t>(text[0])] = true;
    lengths.insert(text.size());
  }
  added_lengths.assign(lengths.begin(), lengths.end());
}

Tokenizer::Impl::AddedMatch Tokenizer::Impl::FindAdded(std::string_view text, size_t pos,
                                                       bool parse_special) const {
  if (added.empty()) return {};
  for (size_t i = pos; i < text.size(); ++i) {
    if (!added_first_byte[static_cast<uint8_t>(text[i])]) continue;
    for (size_t len : added_lengths) {
      if (len > text.size() - i) continue;
      auto it = added.find(text.substr(i, len));
      if (it != added.end() && (parse_special || kind[it->second] != kSpecial)) return {i, len, it->second};
    }
  }
  return {};
}

const char* NormalizationName(Normalization normalization) {
  return normalization == Normalization::kNfc ? "nfc" : "none";
}

Normalization ParseNormalization(std::string_view name) {
  if (name == "none") return Normalization::kNone;
  if (name == "nfc") return Normalization::kNfc;
  Fail(ErrorCode::kInvalidArgument, "unknown normalization '", name, "': expected none or nfc");
}

Tokenizer Tokenizer::FromSpec(TokenizerSpec spec) {
  Normalization normalization = spec.normalization;
  return Tokenizer(std::make_shared<const Impl>(std::move(spec)), normalization);
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);  // about 2.4 bytes per token on FLORES
  // Added tokens first, as tiktoken and HF do: the text between them is split and encoded on its own,
  // so a split rule's lookahead never sees past a special token.
  size_t pos = 0;
  while (pos < text.size()) {
    Impl::AddedMatch m = impl_->FindAdded(text, pos, parse_special);
    size_t end = std::min(m.start, text.size());
    if (end > pos) EncodeText(text.substr(pos, end - pos), &ids);
    if (m.id < 0) break;
    ids.push_back(m.id);
    pos = m.start + m.length;
  }
  return ids;
}

void Tokenizer::EncodeText(std::string_view text, std::vector<int32_t>* ids) const {
  EncodeState& state = ThreadEncodeState(impl_->instance_id);
  if (normalization_ == Normalization::kNfc && !IsNfcQuick(text)) {
    state.normalized.clear();
    AppendNfc(text, &state.normalized);
    text = state.normalized;
  }
  state.pieces.clear();
  SplitText(impl_->split_rule, text, &state.pieces);
  // Single bytes need no cache; long pieces rarely repeat.
  const BpeModel& bpe = *impl_->bpe;
  for (std::string_view piece : state.pieces) {
    if (piece.size() == 1 || piece.size() > kMaxCachedPieceBytes) {
      bpe.EncodePiece(piece, ids, &state.scratch);
      continue;
    }
    uint64_t hash = HashBytes(piece);
    if (state.cache->Lookup(piece, hash, ids)) continue;
    size_t before = ids->size();
    bpe.EncodePiece(piece, ids, &state.scratch);
    state.cache->Insert(piece, hash, ids->data() + before, ids->size() - before);
  }
}

std::string Tokenizer::Decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= n_tokens())
      Fail(ErrorCode::kInvalidArgument, "token id ", id, " is outside [0, ", n_tokens(), ")");
    out += impl_->bpe->token(id);
  }
  return out;
}

std::optional<int32_t> Tokenizer::TokenId(std::string_view name) const {
  auto it = impl_->added.find(name);
  if (it != impl_->added.end()) return it->second;
  int32_t id = name.empty() ? -1 : impl_->bpe->Find(name);
  if (id >= 0) return id;
  return std::nullopt;
}

int32_t Tokenizer::n_tokens() const {
  return impl_->bpe->n_tokens();
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < n_tokens() && impl_->kind[id] == kSpecial;
}

const std::string& Tokenizer::TokenBytes(int32_t id) const {
  HYMT_CHECK(id >= 0 && id < n_tokens(), "token id ", id);
  return impl_->bpe->token(id);
}

SplitRule Tokenizer::split_rule() const {
  return impl_->split_rule;
}
const std::string& Tokenizer::source() const {
  return impl_->source;
}

std::string StreamDecoder::Push(int32_t id) {
  if (id < 0 || id >= tokenizer_->n_tokens())
    Fail(ErrorCode::kInvalidArgument, "token id ", id, " is outside [0, ", tokenizer_->n_tokens(), ")");
  pending_ += tokenizer_->TokenBytes(id);
  // Emit every complete character; stop at a tail that more bytes could still complete.
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    if (static_cast<uint8_t>(pending_[i]) < 0x80) {
      out.push_back(pending_[i++]);
      continue;
    }
    int len = ValidUtf8SequenceLength(pending_, i);
    if (len > 0) {
      out.append(pending_, i, len);
      i += len;
    } else if (IsIncompleteUtf8(pending_, i)) {
      break;  // wait for the rest of the character
    } else {
      out += kReplacementChar;
      ++i;
    }
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::Finish() {
  std::string out = pending_.empty() ? "" : std::string(kReplacementChar);
  pending_.clear();
  return out;
}

}  // namespace hymt
