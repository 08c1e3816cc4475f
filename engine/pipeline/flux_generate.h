// Flux generation for the engine: the prompt encoded by T5-XXL and CLIP-L (emphasis markup
// removed: Flux was trained on plain captions), the text encoders dropped when the transformer's
// phase would not fit beside them, BFL's sampler with distilled guidance (and CFG when cfg != 1),
// the autoencoder, Forge's infotext.
#pragma once

#include <atomic>
#include <string>

#include "pipeline/flux_model.h"
#include "pipeline/request.h"

namespace fp8s {

class ClipTokenizer;
class T5Tokenizer;

// Bytes a component set takes in a storage (FP8: one byte per transformer/T5/CLIP Linear weight,
// 16 bits for the rest), from the file headers alone.
FluxComponentBytes flux_storage_bytes(const FluxFiles& files, const StorageSpec& storage);
// The sampling phase's working memory beyond the weights at width x height: the transformer's
// activations or the autoencoder's full-resolution levels, whichever is larger.
uint64_t flux_working_bytes(int width, int height, int batch, int hidden_size);
// The transformer's width (img_in's rows), off the file's header.
int flux_hidden_size(const FluxFiles& files);
// The peak of a generation at width x height: the larger of the text phase (T5 + CLIP-L) and the
// transformer phase (transformer + autoencoder + activations), plus what both need.
uint64_t flux_peak_bytes(const FluxComponentBytes& b, int width, int height, int batch, int hidden_size);
// Refuses (InputError) a storage whose peak exceeds `available`, with the numbers: "FP16 Flux needs
// 33.4 GB, this machine has 23.4 GB; FP8 needs 17.9 GB".
void check_flux_fits(const FluxFiles& files, const StorageSpec& storage, int width, int height, int batch,
                     uint64_t available);

struct FluxRunContext {
  FluxModel* model = nullptr;
  const ClipTokenizer* clip = nullptr;
  const T5Tokenizer* t5 = nullptr;
  std::string model_name, model_hash;
  double load_ms = 0;
  int native_size = 1024;
  std::string lora_dir;  // where <lora:NAME:...> tags are looked up
  bool t5_on_cpu = false;  // FluxPaths::t5_on_cpu
};

void validate_flux_request(const GenerationRequest& r, const FluxRunContext& ctx);
GenerationResult generate_flux(const FluxRunContext& ctx, const GenerationRequest& request, Observer* observer,
                               const std::atomic<bool>& cancel);
// The T5 length a request uses (t5_max_length, else 512 dev / 256 schnell).
int flux_t5_length(const GenerationRequest& r, bool dev);
// Forge's infotext for a Flux image.
std::string format_flux_infotext(const GenerationRequest& r, uint64_t seed, const std::string& model_name,
                                 const std::string& model_hash, bool dev);

}  // namespace fp8s
