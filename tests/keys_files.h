// The released files' key lists (../shared/reference/keys) and sparse safetensors files of exactly
// those headers: full-size layouts loaded on the meta device without real weights.
#pragma once

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QString>

#include <fcntl.h>
#include <unistd.h>

#include <functional>
#include <stdexcept>
#include <string>

#include <torch/nn/module.h>

#include "models/nn.h"
#include "pipeline/family.h"
#include "support.h"

namespace fp8s::test {

inline QJsonObject load_keys(const char* name) {
  const auto text = read_bytes(reference_path(QString("keys/") + name));
  return QJsonDocument::fromJson(QByteArray::fromStdString(text)).object();
}

// make-synthetic's layout of `arch` (written by the family `family_id`) against the key list
// `keys_file`: the same names, shapes and types. Check QTest::currentTestFailed() after it.
inline void compare_synthetic_layout(const char* arch, const char* keys_file, const char* family_id) {
  const auto keys = load_keys(keys_file);
  const auto* family = find_synthetic_family(arch);
  QVERIFY2(family && family->id == family_id, arch);
  std::map<std::string, std::string> metadata;
  const auto layout = family->tools.synthetic.layout(arch, SyntheticLayoutOptions{}, metadata);
  QCOMPARE(int(layout.size()), int(keys.size()));
  for (const auto& e : layout) {
    const auto want = keys[QString::fromStdString(e.name)].toObject();
    QVERIFY2(!want.isEmpty(), e.name.c_str());
    QCOMPARE(QString(dtype_name(e.dtype)), want["dtype"].toString());
    const auto shape = want["shape"].toArray();
    QCOMPARE(int(e.shape.size()), int(shape.size()));
    for (int i = 0; i < shape.size(); ++i) QCOMPARE(e.shape[std::size_t(i)], shape[i].toInteger());
  }
}

// A key list in the "tensors": [[key, dtype, shape], ...] form (keys/controlnet-*.json) as load_keys'
// {key: {dtype, shape}}.
inline QJsonObject load_key_list(const char* name) {
  QJsonObject out;
  for (const auto& row : load_keys(name)["tensors"].toArray()) {
    const auto r = row.toArray();
    out[r[0].toString()] = QJsonObject{{"dtype", r[1]}, {"shape", r[2]}};
  }
  return out;
}

// The parameters of a key list's tensors (those `take` accepts; all without it).
inline uint64_t params_of(const QJsonObject& keys, const std::function<bool(const QString&)>& take = {}) {
  uint64_t n = 0;
  for (auto it = keys.begin(); it != keys.end(); ++it) {
    if (take && !take(it.key())) continue;
    uint64_t p = 1;
    for (const auto& d : it.value().toObject()["shape"].toArray()) p *= static_cast<uint64_t>(d.toInteger());
    n += p;
  }
  return n;
}
// The parameters a module holds (its placeholders on the meta device included).
inline uint64_t module_params(torch::nn::Module& m) {
  uint64_t n = 0;
  for (const auto& p : m.parameters(true)) n += static_cast<uint64_t>(p.numel());
  return n;
}

// `Net` built from `config` on the meta device with `file`'s tensors under `prefix` loaded into it,
// every Linear quantisable (FP8 E4M3 per tensor): a full-size layout checked without its weights.
// InputError names a missing, unexpected or misshapen key.
template <class Net, class Config>
Net meta_loaded(const Config& config, const SafetensorsFile& file, const std::string& prefix = "",
                const std::vector<std::string>& ignorable = {}) {
  const BuildOn on(at::Device(at::kMeta));
  Net m(config);
  load_module_weights(*m, file, prefix, {WeightType::FP8_E4M3, Fp8Scale::Tensor, false}, true, ignorable, {},
                      at::Device(at::kMeta), true);
  return m;
}
// A decoder language model's shape as the key tables give it:
// {hidden, layers, heads, kv heads, head width, MLP width}.
template <class LmConfig>
std::vector<int64_t> lm_shape(const LmConfig& c) {
  return {c.hidden, c.layers, c.heads, c.kv_heads, c.head_dim, c.intermediate};
}

inline int64_t dtype_bytes(const QString& d) {
  if (d == "F64" || d == "I64") return 8;
  if (d == "F32" || d == "I32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16") return 2;
  return 1;
}

// A safetensors file with exactly `keys`' tensors (the released header) whose data is a hole: it
// takes no disk space and reads as zeros. `drop` leaves one key out.
inline std::string sparse_file(const QString& dir, const char* name, const QJsonObject& keys, const QString& drop = {}) {
  QJsonObject header;
  int64_t offset = 0;
  for (auto it = keys.begin(); it != keys.end(); ++it) {
    if (it.key() == drop) continue;
    const auto v = it.value().toObject();
    int64_t n = dtype_bytes(v["dtype"].toString());
    for (const auto& d : v["shape"].toArray()) n *= d.toInteger();
    header[it.key()] = QJsonObject{{"dtype", v["dtype"]}, {"shape", v["shape"]}, {"data_offsets", QJsonArray{double(offset), double(offset + n)}}};
    offset += n;
  }
  QByteArray json = QJsonDocument(header).toJson(QJsonDocument::Compact);
  while (json.size() % 8) json.append(' ');
  const std::string path = (dir + "/" + name).toStdString();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const uint64_t n = static_cast<uint64_t>(json.size());
  bool ok = fd >= 0 && ::write(fd, &n, 8) == 8 && ::write(fd, json.constData(), json.size()) == json.size() &&
            ::ftruncate(fd, static_cast<off_t>(8 + n + static_cast<uint64_t>(offset))) == 0;
  if (fd >= 0) ::close(fd);
  if (!ok) throw std::runtime_error("cannot write " + path);
  return path;
}


}  // namespace fp8s::test
