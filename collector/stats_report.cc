#include "collector/stats_report.h"

#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <utility>

namespace smprof::stats {
namespace {

using nlohmann::json;

// ---- numbers and names for a terminal ----

std::string Printf(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string Printf(const char* format, ...) {
  char buf[128];
  va_list args;
  va_start(args, format);
  vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  return buf;
}

// The unit keeps the number below 1000 as printed: 999 ns, 1.0 us, 12.3 ms.
std::string FormatNs(double ns) {
  if (ns < 999.5) return Printf("%.0f ns", ns);
  if (ns < 999.95e3) return Printf("%.1f us", ns / 1e3);
  if (ns < 999.95e6) return Printf("%.1f ms", ns / 1e6);
  return Printf("%.2f s", ns / 1e9);
}

std::string FormatCount(uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// "1 launch", "3 launches".
std::string Counted(uint64_t n, const char* one, const char* many) {
  return FormatCount(n) + " " + (n == 1 ? one : many);
}

std::string FormatCycles(double c) {
  if (c < 999999.5) return Printf("%.0f", c);
  if (c < 999.995e6) return Printf("%.2fM", c / 1e6);
  return Printf("%.2fG", c / 1e9);
}

std::string FormatShare(const std::optional<double>& share) { return share ? Printf("%.1f %%", *share * 100) : "-"; }

std::string FormatRatio(const Imbalance& imbalance) {
  return imbalance.units > 0 ? Printf("%.2f", imbalance.Ratio()) : "-";
}

std::string SmLabel(int32_t gpu, uint32_t sm) { return gpu >= 0 ? Printf("GPU%d SM%u", gpu, sm) : Printf("SM%u", sm); }

std::string WarpLabel(const WarpLocation& w) {
  return Printf("pid %u #%" PRIu64 " SM%u b(%u,%u,%u) w%u", w.pid, w.launch_id, w.sm, w.block[0], w.block[1],
                w.block[2], w.warp);
}

// Names are the program's bytes: control characters would drive the
// terminal, so they print as '?'; a name too long is cut (at a UTF-8
// character boundary) and ends in "...".
std::string Fit(const std::string& name, size_t width) {
  std::string out;
  for (unsigned char c : name) out += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
  if (out.size() <= width) return out;
  size_t cut = width > 3 ? width - 3 : 0;
  while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
  return out.substr(0, cut) + "...";
}

// Columns: positive width = right-aligned, negative = left-aligned. Cells
// are one space apart, two before a left-aligned one (but the first).
std::string Row(std::initializer_list<std::pair<int, std::string>> cells) {
  std::string line = " ";
  for (const auto& [width, text] : cells) {
    line += width < 0 && line.size() > 1 ? "  " : " ";
    const size_t w = static_cast<size_t>(width < 0 ? -width : width);
    const std::string pad(text.size() < w ? w - text.size() : 0, ' ');
    line += width < 0 ? text + pad : pad + text;
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return line + '\n';
}

std::string Percentile(uint64_t ns, bool exact) { return (exact ? "" : "~") + FormatNs(static_cast<double>(ns)); }

// A region's name in `width` columns, phases marked.
std::string RegionLabel(const RegionStats& r, size_t width) {
  return r.phase ? Fit(r.name, width - 8) + " (phase)" : Fit(r.name, width);
}

const char* SourceWord(ValueStats::Source source);

void RenderAsyncAndValues(const KernelStats& k, std::string* out) {
  if (!k.async.empty()) {
    *out += Row({{-17, "async span"}, {9, "count"}, {9, "total"}, {9, "mean"}, {9, "min"}, {9, "p95"}, {9, "max"}});
    std::string incomplete;
    for (const AsyncStats& a : k.async) {
      const bool any = a.count > 0;
      *out += Row({{-17, Fit(a.name, 17)},
                   {9, FormatCount(a.count)},
                   {9, FormatNs(static_cast<double>(a.ns.total))},
                   {9, any ? FormatNs(a.ns.mean) : "-"},
                   {9, any ? FormatNs(static_cast<double>(a.min_ns)) : "-"},
                   {9, any ? Percentile(a.ns.p95, a.exact) : "-"},
                   {9, any ? FormatNs(static_cast<double>(a.ns.max)) : "-"}});
      if (a.unterminated > 0 || a.unmatched_ends > 0) {
        incomplete += (incomplete.empty() ? "" : ", ") + Fit(a.name, 40) + " " + FormatCount(a.unterminated) + " / " +
                      FormatCount(a.unmatched_ends);
      }
    }
    if (!incomplete.empty()) {
      *out += "  async spans unterminated / unmatched ENDs (not in the durations): " + incomplete + '\n';
    }
  }
  if (!k.values.empty()) {
    *out += Row({{-17, "value"}, {-8, "of"}, {9, "count"}, {12, "min"}, {12, "max"}, {14, "mean"}, {14, "sum"}});
    for (const ValueStats& v : k.values) {
      *out += Row({{-17, Fit(v.name, 17)},
                   {-8, SourceWord(v.source)},
                   {9, FormatCount(v.count)},
                   {12, std::to_string(v.min)},
                   {12, std::to_string(v.max)},
                   {14, Printf("%.6g", v.mean)},
                   {14, std::to_string(v.sum)}});
    }
  }
}

void RenderKernel(const KernelStats& k, const TextOptions& options, std::string* out) {
  *out += "\nkernel " + Fit(k.kernel, 200) + ": " + Counted(k.launches, "launch", "launches") + ", " +
          Counted(k.warps, "warp", "warps") + " recorded";
  if (k.launches > 0) *out += ", mean span " + FormatNs(static_cast<double>(k.span_ns) / k.launches);
  *out += '\n';
  const size_t shown = std::min(k.regions.size(), options.top_regions);
  if (shown > 0) {
    *out += Row({{-17, "region"},
                 {9, "count"},
                 {9, "total"},
                 {9, "mean"},
                 {9, "p50"},
                 {9, "p95"},
                 {9, "max"},
                 {8, "share"},
                 {9, "mean cyc"}});
  }
  std::string unterminated;
  for (size_t i = 0; i < shown; ++i) {
    const RegionStats& r = k.regions[i];
    *out += Row({{-17, RegionLabel(r, 17)},
                 {9, FormatCount(r.count)},
                 {9, FormatNs(static_cast<double>(r.ns.total))},
                 {9, FormatNs(r.ns.mean)},
                 {9, Percentile(r.ns.p50, r.exact)},
                 {9, Percentile(r.ns.p95, r.exact)},
                 {9, FormatNs(static_cast<double>(r.ns.max))},
                 {8, FormatShare(r.share)},
                 {9, FormatCycles(r.cycles.mean)}});
    if (r.unterminated > 0) {
      unterminated += (unterminated.empty() ? "" : ", ") + RegionLabel(r, 40) + " " + FormatCount(r.unterminated);
    }
  }
  if (k.regions.size() > shown) {
    *out += "  ... " + FormatCount(k.regions.size() - shown) + " more regions in the .stats.csv\n";
  }
  if (!unterminated.empty()) {
    *out += "  unterminated (no END; not in the durations): " + unterminated + '\n';
  }
  if (shown > 0) {
    *out += Row({{-17, "imbalance"},
                 {5, "SMs"},
                 {9, "max/mean"},
                 {-10, "busiest"},
                 {7, "warps"},
                 {9, "max/mean"},
                 {-1, "slowest warp"}});
  }
  for (size_t i = 0; i < shown; ++i) {
    const RegionStats& r = k.regions[i];
    if (r.count == 0) continue;
    *out += Row({{-17, RegionLabel(r, 17)},
                 {5, FormatCount(r.per_sm.units)},
                 {9, FormatRatio(r.per_sm)},
                 {-10, SmLabel(r.busiest_gpu, r.busiest_sm)},
                 {7, FormatCount(r.per_warp.units)},
                 {9, FormatRatio(r.per_warp)},
                 {-1, WarpLabel(r.slowest_warp)}});
  }
  if (!k.instants.empty()) {
    std::string line = "  instants:";
    for (const InstantStats& i : k.instants) {
      line += " " + Fit(i.name, 40) + " " + FormatCount(i.count);
      if (i.unmatched_ends > 0) line += " (" + Counted(i.unmatched_ends, "unmatched END", "unmatched ENDs") + ")";
      line += ',';
    }
    line.back() = '\n';
    *out += line;
  }
  RenderAsyncAndValues(k, out);
}

// ---- JSON in ----

struct FormatError {
  std::string message;
};

[[noreturn]] void Fail(const std::string& where, const std::string& what) { throw FormatError{where + ": " + what}; }

std::string Child(const std::string& where, const std::string& key) { return where.empty() ? key : where + "." + key; }
std::string Item(const std::string& where, size_t i) { return where + "[" + std::to_string(i) + "]"; }

const json& Field(const json& obj, const std::string& where, const char* key) {
  if (!obj.is_object()) Fail(where.empty() ? "the top level" : where, "expected an object");
  auto it = obj.find(key);
  if (it == obj.end()) Fail(Child(where, key), "missing");
  return *it;
}

uint64_t Unsigned(const json& obj, const std::string& where, const char* key) {
  const json& v = Field(obj, where, key);
  if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0)) {
    Fail(Child(where, key), "expected an unsigned integer, got " + v.dump());
  }
  return v.get<uint64_t>();
}

uint32_t Unsigned32(const json& obj, const std::string& where, const char* key) {
  const uint64_t v = Unsigned(obj, where, key);
  if (v > UINT32_MAX) Fail(Child(where, key), "expected an unsigned 32-bit integer, got " + std::to_string(v));
  return static_cast<uint32_t>(v);
}

int32_t Gpu(const json& obj, const std::string& where, const char* key) {
  const json& v = Field(obj, where, key);
  if (!v.is_number_integer() || v.get<int64_t>() < -1 || v.get<int64_t>() > INT32_MAX) {
    Fail(Child(where, key), "expected a GPU index (-1 if unknown), got " + v.dump());
  }
  return static_cast<int32_t>(v.get<int64_t>());
}

double Number(const json& obj, const std::string& where, const char* key) {
  const json& v = Field(obj, where, key);
  if (!v.is_number()) Fail(Child(where, key), "expected a number, got " + v.dump());
  return v.get<double>();
}

std::string String(const json& obj, const std::string& where, const char* key) {
  const json& v = Field(obj, where, key);
  if (!v.is_string()) Fail(Child(where, key), "expected a string, got " + v.dump());
  return v.get<std::string>();
}

int64_t Signed(const json& obj, const std::string& where, const char* key) {
  const json& v = Field(obj, where, key);
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX})) {
    Fail(Child(where, key), "expected a signed 64-bit integer, got " + v.dump());
  }
  return v.get<int64_t>();
}

bool Bool(const json& obj, const std::string& where, const char* key) {
  const json& v = Field(obj, where, key);
  if (!v.is_boolean()) Fail(Child(where, key), "expected true or false, got " + v.dump());
  return v.get<bool>();
}

const json& Array(const json& obj, const std::string& where, const char* key) {
  const json& v = Field(obj, where, key);
  if (!v.is_array()) Fail(Child(where, key), "expected an array");
  return v;
}

// ---- JSON out and in, structure by structure ----

json DurationsJson(const Durations& d) {
  return {{"total", d.total}, {"mean", d.mean}, {"p50", d.p50}, {"p95", d.p95}, {"max", d.max}};
}

Durations DurationsFrom(const json& j, const std::string& where) {
  Durations d;
  d.total = Unsigned(j, where, "total");
  d.mean = Number(j, where, "mean");
  d.p50 = Unsigned(j, where, "p50");
  d.p95 = Unsigned(j, where, "p95");
  d.max = Unsigned(j, where, "max");
  return d;
}

json WarpJson(const WarpLocation& w) {
  return {{"pid", w.pid},
          {"launch_id", w.launch_id},
          {"gpu", w.gpu},
          {"sm", w.sm},
          {"block", {w.block[0], w.block[1], w.block[2]}},
          {"warp", w.warp}};
}

WarpLocation WarpFrom(const json& j, const std::string& where) {
  WarpLocation w;
  w.pid = Unsigned32(j, where, "pid");
  w.launch_id = Unsigned(j, where, "launch_id");
  w.gpu = Gpu(j, where, "gpu");
  w.sm = Unsigned32(j, where, "sm");
  const json& block = Array(j, where, "block");
  if (block.size() != 3) Fail(Child(where, "block"), "expected [x, y, z]");
  for (size_t i = 0; i < 3; ++i) {
    if (!block[i].is_number_integer() || block[i].get<int64_t>() < 0 || block[i].get<uint64_t>() > UINT32_MAX) {
      Fail(Item(Child(where, "block"), i), "expected an unsigned 32-bit integer, got " + block[i].dump());
    }
    w.block[i] = block[i].get<uint32_t>();
  }
  w.warp = Unsigned32(j, where, "warp");
  return w;
}

json RegionJson(const RegionStats& r) {
  json j;
  j["name"] = r.name;
  j["count"] = r.count;
  j["unterminated"] = r.unterminated;
  j["percentiles_exact"] = r.exact;
  j["ns"] = DurationsJson(r.ns);
  j["cycles"] = DurationsJson(r.cycles);
  if (r.phase) j["phase"] = true;  // absent for ranges: files without phases read as before
  j["share"] = r.share ? json(*r.share) : json(nullptr);
  j["sm_imbalance"] = {{"sms", r.per_sm.units},     {"max_ns", r.per_sm.max_ns}, {"mean_ns", r.per_sm.mean_ns},
                       {"ratio", r.per_sm.Ratio()}, {"gpu", r.busiest_gpu},      {"sm", r.busiest_sm}};
  j["warp_imbalance"] = {{"warps", r.per_warp.units},
                         {"max_ns", r.per_warp.max_ns},
                         {"mean_ns", r.per_warp.mean_ns},
                         {"ratio", r.per_warp.Ratio()},
                         {"warp", WarpJson(r.slowest_warp)}};
  return j;
}

RegionStats RegionFrom(const json& j, const std::string& where) {
  RegionStats r;
  r.name = String(j, where, "name");
  r.phase = j.contains("phase") && Bool(j, where, "phase");
  r.count = Unsigned(j, where, "count");
  r.unterminated = Unsigned(j, where, "unterminated");
  r.exact = Bool(j, where, "percentiles_exact");
  r.ns = DurationsFrom(Field(j, where, "ns"), Child(where, "ns"));
  r.cycles = DurationsFrom(Field(j, where, "cycles"), Child(where, "cycles"));
  const json& share = Field(j, where, "share");
  if (!share.is_null()) r.share = Number(j, where, "share");
  const std::string sm_where = Child(where, "sm_imbalance");
  const json& sm = Field(j, where, "sm_imbalance");
  r.per_sm.units = Unsigned(sm, sm_where, "sms");
  r.per_sm.max_ns = Unsigned(sm, sm_where, "max_ns");
  r.per_sm.mean_ns = Number(sm, sm_where, "mean_ns");
  r.busiest_gpu = Gpu(sm, sm_where, "gpu");
  r.busiest_sm = Unsigned32(sm, sm_where, "sm");
  const std::string warp_where = Child(where, "warp_imbalance");
  const json& warp = Field(j, where, "warp_imbalance");
  r.per_warp.units = Unsigned(warp, warp_where, "warps");
  r.per_warp.max_ns = Unsigned(warp, warp_where, "max_ns");
  r.per_warp.mean_ns = Number(warp, warp_where, "mean_ns");
  r.slowest_warp = WarpFrom(Field(warp, warp_where, "warp"), Child(warp_where, "warp"));
  return r;
}

const char* SourceWord(ValueStats::Source source) {
  switch (source) {
    case ValueStats::Source::kSlice:
      return "slice";
    case ValueStats::Source::kInstant:
      return "instant";
    case ValueStats::Source::kCounter:
      return "counter";
  }
  return "slice";
}

json ValueJson(const ValueStats& v) {
  return {{"name", v.name},   {"source", SourceWord(v.source)},
          {"count", v.count}, {"min", v.min},
          {"max", v.max},     {"mean", v.mean},
          {"sum", v.sum}};
}

ValueStats ValueFrom(const json& j, const std::string& where) {
  ValueStats v;
  v.name = String(j, where, "name");
  const std::string source = String(j, where, "source");
  if (source == "slice") {
    v.source = ValueStats::Source::kSlice;
  } else if (source == "instant") {
    v.source = ValueStats::Source::kInstant;
  } else if (source == "counter") {
    v.source = ValueStats::Source::kCounter;
  } else {
    Fail(Child(where, "source"), "expected \"slice\", \"instant\" or \"counter\", got \"" + source + "\"");
  }
  v.count = Unsigned(j, where, "count");
  v.min = Signed(j, where, "min");
  v.max = Signed(j, where, "max");
  v.mean = Number(j, where, "mean");
  v.sum = Signed(j, where, "sum");
  return v;
}

json AsyncJson(const AsyncStats& a) {
  return {{"name", a.name},
          {"count", a.count},
          {"unterminated", a.unterminated},
          {"unmatched_ends", a.unmatched_ends},
          {"percentiles_exact", a.exact},
          {"ns", DurationsJson(a.ns)},
          {"min_ns", a.min_ns}};
}

AsyncStats AsyncFrom(const json& j, const std::string& where) {
  AsyncStats a;
  a.name = String(j, where, "name");
  a.count = Unsigned(j, where, "count");
  a.unterminated = Unsigned(j, where, "unterminated");
  a.unmatched_ends = Unsigned(j, where, "unmatched_ends");
  a.exact = Bool(j, where, "percentiles_exact");
  a.ns = DurationsFrom(Field(j, where, "ns"), Child(where, "ns"));
  a.min_ns = Unsigned(j, where, "min_ns");
  return a;
}

json KernelJson(const KernelStats& k) {
  json regions = json::array();
  for (const RegionStats& r : k.regions) regions.push_back(RegionJson(r));
  json instants = json::array();
  for (const InstantStats& i : k.instants) {
    instants.push_back({{"name", i.name}, {"count", i.count}, {"unmatched_ends", i.unmatched_ends}});
  }
  json j = {{"kernel", k.kernel},
            {"launches", k.launches},
            {"warps", k.warps},
            {"span_ns", k.span_ns},
            {"warp_time_ns", k.warp_time_ns},
            {"regions", std::move(regions)},
            {"instants", std::move(instants)}};
  // Only where the kernel has them: files of runs without them read as before.
  if (!k.values.empty()) {
    json& values = j["values"] = json::array();
    for (const ValueStats& v : k.values) values.push_back(ValueJson(v));
  }
  if (!k.async.empty()) {
    json& async = j["async_spans"] = json::array();
    for (const AsyncStats& a : k.async) async.push_back(AsyncJson(a));
  }
  return j;
}

KernelStats KernelFrom(const json& j, const std::string& where) {
  KernelStats k;
  k.kernel = String(j, where, "kernel");
  k.launches = Unsigned(j, where, "launches");
  k.warps = Unsigned(j, where, "warps");
  k.span_ns = Unsigned(j, where, "span_ns");
  k.warp_time_ns = Unsigned(j, where, "warp_time_ns");
  const json& regions = Array(j, where, "regions");
  for (size_t i = 0; i < regions.size(); ++i) {
    k.regions.push_back(RegionFrom(regions[i], Item(Child(where, "regions"), i)));
  }
  const json& instants = Array(j, where, "instants");
  for (size_t i = 0; i < instants.size(); ++i) {
    const std::string at = Item(Child(where, "instants"), i);
    k.instants.push_back({String(instants[i], at, "name"), Unsigned(instants[i], at, "count"),
                          Unsigned(instants[i], at, "unmatched_ends")});
  }
  if (j.contains("values")) {
    const json& values = Array(j, where, "values");
    for (size_t i = 0; i < values.size(); ++i) {
      k.values.push_back(ValueFrom(values[i], Item(Child(where, "values"), i)));
    }
  }
  if (j.contains("async_spans")) {
    const json& async = Array(j, where, "async_spans");
    for (size_t i = 0; i < async.size(); ++i) {
      k.async.push_back(AsyncFrom(async[i], Item(Child(where, "async_spans"), i)));
    }
  }
  return k;
}

json GapJson(const Gap& g) {
  return {{"kernel", g.kernel}, {"warp", WarpJson(g.where)}, {"before", g.before},
          {"after", g.after},   {"start_ns", g.start_ns},    {"length_ns", g.length_ns}};
}

Gap GapFrom(const json& j, const std::string& where) {
  Gap g;
  g.kernel = String(j, where, "kernel");
  g.where = WarpFrom(Field(j, where, "warp"), Child(where, "warp"));
  g.before = String(j, where, "before");
  g.after = String(j, where, "after");
  g.start_ns = Unsigned(j, where, "start_ns");
  g.length_ns = Unsigned(j, where, "length_ns");
  return g;
}

json OpenRangeJson(const OpenRange& o) {
  return {{"kernel", o.kernel}, {"warp", WarpJson(o.where)}, {"region", o.region}, {"since_ns", o.since_ns}};
}

OpenRange OpenRangeFrom(const json& j, const std::string& where) {
  OpenRange o;
  o.kernel = String(j, where, "kernel");
  o.where = WarpFrom(Field(j, where, "warp"), Child(where, "warp"));
  o.region = String(j, where, "region");
  o.since_ns = Unsigned(j, where, "since_ns");
  return o;
}

// ---- CSV ----

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + '"';
}

// ---- diff ----

const KernelStats* FindKernel(const RunStats& run, const std::string& name) {
  for (const KernelStats& k : run.kernels) {
    if (k.kernel == name) return &k;
  }
  return nullptr;
}

// A phase and a range of the same name are two regions.
const RegionStats* FindRegion(const KernelStats* kernel, const std::string& name, bool phase) {
  if (kernel == nullptr) return nullptr;
  for (const RegionStats& r : kernel->regions) {
    if (r.name == name && r.phase == phase) return &r;
  }
  return nullptr;
}

// One region of a kernel in run a (ra) and run b (rb); either may be absent.
RegionDiff Compare(const std::string& kernel, const RegionStats* ra, const RegionStats* rb) {
  RegionDiff d;
  d.kernel = kernel;
  const RegionStats& either = ra ? *ra : *rb;
  d.region = either.phase ? either.name + " (phase)" : either.name;
  d.presence = !ra ? RegionDiff::Presence::kAdded : !rb ? RegionDiff::Presence::kRemoved : RegionDiff::Presence::kBoth;
  if (ra) {
    d.count_a = ra->count;
    d.mean_a_ns = ra->ns.mean;
    d.p95_a_ns = ra->ns.p95;
  }
  if (rb) {
    d.count_b = rb->count;
    d.mean_b_ns = rb->ns.mean;
    d.p95_b_ns = rb->ns.p95;
  }
  if (ra && rb && ra->count > 0 && rb->count > 0) {
    if (rb->ns.mean > 0) d.speedup = ra->ns.mean / rb->ns.mean;
    if (ra->ns.p95 > 0) {
      d.p95_change_pct =
          (static_cast<double>(rb->ns.p95) - static_cast<double>(ra->ns.p95)) / static_cast<double>(ra->ns.p95) * 100;
    }
  }
  return d;
}

const char* PresenceWord(RegionDiff::Presence p) {
  switch (p) {
    case RegionDiff::Presence::kBoth:
      return "both";
    case RegionDiff::Presence::kAdded:
      return "added";
    case RegionDiff::Presence::kRemoved:
      return "removed";
  }
  return "both";
}

std::string FormatOptional(const std::optional<double>& v, const char* format) { return v ? Printf(format, *v) : "-"; }

}  // namespace

std::string RenderText(const RunStats& run, const TextOptions& options) {
  std::string out = "smprof stats: " + Counted(run.launches, "launch", "launches") + " of " +
                    Counted(run.kernels.size(), "kernel", "kernels") + ", " + Counted(run.slices, "slice", "slices") +
                    " (" + FormatCount(run.unterminated) + " unterminated), " +
                    Counted(run.instants, "instant", "instants") +
                    (run.async_spans > 0 ? ", " + Counted(run.async_spans, "async span", "async spans") : "") + "\n";
  if (run.lost_events > 0) {
    out += "warning: " + FormatCount(run.lost_events) +
           " events recorded on the GPU never reached the trace; these statistics cover the rest\n";
  }
  out += "percentiles: nearest rank (\"~\": from a histogram, within " + Printf("%.1f", kHistogramRelativeError * 100) +
         " %); share: of the time of the warps\nthat recorded, in the kernel (nested regions overlap, so shares do "
         "not add up);\nimbalance: max/mean of the per-SM and per-warp totals\n";
  for (const KernelStats& k : run.kernels) RenderKernel(k, options, &out);
  if (!run.gaps.empty()) {
    out += "\nlargest gaps between top-level regions on a warp\n";
    out += Row({{8, "length"}, {12, "at"}, {-18, "kernel"}, {-22, "between"}, {-1, "warp"}});
    for (const Gap& g : run.gaps) {
      out += Row({{8, FormatNs(static_cast<double>(g.length_ns))},
                  {12, Printf("%.6f s", static_cast<double>(g.start_ns) / 1e9)},
                  {-18, Fit(g.kernel, 18)},
                  {-22, Fit(g.before, 9) + " -> " + Fit(g.after, 9)},
                  {-1, WarpLabel(g.where)}});
    }
  }
  if (!run.open_ranges.empty()) {
    out += "\nranges never ended: where warps were when a running kernel was read, or a missing END";
    out += run.unterminated > run.open_ranges.size()
               ? " (the first " + std::to_string(run.open_ranges.size()) + " of " + FormatCount(run.unterminated) + ")\n"
               : "\n";
    out += Row({{12, "since"}, {-18, "kernel"}, {-22, "region"}, {-1, "warp"}});
    for (const OpenRange& o : run.open_ranges) {
      out += Row({{12, Printf("%.6f s", static_cast<double>(o.since_ns) / 1e9)},
                  {-18, Fit(o.kernel, 18)},
                  {-22, Fit(o.region, 22)},
                  {-1, WarpLabel(o.where)}});
    }
  }
  return out;
}

json ToJson(const RunStats& run) {
  json kernels = json::array();
  for (const KernelStats& k : run.kernels) kernels.push_back(KernelJson(k));
  json gaps = json::array();
  for (const Gap& g : run.gaps) gaps.push_back(GapJson(g));
  json j;
  j["format"] = "smprof-stats";
  j["version"] = kStatsFormatVersion;
  j["definitions"] = {{"percentiles", "nearest rank: the sample of rank ceil(p/100 * count)"},
                      {"percentiles_exact_up_to", kExactSamples},
                      {"histogram_relative_error", kHistogramRelativeError},
                      {"share", "region total ns / sum over the kernel's launches of (span x warps that recorded)"},
                      {"imbalance", "max / mean of per-SM (per-warp) totals over those that recorded the region"},
                      {"gaps", "between consecutive top-level (lane 0, depth 0) slices of a warp"},
                      {"open_ranges", "slices with no END, the earliest first: where warps were when a running "
                                      "kernel was read, or a missing END"},
                      {"unterminated", "slices with no END: counted, left out of every duration"}};
  bool values = false, async = false;
  for (const KernelStats& k : run.kernels) {
    values = values || !k.values.empty();
    async = async || !k.async.empty();
  }
  if (values) {
    j["definitions"]["values"] =
        "per name and source (slice: an END's value; instant; counter: a counter sample): count, min, max, mean, sum "
        "(saturated at the int64 limits)";
  }
  if (async) {
    j["definitions"]["async_spans"] =
        "spans begun and ended on warps of one block, by name: durations of those with both ends; unterminated and "
        "unmatched ends counted apart";
  }
  j["launches"] = run.launches;
  j["slices"] = run.slices;
  j["unterminated"] = run.unterminated;
  j["instants"] = run.instants;
  if (run.async_spans > 0) j["async_spans"] = run.async_spans;
  j["lost_events"] = run.lost_events;
  j["kernels"] = std::move(kernels);
  j["gaps"] = std::move(gaps);
  json open = json::array();
  for (const OpenRange& o : run.open_ranges) open.push_back(OpenRangeJson(o));
  j["open_ranges"] = std::move(open);
  return j;
}

bool FromJson(const json& j, RunStats* run, std::string* error) {
  try {
    if (!j.is_object() || !j.contains("format") || j["format"] != "smprof-stats") {
      Fail("the top level",
           "not a smprof stats file (no \"format\": \"smprof-stats\"); smprof-run writes one "
           "beside each trace as <trace>.stats.json");
    }
    const uint64_t version = Unsigned(j, "", "version");
    if (version != kStatsFormatVersion) {
      Fail("version", "this smprof reads stats files of version " + std::to_string(kStatsFormatVersion) + ", not " +
                          std::to_string(version) + ": read it with the smprof that wrote it");
    }
    RunStats out;
    out.launches = Unsigned(j, "", "launches");
    out.slices = Unsigned(j, "", "slices");
    out.unterminated = Unsigned(j, "", "unterminated");
    out.instants = Unsigned(j, "", "instants");
    if (j.contains("async_spans")) out.async_spans = Unsigned(j, "", "async_spans");
    out.lost_events = Unsigned(j, "", "lost_events");
    const json& kernels = Array(j, "", "kernels");
    for (size_t i = 0; i < kernels.size(); ++i) out.kernels.push_back(KernelFrom(kernels[i], Item("kernels", i)));
    const json& gaps = Array(j, "", "gaps");
    for (size_t i = 0; i < gaps.size(); ++i) out.gaps.push_back(GapFrom(gaps[i], Item("gaps", i)));
    if (j.contains("open_ranges")) {  // files of an earlier smprof have none
      const json& open = Array(j, "", "open_ranges");
      for (size_t i = 0; i < open.size(); ++i) {
        out.open_ranges.push_back(OpenRangeFrom(open[i], Item("open_ranges", i)));
      }
    }
    *run = std::move(out);
    return true;
  } catch (const FormatError& e) {
    *error = e.message;
    return false;
  }
}

bool ReadStatsFile(const std::string& path, RunStats* run, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot open stats file " + path;
    return false;
  }
  std::stringstream text;
  text << in.rdbuf();
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::parse_error& e) {
    *error = path + " is not JSON (" + e.what() + ")";
    return false;
  }
  std::string why;
  if (!FromJson(j, run, &why)) {
    *error = path + ": " + why;
    return false;
  }
  return true;
}

std::string ToCsv(const RunStats& run) {
  std::string out =
      "kernel,region,launches,count,unterminated,total_ns,mean_ns,p50_ns,p95_ns,max_ns,"
      "total_cycles,mean_cycles,p50_cycles,p95_cycles,max_cycles,percentiles_exact,share,"
      "sms,sm_max_ns,sm_mean_ns,sm_imbalance,warps,warp_max_ns,warp_mean_ns,warp_imbalance\n";
  auto durations = [](const Durations& d) {
    return std::to_string(d.total) + "," + Printf("%.1f", d.mean) + "," + std::to_string(d.p50) + "," +
           std::to_string(d.p95) + "," + std::to_string(d.max);
  };
  auto imbalance = [](const Imbalance& m) {
    return std::to_string(m.units) + "," + std::to_string(m.max_ns) + "," + Printf("%.1f", m.mean_ns) + "," +
           (m.units > 0 ? Printf("%.4f", m.Ratio()) : "");
  };
  // Runs with phases, async spans or values get more columns and rows: a
  // row's kind, and the values of its name and source.
  bool extended = false;
  for (const KernelStats& k : run.kernels) {
    extended = extended || !k.values.empty() || !k.async.empty() ||
               std::any_of(k.regions.begin(), k.regions.end(), [](const RegionStats& r) { return r.phase; });
  }
  if (extended) {
    out.pop_back();
    out += ",kind,value_count,value_min,value_max,value_mean,value_sum\n";
  }
  auto values = [](const ValueStats* v) {
    if (v == nullptr) return std::string(",,,,");
    return std::to_string(v->count) + "," + std::to_string(v->min) + "," + std::to_string(v->max) + "," +
           Printf("%.6g", v->mean) + "," + std::to_string(v->sum);
  };
  auto find_value = [](const KernelStats& k, const std::string& name, ValueStats::Source source) {
    for (const ValueStats& v : k.values) {
      if (v.name == name && v.source == source) return &v;
    }
    return static_cast<const ValueStats*>(nullptr);
  };
  for (const KernelStats& k : run.kernels) {
    const std::string head = CsvField(k.kernel) + ",";
    for (const RegionStats& r : k.regions) {
      out += head + CsvField(r.name) + "," + std::to_string(k.launches) + "," + std::to_string(r.count) + "," +
             std::to_string(r.unterminated) + "," + durations(r.ns) + "," + durations(r.cycles) + "," +
             (r.exact ? "true" : "false") + "," + (r.share ? Printf("%.6f", *r.share) : "") + "," +
             imbalance(r.per_sm) + "," + imbalance(r.per_warp);
      if (extended) {
        out += std::string(",") + (r.phase ? "phase" : "range") + "," +
               values(r.phase ? nullptr : find_value(k, r.name, ValueStats::Source::kSlice));
      }
      out += "\n";
    }
    if (!extended) continue;
    for (const AsyncStats& a : k.async) {
      out += head + CsvField(a.name) + "," + std::to_string(k.launches) + "," + std::to_string(a.count) + "," +
             std::to_string(a.unterminated) + "," + durations(a.ns) + ",,,,,," + (a.exact ? "true" : "false") +
             ",,,,,,,,,,async," + values(nullptr) + "\n";
    }
    for (const ValueStats& v : k.values) {
      if (v.source == ValueStats::Source::kSlice) continue;  // on its region's row
      out += head + CsvField(v.name) + "," + std::to_string(k.launches) + std::string(22, ',') + "," +
             (v.source == ValueStats::Source::kCounter ? "counter" : "instant") + "," + values(&v) + "\n";
    }
  }
  return out;
}

std::vector<RegionDiff> Diff(const RunStats& a, const RunStats& b) {
  std::vector<RegionDiff> out;
  for (const KernelStats& ka : a.kernels) {
    const KernelStats* kb = FindKernel(b, ka.kernel);
    for (const RegionStats& r : ka.regions) out.push_back(Compare(ka.kernel, &r, FindRegion(kb, r.name, r.phase)));
    if (kb == nullptr) continue;
    for (const RegionStats& r : kb->regions) {
      if (FindRegion(&ka, r.name, r.phase) == nullptr) out.push_back(Compare(ka.kernel, nullptr, &r));
    }
  }
  for (const KernelStats& kb : b.kernels) {
    if (FindKernel(a, kb.kernel) != nullptr) continue;
    for (const RegionStats& r : kb.regions) out.push_back(Compare(kb.kernel, nullptr, &r));
  }
  return out;
}

std::string RenderDiff(const std::vector<RegionDiff>& diff) {
  std::string out =
      "smprof diff, a -> b: speedup = mean a / mean b (> 1: b is faster); p95 change = (p95 b - p95 a) / p95 a\n";
  out += Row({{-19, "region"},
              {9, "count a"},
              {9, "count b"},
              {9, "mean a"},
              {9, "mean b"},
              {8, "speedup"},
              {9, "p95 a"},
              {9, "p95 b"},
              {8, "p95 chg"}});
  const std::string* kernel = nullptr;
  for (const RegionDiff& d : diff) {
    if (!kernel || *kernel != d.kernel) {
      kernel = &d.kernel;
      out += "kernel " + Fit(d.kernel, 200) + '\n';
    }
    const bool a = d.presence != RegionDiff::Presence::kAdded;
    const bool b = d.presence != RegionDiff::Presence::kRemoved;
    const std::string suffix =
        d.presence == RegionDiff::Presence::kBoth ? "" : std::string(" (") + PresenceWord(d.presence) + ")";
    out += Row({{-19, Fit(d.region, 19 - suffix.size()) + suffix},
                {9, a ? FormatCount(d.count_a) : "-"},
                {9, b ? FormatCount(d.count_b) : "-"},
                {9, a && d.count_a > 0 ? FormatNs(d.mean_a_ns) : "-"},
                {9, b && d.count_b > 0 ? FormatNs(d.mean_b_ns) : "-"},
                {8, FormatOptional(d.speedup, "%.2fx")},
                {9, a && d.count_a > 0 ? FormatNs(static_cast<double>(d.p95_a_ns)) : "-"},
                {9, b && d.count_b > 0 ? FormatNs(static_cast<double>(d.p95_b_ns)) : "-"},
                {8, FormatOptional(d.p95_change_pct, "%+.1f %%")}});
  }
  return out;
}

json DiffToJson(const std::vector<RegionDiff>& diff) {
  json regions = json::array();
  auto optional = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  for (const RegionDiff& d : diff) {
    regions.push_back({{"kernel", d.kernel},
                       {"region", d.region},
                       {"status", PresenceWord(d.presence)},
                       {"count_a", d.count_a},
                       {"count_b", d.count_b},
                       {"mean_a_ns", d.mean_a_ns},
                       {"mean_b_ns", d.mean_b_ns},
                       {"speedup", optional(d.speedup)},
                       {"p95_a_ns", d.p95_a_ns},
                       {"p95_b_ns", d.p95_b_ns},
                       {"p95_change_pct", optional(d.p95_change_pct)}});
  }
  return {{"format", "smprof-stats-diff"}, {"version", kStatsFormatVersion}, {"regions", std::move(regions)}};
}

std::string LargeTraceAdvice(uint64_t trace_bytes, const RunStats& run) {
  if (trace_bytes <= kLargeTraceBytes) return "";
  std::vector<std::pair<uint64_t, std::string>> by_ranges;
  for (const KernelStats& k : run.kernels) {
    uint64_t n = 0;
    for (const RegionStats& r : k.regions) n += r.count;
    by_ranges.emplace_back(n, k.kernel);
  }
  std::stable_sort(by_ranges.begin(), by_ranges.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string kernels;
  for (size_t i = 0; i < by_ranges.size() && i < 3; ++i) {
    kernels += (kernels.empty() ? " (most recorded: " : ", ") + by_ranges[i].second + " " +
               std::to_string(by_ranges[i].first) + " ranges";
  }
  if (!kernels.empty()) kernels += ")";
  char size[32];
  std::snprintf(size, sizeof(size), "%.1f GB", static_cast<double>(trace_bytes) / 1e9);
  return std::string("the trace is ") + size +
         ", more than the Perfetto UI opens in a browser (about 1 GB: its trace processor runs in WebAssembly "
         "with at most 4 GB of memory). Open it with trace_processor_shell --httpd and ui.perfetto.dev, or "
         "narrow the next run: --warps 0 (one warp per block) or --kernels PATTERN" +
         kernels + ". The statistics cover every event.";
}

}  // namespace smprof::stats
