// fp8studio: entry point of the desktop application.
#include <QApplication>
#include <QCommandLineParser>
#include <QTimer>

#include <cstdio>
#include <cstring>
#include <memory>

#include "MainWindow.h"
#include "panels/ControlNetPanel.h"
#include "panels/Img2ImgPanel.h"
#include "panels/MaskCanvas.h"
#include "panels/ChartsPanel.h"
#include "panels/PromptPanel.h"

#include <QPlainTextEdit>
#include "core/openmp_preinit.h"
#include "core/threads.h"
#include "memory/tracking_allocator.h"
#include "core/version.h"

namespace {

// The command line; --help and --version print without a display (packaging checks, terminals
// over ssh), so they are handled with a QCoreApplication before any window system is needed.
struct CommandLine {
  QCommandLineParser parser;
  QCommandLineOption selfTest{QStringLiteral("self-test"),
                              QStringLiteral("show the main window without loading a model, then quit after a second")};
  QCommandLineOption quitAfter{QStringLiteral("quit-after"), QStringLiteral("quit after SECONDS (for screenshots and checks)"),
                               QStringLiteral("SECONDS")};
  QCommandLineOption run{QStringLiteral("run"), QStringLiteral("once the model is ready, start a generation or a compare"),
                         QStringLiteral("generate|compare")};
  QCommandLineOption prompt{QStringLiteral("prompt"), QStringLiteral("the prompt to put in the prompt panel"), QStringLiteral("TEXT")};
  QCommandLineOption shot{QStringLiteral("screenshot"), QStringLiteral("save the window as PNG when the --run finishes"), QStringLiteral("FILE")};
  QCommandLineOption midShot{QStringLiteral("screenshot-mid"), QStringLiteral("save the window as PNG halfway through sampling"),
                             QStringLiteral("FILE")};
  QCommandLineOption size{QStringLiteral("size"), QStringLiteral("window size, e.g. 1280x800"), QStringLiteral("WxH")};
  QCommandLineOption initImage{QStringLiteral("init-image"), QStringLiteral("open this image for img2img"), QStringLiteral("FILE")};
  QCommandLineOption mask{QStringLiteral("mask"), QStringLiteral("with --init-image: this inpainting mask (white = repaint)"),
                          QStringLiteral("FILE")};

  QCommandLineOption controlnet{QStringLiteral("controlnet"), QStringLiteral("ControlNet unit 0's model file"), QStringLiteral("FILE")};
  QCommandLineOption controlImage{QStringLiteral("control-image"), QStringLiteral("ControlNet unit 0's control image (shows the ControlNet tab)"),
                                  QStringLiteral("FILE")};
  QCommandLineOption controlPreprocessor{QStringLiteral("control-preprocessor"), QStringLiteral("unit 0's preprocessor: none, invert or canny"),
                                         QStringLiteral("NAME")};

  CommandLine() {
    parser.setApplicationDescription(QStringLiteral("FP8 Studio: Stable Diffusion with FP8 weight storage, measured"));
    parser.addHelpOption();
    parser.addVersionOption();
    for (const auto& o : {selfTest, quitAfter, run, prompt, shot, midShot, size, initImage, mask, controlnet, controlImage, controlPreprocessor}) {
      parser.addOption(o);
    }
  }
};

void setApplicationNames() {
  QCoreApplication::setOrganizationName(QStringLiteral("fp8studio"));
  QCoreApplication::setApplicationName(QStringLiteral("fp8studio"));
  QCoreApplication::setApplicationVersion(QString::fromLatin1(fp8s::kVersion));
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (std::strcmp(a, "--version") == 0 || std::strcmp(a, "-v") == 0) {
      std::printf("FP8 Studio %s\n", fp8s::kVersion);
      return 0;
    }
    if (std::strcmp(a, "--help") == 0 || std::strcmp(a, "-h") == 0 || std::strcmp(a, "-?") == 0 ||
        std::strcmp(a, "--help-all") == 0) {
      QCoreApplication core(argc, argv);
      setApplicationNames();
      CommandLine cl;
      cl.parser.process(core);  // prints the help and exits
      return 0;
    }
  }
  QApplication app(argc, argv);
  setApplicationNames();
  QApplication::setApplicationDisplayName(QStringLiteral("FP8 Studio"));
  QApplication::setDesktopFileName(QString::fromLatin1(fp8s::kAppId));
  QApplication::setWindowIcon(QIcon(QStringLiteral(":/icons/fp8studio.svg")));

  CommandLine cl;
  auto& parser = cl.parser;
  const auto &selfTest = cl.selfTest, &quitAfter = cl.quitAfter, &run = cl.run, &prompt = cl.prompt,
             &shot = cl.shot, &midShot = cl.midShot, &size = cl.size, &initImage = cl.initImage, &mask = cl.mask;
  parser.process(app);

  fp8s::init_threads();
  fp8s::install_tracking_allocator();  // live tensor bytes for the memory chart
  fp8s::gui::MainWindow window(nullptr, !parser.isSet(selfTest));
  if (parser.isSet(size)) {
    const auto wh = parser.value(size).split(QLatin1Char('x'));
    if (wh.size() == 2) window.resize(wh[0].toInt(), wh[1].toInt());
  }
  if (parser.isSet(prompt)) window.promptPanel()->promptEdit()->setPlainText(parser.value(prompt));
  if (parser.isSet(initImage)) {
    QString error;
    if (!window.img2imgPanel()->openImage(parser.value(initImage), &error)) std::fprintf(stderr, "error: %s\n", qPrintable(error));
    window.showImg2Img();
    if (parser.isSet(mask)) {
      const QImage m(parser.value(mask));
      if (m.isNull() || m.size() != window.img2imgPanel()->canvas()->image().size()) {
        std::fprintf(stderr, "error: --mask %s: not an image of the init image's size\n", qPrintable(parser.value(mask)));
      } else {
        window.img2imgPanel()->canvas()->setMask(m);
        window.img2imgPanel()->setMode(fp8s::gui::ImageMode::Inpaint);
      }
    }
  }
  if (parser.isSet(cl.controlnet)) window.controlNetPanel()->setModel(0, parser.value(cl.controlnet));
  if (parser.isSet(cl.controlPreprocessor)) {
    if (const auto p = fp8s::parse_control_preprocessor(parser.value(cl.controlPreprocessor).toStdString())) window.controlNetPanel()->setPreprocessor(0, *p);
  }
  if (parser.isSet(cl.controlImage)) {
    QString error;
    if (!window.controlNetPanel()->openImage(0, parser.value(cl.controlImage), &error)) std::fprintf(stderr, "error: %s\n", qPrintable(error));
    window.showControlNet();
  }
  window.show();
  const auto grabTo = [&window](const QString& file) {
    if (!window.grab().save(file, "PNG")) std::fprintf(stderr, "error: cannot write the screenshot %s\n", qPrintable(file));
  };
  if (parser.isSet(run)) {
    const bool compare = parser.value(run) == QLatin1String("compare");
    QObject::connect(&window, &fp8s::gui::MainWindow::modelReady, &window, [&window, compare] {
      QTimer::singleShot(200, &window, [&window, compare] { compare ? window.compare() : window.generate(); });
    });
    const QString file = parser.value(shot);
    auto finishedShot = [&window, grabTo, file] {
      if (file.isEmpty()) return;
      QTimer::singleShot(600, &window, [&window, grabTo, file] {
        grabTo(file);
        window.close();
      });
    };
    if (compare) {
      QObject::connect(window.worker(), &fp8s::gui::EngineWorker::compareFinished, &window, finishedShot);
    } else {
      QObject::connect(window.worker(), &fp8s::gui::EngineWorker::finished, &window, finishedShot);
    }
    if (parser.isSet(midShot)) {
      // halfway through the action's last run (a compare's FP8 run, overlaid on its FP16 run)
      const QString mid = parser.value(midShot);
      const int wanted = compare ? 2 : 1;
      auto started = std::make_shared<int>(0);
      auto taken = std::make_shared<bool>(false);
      QObject::connect(window.worker(), &fp8s::gui::EngineWorker::runStarted, &window, [started](int, const fp8s::StorageSpec&) { ++*started; });
      QObject::connect(window.worker(), &fp8s::gui::EngineWorker::step, &window,
                       [&window, grabTo, mid, taken, started, wanted](int, const fp8s::StepEvent& e) {
                         if (*taken || *started < wanted || e.step < e.steps / 2) return;
                         *taken = true;
                         window.chartsPanel()->replotNow();
                         QTimer::singleShot(100, &window, [grabTo, mid] { grabTo(mid); });
                       });
    }
  }
  if (parser.isSet(selfTest)) QTimer::singleShot(1000, &app, &QApplication::quit);
  if (parser.isSet(quitAfter)) {
    const int ms = static_cast<int>(parser.value(quitAfter).toDouble() * 1000);
    QTimer::singleShot(ms, &window, &QWidget::close);
  }
  return QApplication::exec();
}
