// PNG output: numbering that never overwrites, atomic writes, the A1111 `parameters` text and
// reading it back (issue 3).
#include <unistd.h>

#include "core/error.h"
#include "io/png.h"
#include "pipeline/engine.h"
#include "support.h"

using namespace fp8s;

namespace {

RgbImage gradient(int w, int h) {
  RgbImage img;
  img.width = w;
  img.height = h;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      img.pixels.push_back(static_cast<uint8_t>(x * 255 / (w - 1)));
      img.pixels.push_back(static_cast<uint8_t>(y * 255 / (h - 1)));
      img.pixels.push_back(static_cast<uint8_t>((x ^ y) & 0xFF));
    }
  }
  return img;
}

}  // namespace

class TestPngInfotext : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;

 private Q_SLOTS:
  void roundTripPixelsAndParameters() {
    const auto img = gradient(40, 24);
    const std::string path = (m_dir.path() + "/rt.png").toStdString();
    write_png(path, img, "a prompt\nSteps: 4, Seed: 9");
    const auto back = read_png(path);
    QCOMPARE(back.image.width, 40);
    QCOMPARE(back.image.height, 24);
    QVERIFY(back.image.pixels == img.pixels);
    QCOMPARE(back.parameters, std::string("a prompt\nSteps: 4, Seed: 9"));
    QVERIFY_EXCEPTION_THROWN(write_png(path, img, ""), RuntimeFailure);  // never overwrites
    QCOMPARE(read_png(path).parameters, std::string("a prompt\nSteps: 4, Seed: 9"));
  }

  void numberingContinuesAboveTheHighest() {
    const QString dir = m_dir.path() + "/out/nested";
    const auto img = gradient(8, 8);
    QCOMPARE(QString::fromStdString(write_numbered_png(dir.toStdString(), 42, img, "")), dir + "/00001-42.png");
    QCOMPARE(QString::fromStdString(write_numbered_png(dir.toStdString(), 42, img, "")), dir + "/00002-42.png");
    test::write_bytes((dir + "/00007-1.png").toStdString(), "not ours");
    test::write_bytes((dir + "/notes-00100.txt").toStdString(), "ignored");
    QCOMPARE(QString::fromStdString(write_numbered_png(dir.toStdString(), 5, img, "")), dir + "/00008-5.png");
    QCOMPARE(test::read_bytes((dir + "/00007-1.png").toStdString()), std::string("not ours"));
    QVERIFY(QDir(dir).entryList({"*partial*"}).isEmpty());
  }

  void unwritableFolderLeavesNothing() {
    const QString file = m_dir.path() + "/a-file";
    test::write_bytes(file.toStdString(), "x");
    QVERIFY_EXCEPTION_THROWN(write_numbered_png((file + "/sub").toStdString(), 1, gradient(8, 8), ""), InputError);
    if (::geteuid() == 0) QSKIP("running as root: a read-only folder cannot be simulated");
    const QString ro = m_dir.path() + "/readonly";
    QDir().mkpath(ro);
    QFile::setPermissions(ro, QFile::ReadOwner | QFile::ExeOwner);
    QVERIFY_EXCEPTION_THROWN(write_numbered_png(ro.toStdString(), 1, gradient(8, 8), ""), RuntimeFailure);
    QVERIFY(QDir(ro).entryList(QDir::Files).isEmpty());
  }

  void rejectsNonPng() {
    const std::string p = (m_dir.path() + "/junk.png").toStdString();
    test::write_bytes(p, "GIF89a not a png at all");
    QVERIFY_EXCEPTION_THROWN(read_png(p), InputError);
    test::write_bytes(p, std::string("\x89PNG\r\n\x1a\n", 8) + "truncated");
    QVERIFY_EXCEPTION_THROWN(read_png(p), InputError);
  }

  void infotextFormatAndParse() {
    GenerationRequest r;
    r.prompt = "a (red:1.2) fox";
    r.negative = "blurry";
    r.steps = 6;
    r.cfg = 7.5f;
    r.sampler = Sampler::EulerAncestral;
    r.schedule = Schedule::Normal;
    r.clip_skip = 2;
    r.storage.weights = WeightType::FP8_E4M3;
    r.storage.scale = Fp8Scale::Tensor;
    r.compute = ComputeType::BF16;
    const auto text = format_infotext(r, 1237, "tiny-sd1", "ee1a438f", 64, 96);
    QCOMPARE(QString::fromStdString(text),
             QString("a (red:1.2) fox\nNegative prompt: blurry\nSteps: 6, Sampler: Euler a, Schedule type: "
                     "Automatic, CFG scale: 7.5, Seed: 1237, Size: 64x96, Model hash: ee1a438f, Model: "
                     "tiny-sd1, Clip skip: 2, FP8 weight: fp8-e4m3, FP8 scale: tensor, Weights: fp8-e4m3, "
                     "Compute: bf16"));
    const auto back = parse_infotext(text);
    QCOMPARE(back.prompt, r.prompt);
    QCOMPARE(back.negative, r.negative);
    QCOMPARE(back.steps, 6);
    QCOMPARE(back.cfg, 7.5f);
    QCOMPARE(back.seed, int64_t(1237));
    QCOMPARE(back.width, 64);
    QCOMPARE(back.height, 96);
    QCOMPARE(back.clip_skip, 2);
    QVERIFY(back.sampler == Sampler::EulerAncestral);
    QVERIFY(back.storage.weights == WeightType::FP8_E4M3);
    QVERIFY(back.storage.scale == Fp8Scale::Tensor);
  }

  void parsesA1111Infotext() {
    const auto r = parse_infotext(
        "masterpiece, best quality\nsecond line\nNegative prompt: lowres, bad hands\nSteps: 28, "
        "Sampler: DPM++ 2M, Schedule type: Karras, CFG scale: 7, Seed: 123456789, Size: 512x768, "
        "Model hash: 6ce0161689, Model: v1-5-pruned-emaonly, Clip skip: 2, Lora hashes: \"x: 1, y: 2\", "
        "Version: v1.10.1");
    QCOMPARE(r.prompt, std::string("masterpiece, best quality\nsecond line"));
    QCOMPARE(r.negative, std::string("lowres, bad hands"));
    QCOMPARE(r.steps, 28);
    QVERIFY(r.sampler == Sampler::DpmPP2M);
    QVERIFY(r.schedule == Schedule::Karras);
    QCOMPARE(r.seed, int64_t(123456789));
    QCOMPARE(r.width, 512);
    QCOMPARE(r.height, 768);
    QCOMPARE(r.clip_skip, 2);
    QVERIFY_EXCEPTION_THROWN(parse_infotext("just a caption"), InputError);
  }
};

QTEST_GUILESS_MAIN(TestPngInfotext)
#include "test_png_infotext.moc"
