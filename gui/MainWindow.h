// The main window: composes the studio's panels (the panels arrive with the GUI issue).
#pragma once

#include <QMainWindow>

class QCustomPlot;

namespace fp8s::gui {

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget* parent = nullptr);

 private:
  QCustomPlot* m_memoryPlot = nullptr;
};

}  // namespace fp8s::gui
