#include "families/sd/conditioning.h"

#include <algorithm>
#include <array>
#include <vector>

#include "pipeline/family_options.h"
#include "families/sd/embeddings.h"
#include "families/sd/model.h"
#include "text/clip_tokenizer.h"
#include "text/prompt_parser.h"

namespace fp8s {
namespace {

// A1111's "Original" emphasis: scale each token's hidden state by its weight, then restore the
// chunk's mean.
at::Tensor apply_emphasis(at::Tensor z, const std::array<float, 77>& m) {
  if (std::all_of(m.begin(), m.end(), [](float v) { return v == 1.0f; })) return z;
  auto mult = at::tensor(std::vector<float>(m.begin(), m.end()), at::kFloat).view({1, -1, 1});
  auto original_mean = z.mean();
  z = z * mult;
  return z * (original_mean / z.mean());
}

at::Tensor ids_tensor(const std::array<int32_t, 77>& ids) {
  return at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong).unsqueeze(0);
}

struct Encoded {
  at::Tensor context;  // [1, 77 * chunks, D]
  at::Tensor pooled;   // SDXL: from the first chunk
};

class PromptEncoder {
 public:
  PromptEncoder(const Model& model, const ClipTokenizer& tok, const GenerationRequest& r,
                const std::vector<const TextualInversion*>& embeddings)
      : model_(model), tok_(tok), r_(r), embeddings_(embeddings) {
    for (const auto* e : embeddings) names_.push_back({tok.encode(e->name), e->vectors()});
  }

  // The chunk's embedding vectors, CLIP-L's (g = false) or CLIP-G's.
  TokenOverrides overrides(const std::vector<EmbeddingFix>& fixes, bool g) const {
    TokenOverrides out;
    for (const auto& f : fixes) {
      const auto* e = embeddings_[static_cast<std::size_t>(f.embedding)];
      out.emplace_back(f.position, g ? e->clip_g : e->clip_l);
    }
    return out;
  }

  Encoded encode(const std::string& prompt) const {
    const auto chunks = tokenize_prompt(tok_, prompt, names_);
    std::vector<at::Tensor> parts;
    Encoded out;
    if (!model_.is_sdxl()) {
      for (std::size_t c = 0; c < chunks.ids.size(); ++c) {
        auto hidden = model_.encode_tokens(ids_tensor(chunks.ids[c]), r_.clip_skip, r_.compute, overrides(chunks.fixes[c], false));
        parts.push_back(apply_emphasis(hidden, chunks.multipliers[c]));
      }
    } else {
      // CLIP-L windows padded with EOS; the same windows padded with zeros after the first EOS for CLIP-G
      auto chunks_g = chunks;
      pad_with_zeros_after_eos(chunks_g, tok_.eos());
      for (std::size_t c = 0; c < chunks.ids.size(); ++c) {
        auto t = model_.encode_sdxl(ids_tensor(chunks.ids[c]), ids_tensor(chunks_g.ids[c]), r_.compute,
                                    overrides(chunks.fixes[c], false), overrides(chunks.fixes[c], true));
        parts.push_back(apply_emphasis(t.context, chunks.multipliers[c]));
        if (c == 0) out.pooled = t.pooled;
      }
    }
    out.context = at::cat(parts, 1);
    return out;
  }

 private:
  const Model& model_;
  const ClipTokenizer& tok_;
  const GenerationRequest& r_;
  const std::vector<const TextualInversion*>& embeddings_;
  std::vector<TokenEmbedding> names_;
};

}  // namespace

std::vector<FamilyOption> sdxl_options() {
  using T = FamilyOption::Type;
  auto sizes = [](char sep) {
    return [sep](const std::string& v) -> std::string {
      const auto p = parse_int_pair(v, sep);
      if (p && p->first <= 65536 && p->second <= 65536) return {};
      return std::string("expected two whole numbers from 0 to 65536 separated by '") + sep + "', got '" + v.substr(0, 40) + "'";
    };
  };
  return {{"original-size", "Original size", "Original size", T::Text, 0, 0, "0x0", {},
           "SDXL original size WxH (0x0: the image size)", false, false, false, sizes('x')},
          {"target-size", "Target size", "Target size", T::Text, 0, 0, "0x0", {},
           "SDXL target size WxH (0x0: the image size)", false, false, false, sizes('x')},
          {"crop", "Crop", "Crop", T::Text, 0, 0, "0,0", {}, "SDXL crop TOP,LEFT", false, false, false, sizes(',')},
          {"uncond", "Uncond", "Uncond", T::Choice, 0, 0, "auto", {"auto", "prompt", "zero"},
           "SDXL unconditional branch: auto (zero for an empty negative prompt, as A1111), prompt or zero", false, false, false, {}}};
}

Conditioning encode_conditioning(const Model& model, const ClipTokenizer& tokenizer, const std::string& prompt,
                                 const std::string& negative, const GenerationRequest& r, int width,
                                 int height, const std::vector<const TextualInversion*>& embeddings) {
  const PromptEncoder encoder(model, tokenizer, r, embeddings);
  Conditioning out;
  const Encoded pos = encoder.encode(prompt);
  // SDXL's unconditional branch: zeroed text for an empty negative prompt (sgm's force_zero_embeddings, as A1111)
  const auto sdxl = sdxl_options();
  const std::string uncond = model.is_sdxl() ? option_text(sdxl, r.options, "uncond") : "prompt";
  const bool zero_uncond = uncond == "zero" || (uncond == "auto" && negative.empty());
  Encoded neg;
  if (zero_uncond) {
    neg = {at::zeros_like(pos.context), at::zeros_like(pos.pooled)};
  } else {
    neg = encoder.encode(negative);
  }
  out.cond = pos.context;
  out.uncond = neg.context;
  if (out.cond.size(1) != out.uncond.size(1)) {
    // A1111 pads the shorter conditioning with encodings of the empty prompt.
    const auto empty = encoder.encode("").context;
    auto& shorter = out.cond.size(1) < out.uncond.size(1) ? out.cond : out.uncond;
    const int64_t missing = (std::max(out.cond.size(1), out.uncond.size(1)) - shorter.size(1)) / 77;
    shorter = at::cat({shorter, empty.repeat({1, missing, 1})}, 1);
  }
  const int64_t b = r.batch_size;
  out.cond = out.cond.repeat({b, 1, 1});
  out.uncond = out.uncond.repeat({b, 1, 1});
  if (model.is_sdxl()) {
    // "WxH" (0 or absent: the image's), crop "TOP,LEFT"
    auto pair = [&](const char* name, char sep, std::pair<int, int> fallback) {
      const auto v = parse_int_pair(option_text(sdxl, r.options, name), sep);
      return v ? *v : fallback;
    };
    const auto original = pair("original-size", 'x', {0, 0}), target = pair("target-size", 'x', {0, 0});
    const auto crop = pair("crop", ',', {0, 0});
    const float size_cond[6] = {float(original.second ? original.second : height),
                                float(original.first ? original.first : width),
                                float(crop.first), float(crop.second),
                                float(target.second ? target.second : height),
                                float(target.first ? target.first : width)};
    const auto sizes = at::from_blob(const_cast<float*>(size_cond), {1, 6}, at::kFloat).clone();
    out.y_cond = model.sdxl_vector(pos.pooled, sizes).repeat({b, 1});
    out.y_uncond = model.sdxl_vector(neg.pooled, sizes).repeat({b, 1});
  }
  return out;
}

}  // namespace fp8s
