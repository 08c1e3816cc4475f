// Tests' diffusers model folders written from the tiny reference files: the released names as
// diffusers spells them (the autoencoder's), tensors written into shards with an index, and a
// config.json from a file's config metadata.
#pragma once

#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
#include <QString>
#include <QtTest>

#include <string>
#include <vector>

#include "io/safetensors.h"

namespace fp8s::test {

// BFL's / CompVis' autoencoder name `n` as diffusers' AutoencoderKL spells it (`levels` resolutions).
inline std::string diffusers_vae_name(const std::string& n, int levels) {
  QString s = QString::fromStdString(n);
  QRegularExpressionMatch m;
  if ((m = QRegularExpression("^encoder\\.down\\.(\\d+)\\.block\\.(\\d+)\\.(.*)$").match(s)).hasMatch()) {
    s = "encoder.down_blocks." + m.captured(1) + ".resnets." + m.captured(2) + "." + m.captured(3);
  } else if ((m = QRegularExpression("^encoder\\.down\\.(\\d+)\\.downsample\\.(.*)$").match(s)).hasMatch()) {
    s = "encoder.down_blocks." + m.captured(1) + ".downsamplers.0." + m.captured(2);
  } else if ((m = QRegularExpression("^decoder\\.up\\.(\\d+)\\.block\\.(\\d+)\\.(.*)$").match(s)).hasMatch()) {
    s = "decoder.up_blocks." + QString::number(levels - 1 - m.captured(1).toInt()) + ".resnets." + m.captured(2) + "." + m.captured(3);
  } else if ((m = QRegularExpression("^decoder\\.up\\.(\\d+)\\.upsample\\.(.*)$").match(s)).hasMatch()) {
    s = "decoder.up_blocks." + QString::number(levels - 1 - m.captured(1).toInt()) + ".upsamplers.0." + m.captured(2);
  }
  s.replace(".mid.block_1.", ".mid_block.resnets.0.").replace(".mid.block_2.", ".mid_block.resnets.1.");
  s.replace(".mid.attn_1.norm.", ".mid_block.attentions.0.group_norm.").replace(".mid.attn_1.q.", ".mid_block.attentions.0.to_q.");
  s.replace(".mid.attn_1.k.", ".mid_block.attentions.0.to_k.").replace(".mid.attn_1.v.", ".mid_block.attentions.0.to_v.");
  s.replace(".mid.attn_1.proj_out.", ".mid_block.attentions.0.to_out.0.").replace(".nin_shortcut.", ".conv_shortcut.");
  s.replace("encoder.norm_out.", "encoder.conv_norm_out.").replace("decoder.norm_out.", "decoder.conv_norm_out.");
  return s.toStdString();
}
// Writes `tensors` (name -> source record and its shape here) from `src` into `shards` files of
// `dir` with an index named `index` (none when empty), each tensor's rows [row0, row0 + rows).
struct Out {
  std::string name;
  const TensorRecord* rec;
  std::vector<int64_t> shape;
  int64_t row0 = 0;
};
inline void write_shards(const SafetensorsFile& src, const std::vector<Out>& tensors, const QString& dir,
                         const QString& stem, int shards, const QString& index) {
  QVERIFY(QDir().mkpath(dir));
  QJsonObject weight_map;
  for (int k = 0; k < shards; ++k) {
    const QString name = shards == 1 ? stem + ".safetensors"
                                     : QString("%1-%2-of-%3.safetensors").arg(stem).arg(k + 1, 5, 10, QChar('0')).arg(shards, 5, 10, QChar('0'));
    std::vector<TensorSpec> specs;
    std::vector<const Out*> mine;
    for (std::size_t i = k; i < tensors.size(); i += shards) {
      specs.push_back({tensors[i].name, tensors[i].rec->dtype, tensors[i].shape});
      mine.push_back(&tensors[i]);
      weight_map[QString::fromStdString(tensors[i].name)] = name;
    }
    SafetensorsWriter w((dir + "/" + name).toStdString(), specs, {{"format", "pt"}});
    for (const Out* o : mine) {
      std::vector<uint8_t> bytes(o->rec->nbytes());
      src.read(*o->rec, bytes.data());
      const uint64_t row_bytes = o->rec->shape.empty() ? 0 : o->rec->nbytes() / static_cast<uint64_t>(o->rec->shape.at(0));  // 0-dim: row0 is 0
      uint64_t want = 1;
      for (auto d : o->shape) want *= static_cast<uint64_t>(d);
      w.append(bytes.data() + o->row0 * row_bytes, want * dtype_size(o->rec->dtype));
    }
    w.commit();
  }
  if (!index.isEmpty()) {
    QFile f(dir + "/" + index);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(QJsonDocument(QJsonObject{{"metadata", QJsonObject{}}, {"weight_map", weight_map}}).toJson());
  }
}
inline void write_config(const SafetensorsFile& src, const char* key, const QString& path, QJsonObject extra = {}) {
  QJsonObject config = QJsonDocument::fromJson(QByteArray::fromStdString(src.metadata().at(key))).object();
  for (auto it = extra.begin(); it != extra.end(); ++it) config[it.key()] = it.value();
  QFile f(path);
  QVERIFY(f.open(QIODevice::WriteOnly));
  f.write(QJsonDocument(config).toJson());
}

}  // namespace fp8s::test
