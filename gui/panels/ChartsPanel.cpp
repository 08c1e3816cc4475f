#include "ChartsPanel.h"

#include <QFontMetricsF>
#include <vector>

#include <QLabel>
#include <QTimer>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <algorithm>

namespace fp8s::gui {

ChartsPanel::ChartsPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  m_memory = new QCustomPlot(this);
  m_memory->setObjectName(QStringLiteral("memoryPlot"));
  m_steps = new QCustomPlot(this);
  m_steps->setObjectName(QStringLiteral("stepPlot"));
  for (auto* p : {m_memory, m_steps}) {
    p->setMinimumHeight(160);
    p->legend->setVisible(true);
    p->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignBottom | Qt::AlignRight);  // lines sit high
    p->legend->setFont(QFont(font().family(), 8));
    p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    styleAxes(p);
    layout->addWidget(p, 1);
  }
  m_memory->plotLayout()->insertRow(0);
  m_memory->plotLayout()->addElement(0, 0, new QCPTextElement(m_memory, tr("Memory over time"), QFont(font().family(), 9, QFont::Bold)));
  m_steps->plotLayout()->insertRow(0);
  m_steps->plotLayout()->addElement(0, 0, new QCPTextElement(m_steps, tr("Time per step"), QFont(font().family(), 9, QFont::Bold)));
  auto* key = new QLabel(tr("Memory lines: solid = live tensors, dashed = process RSS, dotted = stored weights. "
                            "Drag to pan, wheel to zoom."), this);
  key->setWordWrap(true);
  key->setStyleSheet(QStringLiteral("font-size: 8pt"));
  layout->addWidget(key);
  m_memory->xAxis->setLabel(tr("time since run start (s)"));
  m_steps->xAxis->setLabel(tr("step"));
  m_steps->yAxis->setLabel(tr("ms"));
  QSharedPointer<QCPAxisTickerFixed> integerTicks(new QCPAxisTickerFixed);
  integerTicks->setTickStep(1.0);
  integerTicks->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
  m_steps->xAxis->setTicker(integerTicks);
  m_memory->yAxis->setLabel(tr("MB"));
  m_timer = new QTimer(this);
  m_timer->setInterval(250);
  connect(m_timer, &QTimer::timeout, this, [this] {
    if (m_dirty) replotNow();
  });
  m_timer->start();
}

void ChartsPanel::styleAxes(QCustomPlot* plot) {
  const QPalette pal = palette();
  plot->setBackground(pal.color(QPalette::Base));
  const QColor fg = pal.color(QPalette::Text);
  for (auto* axis : {plot->xAxis, plot->yAxis}) {
    axis->setBasePen(QPen(fg));
    axis->setTickPen(QPen(fg));
    axis->setSubTickPen(QPen(fg));
    axis->setTickLabelColor(fg);
    axis->setLabelColor(fg);
    axis->grid()->setPen(QPen(pal.color(QPalette::Mid), 0, Qt::DotLine));
  }
  QColor legendBg = pal.color(QPalette::Base);
  legendBg.setAlpha(210);
  plot->legend->setBrush(legendBg);
  plot->legend->setTextColor(fg);
  plot->legend->setBorderPen(QPen(pal.color(QPalette::Mid)));
}

QColor ChartsPanel::colourFor(const StorageSpec& storage) const {
  QColor base;
  switch (storage.weights) {
    case WeightType::FP16: base = QColor(0x1f, 0x77, 0xb4); break;      // blue
    case WeightType::FP8_E4M3: base = QColor(0xe6, 0x55, 0x0d); break;  // orange
    case WeightType::FP8_E5M2: base = QColor(0x9b, 0x30, 0xb5); break;  // purple
    case WeightType::BF16: base = QColor(0x2c, 0xa0, 0x2c); break;      // green
    case WeightType::FP32: base = QColor(0x7f, 0x7f, 0x7f); break;      // grey
    case WeightType::INT8: base = QColor(0xd6, 0x27, 0x28); break;      // red
    case WeightType::MXFP8: base = QColor(0x8c, 0x56, 0x4b); break;     // brown
    case WeightType::NVFP4: base = QColor(0x17, 0xbe, 0xcf); break;     // cyan
  }
  int same = 0;
  for (const auto& r : m_runs) same += r.storage == storage ? 1 : 0;
  return same == 0 ? base : (same % 2 ? base.lighter(135) : base.darker(135));
}

void ChartsPanel::beginRun(int run, const StorageSpec& storage, bool load) {
  while (m_runs.size() >= kMaxRuns) m_runs.erase(m_runs.begin());
  Run r;
  r.storage = storage;
  r.label = load ? tr("load %1").arg(storageLabel(storage)) : storageLabel(storage);
  r.colour = colourFor(storage);
  m_runs.insert(run, r);
  m_dirty = true;
}

void ChartsPanel::addMemory(int run, const MemorySample& s) {
  auto it = m_runs.find(run);
  if (it == m_runs.end()) return;
  it->t.push_back(s.t_ms / 1000.0);
  // on a GPU the solid line is VRAM (the CUDA allocator's bytes), on the CPU live tensor bytes
  const bool gpu = s.gpu;
  it->gpu = it->gpu || gpu;
  it->live.push_back(static_cast<double>(gpu ? s.cuda_allocated_bytes : s.tracked_live_bytes));
  it->rss.push_back(static_cast<double>(s.rss_bytes));
  m_dirty = true;
}

void ChartsPanel::addStep(int run, const StepEvent& e) {
  auto it = m_runs.find(run);
  if (it == m_runs.end()) return;
  it->stepX.push_back(e.image_index * e.steps + e.step);
  it->stepMs.push_back(e.step_ms);
  it->waitMs.push_back(e.transfer_wait_ms);
  m_dirty = true;
}

void ChartsPanel::setWeightBudget(int run, uint64_t bytes) {
  auto it = m_runs.find(run);
  if (it == m_runs.end()) return;
  it->budgetBytes = static_cast<double>(bytes);
  m_dirty = true;
}

void ChartsPanel::setWeightBytes(int run, uint64_t bytes) {
  auto it = m_runs.find(run);
  if (it == m_runs.end()) return;
  it->weightBytes = static_cast<double>(bytes);
  m_dirty = true;
}

QString ChartsPanel::phaseLabel(Phase phase) const {
  switch (phase) {
    case Phase::Load: return tr("load");
    case Phase::Encode: return tr(m_traits.encode_label.c_str());
    case Phase::Sample: return tr(m_traits.sample_label.c_str());
    case Phase::Decode: return tr(m_traits.decode_label.c_str());
    case Phase::Done: return tr("done");
  }
  return {};
}

void ChartsPanel::addPhase(int run, const PhaseEvent& e) {
  auto it = m_runs.find(run);
  if (it == m_runs.end()) return;
  const QString label = phaseLabel(e.phase);
  if (!it->phases.empty() && it->phases.back().second == label) return;  // the same phase again (a batch's next image)
  it->phases.push_back({e.t_ms / 1000.0, label});
  m_dirty = true;
}

QStringList ChartsPanel::phaseLabels(int run) const {
  QStringList out;
  if (m_runs.contains(run)) {
    for (const auto& p : m_runs[run].phases) out << p.second;
  }
  return out;
}

void ChartsPanel::clear() {
  m_runs.clear();
  m_dirty = true;
  replotNow();
}

int ChartsPanel::stepPoints(int run) const { return m_runs.contains(run) ? static_cast<int>(m_runs[run].stepX.size()) : 0; }
int ChartsPanel::memoryPoints(int run) const { return m_runs.contains(run) ? static_cast<int>(m_runs[run].t.size()) : 0; }

void ChartsPanel::replotNow() {
  m_dirty = false;
  m_memory->clearGraphs();
  m_steps->clearGraphs();
  double maxBytes = 0, maxT = 0;
  bool anyGpu = false;
  for (const auto& r : m_runs) {
    anyGpu = anyGpu || r.gpu;
    for (double v : r.rss) maxBytes = std::max(maxBytes, v);
    for (double v : r.live) maxBytes = std::max(maxBytes, v);
    if (!r.t.empty()) maxT = std::max(maxT, r.t.back());
  }
  const bool gb = maxBytes >= 2e9;
  const double unit = gb ? 1e9 : 1e6;
  m_memory->yAxis->setLabel(anyGpu ? (gb ? tr("GB (solid: VRAM)") : tr("MB (solid: VRAM)")) : gb ? tr("GB") : tr("MB"));
  for (auto it = m_runs.cbegin(); it != m_runs.cend(); ++it) {
    const QString name = QStringLiteral("#%1 %2").arg(it.key()).arg(it.value().label);
    plotMemory(it.value(), name, unit);
    plotSteps(it.value(), name);
  }
  m_memory->xAxis->setRange(0, std::max(1.0, maxT * 1.02));
  m_memory->yAxis->setRange(0, std::max(1.0, maxBytes / unit * 1.25));
  m_memory->clearItems();
  if (!m_runs.isEmpty()) markPhases(m_runs.last(), maxT);
  double maxStep = 1, maxMs = 1;
  for (const auto& r : m_runs) {
    for (double x : r.stepX) maxStep = std::max(maxStep, x);
    for (double y : r.stepMs) maxMs = std::max(maxMs, y);
  }
  m_steps->xAxis->setRange(0.5, maxStep + 0.5);
  m_steps->yAxis->setRange(0, maxMs * 1.15);
  m_memory->legend->setVisible(m_memory->graphCount() > 0);
  m_steps->legend->setVisible(m_steps->graphCount() > 0);
  m_memory->replot(QCustomPlot::rpQueuedReplot);
  m_steps->replot(QCustomPlot::rpQueuedReplot);
}

// A run's live (solid) and RSS (dashed) memory in `unit` bytes, and its levels across the run: the
// stored weights (dotted) and the weight budget (dash-dot, in the legend).
void ChartsPanel::plotMemory(const Run& r, const QString& name, double unit) {
  auto toUnit = [unit](const std::vector<double>& v) {
    QVector<double> out;
    out.reserve(static_cast<int>(v.size()));
    for (double x : v) out << x / unit;
    return out;
  };
  const QVector<double> t(r.t.begin(), r.t.end());
  auto* live = m_memory->addGraph();
  live->setName(r.gpu ? name + tr(" VRAM") : name);
  live->setPen(QPen(r.colour, 2));
  live->setData(t, toUnit(r.live), true);
  auto* rss = m_memory->addGraph();
  rss->setName(name + tr(" RSS"));
  rss->setPen(QPen(r.colour, 1.5, Qt::DashLine));
  rss->setData(t, toUnit(r.rss), true);
  rss->removeFromLegend();
  auto level = [&](double bytes, const QString& what, Qt::PenStyle style, bool legend) {
    if (bytes <= 0 || r.t.empty()) return;
    auto* g = m_memory->addGraph();
    g->setName(name + what);
    g->setPen(QPen(r.colour, 1, style));
    g->setData(QVector<double>{0.0, r.t.back()}, QVector<double>{bytes / unit, bytes / unit}, true);
    if (!legend) g->removeFromLegend();
  };
  level(r.weightBytes, tr(" weights"), Qt::DotLine, false);
  level(r.budgetBytes, tr(" weight budget"), Qt::DashDotLine, true);
}

// A run's step times, and the part of each step spent waiting for streamed blocks under them (a
// load has no steps: memory only).
void ChartsPanel::plotSteps(const Run& r, const QString& name) {
  if (r.stepX.empty()) return;
  auto* step = m_steps->addGraph();
  step->setName(name);
  step->setPen(QPen(r.colour, 2));
  step->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, r.colour, r.colour, 5));
  step->setData(QVector<double>(r.stepX.begin(), r.stepX.end()), QVector<double>(r.stepMs.begin(), r.stepMs.end()), true);
  if (std::any_of(r.waitMs.begin(), r.waitMs.end(), [](double w) { return w > 0; })) {
    auto* wait = m_steps->addGraph();
    wait->setName(name + tr(" transfer wait"));
    wait->setPen(QPen(r.colour, 1.5, Qt::DashLine));
    wait->setBrush(QBrush(QColor(r.colour.red(), r.colour.green(), r.colour.blue(), 50)));
    wait->setData(QVector<double>(r.stepX.begin(), r.stepX.end()), QVector<double>(r.waitMs.begin(), r.waitMs.end()), true);
  }
}

// The run's phases: a dotted line where each begins and the component that runs at the top, each
// label in the first row where it overlaps no other (short phases sit close together).
void ChartsPanel::markPhases(const Run& last, double maxT) {
  constexpr int kRows = 4;
  std::vector<std::vector<std::pair<double, double>>> taken(kRows);  // pixel spans per row
  for (const auto& [t, label] : last.phases) {
    if (label == tr("done")) continue;
    auto* line = new QCPItemStraightLine(m_memory);
    line->point1->setCoords(t, 0);
    line->point2->setCoords(t, 1);
    line->setPen(QPen(last.colour, 1, Qt::DotLine));
    auto* text = new QCPItemText(m_memory);
    QFont f = text->font();
    f.setPointSizeF(f.pointSizeF() * 0.85);
    text->setFont(f);
    // labels near the right edge end at their line instead of running off the chart
    const bool right = t > 0.7 * maxT;
    const double x = m_memory->xAxis->coordToPixel(t), w = QFontMetricsF(f).horizontalAdvance(label) + 6;
    const std::pair<double, double> span = right ? std::pair{x - w, x} : std::pair{x, x + w};
    int row = 0;
    auto free_in = [&](int r) {
      return std::none_of(taken[r].begin(), taken[r].end(),
                          [&](const auto& o) { return span.first < o.second && o.first < span.second; });
    };
    while (row < kRows - 1 && !free_in(row)) ++row;
    taken[row].push_back(span);
    text->setPositionAlignment((right ? Qt::AlignRight : Qt::AlignLeft) | Qt::AlignTop);
    text->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
    text->position->setCoords(t, 0.02 + 0.07 * row);
    text->setText(label);
    text->setColor(last.colour);
  }
}

}  // namespace fp8s::gui
