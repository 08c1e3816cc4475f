// The name-for-name weight loader: every parameter and buffer of a module read from a
// safetensors file tensor by tensor, each in its storage type. FP8 tensors of any tool's layout
// (models/fp8_files.h) are read by role: a quantisable layer's weight keeps its codes and scale
// (one byte a weight) when the storage is FP8 of its format, and is decoded otherwise; every other
// F8 tensor (bias, norm, embedding, VAE) is decoded with the codec, never used as raw codes.
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <set>

#include "backend/backend.h"
#include "backend/kernel_options.h"
#include "core/cancel.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/strings.h"
#include "models/convert.h"
#include "models/fp8_files.h"
#include "memory/process_memory.h"
#include "models/loader_detail.h"
#include "models/nn.h"
#include "models/tensor_roles.h"

namespace fp8s {

at::Tensor read_fp8_codes(const SafetensorsFile& file, const TensorRecord& record) {
  at::Tensor out = at::empty(std::vector<int64_t>(record.shape.begin(), record.shape.end()), at::kByte);
  file.read(record, out.data_ptr());
  return out;
}

at::Tensor read_tensor(const SafetensorsFile& file, const TensorRecord& record) {
  std::vector<int64_t> shape(record.shape.begin(), record.shape.end());
  switch (record.dtype) {
    case Dtype::F32:
    case Dtype::F16:
    case Dtype::BF16: {
      at::Tensor raw = at::empty({static_cast<int64_t>(record.nbytes())}, at::kByte);
      file.read(record, raw.data_ptr());
      at::Tensor out = at::empty(shape, at::kFloat);
      widen_to_f32(raw.data_ptr(), record.dtype, static_cast<std::size_t>(record.numel()),
                   out.data_ptr<float>(), file.path() + ": tensor '" + record.name + "'");
      return out;
    }
    case Dtype::I64: {
      at::Tensor out = at::empty(shape, at::kLong);
      file.read(record, out.data_ptr());
      return out;
    }
    case Dtype::I32: {
      at::Tensor out = at::empty(shape, at::kInt);
      file.read(record, out.data_ptr());
      return out;
    }
    case Dtype::F8_E4M3:
    case Dtype::F8_E5M2: {
      // FP8 values, decoded by the codec (raw codes are never numbers; the loader reads codes apart)
      at::Tensor out = at::empty(shape, at::kFloat);
      decode_fp8_into(read_fp8_codes(file, record), fp8_format_of(record.dtype), {}, out);
      return out;
    }
    case Dtype::U8: {
      at::Tensor out = at::empty(shape, at::kByte);
      file.read(record, out.data_ptr());
      return out;
    }
    default:
      throw InputError(file.path() + ": tensor '" + record.name + "' has unsupported dtype " +
                       dtype_name(record.dtype));
  }
}

namespace {

std::string shape_str(at::IntArrayRef s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

bool shape_equals(const std::vector<int64_t>& a, at::IntArrayRef b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

// The file's "has this tensor" test, as find_scale_key / find_input_scale_key take it.
std::function<bool(const std::string&)> lookup(const SafetensorsFile& file) {
  return [&file](const std::string& name) { return file.find(name) != nullptr; };
}

// A [N] scale shaped to multiply a weight [N, ...] along its first dimension ([1]: a scalar).
at::Tensor scale_for(const at::Tensor& scale, int64_t dims) {
  if (scale.numel() == 1) return scale.reshape({});
  std::vector<int64_t> shape(static_cast<std::size_t>(dims), 1);
  shape[0] = -1;
  return scale.view(shape);
}

// The scale of the weight `rec` in any spelling and shape the readers write (0-d, [1], [out],
// [out,1]; F32, BF16 or F16) as F32 [1] or [out], and the tensor it came from; values undefined
// and key empty when the file has none.
struct FileScale {
  std::string key;
  at::Tensor values;
};
FileScale read_weight_scale(const SafetensorsFile& file, const TensorRecord& rec) {
  const std::string key = find_scale_key(lookup(file), rec.name);
  if (key.empty()) return {};
  const at::Tensor scale = read_tensor(file, file.at(key)).reshape({-1});
  const int64_t out = rec.shape.empty() ? 1 : rec.shape[0];
  if (scale.numel() != 1 && scale.numel() != out) {
    throw InputError(file.path() + ": scale '" + key + "' has " + std::to_string(scale.numel()) +
                     " values for the " + std::to_string(out) + " output channels of '" + rec.name + "'");
  }
  return {key, scale};
}

// The tensor `<base><part>` of a comfy_quant layer, checked against the dtypes and shape its format
// stores ({} shape: any of `shapes`).
const TensorRecord& block_part(const SafetensorsFile& file, const std::string& base, const char* part, const QuantLayerConf& conf,
                               std::initializer_list<Dtype> dtypes, const std::vector<std::vector<int64_t>>& shapes) {
  const std::string what = file.path() + ": layer '" + base.substr(0, base.size() - 1) + "' (" + quant_format_name(conf.format) + ")";
  const auto* rec = file.find(base + part);
  if (!rec) throw InputError(what + " has no '" + part + "'; the file is damaged or incomplete");
  if (std::find(dtypes.begin(), dtypes.end(), rec->dtype) == dtypes.end()) {
    throw InputError(what + ": '" + part + "' is " + dtype_name(rec->dtype) + ", not what the format stores; the file is damaged");
  }
  for (const auto& shape : shapes) {
    if (rec->shape == shape) return *rec;
  }
  std::string want;
  for (const auto& shape : shapes) want += (want.empty() ? "" : " or ") + shape_str(shape);
  throw InputError(what + ": '" + part + "' has shape " + shape_str(rec->shape) + ", expected " + want +
                   " for the model's layer; the file is not this model or is damaged");
}

// A comfy_quant integer or block layer as its file stores it (models/weight_store.h BlockWeight),
// its logical [N, K] from the model, every stored tensor's dtype and shape checked.
std::shared_ptr<BlockWeight> read_block_weight(const SafetensorsFile& file, const std::string& key, const QuantLayerConf& conf,
                                               int64_t n, int64_t k) {
  const std::string base = key.substr(0, key.size() - 6);  // "<layer>."
  const std::string what = file.path() + ": layer '" + base.substr(0, base.size() - 1) + "' (" + quant_format_name(conf.format) + ")";
  if (file.find(base + "pre_quant_scale")) {
    throw InputError(what + " has a pre_quant_scale (activation smoothing), which FP8 Studio does not apply; use another file of this model");
  }
  const int group = conf.format == QuantFormat::AwqW4A16 ? conf.group_size : conf.format == QuantFormat::SvdquantW4A4 ? 64 : conf.convrot_group;
  const bool grouped = conf.convrot || conf.format == QuantFormat::ConvRotW4A4 || conf.format == QuantFormat::AwqW4A16 ||
                       conf.format == QuantFormat::SvdquantW4A4;
  const bool four_bit = conf.format == QuantFormat::ConvRotW4A4 || conf.format == QuantFormat::AwqW4A16 || conf.format == QuantFormat::SvdquantW4A4;
  if ((grouped && k % group != 0) || (four_bit && k % 2 != 0)) {
    throw InputError(what + ": " + std::to_string(k) + " input columns do not divide into its groups of " + std::to_string(group) +
                     "; the file is not this model or is damaged");
  }
  const StoredShape st = stored_shape(conf, n, k);
  auto b = std::make_shared<BlockWeight>();
  b->conf = conf, b->rows = n, b->cols = k;
  const bool int8 = conf.format == QuantFormat::Int8;
  const auto data_dtype = int8 || conf.format == QuantFormat::ConvRotW4A4 || conf.format == QuantFormat::AwqW4A16 ||
                                  conf.format == QuantFormat::SvdquantW4A4
                              ? Dtype::I8
                              : conf.format == QuantFormat::Mxfp8 ? Dtype::F8_E4M3 : Dtype::U8;
  b->data = read_fp8_codes(file, block_part(file, base, "weight", conf, {data_dtype}, {{st.data_rows, st.data_cols}}));
  if (data_dtype == Dtype::I8) b->data = b->data.view(at::kChar);
  const auto f32 = [&](const char* part, std::initializer_list<Dtype> dtypes, const std::vector<std::vector<int64_t>>& shapes) {
    return read_tensor(file, block_part(file, base, part, conf, dtypes, shapes)).reshape({-1}).contiguous();
  };
  const auto sixteen = {Dtype::BF16, Dtype::F16, Dtype::F32};
  switch (conf.format) {
    case QuantFormat::Int8:
      b->scale = f32("weight_scale", {Dtype::F32, Dtype::BF16, Dtype::F16}, conf.convrot ? std::vector<std::vector<int64_t>>{{n, 1}, {n}}
                                                                                          : std::vector<std::vector<int64_t>>{{}, {1}, {n, 1}, {n}});
      break;
    case QuantFormat::Mxfp8:
      b->scale = read_fp8_codes(file, block_part(file, base, "weight_scale", conf, {Dtype::F8_E8M0, Dtype::U8}, {{st.scale_rows, st.scale_cols}}));
      break;
    case QuantFormat::Nvfp4:
      b->scale = read_fp8_codes(file, block_part(file, base, "weight_scale", conf, {Dtype::F8_E4M3, Dtype::U8}, {{st.scale_rows, st.scale_cols}}));
      b->scale_2 = f32("weight_scale_2", {Dtype::F32}, {{}, {1}})[0].item<float>();
      break;
    case QuantFormat::ConvRotW4A4:
      b->scale = f32("weight_scale", {Dtype::F32, Dtype::BF16, Dtype::F16}, {{n}, {n, 1}});
      break;
    case QuantFormat::AwqW4A16:
      b->scale = f32("weight_scale", sixteen, {{k / group, n}});
      b->zeros = f32("weight_zeros", sixteen, {{k / group, n}});
      break;
    case QuantFormat::SvdquantW4A4: {
      b->scale = f32("weight_scale", sixteen, {{k / 64, n}});
      b->smooth = f32("weight_smooth_factor", sixteen, {{k}});
      const auto* down = file.find(base + "weight_proj_down");
      const int64_t rank = down && down->shape.size() == 2 ? down->shape[1] : 0;
      b->down = f32("weight_proj_down", sixteen, {{k, rank}});
      b->up = f32("weight_proj_up", sixteen, {{n, rank}});
      break;
    }
    default:
      throw std::logic_error("read_block_weight: an FP8 format");
  }
  return b;
}

// The layer holds `blocks` (null on the meta device) behind a placeholder of its logical shape.
void hold_blocks(QuantisedLayer& layer, std::shared_ptr<const BlockWeight> blocks, const at::Device& device) {
  WeightStore& st = layer.store;
  st.weight.set_data(at::empty({1}, st.weight.options().device(device)).expand(st.weight.sizes()));
  st.fp8 = false;
  st.packed = at::Tensor();
  st.blocks = std::move(blocks);
}

// Quantises or copies a checkpoint weight into a layer's storage on `device`; with `addend`
// (FP32, the weight's shape), the weight is the file's value plus it (a "diff" file's tensors).
void load_quantised(QuantisedLayer& layer, const SafetensorsFile& file, const TensorRecord& rec,
                    const std::string& key, const StorageSpec& storage, const at::Device& device,
                    const at::Tensor& addend = {}) {
  if (const auto conf = comfy_quant_layer(file, key); conf && is_block_format(conf->format)) {
    // a comfy_quant integer or block layer stays as stored, whatever the storage type
    const auto sizes = layer.store.weight.sizes();
    if (sizes.size() != 2) throw InputError(file.path() + ": '" + key + "' is stored as " + quant_format_name(conf->format) +
                                         ", but the model's layer is not a Linear one (ComfyUI quantises Linear layers only); the file is damaged");
    hold_blocks(layer, device.is_meta() ? nullptr : read_block_weight(file, key, *conf, sizes[0], sizes[1]), device);
    const std::string input_key = find_input_scale_key(lookup(file), key);
    if (!input_key.empty() && !device.is_meta()) layer.store.input_scale = read_tensor(file, file.at(input_key)).reshape({-1}).narrow(0, 0, 1).to(device);
    return;
  }
  const bool src_fp8 = is_fp8_dtype(rec.dtype);
  if (device.is_meta()) {  // a layout check: shapes and types, no values read
    const bool fp8 = is_quantised(storage.weights);  // a one-byte stand-in for every quantised type
    const auto sizes = layer.store.weight.sizes().vec();
    layer.place(at::empty(sizes, at::TensorOptions().dtype(fp8 ? at::kByte : float_storage_dtype(storage.weights))), fp8,
                fp8 ? fp8_format(storage.weights) : layer.store.format, {}, device);
    return;
  }
  // Every spelling of the scale multiplies (also a 16-bit weight's: ComfyUI's legacy files carry
  // scales of 1 on layers they left unquantised).
  const at::Tensor scale = read_weight_scale(file, rec).values;
  const std::string input_key = find_input_scale_key(lookup(file), key);
  if (!input_key.empty()) layer.store.input_scale = read_tensor(file, file.at(input_key)).reshape({-1}).narrow(0, 0, 1).to(device);
  at::Tensor w;  // FP32, when the weight goes through a conversion
  if (src_fp8) {
    at::Tensor codes = read_fp8_codes(file, rec);
    const Fp8Format src_format = fp8_format_of(rec.dtype);
    if (is_fp8(storage.weights) && fp8_format(storage.weights) == src_format && !addend.defined()) {
      // FP8 storage of the checkpoint's own format: its codes and scale as they are, whatever
      // scaling the storage names (quantising FP8 values again could only lose, in the same bytes).
      layer.place(codes, true, src_format, scale, device);
      return;
    }
    // Any other storage holds the FP8 values decoded (16/32-bit: an upcast, 2 or 4 bytes a
    // weight; the other FP8 format: quantised again from them).
    w = at::empty(codes.sizes(), at::kFloat);
    decode_fp8_into(codes, src_format, scale, w);
  }
  const at::ScalarType target = float_storage_dtype(storage.weights);
  // INT8/MXFP8/NVFP4 quantise Linear weights only (ComfyUI has no quantised Conv2d): a convolution stays 16-bit
  const bool blocks = is_block_storage(storage.weights) && layer.store.weight.dim() == 2;
  const bool quantise = is_fp8(storage.weights) || blocks;
  if (!src_fp8 && !scale.defined() && !addend.defined() && !quantise && ((rec.dtype == Dtype::F16 && target == at::kHalf) ||
                                   (rec.dtype == Dtype::BF16 && target == at::kBFloat16))) {
    at::Tensor v = at::empty(layer.store.weight.sizes(), at::TensorOptions().dtype(target));
    file.read(rec, v.data_ptr());
    layer.place(v, false, layer.store.format, {}, device);
    return;
  }
  if (!w.defined()) {
    w = read_tensor(file, rec);
    if (scale.defined()) w.mul_(scale_for(scale, w.dim()));
  }
  if (addend.defined()) w.add_(addend);
  if (!quantise) {
    layer.place(w.to(float_storage_dtype(storage.weights)), false, layer.store.format, {}, device);
    return;
  }
  if (blocks) {
    hold_blocks(layer, quantise_block_weight(w, storage.weights), device);
    return;
  }
  const Fp8Format format = fp8_format(storage.weights);
  at::Tensor codes = at::empty(w.sizes(), at::kByte);
  const auto scales = quantize_weight(w.data_ptr<float>(), w.size(0), w.numel(), format,
                                      storage.scale, codes.data_ptr<uint8_t>());
  at::Tensor new_scale;
  if (!scales.empty()) {
    new_scale = at::from_blob(const_cast<float*>(scales.data()), {static_cast<int64_t>(scales.size())}, at::kFloat).clone();
  }
  layer.place(codes, true, format, new_scale, device);
}

bool in_streamed_block(const std::vector<std::string>& streamed, const std::string& name) {
  for (const auto& p : streamed) {
    if (name.compare(0, p.size(), p) == 0) return true;
  }
  return false;
}

}  // namespace

namespace detail {

std::vector<std::pair<std::string, QuantisedLayer*>> quantised_layers(torch::nn::Module& module) {
  std::vector<std::pair<std::string, QuantisedLayer*>> layers;
  for (const auto& item : module.named_modules("", false)) {
    if (auto* layer = dynamic_cast<QuantisedLayer*>(item.value().get())) layers.emplace_back(item.key() + ".weight", layer);
  }
  return layers;
}

bool quantises(const std::string& key, const TensorRecord& rec, bool quantise_component, bool every_layer) {
  return quantise_component && (every_layer || is_quantisable(key, rec.shape, /*fp8_vae=*/true));
}

}  // namespace detail

using detail::quantised_layers;
using detail::quantises;

void load_layer_weight(QuantisedLayer& layer, const SafetensorsFile& file, const std::string& key,
                       const StorageSpec& storage, bool quantise, std::optional<at::Device> device) {
  StorageSpec spec = storage;
  if (!quantise && is_quantised(spec.weights)) spec.weights = WeightType::FP16;
  load_quantised(layer, file, file.at(key), key, spec, device.value_or(layer.store.weight.device()));
}

int add_base_tensors(torch::nn::Module& module, const SafetensorsFile& file, const std::string& prefix,
                     const SafetensorsFile& base, const std::string& base_prefix, const StorageSpec& storage,
                     const at::Device& device) {
  // a tensor's values as they mean (F8 decoded, times its scale where the file has one)
  auto values = [](const SafetensorsFile& f, const TensorRecord& rec) {
    at::Tensor v = read_tensor(f, rec);
    if (const FileScale s = read_weight_scale(f, rec); s.values.defined() && v.is_floating_point()) v.mul_(scale_for(s.values, v.dim()));
    return v;
  };
  auto base_of = [&](const std::string& name, at::IntArrayRef sizes) -> const TensorRecord* {
    const auto* rec = base.find(base_prefix + name);
    return rec && shape_equals(rec->shape, sizes) ? rec : nullptr;
  };
  int added = 0;
  std::set<std::string> layer_weights;
  for (const auto& [name, layer] : quantised_layers(module)) {
    layer_weights.insert(name);
    const auto* b = base_of(name, layer->store.weight.sizes());
    if (!b) continue;
    // stored as it was loaded: FP8 when the load quantised it, else the storage's float type
    StorageSpec spec = storage;
    if (!layer->store.fp8 && !layer->store.blocks && is_quantised(spec.weights)) spec.weights = WeightType::FP16;
    load_quantised(*layer, file, file.at(prefix + name), prefix + name, spec, device, values(base, *b));
    ++added;
  }
  for (auto& item : module.named_parameters(true)) {
    at::Tensor& t = item.value();
    if (layer_weights.count(item.key())) continue;
    const auto* b = base_of(item.key(), t.sizes());
    if (!b) continue;
    const at::Tensor sum = values(file, file.at(prefix + item.key())).add_(values(base, *b));
    t.set_data(sum.to(t.scalar_type()).to(device));
    ++added;
  }
  return added;
}

void store_layer_weight(QuantisedLayer& layer, const at::Tensor& w_in, const StorageSpec& storage,
                        std::optional<uint64_t> stochastic_seed) {
  const WeightStore& store = layer.store;
  const at::Device device = store.weight.device();
  at::Tensor w = w_in.to(at::kCPU, at::kFloat).contiguous();  // the codec quantises on the CPU
  if (!store.fp8) {
    layer.place(w.to(store.weight.scalar_type()), false, store.format, {}, device);
    return;
  }
  at::Tensor codes = at::empty(w.sizes(), at::kByte);
  const Fp8Scale scale = store.scale.defined() ? (store.scale.numel() > 1 ? Fp8Scale::Channel : Fp8Scale::Tensor)
                                               : storage.scale;
  const auto scales =
      stochastic_seed ? quantize_weight_stochastic(w.data_ptr<float>(), w.size(0), w.numel(), store.format,
                                                   scale, codes.data_ptr<uint8_t>(), *stochastic_seed)
                      : quantize_weight(w.data_ptr<float>(), w.size(0), w.numel(), store.format, scale,
                                        codes.data_ptr<uint8_t>());
  layer.place(codes, true, store.format,
              scales.empty() ? at::Tensor() : at::tensor(std::vector<float>(scales.begin(), scales.end()), at::kFloat),
              device);
}

LoadReport load_module_weights(torch::nn::Module& module, const SafetensorsFile& file,
                               const std::string& prefix, const StorageSpec& storage,
                               bool quantise_component, const std::vector<std::string>& ignorable,
                               const std::map<std::string, QuantisedLayer*>& fused, const at::Device& device,
                               bool every_layer, const std::vector<std::string>& streamed) {
  LoadReport report;
  std::vector<std::string> missing;
  std::set<std::string> used;
  // Quantised layers first: their weights may become FP8.
  std::set<std::string> handled;
  std::set<const QuantisedLayer*> skipped;  // in streamed blocks
  // Every quantisable layer by its weight's name: module layers (`<path>.weight`) and the fused
  // ones stored under a parameter name.
  std::vector<std::pair<std::string, QuantisedLayer*>> layers(fused.begin(), fused.end());
  for (auto& l : quantised_layers(module)) layers.push_back(std::move(l));
  for (const auto& [name, layer] : layers) {
    cancel_point();
    const std::string key = prefix + name;
    const auto* rec = file.find(key);
    if (!rec) {
      missing.push_back(key);
      handled.insert(name);  // named once: its weight parameter is not looked up again below
      continue;
    }
    const auto conf = comfy_quant_layer(file, key);
    const bool blocks = conf && is_block_format(conf->format);  // its stored shape is padded or packed: checked at its read
    if (!blocks && !shape_equals(rec->shape, layer->store.weight.sizes())) {
      throw InputError(file.path() + ": tensor '" + key + "' has shape " + shape_str(rec->shape) +
                       " but the model expects " + shape_str(layer->store.weight.sizes()) +
                       "; the checkpoint is not the architecture it claims to be");
    }
    used.insert(key);
    if (blocks) {
      const std::string base = key.substr(0, key.size() - 6);
      for (const auto& part : comfy_quant_parts()) {
        if (file.find(base + part)) used.insert(base + part);
      }
    }
    for (const std::string& k : {find_scale_key(lookup(file), key), find_input_scale_key(lookup(file), key)}) {
      if (!k.empty()) used.insert(k);
    }
    if (in_streamed_block(streamed, name)) {  // staged when its block runs
      handled.insert(name);
      skipped.insert(layer);
      continue;
    }
    // Embedding MLPs (time_embed, label_emb) stay 16-bit like every embedding (docs/architecture.md, "Number formats").
    load_layer_weight(*layer, file, key, storage, quantises(key, *rec, quantise_component, every_layer), device);
    // a 16-bit weight quantised at load went through a raw copy and an FP32 one: the smaller of
    // them leaves heap holes the codes only half fill (~85 MB a Qwen-Image block, 5 GB over its 60);
    // hand their pages back as the load goes
    if ((layer->store.fp8 || layer->store.blocks) && !is_fp8_dtype(rec->dtype) && rec->nbytes() >= (4u << 20)) trim_heap();
    handled.insert(name);
    // the file's scales were read with its weight (also when it was decoded); the layer keeps
    // its own under the buffer name `scale_weight`
    if (layer->store.scale.defined()) handled.insert(scale_key_for(name));
    report.quantised += layer->store.fp8 || layer->store.blocks ? 1 : 0;
  }
  const at::ScalarType float_dtype = float_storage_dtype(storage.weights);
  auto load_one = [&](const std::string& name, at::Tensor& t) {
    cancel_point();
    if (handled.count(name)) return;
    const std::string key = prefix + name;
    const auto* rec = file.find(key);
    if (!rec) {
      missing.push_back(key);
      return;
    }
    if (!shape_equals(rec->shape, t.sizes())) {
      throw InputError(file.path() + ": tensor '" + key + "' has shape " + shape_str(rec->shape) +
                       " but the model expects " + shape_str(t.sizes()) +
                       "; the checkpoint is not the architecture it claims to be");
    }
    if (device.is_meta()) {  // a layout check: no values read
      t.set_data(at::empty(t.sizes(), at::TensorOptions().dtype(rec->dtype == Dtype::I64 ? at::kLong : float_dtype).device(device)));
      used.insert(key);
      return;
    }
    // Same float type in the file and in memory: read straight into the new tensor, without an
    // FP32 intermediate (the token embedding alone would be 150 MB of it).
    const bool direct = (rec->dtype == Dtype::F16 && float_dtype == at::kHalf) ||
                        (rec->dtype == Dtype::BF16 && float_dtype == at::kBFloat16);
    if (direct) {
      at::Tensor v = at::empty(t.sizes(), at::TensorOptions().dtype(float_dtype));
      file.read(*rec, v.data_ptr());
      t.set_data(v.to(device));
    } else {
      // F8 tensors arrive decoded (read_tensor), times their scale where they have one (comfy_quant
      // quantises embeddings too)
      at::Tensor v = read_tensor(file, *rec);
      if (is_fp8_dtype(rec->dtype)) {
        const FileScale scale = read_weight_scale(file, *rec);
        if (scale.values.defined()) {
          v.mul_(scale_for(scale.values, v.dim()));
          used.insert(scale.key);
        }
      }
      t.set_data((v.is_floating_point() ? v.to(float_dtype) : v).to(device));
    }
    used.insert(key);
  };
  for (auto& item : module.named_parameters(true)) load_one(item.key(), item.value());
  for (auto& item : module.named_buffers(true)) {
    if (item.value().defined()) load_one(item.key(), item.value());
  }
  if (!missing.empty()) {
    std::string list;
    for (std::size_t i = 0; i < std::min<std::size_t>(3, missing.size()); ++i) {
      list += (i ? ", " : "") + missing[i];
    }
    throw InputError(file.path() + ": " + std::to_string(missing.size()) +
                     (missing.size() == 1 ? " tensor the model needs is missing (" : " tensors the model needs are missing (") + list +
                     (missing.size() > 3 ? ", ..." : "") +
                     "); is this a complete SD checkpoint of the detected architecture?");
  }
  // what the module holds: each layer's store (a packed layer's weight is a placeholder of the
  // logical shape that owns no memory, its elements are in the store), then every other tensor
  std::set<const at::TensorImpl*> counted;
  for (const auto& [name, layer] : layers) {
    if (!counted.insert(layer->store.weight.unsafeGetTensorImpl()).second || skipped.count(layer)) continue;
    report.bytes += layer->store.bytes();
    if (layer->store.scale.defined()) counted.insert(layer->store.scale.unsafeGetTensorImpl());
  }
  for (auto& item : module.named_parameters(true)) {
    if (!counted.count(item.value().unsafeGetTensorImpl())) report.bytes += item.value().nbytes();
  }
  for (auto& item : module.named_buffers(true)) {
    if (item.value().defined() && !counted.count(item.value().unsafeGetTensorImpl())) report.bytes += item.value().nbytes();
  }
  report.tensors = used.size();
  // what the model does not use: the ignorable tensors and, in a scaled FP8 file, their scales
  std::set<std::string> ignored(ignorable.begin(), ignorable.end());
  const auto in_file = [&](const std::string& n) { return file.find(prefix + n) != nullptr; };
  for (const auto& key : ignorable) {
    if (const std::string scale = find_scale_key(in_file, key); !scale.empty()) ignored.insert(scale);
  }
  std::vector<std::string> unused;
  for (const auto& t : file.tensors()) {
    if (t.name.compare(0, prefix.size(), prefix) != 0 || used.count(t.name)) continue;
    const std::string rest = t.name.substr(prefix.size());
    if (ignored.count(rest)) continue;
    // quantisation markers and activation scales describe, they hold no model value
    if (is_quantisation_marker(t.name) || is_input_scale_name(t.name)) continue;
    unused.push_back(t.name);
  }
  if (!unused.empty()) {
    std::string list;
    for (std::size_t i = 0; i < std::min<std::size_t>(3, unused.size()); ++i) {
      list += (i ? ", " : "") + unused[i];
    }
    throw InputError(file.path() + ": " + std::to_string(unused.size()) + " tensors under '" + prefix +
                     "' are not part of the detected architecture (" + list +
                     (unused.size() > 3 ? ", ..." : "") +
                     "); the checkpoint is a variant this program does not support, or is damaged");
  }
  return report;
}

}  // namespace fp8s
