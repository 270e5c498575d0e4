// Byte-level byte-pair encoding over token ids: one engine for tiktoken ranks and for HF merge lists.
//
// A piece starts as one token per byte. A pair map (left id, right id) -> (priority, merged id) says
// which adjacent pairs may merge; the pair with the lowest priority merges first, the leftmost on ties,
// until no adjacent pair is in the map.
//   - Ranks (tiktoken): any adjacent pair whose byte concatenation is a token may merge, with
//     priority = the id (rank) of the result; the map is precomputed from every split point of every
//     token. A piece that is itself a token is taken whole, as tiktoken does.
//   - Merge list (HF BPE, GGUF): priority = index in the list (a later duplicate replaces an earlier
//     one, as HF does); a piece is taken whole first only with HF's `ignore_merges`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hymt {

// Scratch memory for BpeModel::EncodePiece, reused between calls (one per thread).
struct BpeScratch {
  struct Symbol {
    int32_t id;    // token id, -1 once merged into its left neighbour
    int32_t next;  // byte offset of the next symbol (piece size at the end)
    int32_t prev;  // byte offset of the previous symbol (-1 at the start)
  };
  struct Candidate {
    uint64_t key;  // priority << 32 | byte offset of the left symbol: smaller merges first
    int32_t left_id, right_id, merged, right;
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

// The longest ordinary token a rank vocabulary (kRanks) may hold. Indexing its merges costs the square
// of each token's length, so one huge token would stall loading for hours; real vocabularies stay far
// below (Hunyuan's longest token is 128 bytes).
inline constexpr size_t kMaxRankTokenBytes = 1024;

class BpeModel {
 public:
  enum class Rule { kRanks, kMergeList };

  // Describes where token `id` came from ("line 12", "model.vocab entry \"ab\""), for error messages.
  using Where = std::function<std::string(int32_t id)>;

  // Builds the model. tokens[id] holds the bytes of every id; only ids with ordinary[id] take part in
  // BPE (added and special tokens do not). For kMergeList, `merges` lists byte-string pairs in priority
  // order. Throws Error(kCorruptData) naming `where(id)` or the merge index when two ordinary tokens have
  // the same bytes, a token is empty, a merge names bytes that are not a token, or (kRanks) a token is
  // longer than kMaxRankTokenBytes.
  BpeModel(std::vector<std::string> tokens, const std::vector<bool>& ordinary, Rule rule,
           const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
           const Where& where);

  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Appends the ids of `piece` (non-empty) to *out. Throws Error(kInvalidArgument) when a byte of the
  // piece has no single-byte token (only possible for vocabularies that lack some of the 256 bytes).
  void EncodePiece(std::string_view piece, std::vector<int32_t>* out, BpeScratch* scratch) const;

  // The ordinary token whose bytes are exactly `bytes`, or -1.
  int32_t Find(std::string_view bytes) const;

  int32_t n_tokens() const { return static_cast<int32_t>(tokens_.size()); }
  const std::string& token(int32_t id) const { return tokens_[id]; }
  size_t n_pairs() const { return pair_count_; }

 private:
  struct PairSlot {
    uint64_t key;  // left << 32 | right; kEmptyKey when free
    int32_t priority;
    int32_t merged;
  };
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};

  void AddToIndex(int32_t id, const Where& where);
  void InsertPair(int32_t left, int32_t right, int32_t priority, int32_t merged);
  const PairSlot* FindPair(int32_t left, int32_t right) const {
    uint64_t key = static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32 | static_cast<uint32_t>(right);
    uint64_t h = key * 0x9e3779b97f4a7c15ull;
    size_t bit = (h >> kFilterShift) & filter_mask_;
    if (!(pair_filter_[bit >> 6] >> (bit & 63) & 1)) return nullptr;
    for (size_t i = h >> pair_shift_;; i = (i + 1) & pair_mask_) {
      const PairSlot& s = pairs_[i];
      if (s.key == key) return &s;
      if (s.key == kEmptyKey) return nullptr;
    }
  }
  // Queues the merge of the symbol at byte offset `left` with the next one, if that pair may merge.
  void PushCandidate(const BpeScratch::Symbol* symbols, int32_t left, BpeScratch* scratch) const;

  std::vector<std::string> tokens_;  // [n_tokens] bytes of each id
  bool whole_piece_first_;
  int32_t byte_ids_[256];  // single-byte token of each byte value, -1 when missing

  // Open-addressing index of the ordinary tokens by their bytes: {hash, id} slots, id -1 when free.
  std::vector<std::pair<uint32_t, int32_t>> index_;
  size_t index_mask_ = 0;

  std::vector<PairSlot> pairs_;  // open addressing, power-of-two size
  // One bit per hash value (bits 20.. of the pair hash) of every pair: most pairs looked up during a
  // merge are not in the map, and this small table (16 bits per pair) answers those without touching
  // the large one.
  static constexpr int kFilterShift = 20;
  static constexpr size_t kFilterBitsPerPair = 16;
  std::vector<uint64_t> pair_filter_;
  size_t filter_mask_ = 0;
  // The pairs of two single-byte tokens by (first byte << 8 | second byte), priority -1 when they do
  // not merge: a piece's first lookups, from a table small enough to stay in cache.
  struct BytePair {
    int32_t priority;
    int32_t merged;
  };
  std::vector<BytePair> byte_pairs_;  // [65536]
  size_t pair_mask_ = 0;
  int pair_shift_ = 64;
  size_t pair_count_ = 0;
};

// A fast 64-bit hash of a short byte string (used by the token index and the piece cache).
uint64_t HashBytes(std::string_view s);

}  // namespace hymt
