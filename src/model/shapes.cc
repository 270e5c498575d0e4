#include "model/shapes.h"

#include "core/status.h"

namespace hymt {

std::vector<std::string> ShapeNames() { return {"hunyuan-7b", "hy-1.8b", "tiny"}; }

ModelConfig ShapeConfig(std::string_view name) {
  ModelConfig c;
  c.architecture = "hunyuan_v1_dense";
  c.rms_eps = 1e-5f;
  c.rope.theta = 10000.0;
  c.rope.alpha = 1000.0;
  c.tied_output = true;
  c.max_positions = 32768;
  if (name == "hunyuan-7b") {
    c.name = "random-hunyuan-7b";
    c.vocab_rows = 128256;  // 128,167 tokens; the published embedding has 128,256 rows (MODEL.md)
    c.hidden = 4096;
    c.ffn = 14336;
    c.n_layers = 32;
    c.n_heads = 32;
    c.n_kv_heads = 8;
    c.head_dim = 128;
  } else if (name == "hy-1.8b") {
    c.name = "random-hy-1.8b";
    c.vocab_rows = 120818;
    c.hidden = 2048;
    c.ffn = 6144;
    c.n_layers = 32;
    c.n_heads = 16;
    c.n_kv_heads = 4;
    c.head_dim = 128;
  } else if (name == "tiny") {
    c.name = "random-tiny";
    c.vocab_rows = 512;
    c.hidden = 256;
    c.ffn = 512;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 64;
    c.max_positions = 4096;
  } else {
    Fail(ErrorCode::kInvalidArgument, "unknown shape '", name, "'; known: hunyuan-7b, hy-1.8b, tiny");
  }
  return c;
}

}  // namespace hymt
