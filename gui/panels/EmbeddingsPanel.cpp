#include "EmbeddingsPanel.h"

#include <QDir>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QVBoxLayout>

#include "Background.h"
#include "Widgets.h"
#include "io/safetensors.h"

namespace fp8s::gui {

EmbeddingsPanel::EmbeddingsPanel(QWidget* parent) : QWidget(parent) {
  const FolderRow top = makeFolderRow(this);
  auto* layout = top.layout;
  m_folderLabel = top.label;
  auto* refreshButton = top.refresh;
  m_list = new QListWidget(this);
  m_list->setObjectName(QStringLiteral("embeddingsList"));
  m_list->setToolTip(tr("Click: add to the prompt; right click: add to the negative prompt"));
  m_list->setMaximumHeight(110);
  m_list->setContextMenuPolicy(Qt::CustomContextMenu);
  layout->addWidget(m_list);
  connect(refreshButton, &QPushButton::clicked, this, &EmbeddingsPanel::refresh);
  connect(m_list, &QListWidget::itemClicked, this, [this](QListWidgetItem* item) {
    if (item->flags() & Qt::ItemIsEnabled) Q_EMIT insertRequested(item->data(Qt::UserRole).toString(), false);
  });
  connect(m_list, &QListWidget::customContextMenuRequested, this, [this](const QPoint& at) {
    if (auto* item = m_list->itemAt(at); item && (item->flags() & Qt::ItemIsEnabled)) {
      Q_EMIT insertRequested(item->data(Qt::UserRole).toString(), true);
    }
  });
}

void EmbeddingsPanel::setFolder(const QString& folder) {
  m_folder = folder;
  refresh();
}

int EmbeddingsPanel::count() const { return m_list->count(); }

void EmbeddingsPanel::refresh() {
  m_folderLabel->setText(QDir::toNativeSeparators(m_folder));
  const int serial = ++m_serial;
  struct Entry {
    QString name, info;
    bool ok = true;
  };
  runInBackground(
      this,
      [folder = m_folder] {
        std::vector<Entry> out;
        for (const auto& fi : QDir(folder).entryInfoList({QStringLiteral("*.safetensors"), QStringLiteral("*.pt"), QStringLiteral("*.bin")},
                                                        QDir::Files, QDir::Name)) {
          Entry e{fi.completeBaseName(), QString(), true};
          if (fi.suffix() != QLatin1String("safetensors")) {
            e.info = QObject::tr("pickled: refused (convert it to .safetensors)");
            e.ok = false;
          } else {
            try {  // the header only: vector count and width of each tensor
              SafetensorsFile f(fi.absoluteFilePath().toStdString());
              QStringList parts;
              for (const auto& t : f.tensors()) {
                if (t.shape.size() == 2) parts << QStringLiteral("%1: %2×%3").arg(QString::fromStdString(t.name)).arg(t.shape[0]).arg(t.shape[1]);
              }
              e.info = parts.join(QStringLiteral(", "));
            } catch (const std::exception& ex) {
              e.info = QString::fromStdString(ex.what());
              e.ok = false;
            }
          }
          out.push_back(e);
        }
        return out;
      },
      [this, serial](std::vector<Entry> entries) {
        if (serial != m_serial) return;
        m_list->clear();
        for (const auto& e : entries) {
          auto* item = new QListWidgetItem(e.name, m_list);
          item->setData(Qt::UserRole, e.name);
          item->setToolTip(e.info);
          if (!e.ok) item->setFlags(item->flags() & ~Qt::ItemIsEnabled);
        }
        if (entries.empty()) {
          auto* hint = new QListWidgetItem(tr("No embeddings yet: add files, Refresh."), m_list);
          hint->setFlags(Qt::NoItemFlags);
        }
        Q_EMIT listed();
      });
}

}  // namespace fp8s::gui
