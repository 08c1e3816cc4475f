#include "GalleryPanel.h"

#include <QListWidget>
#include <QVBoxLayout>

#include "ImageView.h"

namespace fp8s::gui {

GalleryPanel::GalleryPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  m_list = new QListWidget(this);
  m_list->setObjectName(QStringLiteral("galleryList"));
  m_list->setViewMode(QListView::IconMode);
  m_list->setIconSize(QSize(128, 128));
  m_list->setResizeMode(QListView::Adjust);
  m_list->setMovement(QListView::Static);
  m_list->setSpacing(6);
  m_list->setWordWrap(true);
  layout->addWidget(m_list);
  connect(m_list, &QListWidget::itemActivated, this, [this](QListWidgetItem* item) {
    const int i = item->data(Qt::UserRole).toInt();
    GenerationRequest r = m_results[static_cast<std::size_t>(i)].request;
    r.seed = static_cast<int64_t>(m_results[static_cast<std::size_t>(i)].result.images[static_cast<std::size_t>(m_imageIndex[static_cast<std::size_t>(i)])].seed);
    Q_EMIT restoreRequested(r, i);
  });
  connect(m_list, &QListWidget::itemClicked, m_list, &QListWidget::itemActivated);
}

void GalleryPanel::addResult(const RunResult& result) {
  for (int k = 0; k < static_cast<int>(result.result.images.size()); ++k) {
    const auto& img = result.result.images[static_cast<std::size_t>(k)];
    const int index = static_cast<int>(m_results.size());
    m_results.push_back(result);
    m_imageIndex.push_back(k);
    auto* item = new QListWidgetItem(QIcon(QPixmap::fromImage(toQImage(img.image).scaled(128, 128, Qt::KeepAspectRatio, Qt::SmoothTransformation))),
                                     QStringLiteral("#%1 %2\nseed %3").arg(result.run).arg(result.label).arg(img.seed));
    item->setToolTip(QString::fromStdString(img.parameters));
    item->setData(Qt::UserRole, index);
    m_list->insertItem(0, item);
  }
}

int GalleryPanel::count() const { return static_cast<int>(m_results.size()); }

}  // namespace fp8s::gui
