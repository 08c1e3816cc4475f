// Gallery: this session's results with their parameters; choosing one restores its settings.
#pragma once

#include <QWidget>

#include <vector>

#include "GuiTypes.h"

class QListWidget;

namespace fp8s::gui {

class GalleryPanel : public QWidget {
  Q_OBJECT

 public:
  explicit GalleryPanel(QWidget* parent = nullptr);
  void addResult(const RunResult& result);
  int count() const;
  const RunResult& at(int i) const { return m_results.at(static_cast<std::size_t>(i)); }

 Q_SIGNALS:
  // A gallery entry was chosen: its request (with the image's actual seed) and its image.
  void restoreRequested(const fp8s::GenerationRequest& request, int index);

 private:
  QListWidget* m_list;
  std::vector<RunResult> m_results;  // one per image
  std::vector<int> m_imageIndex;
};

}  // namespace fp8s::gui
