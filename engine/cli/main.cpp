// fp8studio-cli: the command-line front end over the engine. Errors print as one line
// `error: ...`; exit codes: 0 ok, 2 bad input, 1 failure while running, 130 cancelled.
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <new>

#include "pipeline/family.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/openmp_preinit.h"
#include "core/threads.h"
#include "memory/tracking_allocator.h"
#include "backend/backend.h"
#include "core/version.h"
#include "demo/demo_model.h"

namespace fp8s::cli {

std::string model_or_demo(const std::string& model_flag) {
  return model_flag.empty() ? demo::find_demo_model() : model_flag;
}

StorageSpec auto_storage_for(const std::string& checkpoint) {
  const SafetensorsFile file(checkpoint);
  const FamilyEntry* family = find_family(file);
  if (family && family->tools.auto_storage) return family->tools.auto_storage(file);
  return {WeightType::FP16, Fp8Scale::None, false};
}

LoadOptions load_options(const ModelFlags& flags) {
  LoadOptions load;
  load.checkpoint = model_or_demo(flags.model);
  load.vocab = flags.vocab;
  load.lora_dir = flags.lora_dir;
  load.device = flags.device;
  load.embeddings_dir = flags.embeddings_dir;
  load.options = flags.load_settings;
  load.components = flags.role_files;
  for (const auto& c : flags.components) {
    const auto eq = c.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == c.size()) {
      throw InputError("--component " + c + ": write ROLE=FILE, e.g. --component t5xxl=t5xxl_fp16.safetensors");
    }
    load.components[c.substr(0, eq)] = c.substr(eq + 1);
  }
  if (load.embeddings_dir.empty()) {  // the user data folder's, as the GUI uses
    const char* xdg = std::getenv("XDG_DATA_HOME");
    const char* home = std::getenv("HOME");
    if (xdg && *xdg) load.embeddings_dir = std::string(xdg) + "/fp8studio/embeddings";
    else if (home && *home) load.embeddings_dir = std::string(home) + "/.local/share/fp8studio/embeddings";
  }
  return load;
}

}  // namespace fp8s::cli

int main(int argc, char** argv) {
  // A file-size limit (ulimit -f) then fails writes with EFBIG, reported like a full disk,
  // instead of killing the program mid-file.
  std::signal(SIGXFSZ, SIG_IGN);
  fp8s::init_threads();
  fp8s::cli::threads_hook() = [](int threads) {
    fp8s::log().info("threads: {}", fp8s::describe(fp8s::init_threads(threads)));
  };
  fp8s::install_tracking_allocator();
  CLI::App app{"FP8 Studio command line: Stable Diffusion with FP8 weight storage, measured.",
               "fp8studio-cli"};
  app.set_version_flag("--version", std::string("fp8studio-cli ") + fp8s::kVersion + " (" + fp8s::backend::build_summary() + ")");
  app.require_subcommand(1);
  app.fallthrough(false);
  // A flag given twice takes its last value, as in most CLIs (lists such as --lora collect all).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  using namespace fp8s::cli;
  for (auto* add : {register_make_synthetic, register_make_synthetic_lora, register_inspect, register_convert,
                    register_probe, register_bench, register_tokenize, register_generate, register_compare,
                    register_train_demo, register_demo_eval, register_soak, register_device_test}) {
    add(app);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: %s (see %s --help)\n", e.what(), argv[0]);
    return 2;
  } catch (const std::exception& e) {
    // one line and the exit code: cancelled 130, bad input 2, anything else while running 1
    const bool cancelled = dynamic_cast<const fp8s::Cancelled*>(&e) != nullptr;
    const bool input = dynamic_cast<const fp8s::InputError*>(&e) != nullptr;
    const bool memory = dynamic_cast<const std::bad_alloc*>(&e) != nullptr;
    std::fprintf(stderr, "error: %s\n", cancelled ? "cancelled" : memory ? "out of memory" : e.what());
    return cancelled ? 130 : input ? 2 : 1;
  }
  return 0;
}
