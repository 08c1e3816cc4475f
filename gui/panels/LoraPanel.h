// LoRA panel: the LoRAs in the LoRA folder with an enable box, a weight slider and spin box (−2…2)
// and their metadata as tooltip, plus the LoRA mode. Emits the chosen LoRAs; never talks to the engine.
#pragma once

#include <QWidget>

#include <map>
#include <vector>

#include "core/types.h"
#include "lora/lora_library.h"
#include "pipeline/lora_request.h"

class QComboBox;
class QLabel;
class QSettings;
class QTableWidget;

namespace fp8s::gui {

struct LoraSettings {
  std::vector<LoraRequest> loras;  // enabled ones only
  LoraMode mode = LoraMode::Auto;
};

class LoraPanel : public QWidget {
  Q_OBJECT

 public:
  explicit LoraPanel(QWidget* parent = nullptr);

  void setFolder(const QString& folder);  // lists it (on the thread pool: `listed` follows)
  QString folder() const { return m_folder; }
  LoraSettings settings() const;
  int rowCount() const;
  // Enables LoRA `name` (file stem) with `weight`; false when it is not listed. While the folder is
  // being listed the choice is kept and applied when the list arrives (true).
  bool setLora(const QString& name, double weight, bool enabled = true);

  void saveSettings(QSettings& s) const;
  void restoreSettings(const QSettings& s);

 public Q_SLOTS:
  void refresh();

 Q_SIGNALS:
  void changed(const fp8s::gui::LoraSettings& settings);
  void listed();  // the folder's LoRAs are in the table

 private:
  QLabel* m_folderLabel;
  QTableWidget* m_table;
  QComboBox* m_mode;
  QString m_folder;
  std::vector<LoraInfo> m_infos;
  std::map<QString, std::pair<bool, double>> m_pending;  // choices to apply when the list arrives
  int m_listSerial = 0;
  bool m_listing = false;  // a listing is on the thread pool
  void showList(std::vector<LoraInfo> infos, const QString& error);
};

}  // namespace fp8s::gui
