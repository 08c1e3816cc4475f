// Kernel choices and what ran (kernel_options.h).
#include "backend/kernel_options.h"

#include <atomic>
#include <cstdlib>
#include <vector>

#include "core/compute_choice.h"
#include "core/error.h"

namespace fp8s::backend {
namespace {

// Packed convolutions by default where auto computes in BF16 (a CPU with BF16 instructions): an FP32
// convolution would unpack a packed weight at every call. A bad FP8S_CPU_ISA is left to the run,
// whose error names it.
bool packed_conv_by_default() {
  try {
    return cpu_bf16().native();
  } catch (const InputError&) {
    return true;
  }
}

// Outside an engine's KernelScope: the defaults, the same as an engine's without the environment's
// overrides, so that a model loaded in-process holds what the CLI's would.
const KernelOptions& defaults() {
  static const KernelOptions d = [] {
    KernelOptions o;
    o.packed_conv = packed_conv_by_default();
    return o;
  }();
  return d;
}
thread_local const KernelOptions* t_current = nullptr;

std::atomic<uint64_t> g_attention[3];  // amx, fused, sliced
std::atomic<uint64_t> g_conv[3];       // packed, channels_last, NCHW
std::atomic<uint64_t> g_fp8_linear[2];  // through _scaled_mm, decoded

std::string joined(const std::vector<std::pair<uint64_t, const char*>>& counts) {
  std::string out;
  for (const auto& [n, name] : counts) {
    if (n) out += (out.empty() ? "" : "+") + std::string(name);
  }
  return out.empty() ? "none" : out;
}

}  // namespace

const char* attention_kernel_name(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::Auto: return "auto";
    case AttentionKernel::Amx: return "amx";
    case AttentionKernel::Fused: return "fused";
    case AttentionKernel::Sliced: return "sliced";
  }
  return "auto";
}

KernelOptions kernel_options_from_environment() {
  KernelOptions o;
  if (const char* e = std::getenv("FP8S_ATTENTION"); e && *e) {
    const std::string v = e;
    bool known = false;
    for (auto k : {AttentionKernel::Auto, AttentionKernel::Amx, AttentionKernel::Fused, AttentionKernel::Sliced}) {
      if (v == attention_kernel_name(k)) o.attention = k, known = true;
    }
    if (!known) throw InputError("FP8S_ATTENTION=" + v + " is not a kernel: use auto, amx, fused or sliced (or unset it)");
  }
  o.packed_conv = packed_conv_by_default();
  if (const char* e = std::getenv("FP8S_PACKED_CONV"); e && *e) {
    const std::string v = e;
    if (v != "0" && v != "1") throw InputError("FP8S_PACKED_CONV=" + v + " is not 0 or 1 (or unset it)");
    o.packed_conv = v == "1";
  }
  return o;
}

std::string describe(const KernelOptions& options) {
  return std::string("attention ") + attention_kernel_name(options.attention) + ", packed convolutions " +
         (options.packed_conv ? "on" : "off");
}

const KernelOptions& current_kernel_options() { return t_current ? *t_current : defaults(); }

KernelScope::KernelScope(const KernelOptions& options) : previous_(t_current) { t_current = &options; }
KernelScope::~KernelScope() { t_current = previous_; }

void reset_kernel_usage() {
  for (auto& c : g_attention) c.store(0);
  for (auto& c : g_conv) c.store(0);
  for (auto& c : g_fp8_linear) c.store(0);
}

KernelUsage kernel_usage() {
  KernelUsage u;
  u.attention_amx = g_attention[0].load();
  u.attention_fused = g_attention[1].load();
  u.attention_sliced = g_attention[2].load();
  u.conv_packed = g_conv[0].load();
  u.conv_channels_last = g_conv[1].load();
  u.conv_nchw = g_conv[2].load();
  u.linear_fp8_mm = g_fp8_linear[0].load();
  u.linear_fp8_decoded = g_fp8_linear[1].load();
  return u;
}

void count_attention(AttentionKernel kernel) {
  if (kernel == AttentionKernel::Amx) g_attention[0]++;
  if (kernel == AttentionKernel::Fused) g_attention[1]++;
  if (kernel == AttentionKernel::Sliced) g_attention[2]++;
}

void count_conv(ConvLayout layout) { g_conv[static_cast<int>(layout)]++; }

void count_fp8_linear(bool scaled_mm) { g_fp8_linear[scaled_mm ? 0 : 1]++; }

std::string attention_used(const KernelUsage& u) {
  return joined({{u.attention_amx, "amx"}, {u.attention_fused, "fused"}, {u.attention_sliced, "sliced"}});
}

std::string conv_layout_used(const KernelUsage& u) {
  return joined({{u.conv_packed, "packed (oneDNN blocked)"}, {u.conv_channels_last, "channels_last"}, {u.conv_nchw, "NCHW"}});
}

}  // namespace fp8s::backend
