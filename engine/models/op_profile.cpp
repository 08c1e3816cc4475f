#include "models/op_profile.h"

#include <atomic>

namespace fp8s {

namespace {
std::atomic<bool> g_profiling{false};
std::array<std::atomic<uint64_t>, kOpKinds> g_op_ns{};
std::array<std::atomic<uint64_t>, kOpKinds> g_op_calls{};
}  // namespace

const char* op_kind_name(OpKind kind) {
  static const char* names[kOpKinds] = {"conv", "linear", "attention", "norms", "casts", "FP8 decode"};
  return names[static_cast<int>(kind)];
}
void set_op_profiling(bool on) { g_profiling.store(on); }
bool op_profiling() { return g_profiling.load(std::memory_order_relaxed); }
OpProfile op_profile() {
  OpProfile p;
  for (int i = 0; i < kOpKinds; ++i) {
    p.ms[static_cast<std::size_t>(i)] = g_op_ns[static_cast<std::size_t>(i)].load() / 1e6;
    p.calls[static_cast<std::size_t>(i)] = g_op_calls[static_cast<std::size_t>(i)].load();
  }
  return p;
}
void reset_op_profile() {
  for (int i = 0; i < kOpKinds; ++i) {
    g_op_ns[static_cast<std::size_t>(i)].store(0);
    g_op_calls[static_cast<std::size_t>(i)].store(0);
  }
}
void add_op_time(OpKind kind, double ms) {
  g_op_ns[static_cast<std::size_t>(kind)].fetch_add(static_cast<uint64_t>(ms * 1e6));
  g_op_calls[static_cast<std::size_t>(kind)].fetch_add(1);
}

}  // namespace fp8s
