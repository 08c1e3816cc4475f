#include "families/weight_budget.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace fp8s {

std::string gb_text(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

std::string storage_label(const StorageSpec& s) {
  switch (s.weights) {
    case WeightType::FP32: return "FP32";
    case WeightType::FP16: return "FP16";
    case WeightType::BF16: return "BF16";
    case WeightType::INT8: return "INT8";
    case WeightType::MXFP8: return "MXFP8";
    case WeightType::NVFP4: return "NVFP4";
    default: return "FP8";
  }
}

uint64_t PhaseBytes::peak(std::optional<uint64_t> budget) const {
  const uint64_t d = budget ? std::min(denoiser, *budget + denoiser_staging) : denoiser;
  const uint64_t t = budget && text_staging ? std::min(text, *budget + text_staging) : text;
  return std::max(t, d + vae + working) + process;
}

std::optional<uint64_t> choose_weight_budget(const PhaseBytes& b, uint64_t available, std::optional<uint64_t> requested,
                                             const std::string& what, bool fp8_storage,
                                             const std::function<uint64_t()>& fp8_peak) {
  if (available == 0) return requested;  // unknown: as asked
  if (requested) {
    if (b.peak(requested) > available) {
      throw DoesNotFit(what + " with a " + gb_text(*requested) + " weight budget needs " + gb_text(b.peak(requested)) +
                       ", this machine has " + gb_text(available) + "; use a smaller --weight-budget, or auto");
    }
    return requested;
  }
  if (b.peak(std::nullopt) <= available) return std::nullopt;  // all resident
  if (b.peak(0) > available) {
    std::string msg = what + " needs " + gb_text(b.peak(0)) + " even with every block streamed (working memory, " +
                      "text encoders, autoencoder and two staged blocks), this machine has " + gb_text(available);
    if (!fp8_storage && fp8_peak) {
      const uint64_t need8 = fp8_peak();
      msg += "; FP8 needs " + gb_text(need8) + (need8 <= available ? " (use --weights fp8-e4m3)" : "");
    } else {
      msg += "; use a smaller size or batch";
    }
    throw DoesNotFit(msg);
  }
  // auto: the most the resident blocks may take beside everything else
  uint64_t lo = 0, hi = b.denoiser;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo + 1) / 2;
    if (b.peak(mid) <= available) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

}  // namespace fp8s
