// The engine: one thread that owns the model and runs continuous batching.
//
// Callers (the CLI, the translation pipeline, HTTP handlers) submit token-level generation requests
// from any thread; the engine thread admits them into the running batch at step boundaries when their
// KV pages fit, runs one forward step over every running sequence (prompt chunks and single decode
// tokens together), samples, and reports tokens through callbacks. Memory is fixed at construction:
// activations for max_step_tokens rows, KV pages, logits for max_seqs rows.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "model/model.h"
#include "model/sampler.h"
#include "runtime/kv_cache.h"

namespace hymt {

enum class FinishReason { kStop, kLength, kCancelled, kDeadline, kRepetition, kError };
const char* FinishReasonName(FinishReason r);

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated tokens, without the stop token
  FinishReason reason = FinishReason::kStop;
  std::string error;            // set when reason == kError (a failed step, or non-finite logits)
  int32_t prompt_tokens = 0;
  double queue_seconds = 0;     // submitted -> first step
  double first_token_seconds = 0;  // submitted -> first generated token
  double total_seconds = 0;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int32_t max_new_tokens = 256;
  std::vector<int32_t> stop_ids;
  // Stop when the generated tail repeats one pattern (period <= 16 tokens) for at least this many
  // tokens; 0 disables the guard.
  int32_t loop_guard_tokens = 0;
  // Sequences of one client request share a group; admission is round-robin over groups, so a long
  // document does not starve a one-sentence request.
  uint64_t group = 0;
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // Called on the engine thread for each generated token (not for the stop token); return false to
  // stop the sequence (FinishReason::kStop). Must be quick.
  std::function<bool(int32_t)> on_token;
  // Called exactly once on the engine thread when the sequence ends.
  std::function<void(const GenerationResult&)> on_done;
};

// Decode-step CUDA graphs an engine keeps at once (one per batch size, least recently used dropped).
inline constexpr size_t kMaxCudaGraphs = 8;

struct EngineOptions {
  int32_t max_seqs = 32;          // sequences running at once
  int32_t max_step_tokens = 256;  // rows per forward step (prefill chunks plus decode tokens)
  int64_t kv_pages = 0;           // KV pages (the plan's choice)
  int32_t page_size = 16;
  DType kv_dtype = DType::kF32;
  int32_t max_queue = 4096;       // waiting sequences before Submit refuses with kUnavailable
  int32_t max_context = 4096;     // prompt + generated tokens of one sequence
  int32_t n_valid_tokens = 0;     // tokens the tokenizer defines; rows past it are never sampled (0: all)
  // Decode-only steps on one CUDA device (the whole model resident there) replay a captured CUDA graph
  // per batch size instead of launching every kernel from the host.
  bool cuda_graphs = true;
  // Greedy decode-only graph steps launch the next step before this one's tokens reach the host: its
  // token ids go from this step's argmax to its embedding on the device, so the host's work between two
  // steps (reading the tokens, callbacks, staging the next step) overlaps the GPU's. When the next step
  // turns out different (a sequence ended, another arrived, a cancellation), the step launched ahead is
  // discarded and its rows computed again. The environment variable HYMT_LOOKAHEAD=0 turns it off.
  bool cuda_lookahead = true;
};

class LayerStreamer;

// Where each part of the model runs. Every Ops (and the streamer) must outlive the engine.
struct Placement {
  Ops* embed = nullptr;            // embedding lookup (its table is there)
  std::vector<Ops*> layers;        // one per layer
  Ops* head = nullptr;             // final norm and output head
  // The layers it streams take their weights from it, computing on their layers[i] (its device).
  LayerStreamer* streamer = nullptr;
};

struct EngineStats {
  int64_t queued = 0;
  int64_t running = 0;
  int64_t kv_pages_used = 0;
  int64_t kv_pages_total = 0;
  int64_t kv_bytes_total = 0;
  int64_t tokens_generated = 0;    // since start
  int64_t prompt_tokens = 0;       // since start
  int64_t steps = 0;
  int64_t preemptions = 0;
  int64_t graph_replays = 0;       // decode steps that replayed a CUDA graph
  int64_t graph_captures = 0;      // decode steps captured into a new graph
  int64_t lookahead_steps = 0;     // decode steps launched before the previous step's tokens were read
  int64_t lookahead_discarded = 0; // of those, the ones whose batch changed (their rows ran again)
  // Where the engine thread's time goes (since start, nanoseconds): whole steps, issuing the forward
  // pass (host work; on a GPU the kernels run behind it), and token selection (on a GPU this waits for
  // the step's kernels to finish). Steps minus the two is the host's bookkeeping.
  int64_t step_ns = 0;
  int64_t forward_issue_ns = 0;
  int64_t select_ns = 0;
  int64_t graph_launch_ns = 0;  // of forward_issue_ns: replaying graphs from the step data (FastReplay)
  // Device time of the CUDA graphs launched (events around each launch; the latest is not counted yet).
  int64_t graph_device_ns = 0;
  int64_t graph_device_timed = 0;
  double decode_tokens_per_second = 0;  // recent rate (exponential average over steps)
};

class Engine {
 public:
  // Allocates everything up front (throws Error(kResourceExhausted) when it does not fit) and starts
  // the engine thread.
  Engine(std::shared_ptr<const HunyuanModel> model, Placement placement, EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request; returns its id. Throws Error(kInvalidArgument) for an empty or too long prompt,
  // Error(kUnavailable) when the queue is full or the engine is stopping.
  uint64_t Submit(GenerationRequest request);
  // Asks the engine to end a sequence; its pages return at the next step boundary. Unknown ids are
  // ignored (the sequence may have finished already).
  void Cancel(uint64_t id);
  // Submits and waits. Convenience for the CLI and tests.
  GenerationResult Generate(GenerationRequest request);

  EngineStats stats() const;
  const EngineOptions& options() const { return options_; }
  const HunyuanModel& model() const { return *model_; }

  // Stops admitting; lets running and queued work finish for up to `grace`, then cancels the rest and
  // joins the engine thread. Idempotent.
  void Shutdown(std::chrono::milliseconds grace);

 private:
  struct Sequence;
  void Loop();
  void Step();
  void Admit();
  bool EnsurePages(Sequence& s, int64_t n_tokens);
  void Preempt(Sequence& victim);
  void Finish(Sequence& s, FinishReason reason, const std::string& error = "");
  void RunForward(const std::vector<Sequence*>& seqs, const std::vector<int32_t>& rows_per_seq);
  // The step's ops on the placement, from BeginStep to the logits.
  void ForwardOps(const StepBatch& batch, std::span<const int32_t> ids, const std::vector<int32_t>& logit_rows);
  // Runs a decode-only step as a CUDA graph; false when it must run eagerly.
  bool ForwardGraph(const StepBatch& batch, std::span<const int32_t> ids, const std::vector<int32_t>& logit_rows);
  void TransferRows(Ops& from, const Tensor& src, Ops& to, Tensor dst);
  // Lookahead (EngineOptions::cuda_lookahead): launches the step after `plan`'s when nothing can change
  // it but this step's tokens; `ticket` holds those tokens on the device.
  void LaunchAhead(const std::vector<Sequence*>& plan, int ticket, int32_t n_valid);
  // True when the step launched ahead is exactly `plan` (then it has run, or is running, already).
  bool AheadMatches(const std::vector<Sequence*>& plan, const std::vector<int32_t>& rows) const;
  // Waits for a step launched ahead and forgets it (its rows are computed again when needed).
  void DropAhead();

  std::shared_ptr<const HunyuanModel> model_;
  Placement placement_;
  EngineOptions options_;
  std::vector<Ops*> devices_;  // distinct ops in placement
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::map<Ops*, Activations> activations_;
  std::unique_ptr<KvCache> kv_;
  Tensor logits_;                      // [max_seqs, vocab_rows] on the head's device
  std::vector<uint8_t> staging_;       // host staging for cross-device activation copies
  struct Graphs;                       // captured decode steps (engine.cc); null when not used
  std::unique_ptr<Graphs> graphs_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, std::deque<std::unique_ptr<Sequence>>> pending_;  // by group
  std::deque<uint64_t> group_order_;   // round-robin order of groups with pending work
  int64_t n_pending_ = 0;
  std::vector<uint64_t> cancel_requests_;
  bool stopping_ = false;
  bool accepting_ = true;
  uint64_t next_id_ = 1;

  std::vector<std::unique_ptr<Sequence>> running_;  // engine thread only
  std::atomic<int64_t> stat_running_{0}, stat_generated_{0}, stat_prompt_{0}, stat_steps_{0},
      stat_preemptions_{0}, stat_pages_used_{0}, stat_graph_replays_{0}, stat_graph_captures_{0}, stat_lookahead_{0},
      stat_lookahead_discarded_{0}, stat_step_ns_{0},
      stat_forward_ns_{0}, stat_select_ns_{0}, stat_graph_launch_ns_{0};
  std::atomic<double> stat_rate_{0};
  std::thread thread_;
};

// True when the tail of `tokens` is one pattern of period <= 16 repeated over at least `min_tokens`
// tokens (a generation stuck in a loop).
bool LooksLikeLoop(const std::vector<int32_t>& tokens, int32_t min_tokens);

}  // namespace hymt
