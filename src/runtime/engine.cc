#include "runtime/engine.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <future>
#include <optional>
#include <set>

#include "core/half.h"
#include "core/logging.h"
#include "core/status.h"
#include "runtime/streamer.h"

#ifdef HYMT_HAVE_CUDA
#include "backends/cuda/cuda_ops.h"
#endif

namespace hymt {

// Decode steps replayed as CUDA graphs, one per batch size. A graph holds the step's kernels with their
// pointers and shapes; a step replays it when every op's arguments match the capture (CudaOps compares
// them), otherwise the step is captured again. Page tables are padded to kGraphPageQuantum pages per
// sequence (with the sequence's last page; attention reads only the pages its context covers) so that a
// growing context keeps the graph's shapes for 1,024 tokens at a time.
// Each instantiated graph holds device memory (a few MiB for the 7B's ~650 kernels), so at most
// kMaxCudaGraphs are kept, the least recently used going first; the planner reserves kGpuGraphBytes for them.
struct Engine::Graphs {
#ifdef HYMT_HAVE_CUDA
  struct Entry {
    std::unique_ptr<CudaGraph> graph;
    uint64_t last_use = 0;
  };
  CudaOps* cuda = nullptr;
  std::map<int32_t, Entry> by_batch;
  uint64_t clock = 0;
  // A decode step launched before the previous one's tokens were read (Engine::LaunchAhead).
  struct Ahead {
    std::vector<uint64_t> seqs;     // its sequences, in the step's order
    std::vector<int32_t> n_cached;  // each one's cached tokens when it runs (the fed token's position)
    int ticket = -1;                // its greedy ids (CudaOps::LaunchGreedy)
  };
  std::optional<Ahead> ahead;
#endif
  static constexpr int32_t kGraphPageQuantum = 64;
  // The first `pages_needed` pages of `pages`, padded with the last one to a multiple of the quantum.
  static void PadTable(const std::vector<int32_t>& pages, int64_t pages_needed, std::vector<int32_t>& out) {
    out.assign(pages.begin(), pages.begin() + pages_needed);
    out.resize(static_cast<size_t>((pages_needed + kGraphPageQuantum - 1) / kGraphPageQuantum * kGraphPageQuantum),
               out.back());
  }
};

using Clock = std::chrono::steady_clock;

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kDeadline: return "deadline";
    case FinishReason::kRepetition: return "repetition";
    case FinishReason::kError: return "error";
  }
  return "?";
}

bool LooksLikeLoop(const std::vector<int32_t>& tokens, int32_t min_tokens) {
  if (min_tokens <= 0 || static_cast<int32_t>(tokens.size()) < min_tokens) return false;
  const size_t n = tokens.size();
  for (size_t period = 1; period <= 16 && period * 2 <= static_cast<size_t>(min_tokens); ++period) {
    bool repeats = true;
    for (size_t i = n - static_cast<size_t>(min_tokens); i + period < n; ++i) {
      if (tokens[i] != tokens[i + period]) {
        repeats = false;
        break;
      }
    }
    if (repeats) return true;
  }
  return false;
}

struct Engine::Sequence {
  uint64_t id = 0;
  GenerationRequest req;
  std::vector<int32_t> tokens;     // prompt, then generated tokens
  int32_t n_prompt = 0;
  int32_t n_cached = 0;            // leading tokens whose keys/values are in the cache
  std::vector<int32_t> pages;      // page table
  std::vector<int32_t> generated;
  std::unique_ptr<Sampler> sampler;
  Clock::time_point submitted, started, first_token;
  bool has_started = false, has_token = false;
};

Engine::Engine(std::shared_ptr<const HunyuanModel> model, Placement placement, EngineOptions options)
    : model_(std::move(model)), placement_(std::move(placement)), options_(options) {
  const ModelConfig& c = model_->config();
  HYMT_CHECK(placement_.embed && placement_.head && static_cast<int>(placement_.layers.size()) == c.n_layers);
  HYMT_CHECK(options_.max_seqs > 0 && options_.max_step_tokens > 0 && options_.page_size > 0);
  // Logit rows are gathered into the activation buffers, so a step must have room for every sequence.
  options_.max_step_tokens = std::max(options_.max_step_tokens, options_.max_seqs);
  if (options_.kv_pages <= 0) Fail(ErrorCode::kInvalidArgument, "the KV cache needs at least one page");

  std::set<Ops*> seen;
  auto add_device = [&](Ops* o) {
    if (seen.insert(o).second) devices_.push_back(o);
  };
  add_device(placement_.embed);
  for (Ops* o : placement_.layers) add_device(o);
  add_device(placement_.head);

  for (Ops* o : devices_) {
    size_t bytes = Activations::Bytes(c, options_.max_step_tokens, o->activation_dtype());
    auto buf = o->Allocate(bytes, "activations");
    activations_[o] = Activations::Carve(c, options_.max_step_tokens, o->activation_dtype(), o->device(), buf->data());
    buffers_.push_back(std::move(buf));
  }
  kv_ = std::make_unique<KvCache>(c, options_.kv_pages, options_.page_size, options_.kv_dtype, placement_.layers);

  const int64_t vocab = model_->weights().head().rows;
  const DType logit_dtype = placement_.head->activation_dtype();
  auto logit_buf = placement_.head->Allocate(DTypeBytes(logit_dtype, vocab * options_.max_seqs), "logits");
  logits_.data = logit_buf->data();
  logits_.dtype = logit_dtype;
  logits_.rows = options_.max_seqs;
  logits_.cols = vocab;
  logits_.stride = vocab;
  logits_.device = placement_.head->device();
  buffers_.push_back(std::move(logit_buf));
  staging_.resize(static_cast<size_t>(options_.max_step_tokens) * c.hidden * 4 * 2);
#ifdef HYMT_HAVE_CUDA
  if (options_.cuda_graphs && devices_.size() == 1 && placement_.streamer == nullptr) {
    if (auto* cuda = dynamic_cast<CudaOps*>(devices_[0])) {
      graphs_ = std::make_unique<Graphs>();
      graphs_->cuda = cuda;
    }
  }
  if (const char* env = std::getenv("HYMT_LOOKAHEAD"); env != nullptr && std::string(env) == "0")
    options_.cuda_lookahead = false;
#endif

  thread_ = std::thread([this] { Loop(); });
}

Engine::~Engine() { Shutdown(std::chrono::milliseconds(0)); }

uint64_t Engine::Submit(GenerationRequest request) {
  if (request.prompt.empty()) Fail(ErrorCode::kInvalidArgument, "empty prompt");
  const int64_t n = static_cast<int64_t>(request.prompt.size());
  if (n >= options_.max_context)
    Fail(ErrorCode::kInvalidArgument, "prompt of ", n, " tokens does not fit the context limit of ",
         options_.max_context, " tokens");
  if (kv_->pages().PagesFor(n + 1) > kv_->pages().total())
    Fail(ErrorCode::kInvalidArgument, "prompt of ", n, " tokens exceeds the KV cache (",
         kv_->pages().total() * options_.page_size, " tokens)");
  const int32_t vocab = static_cast<int32_t>(model_->weights().head().rows);
  for (int32_t id : request.prompt)
    if (id < 0 || id >= vocab) Fail(ErrorCode::kInvalidArgument, "token id ", id, " outside the vocabulary");
  if (request.max_new_tokens < 1) request.max_new_tokens = 1;

  auto seq = std::make_unique<Sequence>();
  seq->tokens = request.prompt;
  seq->n_prompt = static_cast<int32_t>(n);
  seq->sampler = std::make_unique<Sampler>(request.sampling);
  seq->submitted = Clock::now();
  seq->req = std::move(request);
  std::lock_guard<std::mutex> lock(mu_);
  if (!accepting_) Fail(ErrorCode::kUnavailable, "the engine is shutting down");
  if (n_pending_ >= options_.max_queue)
    Fail(ErrorCode::kUnavailable, "the queue is full (", options_.max_queue, " waiting sequences)");
  seq->id = next_id_++;
  uint64_t id = seq->id;
  uint64_t group = seq->req.group;
  auto& q = pending_[group];
  if (q.empty()) group_order_.push_back(group);
  q.push_back(std::move(seq));
  ++n_pending_;
  cv_.notify_one();
  return id;
}

void Engine::Cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  cancel_requests_.push_back(id);
  cv_.notify_one();
}

GenerationResult Engine::Generate(GenerationRequest request) {
  auto promise = std::make_shared<std::promise<GenerationResult>>();
  auto future = promise->get_future();
  auto user_done = std::move(request.on_done);
  request.on_done = [promise, user_done](const GenerationResult& r) {
    if (user_done) user_done(r);
    promise->set_value(r);
  };
  Submit(std::move(request));
  return future.get();
}

EngineStats Engine::stats() const {
  EngineStats s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.queued = n_pending_;
  }
  s.running = stat_running_.load();
  s.kv_pages_used = stat_pages_used_.load();
  s.kv_pages_total = kv_->pages().total();
  s.kv_bytes_total = static_cast<int64_t>(kv_->bytes());
  s.tokens_generated = stat_generated_.load();
  s.prompt_tokens = stat_prompt_.load();
  s.steps = stat_steps_.load();
  s.preemptions = stat_preemptions_.load();
  s.graph_replays = stat_graph_replays_.load();
  s.graph_captures = stat_graph_captures_.load();
  s.lookahead_steps = stat_lookahead_.load();
  s.lookahead_discarded = stat_lookahead_discarded_.load();
  s.step_ns = stat_step_ns_.load();
  s.forward_issue_ns = stat_forward_ns_.load();
  s.select_ns = stat_select_ns_.load();
  s.graph_launch_ns = stat_graph_launch_ns_.load();
#ifdef HYMT_HAVE_CUDA
  if (graphs_ != nullptr) {
    const CudaOps::GraphTiming t = graphs_->cuda->graph_timing();
    s.graph_device_ns = t.device_ns;
    s.graph_device_timed = t.launches;
  }
#endif
  s.decode_tokens_per_second = stat_rate_.load();
  return s;
}

void Engine::Shutdown(std::chrono::milliseconds grace) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!thread_.joinable()) return;
    accepting_ = false;
    cv_.wait_for(lock, grace, [&] { return n_pending_ == 0 && stat_running_.load() == 0; });
    stopping_ = true;
    cv_.notify_all();
  }
  thread_.join();
}

void Engine::Loop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || n_pending_ > 0 || !running_.empty() || !cancel_requests_.empty(); });
      if (stopping_) break;
    }
    try {
      Step();
    } catch (const std::exception& e) {
      // A failed step (a device error, an allocation the plan should have prevented) ends the sequences
      // in it; the engine itself stays up for the next requests.
      HYMT_LOG_ERROR("engine step failed: ", e.what());
      try {
        DropAhead();
      } catch (const std::exception& drop) {
        HYMT_LOG_ERROR("engine: a step launched ahead failed too: ", drop.what());
      }
      while (!running_.empty()) Finish(*running_.front(), FinishReason::kError, e.what());
    }
  }
  try {
    DropAhead();
  } catch (const std::exception& e) {
    HYMT_LOG_ERROR("engine: a step launched ahead failed: ", e.what());
  }
  // Cancel whatever is left.
  while (!running_.empty()) Finish(*running_.front(), FinishReason::kCancelled);
  std::vector<std::unique_ptr<Sequence>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [group, q] : pending_)
      for (auto& s : q) left.push_back(std::move(s));
    pending_.clear();
    group_order_.clear();
    n_pending_ = 0;
  }
  for (auto& s : left) {
    running_.push_back(std::move(s));
    Finish(*running_.back(), FinishReason::kCancelled);
  }
}

void Engine::Finish(Sequence& s, FinishReason reason, const std::string& error) {
  kv_->pages().Release(s.pages);
  stat_pages_used_.store(kv_->pages().used());
  GenerationResult r;
  r.tokens = std::move(s.generated);
  r.reason = reason;
  r.error = error;
  r.prompt_tokens = s.n_prompt;
  auto now = Clock::now();
  auto secs = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  r.queue_seconds = s.has_started ? secs(s.started - s.submitted) : secs(now - s.submitted);
  r.first_token_seconds = s.has_token ? secs(s.first_token - s.submitted) : 0;
  r.total_seconds = secs(now - s.submitted);
  auto done = std::move(s.req.on_done);
  auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == &s; });
  std::unique_ptr<Sequence> owned;
  if (it != running_.end()) {
    owned = std::move(*it);
    running_.erase(it);
  }
  stat_running_.store(static_cast<int64_t>(running_.size()));
  if (running_.empty()) {
    // Shutdown may be waiting for the work to drain; taking the lock orders this wake-up after its
    // check of the counters.
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_.notify_all();
  }
  if (done) {
    try {
      done(r);
    } catch (const std::exception& e) {
      HYMT_LOG_ERROR("a completion callback threw: ", e.what());
    }
  }
}

void Engine::Admit() {
  std::lock_guard<std::mutex> lock(mu_);
  PagePool& pool = kv_->pages();
  while (static_cast<int32_t>(running_.size()) < options_.max_seqs && !group_order_.empty()) {
    uint64_t group = group_order_.front();
    auto& q = pending_[group];
    Sequence& next = *q.front();
    if (pool.PagesFor(static_cast<int64_t>(next.tokens.size()) + 1) > pool.total()) {
      // A preempted sequence that grew past the whole cache can never run again: end it here.
      std::unique_ptr<Sequence> s = std::move(q.front());
      q.pop_front();
      --n_pending_;
      group_order_.pop_front();
      if (q.empty()) {
        pending_.erase(group);
      } else {
        group_order_.push_back(group);
      }
      running_.push_back(std::move(s));
      mu_.unlock();
      Finish(*running_.back(), FinishReason::kLength);
      mu_.lock();
      continue;
    }
    // Admit only when the whole prompt fits next to one spare page per running sequence (their next
    // decode tokens); otherwise wait for pages to come back.
    int64_t need = pool.PagesFor(static_cast<int64_t>(next.tokens.size()) + 1) + static_cast<int64_t>(running_.size());
    if (need > pool.free()) break;
    running_.push_back(std::move(q.front()));
    q.pop_front();
    --n_pending_;
    group_order_.pop_front();
    if (q.empty()) {
      pending_.erase(group);
    } else {
      group_order_.push_back(group);  // round-robin between groups
    }
  }
  stat_running_.store(static_cast<int64_t>(running_.size()));
}

void Engine::Preempt(Sequence& victim) {
  // Recompute-style preemption: drop its cache and queue it again at the front; its tokens so far
  // (prompt and generated) are fed again as a prompt when it is readmitted.
  kv_->pages().Release(victim.pages);
  victim.n_cached = 0;
  auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == &victim; });
  HYMT_CHECK(it != running_.end());
  std::unique_ptr<Sequence> owned = std::move(*it);
  running_.erase(it);
  stat_preemptions_.fetch_add(1);
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t group = owned->req.group;
  auto& q = pending_[group];
  if (q.empty()) group_order_.push_front(group);
  q.push_front(std::move(owned));
  ++n_pending_;
}

void Engine::Step() {
  const auto t_begin = Clock::now();
  // Cancellations and deadlines take effect at the step boundary.
  std::vector<uint64_t> cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels.swap(cancel_requests_);
  }
  if (!cancels.empty()) {
    std::set<uint64_t> ids(cancels.begin(), cancels.end());
    std::vector<std::unique_ptr<Sequence>> dropped;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto git = pending_.begin(); git != pending_.end();) {
        auto& q = git->second;
        for (auto it = q.begin(); it != q.end();) {
          if (ids.count((*it)->id)) {
            dropped.push_back(std::move(*it));
            it = q.erase(it);
            --n_pending_;
          } else {
            ++it;
          }
        }
        if (q.empty()) {
          group_order_.erase(std::remove(group_order_.begin(), group_order_.end(), git->first), group_order_.end());
          git = pending_.erase(git);
        } else {
          ++git;
        }
      }
    }
    for (auto& s : dropped) {
      running_.push_back(std::move(s));
      Finish(*running_.back(), FinishReason::kCancelled);
    }
    for (size_t i = 0; i < running_.size();) {
      if (ids.count(running_[i]->id)) {
        Finish(*running_[i], FinishReason::kCancelled);
      } else {
        ++i;
      }
    }
  }
  const auto now = Clock::now();
  for (size_t i = 0; i < running_.size();) {
    if (running_[i]->req.deadline && now > *running_[i]->req.deadline) {
      Finish(*running_[i], FinishReason::kDeadline);
    } else {
      ++i;
    }
  }

  Admit();
  if (running_.empty()) {
    DropAhead();
    return;
  }

  // Plan the step: every decoding sequence gets one row (oldest first), then prompt chunks fill the
  // rest of the row budget. A decode that needs a page nobody has preempts the newest sequence.
  PagePool& pool = kv_->pages();
  std::vector<Sequence*> plan;
  std::vector<int32_t> rows;
  int32_t budget = options_.max_step_tokens;
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* s = running_[i].get();
    if (static_cast<int64_t>(s->tokens.size()) - s->n_cached != 1) continue;
    bool ok = pool.Reserve(s->pages, s->n_cached + 1);
    while (!ok && running_.back().get() != s) {
      Sequence* victim = running_.back().get();
      auto planned = std::find(plan.begin(), plan.end(), victim);
      if (planned != plan.end()) {
        rows.erase(rows.begin() + (planned - plan.begin()));
        plan.erase(planned);
        ++budget;
      }
      Preempt(*victim);
      ok = pool.Reserve(s->pages, s->n_cached + 1);
    }
    if (!ok) {
      Preempt(*s);
      break;
    }
    plan.push_back(s);
    rows.push_back(1);
    --budget;
  }
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* s = running_[i].get();
    int64_t remaining = static_cast<int64_t>(s->tokens.size()) - s->n_cached;
    if (remaining <= 1 && std::find(plan.begin(), plan.end(), s) != plan.end()) continue;
    if (remaining <= 0) continue;
    int64_t chunk = std::min<int64_t>(remaining, budget);
    // Take as much of the chunk as free pages allow; the rest waits for the next step.
    int64_t fits = (static_cast<int64_t>(s->pages.size()) + pool.free()) * pool.page_size() - s->n_cached;
    chunk = std::min(chunk, fits);
    if (chunk <= 0) continue;
    HYMT_CHECK(pool.Reserve(s->pages, s->n_cached + chunk));
    plan.push_back(s);
    rows.push_back(static_cast<int32_t>(chunk));
    budget -= static_cast<int32_t>(chunk);
  }
  stat_pages_used_.store(pool.used());
  if (plan.empty()) {
    DropAhead();
    return;
  }

  const auto t0 = Clock::now();
  // A step launched ahead by the previous one is this step when nothing changed since; otherwise it is
  // waited for and forgotten, and this step runs as planned.
  [[maybe_unused]] int ticket = -1;  // greedy ids still on the device (CudaOps::LaunchGreedy)
  if (AheadMatches(plan, rows)) {
#ifdef HYMT_HAVE_CUDA
    ticket = graphs_->ahead->ticket;
    graphs_->ahead.reset();
#endif
  } else {
    DropAhead();
    RunForward(plan, rows);
  }
  const auto t_issued = Clock::now();
  stat_steps_.fetch_add(1);

  // Sample for the sequences whose fed tokens reached their end, on the head's device (only ids come
  // back to the host).
  const int64_t vocab = logits_.cols;
  const int32_t n_valid = options_.n_valid_tokens > 0 ? std::min<int32_t>(options_.n_valid_tokens, vocab)
                                                       : static_cast<int32_t>(vocab);
  std::vector<Sequence*> sampling;
  std::vector<SampleSpec> specs;
  for (size_t i = 0; i < plan.size(); ++i) {
    Sequence& s = *plan[i];
    if (!s.has_started) {
      s.has_started = true;
      s.started = t0;
    }
    s.n_cached += rows[i];
    if (s.n_cached != static_cast<int32_t>(s.tokens.size())) continue;
    sampling.push_back(&s);
    specs.push_back(s.sampler->NextSpec(s.tokens));
  }
  std::vector<int32_t> next(sampling.size());
  const auto t_select = Clock::now();
#ifdef HYMT_HAVE_CUDA
  // Greedy rows on a graphed device: the argmax starts without waiting, so that the next step can be
  // launched on its ids before they reach the host.
  if (ticket < 0 && graphs_ != nullptr && options_.cuda_lookahead && !sampling.empty() &&
      (logits_.dtype == DType::kBF16 || logits_.dtype == DType::kF32) &&
      std::all_of(specs.begin(), specs.end(), [](const SampleSpec& sp) {
        return sp.temperature <= 0 && (sp.repetition_penalty == 1.0f || sp.history.empty());
      }))
    ticket = graphs_->cuda->LaunchGreedy(logits_.Rows(0, static_cast<int64_t>(sampling.size())), n_valid);
  if (ticket >= 0) {
    try {
      if (sampling.size() == plan.size()) LaunchAhead(plan, ticket, n_valid);
    } catch (...) {
      graphs_->cuda->CollectGreedy(ticket, next);  // the ticket is not left outstanding
      throw;
    }
    graphs_->cuda->CollectGreedy(ticket, next);
  } else
#endif
  if (!sampling.empty()) {
    placement_.head->SampleTokens(logits_.Rows(0, static_cast<int64_t>(sampling.size())), specs, n_valid, next);
  }
  const auto t_selected = Clock::now();
  auto ns = [](Clock::duration d) { return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(); };
  stat_forward_ns_.fetch_add(ns(t_issued - t0));
  stat_select_ns_.fetch_add(ns(t_selected - t_select));
  const int64_t sampled = static_cast<int64_t>(sampling.size());
  std::vector<std::pair<Sequence*, FinishReason>> finished;
  std::vector<Sequence*> failed;
  for (size_t i = 0; i < sampling.size(); ++i) {
    Sequence& s = *sampling[i];
    const int32_t token = next[i];
    if (token == kNonFiniteLogits) {
      // Damaged weights (NaN or inf) poison the logits: the sequence ends with an error rather than
      // an arbitrary token.
      failed.push_back(&s);
      continue;
    }
    if (std::find(s.req.stop_ids.begin(), s.req.stop_ids.end(), token) != s.req.stop_ids.end()) {
      finished.emplace_back(&s, FinishReason::kStop);
      continue;
    }
    s.tokens.push_back(token);
    s.generated.push_back(token);
    if (!s.has_token) {
      s.has_token = true;
      s.first_token = Clock::now();
    }
    stat_generated_.fetch_add(1);
    bool keep_going = true;
    if (s.req.on_token) keep_going = s.req.on_token(token);
    if (!keep_going) {
      finished.emplace_back(&s, FinishReason::kStop);
    } else if (static_cast<int32_t>(s.generated.size()) >= s.req.max_new_tokens ||
               static_cast<int32_t>(s.tokens.size()) >= options_.max_context) {
      finished.emplace_back(&s, FinishReason::kLength);
    } else if (LooksLikeLoop(s.generated, s.req.loop_guard_tokens)) {
      finished.emplace_back(&s, FinishReason::kRepetition);
    }
  }
  // Counted before the callbacks of finished sequences run, so a caller woken by them sees this step.
  stat_step_ns_.fetch_add(ns(Clock::now() - t_begin));
  for (auto& [s, reason] : finished) Finish(*s, reason);
  for (Sequence* s : failed)
    Finish(*s, FinishReason::kError,
           "the model produced non-finite logits (NaN or inf); its weights may be damaged");
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (secs > 0 && sampled > 0) {
    double rate = static_cast<double>(sampled) / secs;
    double prev = stat_rate_.load();
    stat_rate_.store(prev == 0 ? rate : 0.8 * prev + 0.2 * rate);
  }
  stat_pages_used_.store(pool.used());
}

void Engine::LaunchAhead(const std::vector<Sequence*>& plan, int ticket, int32_t n_valid) {
#ifdef HYMT_HAVE_CUDA
  // Only when the next step's batch is already known: every running sequence decodes in this step,
  // and nothing waits to be admitted or cancelled.
  if (graphs_ == nullptr || !options_.cuda_lookahead || plan.size() != running_.size()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (n_pending_ > 0 || !cancel_requests_.empty()) return;
  }
  const int32_t key = static_cast<int32_t>(plan.size());
  auto it = graphs_->by_batch.find(key);
  if (it == graphs_->by_batch.end()) return;
  PagePool& pool = kv_->pages();
  for (const Sequence* s : plan) {
    // This step's token is s->tokens.size(); a sequence whose length ends it with that token is done.
    if (s->n_cached != static_cast<int32_t>(s->tokens.size()) ||
        static_cast<int32_t>(s->generated.size()) + 1 >= s->req.max_new_tokens ||
        static_cast<int32_t>(s->tokens.size()) + 1 >= options_.max_context)
      return;
  }
  for (Sequence* s : plan)
    if (!pool.Reserve(s->pages, s->n_cached + 2)) return;  // pages are reserved, never preempted, here
  StepBatch batch;
  batch.page_size = options_.page_size;
  std::vector<int32_t> ids, logit_rows, padded;
  Graphs::Ahead ahead;
  for (const Sequence* s : plan) {
    Graphs::PadTable(s->pages, pool.PagesFor(s->n_cached + 1), padded);
    logit_rows.push_back(batch.n_rows());
    batch.AddSeq(1, s->n_cached, padded);
    ids.push_back(s->tokens.back());  // a valid id in the right place; the device writes the real one
    ahead.seqs.push_back(s->id);
    ahead.n_cached.push_back(s->n_cached);
  }
  CudaOps& cuda = *graphs_->cuda;
  const std::span<const int32_t> args[] = {ids, logit_rows};
  const auto t_fast = Clock::now();
  if (!cuda.FastReplay(*it->second.graph, batch, args, ticket)) return;
  it->second.last_use = ++graphs_->clock;
  ahead.ticket = cuda.LaunchGreedy(logits_.Rows(0, key), n_valid);
  graphs_->ahead = std::move(ahead);
  stat_graph_launch_ns_.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t_fast).count());
  stat_graph_replays_.fetch_add(1);
  stat_lookahead_.fetch_add(1);
#else
  (void)plan;
  (void)ticket;
  (void)n_valid;
#endif
}

bool Engine::AheadMatches(const std::vector<Sequence*>& plan, const std::vector<int32_t>& rows) const {
#ifdef HYMT_HAVE_CUDA
  if (graphs_ == nullptr || !graphs_->ahead) return false;
  const Graphs::Ahead& a = *graphs_->ahead;
  if (a.seqs.size() != plan.size()) return false;
  for (size_t i = 0; i < plan.size(); ++i) {
    const Sequence& s = *plan[i];
    // The fed token is the one the host appended last (the same argmax result).
    if (s.id != a.seqs[i] || rows[i] != 1 || s.n_cached != a.n_cached[i] ||
        static_cast<int32_t>(s.tokens.size()) != s.n_cached + 1)
      return false;
  }
  return true;
#else
  (void)plan;
  (void)rows;
  return false;
#endif
}

void Engine::DropAhead() {
#ifdef HYMT_HAVE_CUDA
  if (graphs_ == nullptr || !graphs_->ahead) return;
  const Graphs::Ahead a = std::move(*graphs_->ahead);
  graphs_->ahead.reset();
  std::vector<int32_t> unused(a.seqs.size());
  stat_lookahead_discarded_.fetch_add(1);
  graphs_->cuda->CollectGreedy(a.ticket, unused);
#endif
}

void Engine::TransferRows(Ops& from, const Tensor& src, Ops& to, Tensor dst) {
  const size_t n = static_cast<size_t>(src.rows * src.cols);
  HYMT_CHECK(staging_.size() >= n * 4 + n * 4);
  uint8_t* a = staging_.data();
  uint8_t* b = staging_.data() + n * 4;
  from.CopyToHost(src, a);
  if (src.dtype == dst.dtype) {
    to.CopyFromHost(a, dst);
    return;
  }
  // Convert between the two devices' activation types through f32.
  std::vector<float> f(n);
  if (src.dtype == DType::kF32) {
    std::memcpy(f.data(), a, n * 4);
  } else {
    HYMT_CHECK(src.dtype == DType::kBF16);
    const uint16_t* s = reinterpret_cast<const uint16_t*>(a);
    for (size_t i = 0; i < n; ++i) f[i] = Bf16ToF32(s[i]);
  }
  if (dst.dtype == DType::kF32) {
    std::memcpy(b, f.data(), n * 4);
  } else {
    HYMT_CHECK(dst.dtype == DType::kBF16);
    uint16_t* d = reinterpret_cast<uint16_t*>(b);
    for (size_t i = 0; i < n; ++i) d[i] = F32ToBf16(f[i]);
  }
  to.CopyFromHost(b, dst);
}

void Engine::RunForward(const std::vector<Sequence*>& seqs, const std::vector<int32_t>& rows_per_seq) {
  const bool decode_only =
      std::all_of(rows_per_seq.begin(), rows_per_seq.end(), [](int32_t n) { return n == 1; });
  const bool graph = graphs_ != nullptr && decode_only;
  StepBatch batch;
  batch.page_size = options_.page_size;
  std::vector<int32_t> ids;
  std::vector<int32_t> logit_rows;
  std::vector<int32_t> padded;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& s = *seqs[i];
    const int32_t n = rows_per_seq[i];
    int32_t first_row = batch.n_rows();
    int64_t pages_needed = kv_->pages().PagesFor(s.n_cached + n);
    std::span<const int32_t> table(s.pages.data(), static_cast<size_t>(pages_needed));
    if (graph) {
      Graphs::PadTable(s.pages, pages_needed, padded);
      table = padded;
    }
    batch.AddSeq(n, s.n_cached, table);
    ids.insert(ids.end(), s.tokens.begin() + s.n_cached, s.tokens.begin() + s.n_cached + n);
    if (s.n_cached + n == static_cast<int32_t>(s.tokens.size())) logit_rows.push_back(first_row + n - 1);
    if (s.n_cached == 0) stat_prompt_.fetch_add(n);
  }
  if (graph && !logit_rows.empty() && ForwardGraph(batch, ids, logit_rows)) return;
  ForwardOps(batch, ids, logit_rows);
}

bool Engine::ForwardGraph(const StepBatch& batch, std::span<const int32_t> ids,
                          const std::vector<int32_t>& logit_rows) {
#ifdef HYMT_HAVE_CUDA
  CudaOps& cuda = *graphs_->cuda;
  const int32_t key = static_cast<int32_t>(batch.seqs.size());
  auto it = graphs_->by_batch.find(key);
  if (it != graphs_->by_batch.end()) {
    it->second.last_use = ++graphs_->clock;
    // After one replay through the ops, the graph replays from the step's host data alone: the batch,
    // the token ids (Embed) and the rows whose logits are wanted (GatherRows), which is all the ops
    // stage (ForwardOps); about 1.5 ms less host work per 7B step.
    const std::span<const int32_t> args[] = {ids, logit_rows};
    const auto t_fast = std::chrono::steady_clock::now();
    if (cuda.FastReplay(*it->second.graph, batch, args)) {
      stat_graph_launch_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now() - t_fast)
                                          .count());
      stat_graph_replays_.fetch_add(1);
      return true;
    }
    cuda.BeginReplay(*it->second.graph);
    try {
      ForwardOps(batch, ids, logit_rows);
    } catch (...) {
      cuda.EndReplay();  // back to eager mode before the error ends the step
      throw;
    }
    const auto t_launch = std::chrono::steady_clock::now();
    if (cuda.EndReplay()) {
      stat_graph_launch_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now() - t_launch)
                                          .count());
      stat_graph_replays_.fetch_add(1);
      return true;
    }
    graphs_->by_batch.erase(it);  // the shapes moved on (another page-table quantum): capture again
  }
  if (graphs_->by_batch.size() >= kMaxCudaGraphs) {
    auto oldest = std::min_element(graphs_->by_batch.begin(), graphs_->by_batch.end(),
                                   [](const auto& a, const auto& b) { return a.second.last_use < b.second.last_use; });
    graphs_->by_batch.erase(oldest);  // its memory returns once its last launch has finished
  }
  cuda.BeginCapture();
  std::unique_ptr<CudaGraph> g;
  try {
    ForwardOps(batch, ids, logit_rows);
    g = cuda.EndCapture();  // launches the captured step once
  } catch (const std::exception& e) {
    // A capture that fails (an op that cannot be captured, a driver refusal) turns graphs off for this
    // engine; the step runs eagerly.
    try {
      cuda.EndCapture();
    } catch (...) {
    }
    HYMT_LOG_WARN("CUDA graphs turned off: ", e.what());
    graphs_.reset();
    return false;
  }
  stat_graph_captures_.fetch_add(1);
  graphs_->by_batch[key] = Graphs::Entry{std::move(g), ++graphs_->clock};
  return true;
#else
  (void)batch;
  (void)ids;
  (void)logit_rows;
  return false;
#endif
}

void Engine::ForwardOps(const StepBatch& batch, std::span<const int32_t> ids, const std::vector<int32_t>& logit_rows) {
  const int64_t n_rows = batch.n_rows();
  for (Ops* o : devices_) o->BeginStep(batch);

  const HunyuanModel& m = *model_;
  Ops* cur = placement_.embed;
  m.Embed(*cur, ids, activations_.at(cur));
  for (int i = 0; i < m.config().n_layers; ++i) {
    Ops* o = placement_.layers[i];
    if (o != cur) {
      TransferRows(*cur, activations_.at(cur).x.Rows(0, n_rows), *o, activations_.at(o).x.Rows(0, n_rows));
      cur = o;
    }
    LayerStreamer* streamer = placement_.streamer;
    if (streamer != nullptr && streamer->Streams(i)) {
      m.ForwardLayer(streamer->Acquire(i), *o, kv_->layer(i), activations_.at(o), n_rows);
      streamer->Release(i);
    } else {
      m.ForwardLayer(m.layer(i), *o, kv_->layer(i), activations_.at(o), n_rows);
    }
  }
  Ops* head = placement_.head;
  if (head != cur)
    TransferRows(*cur, activations_.at(cur).x.Rows(0, n_rows), *head, activations_.at(head).x.Rows(0, n_rows));
  if (logit_rows.empty()) {
    head->Sync();
    return;
  }
  const int64_t k = static_cast<int64_t>(logit_rows.size());
  m.Logits(*head, activations_.at(head), logit_rows, logits_.Rows(0, k));
}

}  // namespace hymt
