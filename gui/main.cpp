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

// --version and --help print without a display; true when one of them was given.
bool printedWithoutDisplay(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (std::strcmp(a, "--version") == 0 || std::strcmp(a, "-v") == 0) {
      std::printf("FP8 Studio %s\n", fp8s::kVersion);
      return true;
    }
    if (std::strcmp(a, "--help") == 0 || std::strcmp(a, "-h") == 0 || std::strcmp(a, "-?") == 0 ||
        std::strcmp(a, "--help-all") == 0) {
      QCoreApplication core(argc, argv);
      setApplicationNames();
      CommandLine cl;
      cl.parser.process(core);  // prints the help and exits
      return true;
    }
  }
  return false;
}

// The panels' state the command line gives: the window size, the prompt, img2img's init image and
// mask, ControlNet unit 0.
void applyPanels(const CommandLine& cl, fp8s::gui::MainWindow& window) {
  const auto& parser = cl.parser;
  if (parser.isSet(cl.size)) {
    const auto wh = parser.value(cl.size).split(QLatin1Char('x'));
    if (wh.size() == 2) window.resize(wh[0].toInt(), wh[1].toInt());
  }
  if (parser.isSet(cl.prompt)) window.promptPanel()->promptEdit()->setPlainText(parser.value(cl.prompt));
  if (parser.isSet(cl.initImage)) {
    QString error;
    if (!window.img2imgPanel()->openImage(parser.value(cl.initImage), &error)) std::fprintf(stderr, "error: %s\n", qPrintable(error));
    window.showImg2Img();
    if (parser.isSet(cl.mask)) {
      const QImage m(parser.value(cl.mask));
      if (m.isNull() || m.size() != window.img2imgPanel()->canvas()->image().size()) {
        std::fprintf(stderr, "error: --mask %s: not an image of the init image's size\n", qPrintable(parser.value(cl.mask)));
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
}

void grabTo(fp8s::gui::MainWindow& window, const QString& file) {
  if (!window.grab().save(file, "PNG")) std::fprintf(stderr, "error: cannot write the screenshot %s\n", qPrintable(file));
}

// --run: a generation or a compare once the model is ready; --screenshot when it finishes,
// --screenshot-mid halfway through its last run (a compare's FP8 run, overlaid on its FP16 run).
void scheduleRun(const CommandLine& cl, fp8s::gui::MainWindow& window) {
  const auto& parser = cl.parser;
  const bool compare = parser.value(cl.run) == QLatin1String("compare");
  QObject::connect(&window, &fp8s::gui::MainWindow::modelReady, &window, [&window, compare] {
    QTimer::singleShot(200, &window, [&window, compare] { compare ? window.compare() : window.generate(); });
  });
  const QString file = parser.value(cl.shot);
  auto finishedShot = [&window, file] {
    if (file.isEmpty()) return;
    QTimer::singleShot(600, &window, [&window, file] {
      grabTo(window, file);
      window.close();
    });
  };
  if (compare) {
    QObject::connect(window.worker(), &fp8s::gui::EngineWorker::compareFinished, &window, finishedShot);
  } else {
    QObject::connect(window.worker(), &fp8s::gui::EngineWorker::finished, &window, finishedShot);
  }
  if (!parser.isSet(cl.midShot)) return;
  const QString mid = parser.value(cl.midShot);
  const int wanted = compare ? 2 : 1;
  auto started = std::make_shared<int>(0);
  auto taken = std::make_shared<bool>(false);
  QObject::connect(window.worker(), &fp8s::gui::EngineWorker::runStarted, &window, [started](int, const fp8s::StorageSpec&) { ++*started; });
  QObject::connect(window.worker(), &fp8s::gui::EngineWorker::step, &window,
                   [&window, mid, taken, started, wanted](int, const fp8s::StepEvent& e) {
                     if (*taken || *started < wanted || e.step < e.steps / 2) return;
                     *taken = true;
                     window.chartsPanel()->replotNow();
                     QTimer::singleShot(100, &window, [&window, mid] { grabTo(window, mid); });
                   });
}

}  // namespace

int main(int argc, char** argv) {
  if (printedWithoutDisplay(argc, argv)) return 0;
  QApplication app(argc, argv);
  setApplicationNames();
  QApplication::setApplicationDisplayName(QStringLiteral("FP8 Studio"));
  QApplication::setDesktopFileName(QString::fromLatin1(fp8s::kAppId));
  QApplication::setWindowIcon(QIcon(QStringLiteral(":/icons/fp8studio.svg")));

  CommandLine cl;
  cl.parser.process(app);
  fp8s::init_threads();
  fp8s::install_tracking_allocator();  // live tensor bytes for the memory chart
  fp8s::gui::MainWindow window(nullptr, !cl.parser.isSet(cl.selfTest));
  applyPanels(cl, window);
  window.show();
  if (cl.parser.isSet(cl.run)) scheduleRun(cl, window);
  if (cl.parser.isSet(cl.selfTest)) QTimer::singleShot(1000, &app, &QApplication::quit);
  if (cl.parser.isSet(cl.quitAfter)) {
    const int ms = static_cast<int>(cl.parser.value(cl.quitAfter).toDouble() * 1000);
    QTimer::singleShot(ms, &window, &QWidget::close);
  }
  return QApplication::exec();
}
