// Flux in the desktop studio (issue 32), offscreen, on the tiny reference Flux files: the Model
// panel's component pickers and the engine's component table, the guidance control in CFG's place,
// sizes in steps of 16 and only the sampler that applies, a run whose chart marks its phases by
// component, and a compare where FP16 cannot fit (the machine capped by FP8S_AVAILABLE_MEMORY
// between the two estimates) that shows FP16's estimate beside the FP8 image.
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QSettings>
#include <QSpinBox>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include "MainWindow.h"
#include "gui_support.h"
#include "support.h"
#include "memory/tracking_allocator.h"
#include "panels/ChartsPanel.h"
#include "panels/CompareView.h"
#include "panels/ModelPanel.h"
#include "families/flux/flux_family.h"

using namespace fp8s;
using namespace fp8s::gui;

namespace {

QString ref(const QString& rel) { return QString::fromUtf8(FP8S_REFERENCE_DIR) + "/" + rel; }

}  // namespace

class TestGuiFlux : public QObject {
  Q_OBJECT
  QTemporaryDir m_dir;

  std::unique_ptr<MainWindow> loadedWindow(QSettings& s) {
    s.setValue("folders/models", m_dir.filePath("models"));
    s.setValue("folders/loras", ref("flux"));
    s.setValue("folders/outputs", m_dir.filePath("out"));
    s.setValue("precision/weights", "fp8-e4m3");
    auto w = std::make_unique<MainWindow>(&s, false);
    w->show();
    // the components picked in the Model panel (by role), as a user does before the transformer loads
    w->findChild<ModelPanel*>()->setComponents({{"t5xxl", ref("flux/tiny-t5xxl.safetensors").toStdString()},
                                                {"clip_l", ref("flux/tiny-clip-l.safetensors").toStdString()},
                                                {"vae", ref("flux/tiny-ae.safetensors").toStdString()}});
    QSignalSpy ready(w.get(), &MainWindow::modelReady);
    w->loadModel(ref("flux/tiny-flux-dev.safetensors"));
    if (!arrived(ready, 60000)) qFatal("the Flux model did not load");
    for (int i = 0; i < 1000 && w->isBusy(); ++i) QTest::qWait(10);  // busy=false follows modelReady
    return w;
  }

 private Q_SLOTS:
  void initTestCase() {
    FP8S_SKIP_WITHOUT_REFERENCE("../shared/reference/ is absent: the Flux GUI tests need its tiny Flux files");
    QStandardPaths::setTestModeEnabled(true);
    registerMetaTypes();
    install_tracking_allocator();
    qputenv("FP8S_CLIP_VOCAB", ref("clip/bpe_simple_vocab_16e6.txt.gz").toUtf8());
    qputenv("FP8S_T5_TOKENIZER", ref("flux/t5_tokenizer/tokenizer.json").toUtf8());
    QDir().mkpath(m_dir.filePath("models"));
  }

  void fluxControlsComponentsAndPhases() {
    QSettings s(m_dir.filePath("flux.ini"), QSettings::IniFormat);
    auto w = loadedWindow(s);
    // the engine's component table: all four, with storage and bytes
    const QString table = child<QLabel>(w.get(), "componentTable")->text();
    // the box's rows are the family's roles, each showing the file picked
    QCOMPARE(child<QLineEdit>(w.get(), "component_t5xxl")->text(), ref("flux/tiny-t5xxl.safetensors"));
    QVERIFY(w->findChild<QLineEdit*>("component_vae") != nullptr);
    for (const char* c : {"transformer", "T5-XXL", "CLIP-L", "autoencoder", "tiny-t5xxl.safetensors", "e4m3"}) {
      QVERIFY2(table.contains(c), qPrintable(table));
    }
    // dev: guidance in CFG's place, the flow's samplers (Euler first), sizes by 16
    QTRY_VERIFY(child<QDoubleSpinBox>(w.get(), "option_guidance")->isVisible());
    QVERIFY(!child<QDoubleSpinBox>(w.get(), "cfgSpin")->isVisible());
    auto* sampler = child<QComboBox>(w.get(), "samplerCombo");
    QCOMPARE(sampler->count(), 3);  // Euler, Heun, DPM++ 2M
    QCOMPARE(sampler->currentData().toInt(), int(Sampler::Euler));
    QCOMPARE(child<QComboBox>(w.get(), "scheduleCombo")->currentText(), QString("Simple"));
    auto* width = child<QSpinBox>(w.get(), "widthSpin");
    QCOMPARE(width->singleStep(), 16);
    width->setValue(32);
    child<QSpinBox>(w.get(), "heightSpin")->setValue(32);
    child<QSpinBox>(w.get(), "stepsSpin")->setValue(3);
    child<QDoubleSpinBox>(w.get(), "option_guidance")->setValue(4.5);
    child<QPlainTextEdit>(w.get(), "promptEdit")->setPlainText("a lighthouse on a cliff at dusk");
    QCOMPARE(QString::fromStdString(w->currentRequest().options.at("guidance")), QString("4.5"));
    QSignalSpy started(w->worker(), &EngineWorker::runStarted);
    QSignalSpy done(w->worker(), &EngineWorker::finished);
    QTest::mouseClick(child<QWidget>(w.get(), "generateButton"), Qt::LeftButton);
    QVERIFY(arrived(done, 60000));
    const auto r = done.at(0).at(0).value<RunResult>();
    QCOMPARE(r.result.images.at(0).image.width, 32);
    QVERIFY2(QString::fromStdString(r.result.images[0].parameters).contains("Distilled CFG Scale: 4.5"), r.result.images[0].parameters.c_str());
    const int run = started.at(0).at(0).toInt();
    QTRY_COMPARE(w->chartsPanel()->stepPoints(run), 3);
    const QStringList phases = w->chartsPanel()->phaseLabels(run);
    for (const char* p : {"T5 + CLIP-L encode", "transformer steps", "autoencoder decode"}) QVERIFY2(phases.contains(p), qPrintable(phases.join(", ")));
    w->saveSettings();
    QCOMPARE(s.value("model/components").toMap().value("t5xxl").toString(), ref("flux/tiny-t5xxl.safetensors"));
  }

  void compareShowsTheFp16EstimateWhereItCannotFit() {
    // this machine capped between FP8's estimate and FP16's at 32x32
    FluxFiles files;
    files.transformer = {ref("flux/tiny-flux-dev.safetensors").toStdString(), ""};
    files.t5 = {ref("flux/tiny-t5xxl.safetensors").toStdString(), ""};
    files.clip_l = {ref("flux/tiny-clip-l.safetensors").toStdString(), ""};
    files.vae = {ref("flux/tiny-ae.safetensors").toStdString(), ""};
    const int hidden = flux_hidden_size(files);
    const uint64_t need16 = flux_peak_bytes(flux_storage_bytes(files, StorageSpec{WeightType::FP16}), 32, 32, 1, ComputeType::BF16, hidden);
    const uint64_t need8 = flux_peak_bytes(flux_storage_bytes(files, StorageSpec{WeightType::FP8_E4M3, Fp8Scale::Tensor}), 32, 32, 1, ComputeType::BF16, hidden);
    QVERIFY(need8 < need16);
    QSettings s(m_dir.filePath("compare.ini"), QSettings::IniFormat);
    auto w = loadedWindow(s);  // its components load on first use: no held weights count as freed
    qputenv("FP8S_AVAILABLE_MEMORY", QByteArray::number(qulonglong(need8 + (need16 - need8) / 2)));
    child<QSpinBox>(w.get(), "widthSpin")->setValue(32);
    child<QSpinBox>(w.get(), "heightSpin")->setValue(32);
    child<QSpinBox>(w.get(), "stepsSpin")->setValue(2);
    QSignalSpy done(w->worker(), &EngineWorker::compareFinished);
    QTest::mouseClick(child<QWidget>(w.get(), "compareButton"), Qt::LeftButton);
    QVERIFY(arrived(done, 60000));
    qunsetenv("FP8S_AVAILABLE_MEMORY");
    const auto c = done.at(0).at(0).value<CompareResult>();
    QVERIFY2(c.referenceRefused.contains("FP16 Flux at 32x32 needs"), qPrintable(c.referenceRefused));
    QVERIFY(c.reference.result.images.empty());
    QCOMPARE(c.candidate.result.images.size(), std::size_t(1));
    QTRY_VERIFY(w->compareView()->hasResult());
    auto* table = child<QTableWidget>(w.get(), "compareTable");
    QCOMPARE(table->item(0, 0)->text(), QString("Memory estimate"));
    QVERIFY(table->item(0, 1)->text().contains("FP8 needs"));
    QCOMPARE(table->item(1, 1)->text(), QString("—"));  // no FP16 weights: it did not run
  }
};

QTEST_MAIN(TestGuiFlux)
#include "test_gui_flux.moc"
