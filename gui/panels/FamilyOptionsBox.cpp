#include "FamilyOptionsBox.h"

#include "ImageStrip.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QGridLayout>
#include <QLabel>
#include <QLineEdit>
#include <QSignalBlocker>
#include <QSpinBox>

#include <algorithm>
#include <cmath>

namespace fp8s::gui {
namespace {

QWidget* makeControl(const FamilyOption& o, QWidget* parent) {
  const QString tip = QString::fromStdString(o.help);
  QWidget* w = nullptr;
  switch (o.type) {
    case FamilyOption::Type::Number: {
      auto* d = new QDoubleSpinBox(parent);
      d->setRange(o.min, o.max);
      d->setDecimals(o.max - o.min <= 10 ? 2 : 1);
      d->setSingleStep(o.max - o.min <= 10 ? 0.05 : 0.5);
      w = d;
      break;
    }
    case FamilyOption::Type::Integer: {
      auto* s = new QSpinBox(parent);
      s->setRange(static_cast<int>(std::max(o.min, -2e9)), static_cast<int>(std::min(o.max, 2e9)));
      w = s;
      break;
    }
    case FamilyOption::Type::Flag:
      w = new QCheckBox(parent);
      break;
    case FamilyOption::Type::Choice: {
      auto* c = new QComboBox(parent);
      for (const auto& v : o.choices) c->addItem(QString::fromStdString(v));
      w = c;
      break;
    }
    case FamilyOption::Type::Text:
      w = new QLineEdit(parent);
      break;
    case FamilyOption::Type::Files:
      w = new ImageStrip(static_cast<int>(o.max), parent);
      break;
  }
  w->setObjectName(QStringLiteral("option_") + QString::fromStdString(o.name));
  w->setToolTip(tip);
  return w;
}

void setControl(QWidget* w, const FamilyOption& o, const std::string& value) {
  const QString v = QString::fromStdString(value);
  if (auto* d = qobject_cast<QDoubleSpinBox*>(w)) d->setValue(v.toDouble());
  else if (auto* s = qobject_cast<QSpinBox*>(w)) s->setValue(v.toInt());
  else if (auto* c = qobject_cast<QCheckBox*>(w)) c->setChecked(value == "1" || value == "true" || (o.choices.size() == 2 && value == o.choices[1]));
  else if (auto* b = qobject_cast<QComboBox*>(w)) b->setCurrentIndex(std::max(0, b->findText(v)));
  else if (auto* e = qobject_cast<QLineEdit*>(w)) e->setText(v);
  else if (auto* f = qobject_cast<ImageStrip*>(w)) f->setFiles(v.split(QLatin1Char(';'), Qt::SkipEmptyParts));
}

std::string controlValue(const QWidget* w) {
  if (auto* d = qobject_cast<const QDoubleSpinBox*>(w)) return QString::number(d->value()).toStdString();
  if (auto* s = qobject_cast<const QSpinBox*>(w)) return std::to_string(s->value());
  if (auto* c = qobject_cast<const QCheckBox*>(w)) return c->isChecked() ? "1" : "0";
  if (auto* b = qobject_cast<const QComboBox*>(w)) return b->currentText().toStdString();
  if (auto* e = qobject_cast<const QLineEdit*>(w)) return e->text().toStdString();
  if (auto* f = qobject_cast<const ImageStrip*>(w)) return f->files().join(QLatin1Char(';')).toStdString();
  return {};
}

}  // namespace

FamilyOptionsBox::FamilyOptionsBox(QWidget* parent) : QWidget(parent), m_grid(new QGridLayout(this)) {
  m_grid->setContentsMargins(0, 0, 0, 0);
  hide();
}

void FamilyOptionsBox::setOptions(const std::vector<FamilyOption>& options, const std::map<std::string, std::string>& values) {
  m_controls.clear();
  while (auto* item = m_grid->takeAt(0)) {
    delete item->widget();
    delete item;
  }
  int column = 0;
  for (const auto& o : options) {
    if (!o.prompt_panel) continue;
    QWidget* w = makeControl(o, this);
    const auto it = values.find(o.name);
    setControl(w, o, it != values.end() ? it->second : o.default_value);
    auto* label = new QLabel(QString::fromStdString(o.label), this);
    label->setToolTip(w->toolTip());
    if (o.type == FamilyOption::Type::Files) {  // a strip of its own, below the other controls
      const int row = m_grid->rowCount();
      m_grid->addWidget(label, row, 0);
      m_grid->addWidget(w, row, 1, 1, -1);
    } else {
      m_grid->addWidget(label, 0, column++);
      m_grid->addWidget(w, 0, column++);
    }
    m_controls.push_back({o, w});
    if (auto* d = qobject_cast<QDoubleSpinBox*>(w)) connect(d, &QDoubleSpinBox::valueChanged, this, &FamilyOptionsBox::changed);
    else if (auto* s = qobject_cast<QSpinBox*>(w)) connect(s, &QSpinBox::valueChanged, this, &FamilyOptionsBox::changed);
    else if (auto* c = qobject_cast<QCheckBox*>(w)) connect(c, &QCheckBox::toggled, this, &FamilyOptionsBox::changed);
    else if (auto* b = qobject_cast<QComboBox*>(w)) connect(b, &QComboBox::currentIndexChanged, this, &FamilyOptionsBox::changed);
    else if (auto* e = qobject_cast<QLineEdit*>(w)) connect(e, &QLineEdit::textChanged, this, &FamilyOptionsBox::changed);
    else if (auto* f = qobject_cast<ImageStrip*>(w)) connect(f, &ImageStrip::changed, this, &FamilyOptionsBox::changed);
  }
  if (column > 0) m_grid->setColumnStretch(column, 1);
  setVisible(!m_controls.empty());
}

std::map<std::string, std::string> FamilyOptionsBox::values() const {
  std::map<std::string, std::string> out;
  for (const auto& c : m_controls) out[c.option.name] = controlValue(c.widget);
  return out;
}

void FamilyOptionsBox::setValues(const std::map<std::string, std::string>& values) {
  for (const auto& c : m_controls) {
    const auto it = values.find(c.option.name);
    if (it == values.end()) continue;
    const QSignalBlocker block(c.widget);
    setControl(c.widget, c.option, it->second);
  }
  Q_EMIT changed();
}

}  // namespace fp8s::gui
