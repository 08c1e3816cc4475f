// Full-size synthetic SD1.5 and SDXL checkpoints: written by make-synthetic, read by inspect,
// counts exact (issue 2). Label `slow`: writes 2 GB and 7 GB files.
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

#include "support.h"

class TestFullSize : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;

  QJsonObject make_and_inspect(const QString& arch) {
    const QString out = m_dir.path() + "/" + arch + ".safetensors";
    auto r = fp8s::test::run_cli({"make-synthetic", "--arch", arch, "--dtype", "fp16", "--out", out}, {}, 3600000);
    if (r.exit_code != 0) qWarning("%s", qPrintable(r.err));
    auto i = fp8s::test::run_cli({"inspect", "--model", out, "--json"});
    QFile::remove(out);
    return QJsonDocument::fromJson(i.out.toUtf8()).object();
  }
  static double params(const QJsonObject& j, const QString& name) {
    for (const auto& c : j["components"].toArray()) {
      if (c.toObject()["name"].toString() == name) return c.toObject()["params"].toDouble();
    }
    return -1;
  }

 private Q_SLOTS:
  void sd15() { expect("sd15", "SD 1.x", {{"unet", 859520964.0}, {"clip_l", 123060480.0}, {"vae", 83653863.0}}); }
  void sdxl() {
    expect("sdxl", "SDXL base",
           {{"unet", 2567463684.0}, {"clip_l", 123060480.0}, {"open_clip_g", 694659841.0}, {"vae", 83653863.0}});
  }

 private:
  // make-synthetic `arch`, inspect it: the architecture and each component's parameter count.
  void expect(const char* arch, const QString& architecture, const std::vector<std::pair<QString, double>>& params_by_component) {
    const auto j = make_and_inspect(arch);
    QCOMPARE(j["architecture"].toString(), architecture);
    for (const auto& [component, count] : params_by_component) QCOMPARE(params(j, component), count);
  }
};

QTEST_GUILESS_MAIN(TestFullSize)
#include "test_full_size.moc"
