// A family's declared settings as values (pipeline/family_options.h).
#include "pipeline/family_options.h"

#include <algorithm>

#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "core/error.h"
#include "pipeline/engine.h"

namespace fp8s {
namespace {

std::atomic<std::vector<FamilyOption> (*)()> g_options_source{nullptr};
std::atomic<std::vector<ComponentRole> (*)()> g_roles_source{nullptr};

bool parse_number(const std::string& text, double& out) {
  if (text.empty() || text.size() > 64) return false;
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && std::isfinite(out);
}

bool parse_integer(const std::string& text, long long& out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

std::string number_text(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

// A flag's value as stored ("1", "0"), from the words the CLI, the settings and infotext use; ""
// when it is none of them.
std::string flag_value(const FamilyOption& o, const std::string& v) {
  if (v == "1" || v == "true" || v == "True" || (o.choices.size() == 2 && v == o.choices[1])) return "1";
  if (v == "0" || v == "false" || v == "False" || (o.choices.size() == 2 && v == o.choices[0])) return "0";
  return {};
}

bool is_default(const FamilyOption& o, const std::string& v) {
  double a = 0, b = 0;
  switch (o.type) {
    case FamilyOption::Type::Number:
    case FamilyOption::Type::Integer:
      return parse_number(v, a) && parse_number(o.default_value, b) && a == b;
    case FamilyOption::Type::Flag:
      return flag_value(o, v) == flag_value(o, o.default_value.empty() ? "0" : o.default_value);
    default:
      return v == o.default_value;
  }
}

}  // namespace

const FamilyOption* find_option(const std::vector<FamilyOption>& options, const std::string& name) {
  for (const auto& o : options) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

std::string option_value_error(const FamilyOption& o, const std::string& value) {
  const std::string flag = "--" + o.name;
  switch (o.type) {
    case FamilyOption::Type::Number: {
      double v = 0;
      if (!parse_number(value, v) || v < o.min || v > o.max) {
        return flag + " takes a number from " + number_text(o.min) + " to " + number_text(o.max) + " (got '" +
               value.substr(0, 40) + "')";
      }
      return {};
    }
    case FamilyOption::Type::Integer: {
      long long v = 0;
      if (!parse_integer(value, v) || v < o.min || v > o.max) {
        return flag + " takes a whole number from " + number_text(o.min) + " to " + number_text(o.max) + " (got '" +
               value.substr(0, 40) + "')";
      }
      return {};
    }
    case FamilyOption::Type::Flag:
      return flag_value(o, value).empty() ? flag + " is on or off (got '" + value.substr(0, 40) + "')" : std::string();
    case FamilyOption::Type::Choice: {
      std::string list;
      for (const auto& c : o.choices) {
        if (c == value) return {};
        list += (list.empty() ? "" : ", ") + c;
      }
      return flag + " takes one of " + list + " (got '" + value.substr(0, 40) + "')";
    }
    case FamilyOption::Type::Files: {
      std::size_t count = 0;
      for (std::size_t from = 0; !value.empty() && from <= value.size(); ++count) {
        const std::size_t to = std::min(value.find(';', from), value.size());
        if (to == from) return flag + ": an empty file name in '" + value.substr(0, 80) + "'";
        from = to + 1;
      }
      if (o.max > 0 && static_cast<double>(count) > o.max) {
        return flag + " takes at most " + number_text(o.max) + " files (got " + std::to_string(count) + ")";
      }
      const std::string why = o.check ? o.check(value) : std::string();
      return why.empty() ? why : flag + ": " + why;
    }
    case FamilyOption::Type::Text: {
      const std::string why = o.check ? o.check(value) : std::string();
      return why.empty() ? why : flag + ": " + why;
    }
  }
  return {};
}

std::optional<std::pair<int, int>> parse_int_pair(const std::string& text, char sep) {
  const auto pos = text.find(sep);
  if (pos == std::string::npos || pos == 0 || pos + 1 == text.size()) return std::nullopt;
  int a = 0, b = 0;
  const char* s = text.data();
  const auto r1 = std::from_chars(s, s + pos, a);
  const auto r2 = std::from_chars(s + pos + 1, s + text.size(), b);
  if (r1.ec != std::errc() || r1.ptr != s + pos || r2.ec != std::errc() || r2.ptr != s + text.size() || a < 0 || b < 0) {
    return std::nullopt;
  }
  return std::pair{a, b};
}

std::string option_flags(const std::vector<FamilyOption>& declared) {
  std::string out;
  for (const auto& o : declared) out += (out.empty() ? "--" : ", --") + o.name;
  return out.empty() ? "none" : out;
}

void check_options(const std::vector<FamilyOption>& declared, const OptionValues& values, const std::string& family) {
  for (const auto& [name, value] : values) {
    const FamilyOption* o = find_option(declared, name);
    if (!o) {
      throw InputError("--" + name + " is not a setting of " + family + " (its settings: " + option_flags(declared) +
                       "); leave it out");
    }
    const std::string err = option_value_error(*o, value);
    if (!err.empty()) throw InputError(err);
  }
}

std::string option_text(const std::vector<FamilyOption>& declared, const OptionValues& values, const std::string& name) {
  const FamilyOption* o = find_option(declared, name);
  if (!o) throw std::logic_error("option '" + name + "' is read but not declared");
  const auto it = values.find(name);
  if (it == values.end()) return o->type == FamilyOption::Type::Flag && o->default_value.empty() ? "0" : o->default_value;
  return o->type == FamilyOption::Type::Flag ? flag_value(*o, it->second) : it->second;
}

double option_number(const std::vector<FamilyOption>& declared, const OptionValues& values, const std::string& name) {
  double v = 0;
  if (!parse_number(option_text(declared, values, name), v)) {
    throw InputError("--" + name + " is not a number (got '" + option_text(declared, values, name).substr(0, 40) + "')");
  }
  return v;
}

bool option_flag(const std::vector<FamilyOption>& declared, const OptionValues& values, const std::string& name) {
  return option_text(declared, values, name) == "1";
}

std::string options_infotext_fields(const std::vector<FamilyOption>& declared, const OptionValues& values) {
  std::string out;
  for (const auto& o : declared) {
    if (o.infotext_key.empty()) continue;
    const auto it = values.find(o.name);
    const std::string v = it != values.end() ? it->second : o.default_value;
    if (!o.always_written && (it == values.end() || is_default(o, v))) continue;
    std::string shown = v;
    if (o.type == FamilyOption::Type::Flag) {
      const bool on = flag_value(o, v) == "1";
      shown = o.choices.size() == 2 ? o.choices[on ? 1 : 0] : on ? "True" : "False";
    }
    if (shown.find_first_of(",:\"\n") != std::string::npos) shown = "\"" + shown + "\"";
    out += ", " + o.infotext_key + ": " + shown;
  }
  return out;
}

bool read_option_field(const std::vector<FamilyOption>& known, const std::string& key, const std::string& value,
                       OptionValues& values) {
  std::string v = value;
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
  bool taken = false;
  for (const auto& o : known) {
    if (o.infotext_key != key || !option_value_error(o, v).empty()) continue;
    // a flag reads only its own words ("Shift: off"), not a number another family writes there
    const bool word = o.choices.size() == 2 ? (v == o.choices[0] || v == o.choices[1]) : (v == "True" || v == "False");
    if (o.type == FamilyOption::Type::Flag && !word) continue;
    values[o.name] = o.type == FamilyOption::Type::Flag ? flag_value(o, v) : v;
    taken = true;
  }
  return taken;
}

std::vector<FamilyOption> declared_options() {
  const auto source = g_options_source.load();
  return source ? source() : std::vector<FamilyOption>{};
}

void set_declared_options_source(std::vector<FamilyOption> (*source)()) { g_options_source.store(source); }

std::vector<ComponentRole> declared_roles() {
  const auto source = g_roles_source.load();
  return source ? source() : std::vector<ComponentRole>{};
}

void set_declared_roles_source(std::vector<ComponentRole> (*source)()) { g_roles_source.store(source); }

std::string component_file(const LoadOptions& o, const std::string& role) {
  const auto it = o.components.find(role);
  return it == o.components.end() ? std::string() : it->second;
}

}  // namespace fp8s
