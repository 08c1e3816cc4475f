// What every generation path (SD and Flux) reports the same way: clocks, phase boundaries with the
// device's memory peaks, memory samples for the observer, and the A1111 model name and hash.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <string>

#include "backend/backend.h"
#include "pipeline/request.h"

namespace fp8s {

// The dtype of a compute type on a device (FP16 only on CUDA: the CPU has no fast FP16 kernels; Auto
// as resolve_compute chooses).
at::ScalarType compute_dtype(ComputeType type, const at::Device& device);

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point start);

// A1111's legacy model hash: sha256 of 64 KiB at offset 1 MiB, first 8 hex digits.
std::string legacy_model_hash(const std::string& path);
// The file name without folder and extension (A1111's "Model:").
std::string stem_of(const std::string& path);

// The request's VRAM peaks across phases (each phase resets the allocator's peak).
struct VramPeaks {
  uint64_t allocated = 0, reserved = 0;
  uint64_t used = 0;  // the device's used memory at phase ends (the cache only grows within a request)
  void add(const backend::DeviceMemory& m);
};
// A phase begins: the device's peak counters start again (after the previous phase's are kept).
void begin_phase(const at::Device& device, VramPeaks* peaks);
// Sends the process's (and device's) memory now to the observer, if any.
void emit_memory(Observer* observer, Phase phase, int step, Clock::time_point start, const at::Device& device);

// The end of a request: its memory peaks (process, tracked tensors, device), the Done phase for
// the observer, and the kernels that ran.
void finish_result(GenerationResult& result, VramPeaks& vram, const at::Device& device, Observer* observer,
                   Clock::time_point start);

}  // namespace fp8s
