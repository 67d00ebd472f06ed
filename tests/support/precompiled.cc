// The translation unit that builds the test drivers' precompiled header
// (tests/CMakeLists.txt: smprof_test_pch, linked with gtest's main); it has
// no code of its own.
