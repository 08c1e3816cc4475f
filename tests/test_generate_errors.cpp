// generate on broken input: one-line errors with exit code 2, no output files (issue 3).
#include "io/png.h"
#include "io/safetensors.h"
#include "support.h"

using namespace fp8s;

class TestGenerateErrors : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;
  QString m_model, m_vocab;

  test::CliResult generate(QStringList extra, const QString& model = QString(),
                           const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment(),
                           const QString& outdir = QString()) {
    QStringList args{"generate", "--model", model.isEmpty() ? m_model : model, "--outdir",
                     outdir.isEmpty() ? m_dir.path() + "/out" : outdir, "--prompt", "a red fox", "--steps", "2", "--width", "64",
                     "--height", "64", "--weights", "fp32", "--compute", "fp32"};
    if (!m_vocab.isEmpty()) args << "--vocab" << m_vocab;
    return test::run_cli(args + extra, {}, 600000, env);
  }

 private Q_SLOTS:
  void initTestCase() {
    m_model = m_dir.path() + "/tiny.safetensors";
    auto r = test::run_cli({"make-synthetic", "--arch", "tiny-sd1", "--out", m_model});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    // OpenAI's vocabulary where ../shared has it, else the demo model's (these runs need one, not that one)
    m_vocab = test::have_reference() ? test::reference_dir() + "/clip" : QString(FP8S_SOURCE_DIR) + "/resources/demo/tokenizer";
  }

  void worksOnTheSyntheticModel() {
    auto r = generate({"--seed", "3", "--json"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    QVERIFY(QFileInfo::exists(m_dir.path() + "/out/00001-3.png"));
  }

  void badSizesAndSteps() {
    test::expect_one_line_error(generate({"--width", "65"}), 2, "not a multiple of 8");
    test::expect_one_line_error(generate({"--height", "100000"}), 2, "outside 64..4096");
    test::expect_one_line_error(generate({"--steps", "0"}), 2, "steps");
    test::expect_one_line_error(generate({"--compute", "fp16"}), 2, "CUDA");
    test::expect_one_line_error(generate({"--sampler", "plms"}), 2, "plms");
    test::expect_one_line_error(generate({"--cfg", "nan"}), 2, "CFG");
  }

  void wrongArchitecture() {
    FP8S_SKIP_WITHOUT_REFERENCE("needs ../shared/reference (SDXL and LoRA files)");
    test::expect_one_line_error(generate({}, test::reference_dir() + "/sd1/lora-tiny-sd1.safetensors"), 2,
                                "not a model of a family this program loads");
    // an SD 2.x layout (open_clip ViT-H text encoder): detected, named and refused
    const std::string sd2 = (m_dir.path() + "/sd2.safetensors").toStdString();
    {
      SafetensorsWriter w(sd2, {{"model.diffusion_model.input_blocks.0.0.weight", Dtype::F16, {320, 4, 3, 3}},
                                {"cond_stage_model.model.transformer.resblocks.0.attn.in_proj_weight", Dtype::F16, {3072, 1024}}},
                          {});
      std::vector<uint16_t> zeros(3072 * 1024, 0);
      w.append(zeros.data(), 320 * 4 * 9 * 2);
      w.append(zeros.data(), zeros.size() * 2);
      w.commit();
    }
    test::expect_one_line_error(generate({}, QString::fromStdString(sd2)), 2, "SD 2.x");
  }

  // img2img / inpainting inputs are checked before any work: one-line errors, exit code 2.
  void badImageInputs() {
    RgbImage img;
    img.width = 64;
    img.height = 64;
    img.pixels.assign(64 * 64 * 3, 128);
    const QString init = m_dir.path() + "/init.png", small = m_dir.path() + "/small-mask.png";
    QFile::remove(init);
    QFile::remove(small);
    write_png(init.toStdString(), img, "");
    img.width = 32;
    img.pixels.resize(32 * 64 * 3);
    write_png(small.toStdString(), img, "");
    test::expect_one_line_error(generate({"--init-image", m_dir.path() + "/absent.png"}), 2, "absent.png");
    test::expect_one_line_error(generate({"--init-image", m_model}), 2, "not a PNG");
    test::expect_one_line_error(generate({"--init-image", init, "--mask", small}), 2, "same size");
    test::expect_one_line_error(generate({"--init-image", init, "--denoising-strength", "1.5"}), 2, "denoising strength");
    test::expect_one_line_error(generate({"--mask", init}), 2, "init image");
    test::expect_one_line_error(generate({"--init-image", init, "--hr-scale", "2"}), 2, "hires");
    test::expect_one_line_error(generate({"--hr-scale", "9"}), 2, "hires scale");
    test::expect_one_line_error(generate({"--resize-mode", "stretch"}), 2, "resize-mode");
  }

  void loraTagsStayInTheLoraFolder() {
    const QString dir = m_dir.path() + "/loras";
    QDir().mkpath(dir);
    test::expect_one_line_error(generate({"--prompt", "a fox <lora:../tiny:1>", "--lora-dir", dir}), 2, "no paths");
    test::expect_one_line_error(generate({"--prompt", "a fox <lora:sub/x:1>", "--lora-dir", dir}), 2, "no paths");
    test::expect_one_line_error(generate({"--prompt", "a fox <lora:absent:1>", "--lora-dir", dir}), 2, "does not exist");
    test::expect_one_line_error(generate({"--prompt", "a fox <lora:absent:x>", "--lora-dir", dir}), 2, "not a number");
    test::expect_one_line_error(generate({"--lora", m_model + ":abc"}), 2, "FILE:MULTIPLIER");
  }

  // The synthetic model rewritten without `drop` and with an extra F16 tensor `extra` [4].
  QString rewritten(const QString& name, const std::string& drop, const std::string& extra = {}) {
    SafetensorsFile full(m_model.toStdString());
    std::vector<TensorSpec> specs;
    for (const auto& t : full.tensors()) {
      if (t.name != drop) specs.push_back({t.name, t.dtype, t.shape});
    }
    if (!extra.empty()) specs.push_back({extra, Dtype::F16, {4}});
    const QString path = m_dir.path() + "/" + name;
    SafetensorsWriter w(path.toStdString(), specs, full.metadata());
    for (const auto& s : specs) {
      if (s.name == extra) {
        const uint16_t zeros[4] = {0, 0, 0, 0};
        w.append(zeros, sizeof zeros);
        continue;
      }
      std::vector<uint8_t> raw(full.at(s.name).nbytes());
      full.read(full.at(s.name), raw.data());
      w.append(raw.data(), raw.size());
    }
    w.commit();
    return path;
  }

  void missingKeys() {
    const QString broken = rewritten("broken.safetensors", "model.diffusion_model.out.2.weight");
    test::expect_one_line_error(generate({}, broken), 2, "model.diffusion_model.out.2.weight");
  }

  void unexpectedKeys() {
    // a tensor under a model prefix that the architecture has no place for is an error naming it
    const QString odd = rewritten("extra.safetensors", "", "model.diffusion_model.input_blocks.0.1.weight");
    test::expect_one_line_error(generate({}, odd), 2, "model.diffusion_model.input_blocks.0.1.weight");
    const QString odd_vae = rewritten("extra-vae.safetensors", "", "first_stage_model.loss.logvar");
    test::expect_one_line_error(generate({}, odd_vae), 2, "first_stage_model.loss.logvar");
  }

  void missingVocabulary() {
    auto env = QProcessEnvironment::systemEnvironment();
    env.insert("HOME", m_dir.path() + "/home");
    env.insert("XDG_DATA_HOME", m_dir.path() + "/xdg");
    env.remove("FP8S_CLIP_VOCAB");
    const QString saved = m_vocab;
    m_vocab.clear();
    auto r = generate({}, {}, env);
    m_vocab = saved;
    test::expect_one_line_error(r, 2, "CLIP vocabulary");
    QVERIFY(r.err.contains(m_dir.path() + "/xdg/fp8studio/clip"));
    // looked up before the weights are read: a checkpoint that would fail to load reports the
    // vocabulary, not its missing tensor
    m_vocab.clear();
    const auto early = generate({}, rewritten("broken-too.safetensors", "model.diffusion_model.out.2.weight"), env);
    m_vocab = saved;
    test::expect_one_line_error(early, 2, "CLIP vocabulary");
  }

  // Failures leave nothing behind: each failing run writes into a folder of its own, which must
  // stay empty; the same count on a successful run finds its image, so the check can fail.
  void noFilesOnFailure() {
    int n = 0;
    auto files_after = [&](const QStringList& extra, const QString& model = QString()) {
      const QString out = m_dir.path() + "/fail-" + QString::number(++n);
      QDir().mkpath(out);
      generate(extra, model, QProcessEnvironment::systemEnvironment(), out);
      return QDir(out).entryList(QDir::Files | QDir::Hidden | QDir::NoDotAndDotDot);
    };
    for (const auto& extra : {QStringList{"--width", "65"}, QStringList{"--steps", "0"},
                              QStringList{"--sampler", "plms"}, QStringList{"--lora", m_model + ":abc"}}) {
      const auto left = files_after(extra);
      QVERIFY2(left.isEmpty(), qPrintable(extra.join(' ') + ": " + left.join(", ")));
    }
    QVERIFY(files_after({}, rewritten("broken-3.safetensors", "model.diffusion_model.out.2.weight")).isEmpty());
    QCOMPARE(files_after({"--seed", "4"}), QStringList{"00001-4.png"});
  }
};

QTEST_GUILESS_MAIN(TestGenerateErrors)
#include "test_generate_errors.moc"
