// The exact key layout of a single-file checkpoint for a configuration: the names, shapes, roles
// and dtypes the modules of unet.cpp, vae.cpp and text_encoder.cpp hold (test_architecture checks
// both against each other and against the released files).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/config.h"
#include "models/tensor_roles.h"

namespace fp8s {

struct LayoutEntry {
  std::string name;
  std::vector<int64_t> shape;
  TensorRole role = TensorRole::Other;
  Component component = Component::Other;
  Dtype dtype = Dtype::F32;  // for float tensors: the checkpoint's float type is applied by callers
  bool is_integer() const { return dtype == Dtype::I64 || dtype == Dtype::I32; }
};

// Every tensor of a single-file checkpoint for `config`, sorted by name. Float tensors carry
// `float_dtype`; DDPM buffers and EMA decay stay F32; position ids I64; EMA num_updates I32.
std::vector<LayoutEntry> checkpoint_layout(const ModelConfig& config, Dtype float_dtype);

}  // namespace fp8s
