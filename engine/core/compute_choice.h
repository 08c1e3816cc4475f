// The compute type chosen from the processor (issue 53). BF16 arithmetic is fast on a CPU only where
// the CPU has BF16 instructions (AVX512-BF16 or AMX-BF16); elsewhere (AVX2 only: most desktop CPUs)
// oneDNN and LibTorch emulate it through conversions, about 10x slower than FP32. So `auto`, the
// default, is BF16 on such a CPU and FP32 on the others; on CUDA it is BF16 (FP16 on a card without
// BF16, compute_dtype's rule). LibTorch-free: the CLI, the GUI's Compute box and the engine share it.
#pragma once

#include <string>

#include "core/types.h"

namespace fp8s {

// What the processor offers for BF16 arithmetic. Forced by FP8S_CPU_ISA=avx2|avx512bf16|amx
// (tests cover every decision on any machine), else read with cpuid and the OS's saved state (xgetbv).
enum class CpuIsa { Avx2, Avx512Bf16, Amx };
const char* cpu_isa_name(CpuIsa isa);  // "avx2", "avx512bf16", "amx"
struct CpuBf16 {
  CpuIsa isa = CpuIsa::Avx2;
  bool forced = false;  // FP8S_CPU_ISA set it
  bool native() const { return isa != CpuIsa::Avx2; }
};
// Throws InputError on an FP8S_CPU_ISA it does not know.
CpuBf16 cpu_bf16();

struct ComputeChoice {
  ComputeType type = ComputeType::FP32;  // never Auto
  std::string reason;   // "auto: this CPU has no BF16 instructions"
  std::string warning;  // non-empty: an explicit choice that is slow here
};
// The compute type a request runs in: `requested` itself unless Auto (with a warning for BF16 on a
// CPU without BF16 instructions), else the processor's.
ComputeChoice resolve_compute(ComputeType requested, bool cuda);
ComputeChoice resolve_compute(ComputeType requested, bool cuda, const CpuBf16& cpu);
// The start-up log line: "compute: fp32 (auto: this CPU has no BF16 instructions)".
std::string describe(const ComputeChoice& choice);
// What the GUI's Compute box shows for Auto: "Auto (FP32: no BF16 instructions)".
std::string auto_compute_label(bool cuda);

}  // namespace fp8s
