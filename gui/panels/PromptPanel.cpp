#include "PromptPanel.h"

#include "FamilyOptionsBox.h"
#include "HiresGroup.h"
#include "Widgets.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QRegularExpression>
#include <QRegularExpressionValidator>
#include <QSettings>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QSyntaxHighlighter>
#include <QToolButton>
#include <QVBoxLayout>

#include "text/prompt_parser.h"

namespace fp8s::gui {
namespace {

// A1111 emphasis: (…) and [ ] brackets, explicit weights `:1.2`, <lora:…> tags, BREAK.
class PromptHighlighter : public QSyntaxHighlighter {
 public:
  explicit PromptHighlighter(QTextDocument* doc) : QSyntaxHighlighter(doc) {
    m_bracket.setForeground(QColor(0x2e, 0x86, 0xc1));
    m_bracket.setFontWeight(QFont::Bold);
    m_weight.setForeground(QColor(0xd3, 0x54, 0x00));
    m_tag.setForeground(QColor(0x8e, 0x44, 0xad));
    m_break.setForeground(QColor(0x27, 0xae, 0x60));
    m_break.setFontWeight(QFont::Bold);
  }

 protected:
  void highlightBlock(const QString& text) override {
    static const QRegularExpression bracket(QStringLiteral(R"((?<!\\)[()\[\]])"));
    static const QRegularExpression weight(QStringLiteral(R"(:\s*-?[0-9]*\.?[0-9]+\s*(?=\)))"));
    static const QRegularExpression tag(QStringLiteral(R"(<[^<>:]+:[^<>]*>)"));
    static const QRegularExpression brk(QStringLiteral(R"(\bBREAK\b)"));
    auto apply = [&](const QRegularExpression& re, const QTextCharFormat& f) {
      for (auto it = re.globalMatch(text); it.hasNext();) {
        const auto m = it.next();
        setFormat(static_cast<int>(m.capturedStart()), static_cast<int>(m.capturedLength()), f);
      }
    };
    apply(bracket, m_bracket);
    apply(weight, m_weight);
    apply(tag, m_tag);
    apply(brk, m_break);
  }

 private:
  QTextCharFormat m_bracket, m_weight, m_tag, m_break;
};

// Ctrl+Enter in a prompt generates rather than inserting a line.
class PromptEdit : public QPlainTextEdit {
 public:
  using QPlainTextEdit::QPlainTextEdit;
  std::function<void()> onSubmit;

 protected:
  void keyPressEvent(QKeyEvent* e) override {
    if ((e->key() == Qt::Key_Return || e->key() == Qt::Key_Enter) && (e->modifiers() & Qt::ControlModifier)) {
      if (onSubmit) onSubmit();
      return;
    }
    QPlainTextEdit::keyPressEvent(e);
  }
};

constexpr Sampler kSamplers[] = {Sampler::DpmPP2M, Sampler::Euler, Sampler::EulerAncestral, Sampler::Heun, Sampler::Ddim, Sampler::Lcm};

}  // namespace

PromptPanel::PromptPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  m_prompt = addEditor(layout, QStringLiteral("promptEdit"), tr("Prompt — e.g. a lighthouse on a cliff at dusk, (oil painting:1.2)"), m_promptCount);
  m_negative = addEditor(layout, QStringLiteral("negativeEdit"), tr("Negative prompt"), m_negativeCount);
  m_prompt->setMinimumHeight(54);
  m_prompt->setMaximumHeight(120);
  m_negative->setMinimumHeight(40);
  m_negative->setMaximumHeight(72);

  auto* grid = new QGridLayout;
  m_steps = makeSpin(this, 1, 150, 20, QStringLiteral("stepsSpin"));
  m_cfg = makeDoubleSpin(this, 1.0, 30.0, 0.5, 7.0, QStringLiteral("cfgSpin"));
  m_cfg->setDecimals(1);
  m_sampler = new QComboBox(this);
  m_sampler->setObjectName(QStringLiteral("samplerCombo"));
  for (auto s : kSamplers) m_sampler->addItem(QString::fromLatin1(sampler_display_name(s)), int(s));
  m_schedule = new QComboBox(this);
  m_schedule->setObjectName(QStringLiteral("scheduleCombo"));
  m_schedule->addItem(tr("Karras"), int(Schedule::Karras));
  m_schedule->addItem(tr("Normal"), int(Schedule::Normal));
  auto* samplerRow = new QHBoxLayout;
  samplerRow->addWidget(m_sampler, 1);
  samplerRow->addWidget(m_schedule);
  grid->addWidget(new QLabel(tr("Sampler")), 0, 0);
  grid->addLayout(samplerRow, 0, 1);
  addLabelled(grid, 0, 2, tr("Steps"), m_steps);
  grid->addWidget(new QLabel(tr("Size")), 1, 0);
  grid->addLayout(sizeRow(), 1, 1);
  m_cfgLabel = new QLabel(tr("CFG"), this);
  grid->addWidget(m_cfgLabel, 1, 2);
  grid->addWidget(m_cfg, 1, 3);
  grid->addWidget(new QLabel(tr("Seed")), 2, 0);
  grid->addLayout(seedRow(), 2, 1);
  m_batchCount = new QSpinBox(this);
  m_batchCount->setObjectName(QStringLiteral("batchCountSpin"));
  m_batchCount->setRange(1, 100);
  addLabelled(grid, 2, 2, tr("Batch"), m_batchCount);
  grid->setColumnStretch(1, 1);
  layout->addLayout(grid);
  m_options = new FamilyOptionsBox(this);  // the model family's own settings (Flux dev's guidance, ...)
  layout->addWidget(m_options);
  m_hires = new HiresGroup(this);
  layout->addWidget(m_hires);

  connect(m_prompt, &QPlainTextEdit::textChanged, this, [this] { updateCounter(false); });
  connect(m_negative, &QPlainTextEdit::textChanged, this, [this] { updateCounter(true); });
  for (auto* e : {m_prompt, m_negative}) connect(e, &QPlainTextEdit::textChanged, this, &PromptPanel::emitChanged);
  for (auto* sp : {m_steps, m_width, m_height, m_batchCount}) connect(sp, &QSpinBox::valueChanged, this, &PromptPanel::emitChanged);
  for (auto* c : {m_sampler, m_schedule}) connect(c, &QComboBox::currentIndexChanged, this, &PromptPanel::emitChanged);
  connect(m_cfg, &QDoubleSpinBox::valueChanged, this, &PromptPanel::emitChanged);
  connect(m_options, &FamilyOptionsBox::changed, this, &PromptPanel::emitChanged);
  connect(m_seed, &QLineEdit::textChanged, this, &PromptPanel::emitChanged);
  connect(m_hires, &HiresGroup::changed, this, &PromptPanel::emitChanged);
}

// A prompt editor (Ctrl+Enter generates, the syntax highlighted) with its token counter beside it.
QPlainTextEdit* PromptPanel::addEditor(QVBoxLayout* layout, const QString& name, const QString& placeholder, QLabel*& counter) {
  auto* edit = new PromptEdit(this);
  edit->setObjectName(name);
  edit->setPlaceholderText(placeholder);
  edit->setTabChangesFocus(true);
  edit->onSubmit = [this] { Q_EMIT generateRequested(); };
  new PromptHighlighter(edit->document());
  counter = new QLabel(QStringLiteral("0/75"), this);
  counter->setObjectName(name + QStringLiteral("Count"));
  counter->setAlignment(Qt::AlignRight | Qt::AlignTop);
  counter->setToolTip(tr("CLIP tokens used / capacity of the 75-token chunks, as A1111 counts them"));
  auto* row = new QHBoxLayout;
  row->addWidget(edit, 1);
  row->addWidget(counter);
  layout->addLayout(row, 1);
  return edit;
}

// Width × height and the size presets (a preset sets both, then the list shows "Presets" again).
QHBoxLayout* PromptPanel::sizeRow() {
  m_width = new QSpinBox(this);
  m_width->setObjectName(QStringLiteral("widthSpin"));
  m_height = new QSpinBox(this);
  m_height->setObjectName(QStringLiteral("heightSpin"));
  for (auto* s : {m_width, m_height}) {
    s->setRange(64, 2048);
    s->setSingleStep(64);
    s->setValue(512);
  }
  m_sizePreset = new QComboBox(this);
  m_sizePreset->setToolTip(tr("Size presets"));
  m_sizePreset->addItem(tr("Presets"), QSize());
  for (const auto& [w, h] : {std::pair{512, 512}, {768, 512}, {512, 768}, {768, 768}, {1024, 1024}, {1152, 896}, {896, 1152}, {256, 256}}) {
    m_sizePreset->addItem(QStringLiteral("%1×%2").arg(w).arg(h), QSize(w, h));
  }
  connect(m_sizePreset, &QComboBox::activated, this, [this](int i) {
    const QSize s = m_sizePreset->itemData(i).toSize();
    if (s.isValid()) {
      m_width->setValue(s.width());
      m_height->setValue(s.height());
    }
    m_sizePreset->setCurrentIndex(0);
  });
  auto* row = new QHBoxLayout;
  row->addWidget(m_width);
  row->addWidget(new QLabel(QStringLiteral("×")));
  row->addWidget(m_height);
  row->addWidget(m_sizePreset);
  return row;
}

// The seed (-1: random) with Random and Reuse (the last image's seed).
QHBoxLayout* PromptPanel::seedRow() {
  m_seed = new QLineEdit(QStringLiteral("-1"), this);
  m_seed->setObjectName(QStringLiteral("seedEdit"));
  m_seed->setValidator(new QRegularExpressionValidator(QRegularExpression(QStringLiteral("-1|[0-9]{1,10}")), m_seed));
  m_seed->setToolTip(tr("-1 picks a random seed"));
  auto* dice = new QToolButton(this);
  dice->setText(tr("Random"));
  dice->setToolTip(tr("Random seed (-1)"));
  auto* reuse = new QToolButton(this);
  reuse->setObjectName(QStringLiteral("reuseSeedButton"));
  reuse->setText(tr("Reuse"));
  reuse->setToolTip(tr("Reuse the last image's seed"));
  connect(dice, &QToolButton::clicked, this, [this] { m_seed->setText(QStringLiteral("-1")); });
  connect(reuse, &QToolButton::clicked, this, [this] {
    if (m_lastSeed >= 0) m_seed->setText(QString::number(m_lastSeed));
  });
  auto* row = new QHBoxLayout;
  row->addWidget(m_seed, 1);
  row->addWidget(dice);
  row->addWidget(reuse);
  return row;
}

PromptPanel::~PromptPanel() = default;

void PromptPanel::setTraits(const FamilyTraits& t) {
  const bool switching = m_familyKnown;  // the first model keeps the size the settings restored
  m_familyKnown = true;
  if (t.id == m_family) return;
  m_family = t.id;
  const QSignalBlocker b1(m_sampler), b2(m_schedule), b3(m_sizePreset);
  m_sampler->clear();
  for (auto s : t.samplers) m_sampler->addItem(QString::fromLatin1(sampler_display_name(s)), int(s));
  m_schedule->clear();
  for (const auto& s : t.schedules) m_schedule->addItem(tr(s.label.c_str()), int(s.schedule));
  const int step = t.size_step;
  for (auto* sp : {m_width, m_height}) {
    sp->setRange(t.min_size, 2048);
    sp->setSingleStep(step);
    if (switching || sp->value() % t.size_multiple != 0) sp->setValue(std::max(sp->minimum(), t.native_size / step * step));
  }
  m_sizePreset->clear();
  m_sizePreset->addItem(tr("Presets"), QSize());
  for (const auto& [w, h] : t.size_presets) m_sizePreset->addItem(QStringLiteral("%1×%2").arg(w).arg(h), QSize(w, h));
  // a distilled guidance may take CFG's place (CFG stays at the family's 1: no negative pass)
  m_cfg->setVisible(t.cfg_control);
  m_cfgLabel->setVisible(t.cfg_control);
  m_cfg->setValue(t.default_cfg);
  for (const auto& [name, value] : m_options->values()) m_optionValues[name] = value;
  {
    const QSignalBlocker block(m_options);
    m_options->setOptions(t.options, m_optionValues);
  }
  // the family's steps (Z-Image Turbo's 8, Flux schnell's 4); the first model keeps restored ones
  if (switching || !m_stepsRestored) m_steps->setValue(t.default_steps);
  emitChanged();
}

void PromptPanel::emitChanged() {
  GenerationRequest r;
  fillRequest(r);
  Q_EMIT changed(r);
}

void PromptPanel::fillRequest(GenerationRequest& r) const {
  r.prompt = m_prompt->toPlainText().toStdString();
  r.negative = m_negative->toPlainText().toStdString();
  r.steps = m_steps->value();
  r.cfg = static_cast<float>(m_cfg->value());
  r.options = m_options->values();
  r.sampler = static_cast<Sampler>(m_sampler->currentData().toInt());
  r.schedule = static_cast<Schedule>(m_schedule->currentData().toInt());
  bool ok = false;
  const qlonglong seed = m_seed->text().toLongLong(&ok);
  r.seed = ok && seed >= 0 && seed <= 0xFFFFFFFFll ? seed : -1;
  r.width = m_width->value();
  r.height = m_height->value();
  r.batch_count = m_batchCount->value();
  m_hires->fillRequest(r);
}

void PromptPanel::setFromRequest(const GenerationRequest& r) {
  m_prompt->setPlainText(QString::fromStdString(r.prompt));
  m_negative->setPlainText(QString::fromStdString(r.negative));
  m_steps->setValue(r.steps);
  m_cfg->setValue(r.cfg);
  for (const auto& [name, value] : r.options) m_optionValues[name] = value;
  m_options->setValues(r.options);
  m_sampler->setCurrentIndex(std::max(0, m_sampler->findData(int(r.sampler))));
  m_schedule->setCurrentIndex(std::max(0, m_schedule->findData(int(r.schedule))));
  m_seed->setText(QString::number(r.seed));
  if (r.width > 0) m_width->setValue(r.width);
  if (r.height > 0) m_height->setValue(r.height);
  m_batchCount->setValue(std::max(1, r.batch_count));
  m_hires->setFromRequest(r);
}

void PromptPanel::setLastSeed(int64_t seed) { m_lastSeed = seed; }

void PromptPanel::appendWord(const QString& word, bool negative) {
  QPlainTextEdit* edit = negative ? m_negative : m_prompt;
  const QString text = edit->toPlainText().trimmed();
  edit->setPlainText(text.isEmpty() ? word : text + QStringLiteral(", ") + word);
}

void PromptPanel::setTokenizer(std::shared_ptr<const ClipTokenizer> tokenizer, const QString& why) {
  m_tokenizer = std::move(tokenizer);
  m_tokenizerWhy = why;
  updateCounter(false);
  updateCounter(true);
}

void PromptPanel::setNativeSize(int size) {
  m_width->setValue(size);
  m_height->setValue(size);
}

QString PromptPanel::tokenCounterText(bool negative) const { return (negative ? m_negativeCount : m_promptCount)->text(); }

void PromptPanel::updateCounter(bool negative) {
  QLabel* label = negative ? m_negativeCount : m_promptCount;
  const QString text = (negative ? m_negative : m_prompt)->toPlainText();
  // no CLIP tokenizer and no reason: the model has no CLIP text encoder (Z-Image's Qwen3), or none is
  // loaded yet; CLIP's 75-token chunks mean nothing then
  label->setVisible(m_tokenizer || !m_tokenizerWhy.isEmpty());
  if (!m_tokenizer) {
    label->setText(QStringLiteral("?/75"));
    label->setToolTip(m_tokenizerWhy);
    return;
  }
  try {
    const auto networks = parse_extra_networks(text.toStdString());
    const auto chunks = tokenize_prompt(*m_tokenizer, networks.prompt_without_tags);
    const int capacity = std::max<int>(1, static_cast<int>(chunks.ids.size())) * kChunkTokens;
    label->setText(QStringLiteral("%1/%2").arg(chunks.token_count).arg(capacity));
    label->setStyleSheet(QString());
    label->setToolTip(tr("CLIP tokens used / capacity of the 75-token chunks, as A1111 counts them"));
  } catch (const std::exception& e) {
    label->setText(QStringLiteral("!/75"));
    label->setStyleSheet(QStringLiteral("color:#c0392b"));
    label->setToolTip(QString::fromStdString(e.what()));
  }
}

void PromptPanel::saveSettings(QSettings& s) const {
  GenerationRequest r;
  fillRequest(r);
  s.setValue(QStringLiteral("prompt/prompt"), QString::fromStdString(r.prompt));
  s.setValue(QStringLiteral("prompt/negative"), QString::fromStdString(r.negative));
  s.setValue(QStringLiteral("prompt/steps"), r.steps);
  s.setValue(QStringLiteral("prompt/cfg"), r.cfg);
  auto options = m_optionValues;
  for (const auto& [name, value] : r.options) options[name] = value;
  for (const auto& [name, value] : options) s.setValue(QStringLiteral("prompt/options/") + QString::fromStdString(name), QString::fromStdString(value));
  s.setValue(QStringLiteral("prompt/sampler"), QString::fromLatin1(sampler_name(r.sampler)));
  s.setValue(QStringLiteral("prompt/schedule"), QString::fromLatin1(schedule_name(r.schedule)));
  s.setValue(QStringLiteral("prompt/seed"), static_cast<qlonglong>(r.seed));
  s.setValue(QStringLiteral("prompt/width"), r.width);
  s.setValue(QStringLiteral("prompt/height"), r.height);
  s.setValue(QStringLiteral("prompt/batch_count"), r.batch_count);
}

void PromptPanel::restoreSettings(const QSettings& s) {
  GenerationRequest r;
  fillRequest(r);  // current values are the defaults
  r.prompt = s.value(QStringLiteral("prompt/prompt"), QString::fromStdString(r.prompt)).toString().toStdString();
  r.negative = s.value(QStringLiteral("prompt/negative"), QString::fromStdString(r.negative)).toString().toStdString();
  r.steps = s.value(QStringLiteral("prompt/steps"), r.steps).toInt();
  m_stepsRestored = s.contains(QStringLiteral("prompt/steps"));
  r.cfg = s.value(QStringLiteral("prompt/cfg"), r.cfg).toFloat();
  for (const QString& key : s.allKeys()) {
    if (key.startsWith(QStringLiteral("prompt/options/"))) {
      const std::string name = key.mid(15).toStdString();
      m_optionValues[name] = s.value(key).toString().toStdString();
      r.options[name] = m_optionValues[name];
    }
  }
  if (auto v = parse_sampler(s.value(QStringLiteral("prompt/sampler")).toString().toStdString())) r.sampler = *v;
  if (auto v = parse_schedule(s.value(QStringLiteral("prompt/schedule")).toString().toStdString())) r.schedule = *v;
  r.seed = s.value(QStringLiteral("prompt/seed"), static_cast<qlonglong>(r.seed)).toLongLong();
  r.width = s.value(QStringLiteral("prompt/width"), r.width).toInt();
  r.height = s.value(QStringLiteral("prompt/height"), r.height).toInt();
  r.batch_count = s.value(QStringLiteral("prompt/batch_count"), r.batch_count).toInt();
  setFromRequest(r);
}

}  // namespace fp8s::gui
