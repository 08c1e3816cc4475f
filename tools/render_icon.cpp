// Build tool: renders the SVG application icon into the PNG sizes of the hicolor icon theme.
// Usage: render_icon ICON.svg OUTDIR SIZE...  (writes OUTDIR/SIZExSIZE/apps/fp8studio.png)
#include <QDir>
#include <QGuiApplication>
#include <QImage>
#include <QPainter>
#include <QSvgRenderer>

#include <cstdio>

int main(int argc, char** argv) {
  qputenv("QT_QPA_PLATFORM", "offscreen");
  QGuiApplication app(argc, argv);
  const QStringList args = app.arguments();
  if (args.size() < 4) {
    std::fprintf(stderr, "usage: render_icon ICON.svg OUTDIR SIZE...\n");
    return 2;
  }
  QSvgRenderer svg(args[1]);
  if (!svg.isValid()) {
    std::fprintf(stderr, "error: %s is not a valid SVG file\n", qPrintable(args[1]));
    return 1;
  }
  for (int i = 3; i < args.size(); ++i) {
    const int size = args[i].toInt();
    QImage image(size, size, QImage::Format_ARGB32_Premultiplied);
    image.fill(Qt::transparent);
    QPainter painter(&image);
    painter.setRenderHint(QPainter::Antialiasing);
    svg.render(&painter);
    painter.end();
    const QString dir = QStringLiteral("%1/%2x%2/apps").arg(args[2]).arg(size);
    QDir().mkpath(dir);
    if (!image.save(dir + QStringLiteral("/fp8studio.png"), "PNG")) {
      std::fprintf(stderr, "error: cannot write %s/fp8studio.png\n", qPrintable(dir));
      return 1;
    }
  }
  return 0;
}
