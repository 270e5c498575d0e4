#include "runtime/session.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/standin.h"
#include "core/logging.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "quant/quant.h"
#ifdef HYMT_HAVE_CUDA
#include "backends/cuda/cuda_ops.h"
#endif

namespace hymt {

void SetCpuScratch(PlanInput& in) {
  const ModelConfig& c = in.config;
  const cpu::CpuScratch scratch =
      cpu::CpuOpsScratchBytes(std::max({int64_t{c.hidden}, int64_t{c.ffn}, int64_t{c.q_dim()}}), c.head_dim);
  in.cpu_scratch_fixed = scratch.per_thread * static_cast<uint64_t>(DefaultThreadPool().size());
  in.cpu_scratch_per_token = scratch.per_token;
}

uint64_t HostMemoryAvailable() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

namespace {

// Quantises every matrix of `w` to the type `type_of` gives it, on all cores, into host buffers kept in
// `owner` by their address (so that the copies of parts placed on a GPU can be freed after upload).
void QuantizeWeights(const ModelConfig& c, ModelWeights& w, const std::string& name,
                     const std::function<DType(const TensorSpec&)>& type_of, Ops& host,
                     std::map<const void*, std::unique_ptr<Buffer>>& owner) {
  int64_t total = 0, done = 0;
  int shown = -1;  // the percentage on screen
  ForEachTensor(c, w, [&](const TensorSpec& s, Weight&) {
    if (!s.is_norm) total += s.rows;
  });
  ForEachTensor(c, w, [&](const TensorSpec& s, Weight& t) {
    const DType type = type_of(s);
    if (s.is_norm || t.dtype == type) return;
    if (!CanQuantizeTo(type))
      Fail(ErrorCode::kUnsupported, "quantising to ", DTypeName(type), " is not supported");
    if (t.cols % GetDTypeInfo(type).block_size != 0) {
      HYMT_LOG_WARN("keeping ", t.name, " as ", DTypeName(t.dtype), ": ", t.cols,
                    " columns are not a multiple of ", GetDTypeInfo(type).block_size);
      return;
    }
    const size_t in_row = DTypeBytes(t.dtype, t.cols), out_row = DTypeBytes(type, t.cols);
    auto buf = host.Allocate(out_row * static_cast<size_t>(t.rows), "quantised " + t.name);
    const uint8_t* src = static_cast<const uint8_t*>(t.data);
    uint8_t* dst = static_cast<uint8_t*>(buf->data());
    const float scale = t.scale;
    DefaultThreadPool().ParallelFor(t.rows, 16, [&](int64_t r0, int64_t r1) {
      std::vector<float> row(static_cast<size_t>(t.cols));
      for (int64_t r = r0; r < r1; ++r) {
        DequantizeRow(t.dtype, src + in_row * r, row.data(), t.cols);
        if (scale != 1.0f)
          for (float& v : row) v *= scale;
        QuantizeRow(type, row.data(), dst + out_row * r, t.cols);
      }
    });
    t.dtype = type;
    t.data = buf->data();
    t.scale = 1.0f;
    owner[t.data] = std::move(buf);
    done += s.rows;
    const int percent = static_cast<int>(100 * done / std::max<int64_t>(1, total));
    if (percent != shown) std::fprintf(stderr, "\rquantising to %s: %3d%%", name.c_str(), percent);
    shown = percent;
  });
  std::fprintf(stderr, "\n");
}

}  // namespace

Session::~Session() {
  if (engine_) engine_->Shutdown(std::chrono::milliseconds(0));
}

std::unique_ptr<Session> Session::Open(const SessionOptions& o) {
  std::unique_ptr<Session> s(new Session());
  if (o.threads > 0) SetDefaultThreads(o.threads);
  std::string path = o.model;
  if (path.empty()) {
    path = FindDemoModel();
    if (path.empty())
      Fail(ErrorCode::kNotFound, "no --model given and the demo model was not found (set HYMT_DEMO_MODEL)");
  }
  s->model_ = LoadModel(path, o.load);
  LoadedModel& m = s->model_;
  if (o.model.empty()) m.is_demo = true;
  const ModelConfig& c = m.config;

  auto cpu = CreateCpuOps();
  Ops* cpu_ops = cpu.get();
  s->backends_.push_back(std::move(cpu));
  ModelWeights weights = m.model->weights();

  const bool standin = o.device == "standin";
  const bool cuda = o.device == "cuda" || o.device.rfind("cuda:", 0) == 0;
  if (o.device != "auto" && o.device != "cpu" && !cuda && !standin)
    Fail(ErrorCode::kInvalidArgument, "unknown device '", o.device, "' (auto, cpu, cuda, cuda:N)");
  [[maybe_unused]] const int cuda_index =
      o.device.rfind("cuda:", 0) == 0 ? std::atoi(o.device.c_str() + 5) : 0;

  PlanInput in;
  in.config = c;
  in.device = (cuda || standin) ? "gpu" : o.device;
  in.mode = o.plan_mode;
  in.gpu_layers = o.gpu_layers;
  in.ring_depth = o.ring_depth;
  in.max_seqs = o.max_seqs;
  in.max_context = o.max_context;
  SetCpuScratch(in);
  in.cpu_available = HostMemoryAvailable();
  in.cpu_budget = o.cpu_mem;
  in.gpu_budget = o.gpu_mem;
  if (!o.kv_type.empty()) {
    DType kv;
    if (!ParseDType(o.kv_type, &kv) ||
        !(kv == DType::kF32 || kv == DType::kF16 || kv == DType::kBF16 || kv == DType::kQ8_0))
      Fail(ErrorCode::kInvalidArgument, "--kv-type must be f32, f16, bf16 or q8_0, got '", o.kv_type, "'");
    in.cpu_kv_type = in.gpu_kv_type = kv;
  }
  GpuBytesFn gpu_bytes;
  if (standin) {
    if (o.gpu_mem == 0) Fail(ErrorCode::kInvalidArgument, "--device standin needs --gpu-mem");
    in.have_gpu = true;
    in.gpu_fixed_bytes = 0;  // a stand-in has no context, library workspaces or graphs
    in.gpu_graph_bytes = 0;
    in.gpu_activation_type = DType::kF32;
  }
#ifdef HYMT_HAVE_CUDA
  size_t free_b = 0, total_b = 0;
  if (!standin && o.device != "cpu" && CudaMemoryInfo(cuda_index, &free_b, &total_b)) {
    in.have_gpu = true;
    in.gpu_free = free_b;
    in.gpu_fixed_bytes = kGpuContextBytes + CudaOpsScratchBytes(CudaOpsOptions{});
    in.gpu_graph_bytes = o.cuda_graphs ? kGpuGraphBytes : 0;
    gpu_bytes = [](DType t, int64_t rows, int64_t cols) { return CudaPreparedWeightBytes(t, rows, cols); };
    in.speeds =
        GpuSpeedsForDevice(in.speeds, CudaPeakMemoryBandwidth(cuda_index), CudaSmClockRate(cuda_index));
  }
#endif
  // Without a GPU the plan's prediction uses this host's CPU speeds (nothing is chosen by them).
  if (!in.have_gpu) in.speeds = MeasuredCpuSpeeds(in.speeds);
  std::map<std::string, DType> stored_types;
  ForEachTensor(c, weights,
                [&](const TensorSpec& spec, Weight& t) { stored_types[spec.gguf_name] = t.dtype; });
  in.formats = CandidateFormats(
      c, [&](const TensorSpec& spec) { return stored_types.at(spec.gguf_name); }, "", o.weight_type,
      gpu_bytes);
  s->plan_ = MakePlan(in);
  const Plan& p = s->plan_;

  // Weights quantised at load live in host buffers until placed; those of parts on the GPU are freed
  // after their upload.
  std::map<const void*, std::unique_ptr<Buffer>> host_copies;
  if (p.format.quantize_at_load)
    QuantizeWeights(
        c, weights, p.format.name,
        [&](const TensorSpec& spec) { return LoadTypeFor(p.format.name, c, spec); }, *cpu_ops, host_copies);

  Ops* gpu_ops = nullptr;
  if (p.mode != "cpu") {
    std::unique_ptr<Ops> gpu;
    if (standin) {
      StandinOptions so;
      so.capacity = o.gpu_mem;
      gpu = CreateStandinOps(so);
    }
#ifdef HYMT_HAVE_CUDA
    if (!standin) gpu = CreateCudaOps(cuda_index);
#endif
    HYMT_CHECK(gpu != nullptr, "a GPU plan without a GPU backend");
    gpu_ops = gpu.get();
    s->backends_.push_back(std::move(gpu));
  }
  s->gpu_ops_ = gpu_ops;

  // Place each part's weights on its device.
  auto place = [&](Ops* ops, Weight& w) {
    if (w.empty()) return;
    const void* host = w.data;
    w = ops->PrepareWeight(w);
    if (ops != cpu_ops) host_copies.erase(host);
  };
  Placement placement;
  placement.embed = p.embed_on_gpu ? gpu_ops : cpu_ops;
  placement.head = p.head_on_gpu ? gpu_ops : cpu_ops;
  if (weights.output.empty() && placement.head != placement.embed)
    Fail(ErrorCode::kUnsupported,
         "a tied output head on a different device than the embedding is not supported");
  place(placement.embed, weights.embed);
  place(placement.head, weights.final_norm);
  place(placement.head, weights.output);
  // The RoPE table: one copy on each device that runs layers.
  const Weight host_rope = weights.layers[0].rope_inv_freq;
  std::map<Ops*, Weight> rope;
  auto rope_on = [&](Ops* ops) {
    auto it = rope.find(ops);
    if (it == rope.end()) it = rope.emplace(ops, ops->PrepareWeight(host_rope)).first;
    return it->second;
  };
  std::vector<int> streamed;
  for (int i = 0; i < c.n_layers; ++i) {
    Ops* ops = p.layers[i] == LayerHome::kCpu ? cpu_ops : gpu_ops;
    placement.layers.push_back(ops);
    LayerWeights& l = weights.layers[i];
    l.rope_inv_freq = rope_on(ops);
    if (p.layers[i] == LayerHome::kStreamed) {
      streamed.push_back(i);
      continue;
    }
    for (Weight* w : l.Stored()) place(ops, *w);
  }
  if (!streamed.empty()) {
    s->streamer_ =
        std::make_unique<LayerStreamer>(*gpu_ops, streamed, weights.layers, rope_on(gpu_ops), p.ring_depth);
    HYMT_CHECK(s->streamer_->slot_bytes() <= p.ring_slot_bytes, "the planner sized ring slots of ",
               p.ring_slot_bytes, " bytes; a layer needs ", s->streamer_->slot_bytes());
    for (int i : streamed) {
      for (const Weight* w : weights.layers[i].Stored()) host_copies.erase(w->data);
      weights.layers[i] = s->streamer_->staged(i);
    }
    placement.streamer = s->streamer_.get();
  }
  for (auto& [ptr, buf] : host_copies) s->weight_buffers_.push_back(std::move(buf));

  auto placed = std::make_shared<HunyuanModel>(c, std::move(weights));
  s->placed_ = placed;
  s->first_layer_ops_ = placement.layers[0];

  EngineOptions eo;
  eo.max_seqs = p.max_seqs;
  eo.max_step_tokens = p.max_step_tokens;
  eo.kv_pages = p.kv_pages;
  eo.page_size = p.page_size;
  eo.kv_dtype = p.kv_type;
  eo.max_context = p.max_context;
  eo.n_valid_tokens = m.tokenizer->n_tokens();
  eo.cuda_graphs = o.cuda_graphs;
  eo.cuda_lookahead = o.cuda_lookahead;
  s->engine_ = std::make_unique<Engine>(placed, placement, eo);
  return s;
}

}  // namespace hymt
