// tokenize: CLIP BPE ids of a prompt, raw or as A1111's weighted 77-token windows.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "text/clip_tokenizer.h"
#include "text/prompt_parser.h"

namespace fp8s::cli {

void register_tokenize(CLI::App& app) {
  struct Opts {
    CommonOptions common;
    std::string prompt, vocab;
    bool raw = false;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("tokenize", "CLIP token ids of a prompt (A1111 windows and weights)");
  add_common_options(*sub, o->common, true);
  sub->add_option("prompt", o->prompt, "the prompt")->required();
  sub->add_flag("--raw", o->raw, "BPE ids only: no emphasis parsing, BOS/EOS or padding");
  sub->add_option("--vocab", o->vocab, "CLIP vocabulary (.txt.gz, vocab.json, or a folder)");
  sub->callback([o] {
    const auto tokenizer = ClipTokenizer::find(o->vocab, "");
    nlohmann::json j{{"prompt", o->prompt}};
    if (o->raw) {
      j["ids"] = tokenizer.encode(o->prompt);
    } else {
      const auto extra = parse_extra_networks(o->prompt);
      const auto chunks = tokenize_prompt(tokenizer, extra.prompt_without_tags);
      j["chunks"] = nlohmann::json::array();
      j["multipliers"] = nlohmann::json::array();
      for (std::size_t c = 0; c < chunks.ids.size(); ++c) {
        j["chunks"].push_back(chunks.ids[c]);
        j["multipliers"].push_back(chunks.multipliers[c]);
      }
      j["token_count"] = chunks.token_count;
      j["loras"] = nlohmann::json::array();
      for (const auto& l : extra.loras) {
        j["loras"].push_back({{"name", l.name}, {"te", l.te_multiplier}, {"unet", l.unet_multiplier}});
      }
    }
    if (o->common.json) {
      std::cout << j.dump() << "\n";
    } else if (o->raw) {
      std::cout << j["ids"].dump() << "\n";
    } else {
      for (std::size_t c = 0; c < j["chunks"].size(); ++c) {
        std::cout << "chunk " << c << ": " << j["chunks"][c].dump() << "\n";
      }
      std::cout << "tokens: " << j["token_count"] << "/" << 75 * j["chunks"].size() << "\n";
    }
  });
}

}  // namespace fp8s::cli
