// Model panel: the checkpoint in use (file dialog, recent list, models-folder scan) and what it
// holds per component, from `inspect`. Emits the chosen path; it never talks to the engine.
#pragma once

#include <QStringList>
#include <QWidget>

#include <memory>

#include "models/flux/flux_files.h"

class QComboBox;
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
  // The loaded model's components as the engine reports them (Flux: transformer, T5-XXL, CLIP-L,
  // autoencoder, each with its file, storage and bytes).
  void setModelInfo(const ModelInfo& info);
  // A Flux checkpoint's other components as the user picked them (empty: the engine finds them
  // in the file, beside it or in a ComfyUI models folder).
  FluxPaths fluxPaths() const;
  void setFluxPaths(const FluxPaths& paths);
  // The inspect report of the current checkpoint (nullptr when it could not be read).
  const InspectReport* report() const { return m_report.get(); }

  void saveSettings(QSettings& s) const;
  void restoreSettings(const QSettings& s);

 Q_SIGNALS:
  void modelChosen(const QString& path);
  // The user picked or cleared a Flux component's file: the model loads again with it.
  void componentsChanged();
  void reportChanged();

 public Q_SLOTS:
  void rescan();
  void browse();

 private:
  // Inspects the current checkpoint on the thread pool (reading a file), then shows the report.
  void inspectCurrent();
  void showReport(const QString& path, std::shared_ptr<InspectReport> report, const QString& error);

  QComboBox* m_combo;
  QLabel* m_info;
  QLabel* m_status;
  QGroupBox* m_fluxBox;
  QLineEdit* m_fluxEdits[3];  // T5-XXL, CLIP-L, autoencoder
  QLabel* m_components;
  QString m_folder;
  QStringList m_recent;
  std::shared_ptr<InspectReport> m_report;
  int m_inspectSerial = 0;  // the latest inspection; older results are dropped
};

QString formatBytes(double bytes);  // "1.72 GB", "512 MB"

}  // namespace fp8s::gui
