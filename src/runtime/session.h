// A ready-to-serve model: loaded, planned, placed on its devices, with its engine running.
// The CLI commands and the server open one of these; everything about memory goes through the plan.
#pragma once

#include <cstdint>

#include <memory>
#include <string>

#include "runtime/engine.h"
#include "runtime/loader.h"
#include "runtime/planner.h"
#include "runtime/streamer.h"

namespace hymt {

struct SessionOptions {
  std::string model;            // path; empty: the demo model
  std::string device = "auto";  // auto | cpu | cuda | cuda:N | standin (a host-memory GPU stand-in, for
                                // tests: needs gpu_mem)
  int threads = 0;              // CPU threads; 0: all available cores
  int max_seqs = 0;             // sequences running at once; 0: the planner decides
  int max_context = 0;          // tokens per sequence; 0: the planner decides
  std::string kv_type;          // "" (the activation type), f32, f16, bf16, q8_0
  std::string weight_type;      // "" (as stored) or a type to quantise to at load (q8_0, q4_k, ...)
  uint64_t gpu_mem = 0;         // budgets in bytes; 0: detected free memory minus a margin
  uint64_t cpu_mem = 0;
  std::string plan_mode;  // "" (the planner's choice), resident, partial, streamed or cpu
  int gpu_layers = -1;    // partial/streamed plans: layers resident on the GPU (-1: the planner's)
  int ring_depth = 0;     // streamed plans: GPU slots for streamed layers (0: the planner's)
  bool cuda_graphs = true;  // decode steps on one CUDA device replay captured graphs (EngineOptions)
  bool cuda_lookahead = true;  // greedy graph steps launched ahead of their tokens (EngineOptions)
  LoadOptions load;
};

// MemAvailable from /proc/meminfo (bytes); 0 when unknown.
uint64_t HostMemoryAvailable();
// Sets in.cpu_scratch_fixed and cpu_scratch_per_token for in.config, with DefaultThreadPool()'s threads.
void SetCpuScratch(PlanInput& in);

class Session {
 public:
  // Loads, plans and starts. Throws Error with a clear message when the model cannot be loaded or
  // nothing fits (naming the smallest budget that would).
  static std::unique_ptr<Session> Open(const SessionOptions& options);
  ~Session();

  const LoadedModel& model() const { return model_; }
  Engine& engine() { return *engine_; }
  const Plan& plan() const { return plan_; }
  // The model with its weights placed per the plan, and the backend of its first layer (for one-shot
  // forward passes in tools; the engine uses the same objects). One-shot passes run every layer on that
  // one backend, so they need a plan with one device (cpu or resident); streamed layers' weights in
  // placed_model() are their staged host copies.
  const HunyuanModel& placed_model() const { return *placed_; }
  Ops& first_layer_ops() const { return *first_layer_ops_; }
  // The GPU backend (or its stand-in); nullptr for a CPU plan.
  Ops* gpu_ops() const { return gpu_ops_; }
  // The streamer of a streamed plan; nullptr otherwise.
  const LayerStreamer* streamer() const { return streamer_.get(); }

 private:
  Session() = default;
  LoadedModel model_;
  Plan plan_;
  std::vector<std::unique_ptr<Ops>> backends_;
  std::vector<std::unique_ptr<Buffer>> weight_buffers_;  // quantised-at-load weights the CPU reads
  std::unique_ptr<LayerStreamer> streamer_;
  std::shared_ptr<HunyuanModel> placed_;
  Ops* first_layer_ops_ = nullptr;
  Ops* gpu_ops_ = nullptr;
  std::unique_ptr<Engine> engine_;
};

}  // namespace hymt
