// Gallery: this session's results with their parameters; choosing one restores its settings.
#pragma once

#include <QWidget>

#include <vector>

#include "GuiTypes.h"

class QListWidget;

namespace fp8s::gui {

// One image of a finished run, as the gallery keeps it.
struct GalleryEntry {
  int run = 0;
  QString label;
  GenerationRequest request;  // the run's, with this image's seed
  GeneratedImage image;
  QString savedPath;
};

class GalleryPanel : public QWidget {
  Q_OBJECT

 public:
  explicit GalleryPanel(QWidget* parent = nullptr);
  void addResult(const RunResult& result);
  int count() const;
  const GalleryEntry& at(int i) const { return m_entries.at(static_cast<std::size_t>(i)); }

 Q_SIGNALS:
  // A gallery entry was chosen: its request (with the image's actual seed) and its index (at()).
  void restoreRequested(const fp8s::GenerationRequest& request, int index);
  // "Send to img2img" from an entry's context menu: its image (at()).
  void sendToImg2Img(int index);

 private:
  QListWidget* m_list;
  std::vector<GalleryEntry> m_entries;  // one per image
};

}  // namespace fp8s::gui
