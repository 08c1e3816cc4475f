#include "MainWindow.h"

#include <QLabel>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include "core/version.h"

namespace fp8s::gui {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(QStringLiteral("FP8 Studio %1").arg(QString::fromLatin1(fp8s::kVersion)));
  auto* central = new QWidget(this);
  auto* layout = new QVBoxLayout(central);
  auto* title = new QLabel(tr("FP8 Studio — Stable Diffusion with FP8 weight storage, measured"));
  title->setObjectName(QStringLiteral("titleLabel"));
  layout->addWidget(title);
  m_memoryPlot = new QCustomPlot(central);
  m_memoryPlot->setObjectName(QStringLiteral("memoryPlot"));
  m_memoryPlot->xAxis->setLabel(tr("time (s)"));
  m_memoryPlot->yAxis->setLabel(tr("memory (GB)"));
  m_memoryPlot->setMinimumSize(480, 240);
  layout->addWidget(m_memoryPlot, 1);
  setCentralWidget(central);
  resize(960, 640);
}

}  // namespace fp8s::gui
