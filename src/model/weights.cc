#include "model/weights.h"

#include "core/strings.h"

namespace hymt {

void ForEachTensor(const ModelConfig& c, ModelWeights& w,
                   const std::function<void(const TensorSpec&, Weight&)>& fn) {
  auto spec = [](std::string hf, std::string gguf, std::string role, int layer, int64_t rows, int64_t cols,
                 bool norm) {
    TensorSpec s;
    s.hf_name = std::move(hf);
    s.gguf_name = std::move(gguf);
    s.role = std::move(role);
    s.layer = layer;
    s.rows = rows;
    s.cols = cols;
    s.is_norm = norm;
    return s;
  };
  fn(spec("model.embed_tokens.weight", "token_embd.weight", "token_embd", -1, c.vocab_rows, c.hidden, false),
     w.embed);
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (int i = 0; i < c.n_layers; ++i) {
    LayerWeights& l = w.layers[i];
    const std::string hf = StrCat("model.layers.", i, ".");
    const std::string gg = StrCat("blk.", i, ".");
    fn(spec(hf + "input_layernorm.weight", gg + "attn_norm.weight", "attn_norm", i, 1, c.hidden, true),
       l.attn_norm);
    fn(spec(hf + "self_attn.q_proj.weight", gg + "attn_q.weight", "attn_q", i, c.q_dim(), c.hidden, false), l.wq);
    fn(spec(hf + "self_attn.k_proj.weight", gg + "attn_k.weight", "attn_k", i, c.kv_dim(), c.hidden, false), l.wk);
    fn(spec(hf + "self_attn.v_proj.weight", gg + "attn_v.weight", "attn_v", i, c.kv_dim(), c.hidden, false), l.wv);
    fn(spec(hf + "self_attn.o_proj.weight", gg + "attn_output.weight", "attn_output", i, c.hidden, c.q_dim(),
            false),
       l.wo);
    fn(spec(hf + "self_attn.query_layernorm.weight", gg + "attn_q_norm.weight", "attn_q_norm", i, 1, c.head_dim,
            true),
       l.q_norm);
    fn(spec(hf + "self_attn.key_layernorm.weight", gg + "attn_k_norm.weight", "attn_k_norm", i, 1, c.head_dim,
            true),
       l.k_norm);
    fn(spec(hf + "post_attention_layernorm.weight", gg + "ffn_norm.weight", "ffn_norm", i, 1, c.hidden, true),
       l.ffn_norm);
    fn(spec(hf + "mlp.gate_proj.weight", gg + "ffn_gate.weight", "ffn_gate", i, c.ffn, c.hidden, false), l.gate);
    fn(spec(hf + "mlp.up_proj.weight", gg + "ffn_up.weight", "ffn_up", i, c.ffn, c.hidden, false), l.up);
    fn(spec(hf + "mlp.down_proj.weight", gg + "ffn_down.weight", "ffn_down", i, c.hidden, c.ffn, false), l.down);
  }
  fn(spec("model.norm.weight", "output_norm.weight", "output_norm", -1, 1, c.hidden, true), w.final_norm);
  if (!c.tied_output)
    fn(spec("lm_head.weight", "output.weight", "output", -1, c.vocab_rows, c.hidden, false), w.output);
}

void ForEachTensorSpec(const ModelConfig& config, const std::function<void(const TensorSpec&)>& fn) {
  ModelWeights scratch;
  ForEachTensor(config, scratch, [&](const TensorSpec& s, Weight&) { fn(s); });
}

}  // namespace hymt
