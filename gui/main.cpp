// fp8studio: entry point of the desktop application.
#include <QApplication>
#include <QCommandLineParser>
#include <QTimer>

#include "MainWindow.h"
#include "core/version.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName(QStringLiteral("fp8studio"));
  QApplication::setApplicationDisplayName(QStringLiteral("FP8 Studio"));
  QApplication::setApplicationVersion(QString::fromLatin1(fp8s::kVersion));
  QApplication::setDesktopFileName(QString::fromLatin1(fp8s::kAppId));

  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("FP8 Studio desktop application"));
  parser.addHelpOption();
  parser.addVersionOption();
  QCommandLineOption selfTest(QStringLiteral("self-test"),
                              QStringLiteral("show the main window, then quit after a second"));
  parser.addOption(selfTest);
  parser.process(app);

  fp8s::gui::MainWindow window;
  window.show();
  if (parser.isSet(selfTest)) QTimer::singleShot(1000, &app, &QApplication::quit);
  return QApplication::exec();
}
