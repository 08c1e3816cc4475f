// Which kernels a run may use and which ones it did: the attention kernel (FP8S_ATTENTION) and
// packed convolution weights (FP8S_PACKED_CONV), parsed once into a typed struct that an engine
// carries (LoadOptions::kernels) and logs; and per-call counts, so that every report names the
// attention kernel and the convolution weight layout that really ran.
#pragma once

#include <cstdint>
#include <string>

namespace fp8s::backend {

// auto: the best the build and CPU have (LibTorch 2.x's fused kernel, else ours on a CPU with AMX,
// else the sliced path); the others force one where it fits the inputs.
enum class AttentionKernel { Auto, Amx, Fused, Sliced };
const char* attention_kernel_name(AttentionKernel kernel);  // auto, amx, fused, sliced

struct KernelOptions {
  AttentionKernel attention = AttentionKernel::Auto;
  bool packed_conv = true;  // pack CPU convolution weights at load where the build can (LibTorch >= 2.4)
  bool operator==(const KernelOptions& o) const { return attention == o.attention && packed_conv == o.packed_conv; }
};
// FP8S_ATTENTION=auto|amx|fused|sliced and FP8S_PACKED_CONV=1|0 (unset: 1 on a CPU with BF16 instructions,
// where auto computes in BF16; 0 elsewhere, core/compute_choice.h). Any other value
// is an InputError naming the variable and the values it takes.
KernelOptions kernel_options_from_environment();
std::string describe(const KernelOptions& options);  // "attention auto, packed convolutions on"

// The calling thread's options: an engine sets its own around loading and generating (KernelScope);
// outside one, the defaults (convolutions packed where auto computes in BF16, as an engine's).
const KernelOptions& current_kernel_options();
class KernelScope {
 public:
  explicit KernelScope(const KernelOptions& options);
  ~KernelScope();
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;

 private:
  const KernelOptions* previous_;
};

// What ran since the last reset, counted per call (all threads).
struct KernelUsage {
  uint64_t attention_amx = 0, attention_fused = 0, attention_sliced = 0;
  uint64_t conv_packed = 0, conv_channels_last = 0, conv_nchw = 0;
  // --fp8-compute: FP8 linear calls through _scaled_mm, and those decoded instead (see Fp8MmPlan)
  uint64_t linear_fp8_mm = 0, linear_fp8_decoded = 0;
};
void reset_kernel_usage();
KernelUsage kernel_usage();
void count_attention(AttentionKernel kernel);  // amx, fused or sliced
enum class ConvLayout { Packed, ChannelsLast, Nchw };
void count_conv(ConvLayout layout);
void count_fp8_linear(bool scaled_mm);
// "fused", "amx", "sliced", or several joined by '+' ("amx+sliced": AMX where it fits); "none".
std::string attention_used(const KernelUsage& usage);
// "packed (oneDNN blocked)", "channels_last", "NCHW", or several joined by '+'; "none".
std::string conv_layout_used(const KernelUsage& usage);

}  // namespace fp8s::backend
