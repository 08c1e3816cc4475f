// A family's declared settings (FamilyOption, pipeline/family_traits.h) as values: checked,
// read with their defaults, written into and read back from infotext. LibTorch-free: the CLI, the
// GUI, the request checks and the infotext parser (a fuzz target) share it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/family_traits.h"

namespace fp8s {

struct LoadOptions;
// The file a load names for a component role (LoadOptions::components: its flag or --component
// ROLE=FILE); "" when it names none (the family then finds it).
std::string component_file(const LoadOptions& options, const std::string& role);

// Option values by FamilyOption::name, as text ("3.5", "1" for a set flag); absent: the default.
using OptionValues = std::map<std::string, std::string>;

const FamilyOption* find_option(const std::vector<FamilyOption>& options, const std::string& name);
// "" when `value` suits `o`, else a one-line error that names --NAME and what it takes.
std::string option_value_error(const FamilyOption& o, const std::string& value);
// Refuses (InputError) a value for an option `family` does not declare, by name, and a value that
// does not suit its declaration.
void check_options(const std::vector<FamilyOption>& declared, const OptionValues& values, const std::string& family);
// The value of the declared option `name`: the given one, else its default. A name the list does
// not declare is the family's own bug (std::logic_error).
std::string option_text(const std::vector<FamilyOption>& declared, const OptionValues& values, const std::string& name);
double option_number(const std::vector<FamilyOption>& declared, const OptionValues& values, const std::string& name);
bool option_flag(const std::vector<FamilyOption>& declared, const OptionValues& values, const std::string& name);
// ", Key: value" for each declared option with an infotext key that is given and not its default
// (always_written ones at their default too).
std::string options_infotext_fields(const std::vector<FamilyOption>& declared, const OptionValues& values);
// An infotext field `key: value` read into `values`: every option of `known` with that key whose
// declaration the value suits takes it. False when none did.
bool read_option_field(const std::vector<FamilyOption>& known, const std::string& key, const std::string& value,
                       OptionValues& values);
// Two whole numbers from 0 separated by `sep` ("1024x768", "0,0"); nullopt when the text is not that.
std::optional<std::pair<int, int>> parse_int_pair(const std::string& text, char sep);
// "--a, --b" of `declared` (what a family takes; "none" for an empty list).
std::string option_flags(const std::vector<FamilyOption>& declared);

// The options every registered family declares, each name once (the family registry sets the
// source before main; without it, as in the fuzz targets, none).
std::vector<FamilyOption> declared_options();
void set_declared_options_source(std::vector<FamilyOption> (*source)());
// The component roles every registered family declares, each role once (the CLI's shorthands),
// from the same registry.
std::vector<ComponentRole> declared_roles();
void set_declared_roles_source(std::vector<ComponentRole> (*source)());

}  // namespace fp8s
