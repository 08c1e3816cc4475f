// fp8studio: entry point of the desktop application.
#include <QApplication>
#include <QCommandLineParser>
#include <QTimer>

#include "MainWindow.h"
#include "core/threads.h"
#include "core/version.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("fp8studio"));
  QApplication::setApplicationName(QStringLiteral("fp8studio"));
  QApplication::setApplicationDisplayName(QStringLiteral("FP8 Studio"));
  QApplication::setApplicationVersion(QString::fromLatin1(fp8s::kVersion));
  QApplication::setDesktopFileName(QString::fromLatin1(fp8s::kAppId));
  QApplication::setWindowIcon(QIcon(QStringLiteral(":/icons/fp8studio.svg")));

  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("FP8 Studio: Stable Diffusion with FP8 weight storage, measured"));
  parser.addHelpOption();
  parser.addVersionOption();
  QCommandLineOption selfTest(QStringLiteral("self-test"),
                              QStringLiteral("show the main window without loading a model, then quit after a second"));
  QCommandLineOption quitAfter(QStringLiteral("quit-after"), QStringLiteral("quit after SECONDS (for screenshots and checks)"),
                               QStringLiteral("SECONDS"));
  parser.addOption(selfTest);
  parser.addOption(quitAfter);
  parser.process(app);

  fp8s::init_threads();
  fp8s::gui::MainWindow window(nullptr, !parser.isSet(selfTest));
  window.show();
  if (parser.isSet(selfTest)) QTimer::singleShot(1000, &app, &QApplication::quit);
  if (parser.isSet(quitAfter)) {
    const int ms = static_cast<int>(parser.value(quitAfter).toDouble() * 1000);
    QTimer::singleShot(ms, &window, &QWidget::close);
  }
  return QApplication::exec();
}
