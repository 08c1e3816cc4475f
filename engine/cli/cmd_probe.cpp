// probe: replays one engine stage on tensors from a file and writes the outputs to a file, so that
// independent implementations can be compared with ours name by name (reference/README.md).
#include <memory>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "fp8/codec.h"
#include "io/safetensors.h"

namespace fp8s::cli {
namespace {

void probe_fp8(const std::string& role, const std::string& format_name, const std::string& in_path,
               const std::string& out_path, bool overwrite) {
  const Fp8Format format = format_name == "e5m2" ? Fp8Format::E5M2 : Fp8Format::E4M3FN;
  const Dtype f8 = format == Fp8Format::E4M3FN ? Dtype::F8_E4M3 : Dtype::F8_E5M2;
  const bool encode = role == "fp8-encode";
  SafetensorsFile in(in_path);
  std::vector<TensorSpec> specs;
  for (const auto& t : in.tensors()) {
    if (!encode && (t.dtype == Dtype::F8_E4M3 || t.dtype == Dtype::F8_E5M2) && t.dtype != f8) {
      throw InputError(in_path + ": tensor '" + t.name + "' is " + dtype_name(t.dtype) +
                       " but --format is " + format_name);
    }
    Dtype out = t.dtype;
    if (encode && t.dtype == Dtype::F32) out = f8;
    if (!encode && t.dtype == f8) out = Dtype::F32;
    specs.push_back({t.name, out, t.shape});
  }
  SafetensorsWriter writer(out_path, specs, in.metadata(), overwrite);
  std::vector<uint8_t> raw;
  for (std::size_t i = 0; i < in.tensors().size(); ++i) {
    const auto& t = in.tensors()[i];
    raw.resize(t.nbytes());
    in.read(t, raw.data());
    const auto n = static_cast<std::size_t>(t.numel());
    if (specs[i].dtype == f8 && t.dtype == Dtype::F32) {
      std::vector<uint8_t> codes(n);
      encode_f32_to_fp8(reinterpret_cast<const float*>(raw.data()), codes.data(), n, format);
      writer.append(codes.data(), n);
    } else if (specs[i].dtype == Dtype::F32 && t.dtype == f8) {
      std::vector<float> values(n);
      decode_fp8_to_f32(raw.data(), values.data(), n, format);
      writer.append(values.data(), n * 4);
    } else {
      writer.append(raw.data(), raw.size());
    }
  }
  writer.commit();
}

}  // namespace

void register_probe(CLI::App& app) {
  struct Opts {
    CommonOptions common;
    std::string role, format = "e4m3", in, out;
    bool overwrite = false;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand(
      "probe", "run one engine stage on tensors from a file (for reference comparisons)");
  add_common_options(*sub, o->common, false);
  sub->add_option("role", o->role, "fp8-encode or fp8-decode")->required();
  sub->add_option("--format", o->format, "FP8 format for fp8-encode/fp8-decode: e4m3 or e5m2")
      ->check(CLI::IsMember({"e4m3", "e5m2"}))
      ->capture_default_str();
  sub->add_option("--in", o->in, "input .safetensors");
  sub->add_option("--out", o->out, "output .safetensors (written atomically)")->required();
  sub->add_flag("--overwrite", o->overwrite, "replace --out if it exists");
  sub->callback([o] {
    if (o->role == "fp8-encode" || o->role == "fp8-decode") {
      if (o->in.empty()) throw InputError("probe " + o->role + " needs --in IN.safetensors");
      probe_fp8(o->role, o->format, o->in, o->out, o->overwrite);
      return;
    }
    throw InputError("unknown probe role '" + o->role + "' (known: fp8-encode, fp8-decode)");
  });
}

}  // namespace fp8s::cli
