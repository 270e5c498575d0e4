#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstring>

#include "core/status.h"

namespace hymt {
namespace {

// Smallest power of two holding `count` entries at a load factor of at most 3/4.
size_t TableSize(size_t count) {
  size_t size = 16;
  while (size * 3 < count * 4) size *= 2;
  return size;
}

// Token bytes for an error message: ASCII as is, anything else as \xNN.
std::string Printable(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      out += StrCat("\\x", "0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15]);
    }
  }
  return out;
}

}  // namespace

uint64_t HashBytes(std::string_view s) {
  // Eight bytes at a time through a multiply-xorshift mix (splitmix64's finaliser).
  uint64_t h = 0x9e3779b97f4a7c15ull ^ s.size();
  const char* p = s.data();
  size_t n = s.size();
  auto mix = [&h](uint64_t w) {
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  };
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    mix(w);
  }
  if (n > 0) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    mix(w);
  }
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 32);
}

BpeModel::BpeModel(std::vector<std::string> tokens, const std::vector<bool>& ordinary, Rule rule,
                   const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
                   const Where& where)
    : tokens_(std::move(tokens)), whole_piece_first_(rule == Rule::kRanks || ignore_merges) {
  HYMT_CHECK(ordinary.size() == tokens_.size());
  if (merges.size() >= static_cast<size_t>(INT32_MAX))
    Fail(ErrorCode::kCorruptData, merges.size(), " merges is more than priorities can hold");
  // Only ordinary tokens are reachable by BPE; added tokens are matched in the text before splitting.
  size_t n_ordinary = std::count(ordinary.begin(), ordinary.end(), true);
  index_.assign(TableSize(n_ordinary), {0, -1});
  index_mask_ = index_.size() - 1;
  for (int32_t id = 0; id < n_tokens(); ++id)
    if (ordinary[id]) AddToIndex(id, where);
  for (int b = 0; b < 256; ++b) byte_ids_[b] = Find(std::string(1, static_cast<char>(b)));

  // Collect the pairs first so that the table is sized once.
  std::vector<PairSlot> found;
  if (rule == Rule::kRanks) {
    // tiktoken merges any two adjacent parts whose concatenation is a token, lowest rank first. The
    // parts are always tokens, so every such merge is some split of a token into two tokens.
    for (int32_t id = 0; id < n_tokens(); ++id) {
      if (!ordinary[id]) continue;
      std::string_view t = tokens_[id];
      if (t.size() > kMaxRankTokenBytes)
        Fail(ErrorCode::kCorruptData, where(id), ": token ", id, " is ", t.size(),
             " bytes; a rank vocabulary's tokens may be ", kMaxRankTokenBytes, " bytes at most");
      for (size_t k = 1; k < t.size(); ++k) {
        int32_t left = Find(t.substr(0, k));
        if (left < 0) continue;
        int32_t right = Find(t.substr(k));
        if (right >= 0)
          found.push_back({static_cast<uint64_t>(left) << 32 | static_cast<uint32_t>(right), id, id});
      }
    }
  } else {
    for (size_t i = 0; i < merges.size(); ++i) {
      const auto& [a, b] = merges[i];
      int32_t left = Find(a), right = Find(b);
      int32_t merged = Find(a + b);
      if (left < 0 || right < 0 || merged < 0) {
        Fail(ErrorCode::kCorruptData, "merge ", i, " (\"", Printable(a), "\" + \"", Printable(b), "\"): \"",
             Printable(left < 0    ? a
                       : right < 0 ? b
                                   : a + b),
             "\" is not a token");
      }
      found.push_back({static_cast<uint64_t>(left) << 32 | static_cast<uint32_t>(right),
                       static_cast<int32_t>(i), merged});
    }
  }
  // The pair table, its filter, and the dense table of byte pairs (a piece's first lookups).
  pairs_.assign(TableSize(found.size()), {kEmptyKey, 0, 0});
  pair_mask_ = pairs_.size() - 1;
  pair_shift_ = 64 - __builtin_ctzll(pairs_.size());
  size_t filter_bits = 64;
  while (filter_bits < found.size() * kFilterBitsPerPair) filter_bits *= 2;
  pair_filter_.assign(filter_bits / 64, 0);
  filter_mask_ = filter_bits - 1;
  for (const PairSlot& p : found) {
    size_t bit = ((p.key * 0x9e3779b97f4a7c15ull) >> kFilterShift) & filter_mask_;
    pair_filter_[bit >> 6] |= uint64_t{1} << (bit & 63);
    InsertPair(static_cast<int32_t>(p.key >> 32), static_cast<int32_t>(p.key & 0xffffffffu), p.priority,
               p.merged);
  }
  byte_pairs_.assign(65536, {-1, -1});
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; ++b) {
      const PairSlot* slot =
          byte_ids_[a] < 0 || byte_ids_[b] < 0 ? nullptr : FindPair(byte_ids_[a], byte_ids_[b]);
      if (slot != nullptr) byte_pairs_[a << 8 | b] = {slot->priority, slot->merged};
    }
  }
}

// Index slots keep the high half of the hash, so that most mismatches are rejected without touching
// the token's bytes.
void BpeModel::AddToIndex(int32_t id, const Where& where) {
  std::string_view bytes = tokens_[id];
  if (bytes.empty()) Fail(ErrorCode::kCorruptData, where(id), ": token ", id, " is empty");
  uint64_t h = HashBytes(bytes);
  for (size_t i = h & index_mask_;; i = (i + 1) & index_mask_) {
    auto& slot = index_[i];
    if (slot.second < 0) {
      slot = {static_cast<uint32_t>(h >> 32), id};
      return;
    }
    if (slot.first == static_cast<uint32_t>(h >> 32) && tokens_[slot.second] == bytes) {
      Fail(ErrorCode::kCorruptData, where(id), ": token ", id, " \"", Printable(bytes),
           "\" has the same bytes as token ", slot.second, " (", where(slot.second), ")");
    }
  }
}

int32_t BpeModel::Find(std::string_view bytes) const {
  uint64_t h = HashBytes(bytes);
  for (size_t i = h & index_mask_;; i = (i + 1) & index_mask_) {
    const auto& slot = index_[i];
    if (slot.second < 0) return -1;
    if (slot.first == static_cast<uint32_t>(h >> 32) && tokens_[slot.second] == bytes) return slot.second;
  }
}

void BpeModel::InsertPair(int32_t left, int32_t right, int32_t priority, int32_t merged) {
  uint64_t key = static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32 | static_cast<uint32_t>(right);
  for (size_t i = (key * 0x9e3779b97f4a7c15ull) >> pair_shift_;; i = (i + 1) & pair_mask_) {
    PairSlot& s = pairs_[i];
    if (s.key == kEmptyKey) ++pair_count_;
    if (s.key == kEmptyKey || s.key == key) {
      s = {key, priority, merged};  // a later merge-list duplicate replaces the earlier one
      return;
    }
  }
}

namespace {

// Heap order: the candidate with the smallest key (priority, then byte offset) is on top.
bool Later(const BpeScratch::Candidate& a, const BpeScratch::Candidate& b) {
  return a.key > b.key;
}

void Push(BpeScratch* scratch, int32_t priority, int32_t left, int32_t left_id, int32_t right,
          int32_t right_id, int32_t merged) {
  scratch->heap.push_back({static_cast<uint64_t>(priority) << 32 | static_cast<uint32_t>(left), left_id,
                           right_id, merged, right});
  std::push_heap(scratch->heap.begin(), scratch->heap.end(), Later);
}

}  // namespace

void BpeModel::PushCandidate(const BpeScratch::Symbol* symbols, int32_t left, BpeScratch* scratch) const {
  int32_t right = symbols[left].next;
  const PairSlot* slot = FindPair(symbols[left].id, symbols[right].id);
  if (slot != nullptr)
    Push(scratch, slot->priority, left, symbols[left].id, right, symbols[right].id, slot->merged);
}

// Merging runs over a doubly linked list of symbols indexed by their first byte, with a min-heap of
// candidate merges: O(n log n) for a piece of n bytes, so that even a megabyte-long piece (a line of
// '=' or of emoji) costs little. Candidates are not removed when a merge invalidates them; they are
// recognised as stale when popped.
void BpeModel::EncodePiece(std::string_view piece, std::vector<int32_t>* out, BpeScratch* scratch) const {
  if (piece.size() >= static_cast<size_t>(INT32_MAX))
    Fail(ErrorCode::kInvalidArgument, "a piece of ", piece.size(),
         " bytes is more than BPE offsets can hold");
  const int32_t n = static_cast<int32_t>(piece.size());
  auto byte_id = [&](int32_t i) {
    int32_t id = byte_ids_[static_cast<uint8_t>(piece[i])];
    if (id < 0)
      Fail(ErrorCode::kInvalidArgument, "the vocabulary has no token for byte 0x",
           "0123456789abcdef"[static_cast<uint8_t>(piece[i]) >> 4], "0123456789abcdef"[piece[i] & 15]);
    return id;
  };
  if (n == 1) {
    out->push_back(byte_id(0));
    return;
  }
  if (whole_piece_first_) {  // tiktoken: a piece that is a token is never split
    int32_t id = Find(piece);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  auto& symbols = scratch->symbols;
  auto& heap = scratch->heap;
  symbols.resize(n);
  for (int32_t i = 0; i < n; ++i) symbols[i] = {byte_id(i), i + 1, i - 1};
  heap.clear();
  for (int32_t i = 0; i + 1 < n; ++i) {
    const BytePair& p = byte_pairs_[static_cast<uint8_t>(piece[i]) << 8 | static_cast<uint8_t>(piece[i + 1])];
    if (p.priority >= 0) Push(scratch, p.priority, i, symbols[i].id, i + 1, symbols[i + 1].id, p.merged);
  }
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), Later);
    BpeScratch::Candidate c = heap.back();
    heap.pop_back();
    int32_t left = static_cast<int32_t>(c.key & 0xffffffffu);
    BpeScratch::Symbol& l = symbols[left];
    // Stale candidates (a side already merged elsewhere) are skipped.
    if (l.id != c.left_id || l.next != c.right || symbols[c.right].id != c.right_id) continue;
    // Merge: the left symbol absorbs the right one, then its new neighbours become candidates.
    BpeScratch::Symbol& r = symbols[c.right];
    l.id = c.merged;
    l.next = r.next;
    if (r.next < n) symbols[r.next].prev = left;
    r.id = -1;
    if (l.prev >= 0) PushCandidate(symbols.data(), l.prev, scratch);
    if (l.next < n) PushCandidate(symbols.data(), left, scratch);
  }
  for (int32_t i = 0; i < n; i = symbols[i].next) out->push_back(symbols[i].id);
}

}  // namespace hymt
