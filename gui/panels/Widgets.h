// Small constructors for the panels' form widgets (spin boxes and combo boxes set up in one call).
#pragma once

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QVBoxLayout>
#include <QSpinBox>

#include <initializer_list>
#include <utility>

namespace fp8s::gui {

inline QSpinBox* makeSpin(QWidget* parent, int lo, int hi, int value, const QString& name = {}) {
  auto* s = new QSpinBox(parent);
  s->setRange(lo, hi);
  s->setValue(value);
  if (!name.isEmpty()) s->setObjectName(name);
  return s;
}

inline QDoubleSpinBox* makeDoubleSpin(QWidget* parent, double lo, double hi, double step, double value, const QString& name = {}) {
  auto* s = new QDoubleSpinBox(parent);
  s->setRange(lo, hi);
  s->setSingleStep(step);
  s->setValue(value);
  if (!name.isEmpty()) s->setObjectName(name);
  return s;
}

// Items are (text, data) pairs; data is usually an enum's int value.
inline QComboBox* makeCombo(QWidget* parent, std::initializer_list<std::pair<QString, int>> items, const QString& name = {}) {
  auto* c = new QComboBox(parent);
  for (const auto& [text, data] : items) c->addItem(text, data);
  if (!name.isEmpty()) c->setObjectName(name);
  return c;
}

// A panel's top row: the folder it lists (a wrapping label) and its Refresh button, in a
// margin-less vertical layout set on `panel`.
struct FolderRow {
  QVBoxLayout* layout;
  QHBoxLayout* row;
  QLabel* label;
  QPushButton* refresh;
};
inline FolderRow makeFolderRow(QWidget* panel) {
  FolderRow f;
  f.layout = new QVBoxLayout(panel);
  f.layout->setContentsMargins(0, 0, 0, 0);
  f.row = new QHBoxLayout;
  f.label = new QLabel(panel);
  f.label->setWordWrap(true);
  f.refresh = new QPushButton(QObject::tr("Refresh"), panel);
  f.row->addWidget(f.label, 1);
  f.row->addWidget(f.refresh);
  f.layout->addLayout(f.row);
  return f;
}

// A label and its widget side by side in a grid.
inline void addLabelled(QGridLayout* grid, int row, int column, const QString& label, QWidget* widget) {
  grid->addWidget(new QLabel(label), row, column);
  grid->addWidget(widget, row, column + 1);
}

}  // namespace fp8s::gui
