// hymt bench: prefill and decode speed of a model on its plan, as a fraction of ceilings measured in the
// same run (BENCH.md): decode against read bandwidth / bytes read per token, prefill in FLOP/s.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/packed.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "core/json.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "runtime/ceilings.h"
#include "runtime/kv_cache.h"
#ifdef HYMT_HAVE_CUDA
#include "backends/cuda/cuda_ops.h"
#endif

namespace hymt {
namespace {

using Clock = std::chrono::steady_clock;

struct RunStats {
  double seconds = 0;             // submit -> last sequence done
  double first_token_seconds = 0;  // submit -> first token of the first sequence (TTFT at batch 1)
  double decode_tok_s = 0;        // tokens after each sequence's first, over the decode phase
  // Tokens per second while every sequence decodes: from the last sequence's first token to the first
  // sequence's end (0 when that window is empty, e.g. one sequence). No prefill runs in that window.
  double full_batch_tok_s = 0;
  double full_batch_seconds = 0;
  int64_t generated = 0;
  int64_t prompt_tokens = 0;
};

// Runs `seqs` sequences of `prompt` random tokens and `gen` new tokens (greedy, no stop) at once.
RunStats RunBatch(Engine& engine, int32_t vocab, int seqs, int prompt, int gen, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  Clock::time_point first_token_any{}, end{};  // under mu
  Clock::time_point all_started{}, first_done{};  // under mu: the full-batch window
  int64_t total = 0, total_at_all_started = -1, total_at_first_done = -1;
  int started = 0;  // sequences with a first token
  std::vector<int64_t> counts(seqs, 0);
  const auto t0 = Clock::now();
  for (int s = 0; s < seqs; ++s) {
    GenerationRequest g;
    for (int i = 0; i < prompt; ++i) g.prompt.push_back(tok(rng));
    g.sampling = SamplingParams::Greedy();
    g.max_new_tokens = gen;
    g.group = static_cast<uint64_t>(s);
    g.on_token = [&, s](int32_t) {
      std::lock_guard<std::mutex> lock(mu);
      auto now = Clock::now();
      ++total;
      if (counts[s]++ == 0) {
        if (started == 0) first_token_any = now;
        if (++started == seqs) {
          all_started = now;
          total_at_all_started = total;
        }
      }
      return true;
    };
    g.on_done = [&](const GenerationResult&) {
      std::lock_guard<std::mutex> lock(mu);
      end = Clock::now();
      if (done++ == 0) {
        first_done = end;
        total_at_first_done = total;
      }
      cv.notify_all();
    };
    engine.Submit(std::move(g));
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done == seqs; });
  RunStats r;
  auto secs = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  r.seconds = secs(end - t0);
  r.first_token_seconds = secs(first_token_any - t0);
  for (int64_t c : counts) r.generated += c;
  r.prompt_tokens = int64_t{seqs} * prompt;
  // Decode rate: tokens after each sequence's first, over the time from the first token to the end (with
  // several sequences some still prefill in that window, so this errs on the low side).
  int64_t after = 0;
  for (int64_t c : counts) after += std::max<int64_t>(0, c - 1);
  r.decode_tok_s = static_cast<double>(after) / std::max(1e-9, secs(end - first_token_any));
  if (seqs > 1 && total_at_all_started >= 0 && total_at_first_done > total_at_all_started) {
    r.full_batch_seconds = secs(first_done - all_started);
    if (r.full_batch_seconds > 0)
      r.full_batch_tok_s = static_cast<double>(total_at_first_done - total_at_all_started) / r.full_batch_seconds;
  }
  return r;
}

std::vector<int> ParseIntList(const std::string& s) {
  std::vector<int> out;
  for (const std::string& p : StrSplit(s, ',')) {
    if (p.empty()) continue;
    int v = std::atoi(p.c_str());
    if (v <= 0) Fail(ErrorCode::kInvalidArgument, "bad list entry '", p, "'");
    out.push_back(v);
  }
  return out;
}

std::string FormatFixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// The median, lowest and highest of v (not empty), and v itself, as JSON and as "M% (median; L-H%)".
struct Spread {
  double median = 0, low = 0, high = 0;
};
Spread SpreadOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v.front(), v.back()};
}
std::string PercentSpread(const Spread& s) {
  return StrCat(FormatFixed(100 * s.median, 1), "% (median; ", FormatFixed(100 * s.low, 1), "-",
                FormatFixed(100 * s.high, 1), "%)");
}
Json JsonArray(const std::vector<double>& v) {
  Json a = Json::MakeArray();
  for (double x : v) a.Push(Json(x));
  return a;
}

}  // namespace

int RunBench(int argc, char** argv) {
  Args args("hymt bench [--model PATH] [options]");
  AddSessionOptions(args);
  args.Option("prompt", "prompt tokens of the decode runs", "48")
      .Option("gen", "new tokens per sequence in the decode runs", "64")
      .Option("batches", "decode runs: sequences at once, comma-separated", "1")
      .Option("prefill-seqs", "prefill run: sequences", "64")
      .Option("prefill-len", "prefill run: tokens per sequence", "64")
      .Option(
          "pairs",
          "CPU plans: pairs of (a short batch-1 decode, then the read-bandwidth probe) and of (a prefill "
          "of 8 x 64 tokens, then the int8 or f32 peak probe), each fraction against the ceiling measured "
          "right after it (0: none)",
          "5")
      .Option("json", "also write the results to this JSON file");
  if (!args.Parse(argc, argv)) return 0;
  SessionOptions so = SessionOptionsFromArgs(args);
  std::vector<int> batches = ParseIntList(args.Get("batches"));
  const int prompt = static_cast<int>(args.GetInt("prompt")), gen = static_cast<int>(args.GetInt("gen"));
  const int pseqs = static_cast<int>(args.GetInt("prefill-seqs")), plen = static_cast<int>(args.GetInt("prefill-len"));
  const int pairs = static_cast<int>(args.GetInt("pairs"));
  if (pairs < 0) Fail(ErrorCode::kInvalidArgument, "--pairs must be 0 or more");
  constexpr int kPairSeqs = 8, kPairLen = 64, kPairPrompt = 8, kPairGen = 16;  // the --pairs runs
  int need_seqs =
      std::max({pseqs, *std::max_element(batches.begin(), batches.end()), pairs > 0 ? kPairSeqs : 1});
  if (so.max_seqs == 0) so.max_seqs = need_seqs;
  if (so.max_context == 0)
    so.max_context = std::max({prompt + gen, plen + 1, pairs > 0 ? kPairLen + 1 : 0,
                               pairs > 0 ? kPairPrompt + kPairGen : 0}) +
                     16;

  // The host ceiling is measured before the model loads; its buffer is then left out of the peak RSS.
  // 4 GiB (1 GiB on a small host): several times any last-level cache, as a model's weights are.
  const size_t probe = HostMemoryAvailable() > (uint64_t{12} << 30) ? size_t{4} << 30 : size_t{1} << 30;
  double host_bandwidth = MeasureHostReadBandwidthBest(probe);
  // The f32 ceiling of the kernels this run uses: AVX-512 FMAs only where they are the AVX-512 build.
  const bool fma_avx512 = cpu::DefaultIsa() == cpu::Isa::kAvx512;
  const double host_fma_peak = MeasureHostFmaPeak(30, fma_avx512);
  // The int8 ceiling of the kernels this run uses (MeasureHostInt8Peak).
  const char* int8_name = HostInt8PeakName(cpu::DefaultIsa());
  const double host_int8_peak = MeasureHostInt8Peak(cpu::DefaultIsa());
  // The device ceiling too, before the model loads: its buffer is freed before any of the plan's
  // allocations, so it never adds to the device memory a --gpu-mem budget bounds (a quarter of the budget,
  // from 256 MiB, several times any GPU's L2, up to 2 GiB). Used when the plan runs on the GPU.
#ifdef HYMT_HAVE_CUDA
  double device_bandwidth = 0;
  const bool on_cuda = so.device == "auto" || so.device.rfind("cuda", 0) == 0;
  if (on_cuda && CudaDeviceCount() > 0) {
    const int dev = so.device.rfind("cuda:", 0) == 0 ? std::atoi(so.device.c_str() + 5) : 0;
    const size_t bytes = so.gpu_mem > 0 ? std::clamp<size_t>(so.gpu_mem / 4, size_t{256} << 20, size_t{2} << 30)
                                        : size_t{2} << 30;
    device_bandwidth = CudaReadBandwidth(dev, bytes);
  }
#endif
  ResetPeakResident();
  auto session = Session::Open(so);
  const LoadedModel& m = session->model();
  const ModelConfig& c = m.config;
  const Plan& plan = session->plan();
  std::printf("model %s, plan %s, %d threads\n%s", m.name.c_str(), plan.mode.c_str(), DefaultThreadPool().size(),
              plan.Table(c).c_str());

  // Bytes one decode token reads: every layer's weights, the head, and the cached keys and values.
  int64_t weight_bytes = 0;
  bool packable = false;  // a weight the CPU's packed int8 matmuls take (their ceiling is the int8 peak)
  ForEachTensor(c, session->model().model->mutable_weights(), [&](const TensorSpec& s, Weight& w) {
    if (s.role != "token_embd" || c.tied_output) weight_bytes += static_cast<int64_t>(w.bytes());
    if (s.role != "token_embd" && cpu::HasPackedLayout(w.dtype)) packable = true;
  });
  const double kv_per_token = static_cast<double>(KvCache::PageBytesPerLayer(c, 1, plan.kv_type)) * c.n_layers;
  const double avg_context = prompt + gen / 2.0;
  const double bytes_per_token = static_cast<double>(weight_bytes) + kv_per_token * avg_context;

  // The ceiling: read bandwidth of the memory the weights live in.
  double bandwidth = 0;
  std::string bw_what;
#ifdef HYMT_HAVE_CUDA
  if (plan.mode != "cpu" && device_bandwidth > 0) {
    bandwidth = device_bandwidth;
    bw_what = "device read bandwidth";
  }
#endif
  const bool on_host = bandwidth == 0;  // the weights are read from host memory
  if (on_host) {
    bandwidth = host_bandwidth;
    bw_what = "host read bandwidth";  // the fastest of 5 passes over 4 GiB
  }
  std::printf("\n%-34s %10.1f GB/s (measured now)\n", bw_what.c_str(), bandwidth);
  std::printf("%-34s %10.3f GB (weights %.3f + KV at %.0f tokens)\n", "bytes read per decode token",
              bytes_per_token / 1e9, weight_bytes / 1e9, avg_context);
  const double roofline = bandwidth * 1e9 / bytes_per_token;
  std::printf("%-34s %10.2f tok/s\n\n", "batch-1 decode roofline", roofline);

  Engine& engine = session->engine();
  const int32_t vocab = m.tokenizer->n_tokens();
  Json out = Json::MakeObject();
  out.Set("model", Json(m.name));
  out.Set("plan", Json(plan.mode));
  out.Set("threads", Json(DefaultThreadPool().size()));
  out.Set("bandwidth_gb_s", Json(bandwidth));
  out.Set("bytes_per_token", Json(bytes_per_token));
  out.Set("roofline_tok_s", Json(roofline));

  // Warm-up (first-touch of mapped weights, lazily created library handles).
  RunBatch(engine, vocab, 1, 8, 4, 7);

  Json decode = Json::MakeArray();
  // decode tok/s: tokens after each sequence's first over the decode phase; all-in: every generated
  // token over the whole run, prefill included (what `generate` throughput usually means).
  std::printf("%-22s %12s %12s %12s %14s\n", "decode run", "decode tok/s", "of roofline", "all-in tok/s",
              "first token");
  std::string step_split;
  std::string full_batch;  // the batch runs' rate while all their sequences decode
  double batch1_tok_s = 0;
  for (int b : batches) {
    const EngineStats before = engine.stats();
    RunStats r = RunBatch(engine, vocab, b, prompt, gen, 100 + b);
    if (b == 1) {
      batch1_tok_s = r.decode_tok_s;
      const EngineStats after = engine.stats();
      const double steps = static_cast<double>(std::max<int64_t>(1, after.steps - before.steps));
      const double step_ms = (after.step_ns - before.step_ns) / 1e6 / steps;
      const double issue_ms = (after.forward_issue_ns - before.forward_issue_ns) / 1e6 / steps;
      const double select_ms = (after.select_ns - before.select_ns) / 1e6 / steps;
      const int64_t replays = after.graph_replays - before.graph_replays;
      const double launch_ms = replays > 0 ? (after.graph_launch_ns - before.graph_launch_ns) / 1e6 / replays : 0;
      const int64_t timed = after.graph_device_timed - before.graph_device_timed;
      const double device_ms = timed > 0 ? (after.graph_device_ns - before.graph_device_ns) / 1e6 / timed : 0;
      // Averages over every step of the run (the prompt's, graph captures); a decode step alone takes
      // 1 / the decode rate, and a replayed one issues in launch_ms.
      step_split = StrCat("batch-1 steps (mean over the run, prompt and captures included): ", FormatFixed(step_ms, 3),
                          " ms = issue ", FormatFixed(issue_ms, 3), " + token selection (waits for the device) ",
                          FormatFixed(select_ms, 3), " + bookkeeping ", FormatFixed(step_ms - issue_ms - select_ms, 3),
                          " ms; a decode step ", FormatFixed(r.decode_tok_s > 0 ? 1e3 / r.decode_tok_s : 0, 3),
                          " ms, of which issuing a replayed graph ", FormatFixed(launch_ms, 3), " ms (", replays,
                          " replays)",
                          timed > 0 ? StrCat("; the device ran a graph for ", FormatFixed(device_ms, 3), " ms (mean of ",
                                             timed, ")")
                                    : std::string());
      out.Set("batch1_graph_launch_ms", Json(launch_ms));
      if (timed > 0) out.Set("batch1_graph_device_ms", Json(device_ms));
      out.Set("batch1_step_ms", Json(step_ms));
      out.Set("batch1_issue_ms", Json(issue_ms));
      out.Set("batch1_select_ms", Json(select_ms));
    }
    const double frac = b == 1 ? r.decode_tok_s / roofline : 0;
    const std::string of = b == 1 ? FormatFixed(100 * frac, 1) + "%" : "-";
    std::printf("%-22s %12.2f %12s %12.1f %12.3f s\n", StrCat(b, " x (", prompt, "+", gen, ")").c_str(),
                r.decode_tok_s, of.c_str(), static_cast<double>(r.generated) / r.seconds, r.first_token_seconds);
    Json j = Json::MakeObject();
    j.Set("seqs", Json(b));
    j.Set("decode_tok_s", Json(r.decode_tok_s));
    j.Set("total_generated_tok_s", Json(static_cast<double>(r.generated) / r.seconds));
    j.Set("first_token_seconds", Json(r.first_token_seconds));
    if (b == 1) j.Set("fraction_of_roofline", Json(frac));
    if (r.full_batch_tok_s > 0) {
      j.Set("full_batch_tok_s", Json(r.full_batch_tok_s));
      full_batch += StrCat("  ", b, " sequences: ", FormatFixed(r.full_batch_tok_s, 2), " tok/s over ",
                           FormatFixed(r.full_batch_seconds, 2), " s\n");
    }
    decode.Push(std::move(j));
  }
  out.Set("decode", std::move(decode));
  if (!full_batch.empty())
    std::printf("decode while every sequence of a run decodes (no prefill in the window: from the last\n"
                "sequence's first token to the first sequence's end):\n%s",
                full_batch.c_str());
  if (!step_split.empty()) std::printf("%s\n", step_split.c_str());

  // Prefill: many sequences of plen tokens, one new token each (the logits of the last position).
  RunStats p = RunBatch(engine, vocab, pseqs, plen, 1, 999);
  const double prefill_tok_s = static_cast<double>(p.prompt_tokens) / p.seconds;
  // 2 FLOPs per weight per token, plus attention (QKᵀ and PV over the causal triangle).
  const double matmul_params = static_cast<double>(c.ParameterCount() - (c.tied_output ? 0 : c.vocab_rows * c.hidden) -
                                                   c.vocab_rows * int64_t{c.hidden});
  auto prefill_flops = [&](int seqs, int len) {
    const double attn_flops = 2.0 * 2.0 * c.n_layers * c.q_dim() * (len * (len + 1) / 2.0) * seqs;
    return 2.0 * matmul_params * len * seqs + attn_flops +
           2.0 * static_cast<double>(c.vocab_rows) * c.hidden * seqs;  // one head row per sequence
  };
  const double flops = prefill_flops(pseqs, plen);
  std::printf("%-22s %12.1f tok/s %10.2f TFLOP/s\n", StrCat("prefill ", pseqs, " x ", plen).c_str(), prefill_tok_s,
              flops / p.seconds / 1e12);
  if (on_host && host_fma_peak > 0) {
    // The CPU's GEMMs run on f32 FMA for float weights (and block formats without a packed layout),
    // on int8 products for packed q8_0 / q4_k / q6_k weights (backends/cpu/packed.h).
    std::printf("%-22s %12.1f GFLOP/s (measured now); prefill reaches %.1f%% of it\n",
                StrCat("host f32 FMA peak (", fma_avx512 ? "avx512" : "avx2", ")").c_str(), host_fma_peak,
                100 * flops / p.seconds / 1e9 / host_fma_peak);
    out.Set("host_fma_peak_gflop_s", Json(host_fma_peak));
    out.Set("prefill_fraction_of_fma_peak", Json(flops / p.seconds / 1e9 / host_fma_peak));
  }
  if (on_host && host_int8_peak > 0 && packable) {
    std::printf("%-22s %12.1f GOP/s   (measured now); prefill reaches %.1f%% of it\n",
                StrCat("host int8 peak (", int8_name, ")").c_str(), host_int8_peak,
                100 * flops / p.seconds / 1e9 / host_int8_peak);
    out.Set("host_int8_isa", Json(int8_name));
    out.Set("host_int8_peak_gop_s", Json(host_int8_peak));
    out.Set("prefill_fraction_of_int8_peak", Json(flops / p.seconds / 1e9 / host_int8_peak));
  }
  out.Set("prefill_tok_s", Json(prefill_tok_s));
  out.Set("prefill_tflop_s", Json(flops / p.seconds / 1e12));
  const int64_t peak_rss = PeakResidentBytes();  // before the second probe's buffer
  if (on_host && batch1_tok_s > 0) {
    // The host's bandwidth moves with what else runs on it: measured again now, and batch-1 decode is
    // reported against the higher of the two measurements.
    const double after = MeasureHostReadBandwidthBest(
        HostMemoryAvailable() > probe + (uint64_t{2} << 30) ? probe : size_t{1} << 30);
    const double fraction = batch1_tok_s * bytes_per_token / 1e9 / std::max(bandwidth, after);
    std::printf("%-34s %10.1f GB/s (before the runs %.1f); batch-1 decode reaches %.1f%% of the higher\n",
                "host read bandwidth after the runs", after, bandwidth, 100 * fraction);
    out.Set("bandwidth_after_gb_s", Json(after));
    out.Set("batch1_fraction_of_higher_bandwidth", Json(fraction));
  }
  if (on_host && pairs > 0) {
    // On a host shared with other jobs the ceilings move within seconds, so a ceiling measured before or
    // after a long run says little about the rate during it. Pairs: each short run is followed at once by
    // its ceiling, and the fractions' median and range are reported (1 GiB probes, 32x a large L3).
    const size_t pair_probe =
        HostMemoryAvailable() > (uint64_t{3} << 30) ? size_t{1} << 30 : size_t{256} << 20;
    const double pair_bytes =
        static_cast<double>(weight_bytes) + kv_per_token * (kPairPrompt + kPairGen / 2.0);
    const bool int8 = host_int8_peak > 0 && packable;
    std::vector<double> dec, pre, bws, peaks;
    for (int i = 0; i < pairs; ++i) {
      const RunStats d = RunBatch(engine, vocab, 1, kPairPrompt, kPairGen, 2000 + i);
      const double bw = MeasureHostReadBandwidthBest(pair_probe, 3);
      bws.push_back(bw);
      dec.push_back(d.decode_tok_s * pair_bytes / 1e9 / bw);
      const RunStats q = RunBatch(engine, vocab, kPairSeqs, kPairLen, 1, 3000 + i);
      const double peak = int8 ? MeasureHostInt8Peak(cpu::DefaultIsa()) : MeasureHostFmaPeak(30, fma_avx512);
      peaks.push_back(peak);
      if (peak > 0) pre.push_back(prefill_flops(kPairSeqs, kPairLen) / q.seconds / 1e9 / peak);
    }
    const Spread d = SpreadOf(dec), b = SpreadOf(bws);
    std::printf(
        "paired runs (%d): batch-1 decode of %d tokens, then the read bandwidth (%s-%s GB/s): decode "
        "reaches %s of it\n",
        pairs, kPairGen, FormatFixed(b.low, 1).c_str(), FormatFixed(b.high, 1).c_str(),
        PercentSpread(d).c_str());
    out.Set("pairs_decode_fractions", JsonArray(dec));
    out.Set("pairs_bandwidth_gb_s", JsonArray(bws));
    out.Set("pairs_decode_fraction_median", Json(d.median));
    if (!pre.empty()) {
      const Spread f = SpreadOf(pre), k = SpreadOf(peaks);
      std::printf(
          "paired runs (%d): prefill of %d x %d, then the %s peak (%s-%s G%s/s): prefill reaches %s of it\n",
          pairs, kPairSeqs, kPairLen, int8 ? int8_name : (fma_avx512 ? "f32 FMA (avx512)" : "f32 FMA (avx2)"),
          FormatFixed(k.low, 1).c_str(), FormatFixed(k.high, 1).c_str(), int8 ? "OP" : "FLOP",
          PercentSpread(f).c_str());
      out.Set("pairs_prefill_fractions", JsonArray(pre));
      out.Set("pairs_peaks", JsonArray(peaks));
      out.Set("pairs_prefill_fraction_median", Json(f.median));
      out.Set("pairs_prefill_ceiling", Json(int8 ? int8_name : "f32_fma"));
    }
  }
  out.Set("peak_rss_bytes", Json(peak_rss));
#ifdef HYMT_HAVE_CUDA
  if (plan.mode != "cpu") {
    // The process's device memory as the driver reports it (context, library workspaces and every
    // allocation), against what the model needs: the weights on the device and the KV cache.
    const int64_t used = CudaProcessMemoryBytes();
    int64_t device_weights = 0;  // partial and streamed plans: the plan table says where weights are
    if (plan.mode == "resident")
      ForEachTensor(c, session->model().model->mutable_weights(),
                    [&](const TensorSpec&, Weight& w) { device_weights += static_cast<int64_t>(w.bytes()); });
    const EngineStats st = engine.stats();
    out.Set("graph_replays", Json(st.graph_replays));
    out.Set("graph_captures", Json(st.graph_captures));
    out.Set("lookahead_steps", Json(st.lookahead_steps));
    out.Set("lookahead_discarded", Json(st.lookahead_discarded));
    std::printf("%-22s %12lld replayed (%lld launched ahead of their tokens, %lld of those discarded), %lld captured\n",
                "CUDA graph steps", static_cast<long long>(st.graph_replays), static_cast<long long>(st.lookahead_steps),
                static_cast<long long>(st.lookahead_discarded), static_cast<long long>(st.graph_captures));
    if (used >= 0) {
      out.Set("device_process_bytes", Json(used));
      out.Set("device_kv_bytes", Json(st.kv_bytes_total));
      out.Set("device_weight_bytes", Json(device_weights));
      std::printf("%-22s %12s (weights %s + KV %s + other %s)\n", "device memory (driver)",
                  FormatBytes(static_cast<uint64_t>(used)).c_str(), FormatBytes(static_cast<uint64_t>(device_weights)).c_str(),
                  FormatBytes(static_cast<uint64_t>(st.kv_bytes_total)).c_str(),
                  FormatBytes(static_cast<uint64_t>(std::max<int64_t>(0, used - device_weights - st.kv_bytes_total))).c_str());
    } else {
      size_t free_b = 0, total_b = 0;
      if (CudaMemoryInfo(0, &free_b, &total_b)) {
        out.Set("device_used_bytes", Json(static_cast<int64_t>(total_b - free_b)));
        std::printf("%-22s %12s (the whole device: the driver does not list this process)\n", "device memory in use",
                    FormatBytes(total_b - free_b).c_str());
      }
    }
  }
#endif
  std::printf("%-22s %12s\n", "peak resident memory", FormatBytes(static_cast<uint64_t>(peak_rss)).c_str());
  if (args.Has("json")) {
    std::ofstream f(args.Get("json"));
    f << out.Dump() << "\n";
    if (!f) Fail(ErrorCode::kInternal, "cannot write ", args.Get("json"));
  }
  return 0;
}

}  // namespace hymt
