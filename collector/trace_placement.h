// Where a trace file lives while it is written and once it is complete.
//
// The collector writes PartialPath(path) and moves it to `path` only when the
// trace is complete, so a file at `path` is always a whole trace, and a run
// that is killed leaves "<path>.partial": readable as it is (Perfetto accepts
// an unclosed JSON array) and repaired to strict JSON by smprof-run when it
// outlives the collector.
//
// Nothing is overwritten unless asked: the partial file is created
// exclusively (a second run writing the same path fails at once, naming the
// file), and the final move never replaces an existing file; when `path`
// appeared during the run, the trace lands at the first free
// "<stem>-2<ext>", "<stem>-3<ext>", ... and the caller reports where.
// A path that is not a regular file (IsStreamPath) is written directly.
#pragma once

#include <string>

namespace smprof {

std::string PartialPath(const std::string& path);

// True when `path` exists and is not a regular file (a device such as
// /dev/null, a FIFO): a trace sent there is written to it directly, with no
// partial file and nothing to place or to keep from being overwritten.
bool IsStreamPath(const std::string& path);

// "<dir>/<stem>-<n><ext>" for "<dir>/<stem><ext>" (ext: from the last '.' of
// the file name, if any).
std::string NumberedPath(const std::string& path, int n);

// Where the statistics of a trace at `path` go: beside it, named after the
// whole file name ("run.pftrace" -> "run.pftrace", to which the stats sink
// adds ".stats.json" and ".stats.csv"), so two traces never share them;
// "" for a stream path (nothing is written beside it).
std::string StatsBase(const std::string& path);

// Creates the file a trace writer writes (O_CREAT, close-on-exec; O_EXCL
// when `exclusive`, else truncating; O_RDWR when `read_back`, else
// O_WRONLY). Returns the descriptor, or -1 with *error naming the fix: the
// file exists (another run writing it, or one that was killed), or cannot
// be created.
int OpenTraceFile(const std::string& path, bool exclusive, bool read_back, std::string* error);

// Moves `partial` to `path`: replacing a file there when `overwrite`, else to
// the first of path, NumberedPath(path, 2..999) that does not exist. On
// success *placed is where the trace now is. On failure *error names the
// problem, and the trace stays at `partial`.
bool PlaceTrace(const std::string& partial, const std::string& path, bool overwrite, std::string* placed,
                std::string* error);

}  // namespace smprof
