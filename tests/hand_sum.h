// Tests' hand-summed model files: a copy of a safetensors file with some weights replaced by
// values computed in the test (W + multiplier · up · down, summed there in FP32), to compare a
// LoRA's merged and online paths against.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/nn.h"

namespace fp8s::test {

// `from` copied to `to` with `replaced` (key -> F32 tensor of the same shape) in place of the
// file's tensors, every other tensor byte for byte, the metadata kept.
inline void write_with_tensors(const std::string& from, const std::string& to, std::map<std::string, at::Tensor> replaced) {
  const SafetensorsFile base(from);
  std::vector<TensorSpec> specs;
  for (const auto& r : base.tensors()) specs.push_back({r.name, replaced.count(r.name) ? Dtype::F32 : r.dtype, r.shape});
  SafetensorsWriter w(to, specs, base.metadata());
  for (const auto& r : base.tensors()) {
    if (replaced.count(r.name)) {
      const auto t = replaced[r.name].to(at::kFloat).contiguous();
      w.append(t.data_ptr<float>(), r.numel() * 4);
    } else {
      std::vector<uint8_t> bytes(r.nbytes());
      base.read(r, bytes.data());
      w.append(bytes.data(), bytes.size());
    }
  }
  w.commit();
}

}  // namespace fp8s::test
