// RangeMatcher: one warp's BEGIN/END/instant and PHASE/PHASE_END events in,
// its slices out, in start order, each on a lane where it nests.
//
// Matching: an END closes the most recent open BEGIN of the same name on the
// warp (so ranges of different names may interleave: producer/consumer
// phases, async copies). Open BEGINs are indexed by name, so an END finds
// its BEGIN in O(1) however many are open; at most kMaxOpen are kept open,
// beyond which the oldest range is closed as unterminated.
//
// Phases (SMPROF_PHASE) are matched apart from ranges: a warp has at most
// one open phase, outside the name index (a phase and a range of the same
// name never close each other); a PHASE closes it at its own time and opens
// the next, a PHASE_END closes it. Phase slices are marked (Record::phase).
//
// Values: an END's value goes on its slice's record, an instant's on the
// instant's (Record::value, value_flags 0 when there is none). A record is
// 48 bytes: the 8 of the value ride along on every record, as a side table
// would cost a lookup per record and an index of 4 bytes would round the
// record to 48 all the same.
//
// Lanes: a viewer draws one track's slices as a stack, so ranges that overlap
// without nesting cannot share a track. The matcher buffers an episode (from
// the first BEGIN on an idle warp until no range is open) and then assigns,
// in start order, each slice to the lowest lane where it nests in what is
// open there (lane 0 first: everything that nests stays on the warp's own
// track). Instants go on lane 0. Records are ready when the episode ends;
// an episode longer than kMaxBuffered records is written out early (its
// ranges still open then are given a lane of their own when they close, as
// they may start before records already written).
//
// Cost: no allocation per event once a matcher's buffers have grown (the
// name index is an open-addressing table; records take the slot of their
// start, so an episode is checked, and sorted only when out of order), and
// Reset() lets one matcher serve warp after warp with the buffers it has.
//
// Single-threaded; one matcher per (launch, warp) at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace smprof {

class RangeMatcher {
 public:
  static constexpr size_t kMaxOpen = size_t{1} << 16;
  static constexpr size_t kMaxBuffered = size_t{1} << 20;

  enum class Kind : uint8_t {
    kSlice,         // BEGIN .. END
    kUnterminated,  // BEGIN without END: ends at the time given to CloseAll (or when evicted)
    kInstant,
    kUnmatchedEnd,  // END without BEGIN, shown as an instant
  };
  enum class Why : uint8_t { kNone, kTooManyOpen, kProducerLost };

  // Record::value_flags.
  static constexpr uint8_t kValuePresent = 1;  // `value` is the user's
  static constexpr uint8_t kValueCounter = 2;  // ... and a counter sample
  struct Value {
    int64_t value;
    uint8_t flags;  // kValuePresent | kValueCounter; 0: none
  };

  struct Record {
    Kind kind;
    Why why;
    uint8_t value_flags;  // of `value`; 0: none
    bool phase;           // a phase's slice (kSlice or kUnterminated)
    uint32_t name_id;
    uint64_t begin_ns;
    uint64_t end_ns;  // == begin_ns for instants
    uint32_t cycles;  // END cycles - BEGIN cycles (32-bit wrap), slices only
    uint32_t lane;
    uint32_t depth;  // open slices around it on its lane
    uint32_t order;  // its start's place in its episode's recording order (the last tie-break)
    int64_t value;   // with value_flags
  };

  void Begin(uint32_t name_id, uint64_t ns, uint32_t cycles);
  void End(uint32_t name_id, uint64_t ns, uint32_t cycles) { End(name_id, ns, cycles, Value{0, 0}); }
  void End(uint32_t name_id, uint64_t ns, uint32_t cycles, Value value);
  void Instant(uint32_t name_id, uint64_t ns, Value value = Value{0, 0});
  // Closes the open phase (at `ns`, `cycles`), if any, and opens `name_id`.
  void Phase(uint32_t name_id, uint64_t ns, uint32_t cycles);
  // Closes the open phase; false when none was open (the event is then an
  // unmatched END named `name_id`).
  bool PhaseEnd(uint32_t name_id, uint64_t ns, uint32_t cycles);
  // Closes every open BEGIN and the open phase as unterminated at `end_ns`
  // (not before its begin), innermost first, and ends the episode.
  void CloseAll(uint64_t end_ns, Why why);

  // Records ready to write, in start order per lane assignment; the caller
  // consumes them and calls ClearReady().
  const std::vector<Record>& ready() const { return ready_; }
  void ClearReady() { ready_.clear(); }

  size_t open() const { return live_; }  // ranges and the phase
  bool phase_open() const { return phase_pos_ != kNone; }
  uint64_t last_ns() const { return last_ns_; }  // latest event time seen

  // Forgets everything (as a new matcher) but keeps the buffers, unless
  // they grew beyond what a typical warp needs.
  void Reset();

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  static constexpr size_t kKeptCapacity = 512;  // records (or BEGINs) per buffer a Reset keeps room for

  // Name -> position of its latest open BEGIN: linear probing, deletion by
  // shifting back (no tombstones), at most half full.
  class TopIndex {
   public:
    uint32_t Find(uint32_t name_id) const;
    // The position stored for `name_id`, inserted as kNone when absent.
    uint32_t& At(uint32_t name_id);
    void Erase(uint32_t name_id);
    void Clear();

   private:
    struct Slot {
      uint32_t name_id;
      uint32_t pos;  // kNone: empty
    };
    size_t Home(uint32_t name_id) const;
    void Grow();
    std::vector<Slot> slots_;  // a power of two in size, or empty
    size_t used_ = 0;
  };
  struct Open {
    uint32_t name_id;
    uint32_t prev_same;  // position of the previous open BEGIN of this name, or kNone
    uint64_t begin_ns;
    uint32_t begin_cycles;
    uint32_t slot;  // its record's place in episode_ (unless early)
    bool live;
    bool early;  // still open when its episode was written out early
    bool phase;  // the warp's open phase: not in top_, at phase_pos_
  };

  template <bool kPhase>
  void Push(uint32_t name_id, uint64_t ns, uint32_t cycles);
  uint32_t Find(uint32_t name_id) const;
  void Close(uint32_t pos);
  // The oldest open range (never the phase; a range must be open).
  uint32_t Oldest();
  // Closes the oldest range as unterminated, if kMaxOpen are open.
  void EvictIfFull(uint64_t ns);
  void Compact();
  // A closed BEGIN's record: into its slot of the episode, or out at once
  // when it was open across an early write-out.
  void Settle(const Open& o, Kind kind, Why why, uint64_t end_ns, uint32_t cycles, Value value);
  // An instant or an unmatched END: appended to the episode.
  void Append(Kind kind, uint32_t name_id, uint64_t ns, Value value);
  // Writes the episode out once it holds kMaxBuffered complete records.
  void WriteOutEarlyIfFull();
  // Sorts the episode by start (unless it is in order: the usual case, as
  // records take the place of their start), assigns lanes, moves it to ready_.
  void Release();

  std::vector<Open> open_;  // BEGINs, oldest first; closed ones dead until removed
  size_t live_ = 0;         // live entries of open_
  size_t bottom_ = 0;       // no live entry below this position
  TopIndex top_;            // name -> position of its latest open BEGIN
  uint32_t phase_pos_ = kNone;  // position of the open phase in open_
  uint64_t last_ns_ = 0;

  // In recording order of their starts: a BEGIN reserves its record's slot
  // (lane kNone until its END comes), instants are appended.
  std::vector<Record> episode_;
  size_t reserved_ = 0;  // slots of episode_ still waiting for their END
  std::vector<Record> ready_;
  // Per lane, the end times of the slices open on it (innermost last), as
  // of the last released record.
  std::vector<std::vector<uint64_t>> lanes_;
  uint32_t early_lane_ = kNone;  // the lane of ranges open across an early write-out
};

}  // namespace smprof
