// FP8 files as other tools write them (issue 29): each layout is written here, from the demo
// model's FP16 master, by the rules of the tool that writes it (not by our convert), then loaded
// as a user would. Every loaded tensor must equal the independent decode (codec x scale) computed
// while writing; FP8 weights stay one byte; the picture stays within FP8's error of the FP16
// source's; what cannot run is refused by name with exit code 2 and no output. Our own scaled
// export is read back by ComfyUI's rules written out below.
#include <ATen/ATen.h>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "demo/demo_model.h"
#include "fp8/codec.h"
#include "io/image_metrics.h"
#include "io/png.h"
#include "core/strings.h"
#include "models/architecture.h"
#include "models/inspect.h"
#include "models/text_encoder.h"
#include "models/unet.h"
#include "models/vae.h"
#include "families/sd/model.h"
#include "support.h"

using namespace fp8s;

namespace {

struct OutTensor {
  std::string name;
  Dtype dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

template <typename T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

bool is_unet_linear(const TensorRecord& t) {
  return starts_with(t.name, "model.diffusion_model.") && ends_with(t.name, ".weight") && t.shape.size() == 2 &&
         role_of(t.name, t.shape) == TensorRole::LinearWeight;
}

// A layout being written: the tensors, the metadata, and the value every tensor must load as.
struct Layout {
  std::vector<OutTensor> tensors;
  std::map<std::string, std::string> metadata;
  std::map<std::string, std::vector<float>> expected;  // tensor -> values (FP32), F8 ones decoded x scale

  void copy(const SafetensorsFile& src, const TensorRecord& t) {
    std::string raw(t.nbytes(), '\0');
    src.read(t, raw.data());
    tensors.push_back({t.name, t.dtype, t.shape, raw});
    if (is_float_dtype(t.dtype)) expected[t.name] = test::read_f32_tensor(src, t.name);
  }
  // `values` as FP8 codes of `format`, divided by the scale first: one per tensor (`scales` of
  // size 1) or per output row. The expectation is the codec's decode times the same scale.
  std::vector<uint8_t> encode(const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& values,
                              Fp8Format format, const std::vector<float>& scales = {1.0f}) {
    std::vector<uint8_t> codes(values.size());
    auto& want = expected[name];
    want.resize(values.size());
    const std::size_t cols = values.size() / static_cast<std::size_t>(shape.empty() ? 1 : shape[0]);
    for (std::size_t i = 0; i < values.size(); ++i) {
      const float s = scales.size() == 1 ? scales[0] : scales[i / cols];
      codes[i] = encode_fp8(values[i] / s, format);
      want[i] = decode_fp8(codes[i], format) * s;
    }
    tensors.push_back({name, format == Fp8Format::E4M3FN ? Dtype::F8_E4M3 : Dtype::F8_E5M2, shape, bytes_of(codes)});
    return codes;
  }
  void write(const std::string& path) const {
    std::vector<TensorSpec> specs;
    for (const auto& t : tensors) specs.push_back({t.name, t.dtype, t.shape});
    SafetensorsWriter w(path, specs, metadata, true);
    for (const auto& t : tensors) w.append(t.bytes.data(), t.bytes.size());
    w.commit();
  }
};

// amax / 448 as ComfyUI's and ModelOpt's quantisers compute a per-tensor E4M3 scale.
float amax_scale(const std::vector<float>& v, std::size_t begin = 0, std::size_t end = SIZE_MAX) {
  float amax = 0;
  for (std::size_t i = begin; i < std::min(end, v.size()); ++i) amax = std::max(amax, std::fabs(v[i]));
  return amax > 0 ? amax / 448.0f : 1.0f;
}

std::vector<float> row_scales(const std::vector<float>& v, int64_t rows) {
  std::vector<float> s(static_cast<std::size_t>(rows));
  const std::size_t cols = v.size() / static_cast<std::size_t>(rows);
  for (std::size_t r = 0; r < s.size(); ++r) s[r] = amax_scale(v, r * cols, (r + 1) * cols);
  return s;
}

float round_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }
float round_f16(float v) { return f16_to_f32(f32_to_f16(v)); }

// The loaded value of every parameter and buffer of `module` (layer weights decoded) by key.
std::map<std::string, at::Tensor> loaded_values(torch::nn::Module& module, const std::string& prefix,
                                                const std::map<std::string, QuantisedLayer*>& fused = {}) {
  std::map<std::string, QuantisedLayer*> layers;
  for (const auto& item : module.named_modules("", false)) {
    if (auto* l = dynamic_cast<QuantisedLayer*>(item.value().get())) layers[item.key() + ".weight"] = l;
  }
  for (const auto& [name, l] : fused) layers[name] = l;
  std::map<std::string, at::Tensor> out;
  for (const auto& item : module.named_parameters(true)) {
    const auto it = layers.find(item.key());
    out[prefix + item.key()] =
        it != layers.end() ? it->second->store.decode(at::kFloat).contiguous().clone() : item.value().to(at::kFloat).contiguous();
  }
  for (const auto& item : module.named_buffers(true)) {
    if (item.value().defined() && item.value().is_floating_point() && !ends_with(item.key(), "scale_weight")) {
      out[prefix + item.key()] = item.value().to(at::kFloat).contiguous();
    }
  }
  return out;
}

}  // namespace

class TestFp8Files : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;
  std::string m_source;  // the demo model's FP16 master
  QString m_vocab;
  test::CliResult m_sourceRun;
  QString m_sourcePng;
  int m_runs = 0;

  std::string path(const std::string& name) const { return (m_dir.path() + "/").toStdString() + name; }

  // Every tensor of the source through `rule` (which writes it, or leaves it to be copied).
  Layout make_layout(const std::function<bool(Layout&, const SafetensorsFile&, const TensorRecord&)>& rule) {
    SafetensorsFile src(m_source);
    Layout l;
    l.metadata = src.metadata();
    for (const auto& t : src.tensors()) {
      if (!rule(l, src, t)) l.copy(src, t);
    }
    return l;
  }

  // What `--weights auto` loads the file as.
  static StorageSpec auto_storage(const std::string& file_path) {
    return default_storage(inspect_checkpoint(SafetensorsFile(file_path)));
  }

  // The whole model loaded as the engine does, in the storage `--weights auto` picks for the file;
  // every tensor compared with the layout's expectation.
  void check_loaded_values(const std::string& file_path, const Layout& layout) {
    SafetensorsFile file(file_path);
    const StorageSpec storage = auto_storage(file_path);
    const auto config = config_for(file);
    std::map<std::string, at::Tensor> values;
    UNetImpl unet(config.unet);
    load_module_weights(unet, file, kUNetPrefix, storage, true);
    values.merge(loaded_values(unet, kUNetPrefix));
    for (const auto& tc : config.text_encoders) {
      TextEncoderImpl te(tc);
      load_module_weights(te, file, tc.prefix, storage, true, te.ignorable_keys(), te.fused_layers());
      values.merge(loaded_values(te, tc.prefix, te.fused_layers()));
    }
    VaeImpl vae(config.vae);
    load_module_weights(vae, file, kVaePrefix, storage, storage.fp8_vae);
    values.merge(loaded_values(vae, kVaePrefix));
    int compared = 0;
    for (const auto& [name, want] : layout.expected) {
      const auto it = values.find(name);
      if (it == values.end()) continue;  // DDPM buffers and the like: no module holds them
      // a quantisable layer 16-bit in the file is quantised by FP8 storage (test_fp8_storage's subject)
      const auto& rec = file.at(name);
      if (is_fp8(storage.weights) && is_quantisable(name, rec.shape, false) && rec.dtype != Dtype::F8_E4M3 &&
          rec.dtype != Dtype::F8_E5M2) {
        continue;
      }
      const auto& got = it->second;
      if (static_cast<std::size_t>(got.numel()) != want.size()) QFAIL(name.c_str());
      for (std::size_t i = 0; i < want.size(); ++i) {
        // a non-layer tensor is held 16-bit: the decoded value rounded to FP16 (exact for an
        // unscaled FP8 value)
        const float w = want[i];
        const float g = got.data_ptr<float>()[i];
        if (g != w && g != round_f16(w)) {
          QFAIL(qPrintable(QString("%1[%2]: loaded %3, decoded %4").arg(name.c_str()).arg(i).arg(g).arg(w)));
        }
      }
      ++compared;
    }
    if (compared < 200) QFAIL(qPrintable(QString("only %1 tensors compared").arg(compared)));
  }

  // Each F8 weight of a quantisable layer is held as one byte a weight in the model `auto` loads.
  void check_one_byte(const std::string& file_path, const StorageSpec& storage) {
    Model model(file_path, storage);
    int fp8 = 0;
    for (const auto& [key, layer] : model.layers()) {
      const auto& rec = model.file().at(key);
      // (F8 embedding MLPs and VAE layers are decoded, as their 16-bit weights would stay 16-bit)
      if ((rec.dtype != Dtype::F8_E4M3 && rec.dtype != Dtype::F8_E5M2) || !is_quantisable(key, rec.shape, false)) continue;
      QVERIFY2(layer->store.fp8, key.c_str());
      if (layer->store.packed.defined()) {  // packed: one byte per element of oneDNN's padded blocks
        QCOMPARE(layer->store.packed.element_size(), int64_t(1));
        QVERIFY2(layer->store.packed.numel() == layer->store.layout.elements && uint64_t(layer->store.packed.numel()) >= rec.numel(), key.c_str());
      } else {
        QCOMPARE(static_cast<uint64_t>(layer->store.weight.nbytes()), rec.numel());
      }
      ++fp8;
    }
    QVERIFY(fp8 > 20);
  }

  test::CliResult generate(const QString& model, const QString& outdir, const QStringList& extra = {}) {
    return test::run_cli(QStringList{"generate", "--model", model, "--vocab", m_vocab, "--prompt",
                                     "a small yellow star in the top left corner on a blue background", "--steps", "12",
                                     "--cfg", "5", "--sampler", "euler", "--schedule", "normal", "--seed", "11",
                                     "--outdir", outdir, "--json"} + extra);
  }

  // The picture of `file` against the FP16 source's: PSNR in dB (and the run's weight bytes).
  std::pair<double, double> psnr_against_source(const std::string& file) {
    const QString out = m_dir.path() + "/out-" + QString::number(++m_runs);
    const auto r = generate(QString::fromStdString(file), out);
    if (r.exit_code != 0) qWarning("%s", qPrintable(r.err));
    const auto j = QJsonDocument::fromJson(r.out.toUtf8()).object();
    const QString png = j["images"].toArray()[0].toObject()["path"].toString();
    const double db = psnr(read_png(png.toStdString()).image, read_png(m_sourcePng.toStdString()).image);
    qInfo("%s: PSNR %.2f dB against the FP16 source, weights %.3f MB (%s)", file.c_str(), db,
          j["weight_bytes"].toDouble() / 1e6, qPrintable(j["storage"].toString()));
    return {db, j["weight_bytes"].toDouble()};
  }

 private Q_SLOTS:
  void initTestCase() {
    m_source = demo::find_demo_model();
    m_vocab = QString::fromUtf8(FP8S_SOURCE_DIR) + "/resources/demo/tokenizer";
    const QString out = m_dir.path() + "/source";
    m_sourceRun = generate(QString::fromStdString(m_source), out, {"--weights", "fp16"});
    QVERIFY2(m_sourceRun.exit_code == 0, qPrintable(m_sourceRun.err));
    m_sourcePng = QJsonDocument::fromJson(m_sourceRun.out.toUtf8()).object()["images"].toArray()[0].toObject()["path"].toString();
  }

  // A checkpoint saved from an FP8-typed model: every float tensor F8_E4M3, biases, norms,
  // embeddings and the VAE too. Layer weights stay codes; everything else is decoded.
  void plainFp8EverywhereIsDecodedByRole() {
    auto layout = make_layout([](Layout& l, const SafetensorsFile& src, const TensorRecord& t) {
      if (!is_float_dtype(t.dtype) || component_of(t.name) == Component::Other) return false;
      l.encode(t.name, t.shape, test::read_f32_tensor(src, t.name), Fp8Format::E4M3FN);
      return true;
    });
    const std::string file = path("all-f8.safetensors");
    layout.write(file);
    check_loaded_values(file, layout);
    if (QTest::currentTestFailed()) return;
    const auto storage = auto_storage(file);
    QCOMPARE(storage.weights, WeightType::FP8_E4M3);
    QCOMPARE(storage.scale, Fp8Scale::None);
    check_one_byte(file, storage);
    const auto [db, bytes] = psnr_against_source(file);
    QVERIFY2(db > 20, qPrintable(QString::number(db)));
  }

  // The diffusion model's Linear/Conv2d weights F8, everything else 16-bit (what most FP8
  // downloads are): `auto` keeps them one byte a weight, not upcast to FP16.
  void fp8UnetWeightsLoadOneByteByDefault() {
    auto layout = make_layout([](Layout& l, const SafetensorsFile& src, const TensorRecord& t) {
      if (component_of(t.name) != Component::UNet || !is_quantisable(t.name, t.shape, false)) return false;
      l.encode(t.name, t.shape, test::read_f32_tensor(src, t.name), Fp8Format::E4M3FN);
      return true;
    });
    const std::string file = path("unet-f8.safetensors");
    layout.write(file);
    const auto report = inspect_checkpoint(SafetensorsFile(file));
    QVERIFY2(report.is_fp8_source(), report.storage.c_str());
    QVERIFY2(QString::fromStdString(report.storage).contains("fp8-e4m3"), report.storage.c_str());
    check_loaded_values(file, layout);
    if (QTest::currentTestFailed()) return;
    const auto storage = auto_storage(file);
    check_one_byte(file, storage);
    const auto [db, bytes] = psnr_against_source(file);
    QVERIFY2(db > 20, qPrintable(QString::number(db)));
    const double bytes16 = QJsonDocument::fromJson(m_sourceRun.out.toUtf8()).object()["weight_bytes"].toDouble();
    QVERIFY2(bytes < 0.7 * bytes16, qPrintable(QString("%1 vs %2").arg(bytes).arg(bytes16)));
  }

  // ComfyUI's legacy scaled FP8 (comfy/utils.py convert_old_quants): the `scaled_fp8` marker at
  // the model's prefix, Linear layers F8 with a 0-d F32 `.scale_weight` (amax / 448) and a
  // `.scale_input` of 1; convolutions left 16-bit.
  void comfyLegacyScaledFp8() {
    auto layout = make_layout([](Layout& l, const SafetensorsFile& src, const TensorRecord& t) {
      if (!is_unet_linear(t)) return false;
      const auto v = test::read_f32_tensor(src, t.name);
      const float s = amax_scale(v);
      l.encode(t.name, t.shape, v, Fp8Format::E4M3FN, {s});
      const std::string layer = t.name.substr(0, t.name.size() - 7);
      l.tensors.push_back({layer + ".scale_weight", Dtype::F32, {}, bytes_of(std::vector<float>{s})});
      l.tensors.push_back({layer + ".scale_input", Dtype::F32, {}, bytes_of(std::vector<float>{1.0f})});
      return true;
    });
    layout.tensors.push_back({"model.diffusion_model.scaled_fp8", Dtype::F8_E4M3, {0}, ""});
    const std::string file = path("comfy-scaled.safetensors");
    layout.write(file);
    const auto report = inspect_checkpoint(SafetensorsFile(file));
    QCOMPARE(QString::fromStdString(report.fp8.layout), QString("ComfyUI scaled_fp8"));
    check_loaded_values(file, layout);
    if (QTest::currentTestFailed()) return;
    const auto storage = auto_storage(file);
    QCOMPARE(storage.scale, Fp8Scale::Tensor);
    check_one_byte(file, storage);
    Model model(file, storage);
    int input_scales = 0;  // kept, for FP8 compute
    for (const auto& [key, layer] : model.layers()) {
      if (!model.file().find(key.substr(0, key.size() - 7) + ".scale_input")) continue;
      QVERIFY2(layer->store.input_scale.defined() && layer->store.input_scale.item<float>() == 1.0f, key.c_str());
      ++input_scales;
    }
    QVERIFY(input_scales > 8);
    const auto [db, bytes] = psnr_against_source(file);
    QVERIFY2(db > 20, qPrintable(QString::number(db)));
  }

  // ComfyUI's comfy_quant, with every scale spelling the readers write: `.weight_scale` 0-d F32,
  // [1] BF16, [out] F16 and [out,1] F32 (per output channel, ModelOpt / compressed-tensors), and
  // `.input_scale`; the layer description per layer (`.comfy_quant`) or in the header.
  void comfyQuantEverySpelling_data() {
    QTest::addColumn<bool>("header");
    QTest::newRow("per-layer .comfy_quant") << false;
    QTest::newRow("_quantization_metadata") << true;
  }
  void comfyQuantEverySpelling() {
    QFETCH(bool, header);
    int n = 0;
    nlohmann::json layers = nlohmann::json::object();
    auto layout = make_layout([&](Layout& l, const SafetensorsFile& src, const TensorRecord& t) {
      if (!is_unet_linear(t)) return false;
      const auto v = test::read_f32_tensor(src, t.name);
      const std::string layer = t.name.substr(0, t.name.size() - 7);
      const int64_t rows = t.shape[0];
      switch (n++ % 4) {
        case 0: {
          const float s = amax_scale(v);
          l.encode(t.name, t.shape, v, Fp8Format::E4M3FN, {s});
          l.tensors.push_back({layer + ".weight_scale", Dtype::F32, {}, bytes_of(std::vector<float>{s})});
          break;
        }
        case 1: {
          const float s = round_bf16(amax_scale(v));
          l.encode(t.name, t.shape, v, Fp8Format::E4M3FN, {s});
          l.tensors.push_back({layer + ".weight_scale", Dtype::BF16, {1}, bytes_of(std::vector<uint16_t>{f32_to_bf16(s)})});
          break;
        }
        case 2: {
          auto s = row_scales(v, rows);
          std::vector<uint16_t> half;
          for (auto& x : s) half.push_back(f32_to_f16(x = round_f16(x)));
          l.encode(t.name, t.shape, v, Fp8Format::E4M3FN, s);
          l.tensors.push_back({layer + ".weight_scale", Dtype::F16, {rows}, bytes_of(half)});
          break;
        }
        default: {
          const auto s = row_scales(v, rows);
          l.encode(t.name, t.shape, v, Fp8Format::E4M3FN, s);
          l.tensors.push_back({layer + ".weight_scale", Dtype::F32, {rows, 1}, bytes_of(s)});
          l.tensors.push_back({layer + ".input_scale", Dtype::F32, {}, bytes_of(std::vector<float>{0.5f})});
        }
      }
      const std::string conf = R"({"format": "float8_e4m3fn"})";
      if (header) {
        layers[layer] = {{"format", "float8_e4m3fn"}};
      } else {
        l.tensors.push_back({layer + ".comfy_quant", Dtype::U8, {static_cast<int64_t>(conf.size())}, conf});
      }
      return true;
    });
    if (header) layout.metadata["_quantization_metadata"] = nlohmann::json{{"format_version", "1.0"}, {"layers", layers}}.dump();
    QVERIFY(n > 8);
    const std::string file = path(header ? "comfy-quant-header.safetensors" : "comfy-quant.safetensors");
    layout.write(file);
    QCOMPARE(QString::fromStdString(inspect_checkpoint(SafetensorsFile(file)).fp8.layout), QString("ComfyUI comfy_quant"));
    check_loaded_values(file, layout);
    if (QTest::currentTestFailed()) return;
    const auto storage = auto_storage(file);
    QCOMPARE(storage.scale, Fp8Scale::Channel);
    check_one_byte(file, storage);
    const auto [db, bytes] = psnr_against_source(file);
    QVERIFY2(db > 20, qPrintable(QString::number(db)));
  }

  // What cannot run is refused before any weight is read, naming the layer and the format, with
  // exit code 2 and nothing written (generate and convert alike).
  void unrunnableFormatsAreRefusedByName_data() {
    QTest::addColumn<QString>("kind");
    QTest::addColumn<QString>("needle");
    // an nvfp4 description on a convolution (SD's 1x1 proj_in): ComfyUI has no quantised Conv2d
    QTest::newRow("nvfp4 comfy_quant on a convolution") << "nvfp4" << "proj_in.weight' is stored as nvfp4, but the model's layer is not a Linear one";
    QTest::newRow("mxfp8 E8M0 scales") << "mxfp8" << "is mxfp8";
    QTest::newRow("int8 weights") << "int8" << "is int8";
    QTest::newRow("header int8_blockwise") << "header" << "is stored as 'int8_blockwise', a comfy_quant format FP8 Studio cannot decode";
    QTest::newRow("nvfp4 weight_scale_2") << "scale2" << "is nvfp4";
    QTest::newRow("block-scaled FP8") << "block" << "block-scaled FP8";
    QTest::newRow("bitsandbytes") << "bnb" << "bitsandbytes";
    QTest::newRow("GGUF") << "gguf" << "GGUF";
  }
  void unrunnableFormatsAreRefusedByName() {
    QFETCH(QString, kind);
    QFETCH(QString, needle);
    const std::string target = "model.diffusion_model.input_blocks.1.1.proj_in";
    const std::string file = path("refused-" + kind.toStdString() + ".safetensors");
    if (kind == "gguf") {
      test::write_bytes(file, std::string("GGUF\x03\0\0\0", 8) + std::string(64, '\0'));
    } else {
      auto layout = make_layout([&](Layout& l, const SafetensorsFile& src, const TensorRecord& t) {
        if (t.name != target + ".weight") return false;
        const auto v = test::read_f32_tensor(src, t.name);
        if (kind == "int8") {
          l.tensors.push_back({t.name, Dtype::I8, t.shape, std::string(v.size(), '\1')});
          l.tensors.push_back({target + ".weight_scale", Dtype::F32, {}, bytes_of(std::vector<float>{0.01f})});
          return true;
        }
        l.encode(t.name, t.shape, v, Fp8Format::E4M3FN);
        if (kind == "nvfp4") {
          const std::string conf = R"({"format": "nvfp4"})";
          l.tensors.push_back({target + ".comfy_quant", Dtype::U8, {static_cast<int64_t>(conf.size())}, conf});
        } else if (kind == "mxfp8") {
          l.tensors.push_back({target + ".weight_scale", Dtype::F8_E8M0, {t.shape[0], t.shape[1] / 32},
                               std::string(static_cast<std::size_t>(t.shape[0] * (t.shape[1] / 32)), '\x7f')});
        } else if (kind == "scale2") {
          l.tensors.push_back({target + ".weight_scale_2", Dtype::F32, {}, bytes_of(std::vector<float>{1.0f})});
        } else if (kind == "block") {
          l.tensors.push_back({target + ".weight_scale_inv", Dtype::F32, {2, 2}, bytes_of(std::vector<float>(4, 1.0f))});
        } else if (kind == "bnb") {
          l.tensors.push_back({target + ".weight.absmax", Dtype::F32, {4}, bytes_of(std::vector<float>(4, 1.0f))});
        }
        return true;
      });
      if (kind == "header") {
        layout.metadata["_quantization_metadata"] =
            nlohmann::json{{"layers", {{target, {{"format", "int8_blockwise"}, {"group_size", 128}}}}}}.dump();
      }
      layout.write(file);
    }
    const QString out = m_dir.path() + "/refused-out-" + kind;
    const auto g = generate(QString::fromStdString(file), out);
    test::expect_one_line_error(g, 2, needle);
    if (kind != "gguf") QVERIFY2(g.err.contains(QString::fromStdString(target)), qPrintable(g.err));
    QVERIFY(!QDir(out).exists() || QDir(out).isEmpty());
    const QString converted = m_dir.path() + "/refused-convert-" + kind + ".safetensors";
    const auto c = test::run_cli({"convert", "--model", QString::fromStdString(file), "--weights", "fp8-e4m3", "--out", converted});
    // convert reads 16/32-bit files: a comfy_quant file is refused as quantised already
    test::expect_one_line_error(c, 2, kind == "nvfp4" ? QString("already stored quantised (ComfyUI comfy_quant layers: 1 NVFP4)") : needle);
    QVERIFY(!QFileInfo::exists(converted));
  }

  // A vocabulary with more ids than the token embedding has rows: one line naming both numbers.
  void vocabularyLargerThanTheEmbeddingIsRefused() {
    const std::string emb = "cond_stage_model.transformer.text_model.embeddings.token_embedding.weight";
    auto layout = make_layout([&](Layout& l, const SafetensorsFile& src, const TensorRecord& t) {
      if (t.name != emb) return false;
      std::string raw(t.nbytes(), '\0');
      src.read(t, raw.data());
      l.tensors.push_back({t.name, t.dtype, {100, t.shape[1]}, raw.substr(0, static_cast<std::size_t>(100 * t.shape[1] * 2))});
      return true;
    });
    // the file's own configuration says 100 rows too (a configuration that does not describe the
    // file is refused before this check: test_hardening), so the vocabulary is what does not fit
    auto config = parse_ldm_config(layout.metadata.at("ldm.config"), "x");
    config.text_encoders.at(0).vocab_size = 100;
    config.text_encoders.at(0).pad_id = 99;
    layout.metadata["ldm.config"] = to_ldm_config_json(config);
    const std::string file = path("small-embedding.safetensors");
    layout.write(file);
    const auto g = generate(QString::fromStdString(file), m_dir.path() + "/vocab-out");
    test::expect_one_line_error(g, 2, "has 100 rows");
    QVERIFY2(g.err.contains("vocabulary has 620 tokens"), qPrintable(g.err));
    QVERIFY(!g.err.contains("index out of range"));
  }

  // Our scaled exports read by ComfyUI's rules, written out here: a layer with `.comfy_quant`
  // whose format is float8 dequantises as codes.to(dtype) * weight_scale (broadcast); any other
  // F8 weight is cast as it is (manual_cast); 16-bit tensors as they are. That is what we load.
  void ourScaledExportDecodesAsComfyUIDecodesIt_data() {
    QTest::addColumn<QString>("scale");
    QTest::newRow("tensor") << "tensor";
    QTest::newRow("channel") << "channel";
  }
  void ourScaledExportDecodesAsComfyUIDecodesIt() {
    QFETCH(QString, scale);
    const std::string file = path("export-" + scale.toStdString() + ".safetensors");
    const auto r = test::run_cli({"convert", "--model", QString::fromStdString(m_source), "--weights", "fp8-e4m3",
                                  "--fp8-scale", scale, "--out", QString::fromStdString(file)});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    SafetensorsFile f(file);
    Layout comfy;  // what ComfyUI loads
    int quantised = 0;
    for (const auto& t : f.tensors()) {
      if (ends_with(t.name, ".comfy_quant") || ends_with(t.name, ".weight_scale")) continue;
      const std::string layer = ends_with(t.name, ".weight") ? t.name.substr(0, t.name.size() - 7) : "";
      const auto* conf_rec = layer.empty() ? nullptr : f.find(layer + ".comfy_quant");
      if (t.dtype != Dtype::F8_E4M3 && t.dtype != Dtype::F8_E5M2) {
        if (is_float_dtype(t.dtype)) comfy.expected[t.name] = test::read_f32_tensor(f, t.name);
        continue;
      }
      std::vector<uint8_t> codes(t.numel());
      f.read(t, codes.data());
      std::vector<float> scales{1.0f};
      if (conf_rec) {
        std::string conf(conf_rec->nbytes(), '\0');
        f.read(*conf_rec, conf.data());
        const auto j = nlohmann::json::parse(conf);
        QCOMPARE(QString::fromStdString(j["format"].get<std::string>()), QString("float8_e4m3fn"));
        QCOMPARE(t.dtype, Dtype::F8_E4M3);
        scales = test::read_f32_tensor(f, layer + ".weight_scale");
        ++quantised;
      }
      auto& want = comfy.expected[t.name];
      const std::size_t cols = codes.size() / static_cast<std::size_t>(t.shape[0]);
      for (std::size_t i = 0; i < codes.size(); ++i) {
        want.push_back(decode_fp8(codes[i], Fp8Format::E4M3FN) * scales[scales.size() == 1 ? 0 : i / cols]);
      }
    }
    QVERIFY(quantised > 8);
    check_loaded_values(file, comfy);
  }
};

QTEST_GUILESS_MAIN(TestFp8Files)
#include "test_fp8_files.moc"
