// ComfyUI's comfy_quant formats beside FP8 (issue 59), against numbers derived by hand from
// ../shared/reference/formats/README.md (the reference cases themselves run in
// test_reference_formats): the layer descriptions as Python's json.dumps writes them, the 128x4
// tiled scale layout, the regular Hadamard of ConvRot, each quantiser's error bound; and the mixed
// Z-Image file through the engine: its formats counted, streamed = resident bit for bit, a LoRA on
// its quantised layers online (merged and online agree, and it leaves no trace).
#include <QtTest>

#include <cmath>
#include <random>

#include "core/error.h"
#include "fp8/codec.h"
#include "fp8/quant_formats.h"
#include "io/safetensors.h"
#include "models/fp8_files.h"
#include "models/inspect.h"
#include "models/quant_probe.h"
#include "pipeline/engine.h"
#include "support.h"

using namespace fp8s;

namespace {

std::vector<float> random_weight(int64_t n, int64_t k, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> w(static_cast<std::size_t>(n * k));
  for (auto& v : w) v = d(rng);
  w[3] = 0.9f;  // an outlier, as real weights have
  return w;
}

}  // namespace

class TestQuantFormats : public QObject {
  Q_OBJECT
  QTemporaryDir m_dir;

  static LoadOptions zimage_options(const std::string& transformer, WeightType weights) {
    LoadOptions o;
    o.checkpoint = transformer;
    o.components["text_encoder"] = test::reference_path("zimage/tiny-qwen3.safetensors");
    o.components["vae"] = test::reference_path("zimage/tiny-ae.safetensors");
    o.components["qwen_tokenizer"] = test::reference_path("zimage/qwen_tokenizer");
    o.storage = {weights, Fp8Scale::None, false};
    o.device = "cpu";
    return o;
  }
  static std::vector<uint8_t> pixels(Engine& engine, WeightType weights, std::optional<uint64_t> budget = std::nullopt) {
    GenerationRequest r;
    r.prompt = "a lighthouse";
    r.seed = 3;
    r.steps = 2;
    r.width = 32;
    r.height = 32;
    r.cfg = 1.0f;
    r.compute = ComputeType::FP32;
    r.storage = {weights, Fp8Scale::None, false};
    r.weight_budget = budget;
    std::atomic<bool> cancel{false};
    return engine.generate(r, nullptr, cancel).images.at(0).image.pixels;
  }

 private Q_SLOTS:
  // The README's strings and their lengths, parsed and written back byte for byte.
  void descriptionsAreJsonDumps() {
    const std::pair<const char*, int> cases[] = {{R"({"format": "float8_e4m3fn"})", 27},
                                                 {R"({"format": "float8_e5m2"})", 25},
                                                 {R"({"format": "int8_tensorwise"})", 29},
                                                 {R"({"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256})", 72},
                                                 {R"({"format": "mxfp8"})", 19},
                                                 {R"({"format": "nvfp4"})", 19},
                                                 {R"({"format": "convrot_w4a4", "convrot_groupsize": 256})", 52},
                                                 {R"({"format": "awq_w4a16", "group_size": 64})", 41},
                                                 {R"({"format": "svdquant_w4a4"})", 27}};
    for (const auto& [text, length] : cases) {
      QCOMPARE(int(std::string(text).size()), length);
      QCOMPARE(QString::fromStdString(comfy_quant_json(parse_comfy_quant(text, "f", "l"))), QString(text));
    }
    // options under "params" count as at the top level; unknown keys are ignored
    const auto c = parse_comfy_quant(R"({"format": "int8_tensorwise", "params": {"convrot": true, "convrot_groupsize": 16}, "x": 1})", "f", "l");
    QVERIFY(c.convrot);
    QCOMPARE(c.convrot_group, 16);
    QCOMPARE(parse_comfy_quant(R"("nvfp4")", "f", "l").format, QuantFormat::Nvfp4);
    // what ComfyUI fails on is refused, naming the file and the layer
    for (const char* bad : {R"({"format": "int8_blockwise"})", R"({"group_size": 64})", "{not json",
                            R"({"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 32})"}) {
      try {
        (void)parse_comfy_quant(bad, "model.safetensors", "blocks.0.qkv");
        QFAIL(bad);
      } catch (const InputError& e) {
        QVERIFY2(QString(e.what()).contains("model.safetensors: layer 'blocks.0.qkv'"), e.what());
      }
    }
  }

  // The README's two worked offsets: mxfp8 a [130, 200] block 6 (C' = 8) at 1570, nvfp4 a
  // [33, 85] block 5 (C' = 16) at 533; and the stored shapes of its layers.
  void tiledScaleOffsets() {
    QCOMPARE(tiled_offset(130, 6, 8), std::size_t(1570));
    QCOMPARE(tiled_offset(33, 5, 16), std::size_t(533));
    const QuantLayerConf mx{QuantFormat::Mxfp8}, nv{QuantFormat::Nvfp4};
    const auto a = stored_shape(mx, 170, 64), b = stored_shape(nv, 64, 170), c = stored_shape(mx, 40, 100), d = stored_shape(nv, 40, 100);
    QCOMPARE(a.data_rows, int64_t(192));  // the mixed file's w1
    QCOMPARE(b.data_cols, int64_t(88));   // its w2: K 170 -> 176, two a byte
    QCOMPARE(c.data_rows * 1000 + c.data_cols, int64_t(64 * 1000 + 128));
    QCOMPARE(c.scale_rows * 1000 + c.scale_cols, int64_t(128 * 1000 + 4));
    QCOMPARE(d.data_rows * 1000 + d.data_cols, int64_t(48 * 1000 + 56));
    QCOMPARE(d.scale_rows * 1000 + d.scale_cols, int64_t(128 * 1000 + 8));
    // every (row, block) of a [256, 32]-block grid lands on its own byte
    std::vector<int> seen(256 * 32, 0);
    for (int64_t r = 0; r < 256; ++r) {
      for (int64_t col = 0; col < 32; ++col) seen.at(tiled_offset(r, col, 32)) += 1;
    }
    QVERIFY(std::all_of(seen.begin(), seen.end(), [](int v) { return v == 1; }));
  }

  // The fast transform is the regular Hadamard: row i of its image of the identity is
  // H_G[i, j] = (-1)^c / sqrt(G), c = the base-4 digit positions where i and j sum to 3; it is
  // its own inverse.
  void convrotIsTheRegularHadamard() {
    for (const int g : {4, 16, 64}) {
      std::vector<float> m(static_cast<std::size_t>(g * g), 0.0f);
      for (int i = 0; i < g; ++i) m[static_cast<std::size_t>(i * g + i)] = 1.0f;
      undo_convrot(m.data(), g, g, g);
      for (int i = 0; i < g; ++i) {
        for (int j = 0; j < g; ++j) {
          int c = 0;
          for (int a = i, b = j; a || b; a /= 4, b /= 4) c += (a % 4 + b % 4 == 3);
          const float want = (c % 2 ? -1.0f : 1.0f) / std::sqrt(float(g));
          QVERIFY2(std::fabs(m[static_cast<std::size_t>(i * g + j)] - want) < 1e-6f, qPrintable(QString("G %1 [%2,%3]").arg(g).arg(i).arg(j)));
        }
      }
      undo_convrot(m.data(), g, g, g);
      for (int i = 0; i < g * g; ++i) QVERIFY(std::fabs(m[static_cast<std::size_t>(i)] - (i % (g + 1) == 0 ? 1.0f : 0.0f)) < 1e-5f);
    }
  }

  // Quantise then dequantise, each weight within its format's rounding: int8 half a step of its
  // row's scale; mxfp8 E4M3's half ulp (2^-4 relative) or, below its normal range, half its
  // smallest step, times the block's power of two; nvfp4 E2M1's largest half step (1) times the
  // block scale, plus E4M3's rounding of that scale (block max / 6 may land 2^-4 under).
  void quantisersStayWithinTheirRounding() {
    const int64_t n = 40, k = 100;  // padded storage in both block formats
    const auto w = random_weight(n, k, 7);
    std::vector<float> back(w.size());
    {
      std::vector<int8_t> q(w.size());
      std::vector<float> s(n);
      quantize_int8(w.data(), n, k, true, q.data(), s.data());
      dequant_int8(q.data(), s.data(), true, n, k, back.data());
      for (int64_t i = 0; i < n * k; ++i) QVERIFY(std::fabs(back[i] - w[i]) <= s[i / k] * 0.5f * 1.0001f);
    }
    {
      const QuantLayerConf conf{QuantFormat::Mxfp8};
      const auto st = stored_shape(conf, n, k);
      std::vector<uint8_t> codes(st.data_rows * st.data_cols), e(st.scale_rows * st.scale_cols);
      quantize_mxfp8(w.data(), n, k, codes.data(), e.data());
      dequant_mxfp8(codes.data(), st.data_cols, e.data(), st.scale_cols, n, k, back.data());
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t c = 0; c < k; ++c) {
          const float block = std::ldexp(1.0f, int(e[tiled_offset(r, c / 32, st.scale_cols)]) - 127);
          const float v = w[r * k + c];
          QVERIFY(std::fabs(back[r * k + c] - v) <= std::max(std::fabs(v) * 0.0625f, block * std::ldexp(1.0f, -10)) * 1.0001f);
        }
      }
    }
    {
      const QuantLayerConf conf{QuantFormat::Nvfp4};
      const auto st = stored_shape(conf, n, k);
      std::vector<uint8_t> packed(st.data_rows * st.data_cols), scales(st.scale_rows * st.scale_cols);
      const float s2 = quantize_nvfp4(w.data(), n, k, packed.data(), scales.data());
      dequant_nvfp4(packed.data(), st.data_cols * 2, scales.data(), st.scale_cols, s2, n, k, back.data());
      const float* e4m3 = fp8_decode_table(Fp8Format::E4M3FN);
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t c = 0; c < k; ++c) {
          const float t = s2 * e4m3[scales[tiled_offset(r, c / 16, st.scale_cols)]];
          QVERIFY(std::fabs(back[r * k + c] - w[r * k + c]) <= t * 1.5f);
        }
      }
    }
  }

  // convert --to int8|mxfp8|nvfp4 writes what ComfyUI's rules load (formats/README.md, "How ComfyUI
  // finds and loads a quantised layer": a 1-D U8 `.comfy_quant` holding json.dumps' string, the
  // weight and scales in the format's dtypes and stored shapes, Linear layers only, every other
  // tensor unchanged), and this engine reads it back to the same bits: the converted file gives the
  // picture of the BF16 file quantised to the same format at load.
  void convertWritesComfyLayersThatReadBackBitExact() {
    FP8S_REQUIRE_REFERENCE();
    const std::string src = test::reference_path("zimage/tiny-zimage-turbo.safetensors");
    const auto up = [](int64_t v, int64_t m) { return (v + m - 1) / m * m; };
    for (const char* to : {"int8", "mxfp8", "nvfp4"}) {
      const QString out = m_dir.path() + "/converted-" + to + ".safetensors";
      const auto r = test::run_cli({"convert", "--model", QString::fromStdString(src), "--to", to, "--out", out, "--log-level", "warn"});
      QVERIFY2(r.exit_code == 0, qPrintable(r.err));
      const SafetensorsFile in(src), f(out.toStdString());
      const std::string format = to == std::string("int8") ? "int8_tensorwise" : to;
      int layers = 0;
      for (const auto& t : in.tensors()) {
        const auto* o = f.find(t.name);
        QVERIFY2(o, t.name.c_str());
        if (!(t.shape.size() == 2 && t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".weight") == 0)) {
          QVERIFY2(o->dtype == t.dtype && o->shape == t.shape, t.name.c_str());
          std::vector<uint8_t> a(t.nbytes()), b(o->nbytes());
          in.read(t, a.data());
          f.read(*o, b.data());
          QVERIFY2(a == b, t.name.c_str());
          continue;
        }
        ++layers;
        const std::string layer = t.name.substr(0, t.name.size() - 7);
        const int64_t n = t.shape[0], k = t.shape[1];
        const auto* q = f.find(layer + ".comfy_quant");
        QVERIFY2(q && q->dtype == Dtype::U8 && q->shape.size() == 1, layer.c_str());
        std::string json(q->nbytes(), '\0');
        f.read(*q, json.data());
        QCOMPARE(QString::fromStdString(json), QString::fromStdString("{\"format\": \"" + format + "\"}"));
        const auto* scale = f.find(layer + ".weight_scale");
        QVERIFY(scale);
        if (format == "int8_tensorwise") {
          QVERIFY(o->dtype == Dtype::I8 && o->shape == (std::vector<int64_t>{n, k}));
          QVERIFY(scale->dtype == Dtype::F32 && scale->shape == (std::vector<int64_t>{n, 1}));
        } else if (format == "mxfp8") {
          QVERIFY(o->dtype == Dtype::F8_E4M3 && o->shape == (std::vector<int64_t>{up(n, 32), up(k, 32)}));
          QVERIFY(scale->dtype == Dtype::F8_E8M0 && scale->shape == (std::vector<int64_t>{up(up(n, 32), 128), up(up(k, 32) / 32, 4)}));
        } else {
          QVERIFY(o->dtype == Dtype::U8 && o->shape == (std::vector<int64_t>{up(n, 16), up(k, 16) / 2}));
          QVERIFY(scale->dtype == Dtype::F8_E4M3 && scale->shape == (std::vector<int64_t>{up(up(n, 16), 128), up(up(k, 16) / 16, 4)}));
          const auto* s2 = f.find(layer + ".weight_scale_2");
          QVERIFY(s2 && s2->dtype == Dtype::F32 && s2->shape.empty());
        }
      }
      QVERIFY2(layers > 10, qPrintable(QString::number(layers)));
      const WeightType type = *parse_weight_type(to);
      auto a = zimage_options(out.toStdString(), type), b = zimage_options(src, type);
      Engine converted(a), at_load(b);
      QVERIFY2(pixels(converted, type) == pixels(at_load, type), to);
    }
  }

  // bench --section weights' figure for one layer is the README's per-format error of its source
  // weight (source_rel_rms_err, from comfy-kitchen's quantisers, 6 digits): src.a, src.b and src.c
  // each alone in a file, as INT8 (per-row scales), MXFP8 and NVFP4
  void weightErrorIsTheReferenceFigure() {
    FP8S_REQUIRE_REFERENCE();
    const SafetensorsFile cases(test::reference_path("formats/cases.safetensors"));
    const std::tuple<const char*, WeightType, double> rows[] = {
        {"src.a", WeightType::INT8, 0.023167}, {"src.b", WeightType::INT8, 0.02952},  {"src.c", WeightType::INT8, 0.016284},
        {"src.a", WeightType::MXFP8, 0.026826}, {"src.b", WeightType::MXFP8, 0.026291}, {"src.c", WeightType::MXFP8, 0.024086},
        {"src.a", WeightType::NVFP4, 0.093982}, {"src.b", WeightType::NVFP4, 0.093833}, {"src.c", WeightType::NVFP4, 0.09022}};
    for (const auto& [src, type, want] : rows) {
      const auto& rec = cases.at(src);
      const std::string path = (m_dir.path() + "/" + src + ".safetensors").toStdString();
      {
        SafetensorsWriter w(path, {{"layer.weight", rec.dtype, rec.shape}}, {}, true);
        std::vector<uint8_t> raw(rec.nbytes());
        cases.read(rec, raw.data());
        w.append(raw.data(), raw.size());
        w.commit();
      }
      const auto e = measure_weight_error(SafetensorsFile(path), type, Fp8Scale::Channel);
      QCOMPARE(e.layers, uint64_t(1));
      QVERIFY2(std::fabs(e.rel_rms - want) <= 1e-6 + 1e-5 * want,
               qPrintable(QString("%1 %2: %3, the reference %4").arg(src).arg(weight_type_name(type)).arg(e.rel_rms, 0, 'g', 8).arg(want)));
    }
  }

  // The mixed file: inspect counts its layers by format; the generation streamed equals the
  // resident one bit for bit; a LoRA on its quantised layers runs online and changes the picture.
  void mixedZImageFileThroughTheEngine() {
    FP8S_REQUIRE_REFERENCE();
    const std::string mixed = test::reference_path("formats/tiny-zimage-mixed.safetensors");
    const SafetensorsFile file(mixed);
    const auto scheme = read_fp8_scheme(file);
    QCOMPARE(scheme.layout, std::string("ComfyUI comfy_quant"));
    uint64_t layers = 0;
    for (const auto& [label, count] : scheme.formats) layers += count;
    QCOMPARE(layers, uint64_t(18));  // the README's table
    QCOMPARE(scheme.formats.at("NVFP4"), uint64_t(3));
    QCOMPARE(scheme.formats.at("INT8 ConvRot"), uint64_t(3));
    Engine engine(zimage_options(mixed, WeightType::BF16));
    const auto resident = pixels(engine, WeightType::BF16);
    const auto streamed = pixels(engine, WeightType::BF16, 0);  // every block streamed
    QVERIFY(resident == streamed);
    // a LoRA over every Linear layer (made for the BF16 file's shapes, which are the mixed file's
    // logical ones): its quantised layers keep their bytes and take it online, also when a merge
    // is asked for, so merged and online agree; it moves the output; removed, it leaves no trace
    const QString lora = m_dir.path() + "/lora.safetensors";
    const auto made = test::run_cli({"make-synthetic-lora", "--model", QString::fromStdString(test::reference_path("zimage/tiny-zimage-turbo.safetensors")),
                                     "--strength", "0.5", "--out", lora, "--log-level", "warn"});
    QVERIFY2(made.exit_code == 0, qPrintable(made.err));
    const std::vector<LoraRequest> request{{lora.toStdString(), 1.0, 1.0}};
    const StorageSpec fp32{WeightType::FP32};
    const auto plain = engine.unet_probe(fp32, ComputeType::FP32, 3, 8);
    const auto online = engine.unet_probe(fp32, ComputeType::FP32, 3, 8, request, LoraMode::Online);
    const auto merged = engine.unet_probe(fp32, ComputeType::FP32, 3, 8, request, LoraMode::Merge);
    double scale = 0, moved = 0, gap = 0;
    for (std::size_t i = 0; i < plain.size(); ++i) {
      scale = std::max(scale, double(std::fabs(plain[i])));
      moved = std::max(moved, double(std::fabs(online[i] - plain[i])));
      gap = std::max(gap, double(std::fabs(online[i] - merged[i])));
    }
    QVERIFY2(moved > 1e-2 * scale, qPrintable(QString("the LoRA moved the output by %1 of %2").arg(moved).arg(scale)));
    QVERIFY2(gap <= 1e-5 * scale, qPrintable(QString("merged against online: %1 of %2").arg(gap).arg(scale)));
    QCOMPARE(engine.unet_probe(fp32, ComputeType::FP32, 3, 8), plain);
  }
};

QTEST_GUILESS_MAIN(TestQuantFormats)
#include "test_quant_formats.moc"
