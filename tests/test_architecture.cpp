// Checkpoint layouts, parameter counts, detection and tensor roles, against the released files'
// key lists in ../shared/reference/keys and the tiny reference checkpoints (issue 2).
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/architecture.h"
#include "models/inspect.h"
#include "models/nn.h"
#include "models/text_encoder.h"
#include "models/unet.h"
#include "models/vae.h"
#include "support.h"

using namespace fp8s;

namespace {

struct KeyList {
  std::map<std::string, std::pair<std::string, std::vector<int64_t>>> tensors;  // name -> dtype, shape
  nlohmann::json components;
};

KeyList load_keys(const char* file) {
  const auto text = test::read_bytes(test::reference_path(QString("keys/") + file));
  const auto j = nlohmann::json::parse(text);
  KeyList k;
  for (const auto& t : j.at("tensors")) {
    k.tensors[t[0].get<std::string>()] = {t[1].get<std::string>(), t[2].get<std::vector<int64_t>>()};
  }
  k.components = j.at("components");
  return k;
}

uint64_t numel(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (auto d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

// Parameters per component label (buffers excluded), from a layout.
std::map<std::string, uint64_t> params_by_component(const std::vector<LayoutEntry>& layout) {
  std::map<std::string, uint64_t> out;
  for (const auto& e : layout) {
    if (e.role != TensorRole::Buffer) out[component_label(e.name)] += numel(e.shape);
  }
  return out;
}

void compare_layout_with_keys(const std::vector<LayoutEntry>& layout, const KeyList& keys,
                              bool compare_dtypes) {
  QCOMPARE(layout.size(), keys.tensors.size());
  for (const auto& e : layout) {
    auto it = keys.tensors.find(e.name);
    QVERIFY2(it != keys.tensors.end(), qPrintable(QString::fromStdString("extra key " + e.name)));
    QVERIFY2(it->second.second == e.shape, qPrintable(QString::fromStdString("shape of " + e.name)));
    if (compare_dtypes) {
      QVERIFY2(it->second.first == dtype_name(e.dtype),
               qPrintable(QString::fromStdString("dtype of " + e.name)));
    }
  }
}

ShapeMap shapes_of(const KeyList& k) {
  ShapeMap m;
  for (const auto& [name, v] : k.tensors) m[name] = v.second;
  return m;
}

// Every parameter and (defined) buffer of a module, keyed as the loader reads it: prefix + name.
void add_module_keys(torch::nn::Module& module, const std::string& prefix, ShapeMap& out) {
  for (const auto& item : module.named_parameters(true)) out[prefix + item.key()] = item.value().sizes().vec();
  for (const auto& item : module.named_buffers(true)) {
    if (item.value().defined()) out[prefix + item.key()] = item.value().sizes().vec();
  }
}

// What the modules of unet.cpp / vae.cpp / text_encoder.cpp hold for `config`; `ignorable` gets the
// layout keys the text encoders skip on purpose (position ids, logit_scale).
ShapeMap modules_of(const ModelConfig& config, std::set<std::string>& ignorable) {
  const BuildOn on(at::Device(at::kCPU));  // one-element placeholders: a full-size build costs nothing
  ShapeMap out;
  UNetImpl unet(config.unet);
  add_module_keys(unet, kUNetPrefix, out);
  VaeImpl vae(config.vae);
  add_module_keys(vae, kVaePrefix, out);
  for (const auto& tc : config.text_encoders) {
    TextEncoderImpl te(tc);
    add_module_keys(te, tc.prefix, out);
    for (const auto& k : te.ignorable_keys()) ignorable.insert(tc.prefix + k);
  }
  return out;
}

}  // namespace

class TestArchitecture : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  // The key list (checkpoint_layout) and the modules the loader fills are written separately; here
  // they must agree name for name and shape for shape, for every preset (full size included).
  void modulesHoldExactlyTheLayout() {
    for (const char* name : {"sd15", "sdxl", "tiny-sd1", "tiny-sdxl"}) {
      const auto config = preset_by_name(name);
      QVERIFY(config);
      std::set<std::string> ignorable;
      const ShapeMap modules = modules_of(*config, ignorable);
      ShapeMap layout;
      for (const auto& e : checkpoint_layout(*config, Dtype::F16)) {
        if (e.component != Component::Other && !ignorable.count(e.name)) layout[e.name] = e.shape;
      }
      QVERIFY2(!modules.empty(), name);
      for (const auto& [key, shape] : layout) {
        auto it = modules.find(key);
        QVERIFY2(it != modules.end(), qPrintable(QString("%1: the modules lack %2").arg(name, QString::fromStdString(key))));
        QVERIFY2(it->second == shape, qPrintable(QString("%1: shape of %2").arg(name, QString::fromStdString(key))));
      }
      for (const auto& [key, shape] : modules) {
        QVERIFY2(layout.count(key), qPrintable(QString("%1: the layout lacks %2").arg(name, QString::fromStdString(key))));
      }
      QCOMPARE(modules.size(), layout.size());
    }
  }

  // The figures issue 2 states for the released files, independent of any reference data.
  void sd15ParameterCounts() {
    const auto layout = checkpoint_layout(preset_sd15(), Dtype::F32);
    QCOMPARE(layout.size(), std::size_t(1145));
    auto p = params_by_component(layout);
    QCOMPARE(p["unet"], uint64_t(859'520'964));
    QCOMPARE(p["clip_l"], uint64_t(123'060'480));
    QCOMPARE(p["vae"], uint64_t(83'653'863));
  }

  void sdxlParameterCounts() {
    const auto layout = checkpoint_layout(preset_sdxl_base(), Dtype::F16);
    QCOMPARE(layout.size(), std::size_t(2515));
    auto p = params_by_component(layout);
    QCOMPARE(p["unet"], uint64_t(2'567'463'684));
    QCOMPARE(p["clip_l"], uint64_t(123'060'480));
    QCOMPARE(p["open_clip_g"], uint64_t(694'659'841));  // with the 0-d logit_scale
    QCOMPARE(p["vae"], uint64_t(83'653'863));
  }

  void sd15LayoutIsTheReleasedFiles() {
    FP8S_REQUIRE_REFERENCE();
    compare_layout_with_keys(checkpoint_layout(preset_sd15(), Dtype::F32), load_keys("sd15.json"), true);
  }

  void sdxlLayoutIsTheReleasedFiles() {
    FP8S_REQUIRE_REFERENCE();
    const auto keys = load_keys("sdxl_base.json");
    compare_layout_with_keys(checkpoint_layout(preset_sdxl_base(), Dtype::F16), keys, true);
    const auto p = params_by_component(checkpoint_layout(preset_sdxl_base(), Dtype::F16));
    QCOMPARE(p.at("unet"), keys.components.at("unet").at("params").get<uint64_t>());
    QCOMPARE(p.at("open_clip_g"),
             keys.components.at("text_open_clip_bigg").at("params").get<uint64_t>());
  }

  void tinyLayoutsAreTheReferenceCheckpoints() {
    FP8S_REQUIRE_REFERENCE();
    for (auto [file, preset] : {std::pair{"sd1/tiny-sd1.safetensors", preset_tiny_sd1()},
                                std::pair{"sdxl/tiny-sdxl.safetensors", preset_tiny_sdxl()}}) {
      SafetensorsFile f(test::reference_path(file));
      KeyList k;
      for (const auto& t : f.tensors()) k.tensors[t.name] = {dtype_name(t.dtype), t.shape};
      compare_layout_with_keys(checkpoint_layout(preset, Dtype::F16), k, false);
      // the file's own ldm.config describes the same layout
      compare_layout_with_keys(checkpoint_layout(config_for(f), Dtype::F16), k, false);
    }
  }

  void detectsTheFourReleasedLayouts() {
    FP8S_REQUIRE_REFERENCE();
    QCOMPARE(detect_architecture(shapes_of(load_keys("sd15.json"))).arch, Arch::SD1);
    QCOMPARE(detect_architecture(shapes_of(load_keys("sd21_768v.json"))).arch, Arch::SD2);
    QCOMPARE(detect_architecture(shapes_of(load_keys("sdxl_base.json"))).arch, Arch::SDXL_BASE);
    QCOMPARE(detect_architecture(shapes_of(load_keys("sdxl_refiner.json"))).arch, Arch::SDXL_REFINER);
    auto inpaint = shapes_of(load_keys("sd15.json"));
    inpaint["model.diffusion_model.input_blocks.0.0.weight"] = {320, 9, 3, 3};
    const auto d = detect_architecture(inpaint);
    QCOMPARE(d.arch, Arch::SD1);
    QCOMPARE(d.variant, std::string("inpainting"));
    QCOMPARE(detect_architecture(ShapeMap{{"foo", {1}}}).arch, Arch::UNKNOWN);
  }

  void detectsGeneratedLayouts() {
    auto shapes = [](const ModelConfig& c) {
      ShapeMap m;
      for (const auto& e : checkpoint_layout(c, Dtype::F16)) m[e.name] = e.shape;
      return m;
    };
    QCOMPARE(detect_architecture(shapes(preset_sd15())).arch, Arch::SD1);
    QCOMPARE(detect_architecture(shapes(preset_sdxl_base())).arch, Arch::SDXL_BASE);
    QCOMPARE(detect_architecture(shapes(preset_tiny_sdxl())).arch, Arch::SDXL_BASE);
  }

  void rolesFromNamesAgreeWithLayouts() {
    for (const auto& config : {preset_sd15(), preset_sdxl_base(), preset_tiny_sd1()}) {
      for (const auto& e : checkpoint_layout(config, Dtype::F16)) {
        QVERIFY2(role_of(e.name, e.shape) == e.role, qPrintable(QString::fromStdString(e.name)));
        QVERIFY2(component_of(e.name) == e.component, qPrintable(QString::fromStdString(e.name)));
      }
    }
  }

  void quantisableWeights() {
    QVERIFY(is_quantisable("model.diffusion_model.input_blocks.1.1.proj_in.weight", {320, 320, 1, 1}, false));
    QVERIFY(is_quantisable("conditioner.embedders.1.model.transformer.resblocks.0.attn.in_proj_weight", {3840, 1280}, false));
    QVERIFY(!is_quantisable("model.diffusion_model.time_embed.0.weight", {1280, 320}, false));
    QVERIFY(!is_quantisable("model.diffusion_model.label_emb.0.0.weight", {1280, 2816}, false));
    QVERIFY(!is_quantisable("cond_stage_model.transformer.text_model.embeddings.token_embedding.weight", {49408, 768}, false));
    QVERIFY(!is_quantisable("model.diffusion_model.out.0.weight", {320}, false));
    QVERIFY(!is_quantisable("model.diffusion_model.out.2.bias", {4}, false));
    QVERIFY(!is_quantisable("first_stage_model.decoder.conv_in.weight", {512, 4, 3, 3}, false));
    QVERIFY(is_quantisable("first_stage_model.decoder.conv_in.weight", {512, 4, 3, 3}, true));
    QVERIFY(!is_quantisable("conditioner.embedders.1.model.text_projection", {1280, 1280}, false));
    QCOMPARE(scale_key_for("a.b.weight"), std::string("a.b.scale_weight"));
    QCOMPARE(scale_key_for("m.attn.in_proj_weight"), std::string("m.attn.in_proj_scale_weight"));
  }

  void ldmConfigRoundTripsAndRejectsGarbage() {
    const auto tiny = preset_tiny_sdxl();
    const auto back = parse_ldm_config(to_ldm_config_json(tiny), "x");
    QCOMPARE(checkpoint_layout(back, Dtype::F16).size(), checkpoint_layout(tiny, Dtype::F16).size());
    QVERIFY_EXCEPTION_THROWN(parse_ldm_config("{not json", "x"), InputError);
    QVERIFY_EXCEPTION_THROWN(parse_ldm_config(R"({"model_type":"sd1"})", "x"), InputError);
    QVERIFY_EXCEPTION_THROWN(parse_ldm_config(R"({"model_type":"flux","unet":{}})", "x"), InputError);
  }
};

QTEST_GUILESS_MAIN(TestArchitecture)
#include "test_architecture.moc"
