#include "GalleryPanel.h"

#include <QListWidget>
#include <QMenu>
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
    Q_EMIT restoreRequested(m_entries.at(static_cast<std::size_t>(i)).request, i);
  });
  connect(m_list, &QListWidget::itemClicked, m_list, &QListWidget::itemActivated);
  m_list->setContextMenuPolicy(Qt::CustomContextMenu);
  connect(m_list, &QListWidget::customContextMenuRequested, this, [this](const QPoint& at) {
    QListWidgetItem* item = m_list->itemAt(at);
    if (!item) return;
    const int i = item->data(Qt::UserRole).toInt();
    QMenu menu(this);
    menu.addAction(tr("Restore settings"), this, [this, i] { Q_EMIT restoreRequested(m_entries.at(static_cast<std::size_t>(i)).request, i); });
    menu.addAction(tr("Send to img2img"), this, [this, i] { Q_EMIT sendToImg2Img(i); });
    menu.exec(m_list->viewport()->mapToGlobal(at));
  });
}

void GalleryPanel::addResult(const RunResult& result) {
  for (std::size_t k = 0; k < result.result.images.size(); ++k) {
    GalleryEntry e{result.run, result.label, result.request, result.result.images[k], result.savedPath(k)};
    e.request.seed = static_cast<int64_t>(e.image.seed);
    const int index = static_cast<int>(m_entries.size());
    auto* item = new QListWidgetItem(QIcon(QPixmap::fromImage(toQImage(e.image.image).scaled(128, 128, Qt::KeepAspectRatio, Qt::SmoothTransformation))),
                                     QStringLiteral("#%1 %2\nseed %3").arg(e.run).arg(e.label).arg(e.image.seed));
    item->setToolTip(QString::fromStdString(e.image.parameters));
    item->setData(Qt::UserRole, index);
    m_entries.push_back(std::move(e));
    m_list->insertItem(0, item);
  }
}

int GalleryPanel::count() const { return static_cast<int>(m_entries.size()); }

}  // namespace fp8s::gui
