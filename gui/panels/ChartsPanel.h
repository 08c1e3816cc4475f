// Charts (QCustomPlot): memory over time (live tensor bytes and RSS) and per-step time, one colour
// per run with a legend naming its storage type, so FP8 and FP16 runs overlay. Samples are buffered
// and replotted on a timer, not per sample.
#pragma once

#include <QColor>
#include <QMap>
#include <QStringList>
#include <QWidget>

#include <vector>

#include "GuiTypes.h"
#include "pipeline/family_traits.h"

class QCustomPlot;
class QTimer;

namespace fp8s::gui {

class ChartsPanel : public QWidget {
  Q_OBJECT

 public:
  explicit ChartsPanel(QWidget* parent = nullptr);

  // A run's series; legend: storageLabel ("load …" for a model load, which has no steps); colour by
  // storage type.
  void beginRun(int run, const StorageSpec& storage, bool load = false);
  void addMemory(int run, const MemorySample& sample);
  void addStep(int run, const StepEvent& event);
  void setWeightBytes(int run, uint64_t bytes);  // drawn as a dotted level once the run finished
  void setWeightBudget(int run, uint64_t bytes);  // the budget, a dash-dot level (0: auto, none)
  // A phase began: the latest run's phases are marked on the memory chart with the component that
  // runs in them, as the family names its phases (FamilyTraits' labels).
  void addPhase(int run, const PhaseEvent& event);
  void setTraits(const FamilyTraits& traits) { m_traits = traits; }
  // The latest run's phase marks as the chart labels them (for tests).
  QStringList phaseLabels(int run) const;
  void clear();

  int stepPoints(int run) const;
  int memoryPoints(int run) const;
  int runCount() const { return static_cast<int>(m_runs.size()); }
  QCustomPlot* memoryPlot() const { return m_memory; }
  QCustomPlot* stepPlot() const { return m_steps; }

  static constexpr int kMaxRuns = 6;  // older runs leave the charts

 public Q_SLOTS:
  void replotNow();

 private:
  struct Run {
    StorageSpec storage;
    QString label;
    QColor colour;
    std::vector<double> t, live, rss;  // seconds, bytes (live: VRAM when `gpu`)
    bool gpu = false;
    std::vector<double> stepX, stepMs, waitMs;  // waitMs: the step's transfer wait (streamed blocks)
    double budgetBytes = 0;                     // the run's weight budget (0: auto, not drawn)
    double weightBytes = 0;
    std::vector<std::pair<double, QString>> phases;  // seconds, label
  };
  QString phaseLabel(Phase phase) const;
  QColor colourFor(const StorageSpec& storage) const;
  void styleAxes(QCustomPlot* plot);
  void plotMemory(const Run& r, const QString& name, double unit);
  void plotSteps(const Run& r, const QString& name);
  void markPhases(const Run& last, double maxT);

  QCustomPlot* m_memory;
  QCustomPlot* m_steps;
  QTimer* m_timer;
  QMap<int, Run> m_runs;
  FamilyTraits m_traits;
  bool m_dirty = false;
};

}  // namespace fp8s::gui
