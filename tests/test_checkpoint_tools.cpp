// The CLI's checkpoint tools end to end: make-synthetic, inspect, convert, probe fp8-*, and the
// one-line errors of bad input (issue 2).
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <cmath>

#include "backend/backend.h"
#include "fp8/codec.h"
#include "models/convert.h"
#include "models/inspect.h"
#include "io/safetensors.h"
#include "models/architecture.h"
#include "support.h"

using namespace fp8s;

namespace {

QJsonObject json_of(const test::CliResult& r) { return QJsonDocument::fromJson(r.out.toUtf8()).object(); }

QJsonObject component(const QJsonObject& report, const QString& name) {
  for (const auto& c : report["components"].toArray()) {
    if (c.toObject()["name"].toString() == name) return c.toObject();
  }
  return {};
}

std::vector<float> read_f32(const SafetensorsFile& f, const std::string& name) {
  return test::read_f32_tensor(f, name);
}

}  // namespace

class TestCheckpointTools : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;
  QString m_tiny;

 private Q_SLOTS:
  void initTestCase() {
    m_tiny = m_dir.path() + "/tiny.safetensors";
    auto r = test::run_cli({"make-synthetic", "--arch", "tiny-sd1", "--seed", "3", "--out", m_tiny});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
  }

  void makeSyntheticIsDeterministicAndRealistic() {
    const QString again = m_dir.path() + "/again.safetensors";
    auto r = test::run_cli({"make-synthetic", "--arch", "tiny-sd1", "--seed", "3", "--out", again});
    QCOMPARE(r.exit_code, 0);
    QCOMPARE(test::read_bytes(again.toStdString()), test::read_bytes(m_tiny.toStdString()));
    SafetensorsFile f(m_tiny.toStdString());
    QVERIFY(f.metadata().count("ldm.config"));
    const auto norm = read_f32(f, "model.diffusion_model.out.0.weight");
    const auto bias = read_f32(f, "model.diffusion_model.out.0.bias");
    for (float v : norm) QCOMPARE(v, 1.0f);
    for (float v : bias) QCOMPARE(v, 0.0f);
    const auto w = read_f32(f, "model.diffusion_model.input_blocks.1.0.in_layers.2.weight");  // fan_in 288
    const float bound = std::sqrt(3.0f / 288.0f);
    double sum_sq = 0;
    for (float v : w) {
      QVERIFY(std::isfinite(v) && std::fabs(v) <= bound * 1.001f);
      sum_sq += double(v) * v;
    }
    // uniform(-b, b) has variance b^2/3 = 1/fan_in
    QVERIFY(std::fabs(sum_sq / w.size() * 288.0 - 1.0) < 0.1);
    const auto acp = read_f32(f, "alphas_cumprod");
    QVERIFY(std::fabs(acp[0] - (1 - 0.00085f)) < 1e-7);
    QVERIFY(std::fabs(acp[999] - 0.00466009851f) < 1e-8);  // prod(1 - beta), computed by hand
  }

  void inspectReportsCounts() {
    auto r = test::run_cli({"inspect", "--model", m_tiny, "--json"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    const auto j = json_of(r);
    QCOMPARE(j["architecture"].toString(), QString("SD 1.x"));
    QCOMPARE(j["storage"].toString(), QString("fp16"));
    const auto layout = checkpoint_layout(preset_tiny_sd1(), Dtype::F16);
    uint64_t unet = 0, unet_quant = 0;
    for (const auto& e : layout) {
      uint64_t n = 1;
      for (auto d : e.shape) n *= d;
      if (e.component == Component::UNet) unet += n;
      if (e.component == Component::UNet && is_weight_role(e.role)) unet_quant += n;
    }
    QCOMPARE(uint64_t(component(j, "unet")["params"].toDouble()), unet);
    QCOMPARE(uint64_t(component(j, "unet")["quantisable_params"].toDouble()), unet_quant);
    const auto total = j["total"].toObject();
    const auto bytes = total["bytes"].toObject();
    // FP8 limit = one byte per quantisable weight + 2 bytes per other weight + buffers
    const double q = total["quantisable_params"].toDouble();
    const double p = total["params"].toDouble();
    QCOMPARE(bytes["fp8"].toDouble(), q + 2 * (p - q) + (bytes["fp16"].toDouble() - 2 * p));
    QCOMPARE(j["fp8_limit_bytes"].toDouble(), bytes["fp8"].toDouble());
    auto text = test::run_cli({"inspect", "--model", m_tiny});
    QVERIFY(text.out.contains("FP8 limit"));
    // the residency plan under a weight budget: at 0 every block streams, and the blocks with the
    // layers outside them hold every Linear/Conv2d weight of the UNet (2 bytes each in FP16),
    // counted here from the layout; a budget of all of it keeps every block
    uint64_t layers = 0;
    for (const auto& e : layout) {
      if (e.component == Component::UNet && e.shape.size() >= 2 && e.name.size() > 7 && e.name.compare(e.name.size() - 7, 7, ".weight") == 0) {
        uint64_t n = 1;
        for (auto d : e.shape) n *= d;
        layers += 2 * n;
      }
    }
    for (const uint64_t budget : {uint64_t(0), layers}) {
      r = test::run_cli({"inspect", "--model", m_tiny, "--weight-budget", QString::number(budget), "--weights", "fp16", "--json"});
      QVERIFY2(r.exit_code == 0, qPrintable(r.err));
      const auto plan = json_of(r)["residency"].toObject();
      const auto blocks = plan["blocks"].toArray();
      QVERIFY(blocks.size() > 3);
      double sum = plan["fixed_bytes"].toDouble();
      for (const auto& b : blocks) {
        sum += b.toObject()["bytes"].toDouble();
        QCOMPARE(b.toObject()["streamed"].toBool(), budget == 0);
      }
      QCOMPARE(uint64_t(sum), layers);
    }
    text = test::run_cli({"inspect", "--model", m_tiny, "--weight-budget", "0"});
    QVERIFY2(text.out.contains("resident 0 of ") && text.out.contains("middle_block") && text.out.contains("streamed"), qPrintable(text.out));
    test::expect_one_line_error(test::run_cli({"inspect", "--model", m_tiny, "--weight-budget", "auto"}), 2, "give a size");
  }

  void convertQuantisesAndInspectSeesFp8() {
    for (const char* scale : {"none", "tensor", "channel"}) {
      const QString out = m_dir.path() + "/fp8-" + scale + ".safetensors";
      auto r = test::run_cli({"convert", "--model", m_tiny, "--weights", "fp8-e4m3", "--fp8-scale",
                              scale, "--out", out});
      QVERIFY2(r.exit_code == 0, qPrintable(r.err));
      auto i = test::run_cli({"inspect", "--model", out, "--json"});
      const auto j = json_of(i);
      QCOMPARE(j["storage"].toString(), QString("fp8-e4m3 (scale %1)").arg(scale));
      SafetensorsFile src(m_tiny.toStdString()), dst(out.toStdString());
      const std::string w = "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight";
      QCOMPARE(dst.at(w).dtype, Dtype::F8_E4M3);
      QCOMPARE(dst.at("first_stage_model.decoder.conv_in.weight").dtype, Dtype::F16);  // VAE kept
      QCOMPARE(dst.at("model.diffusion_model.time_embed.0.weight").dtype, Dtype::F16);
      const auto orig = read_f32(src, w);
      std::vector<uint8_t> codes(dst.at(w).nbytes());
      dst.read(dst.at(w), codes.data());
      // scaled: ComfyUI's comfy_quant layout on the UNet's Linear layers (.weight_scale, 0-d per
      // tensor or [out,1] per channel, and .comfy_quant's JSON); convolutions unscaled
      const std::string layer = w.substr(0, w.size() - 7);
      std::vector<float> scales{1.0f};
      const int64_t rows = dst.at(w).shape[0];
      if (std::string(scale) != "none") {
        scales = read_f32(dst, layer + ".weight_scale");
        const auto shape = dst.at(layer + ".weight_scale").shape;
        QVERIFY(std::string(scale) == "tensor" ? shape.empty() : shape == std::vector<int64_t>({rows, 1}));
        std::string conf(dst.at(layer + ".comfy_quant").nbytes(), '\0');
        dst.read(dst.at(layer + ".comfy_quant"), conf.data());
        QCOMPARE(QString::fromStdString(conf), QString(R"({"format":"float8_e4m3fn"})"));
      }
      QVERIFY(!dst.find(scale_key_for(w)));
      const std::string conv = "model.diffusion_model.input_blocks.1.0.in_layers.2.weight";
      QCOMPARE(dst.at(conv).dtype, Dtype::F8_E4M3);
      QVERIFY(!dst.find("model.diffusion_model.input_blocks.1.0.in_layers.2.weight_scale"));
      QCOMPARE(int64_t(scales.size()), std::string(scale) == "channel" ? rows : 1);
      const int64_t cols = int64_t(orig.size()) / rows;
      for (std::size_t k = 0; k < orig.size(); ++k) {
        const float s = scales[scales.size() == 1 ? 0 : k / cols];
        QCOMPARE(codes[k], encode_fp8(orig[k] / s, Fp8Format::E4M3FN));
      }
      // non-quantised tensors are bit-identical
      const std::string b = "model.diffusion_model.out.2.bias";
      QCOMPARE(read_f32(dst, b), read_f32(src, b));
    }
    auto again = test::run_cli({"convert", "--model", m_dir.path() + "/fp8-none.safetensors",
                                "--weights", "fp8-e5m2", "--out", m_dir.path() + "/twice.safetensors"});
    test::expect_one_line_error(again, 2, "already stored in FP8");
  }

  // convert --weights fp16: an FP32 checkpoint halved (how the demo model's FP16 master is made):
  // every float tensor F16 and equal to its FP32 value rounded by the codec, the rest untouched;
  // inspect and --weights auto then see fp16.
  void convertHalvesAnFp32Checkpoint() {
    const QString fp32 = m_dir.path() + "/tiny-fp32.safetensors", half = m_dir.path() + "/tiny-half.safetensors";
    auto made = test::run_cli({"make-synthetic", "--arch", "tiny-sd1", "--dtype", "fp32", "--seed", "5", "--out", fp32});
    QVERIFY2(made.exit_code == 0, qPrintable(made.err));
    auto r = test::run_cli({"convert", "--model", fp32, "--weights", "fp16", "--out", half});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    SafetensorsFile src(fp32.toStdString()), dst(half.toStdString());
    QCOMPARE(dst.tensors().size(), src.tensors().size());
    int cast = 0;
    for (const auto& t : src.tensors()) {
      const auto& d = dst.at(t.name);
      QCOMPARE(d.shape, t.shape);
      if (t.dtype != Dtype::F32) {
        QCOMPARE(d.dtype, t.dtype);
        continue;
      }
      QCOMPARE(d.dtype, Dtype::F16);
      const auto orig = read_f32(src, t.name);
      std::vector<uint16_t> bits(orig.size());
      dst.read(d, bits.data());
      for (std::size_t k = 0; k < orig.size(); ++k) {
        if (bits[k] != f32_to_f16(orig[k])) QFAIL(t.name.c_str());
      }
      ++cast;
    }
    QVERIFY(cast > 100);
    QVERIFY(dst.metadata().count("fp8s.quantization") == 0);
    const auto report = inspect_checkpoint(dst);
    QCOMPARE(QString::fromStdString(report.storage), QString("fp16"));
    QCOMPARE(default_storage(report).weights, WeightType::FP16);
    QCOMPARE(default_storage(inspect_checkpoint(src)).weights, WeightType::FP16);  // FP32 files load as FP16
  }

  void probeFp8RoundTrip() {
    const std::string in = (m_dir.path() + "/probe-in.safetensors").toStdString();
    std::vector<float> values;
    for (int i = -400; i <= 400; ++i) values.push_back(i * 0.731f);
    values.push_back(1e6f);
    {
      SafetensorsWriter w(in, {{"x", Dtype::F32, {int64_t(values.size())}}}, {});
      w.append(values.data(), values.size() * 4);
      w.commit();
    }
    for (const char* fmt : {"e4m3", "e5m2"}) {
      const QString enc = m_dir.path() + "/enc-" + fmt + ".safetensors";
      const QString dec = m_dir.path() + "/dec-" + fmt + ".safetensors";
      auto r = test::run_cli({"probe", "fp8-encode", "--format", fmt, "--in", QString::fromStdString(in), "--out", enc});
      QVERIFY2(r.exit_code == 0, qPrintable(r.err));
      r = test::run_cli({"probe", "fp8-decode", "--format", fmt, "--in", enc, "--out", dec});
      QVERIFY2(r.exit_code == 0, qPrintable(r.err));
      const Fp8Format f = std::string(fmt) == "e4m3" ? Fp8Format::E4M3FN : Fp8Format::E5M2;
      SafetensorsFile e(enc.toStdString()), d(dec.toStdString());
      QCOMPARE(e.at("x").dtype, f == Fp8Format::E4M3FN ? Dtype::F8_E4M3 : Dtype::F8_E5M2);
      const auto back = read_f32(d, "x");
      for (std::size_t i = 0; i < values.size(); ++i) {
        QCOMPARE(back[i], decode_fp8(encode_fp8(values[i], f), f));
      }
    }
  }

  void badInputGivesOneLineErrors() {
    const QString dir = m_dir.path();
    test::write_bytes((dir + "/model.ckpt").toStdString(), "pickle");
    test::expect_one_line_error(test::run_cli({"inspect", "--model", dir + "/model.ckpt"}), 2, "pickle");
    test::expect_one_line_error(test::run_cli({"inspect", "--model", dir + "/none.safetensors"}), 2, "cannot open");
    test::write_bytes((dir + "/junk.safetensors").toStdString(), std::string(64, 'x'));
    test::expect_one_line_error(test::run_cli({"inspect", "--model", dir + "/junk.safetensors"}), 2, "junk.safetensors");
    test::expect_one_line_error(test::run_cli({"inspect", "--model", m_tiny, "--bogus"}), 2, "--bogus");
    test::expect_one_line_error(test::run_cli({"make-synthetic", "--arch", "sd9", "--out", dir + "/x"}), 2, "sd9");
    test::expect_one_line_error(test::run_cli({"convert", "--model", m_tiny, "--weights", "fp4", "--out", dir + "/y"}), 2, "fp4");
    test::expect_one_line_error(test::run_cli({"make-synthetic", "--arch", "tiny-sd1", "--out", m_tiny}), 2, "already exists");
    test::expect_one_line_error(test::run_cli({"probe", "clipx", "--out", dir + "/p"}), 2, "unknown probe role");
    test::expect_one_line_error(test::run_cli({}), 2, "subcommand");
    auto v = test::run_cli({"--version"});
    QCOMPARE(v.exit_code, 0);
    QVERIFY(v.out.startsWith("fp8studio-cli "));
    // the LibTorch it runs on, and on a CUDA build the CUDA version and GPU architectures
    QVERIFY2(v.out.contains(QString::fromStdString("LibTorch " + backend::torch_version())), qPrintable(v.out));
    QVERIFY2(v.out.contains(backend::built_with_cuda() ? "CUDA " : "CPU only"), qPrintable(v.out));
  }

  void benchCodecReports() {
    auto r = test::run_cli({"bench", "--section", "codec", "--size-mib", "4", "--codec-repeats", "2", "--json"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    const auto rows = json_of(r)["codec"].toArray();
    // encode from 3 types and decode into 3 per FP8 format, and the 16-bit conversions (issue 53)
    QCOMPARE(rows.size(), 2 * 6 + 5);
    QStringList directions;
    for (const auto& row : rows) {
      QVERIFY(row.toObject()["gb_per_s"].toDouble() > 0);
      directions << row.toObject()["direction"].toString();
    }
    for (const char* d : {"decode e4m3fn->f32", "decode e5m2->bf16", "convert f16->f32", "convert bf16->f32", "convert f16->bf16"}) {
      QVERIFY2(directions.contains(d), d);
    }
  }
};

QTEST_GUILESS_MAIN(TestCheckpointTools)
#include "test_checkpoint_tools.moc"
