// ModuleSwitch: which modules record, written into their arena references,
// on the fake GPU (a held stream keeps its queued copies until released).
#include "injector/module_switch.h"

#include <gtest/gtest.h>

#include "injector/kernel_table.h"
#include "tests/fakes/fake_gpu.h"

namespace smprof::injector {
namespace {

constexpr uint64_t kArena = 0xA000;

class ModuleSwitchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(gpu.CreateStream(&own));
    words = static_cast<uint64_t*>(gpu.AllocatePinned(2 * sizeof(uint64_t) + sizeof(wire::ArenaRef)));
    words[0] = kArena;
    words[1] = 0;
    dark_ref = reinterpret_cast<wire::ArenaRef*>(&words[2]);
    sw.SetUp(own, &words[1]);
    ref.chunks = 0xB000;
    ref.num_chunks = 16;
    ref.chunk_shift = 10;
    ref.warp_mask = ~0u;
    ref.epoch = 7;
    *dark_ref = ref;
    s1 = gpu.AddStream();
    s2 = gpu.AddStream();
  }
  void TearDown() override { gpu.FreePinned(words); }

  ModuleSwitch::Module* Add(GpuModule* handle) {
    *handle = gpu.AddModule(true);
    DevPtr global = 0;
    size_t bytes = 0;
    EXPECT_EQ(gpu.ModuleGlobal(*handle, KernelTable::ArenaSymbol(wire::kArenaAbiVersion).c_str(), &global, &bytes),
              Lookup::kFound);
    return sw.Find(*handle, global, true);
  }
  // A switch on `on`, a new size lit behind it there, then a light on s2.
  void ExpectASwitchInTheOrderOf(GpuStream on);
  ModuleSwitch::Lit Light(ModuleSwitch::Module* m, GpuStream s, bool capturing = false) {
    return sw.Light(m, s, capturing, [&] {
      ++references;
      return ModuleSwitch::Publication{ref, &words[0], dark_ref};
    });
  }

  fake::FakeGpu gpu;
  ModuleSwitch sw{gpu};
  GpuStream own = nullptr, s1 = nullptr, s2 = nullptr;
  uint64_t* words = nullptr;  // the lit word, the dark word, then dark_ref
  wire::ArenaRef* dark_ref = nullptr;
  wire::ArenaRef ref{};
  int references = 0;
};

// The rest of the reference lands at once with `arena` 0; `arena` lands in
// the launch's stream order, so a launch queued before it still sees nothing.
TEST_F(ModuleSwitchTest, AFirstLightPublishesTheReferenceThenLightsInStreamOrder) {
  GpuModule module;
  ModuleSwitch::Module* m = Add(&module);
  gpu.Hold(s1);
  EXPECT_EQ(Light(m, s1), ModuleSwitch::Lit::kNow);
  EXPECT_TRUE(sw.lit(m));
  EXPECT_FALSE(sw.all_dark());
  wire::ArenaRef seen = gpu.Ref(module);
  EXPECT_EQ(seen.arena, 0u);
  EXPECT_EQ(seen.chunks, ref.chunks);
  EXPECT_EQ(seen.epoch, 7u);
  gpu.Release(s1);
  EXPECT_EQ(gpu.Ref(module).arena, kArena);
  // Lit on s1 already; another stream queues its own light, without
  // publishing the reference again.
  EXPECT_EQ(Light(m, s1), ModuleSwitch::Lit::kAlready);
  EXPECT_EQ(Light(m, s2), ModuleSwitch::Lit::kNow);
  EXPECT_EQ(references, 2);
}

TEST_F(ModuleSwitchTest, OnlyAModuleOfOneStreamIsDarkenedInStreamOrder) {
  GpuModule a, b;
  ModuleSwitch::Module* one = Add(&a);
  ModuleSwitch::Module* two = Add(&b);
  ASSERT_EQ(Light(one, s1), ModuleSwitch::Lit::kNow);
  ASSERT_EQ(Light(two, s1), ModuleSwitch::Lit::kNow);
  sw.NoteStream(two, s2);
  gpu.Hold(s1);
  EXPECT_TRUE(sw.DarkenInStreamOrder(one, s1, false, false));
  EXPECT_FALSE(sw.lit(one));
  EXPECT_EQ(gpu.Ref(a).arena, kArena);  // launches queued before it still record
  gpu.Release(s1);
  EXPECT_EQ(gpu.Ref(a).arena, 0u);
  // Used on two streams: s2's launches may run after a copy on s1 lands.
  EXPECT_FALSE(sw.DarkenInStreamOrder(two, s1, false, false));
  EXPECT_TRUE(sw.lit(two));
  // A capturing stream or a per-thread stream: never in stream order.
  GpuModule c;
  ModuleSwitch::Module* three = Add(&c);
  ASSERT_EQ(Light(three, s2), ModuleSwitch::Lit::kNow);
  EXPECT_FALSE(sw.DarkenInStreamOrder(three, s2, false, /*capturing=*/true));
  EXPECT_FALSE(sw.DarkenInStreamOrder(three, s2, /*per_thread=*/true, false));
  EXPECT_TRUE(sw.lit(three));
}

TEST_F(ModuleSwitchTest, AReadBackDarkensEveryModuleWithTheNextReference) {
  GpuModule a, b;
  ModuleSwitch::Module* one = Add(&a);
  Add(&b);
  ASSERT_EQ(Light(one, s1), ModuleSwitch::Lit::kNow);
  std::vector<ModuleSwitch::Module*> modules = sw.DropGone([](GpuModule, DevPtr) { return false; });
  EXPECT_EQ(modules.size(), 2u);  // nothing was unloaded: nothing is looked up
  wire::ArenaRef dark = ref;
  dark.epoch = 8;
  ASSERT_TRUE(sw.QueueDark(modules, dark, own));
  sw.EndGeneration();
  EXPECT_TRUE(sw.all_dark());
  EXPECT_EQ(gpu.Ref(a).arena, 0u);
  EXPECT_EQ(gpu.Ref(b).epoch, 8u);
  // The reference is current: the next light writes `arena` alone.
  EXPECT_EQ(Light(one, s1), ModuleSwitch::Lit::kNow);
  EXPECT_EQ(references, 2);  // the callback is asked, its reference not written
  EXPECT_EQ(gpu.Ref(a).epoch, 8u);
  // A new chunk size: the whole reference again.
  sw.EndGeneration();
  sw.ReferencesChanged();
  ref.chunk_shift = 8;
  EXPECT_EQ(Light(one, s1), ModuleSwitch::Lit::kNow);
  EXPECT_EQ(gpu.Ref(a).chunk_shift, 8u);
}

// A segment switch on s1 while kernels are queued there: the next segment's
// reference reaches every module in s1's order (a kernel queued before still
// sees the old one when it runs); a light behind it on s1 publishes a new
// size in the same order, nothing at once; once s1 has run past the switch,
// a light on s2 goes ahead.
void ModuleSwitchTest::ExpectASwitchInTheOrderOf(GpuStream on) {
  constexpr uint64_t kNextArena = 0xA800;
  GpuModule a, b;
  ModuleSwitch::Module* one = Add(&a);
  ModuleSwitch::Module* two = Add(&b);
  ASSERT_EQ(Light(one, on), ModuleSwitch::Lit::kNow);
  EXPECT_TRUE(sw.OnlyOn(on));
  EXPECT_FALSE(sw.OnlyOn(s2));
  gpu.Hold(on);
  wire::ArenaRef next = ref;
  next.chunks = 0xC000;
  next.epoch = 8;
  *dark_ref = next;
  GpuEvent switched = nullptr;
  ASSERT_TRUE(gpu.CreateEvent(&switched));
  ASSERT_TRUE(sw.SwitchInStreamOrder(sw.DropGone([](GpuModule, DevPtr) { return true; }), dark_ref, on, switched));
  sw.EndGeneration();
  EXPECT_TRUE(sw.switch_pending());
  EXPECT_TRUE(sw.all_dark());
  EXPECT_EQ(gpu.Ref(a).arena, kArena);  // not before on gets there
  EXPECT_EQ(gpu.Ref(a).epoch, 7u);
  // A new size for the next segment, lit behind the switch on on.
  sw.ReferencesChanged();
  next.chunk_shift = 8;
  ref = next;
  *dark_ref = next;
  words[0] = kNextArena;
  ASSERT_EQ(Light(one, on), ModuleSwitch::Lit::kNow);
  EXPECT_EQ(gpu.Ref(a).arena, kArena);
  EXPECT_EQ(gpu.Ref(a).chunk_shift, 10u);
  gpu.Release(on);
  EXPECT_EQ(gpu.Ref(a).arena, kNextArena);
  EXPECT_EQ(gpu.Ref(a).chunk_shift, 8u);
  EXPECT_EQ(gpu.Ref(a).epoch, 8u);
  EXPECT_EQ(gpu.Ref(b).arena, 0u);
  EXPECT_EQ(gpu.Ref(b).chunks, 0xC000u);
  EXPECT_TRUE(sw.switch_pending());
  ASSERT_EQ(Light(two, s2), ModuleSwitch::Lit::kNow);  // the switch has passed: no wait
  EXPECT_FALSE(sw.switch_pending());
  EXPECT_EQ(gpu.Ref(b).arena, kNextArena);
  gpu.DestroyEvent(switched);
}

TEST_F(ModuleSwitchTest, ASwitchReachesEveryModuleInItsStreamsOrder) { ExpectASwitchInTheOrderOf(s1); }

// The legacy default stream's handle is null: a switch there is pending all
// the same, and a new size behind it waits in its order too.
TEST_F(ModuleSwitchTest, ASwitchOnTheLegacyStreamReachesEveryModuleInItsOrder) { ExpectASwitchInTheOrderOf(nullptr); }

TEST_F(ModuleSwitchTest, UnloadedModulesAreForgottenOnceAnUnloadWasSeen) {
  GpuModule a, b;
  ModuleSwitch::Module* gone = Add(&a);
  Add(&b);
  ASSERT_EQ(Light(gone, s1), ModuleSwitch::Lit::kNow);
  const auto still_there = [&](GpuModule module, DevPtr) { return module != a; };
  sw.MayBeStale();
  std::vector<ModuleSwitch::Module*> modules = sw.DropGone(still_there);
  ASSERT_EQ(modules.size(), 1u);
  EXPECT_NE(modules[0], gone);
  EXPECT_TRUE(sw.all_dark());  // the lit one went with it
  // Checked once per unload.
  EXPECT_EQ(sw.DropGone([](GpuModule, DevPtr) { return false; }).size(), 1u);
}

}  // namespace
}  // namespace smprof::injector
