// Where smprof-run looks for its helpers: build tree and install tree, default
// and non-default install directories, install-tree paths first.
#include "runner/install_layout.h"

#include <gtest/gtest.h>

namespace smprof::runner {
namespace {

using Paths = std::vector<std::string>;

const InstallDirs kDefault{"bin", "libexec/smprof", "lib/smprof"};

TEST(InstallLayoutTest, BuildTreeHelpersComeAfterTheInstallTreePaths) {
  const std::string bin = "/home/u/smprof/build/bin";
  EXPECT_EQ(CollectorCandidates(bin, kDefault),
            (Paths{"/home/u/smprof/build/libexec/smprof/smprof-collector", "/home/u/smprof/build/bin/smprof-collector"}));
  EXPECT_EQ(InjectorCandidates(bin, kDefault),
            (Paths{"/home/u/smprof/build/lib/smprof/libsmprof_inject.so", "/home/u/smprof/build/lib/libsmprof_inject.so"}));
  EXPECT_EQ(PreloadCandidates(bin, kDefault), (Paths{"/home/u/smprof/build/lib/smprof/libsmprof_preload.so",
                                                     "/home/u/smprof/build/lib/libsmprof_preload.so"}));
}

TEST(InstallLayoutTest, InstallTreeUnderThePrefixThatHoldsSmprofRun) {
  EXPECT_EQ(CollectorCandidates("/opt/smprof/bin", kDefault).front(), "/opt/smprof/libexec/smprof/smprof-collector");
  EXPECT_EQ(InjectorCandidates("/opt/smprof/bin", kDefault).front(), "/opt/smprof/lib/smprof/libsmprof_inject.so");
  EXPECT_EQ(PreloadCandidates("/opt/smprof/bin", kDefault).front(), "/opt/smprof/lib/smprof/libsmprof_preload.so");
}

TEST(InstallLayoutTest, NonDefaultLibdirAndLibexecdir) {
  const InstallDirs lib64{"bin", "lib64/smprof-helpers", "lib64/smprof"};
  EXPECT_EQ(CollectorCandidates("/usr/local/bin", lib64).front(), "/usr/local/lib64/smprof-helpers/smprof-collector");
  EXPECT_EQ(InjectorCandidates("/usr/local/bin", lib64).front(), "/usr/local/lib64/smprof/libsmprof_inject.so");

  const InstallDirs multiarch{"bin", "libexec/smprof", "lib/x86_64-linux-gnu/smprof"};
  EXPECT_EQ(PreloadCandidates("/usr/bin", multiarch).front(), "/usr/lib/x86_64-linux-gnu/smprof/libsmprof_preload.so");
}

TEST(InstallLayoutTest, NestedBindirClimbsOneLevelPerComponent) {
  const InstallDirs nested{"./tools//bin/", "libexec/smprof", "lib/smprof"};
  EXPECT_EQ(CollectorCandidates("/opt/x/tools/bin", nested).front(), "/opt/x/libexec/smprof/smprof-collector");
  EXPECT_EQ(InjectorCandidates("/opt/x/tools/bin/", nested).front(), "/opt/x/lib/smprof/libsmprof_inject.so");
}

TEST(InstallLayoutTest, PrefixAtTheRootHasNoDoubleSlash) {
  EXPECT_EQ(CollectorCandidates("/bin", kDefault), (Paths{"/libexec/smprof/smprof-collector", "/bin/smprof-collector"}));
  EXPECT_EQ(InjectorCandidates("/bin", kDefault), (Paths{"/lib/smprof/libsmprof_inject.so", "/lib/libsmprof_inject.so"}));
}

TEST(InstallLayoutTest, AbsoluteHelperDirsAreUsedAsTheyAre) {
  const InstallDirs absolute{"bin", "/usr/libexec/smprof/", "/usr/lib64/smprof"};
  EXPECT_EQ(CollectorCandidates("/opt/smprof/bin", absolute),
            (Paths{"/usr/libexec/smprof/smprof-collector", "/opt/smprof/bin/smprof-collector"}));
  EXPECT_EQ(InjectorCandidates("/opt/smprof/bin", absolute),
            (Paths{"/usr/lib64/smprof/libsmprof_inject.so", "/opt/smprof/lib/libsmprof_inject.so"}));
}

TEST(InstallLayoutTest, AbsoluteBindirLeavesOnlyTheBuildTreeForRelativeHelperDirs) {
  const InstallDirs absolute_bin{"/usr/bin", "libexec/smprof", "/usr/lib/smprof"};
  EXPECT_EQ(CollectorCandidates("/usr/bin", absolute_bin), (Paths{"/usr/bin/smprof-collector"}));
  EXPECT_EQ(InjectorCandidates("/usr/bin", absolute_bin),
            (Paths{"/usr/lib/smprof/libsmprof_inject.so", "/usr/lib/libsmprof_inject.so"}));
}

TEST(InstallLayoutTest, ConfiguredDirsAreThoseCMakeInstallsTo) {
  const InstallDirs configured = ConfiguredInstallDirs();
  EXPECT_EQ(configured.bindir, SMPROF_TEST_INSTALL_BINDIR);
  EXPECT_EQ(configured.helper_execdir, SMPROF_TEST_INSTALL_HELPER_EXECDIR);
  EXPECT_EQ(configured.helper_libdir, SMPROF_TEST_INSTALL_HELPER_LIBDIR);
  // The default argument is the configured layout.
  EXPECT_EQ(CollectorCandidates("/p/bin"), CollectorCandidates("/p/bin", configured));
}

}  // namespace
}  // namespace smprof::runner
