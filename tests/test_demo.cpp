// The demo model's world (issue 10): rendered scenes read back by the checker for every attribute
// combination, captions from the grammar, the held-out split, the generated CLIP-format vocabulary,
// and — when the trained model is shipped — one generation that the checker must accept.
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QtTest>

#include <QTemporaryDir>

#include <atomic>
#include <map>
#include <set>
#include <vector>

#include "core/error.h"
#include "demo/demo_model.h"
#include "demo/scenes.h"
#include "demo/train.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "models/inspect.h"
#include "demo/vocab.h"
#include "pipeline/engine.h"
#include "text/clip_tokenizer.h"
#include "text/prompt_parser.h"
#include "support.h"

using namespace fp8s;
using namespace fp8s::demo;

// Floors of the slow evaluation (30 captions, about three standard errors under the measured
// 200-caption results of the shipped FP16 master stored in FP8 E4M3: background 100%, colour 93.5%,
// shape 84%, position 99.5%; chance is 10%, 10%, 17% and 11%).
constexpr double kBackgroundFloor = 0.9, kColourFloor = 0.8, kShapeFloor = 0.6, kPositionFloor = 0.85;

// `path` := the shipped demo model, verified; the test is skipped where the build has none.
#define FP8S_DEMO_MODEL_OR_SKIP(path) \
  std::string path;                    \
  try {                                \
    path = find_demo_model();          \
  } catch (const InputError& e) {      \
    QSKIP(e.what());                   \
  }

class TestDemo : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  // Exhaustive: every shape x colour x size x position (on two backgrounds) renders into an image
  // that the checker reads back as exactly those attributes.
  void checkerReadsEveryRenderedScene() {
    int scenes = 0;
    for (int shape = 0; shape < int(shapes().size()); ++shape)
      for (int colour = 0; colour < int(colours().size()); ++colour)
        for (int size = 0; size < 2; ++size)
          for (int position = 0; position < int(positions().size()); ++position)
            for (int bg : {(colour + 1) % int(colours().size()), (colour + 5) % int(colours().size())}) {
              Scene s;
              s.background = bg;
              s.items.push_back({shape, colour, size, position});
              const auto r = read_image(render(s));
              const auto label = caption(s);
              QVERIFY2(r.background == bg, label.c_str());
              QVERIFY2(r.colour == colour, label.c_str());
              QVERIFY2(r.position == position, label.c_str());
              QVERIFY2(r.shape == shape, (label + " read as " + (r.shape >= 0 ? shapes()[std::size_t(r.shape)] : "nothing")).c_str());
              QVERIFY2(r.size == size, label.c_str());
              ++scenes;
            }
    QCOMPARE(scenes, 6 * 10 * 2 * 9 * 2);
    // a plain background has no shape: nothing is read
    Scene empty;
    empty.background = 2;
    empty.items.push_back({0, 2, 0, 0});  // same colour as the background: invisible
    QCOMPARE(read_image(render(empty)).shape, -1);
  }

  void captionsFollowTheGrammar() {
    Scene s;
    s.background = 2;
    s.items.push_back({0, 0, 1, 0});
    QCOMPARE(caption(s), std::string("a large red circle in the centre on a blue background"));
    CaptionParts p;
    p.size = false;
    p.position = false;
    QCOMPARE(caption(s, p), std::string("a red circle on a blue background"));
    s.items = {{3, 3, 0, 5}};
    QCOMPARE(caption(s, {true, true, false}), std::string("a small yellow star in the top left corner"));
    s.items = {{1, 1, 1, 0}, {2, 4, 1, 0}};
    QCOMPARE(caption(s, {false, false, false}), std::string("a green square to the left of a white triangle"));
  }

  void heldOutCombinationsNeverTrain() {
    const auto all = all_single_scenes();
    QCOMPARE(all.size(), std::size_t(6 * 10 * 2 * 9 * 9));
    std::set<std::string> held;
    for (const auto& s : all) {
      if (is_held_out(s)) held.insert(caption(s));
    }
    QVERIFY(held.size() >= 200);              // enough for the evaluation
    QVERIFY(held.size() < all.size() / 10);   // and most combinations train
    std::mt19937_64 rng(3);
    for (int i = 0; i < 20000; ++i) {
      const auto [scene, text] = sample_training(rng);
      QVERIFY(!is_held_out(scene));
      if (scene.items.size() == 1) QVERIFY(!held.count(caption(scene)));
    }
  }

  void vocabularyIsClipFormat() {
    QTemporaryDir dir;
    const auto words = grammar_words();
    const int size = write_vocabulary(dir.path().toStdString(), words);
    const auto t = ClipTokenizer::load(dir.path().toStdString() + "/vocab.json");
    QCOMPARE(int(t.vocab_size()), size);
    QCOMPARE(t.eos(), size - 1);  // BOS and EOS are the last two ids
    QCOMPARE(t.bos(), size - 2);
    // every grammar word is one token; any other text still tokenizes (byte symbols)
    std::set<int32_t> ids;
    for (const auto& w : words) {
      const auto enc = t.encode(w);
      QVERIFY2(enc.size() == 1, w.c_str());
      ids.insert(enc[0]);
    }
    QCOMPARE(ids.size(), words.size());
    QVERIFY(t.encode("a zebra").size() > 2);
    const auto chunks = tokenize_prompt(t, "a red circle on a blue background");
    QCOMPARE(chunks.token_count, 7);
  }

  // train-demo in miniature (2 autoencoder, 2 text/UNet, 3 decoder steps of 2 images), twice from
  // the same seed, once without the decoder phase: everything but the decoder is bit-identical
  // (deterministic, and the decoder phase leaves the encoder - the UNet's latent space - alone),
  // and the decoder phase changes the decoder. The result loads as an ordinary SD1 checkpoint.
  void trainingIsDeterministicAndDecoderPhaseKeepsTheLatentSpace() {
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    auto run = [&](const std::string& name, int decoder_steps, bool unet_bf16 = false, bool vae_bf16 = false) {
      TrainOptions o;
      o.unet_bf16 = unet_bf16;
      o.vae_bf16 = vae_bf16;
      o.dir = tmp.path().toStdString() + "/" + name;
      o.vae_steps = 2;
      o.unet_steps = 2;
      o.unet_cooldown = 1;
      o.decoder_steps = decoder_steps;
      o.vae_batch = o.unet_batch = o.decoder_batch = 2;
      o.checkpoint_every = 1000;
      const auto out = train_demo(o, {});
      SafetensorsFile f(out);
      std::map<std::string, std::vector<uint8_t>> bytes;
      for (const auto& t : f.tensors()) {
        std::vector<uint8_t> raw(t.nbytes());
        f.read(t, raw.data());
        bytes[t.name] = std::move(raw);
      }
      return bytes;
    };
    const auto a = run("a", 3), b = run("b", 3), c = run("c", 0);
    QCOMPARE(a.size(), c.size());
    QVERIFY(a == b);
    int decoder_changed = 0, others = 0;
    for (const auto& [name, raw] : a) {
      const bool decoder = name.rfind("first_stage_model.decoder.", 0) == 0 || name.rfind("first_stage_model.post_quant_conv.", 0) == 0;
      if (decoder) {
        decoder_changed += raw != c.at(name);
      } else {
        QVERIFY2(raw == c.at(name), name.c_str());
        ++others;
      }
    }
    QVERIFY(others > 100);
    QVERIFY(decoder_changed > 10);
    // the text/UNet phase in BF16 (FP32 master weights) trains: autograd goes through the BF16
    // weight casts (a reused cast buffer once broke it), and the UNet moves differently from FP32
    const auto d = run("d", 0, true);
    int unet_differs = 0;
    for (const auto& [name, raw] : d) {
      if (name.rfind("model.diffusion_model.", 0) == 0) unet_differs += raw != c.at(name);
    }
    QVERIFY(unet_differs > 10);
    // the autoencoder's phases in BF16 train too, and its weights move differently from FP32
    const auto e = run("e", 3, false, true);
    int vae_differs = 0;
    for (const auto& [name, raw] : e) {
      if (name.rfind("first_stage_model.", 0) == 0) vae_differs += raw != a.at(name);
    }
    QVERIFY(vae_differs > 10);
    Engine engine(LoadOptions{tmp.path().toStdString() + "/a/demo-sd1-fp32.safetensors", StorageSpec{}, tmp.path().toStdString() + "/a/tokenizer/vocab.json", ""});
    GenerationRequest r;
    r.prompt = "a red circle on a blue background";
    r.steps = 2;
    r.width = r.height = kImageSize;
    std::atomic<bool> never{false};
    const auto result = engine.generate(r, nullptr, never);
    QCOMPARE(result.images.at(0).image.width, kImageSize);
    QCOMPARE(result.images.at(0).image.height, kImageSize);
  }

  // The shipped model draws what it is asked (an engine regression shows as a wrong picture).
  void shippedModelDrawsItsCaption() {
    FP8S_DEMO_MODEL_OR_SKIP(path);
    Engine engine(LoadOptions{path, StorageSpec{WeightType::FP8_E4M3, Fp8Scale::Channel, false}, "", ""});
    GenerationRequest r;
    Scene s;
    s.background = 2;                        // blue
    s.items.push_back({3, 3, 1, 0});         // a large yellow star in the centre
    r.prompt = caption(s);
    r.steps = 20;
    r.cfg = 5.0f;
    r.sampler = Sampler::Euler;
    r.schedule = Schedule::Normal;
    r.seed = 1;
    r.width = r.height = kImageSize;
    r.storage = {WeightType::FP8_E4M3, Fp8Scale::Channel, false};
    std::atomic<bool> never{false};
    const auto result = engine.generate(r, nullptr, never);
    const auto sc = score(s, result.images.at(0).image);
    // background, colour and position are right on 92-100% of 200 held-out captions in every
    // storage, the shape class on 79-81%
    QVERIFY2(sc.background, r.prompt.c_str());
    QVERIFY2(sc.colour, r.prompt.c_str());
    QVERIFY2(sc.position, r.prompt.c_str());
    QVERIFY2(sc.shape, r.prompt.c_str());
  }

  // The demo model ships as its FP16 master (issue 22): `generate` with no --model and no --weights
  // stores it in FP16 (two bytes a quantisable weight, "Weights: fp16"), and `compare` with no
  // --model shows what FP8 E4M3 made from it buys (half the UNet bytes) and costs (other pixels).
  // README command 1 computes in what the processor does natively (issue 53): under each forced
  // ISA the run logs its choice and the PNG records it; an explicit bf16 on a CPU without BF16
  // instructions runs with a warning; an unknown FP8S_CPU_ISA is one line naming it
  void computeFollowsTheProcessor() {
    FP8S_DEMO_MODEL_OR_SKIP(path);
    QTemporaryDir dir;
    struct Case { const char* isa; QStringList extra; const char* line; const char* infotext; bool warns; };
    for (const Case& c : {Case{"avx2", {}, "compute: fp32 (auto: this CPU has no BF16 instructions (FP8S_CPU_ISA=avx2))", "Compute: fp32", false},
                          Case{"avx512bf16", {}, "compute: bf16 (auto: this CPU has AVX512-BF16 (FP8S_CPU_ISA=avx512bf16))", "Compute: bf16", false},
                          Case{"amx", {}, "compute: bf16 (auto: this CPU has AMX-BF16 (FP8S_CPU_ISA=amx))", "Compute: bf16", false},
                          Case{"avx2", {"--compute", "bf16"}, "compute: bf16 (as asked)", "Compute: bf16", true},
                          Case{"amx", {"--compute", "fp32"}, "compute: fp32 (as asked)", "Compute: fp32", false}}) {
      auto env = QProcessEnvironment::systemEnvironment();
      env.insert("FP8S_CPU_ISA", c.isa);
      const auto r = test::run_cli(QStringList{"generate", "--prompt", "a red circle on a blue background", "--steps", "2",
                                               "--seed", "2", "--outdir", "out", "--json"} + c.extra,
                                   dir.path(), 600000, env);
      QVERIFY2(r.exit_code == 0, qPrintable(r.err));
      QVERIFY2(r.err.contains(c.line), qPrintable(r.err));
      QCOMPARE(r.err.contains("compute bf16 is emulated on this CPU"), c.warns);
      const auto g = QJsonDocument::fromJson(r.out.toUtf8()).object();
      const auto png = read_png(dir.filePath(g["images"].toArray()[0].toObject()["path"].toString()).toStdString());
      QVERIFY2(png.parameters.find(c.infotext) != std::string::npos, png.parameters.c_str());
    }
    auto env = QProcessEnvironment::systemEnvironment();
    env.insert("FP8S_CPU_ISA", "zen9");
    test::expect_one_line_error(test::run_cli({"generate", "--prompt", "a red circle", "--steps", "1", "--outdir", "out"}, dir.path(), 600000, env),
                                2, "FP8S_CPU_ISA=zen9");
  }

  void shippedMasterIsFp16AndComparesAgainstFp8() {
    FP8S_DEMO_MODEL_OR_SKIP(path);
    const auto report = inspect_checkpoint(SafetensorsFile(path));
    QVERIFY(report.own_storage && report.own_storage->weights == WeightType::FP16);
    QCOMPARE(default_storage(report).weights, WeightType::FP16);
    QTemporaryDir dir;
    auto run = [&](const QStringList& args) {
      QProcess p;
      p.setWorkingDirectory(dir.path());
      p.start(QString::fromUtf8(FP8S_CLI_PATH), args);
      if (!p.waitForFinished(10 * 60 * 1000) || p.exitCode() != 0) qWarning("%s", p.readAllStandardError().constData());
      return QJsonDocument::fromJson(p.readAllStandardOutput()).object();
    };
    const auto g = run({"generate", "--prompt", "a red circle on a blue background", "--steps", "4", "--seed", "2",
                        "--outdir", "gen", "--json"});
    const auto png = read_png(dir.filePath(g["images"].toArray()[0].toObject()["path"].toString()).toStdString());
    QVERIFY2(png.parameters.find("FP8 weight: Disable") != std::string::npos &&
                 png.parameters.find("Weights: fp16") != std::string::npos,
             png.parameters.c_str());
    // the file's parameter census, two bytes each; packed convolution weights also hold oneDNN's
    // channel-block padding (the demo's 4-channel layers), a fraction of a percent
    const uint64_t held = uint64_t(g["weight_bytes"].toDouble()), census = 2 * report.total.params;
    if (g["conv_layout"].toString().startsWith("packed")) {
      QVERIFY2(held >= census && held <= census + census / 200, qPrintable(QString("%1 vs %2").arg(held).arg(census)));
    } else {
      QCOMPARE(held, census);
    }
    const auto c = run({"compare", "--prompt", "a small green ring in the bottom right corner on a white background",
                        "--steps", "8", "--sampler", "euler", "--schedule", "normal", "--cfg", "5", "--seed", "3",
                        "--outdir", "cmp", "--no-unet-error", "--json"});
    const auto modes = c["modes"].toArray();
    QCOMPARE(modes.size(), 2);
    const auto fp16 = modes[0].toObject(), fp8 = modes[1].toObject();
    QCOMPARE(fp16["mode"].toString(), QString("fp16"));
    QCOMPARE(fp8["mode"].toString(), QString("fp8-e4m3"));
    QVERIFY(fp8["weight_bytes"].toObject()["unet"].toDouble() < 0.55 * fp16["weight_bytes"].toObject()["unet"].toDouble());
    QVERIFY(fp8["max_abs_diff_vs_first"].toInt() > 0);  // FP8 changes pixels; it is not the same model
    QVERIFY(c["source_note"].toString().isEmpty());
  }

  // The quality gate on 30 held-out captions through the CLI (ctest label `slow`: FP8S_SLOW=1).
  void evaluationOnThirtyCaptions() {
    if (qEnvironmentVariableIsEmpty("FP8S_SLOW")) QSKIP("slow: run with FP8S_SLOW=1 (ctest -L slow)");
    try {
      find_demo_model();
    } catch (const InputError& e) {
      QSKIP(e.what());
    }
    QProcess p;
    p.start(QString::fromUtf8(FP8S_CLI_PATH), {"demo-eval", "--captions", "30", "--weights", "fp8-e4m3", "--json"});
    QVERIFY(p.waitForFinished(30 * 60 * 1000));
    QCOMPARE(p.exitCode(), 0);
    const auto j = QJsonDocument::fromJson(p.readAllStandardOutput()).object();
    qInfo("30 captions, FP8 E4M3: colour %.2f shape %.2f position %.2f background %.2f", j["colour"].toDouble(),
          j["shape"].toDouble(), j["position"].toDouble(), j["background"].toDouble());
    // floors well under the 200-caption figures in the README, so that a regression fails here
    QVERIFY(j["background"].toDouble() >= kBackgroundFloor);
    QVERIFY(j["colour"].toDouble() >= kColourFloor);
    QVERIFY(j["position"].toDouble() >= kPositionFloor);
    QVERIFY(j["shape"].toDouble() >= kShapeFloor);
  }
};

QTEST_GUILESS_MAIN(TestDemo)
#include "test_demo.moc"
