// The desktop window opens offscreen with its chart (the panels arrive with the GUI issue).
#include <QtTest>
#include <qcustomplot.h>

#include "MainWindow.h"

class TestGui : public QObject {
  Q_OBJECT
 private Q_SLOTS:
  void mainWindowShows() {
    fp8s::gui::MainWindow w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(w.windowTitle().startsWith("FP8 Studio"));
    QVERIFY(w.findChild<QCustomPlot*>("memoryPlot") != nullptr);
  }
};

QTEST_MAIN(TestGui)
#include "test_gui.moc"
