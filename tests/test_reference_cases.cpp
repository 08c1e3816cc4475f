// Replays every case of ../shared/reference/<FOLDER>/cases.json (sd1, sdxl, flux, zimage, controlnet) through fp8studio-cli
// (the code the CLI uses), in FP32 against the reference tolerance and in BF16 against a derived
// one (issues 3 and 6). Built once per folder (FP8S_CASES_FOLDER).
#include <QJsonArray>
#include <QJsonDocument>
#include <QFileInfo>
#include <QJsonObject>
#include <cmath>
#include <functional>

#include "io/png.h"
#include "io/safetensors.h"
#include "models/convert.h"
#include "pipeline/family.h"
#include "families/flux/flux_model.h"
#include "support.h"

using namespace fp8s;

namespace {

// BF16 keeps 8 significant bits: each matmul/conv input and weight is rounded with relative
// error <= 2^-9, so one layer adds ~2^-8 relative error, and errors of independent roundings add
// like a random walk over the ~40 layers on the longest path of these networks:
// 2^-8 * sqrt(40) ~= 0.025. One network pass must stay within 0.04 of max |ref|.
// A sampling loop re-feeds its own output: with CFG 7.5 the guided prediction carries the
// difference of two such passes scaled by 7.5, bounded by 2 * 0.04 * 7.5 / (number of steps
// averaging it out, >= 4 here) ~= 0.15 of max |ref|.
constexpr double kBf16PassTolerance = 0.04;
constexpr double kBf16SampleTolerance = 0.15;

const QString kFolder = QStringLiteral(FP8S_CASES_FOLDER);

// A folder whose family is built in steps names the roles built so far (tests/CMakeLists.txt);
// its other cases are not run yet. Empty: every case.
bool role_built(const QJsonObject& c) {
#ifdef FP8S_CASES_NOT_YET
  if (QString(FP8S_CASES_NOT_YET).split(',').contains(c["name"].toString())) return false;
#endif
#ifdef FP8S_CASES_ROLES
  return QString(FP8S_CASES_ROLES).split(',').contains(c["role"].toString());
#else
  (void)c;
  return true;
#endif
}

QJsonArray load_cases(const QString& folder) {
  const auto text = test::read_bytes(test::reference_path(folder + "/cases.json"));
  return QJsonDocument::fromJson(QByteArray::fromStdString(text)).array();
}

}  // namespace

class TestReferenceCases : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;

  // One row per case that `keep` accepts (a single empty row when the reference is absent).
  void add_rows(const std::function<bool(const QJsonObject&)>& keep) {
    QTest::addColumn<QJsonObject>("c");
    if (!test::have_reference()) {
      QTest::newRow("no-reference") << QJsonObject{};
      return;
    }
    int rows = 0;
    for (const auto& v : load_cases(kFolder)) {
      const auto c = v.toObject();
      if (keep(c) && role_built(c)) QTest::newRow(qPrintable(c["name"].toString())) << c, ++rows;
    }
    if (rows == 0) QTest::newRow("none") << QJsonObject{{"none", kFolder}};
  }
  static bool model_role(const QJsonObject& c) {
    const QString role = c["role"].toString();
    return role != "generate" && role != "tokenize";
  }


  // Runs a model-role case; returns {name -> (mine, ref, rtol)} comparisons.
  void replay(const QJsonObject& c, const QString& compute, double bf16_tolerance) {
    const QString folder = test::reference_dir() + "/" + kFolder + "/";
    QStringList args{"probe", c["role"].toString(), "--model", folder + c["model"].toString(),
                     "--case", folder + c["tensors"].toString(), "--prefix", c["prefix"].toString()};
    const auto case_args = c["args"].toArray();
    for (int i = 0; i < case_args.size(); ++i) {
      QString a = case_args[i].toString();
      if (i > 0 && (case_args[i - 1].toString() == "--lora" || case_args[i - 1].toString() == "--controlnet")) a = folder + a;
      if (i > 0 && case_args[i - 1].toString() == "--compute") a = compute;
      args << a;
      // flux/cases.json's LoRA cases write "--weights" without its value; flux/README.md says they
      // run with --weights fp32 (the reference merged into BFL's FP32 weights)
      if (a == "--weights" && (i + 1 == case_args.size() || case_args[i + 1].toString().startsWith("--"))) args << "fp32";
    }
    const QString out = m_dir.path() + "/" + c["name"].toString() + "-" + compute + ".safetensors";
    args << "--out" << out << "--overwrite" << "--log-level" << "warn";
    auto r = test::run_cli(args);
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    SafetensorsFile mine(out.toStdString()), ref((folder + c["tensors"].toString()).toStdString());
    for (const auto& o : c["outputs"].toArray()) {
      const std::string name = (c["prefix"].toString() + o.toString()).toStdString();
      std::vector<int64_t> shape_a, shape_b;
      const auto a = test::read_f32_tensor(mine, name, &shape_a);
      const auto b = test::read_f32_tensor(ref, name, &shape_b);
      QCOMPARE(shape_a, shape_b);
      double worst = 0, ref_max = 0;
      for (std::size_t i = 0; i < a.size(); ++i) {
        worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
        ref_max = std::max(ref_max, std::fabs(double(b[i])));
      }
      const double err = worst / ref_max;
      const double tol = compute == "fp32" ? c["rtol"].toDouble() : bf16_tolerance;
      qInfo("%s %s: max|mine-ref|/max|ref| = %.3g (tolerance %.3g)", qPrintable(c["name"].toString()),
            qPrintable(compute), err, tol);
      QVERIFY2(err <= tol, qPrintable(QString("%1 relative error %2 > %3").arg(QString::fromStdString(name)).arg(err).arg(tol)));
    }
  }

 private Q_SLOTS:
  void fp32_data() { add_rows([](const QJsonObject&) { return true; }); }
  void fp32() {
    QFETCH(QJsonObject, c);
    if (c.isEmpty()) FP8S_REQUIRE_REFERENCE();
    // formats/README.md: the optional cases are another tool's BF16 arithmetic; an engine that
    // widens BF16 to FP32 first (this one) matches the FP32 cases instead, which run
    if (c["optional"].toBool()) QSKIP("an optional case (its README: another tool's BF16 arithmetic)");
    const QString role = c["role"].toString();
    if (role == "tokenize") {
      auto r = test::run_cli({"tokenize", "--json", "--vocab", test::reference_dir() + "/clip", "--",
                              c["prompt"].toString()});
      QVERIFY2(r.exit_code == 0, qPrintable(r.err));
      const auto mine = QJsonDocument::fromJson(r.out.toUtf8()).object();
      QCOMPARE(mine["chunks"].toArray(), c["expected"].toObject()["chunks"].toArray());
      return;
    }
    if (role == "generate") {
      const QString folder = test::reference_dir() + "/" + kFolder + "/";
      const QString outdir = m_dir.path() + "/gen-" + c["name"].toString();
      QStringList args{"generate", "--model", folder + c["model"].toString(), "--outdir", outdir,
                       "--vocab", test::reference_dir() + "/clip"};
      const auto components = c["components"].toObject();
      for (const auto& [key, flag] : {std::pair{"t5", "--t5"}, std::pair{"clip_l", "--clip-l"}, std::pair{"vae", "--vae"},
                                      std::pair{"text_encoder", "--text-encoder"}, std::pair{"qwen_tokenizer", "--qwen-tokenizer"},
                                      std::pair{"mistral_tokenizer", "--mistral-tokenizer"},
                                      std::pair{"controlnet", "--controlnet"}, std::pair{"control_image", "--control-image"}}) {
        if (components.contains(key)) args << flag << folder + components[key].toString();
      }
      // a file the args name (an edit's reference image) lies in the case's folder
      for (const auto& a : c["args"].toArray()) args << (QFileInfo(folder + a.toString()).isFile() ? folder + a.toString() : a.toString());
      // the T5 tokenizer as a harness finds it (flux/README.md)
      if (kFolder == "flux") qputenv("FP8S_T5_TOKENIZER", (folder + "t5_tokenizer/tokenizer.json").toUtf8());
      auto r = test::run_cli(args);
      QVERIFY2(r.exit_code == 0, qPrintable(r.err));
      const auto files = QDir(outdir).entryList({"*.png"});
      QCOMPARE(files.size(), 1);
      const auto mine = read_png((outdir + "/" + files[0]).toStdString());
      if (c["model"].toString() == "tiny-flux-dev.safetensors") {
        // ComfyUI's all-in-one file (the same components under its prefixes) gives the same image
        QStringList aio{"generate", "--model", folder + "tiny-flux-dev-aio.safetensors", "--outdir", outdir + "-aio",
                        "--vocab", test::reference_dir() + "/clip"};
        for (const auto& a : c["args"].toArray()) aio << a.toString();
        r = test::run_cli(aio);
        QVERIFY2(r.exit_code == 0, qPrintable(r.err));
        const auto aio_files = QDir(outdir + "-aio").entryList({"*.png"});
        QCOMPARE(aio_files.size(), 1);
        QVERIFY(read_png((outdir + "-aio/" + aio_files[0]).toStdString()).image.pixels == mine.image.pixels);
      }
      const auto ref = read_png((folder + c["png"].toString()).toStdString());
      QCOMPARE(mine.image.width, ref.image.width);
      QCOMPARE(mine.image.height, ref.image.height);
      int worst = 0;
      for (std::size_t i = 0; i < ref.image.pixels.size(); ++i) {
        worst = std::max(worst, std::abs(int(mine.image.pixels[i]) - int(ref.image.pixels[i])));
      }
      qInfo("generate: worst channel difference %d levels", worst);
      QVERIFY(worst <= 2);
      QVERIFY(mine.parameters.find("Seed: ") != std::string::npos);
      return;
    }
    if (c.contains("timesteps") && kFolder == "flux") {
      // BFL's get_schedule on the case's token count (the noise's h/2 · w/2), FP32 in the reference
      const QString folder = test::reference_dir() + "/" + kFolder + "/";
      const SafetensorsFile cases((folder + c["tensors"].toString()).toStdString());
      const auto& noise = cases.at((c["prefix"].toString() + "noise").toStdString()).shape;
      const auto want = c["timesteps"].toArray();
      const auto got = flux_schedule(want.size() - 1, (noise[2] / 2) * (noise[3] / 2), !c["args"].toArray().contains("--no-shift"));
      QCOMPARE(int(got.size()), int(want.size()));
      for (int i = 0; i < want.size(); ++i) QVERIFY2(std::fabs(got[i] - want[i].toDouble()) < 1e-6, qPrintable(QString::number(i)));
    }
    replay(c, "fp32", 0);
  }

  // LoRA cases again with the LoRA applied online (factors at forward time) instead of merged.
  void lora_online_data() { add_rows([](const QJsonObject& c) { return c.contains("lora"); }); }
  void lora_online() {
    QFETCH(QJsonObject, c);
    if (c.isEmpty()) FP8S_REQUIRE_REFERENCE();
    if (c.contains("none")) QSKIP("this folder has no LoRA cases for the online mode");
    auto args = c["args"].toArray();
    args.append("--lora-mode");
    args.append("online");
    c["args"] = args;
    c["name"] = c["name"].toString() + "-online";
    replay(c, "fp32", 0);
  }

  void bf16_data() { add_rows(model_role); }
  void bf16() {
    QFETCH(QJsonObject, c);
    if (c.isEmpty()) FP8S_REQUIRE_REFERENCE();
    const QString role = c["role"].toString();
    // the formats roles have no compute type: dequantising is FP32's arithmetic (fp32 runs them)
    if (role == "dequant" || role == "linear" || role == "quantize") QSKIP("a formats role: FP32 arithmetic only");
    replay(c, "bf16", role == "sample" || role == "flux-sample" ? kBf16SampleTolerance : kBf16PassTolerance);
  }
};

QTEST_GUILESS_MAIN(TestReferenceCases)
#include "test_reference_cases.moc"
