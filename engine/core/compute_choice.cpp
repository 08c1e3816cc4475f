// The compute type from the processor (core/compute_choice.h).
#include "core/compute_choice.h"

#include <cstdlib>

#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace fp8s {
namespace {

#if defined(__x86_64__) || defined(__i386__)
uint64_t xgetbv0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

// The instructions count only where the OS saves their registers (XCR0): AVX-512's opmask and ZMM
// state (bits 5-7 with SSE and AVX, 1-2), AMX's tile configuration and data (bits 17-18).
CpuIsa detect_isa() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return CpuIsa::Avx2;  // no OSXSAVE
  const uint64_t xcr0 = xgetbv0();
  if (__get_cpuid_max(0, nullptr) < 7) return CpuIsa::Avx2;
  __cpuid_count(7, 0, a, b, c, d);
  const bool amx_bf16 = (d & (1u << 22)) && (d & (1u << 24));
  const bool avx512f = b & (1u << 16);
  const unsigned max_sub = a;
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  if (max_sub >= 1) __cpuid_count(7, 1, a1, b1, c1, d1);
  const bool avx512_bf16 = avx512f && (a1 & (1u << 5));
  const uint64_t zmm_state = 0xE6;  // bits 1, 2, 5, 6, 7
  const uint64_t amx_state = 0x60000;  // bits 17, 18
  if (amx_bf16 && (xcr0 & amx_state) == amx_state) return CpuIsa::Amx;
  if (avx512_bf16 && (xcr0 & zmm_state) == zmm_state) return CpuIsa::Avx512Bf16;
  return CpuIsa::Avx2;
}
#else
CpuIsa detect_isa() { return CpuIsa::Avx2; }
#endif

const char* isa_display(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Amx: return "AMX-BF16";
    case CpuIsa::Avx512Bf16: return "AVX512-BF16";
    case CpuIsa::Avx2: break;
  }
  return "no BF16 instructions";
}

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Amx: return "amx";
    case CpuIsa::Avx512Bf16: return "avx512bf16";
    case CpuIsa::Avx2: break;
  }
  return "avx2";
}

CpuBf16 cpu_bf16() {
  if (const char* forced = std::getenv("FP8S_CPU_ISA"); forced && *forced) {
    for (CpuIsa isa : {CpuIsa::Avx2, CpuIsa::Avx512Bf16, CpuIsa::Amx}) {
      if (std::string(forced) == cpu_isa_name(isa)) return {isa, true};
    }
    throw InputError(std::string("FP8S_CPU_ISA=") + forced + " is not a CPU kind this app knows: use avx2, avx512bf16 or amx, or unset it");
  }
  static const CpuIsa detected = detect_isa();
  return {detected, false};
}

ComputeChoice resolve_compute(ComputeType requested, bool cuda, const CpuBf16& cpu) {
  const std::string forced = cpu.forced ? std::string(" (FP8S_CPU_ISA=") + cpu_isa_name(cpu.isa) + ")" : "";
  ComputeChoice c;
  if (requested != ComputeType::Auto) {
    c.type = requested;
    c.reason = "as asked";
    if (!cuda && requested == ComputeType::BF16 && !cpu.native()) {
      c.warning = "compute bf16 is emulated on this CPU (no BF16 instructions" + forced +
                  "): it runs several times slower than fp32 here; use --compute auto or fp32";
    }
    return c;
  }
  if (cuda) {
    c.type = ComputeType::BF16;
    c.reason = "auto: the GPU";
  } else if (cpu.native()) {
    c.type = ComputeType::BF16;
    c.reason = std::string("auto: this CPU has ") + isa_display(cpu.isa) + forced;
  } else {
    c.type = ComputeType::FP32;
    c.reason = "auto: this CPU has no BF16 instructions" + forced;
  }
  return c;
}

ComputeChoice resolve_compute(ComputeType requested, bool cuda) {
  // the CPU is asked only when its answer matters (a bad FP8S_CPU_ISA then fails the run by name)
  if (cuda && requested == ComputeType::Auto) return resolve_compute(requested, true, CpuBf16{});
  return resolve_compute(requested, cuda, cpu_bf16());
}

std::string describe(const ComputeChoice& choice) {
  return std::string(compute_type_name(choice.type)) + " (" + choice.reason + ")";
}

std::string auto_compute_label(bool cuda) {
  if (cuda) return "Auto (BF16 on the GPU)";
  const CpuBf16 cpu = cpu_bf16();
  if (!cpu.native()) return "Auto (FP32: no BF16 instructions)";
  return std::string("Auto (BF16: ") + isa_display(cpu.isa) + ")";
}

}  // namespace fp8s
