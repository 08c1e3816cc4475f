// Model panel: the checkpoint in use (file dialog, recent list, models-folder scan) and what it
// holds per component, from `inspect`. Emits the chosen path; it never talks to the engine.
#pragma once

#include <QStringList>
#include <QWidget>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "PrecisionPanel.h"
#include "pipeline/family_traits.h"

class QComboBox;
class QGridLayout;
class QGroupBox;
class QLabel;
class QLineEdit;
class QSettings;

namespace fp8s {
struct InspectReport;
struct ModelInfo;
}

namespace fp8s::gui {

class ModelPanel : public QWidget {
  Q_OBJECT

 public:
  explicit ModelPanel(QWidget* parent = nullptr);

  QString checkpoint() const;
  void setModelsFolder(const QString& folder);
  QString modelsFolder() const { return m_folder; }
  // Selects `path` (adding it to the recent list) without emitting modelChosen.
  void setCheckpoint(const QString& path);
  // The engine's view once loaded (architecture, storage); "" clears it.
  void setStatus(const QString& text);
  // The residency plan of the last run ("resident 31 of 57 blocks, 9.8 GB; streaming 26 blocks,
  // 13.9 GB a step"); empty: all resident.
  void setResidency(const QString& plan);
  // The loaded model's components as the engine reports them (each with its file, storage and
  // bytes), and the family's component roles the box offers.
  void setModelInfo(const ModelInfo& info);
  // A model's other files by role as the user picked them (empty: the engine finds them in the
  // file, beside it or in a ComfyUI models folder). Kept for every role ever shown.
  std::map<std::string, std::string> components() const;
  void setComponents(const std::map<std::string, std::string>& paths);
  // The inspect report of the current checkpoint (nullptr when it could not be read).
  const InspectReport* report() const { return m_report.get(); }
  // The engine's weight estimate for the chosen model and components (empty without a report).
  WeightEstimate weightEstimate() const;

  void saveSettings(QSettings& s) const;
  void restoreSettings(const QSettings& s);

 Q_SIGNALS:
  void modelChosen(const QString& path);
  // The user picked or cleared a component's file: the model loads again with it.
  void componentsChanged();
  void reportChanged();

 public Q_SLOTS:
  void rescan();
  void browse();

 private:
  // Inspects the current checkpoint on the thread pool (reading a file), then shows the report.
  void inspectCurrent();
  void showReport(const QString& path, std::shared_ptr<InspectReport> report, const QString& error);
  // One row (label, file, picker) per role of the family; none: the box hides.
  void setRoles(const std::vector<ComponentRole>& roles);

  QComboBox* m_combo;
  QLabel* m_info;
  QLabel* m_status;
  QLabel* m_residency;
  QGroupBox* m_componentBox;
  QGridLayout* m_componentGrid;
  std::vector<ComponentRole> m_roles;
  std::vector<QWidget*> m_roleWidgets;                 // the rows of m_roles
  std::map<std::string, QLineEdit*> m_componentEdits;  // by role
  std::map<std::string, std::string> m_paths;          // by role, also of roles not shown now
  QLabel* m_components;
  QString m_folder;
  QStringList m_recent;
  std::shared_ptr<InspectReport> m_report;
  int m_inspectSerial = 0;  // the latest inspection; older results are dropped
};

QString formatBytes(double bytes);  // "1.72 GB", "512 MB"

}  // namespace fp8s::gui
