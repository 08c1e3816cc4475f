#include "families/qwenimage/qwenimage_text.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/config_json.h"

namespace fp8s {

DecoderLmConfig qwen25vl_config(const SafetensorsFile& f) {
  DecoderLmConfig base;
  base.name = "Qwen2.5-VL";
  base.vocab_size = 152064, base.hidden = 3584, base.intermediate = 18944, base.layers = 28;
  base.heads = 28, base.kv_heads = 4, base.head_dim = 128;
  base.eps = 1e-6, base.rope_theta = 1e6;
  base.qk_norm = false, base.qkv_bias = true;
  // no q/k norm tells the head width: the head count does (hidden / heads)
  // the tiny files' own metadata, else a diffusers folder's text_encoder/config.json (transformers
  // 5 nests the language model's under "text_config"; older ones keep it at the top)
  for (const char* key : {"qwen25vl.config", "config.json"}) {
    const auto meta = f.metadata().find(key);
    if (meta == f.metadata().end()) continue;
    read_config_json(meta->second, f.path(), key, [&](const nlohmann::json& all) {
      const auto& j = all.contains("text") ? all["text"] : all.contains("text_config") ? all["text_config"] : all;
      const int hidden = j.contains("hidden_size") ? config_int(j["hidden_size"], f.path(), "qwen25vl.config hidden_size") : base.hidden;
      const int heads = j.contains("num_attention_heads")
                            ? config_int(j["num_attention_heads"], f.path(), "qwen25vl.config num_attention_heads")
                            : base.heads;
      check_config_value(heads, 1, 4096, f.path(), "qwen25vl.config num_attention_heads");
      base.head_dim = hidden / heads;
      base.eps = j.value("rms_norm_eps", base.eps);
      base.rope_theta = j.value("rope_theta", base.rope_theta);
    });
    break;
  }
  DecoderLmConfig c = decoder_lm_config(f, "model.", base, "qwen25vl.text_config");
  if (!c.qkv_bias) throw InputError(f.path() + ": not Qwen2.5-VL's language model (no q/k/v biases)");
  c.outputs = {c.layers};  // hidden_states[-1]: the last layer's output after the final norm
  c.normed_last = true;
  return c;
}

std::string qwenimage_template(const std::string& prompt) {
  return "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, spatial "
         "relationships of the objects and background:<|im_end|>\n<|im_start|>user\n" +
         prompt + "<|im_end|>\n<|im_start|>assistant\n";
}

std::pair<at::Tensor, at::Tensor> qwenimage_prompt_embeds(const at::Tensor& hidden, const at::Tensor& mask, int64_t max_rows) {
  const int64_t B = hidden.size(0), D = hidden.size(2);
  const auto lengths = mask.to(at::kLong).sum(1);
  std::vector<int64_t> kept(static_cast<std::size_t>(B));
  int64_t longest = 0;
  for (int64_t b = 0; b < B; ++b) {
    kept[static_cast<std::size_t>(b)] = std::max<int64_t>(0, lengths[b].item<int64_t>() - kQwenImageTemplateDrop);
    longest = std::max(longest, kept[static_cast<std::size_t>(b)]);
  }
  if (longest == 0) throw InputError("the prompt's template holds no more than its " + std::to_string(kQwenImageTemplateDrop) + " dropped rows");
  const int64_t rows = std::min(longest, max_rows);
  auto embeds = at::zeros({B, rows, D}, hidden.options());
  auto keep = at::zeros({B, rows}, at::kLong);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = std::min(kept[static_cast<std::size_t>(b)], rows);
    embeds[b].slice(0, 0, n).copy_(hidden[b].slice(0, kQwenImageTemplateDrop, kQwenImageTemplateDrop + n));
    keep[b].slice(0, 0, n).fill_(1);
  }
  return {embeds, keep};
}

}  // namespace fp8s
