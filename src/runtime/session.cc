#include "runtime/session.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "backends/cpu/cpu_ops.h"
#include "core/logging.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "quant/quant.h"
#ifdef HYMT_HAVE_CUDA
#include "backends/cuda/cuda_ops.h"
#endif

namespace hymt {
namespace {

uint64_t HostMemoryAvailable() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

// Quantises every matrix of `w` to `type` on all cores, into buffers owned by `owner`.
void QuantizeWeights(const ModelConfig& c, ModelWeights& w, DType type, Ops& host,
                     std::vector<std::unique_ptr<Buffer>>& owner) {
  if (!CanQuantizeTo(type)) Fail(ErrorCode::kUnsupported, "quantising to ", DTypeName(type), " is not supported");
  int64_t total = 0, done = 0;
  ForEachTensor(c, w, [&](const TensorSpec& s, Weight&) {
    if (!s.is_norm) total += s.rows;
  });
  ForEachTensor(c, w, [&](const TensorSpec& s, Weight& t) {
    if (s.is_norm || t.dtype == type) return;
    if (t.cols % GetDTypeInfo(type).block_size != 0) {
      HYMT_LOG_WARN("keeping ", t.name, " as ", DTypeName(t.dtype), ": ", t.cols, " columns are not a multiple of ",
                    GetDTypeInfo(type).block_size);
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
    owner.push_back(std::move(buf));
    done += s.rows;
    std::fprintf(stderr, "\rquantising to %s: %3d%%", DTypeName(type), static_cast<int>(100 * done / std::max<int64_t>(1, total)));
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
  if (!o.weight_type.empty()) {
    DType t;
    if (!ParseDType(o.weight_type, &t)) Fail(ErrorCode::kInvalidArgument, "unknown weight type '", o.weight_type, "'");
    QuantizeWeights(c, weights, t, *cpu_ops, s->weight_buffers_);
  }

  PlanInput in;
  in.config = c;
  in.device = o.device == "auto" ? "auto" : (o.device.rfind("cuda", 0) == 0 ? "cuda" : o.device);
  if (in.device != "auto" && in.device != "cpu" && in.device != "cuda")
    Fail(ErrorCode::kInvalidArgument, "unknown device '", o.device, "' (auto, cpu, cuda, cuda:N)");
  in.max_seqs = o.max_seqs;
  in.max_context = o.max_context;
  in.cpu_available = HostMemoryAvailable();
  in.cpu_budget = o.cpu_mem;
  in.gpu_budget = o.gpu_mem;
  in.layer_bytes.assign(c.n_layers, 0);
  ForEachTensor(c, weights, [&](const TensorSpec& spec, Weight& t) {
    if (spec.layer >= 0) {
      in.layer_bytes[spec.layer] += static_cast<int64_t>(t.bytes());
    } else if (spec.role == "token_embd") {
      in.embed_bytes = static_cast<int64_t>(t.bytes());
      in.weight_type = t.dtype;
    } else if (spec.role == "output") {
      in.head_bytes = static_cast<int64_t>(t.bytes());
    }
  });
  if (!o.kv_type.empty()) {
    DType kv;
    if (!ParseDType(o.kv_type, &kv) ||
        !(kv == DType::kF32 || kv == DType::kF16 || kv == DType::kBF16 || kv == DType::kQ8_0))
      Fail(ErrorCode::kInvalidArgument, "--kv-type must be f32, f16, bf16 or q8_0, got '", o.kv_type, "'");
    in.cpu_kv_type = in.gpu_kv_type = kv;
  }
  int cuda_index = 0;
  if (o.device.rfind("cuda:", 0) == 0) cuda_index = std::atoi(o.device.c_str() + 5);
#ifdef HYMT_HAVE_CUDA
  size_t free_b = 0, total_b = 0;
  if (in.device != "cpu" && CudaMemoryInfo(cuda_index, &free_b, &total_b)) {
    in.have_gpu = true;
    in.gpu_free = free_b;
  }
#endif
  s->plan_ = MakePlan(in);
  const Plan& p = s->plan_;

  Placement placement;
  Ops* gpu_ops = nullptr;
#ifdef HYMT_HAVE_CUDA
  if (p.mode != "cpu") {
    auto gpu = CreateCudaOps(cuda_index);
    gpu_ops = gpu.get();
    s->backends_.push_back(std::move(gpu));
  }
#endif
  if (p.mode == "partial" || p.mode == "streamed")
    Fail(ErrorCode::kUnsupported, "plan mode ", p.mode, " is not available in this build");

  // Place each part's weights on its device.
  auto place = [&](Ops* ops, Weight& w) {
    if (!w.empty()) w = ops->PrepareWeight(w);
  };
  placement.embed = p.embed_on_gpu ? gpu_ops : cpu_ops;
  placement.head = p.head_on_gpu ? gpu_ops : cpu_ops;
  place(placement.embed, weights.embed);
  place(placement.head, weights.final_norm);
  place(placement.head, weights.output);
  if (weights.output.empty() && placement.head != placement.embed)
    Fail(ErrorCode::kUnsupported, "a tied output head on a different device than the embedding is not supported");
  for (int i = 0; i < c.n_layers; ++i) {
    Ops* ops = p.layers[i] == LayerHome::kGpu ? gpu_ops : cpu_ops;
    placement.layers.push_back(ops);
    LayerWeights& l = weights.layers[i];
    for (Weight* w : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.q_norm, &l.k_norm, &l.ffn_norm, &l.gate, &l.up, &l.down})
      place(ops, *w);
  }
  // The RoPE table goes wherever layers are (both devices when split).
  Weight rope_host = weights.rope_inv_freq;
  weights.rope_inv_freq = (gpu_ops && p.layers[0] == LayerHome::kGpu) ? gpu_ops->PrepareWeight(rope_host) : rope_host;
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
  s->engine_ = std::make_unique<Engine>(placed, placement, eo);
  return s;
}

}  // namespace hymt
