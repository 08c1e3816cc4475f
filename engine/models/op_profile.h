// Where a step's time goes, by kind of operation (bench --section generate --profile): the model
// building blocks time themselves while profiling is on. CPU ops are synchronous, so wall time per
// call is the op's time; on a GPU the device is synchronised around each timed call.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

namespace fp8s {

enum class OpKind { Conv, Linear, Attention, Norm, Cast, Decode };
constexpr int kOpKinds = 6;
const char* op_kind_name(OpKind kind);  // "conv", "linear", ...

struct OpProfile {
  std::array<double, kOpKinds> ms{};
  std::array<uint64_t, kOpKinds> calls{};
  OpProfile& operator+=(const OpProfile& o) {
    for (std::size_t i = 0; i < ms.size(); ++i) {
      ms[i] += o.ms[i];
      calls[i] += o.calls[i];
    }
    return *this;
  }
};

void set_op_profiling(bool on);
bool op_profiling();
OpProfile op_profile();
void reset_op_profile();
void add_op_time(OpKind kind, double ms);

// Adds the time from construction to destruction to `kind` when profiling is on.
class OpTimer {
 public:
  explicit OpTimer(OpKind kind) : kind_(kind), on_(op_profiling()) {
    if (on_) start_ = std::chrono::steady_clock::now();
  }
  ~OpTimer() {
    if (on_) add_op_time(kind_, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count());
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  OpKind kind_;
  bool on_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace fp8s
