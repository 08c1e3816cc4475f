// The CLIP vocabulary for real checkpoints: offered once as a download (openai/CLIP's
// bpe_simple_vocab_16e6.txt.gz, checked against its sha256) when a loaded model finds none —
// what scripts/install-deps.sh does for the command line.
#pragma once

#include <QObject>
#include <QString>
#include <QWidget>

class QNetworkAccessManager;

namespace fp8s::gui {

class VocabDownload : public QObject {
  Q_OBJECT

 public:
  // Downloads into `folder` (the user data folder's clip/, where the engine looks).
  explicit VocabDownload(QString folder, QObject* parent = nullptr);
  void start();

 Q_SIGNALS:
  void finished(bool ok, const QString& message);  // message: where it went, or why it failed

 private:
  QString m_folder;
  QNetworkAccessManager* m_net;
};

// The offer bar: "This checkpoint needs the CLIP vocabulary" with Download and Not now.
class VocabOffer : public QWidget {
  Q_OBJECT

 public:
  explicit VocabOffer(QString folder, QWidget* parent = nullptr);

 Q_SIGNALS:
  void installed(const QString& path);
  void failed(const QString& message);

 private:
  QString m_folder;
};

}  // namespace fp8s::gui
