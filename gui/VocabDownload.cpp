#include "VocabDownload.h"

#include <QDir>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QNetworkAccessManager>
#include <QNetworkReply>
#include <QSaveFile>

#include "core/sha256.h"
#include "text/clip_tokenizer.h"

namespace fp8s::gui {

VocabDownload::VocabDownload(QString folder, QObject* parent)
    : QObject(parent), m_folder(std::move(folder)), m_net(new QNetworkAccessManager(this)) {}

void VocabDownload::start() {
  QNetworkRequest request{QUrl(QString::fromLatin1(kClipVocabUrl))};
  request.setAttribute(QNetworkRequest::RedirectPolicyAttribute, QNetworkRequest::NoLessSafeRedirectPolicy);
  request.setTransferTimeout(60000);
  QNetworkReply* reply = m_net->get(request);
  connect(reply, &QNetworkReply::finished, this, [this, reply] {
    reply->deleteLater();
    if (reply->error() != QNetworkReply::NoError) {
      Q_EMIT finished(false, tr("could not download the CLIP vocabulary (%1); put %2 into %3")
                                 .arg(reply->errorString(), QString::fromLatin1(kClipVocabFile), QDir::toNativeSeparators(m_folder)));
      return;
    }
    const QByteArray data = reply->readAll();
    Sha256 h;
    h.update(data.constData(), static_cast<std::size_t>(data.size()));
    if (h.hex() != kClipVocabSha256) {
      Q_EMIT finished(false, tr("the downloaded CLIP vocabulary has the wrong sha256; it was not installed"));
      return;
    }
    QDir().mkpath(m_folder);
    QSaveFile out(m_folder + QLatin1Char('/') + QString::fromLatin1(kClipVocabFile));  // atomic: all or nothing
    if (!out.open(QIODevice::WriteOnly) || out.write(data) != data.size() || !out.commit()) {
      Q_EMIT finished(false, tr("cannot write %1: %2").arg(out.fileName(), out.errorString()));
      return;
    }
    Q_EMIT finished(true, QDir::toNativeSeparators(out.fileName()));
  });
}

VocabOffer::VocabOffer(QString folder, QWidget* parent) : QWidget(parent), m_folder(std::move(folder)) {
  setObjectName(QStringLiteral("vocabOffer"));
  auto* row = new QHBoxLayout(this);
  row->setContentsMargins(0, 0, 0, 0);
  auto* text = new QLabel(tr("This checkpoint needs the CLIP vocabulary (1.4 MB, from github.com/openai/CLIP)."), this);
  text->setWordWrap(true);
  auto* download = new QPushButton(tr("Download"), this);
  download->setObjectName(QStringLiteral("vocabDownloadButton"));
  auto* later = new QPushButton(tr("Not now"), this);
  row->addWidget(text, 1);
  row->addWidget(download);
  row->addWidget(later);
  connect(later, &QPushButton::clicked, this, &QWidget::hide);
  connect(download, &QPushButton::clicked, this, [this, download] {
    download->setEnabled(false);
    auto* job = new VocabDownload(m_folder, this);
    connect(job, &VocabDownload::finished, this, [this, job, download](bool ok, const QString& message) {
      job->deleteLater();
      download->setEnabled(true);
      hide();
      if (ok) {
        Q_EMIT installed(message);
      } else {
        Q_EMIT failed(message);
      }
    });
    job->start();
  });
}

}  // namespace fp8s::gui
