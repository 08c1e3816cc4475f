#include "pipeline/run_support.h"

#include "core/error.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "backend/kernel_options.h"
#include "core/compute_choice.h"
#include "core/logging.h"
#include "core/sha256.h"
#include "memory/process_memory.h"
#include "memory/tracking_allocator.h"

namespace fp8s {

at::ScalarType compute_dtype(ComputeType type, const at::Device& device) {
  switch (type) {
    case ComputeType::Auto: return compute_dtype(resolve_compute(type, device.is_cuda()).type, device);
    case ComputeType::FP32: return at::kFloat;
    case ComputeType::BF16:
      // BF16 where the card has it (compute capability 8.0+), FP16 on older NVIDIA cards
      return device.is_cuda() && backend::compute_capability(device) < 80 ? at::kHalf : at::kBFloat16;
    case ComputeType::FP16:
      if (device.is_cuda()) return at::kHalf;
      throw InputError("--compute fp16 needs a CUDA device; on the CPU use bf16 or fp32");
  }
  return at::kFloat;
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// A1111's legacy model hash: sha256 of 64 KiB at offset 1 MiB, first 8 hex digits.
std::string legacy_model_hash(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::vector<uint8_t> buf(0x10000);
  const ssize_t n = ::pread(fd, buf.data(), buf.size(), 0x100000);
  ::close(fd);
  if (n < 0) return "";  // a model folder has no such hash (a file under 1 MiB hashes nothing, as in A1111)
  Sha256 h;
  if (n > 0) h.update(buf.data(), static_cast<std::size_t>(n));
  return h.hex().substr(0, 8);
}

std::string stem_of(const std::string& path) {
  auto slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  auto dot = name.find_last_of('.');
  return dot == std::string::npos ? name : name.substr(0, dot);
}

// The request's VRAM peaks across phases (each phase resets the allocator's peak).
void VramPeaks::add(const backend::DeviceMemory& m) {
  allocated = std::max(allocated, m.allocated_peak);
  reserved = std::max(reserved, m.reserved_peak);
  used = std::max(used, m.used);
}

// A phase begins: the device's peak counters start again (after the previous phase's are kept).
void begin_phase(const at::Device& device, VramPeaks* peaks) {
  if (!device.is_cuda()) return;
  backend::synchronize(device);
  if (peaks) peaks->add(backend::device_memory(device));
  backend::reset_device_peak(device);
}

void emit_memory(Observer* observer, Phase phase, int step, Clock::time_point start,
                 const at::Device& device) {
  if (!observer) return;
  const auto mem = read_process_memory();
  MemorySample s;
  s.phase = phase;
  s.step = step;
  s.t_ms = ms_since(start);
  s.rss_bytes = mem.rss_bytes;
  s.rss_peak_bytes = mem.rss_peak_bytes;
  const auto tracked = tracked_bytes();
  s.tracked_live_bytes = tracked.live;
  s.tracked_peak_bytes = tracked.peak;
  s.gpu = device.is_cuda();
  const auto vram = backend::device_memory(device);
  s.cuda_allocated_bytes = vram.allocated;
  s.cuda_reserved_bytes = vram.reserved;
  s.cuda_allocated_peak_bytes = vram.allocated_peak;
  s.cuda_reserved_peak_bytes = vram.reserved_peak;
  observer->onMemory(s);
}

void finish_result(GenerationResult& result, VramPeaks& vram, const at::Device& device, Observer* observer,
                   Clock::time_point start) {
  result.rss_peak_bytes = read_process_memory().rss_peak_bytes;
  result.tracked_peak_bytes = tracked_bytes().peak;
  begin_phase(device, &vram);
  result.vram_peak_bytes = vram.allocated;
  result.vram_reserved_peak_bytes = vram.reserved;
  result.vram_used_peak_bytes = vram.used;
  if (observer) observer->onPhase({Phase::Done, result.timing.total_ms});
  emit_memory(observer, Phase::Done, -1, start, device);
  const auto usage = backend::kernel_usage();
  result.attention_kernel = backend::attention_used(usage);
  result.conv_layout = backend::conv_layout_used(usage);
  if (usage.linear_fp8_decoded > 0) {  // --fp8-compute did not reach every FP8 layer: said, never silent
    log().warn("--fp8-compute: {} of {} FP8 linear calls ran in FP8 (_scaled_mm); {} were decoded instead (E5M2 or "
               "sizes not multiples of 16, or per-channel scales with FP16 compute: use --compute bf16)",
               usage.linear_fp8_mm, usage.linear_fp8_mm + usage.linear_fp8_decoded, usage.linear_fp8_decoded);
  }
}

}  // namespace fp8s
