#include "ImageStrip.h"

#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QImageReader>
#include <QLabel>
#include <QMimeData>
#include <QPushButton>
#include <QToolButton>
#include <QUrl>
#include <QVBoxLayout>

namespace fp8s::gui {
namespace {

constexpr int kThumb = 56;

QStringList imageFiles(const QMimeData* mime) {
  QStringList out;
  if (!mime || !mime->hasUrls()) return out;
  for (const QUrl& url : mime->urls()) {
    const QString path = url.toLocalFile();
    if (!path.isEmpty() && QImageReader::imageFormat(path) == "png") out << path;  // what the engine reads
  }
  return out;
}

}  // namespace

ImageStrip::ImageStrip(int max, QWidget* parent) : QWidget(parent), m_max(max), m_row(new QHBoxLayout(this)) {
  setAcceptDrops(true);
  m_row->setContentsMargins(0, 0, 0, 0);
  m_add = new QPushButton(tr("Add…"), this);
  m_add->setObjectName(QStringLiteral("imageStripAdd"));
  m_add->setToolTip(tr("Add a PNG, or drop PNG files here"));
  connect(m_add, &QPushButton::clicked, this, [this] {
    addFiles(QFileDialog::getOpenFileNames(this, tr("Reference images"), QString(), tr("PNG images (*.png)")));
  });
  rebuild();
}

void ImageStrip::setFiles(const QStringList& files) {
  m_files.clear();
  for (const QString& f : files) {
    if (!f.isEmpty() && (m_max <= 0 || m_files.size() < m_max)) m_files << f;
  }
  rebuild();
}

void ImageStrip::addFiles(const QStringList& files) {
  const auto before = m_files.size();
  for (const QString& f : files) {
    if (!f.isEmpty() && (m_max <= 0 || m_files.size() < m_max)) m_files << f;
  }
  if (m_files.size() == before) return;
  rebuild();
  Q_EMIT changed();
}

void ImageStrip::removeAt(int index) {
  if (index < 0 || index >= m_files.size()) return;
  m_files.removeAt(index);
  rebuild();
  Q_EMIT changed();
}

void ImageStrip::dragEnterEvent(QDragEnterEvent* event) {
  if (!imageFiles(event->mimeData()).isEmpty()) event->acceptProposedAction();
}

bool ImageStrip::dropFiles(const QMimeData* mime) {
  const QStringList files = imageFiles(mime);
  if (files.isEmpty()) return false;
  addFiles(files);
  return true;
}

void ImageStrip::dropEvent(QDropEvent* event) {
  if (dropFiles(event->mimeData())) event->acceptProposedAction();
}

void ImageStrip::rebuild() {
  while (auto* item = m_row->takeAt(0)) {
    if (item->widget() && item->widget() != m_add) item->widget()->deleteLater();
    delete item;
  }
  for (int i = 0; i < m_files.size(); ++i) {
    auto* cell = new QWidget(this);
    cell->setObjectName(QStringLiteral("imageStripItem%1").arg(i));
    auto* v = new QVBoxLayout(cell);
    v->setContentsMargins(0, 0, 0, 0);
    v->setSpacing(1);
    auto* thumb = new QLabel(cell);
    thumb->setFixedSize(kThumb, kThumb);
    thumb->setAlignment(Qt::AlignCenter);
    thumb->setFrameShape(QFrame::StyledPanel);
    QImageReader reader(m_files[i]);
    reader.setAutoTransform(true);
    const QImage image = reader.read();
    if (image.isNull()) thumb->setText(tr("missing"));
    else thumb->setPixmap(QPixmap::fromImage(image.scaled(kThumb - 4, kThumb - 4, Qt::KeepAspectRatio, Qt::SmoothTransformation)));
    thumb->setToolTip(m_files[i]);
    auto* remove = new QToolButton(cell);
    remove->setObjectName(QStringLiteral("imageStripRemove%1").arg(i));
    remove->setText(QStringLiteral("✕ ") + QFileInfo(m_files[i]).fileName().left(10));
    remove->setToolTip(tr("Remove %1").arg(m_files[i]));
    connect(remove, &QToolButton::clicked, this, [this, i] { removeAt(i); });
    v->addWidget(thumb);
    v->addWidget(remove);
    m_row->addWidget(cell);
  }
  m_row->addWidget(m_add);
  m_row->addStretch(1);
  m_add->setEnabled(m_max <= 0 || m_files.size() < m_max);
}

}  // namespace fp8s::gui
