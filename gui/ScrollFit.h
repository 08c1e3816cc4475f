// Keeps a vertical scroll area as wide as its widget's minimum beside the scroll bar, also when the
// widget grows after start (a model family's component rows): narrower, the panels' right edge is cut.
#pragma once

#include <QEvent>
#include <QObject>
#include <QScrollArea>
#include <QScrollBar>

namespace fp8s::gui {

class ScrollFit : public QObject {
 public:
  explicit ScrollFit(QScrollArea* area) : QObject(area), m_area(area) {
    area->widget()->installEventFilter(this);
    fit();
  }
  bool eventFilter(QObject*, QEvent* event) override {
    if (event->type() == QEvent::LayoutRequest) fit();
    return false;
  }

 private:
  void fit() {
    m_area->setMinimumWidth(m_area->widget()->minimumSizeHint().width() + m_area->verticalScrollBar()->sizeHint().width() +
                            2 * m_area->frameWidth());
  }
  QScrollArea* m_area;
};

}  // namespace fp8s::gui
